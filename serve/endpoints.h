// The models of a serve config, loaded and wrapped for the server. A model's task is its entry's
// `task:`, else follows from its config: a model with a classification head is a classifier (of
// images or audio), a model of audio with a CTC head and a token table a recognizer, any other
// model of audio an encoder.
#pragma once

#include <attnzoo/configs/serve_config.h>
#include <attnzoo/serve/inference_server.h>

#include <vector>

namespace attnzoo::serve {

// Loads every model of `config` with its weights. Errors name the serve config, the model and
// what it cannot be: a vision model without a classification head, a task the model cannot do
// (encode or transcribe of an image model; transcribe without a CTC head or a token table).
std::vector<ModelEndpoint> load_endpoints(const ServeConfig& config);
// One model of `config` (its entry `m`; the config gives the defaults and the name in errors).
ModelEndpoint load_endpoint(const ServedModelConfig& m, const ServeConfig& config);

}  // namespace attnzoo::serve
