// `attnzoo version`: what this binary was built with and what it finds at run time.
#include "tools/cli/commands.h"

#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/versions.h>
#include <attnzoo/configs/zoo_path.h>
#include <attnzoo/core/version.h>
#include <attnzoo/kernels/ops.h>
#include <attnzoo/preprocess/audio/versions.h>
#include <attnzoo/preprocess/image/versions.h>
#include <attnzoo/train/distributed.h>

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>

#include <iostream>
#include <sstream>

namespace attnzoo::cli {
namespace {

std::string cuda_summary() {
  std::ostringstream out;
  out << "LibTorch CUDA build: ";
  try {
    // Throws when this LibTorch has no CUDA library loaded (a CPU-only build).
    const long version = at::detail::getCUDAHooks().versionCUDART();
    out << "CUDA " << version / 1000 << "." << (version % 1000) / 10;
  } catch (const c10::Error&) {
    out << "no";
  }
  const auto devices = torch::cuda::device_count();
  out << "; CUDA devices: " << (devices > 0 ? std::to_string(devices) : std::string("none"));
  return out.str();
}

// Where the zoo was looked for, in order, and what each place holds.
std::string zoo_summary() {
  std::ostringstream out;
  const auto library = attnzoo_library_file();
  out << "library: " << (library.empty() ? "unknown" : library) << "\n"
      << "zoo (searched in this order; the first folder that defines a model wins):\n";
  const auto search_path = zoo_search_path();
  if (search_path.empty()) out << "  nowhere to look: set " << kZooPathVariable << "\n";
  for (const auto& folder : search_path) {
    out << "  " << zoo_folder_origin_name(folder.origin) << ": " << folder.path << ": ";
    if (!folder.exists) {
      out << "missing\n";
      continue;
    }
    try {
      out << ModelRegistry(folder.path).names().size() << " models\n";
    } catch (const std::exception& e) {
      out << "unreadable (" << e.what() << ")\n";
    }
  }
  return out.str();
}

int run_version() {
  std::cout << "attnzoo " << version() << "\n"
            << "LibTorch " << torch_version() << "\n"
            << cuda_summary() << "\n"
            << kernels::build_info() << "\n";
  for (const auto& libraries :
       {image_library_versions(), audio_library_versions(), config_library_versions()}) {
    for (const auto& library : libraries)
      std::cout << library.name << " " << library.version << "\n";
  }
  std::cout << "data-parallel: "
            << (distributed_available(false)
                    ? (distributed_available(true) ? "gloo, nccl" : "gloo")
                    : (distributed_available(true) ? "nccl" : "none (no c10d headers)"))
            << "\n"
            << zoo_summary();
  return 0;
}

}  // namespace

Command add_version_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "version", "Print the versions of attnzoo, LibTorch, CUDA and the frontend libraries");
  return {sub, run_version};
}

}  // namespace attnzoo::cli
