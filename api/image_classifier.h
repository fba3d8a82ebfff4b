// Image classification in one object: a model of the zoo (or any YAML config), its weights, the
// config's eval transform and its labels.
//
//   attnzoo::ImageClassifierOptions options;
//   options.weights = "vit_base.safetensors";   // or a .pth, or none for a model folder's own
//   attnzoo::ImageClassifier classifier("vit_base_patch16_224", options);
//   for (const auto& p : classifier.classify("cat.jpg", 5))
//     std::cout << p.label << " " << p.probability << "\n";
//
// Inference runs under torch::InferenceMode on a model in eval mode, which nothing mutates: one
// classifier may be used from several threads at once (tested with 4), each call computing what a
// serial call computes. Errors are exceptions naming the file, option or key: ImageError (from
// preprocess/) for images, ConfigError for configs, CheckpointError for weights, c10::Error for
// options.
#pragma once

#include <attnzoo/api/prediction.h>
#include <attnzoo/configs/model_config.h>
#include <attnzoo/configs/model_options.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/preprocess/image/transform.h>

#include <torch/types.h>
#include <opencv2/core/mat.hpp>

#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

// The model's weights, overrides, device, dtype and threads (api/model_options.h), and:
struct ImageClassifierOptions : ModelOptions {
  int64_t batch_size = 8;  // images per forward pass in classify(paths)
  // On CUDA: each batch shape's forward is recorded once as a CUDA graph (models/cuda_graph.h) and
  // replayed after, which removes the per-kernel launch cost (large at batch 1). The first call at
  // a new shape pays for the recording. Refused on the CPU.
  bool cuda_graph = false;
  ImageDecodeOptions decode;
};

// One image of classify(paths): its predictions, or the error that stopped it.
struct ImageResult {
  std::string image;
  std::vector<Prediction> top;
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
};

// The order of the channels of a cv::Mat given to classify.
enum class ChannelOrder { kBGR, kRGB };

class ImageClassifier {
 public:
  // `model`: a registered name, a YAML file or a model folder (a Hugging Face or timm folder:
  // configs/registry.h resolve_model_config). The config must be a vision classifier (family
  // vit, num_classes > 0).
  explicit ImageClassifier(const std::string& model, ImageClassifierOptions options = {});
  ~ImageClassifier();
  ImageClassifier(ImageClassifier&&) noexcept;
  ImageClassifier& operator=(ImageClassifier&&) noexcept;

  // The top `topk` classes (1 <= topk <= classes; larger values are clamped), most probable first.
  std::vector<Prediction> classify(const std::string& path, int64_t topk = 5) const;
  // image: 8-bit, 1 (gray), 3 or 4 channels (alpha dropped), as cv::imread gives (kBGR).
  std::vector<Prediction> classify(const cv::Mat& image, int64_t topk = 5,
                                   ChannelOrder order = ChannelOrder::kBGR) const;
  // Every image, in batches of options.batch_size; an image that fails gets its error and the
  // others are still classified.
  std::vector<ImageResult> classify(const std::vector<std::string>& paths, int64_t topk = 5) const;

  // The model on prepared pixels [N, 3, H, W] (any device and dtype) -> logits [N, classes],
  // float32 on the CPU.
  torch::Tensor logits(const torch::Tensor& pixels) const;
  // The eval transform of one decoded RGB image -> [3, H, W] float32.
  torch::Tensor preprocess(const cv::Mat& rgb) const;

  const ModelConfig& config() const;
  // The dtype the model runs in: the options' dtype, else the config's inference.dtype resolved
  // (api/inference_dtype.h).
  c10::ScalarType dtype() const;
  const std::vector<std::string>& labels() const;  // one per class; empty if none configured
  const std::string& weights_description() const;  // e.g. "vit.safetensors (timm layout, detected)"

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo
