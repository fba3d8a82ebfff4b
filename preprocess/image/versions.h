// The version of OpenCV that attnzoo::image decodes and resizes with, for `attnzoo version` and
// bug reports: a program learns it here without linking OpenCV itself.
#pragma once

#include <attnzoo/core/version.h>

#include <vector>

namespace attnzoo {

// {"OpenCV", "4.6.0 (headers 4.6.0)"}: the library loaded at run time, and the headers this
// library was compiled with.
std::vector<LibraryVersion> image_library_versions();

}  // namespace attnzoo
