// SplitMix64 against the outputs of its reference implementation (Vigna's splitmix64.c: the state
// advanced by the golden gamma before each output): the first three outputs from state 0.
#include <attnzoo/core/splitmix64.h>

#include <gtest/gtest.h>

namespace attnzoo {
namespace test_splitmix64 {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(kGamma), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(2 * kGamma), 0x06c45d188009454fULL);
  static_assert(splitmix64(0) == 0xe220a8397b1dcdafULL, "usable in constant expressions");
}

TEST(SplitMix64, NearbyInputsGiveUnrelatedOutputs) {
  // Every input bit reaches about half of the output bits (the avalanche a seed mixer needs).
  for (uint64_t x : {0ULL, 1ULL, 12345ULL, 0xffffffffffffffffULL}) {
    for (int bit = 0; bit < 64; ++bit) {
      const uint64_t flipped = splitmix64(x) ^ splitmix64(x ^ (uint64_t{1} << bit));
      const int changed = __builtin_popcountll(flipped);
      EXPECT_GT(changed, 12) << "x " << x << " bit " << bit;
      EXPECT_LT(changed, 52) << "x " << x << " bit " << bit;
    }
  }
}

}  // namespace test_splitmix64
}  // namespace attnzoo
