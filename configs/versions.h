// The version of yaml-cpp that attnzoo::configs reads the zoo's YAML with, for `attnzoo version`
// and bug reports: a program learns it here without linking yaml-cpp itself.
#pragma once

#include <attnzoo/core/version.h>

#include <vector>

namespace attnzoo {

// {"yaml-cpp", "0.7.0"}: the version of the package this library was built against (yaml-cpp
// reports none at run time).
std::vector<LibraryVersion> config_library_versions();

}  // namespace attnzoo
