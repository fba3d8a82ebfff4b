#include <attnzoo/api/model_tokenizer.h>

#include <attnzoo/configs/model_family.h>

#include <c10/util/Exception.h>

#include <memory>

namespace attnzoo {

decoding::Tokenizer model_tokenizer(const ModelConfig& config) {
  const int64_t vocab = model_family(config.family).ctc_vocab(config);
  TORCH_CHECK_VALUE(vocab > 0, config.source, ": model ", config.name,
                    " has no CTC head (architecture.vocab_size is 0)");
  const auto& d = config.decoding;
  TORCH_CHECK_VALUE(d.defined(), config.source, ": model ", config.name,
                    " has no token table: add decoding.units to its YAML, or give one "
                    "(--units FILE, SpeechRecognizerOptions::units)");
  std::shared_ptr<const decoding::SentencePieceModel> sentencepiece;
  if (!d.sentencepiece_model.empty()) {
    sentencepiece = std::make_shared<const decoding::SentencePieceModel>(d.sentencepiece_model);
  }
  return {decoding::Units::read(d.units, d.units_format, vocab), d.text, std::move(sentencepiece)};
}

}  // namespace attnzoo
