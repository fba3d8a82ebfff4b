// The count arguments of the benchmark programs (--threads N, --rounds R, ...): a positive
// integer, or the program exits with status 2 naming itself, the flag and the value.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace attnzoo::bench {

inline int64_t count_argument(const char* program, const char* flag, const char* value) {
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || n < 1) {
    std::fprintf(stderr, "%s: %s takes a positive integer, got '%s'\n", program, flag, value);
    std::exit(2);
  }
  return n;
}

}  // namespace attnzoo::bench
