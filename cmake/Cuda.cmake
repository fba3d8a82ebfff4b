# Whether kernels/ is compiled for CUDA, and for which architectures (attnzoo's build only).
#
# ATTNZOO_CUDA=AUTO|ON|OFF: AUTO compiles kernels/ when nvcc and a CUDA-enabled LibTorch are both
# present; the resulting binaries still run on machines without a GPU. Needs cmake/Torch.cmake.
include_guard(GLOBAL)

set(ATTNZOO_CUDA "AUTO" CACHE STRING "Build the CUDA kernels: AUTO, ON or OFF")
set_property(CACHE ATTNZOO_CUDA PROPERTY STRINGS AUTO ON OFF)
# Each architecture compiled once: sm_80 code with its PTX (which newer GPUs can compile at load
# time) and sm_90a code alone (PTX of an arch-specific target runs nowhere else).
set(ATTNZOO_CUDA_ARCHITECTURES "80;90a-real" CACHE STRING "CUDA architectures of kernels/")

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
  # nvcc's host compiler is GCC when the C++ compiler is clang. LibTorch's CMake files otherwise
  # hand nvcc the C++ compiler, and clang as nvcc's host warns under -Wall about the unused static
  # functions of CUDA's own headers. A host compiler named in CUDAHOSTCXX or the cache wins.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND NOT DEFINED ENV{CUDAHOSTCXX}
     AND NOT DEFINED CACHE{CMAKE_CUDA_HOST_COMPILER})
    find_program(ATTNZOO_CUDA_HOST_GXX NAMES g++ c++-gcc)
    if(ATTNZOO_CUDA_HOST_GXX)
      set(CMAKE_CUDA_HOST_COMPILER ${ATTNZOO_CUDA_HOST_GXX})
    endif()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${ATTNZOO_CUDA_ARCHITECTURES})
  enable_language(CUDA)
endif()
message(STATUS "attnzoo: LibTorch ${Torch_VERSION}, CUDA kernels: ${ATTNZOO_WITH_CUDA}")
