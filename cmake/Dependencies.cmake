# Every third-party dependency of attnzoo is found here, once, and exposed as an imported target:
#   attnzoo::torch        LibTorch from the pinned torch wheel (see Torch.cmake)
#   attnzoo::opencv       OpenCV core + imgproc + imgcodecs (Debian's -dev packages)
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

# Debian ships OpenCV's CMake package only in the libopencv-dev metapackage, which drags in every
# module (contrib, viz, highgui, ...). We need three modules, so find them directly.
find_path(ATTNZOO_OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
add_library(attnzoo_opencv INTERFACE)
target_include_directories(attnzoo_opencv SYSTEM INTERFACE ${ATTNZOO_OPENCV_INCLUDE_DIR})
foreach(module core imgproc imgcodecs)
  find_library(ATTNZOO_OPENCV_${module}_LIBRARY opencv_${module} REQUIRED)
  target_link_libraries(attnzoo_opencv INTERFACE ${ATTNZOO_OPENCV_${module}_LIBRARY})
endforeach()
add_library(attnzoo::opencv ALIAS attnzoo_opencv)
file(STRINGS "${ATTNZOO_OPENCV_INCLUDE_DIR}/opencv2/core/version.hpp" _cv_version_lines
     REGEX "#define CV_VERSION_(MAJOR|MINOR|REVISION) ")
set(ATTNZOO_OPENCV_VERSION "")
foreach(line ${_cv_version_lines})
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" part "${line}")
  string(APPEND ATTNZOO_OPENCV_VERSION ".${part}")
endforeach()
string(SUBSTRING "${ATTNZOO_OPENCV_VERSION}" 1 -1 ATTNZOO_OPENCV_VERSION)

if(ATTNZOO_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
