// The models of a serve config, loaded and wrapped for the server: each model's kind follows from
// its config (a vision model with a classification head is an image classifier).
#pragma once

#include <attnzoo/configs/serve_config.h>
#include <attnzoo/serve/inference_server.h>

#include <vector>

namespace attnzoo::serve {

// Loads every model of `config` with its weights. Errors name the model and what it cannot be:
// a model without a classification head, or of audio, is refused (served_model.h lists what is
// served).
std::vector<ModelEndpoint> load_endpoints(const ServeConfig& config);

}  // namespace attnzoo::serve
