# OpenCV core + imgproc + imgcodecs as the imported target attnzoo::opencv, and its version in
# ATTNZOO_OPENCV_VERSION. Included by Dependencies.cmake, and by the standalone fuzz build
# (tests/fuzz/) for the image frontend's target.
include_guard(GLOBAL)

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
