#include <attnzoo/serve/model_repository.h>

#include <attnzoo/api/intra_op_threads.h>
#include <attnzoo/serve/endpoints.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace attnzoo::serve {
namespace {

namespace fs = std::filesystem;

// The single .nemo or .zip file of a folder, else empty.
std::string archive_of(const fs::path& folder) {
  std::string found;
  int count = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const auto extension = entry.path().extension().string();
    if (entry.is_regular_file() && (extension == ".nemo" || extension == ".zip")) {
      found = entry.path().string();
      ++count;
    }
  }
  return count == 1 ? found : std::string();
}

// The names of the folders in `folder`, sorted: the repository's models.
std::vector<std::string> folder_names(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

ModelRepository::ModelRepository(std::string folder, ServeConfig defaults, InferenceServer& server)
    : folder_(std::move(folder)),
      defaults_(std::move(defaults)),
      server_(server),
      // One call at a time, on a thread whose ops start no OpenMP team that would outlive the
      // load (api/intra_op_threads.h); the loaded model's instances have their own threads.
      calls_(1, use_one_intra_op_thread) {
  std::error_code error;
  if (!fs::is_directory(folder_, error)) {
    throw std::invalid_argument("--model-repository '" + folder_ + "' is not a directory");
  }
  defaults_.models.clear();
}

ModelRepository::~ModelRepository() { calls_.stop(); }

Refusal ModelRepository::check_name(const std::string& name) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return {400, "'" + name + "' is not a model name (a folder of the model repository)"};
  }
  std::error_code error;
  if (!fs::is_directory(fs::path(folder_) / name, error)) {
    return {400, "model repository '" + folder_ + "' has no model '" + name + "' (no folder " +
                     name + "/)"};
  }
  return {};
}

ModelEndpoint ModelRepository::read(const std::string& name) const {
  const auto folder = fs::path(folder_) / name;
  ServedModelConfig m;
  const auto entry = folder / "serve.yaml";
  std::error_code error;
  if (fs::is_regular_file(entry, error)) {
    m = load_repository_entry(entry.string(), name);
  } else {
    m.name = name;
    const auto archive = archive_of(folder);
    m.model = archive.empty() ? folder.string() + "/" : archive;
  }
  ServeConfig config = defaults_;
  config.source = "model repository '" + folder_ + "'";
  return load_endpoint(m, config);
}

void ModelRepository::set_state(const std::string& name, std::string state, std::string reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  states_[name] = {std::move(state), std::move(reason)};
}

Refusal ModelRepository::load_now(const std::string& name) {
  const auto names = server_.model_names();
  const bool serving = std::find(names.begin(), names.end(), name) != names.end();
  if (!serving) set_state(name, "LOADING", "");
  try {
    server_.install(read(name));
  } catch (const c10::Error& e) {
    const std::string why = e.what_without_backtrace();
    set_state(name, serving ? "READY" : "UNAVAILABLE", "the last load failed: " + why);
    return {400, "failed to load '" + name + "': " + why};
  } catch (const std::exception& e) {
    set_state(name, serving ? "READY" : "UNAVAILABLE",
              std::string("the last load failed: ") + e.what());
    return {400, "failed to load '" + name + "': " + e.what()};
  }
  set_state(name, "READY", "");
  return {};
}

void ModelRepository::load_all() {
  for (const auto& name : folder_names(folder_)) {
    if (const auto refusal = load_now(name); refusal.status != 0) {
      throw std::invalid_argument("model repository '" + folder_ + "': " + refusal.message);
    }
  }
}

std::vector<RepositoryControl::Entry> ModelRepository::index() const {
  const auto names = folder_names(folder_);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> entries;
  for (const auto& name : names) {
    Entry entry{name, "", "UNAVAILABLE", "unloaded"};
    if (const auto state = states_.find(name); state != states_.end()) {
      entry.state = state->second.state;
      entry.reason = state->second.reason;
    }
    ModelMetadata metadata;
    Refusal refusal;
    if (entry.state == "READY" && server_.model_metadata(name, "", metadata, refusal)) {
      entry.version = metadata.version;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

void ModelRepository::load(const std::string& name, std::function<void(Refusal)> done) {
  if (auto refusal = check_name(name); refusal.status != 0) return done(std::move(refusal));
  if (!calls_.submit([this, name, done] { done(load_now(name)); })) {
    done({503, "the server is shutting down"});
  }
}

void ModelRepository::unload(const std::string& name, std::function<void(Refusal)> done) {
  if (auto refusal = check_name(name); refusal.status != 0) return done(std::move(refusal));
  const bool queued = calls_.submit([this, name, done] {
    set_state(name, "UNLOADING", "");
    server_.remove(name);
    set_state(name, "UNAVAILABLE", "unloaded");
    done({});
  });
  if (!queued) done({503, "the server is shutting down"});
}

}  // namespace attnzoo::serve
