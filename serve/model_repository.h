// A model repository for `attnzoo serve --model-repository DIR`, in the layout and with the
// calls of Triton's model repository extension: every folder of DIR is a model, named by the
// folder, and models are loaded, reloaded and unloaded while the server serves.
//
//   DIR/digits/serve.yaml     a serve entry (serve_config.h load_repository_entry): the model
//   DIR/digits/model.yaml       YAML and its weights, batching, instances, task, ... with paths
//   DIR/digits/weights.safetensors   relative to the folder
//   DIR/vit-small/            no serve.yaml: the folder is a model source (a Hugging Face,
//                               timm, WeNet or ESPnet folder) with the serve entry's defaults
//   DIR/asr/model.nemo        no serve.yaml, one .nemo or .zip file: that file (NeMo, ESPnet)
//
// Calls (HTTP routes in inference_server.h, and the gRPC service's Repository* calls):
//   index    every folder, with its state: READY, LOADING, UNLOADING or UNAVAILABLE (and why:
//            "unloaded", or the error of its last load)
//   load     loads the folder's model as it is now; a model already served is replaced only once
//            the new one has loaded, and requests go on being answered meanwhile (no 503); a load
//            that fails leaves the model as it was (serving the old one, the error in the
//            index's reason) and is answered 400 with the error
//   unload   stops serving the model: queued requests are answered, then its memory is freed
//
// Calls run one at a time, in order, on a thread of the repository (a load takes seconds; the
// HTTP and gRPC threads are never held).
#pragma once

#include <attnzoo/configs/serve_config.h>
#include <attnzoo/serve/inference_server.h>
#include <attnzoo/serve/task_pool.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace attnzoo::serve {

class ModelRepository : public RepositoryControl {
 public:
  // `defaults`: the server's config (the models' shared `threads`, the source name in errors);
  // its `models` are not read. Nothing is loaded yet. Throws std::invalid_argument when `folder`
  // is not a directory.
  ModelRepository(std::string folder, ServeConfig defaults, InferenceServer& server);
  ~ModelRepository() override;  // waits for the calls in progress

  // Loads every model of the folder, on the calling thread; the first error is thrown, naming
  // the model's folder.
  void load_all();

  std::vector<Entry> index() const override;
  void load(const std::string& name, std::function<void(Refusal)> done) override;
  void unload(const std::string& name, std::function<void(Refusal)> done) override;

  // The endpoint a folder serves (load without installing it): std::invalid_argument or
  // ConfigError naming the folder and what is wrong.
  ModelEndpoint read(const std::string& name) const;

 private:
  struct State {
    std::string state;  // as index() says
    std::string reason;
  };
  // Refusal 400 unless `name` is a folder of the repository.
  Refusal check_name(const std::string& name) const;
  void set_state(const std::string& name, std::string state, std::string reason);
  Refusal load_now(const std::string& name);

  std::string folder_;
  ServeConfig defaults_;
  InferenceServer& server_;
  mutable std::mutex mutex_;
  std::map<std::string, State> states_;
  TaskPool calls_;  // last: it stops (running what is queued) before the rest goes
};

}  // namespace attnzoo::serve
