// The versions of libsndfile (reading audio) and libsoxr (resampling) that attnzoo::audio links,
// for `attnzoo version` and bug reports: a program learns them here without linking either.
#pragma once

#include <attnzoo/core/version.h>

#include <vector>

namespace attnzoo {

// {"libsndfile", "1.2.0"}, {"libsoxr", "0.1.3"}: as each library reports itself at run time.
std::vector<LibraryVersion> audio_library_versions();

}  // namespace attnzoo
