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

if(ATTNZOO_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
