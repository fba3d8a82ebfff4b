// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA
// 2014; the finaliser of Java's SplittableRandom): one 64-bit value mixed into another whose bits
// all depend on every input bit. attnzoo derives the seed of each epoch, step, channel or sample
// from a user's seed with it, so that nearby seeds give unrelated streams and a result does not
// depend on how many threads drew before it.
#pragma once

#include <cstdint>

namespace attnzoo {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace attnzoo
