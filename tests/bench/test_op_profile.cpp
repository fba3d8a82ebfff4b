// OpProfile against ops whose calls and nesting are known: counts, self times that leave out the
// ops called inside, nothing recorded outside the profile's lifetime or from another thread.
#include "tools/bench/op_profile.h"
#include "tools/bench/timing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

namespace attnzoo::bench {
namespace {

const OpTime* find(const std::vector<OpTime>& rows, const std::string& op) {
  const auto it =
      std::find_if(rows.begin(), rows.end(), [&](const OpTime& row) { return row.op == op; });
  return it == rows.end() ? nullptr : &*it;
}

TEST(OpProfile, CountsEachOpAndOrdersByTime) {
  const auto a = torch::randn({384, 384}), b = torch::randn({384, 384});
  torch::mm(a, b);  // before the profile: not counted
  std::vector<OpTime> rows;
  {
    OpProfile profile;
    for (int i = 0; i < 3; ++i) torch::mm(a, b);
    for (int i = 0; i < 5; ++i) torch::neg(a.select(0, 0));
    rows = profile.rows();
  }
  torch::mm(a, b);  // after it: not counted either
  const auto* mm = find(rows, "aten::mm");
  const auto* neg = find(rows, "aten::neg");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(neg, nullptr);
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(neg->calls, 5);
  EXPECT_EQ(find(rows, "aten::select")->calls, 5);
  // A 384^3 product costs far more than negating 384 values.
  EXPECT_EQ(rows.front().op, "aten::mm");
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].self_ms, rows[i].self_ms);
}

TEST(OpProfile, SelfTimeLeavesOutTheOpsCalledInside) {
  const auto x = torch::randn({2, 128, 512}), w = torch::randn({512, 512});
  torch::NoGradGuard no_grad;
  std::vector<OpTime> rows;
  double wall_ms = 0.0;
  {
    OpProfile profile;
    const Stopwatch watch;
    for (int i = 0; i < 4; ++i) torch::matmul(x, w);
    wall_ms = watch.elapsed_ms();
    rows = profile.rows();
  }
  // aten::matmul folds the batch into rows and calls aten::mm, whose GEMM is nearly all of the
  // time: matmul's own share is the reshaping around it.
  std::string seen;
  for (const auto& row : rows) seen += row.op + " " + std::to_string(row.calls) + "; ";
  SCOPED_TRACE(seen);
  const auto* outer = find(rows, "aten::matmul");
  const auto* inner = find(rows, "aten::mm");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(outer->calls, 4);
  EXPECT_EQ(inner->calls, 4);
  EXPECT_LT(outer->self_ms, inner->self_ms);
  double total = 0.0;
  for (const auto& row : rows) {
    EXPECT_GE(row.self_ms, 0.0) << row.op;
    total += row.self_ms;
  }
  EXPECT_LE(total, wall_ms);  // self times never count a nested op twice
}

TEST(OpProfile, RecordsOnlyItsOwnThread) {
  const auto a = torch::randn({64, 64});
  std::vector<OpTime> rows;
  {
    OpProfile profile;
    std::thread other([&] { torch::mm(a, a); });
    other.join();
    torch::neg(a);
    rows = profile.rows();
  }
  EXPECT_EQ(find(rows, "aten::mm"), nullptr);
  EXPECT_NE(find(rows, "aten::neg"), nullptr);
  // A second profile on this thread starts empty.
  OpProfile again;
  EXPECT_TRUE(again.rows().empty());
  EXPECT_THROW(OpProfile{}, c10::Error);  // one at a time per thread
}

}  // namespace
}  // namespace attnzoo::bench
