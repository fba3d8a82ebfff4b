#include <attnzoo/api/model_tokenizer.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/io/archive_entry.h>

#include <c10/util/Exception.h>

#include <memory>

namespace attnzoo {

decoding::Tokenizer model_tokenizer(const ModelConfig& config) {
  const int64_t vocab = model_family(config.family).token_vocab(config);
  TORCH_CHECK_VALUE(vocab > 0, config.source, ": model ", config.name,
                    " has no CTC or transducer head (architecture.vocab_size is 0)");
  const auto& d = config.decoding;
  TORCH_CHECK_VALUE(
      d.defined(), config.source, ": model ", config.name,
      " has no token table: add decoding.units to its YAML, or give one "
      "(--units FILE, SpeechRecognizerOptions::units), or list it as decoding.tokens");
  std::shared_ptr<const decoding::SentencePieceModel> sentencepiece;
  if (!d.sentencepiece_model.empty()) {
    // A file, or a file inside an archive (a .nemo file's tokenizer: ARCHIVE#ENTRY).
    if (io::split_archive_entry(d.sentencepiece_model)) {
      sentencepiece = std::make_shared<const decoding::SentencePieceModel>(
          decoding::SentencePieceModel::from_bytes(
              io::read_file_or_entry(d.sentencepiece_model, decoding::kMaxSentencePieceModelBytes,
                                     "SentencePiece model"),
              d.sentencepiece_model));
    } else {
      sentencepiece = std::make_shared<const decoding::SentencePieceModel>(d.sentencepiece_model);
    }
  }
  if (d.units.empty()) {
    // decoding.tokens: the inline list, read as an ESPnet token list of one token a line.
    std::string lines;
    for (const auto& token : d.tokens) lines += token + "\n";
    return {decoding::Units::parse_espnet(lines, config.source + ": decoding.tokens", vocab),
            d.text, std::move(sentencepiece)};
  }
  return {decoding::Units::read(d.units, d.units_format, vocab), d.text, std::move(sentencepiece)};
}

}  // namespace attnzoo
