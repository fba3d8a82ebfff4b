#include <attnzoo/core/dtype_device.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace attnzoo {
namespace {

// CUDA devices this process sees: 0 without a CUDA build of LibTorch loaded (its CUDA guard
// registers itself when libc10_cuda loads) or without a driver or device.
int cuda_device_count() {
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return 0;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount();
}

const char* expected_dtypes(bool accept_fp64) {
  return accept_fp64 ? " must be fp32, bf16, fp16 or fp64, got "
                     : " must be fp32, bf16 or fp16, got ";
}

}  // namespace

c10::ScalarType parse_dtype(const std::string& who, const std::string& name, bool accept_fp64) {
  if (name == "fp32") return c10::kFloat;
  if (name == "bf16") return c10::kBFloat16;
  if (name == "fp16") return c10::kHalf;
  if (name == "fp64" && accept_fp64) return c10::kDouble;
  TORCH_CHECK_VALUE(false, who, expected_dtypes(accept_fp64), "'", name, "'");
}

void check_dtype(const std::string& who, c10::ScalarType dtype, bool accept_fp64) {
  const bool named = dtype == c10::kFloat || dtype == c10::kBFloat16 || dtype == c10::kHalf ||
                     dtype == c10::kDouble;
  TORCH_CHECK_VALUE(named && (accept_fp64 || dtype != c10::kDouble), who,
                    expected_dtypes(accept_fp64), named ? dtype_name(dtype) : c10::toString(dtype));
}

const char* dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    case c10::kHalf:
      return "fp16";
    case c10::kDouble:
      return "fp64";
    default:
      break;
  }
  TORCH_CHECK_VALUE(false, "dtype ", dtype, " has no name in attnzoo's options");
}

c10::Device parse_device(const std::string& who, const std::string& name) {
  TORCH_CHECK_VALUE(name == "cpu" || name.rfind("cuda", 0) == 0, who,
                    " must be cpu, cuda or cuda:N, got '", name, "'");
  const c10::Device device(name);
  check_device(who, device);
  return device;
}

void check_device(const std::string& who, c10::Device device) {
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), who, " must be cpu, cuda or cuda:N, got ",
                    device.str());
  if (device.is_cpu()) return;
  const int count = cuda_device_count();
  TORCH_CHECK_VALUE(count > 0, who, " ", device.str(),
                    ": no CUDA device is available to this process");
  TORCH_CHECK_VALUE(!device.has_index() || device.index() < count, who, " ", device.str(),
                    ": only ", count, " CUDA devices");
}

}  // namespace attnzoo
