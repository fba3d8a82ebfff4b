#include <attnzoo/configs/versions.h>

namespace attnzoo {

std::vector<LibraryVersion> config_library_versions() {
  return {{"yaml-cpp", ATTNZOO_YAML_CPP_VERSION}};
}

}  // namespace attnzoo
