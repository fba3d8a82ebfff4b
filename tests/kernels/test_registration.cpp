// This binary links attnzoo::kernels but uses none of its symbols, only the op's name, as a program
// that calls torch.ops.attnzoo.* would (see CMakeLists.txt). If the library's TORCH_LIBRARY
// registrations were dropped at link time, the schema lookup below fails.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

namespace test_registration {

TEST(BiasGeluRegistration, OpIsRegisteredInAProgramThatUsesOnlyItsName) {
  const auto op = c10::Dispatcher::singleton().findSchema({"attnzoo::bias_gelu", ""});
  ASSERT_TRUE(op.has_value())
      << "attnzoo::bias_gelu is not registered: libattnzoo_kernels was not loaded";
  EXPECT_TRUE(op->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU));
  EXPECT_TRUE(op->hasComputedKernelForDispatchKey(c10::DispatchKey::Meta));
  EXPECT_EQ(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA), ATTNZOO_WITH_CUDA == 1)
      << "a CUDA kernel must be registered exactly when the CUDA kernels are built";

  torch::manual_seed(0);
  const auto x = torch::randn({3, 5});
  const auto bias = torch::randn({5});
  const auto y =
      op->typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view)>().call(x, bias,
                                                                                           "tanh");
  EXPECT_TRUE(torch::equal(y, torch::gelu(x + bias, "tanh")));
}

}  // namespace test_registration
