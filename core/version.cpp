#include <attnzoo/core/version.h>

#include <torch/headeronly/version.h>

namespace attnzoo {

const char* version() { return ATTNZOO_VERSION; }

const char* torch_version() { return TORCH_VERSION; }

}  // namespace attnzoo
