#include <attnzoo/api/transcript_json.h>

#include <nlohmann/json.hpp>

namespace attnzoo {
namespace {

nlohmann::json hypothesis_json(const TranscriptHypothesis& h, bool tokens) {
  nlohmann::json j = {{"text", h.text}, {"score", h.score}, {"confidence", h.confidence}};
  if (tokens) {
    auto list = nlohmann::json::array();
    for (const auto& t : h.tokens) {
      list.push_back({{"token", t.text},
                      {"id", t.id},
                      {"start", t.start_seconds},
                      {"end", t.end_seconds},
                      {"confidence", t.confidence}});
    }
    j["tokens"] = std::move(list);
  }
  return j;
}

}  // namespace

std::string transcript_json(const Transcript& transcript) {
  nlohmann::json j = {{"audio", transcript.audio}};
  if (!transcript.ok()) {
    j["error"] = transcript.error;
  } else {
    j.update(hypothesis_json(transcript.best(), true));
    j["seconds"] = transcript.seconds;
    if (transcript.hypotheses.size() > 1) {
      auto nbest = nlohmann::json::array();
      for (const auto& h : transcript.hypotheses) nbest.push_back(hypothesis_json(h, false));
      j["nbest"] = std::move(nbest);
    }
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace attnzoo
