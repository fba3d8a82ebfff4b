# The third-party libraries that attnzoo's libraries link, found once and exposed as imported
# targets:
#   attnzoo::torch    LibTorch (Torch.cmake)
#   attnzoo::opencv   OpenCV core + imgproc + imgcodecs (OpenCV.cmake)
#   attnzoo::sndfile  libsndfile (pkg-config)
#   attnzoo::soxr     libsoxr (pkg-config)
#   attnzoo::sentencepiece  libsentencepiece (its header and library; its pkg-config file also
#                     names the trainer library, which attnzoo does not use), linked by the
#                     module libattnzoo_sentencepiece only (decoding/CMakeLists.txt)
#   yaml-cpp, nlohmann_json::nlohmann_json, Threads::Threads (their CMake packages), and
#   ZLIB::ZLIB (CMake's FindZLIB: deflated entries of zip checkpoints, io/zip_archive.cpp)
# Included by attnzoo's build (Dependencies.cmake) and, installed beside attnzooConfig.cmake, by
# the projects that find_package(attnzoo): they find what attnzoo was built against the same way.
# There, ATTNZOO_PACKAGE_CONFIG is set, and a missing dependency leaves attnzoo not found with
# the reason in attnzoo_NOT_FOUND_MESSAGE (as find_dependency does); in the build it is an error.

macro(_attnzoo_dependency_missing reason)
  if(ATTNZOO_PACKAGE_CONFIG)
    set(attnzoo_FOUND FALSE)
    set(attnzoo_NOT_FOUND_MESSAGE "${reason}")
    return()
  endif()
  message(FATAL_ERROR "${reason}")
endmacro()

macro(_attnzoo_find_package)
  if(ATTNZOO_PACKAGE_CONFIG)
    find_dependency(${ARGN})
  else()
    find_package(${ARGN} REQUIRED)
  endif()
endmacro()

include(${CMAKE_CURRENT_LIST_DIR}/Torch.cmake)
if(NOT ATTNZOO_TORCH_FOUND)
  _attnzoo_dependency_missing(
    "LibTorch not found: set Torch_DIR, or CMAKE_PREFIX_PATH to $(python -c 'import torch.utils; "
    "print(torch.utils.cmake_prefix_path)') (tools/setup.sh does)")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/OpenCV.cmake)
if(NOT ATTNZOO_OPENCV_FOUND)
  _attnzoo_dependency_missing(
    "OpenCV core, imgproc and imgcodecs not found (Debian: libopencv-core-dev, "
    "libopencv-imgproc-dev, libopencv-imgcodecs-dev)")
endif()

find_package(PkgConfig QUIET)
foreach(_attnzoo_lib sndfile soxr)
  if(NOT TARGET attnzoo::${_attnzoo_lib})
    if(PKG_CONFIG_FOUND)
      pkg_check_modules(ATTNZOO_${_attnzoo_lib} QUIET IMPORTED_TARGET ${_attnzoo_lib})
    endif()
    if(NOT TARGET PkgConfig::ATTNZOO_${_attnzoo_lib})
      _attnzoo_dependency_missing(
        "lib${_attnzoo_lib} not found through pkg-config (Debian: libsndfile1-dev, libsoxr-dev)")
    endif()
    add_library(attnzoo::${_attnzoo_lib} INTERFACE IMPORTED)
    target_link_libraries(attnzoo::${_attnzoo_lib} INTERFACE PkgConfig::ATTNZOO_${_attnzoo_lib})
  endif()
endforeach()

_attnzoo_find_package(yaml-cpp CONFIG)
_attnzoo_find_package(nlohmann_json 3.10 CONFIG)
_attnzoo_find_package(Threads)
_attnzoo_find_package(ZLIB)

if(NOT TARGET attnzoo::sentencepiece)
  find_path(ATTNZOO_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
  find_library(ATTNZOO_SENTENCEPIECE_LIBRARY sentencepiece)
  if(NOT ATTNZOO_SENTENCEPIECE_INCLUDE_DIR OR NOT ATTNZOO_SENTENCEPIECE_LIBRARY)
    _attnzoo_dependency_missing("libsentencepiece not found (Debian: libsentencepiece-dev)")
  endif()
  add_library(attnzoo::sentencepiece INTERFACE IMPORTED)
  target_include_directories(attnzoo::sentencepiece SYSTEM INTERFACE
                             ${ATTNZOO_SENTENCEPIECE_INCLUDE_DIR})
  target_link_libraries(attnzoo::sentencepiece INTERFACE ${ATTNZOO_SENTENCEPIECE_LIBRARY})
endif()
