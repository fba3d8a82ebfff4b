# The installed package. `cmake --install build --prefix P` gives a relocatable prefix:
#   P/lib/libattnzoo_<name>.so.<version>  the libraries (SONAME <major>.<minor>)
#   P/lib/libattnzoo_sentencepiece.so     the module decoding loads for SentencePiece models
#   P/include/attnzoo/<folder>/*.h        their public headers
#   P/lib/cmake/attnzoo/                  attnzooConfig.cmake: attnzoo::attnzoo (everything) and
#                                         attnzoo::<name> per library, re-finding their
#                                         dependencies as the build did (Torch.cmake, ...)
#   P/lib/pkgconfig/attnzoo.pc            for builds without CMake
#   P/bin/attnzoo                         the CLI
#   P/share/attnzoo/                      the zoo: model YAMLs, labels, shipped weights, samples
# tests/install/ installs it, moves it, and builds tools/examples/ and a pkg-config program
# against it.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

get_property(ATTNZOO_PACKAGE_LIBRARIES GLOBAL PROPERTY ATTNZOO_PACKAGE_LIBRARIES)

# attnzoo::attnzoo: every library, for users of the C++ APIs who want one name.
add_library(attnzoo_umbrella INTERFACE)
add_library(attnzoo::attnzoo ALIAS attnzoo_umbrella)
set_target_properties(attnzoo_umbrella PROPERTIES EXPORT_NAME attnzoo)
target_link_libraries(attnzoo_umbrella INTERFACE ${ATTNZOO_PACKAGE_LIBRARIES})

set(_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/attnzoo)
install(TARGETS ${ATTNZOO_PACKAGE_LIBRARIES} attnzoo_umbrella
  EXPORT attnzooTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT attnzooTargets NAMESPACE attnzoo:: DESTINATION ${_package_dir})

# The LibTorch attnzoo was built against, recorded as a hint for the projects that use it.
set(ATTNZOO_TORCH_DIR_HINT ${ATTNZOO_TORCH_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attnzooConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/attnzooConfig.cmake
  INSTALL_DESTINATION ${_package_dir}
  PATH_VARS ATTNZOO_ZOO_INSTALL_DIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/attnzooConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/attnzooConfig.cmake
  ${PROJECT_BINARY_DIR}/package/attnzooConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/LibraryDependencies.cmake
  ${CMAKE_CURRENT_LIST_DIR}/Torch.cmake
  ${CMAKE_CURRENT_LIST_DIR}/OpenCV.cmake
  DESTINATION ${_package_dir})

# pkg-config: the same libraries, dependents first, and the flags of LibTorch and OpenCV as found
# here. Paths inside the prefix are relative to the .pc file (pkg-config's ${pcfiledir}).
set(_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH ATTNZOO_PC_TO_PREFIX /p/${_pc_dir} /p)
string(REGEX REPLACE "/$" "" ATTNZOO_PC_TO_PREFIX ${ATTNZOO_PC_TO_PREFIX})
set(_libs ${ATTNZOO_PACKAGE_LIBRARIES})
list(REVERSE _libs)  # added in dependency order (CMakeLists.txt)
list(REMOVE_ITEM _libs attnzoo_kernels)
list(TRANSFORM _libs PREPEND -l)
list(JOIN _libs " " ATTNZOO_PC_LIBS)
set(_torch_libs torch torch_cpu c10)
if(ATTNZOO_TORCH_CPU_ONLY)
  set(_torch_libs torch_cpu c10)
endif()
if(ATTNZOO_TORCH_HAS_CUDA)
  list(APPEND _torch_libs torch_cuda c10_cuda)
endif()
list(TRANSFORM _torch_libs PREPEND -l)
list(JOIN _torch_libs "," ATTNZOO_PC_TORCH_LIBS)
set(ATTNZOO_PC_CFLAGS "")
foreach(dir ${ATTNZOO_TORCH_INCLUDE_DIRS} ${ATTNZOO_OPENCV_INCLUDE_DIR})
  string(APPEND ATTNZOO_PC_CFLAGS " -isystem ${dir}")
endforeach()
set(ATTNZOO_PC_OTHER_LIBS "")
foreach(module ${ATTNZOO_OPENCV_MODULES})
  string(APPEND ATTNZOO_PC_OTHER_LIBS " ${ATTNZOO_OPENCV_${module}_LIBRARY}")
endforeach()
# Static archives need what they link themselves on every link line; shared libraries carry it.
if(BUILD_SHARED_LIBS)
  set(ATTNZOO_PC_REQUIRES "nlohmann_json")
  set(ATTNZOO_PC_REQUIRES_PRIVATE "sndfile soxr yaml-cpp")
else()
  set(ATTNZOO_PC_REQUIRES "nlohmann_json sndfile soxr yaml-cpp")
  set(ATTNZOO_PC_REQUIRES_PRIVATE "")
  string(APPEND ATTNZOO_PC_OTHER_LIBS " ${ATTNZOO_SENTENCEPIECE_LIBRARY} -l${CMAKE_DL_LIBS}")
  # models/cuda_graph.cpp calls the CUDA runtime itself: LibTorch's, as the build linked it.
  if(ATTNZOO_TORCH_HAS_CUDA AND TARGET CUDA::cudart)
    get_target_property(_cudart CUDA::cudart IMPORTED_LOCATION)
    if(_cudart)
      string(APPEND ATTNZOO_PC_OTHER_LIBS " ${_cudart}")
    endif()
  endif()
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/attnzoo.pc.in ${PROJECT_BINARY_DIR}/package/attnzoo.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/attnzoo.pc DESTINATION ${_pc_dir})

# The zoo: what configs/ holds besides its C++ sources, the training runs of configs/train/ and
# the serve configs of configs/serve/ (their paths are the repository's), and the shipped weights
# and samples of assets/.
install(DIRECTORY ${ATTNZOO_SOURCE_DIR}/configs/ DESTINATION ${ATTNZOO_ZOO_INSTALL_DIR}
  FILES_MATCHING
    PATTERN "*.yaml" PATTERN "*.yml" PATTERN "*.txt" PATTERN "*.md"
    PATTERN "CMakeLists.txt" EXCLUDE
    PATTERN "train" EXCLUDE
    PATTERN "serve" EXCLUDE)
install(DIRECTORY ${ATTNZOO_SOURCE_DIR}/assets/weights ${ATTNZOO_SOURCE_DIR}/assets/samples
  DESTINATION ${ATTNZOO_ZOO_INSTALL_DIR})
