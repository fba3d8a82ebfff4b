# Every third-party dependency of attnzoo's build is found here, once:
#   what the libraries link (LibraryDependencies.cmake, shared with the installed package);
#   the CUDA decision (Cuda.cmake);
#   CLI11 (the CLI), GTest (the tests), and the c10d headers of data-parallel training
#   (attnzoo::c10d: headers and definitions only, used inside the build).
include_guard(GLOBAL)

# Torch's own CMake files compute nvcc flags from TORCH_CUDA_ARCH_LIST (they would otherwise probe
# a GPU that the build machine may not have); keep them in step with ATTNZOO_CUDA_ARCHITECTURES.
set(TORCH_CUDA_ARCH_LIST "8.0;9.0a" CACHE STRING "Torch's view of the CUDA architectures")
if(ATTNZOO_KERNELS_ONLY)
  # LibTorch alone: GoogleTest and nlohmann-json may come as sources (CMakeLists.txt).
  include(${CMAKE_CURRENT_LIST_DIR}/Torch.cmake)
  if(NOT ATTNZOO_TORCH_FOUND)
    message(FATAL_ERROR "LibTorch not found: pass -DCMAKE_PREFIX_PATH=$(python -c 'import "
                        "torch.utils; print(torch.utils.cmake_prefix_path)')")
  endif()
  include(${CMAKE_CURRENT_LIST_DIR}/Cuda.cmake)
  find_package(ZLIB REQUIRED)  # io/'s zip reader
  return()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/LibraryDependencies.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/Cuda.cmake)
find_package(CLI11 REQUIRED CONFIG)
# Boost.Beast and Boost.Asio (header-only; Debian's libboost-dev) inside serve/'s HTTP server
# alone: no installed header includes them, so the package does not ask its users for Boost.
find_package(Boost 1.74 REQUIRED CONFIG)

# c10d process groups for data-parallel training (train/distributed.cpp). LibTorch has Gloo and
# NCCL inside and ships ProcessGroupGloo.hpp, but not the gloo headers that header includes:
# Debian's libgloo-dev provides them (headers only; the implementation that runs is LibTorch's).
# NCCL's header comes with the nvidia-nccl wheel beside a CUDA torch. Without them data-parallel
# training is left out (ATTNZOO_DISTRIBUTED=AUTO) and `attnzoo train` refuses WORLD_SIZE > 1.
set(ATTNZOO_DISTRIBUTED "AUTO" CACHE STRING "Data-parallel training on c10d: AUTO, ON or OFF")
set_property(CACHE ATTNZOO_DISTRIBUTED PROPERTY STRINGS AUTO ON OFF)
add_library(attnzoo_c10d INTERFACE)
add_library(attnzoo::c10d ALIAS attnzoo_c10d)
set(ATTNZOO_WITH_GLOO OFF)
set(ATTNZOO_WITH_NCCL OFF)
if(NOT ATTNZOO_DISTRIBUTED STREQUAL "OFF")
  find_path(ATTNZOO_GLOO_INCLUDE_DIR gloo/rendezvous/store.h)
  if(ATTNZOO_GLOO_INCLUDE_DIR)
    set(ATTNZOO_WITH_GLOO ON)
    target_include_directories(attnzoo_c10d SYSTEM INTERFACE ${ATTNZOO_GLOO_INCLUDE_DIR})
    target_compile_definitions(attnzoo_c10d INTERFACE ATTNZOO_WITH_GLOO=1 USE_C10D_GLOO
                                                      USE_DISTRIBUTED)
  elseif(ATTNZOO_DISTRIBUTED STREQUAL "ON")
    message(FATAL_ERROR "ATTNZOO_DISTRIBUTED=ON needs the gloo headers (Debian: libgloo-dev)")
  endif()
  if(ATTNZOO_WITH_CUDA AND DEFINED TORCH_INSTALL_PREFIX)
    get_filename_component(_attnzoo_site "${TORCH_INSTALL_PREFIX}" DIRECTORY)  # site-packages
    find_path(ATTNZOO_NCCL_INCLUDE_DIR nccl.h PATHS ${_attnzoo_site}/nvidia/nccl/include
              NO_DEFAULT_PATH)
    if(ATTNZOO_NCCL_INCLUDE_DIR)
      set(ATTNZOO_WITH_NCCL ON)
      target_include_directories(attnzoo_c10d SYSTEM INTERFACE ${ATTNZOO_NCCL_INCLUDE_DIR})
      target_compile_definitions(attnzoo_c10d INTERFACE ATTNZOO_WITH_NCCL=1 USE_C10D_NCCL)
    endif()
  endif()
endif()
message(STATUS "attnzoo: data-parallel training: Gloo ${ATTNZOO_WITH_GLOO}, NCCL ${ATTNZOO_WITH_NCCL}")

if(ATTNZOO_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
