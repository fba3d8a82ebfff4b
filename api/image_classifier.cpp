#include <attnzoo/api/image_classifier.h>

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/model_setup.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/models/cuda_graph.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

namespace attnzoo {

struct ImageClassifier::State {
  ModelConfig config;
  ImageClassifierOptions options;
  ZooModel model;
  std::unique_ptr<EvalImageTransform> transform;
  std::vector<std::string> labels;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat;
  std::string weights;
  // options.cuda_graph: one recorded forward per batch shape. A graph's buffers are shared by its
  // replays, so a replay holds the lock (threads classify one batch after another on the GPU).
  std::mutex graphs_mutex;
  std::map<std::vector<int64_t>, std::unique_ptr<CudaGraphForward>> graphs;
};

namespace {

// Any 8-bit 1/3/4-channel image -> 8-bit RGB.
cv::Mat to_rgb(const cv::Mat& image, ChannelOrder order) {
  TORCH_CHECK_VALUE(!image.empty(), "ImageClassifier: the image is empty");
  TORCH_CHECK_VALUE(image.depth() == CV_8U,
                    "ImageClassifier: the image must be 8-bit (CV_8U), got depth ", image.depth());
  cv::Mat rgb;
  const bool bgr = order == ChannelOrder::kBGR;
  switch (image.channels()) {
    case 1:
      cv::cvtColor(image, rgb, cv::COLOR_GRAY2RGB);
      break;
    case 3:
      if (bgr) {
        cv::cvtColor(image, rgb, cv::COLOR_BGR2RGB);
      } else {
        rgb = image;
      }
      break;
    case 4:
      cv::cvtColor(image, rgb, bgr ? cv::COLOR_BGRA2RGB : cv::COLOR_RGBA2RGB);
      break;
    default:
      TORCH_CHECK_VALUE(false, "ImageClassifier: the image must have 1, 3 or 4 channels, got ",
                        image.channels());
  }
  return rgb;
}

}  // namespace

ImageClassifier::ImageClassifier(const std::string& model, ImageClassifierOptions options)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  TORCH_CHECK_VALUE(options.batch_size >= 1, "ImageClassifier: batch_size must be >= 1, got ",
                    options.batch_size);
  auto setup = detail::model_setup("ImageClassifier", model, options, InputKind::kImages,
                                   "an image classifier needs images");
  s.device = setup.device;
  s.dtype = setup.dtype;
  s.config = setup.config;
  const int64_t classes = setup.family->num_classes(s.config);
  TORCH_CHECK_VALUE(classes > 0, "ImageClassifier: ", s.config.source,
                    " has no classifier (architecture.num_classes 0)");
  TORCH_CHECK_VALUE(!options.cuda_graph || s.device.is_cuda(),
                    "ImageClassifier: cuda_graph needs device cuda, got ", options.device);
  s.labels = load_labels(s.config.labels, classes);
  s.transform = std::make_unique<EvalImageTransform>(image_transform_options(s.config.image));
  s.model = detail::setup_model(setup, options, s.weights);
  s.options = std::move(options);
}

ImageClassifier::~ImageClassifier() = default;
ImageClassifier::ImageClassifier(ImageClassifier&&) noexcept = default;
ImageClassifier& ImageClassifier::operator=(ImageClassifier&&) noexcept = default;

const ModelConfig& ImageClassifier::config() const { return state_->config; }
c10::ScalarType ImageClassifier::dtype() const { return state_->dtype; }
const std::vector<std::string>& ImageClassifier::labels() const { return state_->labels; }
const std::string& ImageClassifier::weights_description() const { return state_->weights; }

torch::Tensor ImageClassifier::preprocess(const cv::Mat& rgb) const {
  return (*state_->transform)(rgb);
}

torch::Tensor ImageClassifier::logits(const torch::Tensor& pixels) const {
  // The model is not changed by a forward in eval mode under InferenceMode (hence const).
  auto& s = *state_;
  TORCH_CHECK_VALUE(pixels.dim() == 4 && pixels.size(1) == 3,
                    "ImageClassifier: pixels must be [N, 3, H, W], got ", pixels.sizes());
  torch::InferenceMode inference;
  const auto input = pixels.to(s.device, s.dtype);
  if (!s.options.cuda_graph) return s.model.classify({input}).to(torch::kCPU, torch::kFloat);
  std::lock_guard<std::mutex> lock(s.graphs_mutex);
  auto& graph = s.graphs[input.sizes().vec()];
  if (!graph) {
    auto model = s.model;
    graph = std::make_unique<CudaGraphForward>(
        [model](const torch::Tensor& x) mutable { return model.classify({x}); }, input);
  }
  return (*graph)(input).to(torch::kCPU, torch::kFloat);
}

std::vector<Prediction> ImageClassifier::classify(const std::string& path, int64_t topk) const {
  check_topk("ImageClassifier", topk);
  const auto rgb = decode_image(path, state_->options.decode);
  return top_predictions(logits(preprocess(rgb).unsqueeze(0))[0], topk, state_->labels);
}

std::vector<Prediction> ImageClassifier::classify(const cv::Mat& image, int64_t topk,
                                                  ChannelOrder order) const {
  check_topk("ImageClassifier", topk);
  return top_predictions(logits(preprocess(to_rgb(image, order)).unsqueeze(0))[0], topk,
                         state_->labels);
}

std::vector<ImageResult> ImageClassifier::classify(const std::vector<std::string>& paths,
                                                   int64_t topk) const {
  check_topk("ImageClassifier", topk);
  const auto& s = *state_;
  std::vector<ImageResult> results(paths.size());
  const auto batch_size = static_cast<size_t>(s.options.batch_size);
  for (size_t start = 0; start < paths.size(); start += batch_size) {
    const size_t end = std::min(paths.size(), start + batch_size);
    std::vector<torch::Tensor> pixels;
    std::vector<size_t> which;
    for (size_t i = start; i < end; ++i) {
      results[i].image = paths[i];
      try {
        pixels.push_back(preprocess(decode_image(paths[i], s.options.decode)));
        which.push_back(i);
      } catch (const std::exception& e) {
        const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
        results[i].error = c10_error ? c10_error->what_without_backtrace() : e.what();
      }
    }
    if (pixels.empty()) continue;
    const auto batch_logits = logits(torch::stack(pixels));
    for (size_t j = 0; j < which.size(); ++j) {
      results[which[j]].top =
          top_predictions(batch_logits[static_cast<int64_t>(j)], topk, s.labels);
    }
  }
  return results;
}

}  // namespace attnzoo
