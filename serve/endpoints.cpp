#include <attnzoo/serve/endpoints.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/serve/served_image_classifier.h>

#include <stdexcept>

namespace attnzoo::serve {

std::vector<ModelEndpoint> load_endpoints(const ServeConfig& config) {
  std::vector<ModelEndpoint> endpoints;
  for (const auto& m : config.models) {
    const auto model_config = resolve_model_config(m.model, m.overrides);
    const auto& family = model_family(model_config.family);
    const std::string who = config.source + ": model '" + m.name + "' (" + m.model + ")";
    if (family.input_kind() != InputKind::kImages || family.num_classes(model_config) == 0) {
      throw std::invalid_argument(
          who +
          ": only image classifiers (a vision model with num_classes > 0) are served; "
          "this is a " +
          model_config.family + " model taking " + input_kind_name(family.input_kind()));
    }
    ImageClassifierOptions options;
    options.weights = m.weights;
    options.format = m.format;
    options.overrides = m.overrides;
    options.device = m.device;
    options.dtype = m.dtype;
    ModelEndpoint endpoint;
    endpoint.model = std::make_shared<ServedImageClassifier>(
        m.name, std::make_shared<const ImageClassifier>(m.model, options));
    endpoint.batching.dynamic = m.dynamic_batching;
    endpoint.batching.max_batch_size = m.max_batch_size;
    endpoint.batching.max_queue_delay_us = m.max_queue_delay_us;
    endpoint.batching.max_queue_size = m.max_queue_size;
    endpoint.batching.instances = m.instances;
    endpoint.default_timeout_us = m.default_timeout_us;
    endpoints.push_back(std::move(endpoint));
  }
  return endpoints;
}

}  // namespace attnzoo::serve
