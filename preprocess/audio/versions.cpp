#include <attnzoo/preprocess/audio/versions.h>

#include <sndfile.h>
#include <soxr.h>

#include <string>

namespace attnzoo {
namespace {

// "1.2.0" of "libsndfile-1.2.0": both libraries prefix their version with their name.
std::string without_prefix(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
}

}  // namespace

std::vector<LibraryVersion> audio_library_versions() {
  return {{"libsndfile", without_prefix(sf_version_string(), "libsndfile-")},
          {"libsoxr", without_prefix(soxr_version(), "libsoxr-")}};
}

}  // namespace attnzoo
