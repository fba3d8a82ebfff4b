// What the recognizer tests ask of a transcript: its token ids, and whether one id sequence
// begins with another (a stable part, a best hypothesis).
#pragma once

#include <attnzoo/api/speech_recognizer.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace attnzoo::testing {

inline std::vector<int64_t> ids_of(const TranscriptHypothesis& h) {
  std::vector<int64_t> ids;
  for (const auto& token : h.tokens) ids.push_back(token.id);
  return ids;
}

inline bool begins_with(const std::vector<int64_t>& all, const std::vector<int64_t>& prefix) {
  return prefix.size() <= all.size() && std::equal(prefix.begin(), prefix.end(), all.begin());
}

}  // namespace attnzoo::testing
