// attnzoo's own version, and the form in which each library reports the versions of the
// third-party libraries it links (`attnzoo version` prints them all): a program learns OpenCV's
// version from attnzoo::image, libsndfile's from attnzoo::audio, without linking either itself.
#pragma once

#include <string>
#include <vector>

namespace attnzoo {

// The version of this build of attnzoo, "MAJOR.MINOR.PATCH" (the CMake project's).
const char* version();
// The LibTorch attnzoo was compiled against ("2.11.0").
const char* torch_version();

struct LibraryVersion {
  std::string name;     // "OpenCV"
  std::string version;  // what the library says of itself at run time, with the headers' version
                        // where the two may differ
};

}  // namespace attnzoo
