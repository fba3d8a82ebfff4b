# LibTorch from the pinned torch wheel, and the CUDA decision.
#
# CMAKE_PREFIX_PATH must contain torch.utils.cmake_prefix_path (tools/setup.sh passes it).
# ATTNZOO_CUDA=AUTO|ON|OFF: AUTO compiles kernels/ when nvcc and a CUDA-enabled LibTorch are both
# present; the resulting binaries still run on machines without a GPU.
include_guard(GLOBAL)

set(ATTNZOO_CUDA "AUTO" CACHE STRING "Build the CUDA kernels: AUTO, ON or OFF")
set_property(CACHE ATTNZOO_CUDA PROPERTY STRINGS AUTO ON OFF)
set(ATTNZOO_CUDA_ARCHITECTURES "80;90a" CACHE STRING "CUDA architectures of kernels/")

# Torch's own CMake files compute nvcc flags from TORCH_CUDA_ARCH_LIST (they would otherwise probe a
# GPU that the build machine may not have); keep them in step with ours.
set(TORCH_CUDA_ARCH_LIST "8.0;9.0a" CACHE STRING "Torch's view of the CUDA architectures")

find_package(Torch CONFIG QUIET)
if(Torch_FOUND)
  add_library(attnzoo_torch INTERFACE)
  target_link_libraries(attnzoo_torch INTERFACE ${TORCH_LIBRARIES})
  # The include directories of the imported `torch` target are SYSTEM already; TORCH_INCLUDE_DIRS
  # is added again as SYSTEM for the plain-variable consumers (CUDA sources).
  target_include_directories(attnzoo_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  set(ATTNZOO_TORCH_HAS_CUDA OFF)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(ATTNZOO_TORCH_HAS_CUDA ON)
  endif()
else()
  # A CUDA-enabled wheel's TorchConfig insists on a CUDA toolkit. Without one (a plain Debian
  # machine), link the CPU libraries of the same wheel directly: the CUDA parts are then unused.
  find_path(ATTNZOO_TORCH_ROOT "share/cmake/Torch/TorchConfig.cmake"
            PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES ../.. NO_DEFAULT_PATH)
  if(NOT ATTNZOO_TORCH_ROOT)
    message(FATAL_ERROR "LibTorch not found: pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch.utils; "
                        "print(torch.utils.cmake_prefix_path)') or run tools/setup.sh")
  endif()
  message(STATUS "TorchConfig failed (no CUDA toolkit?); linking the CPU libraries of ${ATTNZOO_TORCH_ROOT}")
  add_library(attnzoo_torch INTERFACE)
  target_include_directories(attnzoo_torch SYSTEM INTERFACE
    ${ATTNZOO_TORCH_ROOT}/include ${ATTNZOO_TORCH_ROOT}/include/torch/csrc/api/include)
  foreach(lib torch torch_cpu c10)
    find_library(ATTNZOO_TORCH_${lib} ${lib} PATHS ${ATTNZOO_TORCH_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
    target_link_libraries(attnzoo_torch INTERFACE ${ATTNZOO_TORCH_${lib}})
  endforeach()
  target_link_options(attnzoo_torch INTERFACE "LINKER:--no-as-needed")
  target_compile_definitions(attnzoo_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
  set(ATTNZOO_TORCH_HAS_CUDA OFF)
  set(Torch_VERSION "unknown")
endif()
# libtorch.so of the PyPI wheel exports its own (statically linked) copy of std::filesystem, which
# precedes libstdc++ in the search order of anything linked against it and crashes there
# (std::filesystem::remove_all jumps to address 0). Naming libstdc++ ahead of every object and
# library puts the system's implementation first.
target_link_options(attnzoo_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
add_library(attnzoo::torch ALIAS attnzoo_torch)

# The CUDA decision.
include(CheckLanguage)
set(ATTNZOO_WITH_CUDA OFF)
if(NOT ATTNZOO_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND ATTNZOO_TORCH_HAS_CUDA)
    set(ATTNZOO_WITH_CUDA ON)
  elseif(ATTNZOO_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTNZOO_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}) or a CUDA-enabled LibTorch "
                        "(${ATTNZOO_TORCH_HAS_CUDA}) is missing")
  endif()
endif()
if(ATTNZOO_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES ${ATTNZOO_CUDA_ARCHITECTURES})
  enable_language(CUDA)
endif()
message(STATUS "attnzoo: LibTorch ${Torch_VERSION}, CUDA kernels: ${ATTNZOO_WITH_CUDA}")
