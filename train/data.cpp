#include <attnzoo/train/data.h>

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/core/splitmix64.h>

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

// [low, high) from the generator by rejection (portable, unlike std::uniform_int_distribution).
uint64_t below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

std::vector<std::string> class_order(const std::set<std::string>& found,
                                     const std::vector<std::string>& given,
                                     const std::string& source, const std::string& what) {
  if (given.empty()) return {found.begin(), found.end()};
  std::set<std::string> known(given.begin(), given.end());
  if (known.size() != given.size()) {
    throw DatasetError(source + ": the classes given contain a name twice");
  }
  for (const auto& name : found) {
    if (!known.count(name)) {
      throw DatasetError(source + ": " + what + " '" + name + "' is not one of the classes given");
    }
  }
  return given;
}

}  // namespace

LabelledDataset image_folder_dataset(const std::string& folder,
                                     const std::vector<std::string>& classes) {
  std::error_code error;
  if (!fs::is_directory(folder, error)) {
    throw DatasetError(folder +
                       ": no such folder (an image folder has one subfolder per "
                       "class)");
  }
  std::set<std::string> found;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const auto name = entry.path().filename().string();
    if (entry.is_directory() && !name.empty() && name[0] != '.') found.insert(name);
  }
  if (found.empty()) throw DatasetError(folder + ": no class subfolders");
  LabelledDataset dataset;
  dataset.source = folder;
  dataset.classes = class_order(found, classes, folder, "subfolder");
  for (size_t label = 0; label < dataset.classes.size(); ++label) {
    const auto dir = fs::path(folder) / dataset.classes[label];
    if (!fs::is_directory(dir, error)) continue;
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const auto name = entry.path().filename().string();
      if (entry.is_regular_file() && !name.empty() && name[0] != '.') {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) dataset.examples.push_back({std::move(f), static_cast<int64_t>(label)});
  }
  if (dataset.examples.empty()) throw DatasetError(folder + ": no files in the subfolders");
  return dataset;
}

LabelledDataset list_dataset(const std::string& list_file,
                             const std::vector<std::string>& classes) {
  std::ifstream in(list_file);
  if (!in) throw DatasetError(list_file + ": cannot open the list file");
  const auto base = fs::path(list_file).parent_path();
  std::vector<std::pair<std::string, std::string>> rows;  // path, label
  std::set<std::string> found;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const auto text = trim(line);
    if (text.empty() || text[0] == '#') continue;
    const auto split = text.find_last_of(" \t");
    if (split == std::string::npos) {
      throw DatasetError(list_file + ":" + std::to_string(number) +
                         ": expected 'PATH LABEL', got '" + text + "'");
    }
    const auto label = text.substr(split + 1);
    fs::path path(trim(text.substr(0, split)));
    if (path.is_relative()) path = base / path;
    rows.emplace_back(path.lexically_normal().string(), label);
    found.insert(label);
  }
  if (in.bad()) throw DatasetError(list_file + ": read error");
  if (rows.empty()) throw DatasetError(list_file + ": no examples");
  LabelledDataset dataset;
  dataset.source = list_file;
  dataset.classes = class_order(found, classes, list_file, "label");
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < dataset.classes.size(); ++i) {
    index[dataset.classes[i]] = static_cast<int64_t>(i);
  }
  for (auto& [path, label] : rows) dataset.examples.push_back({std::move(path), index.at(label)});
  return dataset;
}

LabelledDataset transcript_list_dataset(const std::string& list_file,
                                        const decoding::Tokenizer& tokenizer) {
  std::ifstream in(list_file);
  if (!in) throw DatasetError(list_file + ": cannot open the list file");
  const auto base = fs::path(list_file).parent_path();
  LabelledDataset dataset;
  dataset.source = list_file;
  dataset.transcribed = true;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const auto text = trim(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string where = list_file + ":" + std::to_string(number);
    // Found in the line as read: an empty transcript leaves the tab at its end.
    const auto tab = line.find('\t');
    if (tab == std::string::npos) {
      throw DatasetError(where + ": expected 'PATH<TAB>TRANSCRIPT', got '" + text.substr(0, 80) +
                         "'");
    }
    fs::path path(trim(line.substr(0, tab)));
    if (path.empty()) throw DatasetError(where + ": no path before the tab");
    if (path.is_relative()) path = base / path;
    LabelledExample example;
    example.path = path.lexically_normal().string();
    try {
      example.tokens = tokenizer.encode(line.substr(tab + 1), where);
    } catch (const decoding::DecodingError& e) {
      throw DatasetError(e.what());
    }
    dataset.examples.push_back(std::move(example));
  }
  if (in.bad()) throw DatasetError(list_file + ": read error");
  if (dataset.examples.empty()) throw DatasetError(list_file + ": no examples");
  return dataset;
}

LoaderOptions evaluation_loader_options(int64_t batch_size, int64_t workers, bool pad) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = false;
  o.drop_last = false;
  o.pad = pad;
  o.workers = workers;
  return o;
}

int64_t batches_per_epoch(int64_t examples, int64_t batch_size, bool drop_last) {
  return drop_last ? examples / batch_size : (examples + batch_size - 1) / batch_size;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  std::mt19937_64 rng(splitmix64(seed ^ splitmix64(0x5eedULL + static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(below(rng, static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

struct EpochLoader::State {
  const LabelledDataset* dataset = nullptr;
  ExampleLoader loader;
  LoaderOptions options;
  int64_t epoch = 0;
  std::vector<int64_t> order;
  int64_t end = 0;  // batches in the epoch

  std::mutex mutex;
  std::condition_variable changed;
  int64_t next_claim = 0;    // the next batch a worker takes
  int64_t next_deliver = 0;  // the next batch the consumer takes
  std::map<int64_t, Batch> ready;
  std::exception_ptr error;
  bool stop = false;
  std::vector<std::thread> workers;

  Batch make(int64_t b) const {
    torch::NoGradGuard no_grad;
    const int64_t whole = std::min<int64_t>(
        options.batch_size, static_cast<int64_t>(order.size()) - b * options.batch_size);
    const int64_t part = options.batch_size / options.shards;
    const int64_t first = b * options.batch_size + options.shard * part;
    const int64_t count =
        std::max<int64_t>(0, std::min<int64_t>(part, whole - options.shard * part));
    std::vector<torch::Tensor> inputs;
    std::vector<int64_t> labels, indices, lengths, target_lengths;
    int64_t longest_target = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t position = first + k;
      const int64_t index = order[static_cast<size_t>(position)];
      const auto& example = dataset->examples[static_cast<size_t>(index)];
      std::mt19937_64 rng(
          splitmix64(options.seed ^ splitmix64(static_cast<uint64_t>(epoch) * 0x100000001b3ULL ^
                                               splitmix64(static_cast<uint64_t>(position)))));
      auto x = loader(example, rng);
      if (options.pad) lengths.push_back(x.size(0));
      inputs.push_back(std::move(x));
      labels.push_back(example.label);
      indices.push_back(index);
      target_lengths.push_back(static_cast<int64_t>(example.tokens.size()));
      longest_target = std::max(longest_target, target_lengths.back());
    }
    Batch batch;
    if (options.pad) {
      const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
      std::vector<int64_t> shape = inputs[0].sizes().vec();
      shape.insert(shape.begin(), count);
      shape[1] = longest;
      batch.inputs = torch::zeros(shape, inputs[0].options());
      for (int64_t k = 0; k < count; ++k) {
        batch.inputs[k]
            .narrow(0, 0, lengths[static_cast<size_t>(k)])
            .copy_(inputs[static_cast<size_t>(k)]);
      }
      batch.lengths = torch::tensor(lengths, torch::kLong);
    } else {
      batch.inputs = torch::stack(inputs);
    }
    batch.labels = torch::tensor(labels, torch::kLong);
    batch.indices = torch::tensor(indices, torch::kLong);
    if (dataset->transcribed) {
      batch.targets = torch::zeros({count, longest_target}, torch::kLong);
      auto targets = batch.targets.accessor<int64_t, 2>();
      for (int64_t k = 0; k < count; ++k) {
        const auto& tokens =
            dataset->examples[static_cast<size_t>(indices[static_cast<size_t>(k)])].tokens;
        for (size_t j = 0; j < tokens.size(); ++j) targets[k][static_cast<int64_t>(j)] = tokens[j];
      }
      batch.target_lengths = torch::tensor(target_lengths, torch::kLong);
    }
    return batch;
  }

  void work() {
    // Loading threads beside the training loop: their ops stay on them (api/intra_op_threads.h).
    use_one_intra_op_thread();
    while (true) {
      int64_t b = 0;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] {
          return stop || error || next_claim >= end || next_claim < next_deliver + options.prefetch;
        });
        if (stop || error || next_claim >= end) return;
        b = next_claim++;
      }
      try {
        auto batch = make(b);
        std::lock_guard<std::mutex> lock(mutex);
        ready.emplace(b, std::move(batch));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      changed.notify_all();
    }
  }
};

EpochLoader::EpochLoader(const LabelledDataset& dataset, ExampleLoader loader,
                         LoaderOptions options, int64_t epoch, int64_t start_batch)
    : state_(std::make_shared<State>()) {
  TORCH_CHECK_VALUE(options.batch_size >= 1 && options.workers >= 0 && options.prefetch >= 1,
                    "EpochLoader: batch_size and prefetch must be >= 1 and workers >= 0");
  TORCH_CHECK_VALUE(options.shards >= 1 && options.shard >= 0 && options.shard < options.shards &&
                        options.batch_size % options.shards == 0,
                    "EpochLoader: shard ", options.shard, " of ", options.shards,
                    " must divide batch_size ", options.batch_size);
  auto& s = *state_;
  s.dataset = &dataset;
  s.loader = std::move(loader);
  s.options = options;
  s.epoch = epoch;
  const auto n = static_cast<int64_t>(dataset.examples.size());
  s.order = epoch_order(n, options.seed, epoch, options.shuffle);
  s.end = batches_per_epoch(n, options.batch_size, options.drop_last);
  TORCH_CHECK_VALUE(start_batch >= 0 && start_batch <= s.end, "EpochLoader: start_batch ",
                    start_batch, " outside [0, ", s.end, "]");
  s.next_claim = s.next_deliver = start_batch;
  for (int64_t w = 0; w < options.workers; ++w) {
    s.workers.emplace_back([state = state_.get()] { state->work(); });
  }
}

EpochLoader::~EpochLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_all();
  for (auto& worker : state_->workers) worker.join();
}

int64_t EpochLoader::num_batches() const { return state_->end; }

std::optional<Batch> EpochLoader::next() {
  auto& s = *state_;
  if (s.options.workers == 0) {
    if (s.next_deliver >= s.end) return std::nullopt;
    return s.make(s.next_deliver++);
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  s.changed.wait(
      lock, [&] { return s.error || s.next_deliver >= s.end || s.ready.count(s.next_deliver); });
  if (s.error) {
    s.stop = true;
    auto error = s.error;
    lock.unlock();
    s.changed.notify_all();
    std::rethrow_exception(error);
  }
  if (s.next_deliver >= s.end) return std::nullopt;
  auto node = s.ready.extract(s.next_deliver++);
  lock.unlock();
  s.changed.notify_all();
  return std::move(node.mapped());
}

}  // namespace attnzoo
