# OpenCV core + imgproc + imgcodecs as the imported target attnzoo::opencv. Included by attnzoo's
# build, by the standalone fuzz build (tests/fuzz/) and, installed beside attnzooConfig.cmake, by
# the projects that find_package(attnzoo).
# Sets: ATTNZOO_OPENCV_FOUND, ATTNZOO_OPENCV_MODULES, ATTNZOO_OPENCV_INCLUDE_DIR,
# ATTNZOO_OPENCV_<module>_LIBRARY, ATTNZOO_OPENCV_VERSION.
#
# Debian ships OpenCV's CMake package only in the libopencv-dev metapackage, which drags in every
# module (contrib, viz, highgui, ...). We need three modules, so find them directly.
if(TARGET attnzoo::opencv)
  return()
endif()
set(ATTNZOO_OPENCV_FOUND OFF)
set(ATTNZOO_OPENCV_MODULES core imgproc imgcodecs)
find_path(ATTNZOO_OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4)
set(_attnzoo_opencv_libraries)
foreach(module ${ATTNZOO_OPENCV_MODULES})
  find_library(ATTNZOO_OPENCV_${module}_LIBRARY opencv_${module})
  if(ATTNZOO_OPENCV_${module}_LIBRARY)
    list(APPEND _attnzoo_opencv_libraries ${ATTNZOO_OPENCV_${module}_LIBRARY})
  endif()
endforeach()
list(LENGTH _attnzoo_opencv_libraries _attnzoo_opencv_count)
if(NOT ATTNZOO_OPENCV_INCLUDE_DIR OR NOT _attnzoo_opencv_count EQUAL 3)
  return()
endif()
set(ATTNZOO_OPENCV_FOUND ON)
add_library(attnzoo::opencv INTERFACE IMPORTED)
target_include_directories(attnzoo::opencv SYSTEM INTERFACE ${ATTNZOO_OPENCV_INCLUDE_DIR})
target_link_libraries(attnzoo::opencv INTERFACE ${_attnzoo_opencv_libraries})
file(STRINGS "${ATTNZOO_OPENCV_INCLUDE_DIR}/opencv2/core/version.hpp" _cv_version_lines
     REGEX "#define CV_VERSION_(MAJOR|MINOR|REVISION) ")
set(ATTNZOO_OPENCV_VERSION "")
foreach(line ${_cv_version_lines})
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" part "${line}")
  string(APPEND ATTNZOO_OPENCV_VERSION ".${part}")
endforeach()
string(SUBSTRING "${ATTNZOO_OPENCV_VERSION}" 1 -1 ATTNZOO_OPENCV_VERSION)
