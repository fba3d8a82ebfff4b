#include <attnzoo/train/ctc_training.h>

#include <attnzoo/models/conformer.h>
#include <attnzoo/preprocess/image/augment.h>
#include <attnzoo/train/trainer.h>

#include <torch/torch.h>

#include <cmath>
#include <utility>

namespace attnzoo {
namespace {

// The fewest frames a CTC alignment of `tokens` needs: one per token, one more per repeat.
int64_t frames_needed(const std::vector<int64_t>& tokens) {
  int64_t n = static_cast<int64_t>(tokens.size());
  for (size_t i = 1; i < tokens.size(); ++i) n += tokens[i] == tokens[i - 1];
  return n;
}

}  // namespace

torch::Tensor ctc_batch_loss(const torch::Tensor& log_probs, const torch::Tensor& lengths,
                             const Batch& batch, const LabelledDataset& dataset, int64_t blank) {
  TORCH_CHECK_VALUE(batch.targets.defined(), "ctc_batch_loss: the batch has no targets (",
                    dataset.source, " is not a transcribed dataset)");
  const auto frames = lengths.to(torch::kCPU);
  for (int64_t i = 0; i < frames.size(0); ++i) {
    const auto& example = dataset.examples[static_cast<size_t>(batch.indices[i].item<int64_t>())];
    const int64_t needed = frames_needed(example.tokens), have = frames[i].item<int64_t>();
    if (have < needed) {
      throw DatasetError(example.path + ": " + std::to_string(have) +
                         " encoder frames cannot hold its transcript of " +
                         std::to_string(example.tokens.size()) + " tokens (a CTC alignment needs " +
                         std::to_string(needed) + "); drop it or shorten the transcript");
    }
  }
  const auto device = log_probs.device();
  const auto per_utterance = torch::ctc_loss(
      log_probs.to(torch::kFloat).transpose(0, 1), batch.targets.to(device), lengths.to(device),
      batch.target_lengths.to(device), blank, at::Reduction::None, /*zero_infinity=*/false);
  return per_utterance.mean();
}

StreamingConfig draw_attention_chunks(const DynamicChunkOptions& options, int64_t frames,
                                      std::mt19937_64& rng) {
  StreamingConfig chunks;
  if (options.max_chunk <= 0 || uniform(rng, 0.0, 1.0) < options.full_context_prob) return chunks;
  chunks.chunk_size = random_int(rng, 1, options.max_chunk + 1);
  chunks.num_left_chunks = -1;
  if (options.random_left_chunks) {
    chunks.num_left_chunks =
        random_int(rng, 0, std::max<int64_t>(frames - 1, 0) / chunks.chunk_size + 1);
  }
  return chunks;
}

CtcEvalResult evaluate_ctc(ZooModel& model, const LabelledDataset& dataset,
                           const decoding::Tokenizer& tokenizer, const CtcSearchSettings& search,
                           int64_t batch_size, int64_t workers,
                           const std::function<void(int64_t, int64_t)>& progress) {
  const bool was_training = model.module->is_training();
  model.module->eval();
  EpochLoader loader(dataset, example_loader(model.config, nullptr),
                     evaluation_loader_options(batch_size, workers, /*pad=*/true), 0);
  const auto device = model.module->parameters().front().device();
  const auto dtype = model.module->parameters().front().scalar_type();
  CtcEvalResult r;
  double loss_sum = 0.0;
  torch::NoGradGuard no_grad;
  // decoding.mode attention_rescoring: the beam ranked again by the model's attention decoder.
  const auto& settings = model.config.decoding;
  auto* conformer = model.module->as<ConformerEncoderImpl>();
  const bool rescoring = settings.mode == decoding::DecodingMode::kAttentionRescoring;
  TORCH_CHECK_VALUE(!rescoring || (conformer && conformer->decoder),
                    "evaluate_ctc: ", model.config.source,
                    ": decoding.mode attention_rescoring needs an attention decoder "
                    "(architecture.decoder)");
  while (auto batch = loader.next()) {
    torch::Tensor log_probs, lengths, encoded;
    for (const auto& [name, value] :
         model.forward({batch->inputs.to(device, dtype), batch->lengths.to(device)})) {
      if (name == "logits") log_probs = value.to(torch::kFloat);  // the loss in float32
      if (name == "lengths") lengths = value;
      if (name == "encoded") encoded = value;
    }
    const int64_t count = batch->indices.size(0);
    loss_sum +=
        ctc_batch_loss(log_probs, lengths, *batch, dataset, search.beam.blank_id).item<double>() *
        static_cast<double>(count);
    const auto frames = lengths.to(torch::kCPU);
    const auto cpu = log_probs.to(torch::kCPU, torch::kFloat);
    for (int64_t i = 0; i < count; ++i) {
      const auto& example =
          dataset.examples[static_cast<size_t>(batch->indices[i].item<int64_t>())];
      const auto valid = frames[i].item<int64_t>();
      CtcSearcher searcher(search);
      searcher.advance(cpu[i].narrow(0, 0, valid));
      auto found = searcher.hypotheses();
      if (rescoring && !found.empty()) {
        std::vector<std::vector<int64_t>> tokens;
        for (const auto& h : found) tokens.push_back(h.tokens);
        const auto scores = conformer->decoder->score(encoded[i].narrow(0, 0, valid), tokens,
                                                      settings.rescoring.reverse_weight);
        found = rank_by_rescoring(found, scores, settings.rescoring, 1);
      }
      TranscribedUtterance u;
      u.audio = example.path;
      u.reference = tokenizer.decode(example.tokens);
      u.hypothesis = tokenizer.decode(found.front().tokens);
      u.words = decoding::word_errors(u.reference, u.hypothesis);
      u.characters = decoding::character_errors(u.reference, u.hypothesis);
      r.words += u.words;
      r.characters += u.characters;
      r.utterances.push_back(std::move(u));
    }
    r.examples += count;
    if (progress) progress(r.examples, static_cast<int64_t>(dataset.examples.size()));
  }
  if (was_training) model.module->train();
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(r.examples, 1));
  return r;
}

}  // namespace attnzoo
