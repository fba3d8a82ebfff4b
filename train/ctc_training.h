// What training with train.loss ctc adds to the Trainer (train/trainer.h): the CTC loss of a
// batch, the chunks a batch's attention sees in dynamic chunk training, and the evaluation of a
// transcribed dataset by word and character error rates (decoding/error_rate.h, jiwer's
// definitions) with the model's own search.
#pragma once

#include <attnzoo/api/ctc_search.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/decoding/error_rate.h>
#include <attnzoo/decoding/tokenizer.h>
#include <attnzoo/train/data.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace attnzoo {

// The mean over the batch of each utterance's CTC loss, -log P(transcript | audio) (torch's
// ctc_loss summed over the utterance's tokens, not divided by its length: WeNet's normalisation,
// by the batch). log_probs [B, T', V] with their lengths [B] (a family's forward, "logits" and
// "lengths"); the batch's targets. Throws DatasetError naming the file of an utterance whose
// encoder frames are too few for its transcript (a CTC alignment needs a frame per token and one
// more between repeated tokens).
torch::Tensor ctc_batch_loss(const torch::Tensor& log_probs, const torch::Tensor& lengths,
                             const Batch& batch, const LabelledDataset& dataset, int64_t blank);

// Dynamic chunk training (configs/train_config.h, train.dynamic_chunk): the attention chunks of
// one batch of `frames` encoder frames, from `rng`. With probability full_context_prob the whole
// utterance (chunk 0); else a chunk size uniform in 1 .. max_chunk, and all earlier chunks or,
// with random_left_chunks, a number of them uniform in 0 .. (frames - 1) / chunk.
struct DynamicChunkOptions {
  int64_t max_chunk = 25;
  double full_context_prob = 0.5;
  bool random_left_chunks = false;
};
StreamingConfig draw_attention_chunks(const DynamicChunkOptions& options, int64_t frames,
                                      std::mt19937_64& rng);

struct TranscribedUtterance {
  std::string audio;
  std::string reference;   // the transcript as its tokens give it back (Tokenizer::decode)
  std::string hypothesis;  // the best hypothesis of the model's search
  decoding::EditCounts words, characters;
};

struct CtcEvalResult {
  int64_t examples = 0;
  double loss = 0.0;  // mean CTC loss per utterance (ctc_batch_loss)
  decoding::EditCounts words, characters;
  std::vector<TranscribedUtterance> utterances;  // in the dataset's order
  double wer() const { return words.rate(); }
  double cer() const { return characters.rate(); }
};

// The model (eval mode, no gradients) on every utterance of a transcribed dataset, under the
// config's streaming chunk mask when it has one, each decoded by `search` (and, with
// decoding.mode attention_rescoring, its beam ranked again by the model's attention decoder, as
// SpeechRecognizer does) and scored against its transcript.
CtcEvalResult evaluate_ctc(ZooModel& model, const LabelledDataset& dataset,
                           const decoding::Tokenizer& tokenizer, const CtcSearchSettings& search,
                           int64_t batch_size, int64_t workers,
                           const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace attnzoo
