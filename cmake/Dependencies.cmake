# Every third-party dependency of attnzoo is found here, once, and exposed as an imported target:
#   attnzoo::torch        LibTorch from the pinned torch wheel (see Torch.cmake)
#   attnzoo::opencv       OpenCV core + imgproc + imgcodecs (Debian's -dev packages); OpenCV.cmake
#   attnzoo::sndfile      libsndfile
#   attnzoo::soxr         libsoxr
#   yaml-cpp, nlohmann_json::nlohmann_json, CLI11::CLI11, GTest::gtest(_main)
include_guard(GLOBAL)

include(${CMAKE_CURRENT_LIST_DIR}/Torch.cmake)

find_package(PkgConfig REQUIRED)
pkg_check_modules(ATTNZOO_SNDFILE REQUIRED IMPORTED_TARGET GLOBAL sndfile)
pkg_check_modules(ATTNZOO_SOXR REQUIRED IMPORTED_TARGET GLOBAL soxr)
add_library(attnzoo::sndfile ALIAS PkgConfig::ATTNZOO_SNDFILE)
add_library(attnzoo::soxr ALIAS PkgConfig::ATTNZOO_SOXR)

find_package(yaml-cpp REQUIRED CONFIG)
find_package(nlohmann_json 3.10 REQUIRED CONFIG)
find_package(CLI11 REQUIRED CONFIG)

include(${CMAKE_CURRENT_LIST_DIR}/OpenCV.cmake)

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
