// Training data: labelled datasets (an image folder with one subfolder per class, a list file
// of "PATH LABEL" lines for images or audio, or of "PATH<TAB>TRANSCRIPT" lines for CTC) and a
// loader that prepares batches on worker threads ahead of the training loop.
//
// Reproducible whatever the number of workers: the order of an epoch is a shuffle seeded by
// (seed, epoch), and each example's augmentation draws from a generator seeded by (seed, epoch,
// position in the epoch). So a run resumed at batch k of epoch e sees exactly the batches the
// uninterrupted run saw (EpochLoader's start_batch).
#pragma once

#include <attnzoo/core/error.h>
#include <attnzoo/decoding/tokenizer.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attnzoo {

struct LabelledExample {
  LabelledExample() = default;
  LabelledExample(std::string path, int64_t label, std::vector<int64_t> tokens = {})
      : path(std::move(path)), label(label), tokens(std::move(tokens)) {}

  std::string path;
  int64_t label = 0;            // a class (0 for a transcribed example)
  std::vector<int64_t> tokens;  // a transcribed example's token ids
};

// A training folder or list file that cannot be used; the message names it (and the line).
class DatasetError : public Error {
 public:
  using Error::Error;
};

struct LabelledDataset {
  std::string source;                // the folder or list file
  std::vector<std::string> classes;  // label i is classes[i]; empty when transcribed
  std::vector<LabelledExample> examples;
  bool transcribed = false;  // the examples carry token sequences (CTC), not classes
};

// One subfolder per class; the files directly inside each (hidden files skipped) are its
// examples, in name order. `classes` empty: the sorted subfolder names; else those names in that
// order (a subfolder not among them is an error, a class without a subfolder has no examples).
// Throws DatasetError naming the folder: missing, no class subfolders, no files.
LabelledDataset image_folder_dataset(const std::string& folder,
                                     const std::vector<std::string>& classes = {});

// A text file of "PATH LABEL" lines: the label is the last whitespace-separated word, the path the
// rest of the line (relative paths from the list's folder); blank lines and '#' comments are
// skipped. `classes` empty: the sorted distinct labels; else a label outside them is an error.
// DatasetErrors name the file and line.
LabelledDataset list_dataset(const std::string& list_file,
                             const std::vector<std::string>& classes = {});

// A text file of "PATH<TAB>TRANSCRIPT" lines (WeNet's and Kaldi's text files with the path first;
// paths relative to the list's folder; blank lines and '#' comments skipped), each transcript
// tokenized by `tokenizer` (an empty one is silence). DatasetErrors name the file and line: no
// tab, a transcript with a token the table lacks (and no <unk>).
LabelledDataset transcript_list_dataset(const std::string& list_file,
                                        const decoding::Tokenizer& tokenizer);

// A batch: inputs [B, ...] float32 (images [B, 3, H, W]; audio features [B, T, F] zero-padded
// with lengths [B]), labels [B] and the examples' positions in the dataset [B] (int64).
// A transcribed dataset's batch has its token ids too: targets [B, max L] int64 (zero-padded)
// and target_lengths [B].
struct Batch {
  torch::Tensor inputs;
  torch::Tensor lengths;  // audio only (undefined for images)
  torch::Tensor labels;
  torch::Tensor indices;
  torch::Tensor targets;         // transcribed only
  torch::Tensor target_lengths;  // transcribed only
};

// Prepares one example's input ([3, H, W] image, or [T, F] features), drawing any randomness from
// `rng`. Called on worker threads, concurrently: it must be thread-safe. Errors should name the
// file.
using ExampleLoader = std::function<torch::Tensor(const LabelledExample&, std::mt19937_64& rng)>;

struct LoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = true;  // training: only full batches
  bool pad = false;       // audio: pad [T_i, F] to [B, max T, F] with lengths
  uint64_t seed = 0;
  int64_t workers = 2;   // 0: prepared on the calling thread when asked for
  int64_t prefetch = 4;  // batches in flight ahead of the consumer
  // Data-parallel: this process loads rows [shard · n, (shard + 1) · n) of every batch of
  // batch_size = shards · n, the order and each example's generator being those of the whole
  // batch (so the ranks together see what one process would).
  int64_t shard = 0;
  int64_t shards = 1;
};

int64_t batches_per_epoch(int64_t examples, int64_t batch_size, bool drop_last);

// An evaluation's loading: every example once, in order, the last batch as it comes.
LoaderOptions evaluation_loader_options(int64_t batch_size, int64_t workers, bool pad);

// The order of epoch `epoch`: a permutation of [0, n) (the identity without shuffle).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// The batches of one epoch, from batch `start_batch` on, in order.
class EpochLoader {
 public:
  EpochLoader(const LabelledDataset& dataset, ExampleLoader loader, LoaderOptions options,
              int64_t epoch, int64_t start_batch = 0);
  ~EpochLoader();  // stops the workers (batches not taken are dropped)
  EpochLoader(const EpochLoader&) = delete;
  EpochLoader& operator=(const EpochLoader&) = delete;

  int64_t num_batches() const;
  // The next batch, or nullopt after the last. Rethrows the first error of a worker (which names
  // the file) and stops.
  std::optional<Batch> next();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace attnzoo
