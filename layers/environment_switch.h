// The start of a process-wide switch of the layers (not installed: none of it is API).
#pragma once

#include <cstdlib>
#include <string>

namespace attnzoo::detail {

// On, unless the environment sets `name` to `off` (e.g. ATTNZOO_LINEAR_CPU=onednn).
inline bool on_unless_environment(const char* name, const char* off) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string(value) != off;
}

}  // namespace attnzoo::detail
