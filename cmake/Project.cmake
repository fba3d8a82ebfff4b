# Project-wide settings of attnzoo's own targets (never of third-party code): where the build
# puts its outputs, how headers are spelled, and the libraries that make up the installed package.
include_guard(GLOBAL)
include(GNUInstallDirs)

# The repository root (this file's folder's parent), also when the fuzz targets' standalone
# project (tests/fuzz/) includes this file.
get_filename_component(ATTNZOO_SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)

# attnzoo_link_source_folder(<folder> <link>): <link> becomes a symbolic link to the source tree's
# <folder> (made again when it points elsewhere, e.g. after the checkout moved).
function(attnzoo_link_source_folder folder link)
  set(target ${ATTNZOO_SOURCE_DIR}/${folder})
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
    if(current STREQUAL target)
      return()
    endif()
    file(REMOVE ${link})
  elseif(EXISTS ${link})
    message(FATAL_ERROR "${link} exists and is not a link to ${target}: remove it")
  endif()
  get_filename_component(parent ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

# attnzoo_assemble_zoo(<folder>): <folder> becomes the zoo as an install lays it out, made of
# links into the source tree: each folder of configs/ (the YAML configs by family, labels/,
# train/), and assets/'s weights/ and samples/. A folder added to configs/ re-runs CMake.
function(attnzoo_assemble_zoo zoo)
  if(IS_SYMLINK ${zoo})
    file(REMOVE ${zoo})  # the layout of earlier builds: one link to configs/
  endif()
  file(GLOB config_folders LIST_DIRECTORIES true CONFIGURE_DEPENDS ${ATTNZOO_SOURCE_DIR}/configs/*)
  set(names "")
  foreach(path ${config_folders})
    if(IS_DIRECTORY ${path})
      get_filename_component(name ${path} NAME)
      attnzoo_link_source_folder(configs/${name} ${zoo}/${name})
      list(APPEND names ${name})
    endif()
  endforeach()
  foreach(name weights samples)
    attnzoo_link_source_folder(assets/${name} ${zoo}/${name})
    list(APPEND names ${name})
  endforeach()
  file(GLOB present LIST_DIRECTORIES true ${zoo}/*)
  foreach(path ${present})
    get_filename_component(name ${path} NAME)
    if(IS_SYMLINK ${path} AND NOT name IN_LIST names)
      file(REMOVE ${path})  # a folder since removed from the source tree
    endif()
  endforeach()
endfunction()

# The build tree is laid out as an installed prefix: executables in bin/, libraries in lib/, the
# zoo in share/attnzoo (links to the source tree's configs/ and assets/). The zoo is found at run time
# relative to the library that holds the registry (configs/zoo_path.h), so the same rule finds
# it in the build tree and in an install, and nothing absolute is compiled in.
set(ATTNZOO_BUILD_PREFIX ${PROJECT_BINARY_DIR})
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${ATTNZOO_BUILD_PREFIX}/${CMAKE_INSTALL_BINDIR})
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${ATTNZOO_BUILD_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY ${ATTNZOO_BUILD_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set(ATTNZOO_ZOO_INSTALL_DIR ${CMAKE_INSTALL_DATADIR}/attnzoo)
# The paths between the prefix's folders, relative, so that a prefix can move.
file(RELATIVE_PATH ATTNZOO_BINDIR_TO_LIBDIR /p/${CMAKE_INSTALL_BINDIR} /p/${CMAKE_INSTALL_LIBDIR})
file(RELATIVE_PATH ATTNZOO_LIBDIR_TO_ZOO /p/${CMAKE_INSTALL_LIBDIR} /p/${ATTNZOO_ZOO_INSTALL_DIR})
file(RELATIVE_PATH ATTNZOO_BINDIR_TO_ZOO /p/${CMAKE_INSTALL_BINDIR} /p/${ATTNZOO_ZOO_INSTALL_DIR})
attnzoo_assemble_zoo(${ATTNZOO_BUILD_PREFIX}/${ATTNZOO_ZOO_INSTALL_DIR})

# An installed prefix is relocatable: binaries and libraries find attnzoo's libraries through
# $ORIGIN, and LibTorch where it was at build time (it lives outside the prefix, in the venv or
# the user's LibTorch; LD_LIBRARY_PATH points elsewhere).
set(CMAKE_INSTALL_RPATH "$ORIGIN;$ORIGIN/${ATTNZOO_BINDIR_TO_LIBDIR}")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

# Public headers are spelled <attnzoo/<folder>/<file>.h>, in this repository as in an install.
# The source folders stay at the top level; the build tree's include/attnzoo/<folder> are links
# to them, and that include/ is the only include root libraries export to the build tree.
set(ATTNZOO_INCLUDE_TREE ${PROJECT_BINARY_DIR}/include)
set(ATTNZOO_SOURCE_FOLDERS api configs core decoding io kernels layers models preprocess serve train)
foreach(folder ${ATTNZOO_SOURCE_FOLDERS})
  attnzoo_link_source_folder(${folder} ${ATTNZOO_INCLUDE_TREE}/attnzoo/${folder})
endforeach()

# Precompiled LibTorch headers. <torch/torch.h> alone takes about 19 s to parse on this project's
# 2-core CI machine, and nearly every source includes much of it: a ViT source compiles in 12 s
# instead of 24 with it precompiled. It is precompiled twice, for the libraries (-fPIC) and for
# the programs (tests, tools), by two object libraries that carry nothing but LibTorch's flags,
# and every target of the kind reuses it. GCC accepts a precompiled header only where the macros
# defined when it was made are defined alike, hence the bare owners (and no <target>_EXPORTS
# below); macros a target adds are fine. -Winvalid-pch reports a header that goes unused. ccache
# caches both, and the objects that use them (CMakeLists.txt sets its pch_defines sloppiness).
option(ATTNZOO_PRECOMPILED_HEADERS "Precompile LibTorch's headers (libraries and programs)" ON)
set(ATTNZOO_PRECOMPILED <torch/torch.h>)

# Unity builds of the libraries and the CLI: a target's sources are compiled in batches, one
# translation unit each, so the inline code of LibTorch's, CLI11's and nlohmann-json's headers is
# generated once per batch rather than once per source (the CLI's 16 sources take 73 s of CPU in
# two batches against 330 s one by one). The sources of a target therefore share one namespace
# scope: no helper is defined twice. Test programs are batched the same way (their 17 programs
# compiled in 163 s here in batches of 8, 182 s in batches of 4).
option(ATTNZOO_UNITY_BUILD "Compile the libraries, the CLI and the tests in batches (unity build)"
       ON)
set(ATTNZOO_UNITY_BATCH_SIZE 8)

# attnzoo_unity_build(<target> [BATCH <n>]): the target's sources in batches, under
# ATTNZOO_UNITY_BUILD.
function(attnzoo_unity_build target)
  cmake_parse_arguments(ARG "" "BATCH" "" ${ARGN})
  if(NOT ARG_BATCH)
    set(ARG_BATCH ${ATTNZOO_UNITY_BATCH_SIZE})
  endif()
  set_target_properties(${target} PROPERTIES
    UNITY_BUILD ${ATTNZOO_UNITY_BUILD} UNITY_BUILD_BATCH_SIZE ${ARG_BATCH})
endfunction()

# attnzoo_pch_owner(<kind> <out-var>): the object library that makes the precompiled header of
# <kind>, made on first use. SHARED: the libraries', which executables use too (compiled with
# -fPIC like the libraries, as clang's precompiled headers require: a header precompiled at -O3
# serves code compiled at -O1, but not at -O0 and not with -fPIE, the compiler's default for
# executables). TESTS: a sanitizer tree's test programs at -O0 beside libraries at -O1.
function(attnzoo_pch_owner kind out)
  set(owner attnzoo_pch_${kind})
  if(NOT TARGET ${owner})
    set(source ${PROJECT_BINARY_DIR}/pch/empty.cpp)
    if(NOT EXISTS ${source})
      file(WRITE ${source} "// The precompiled LibTorch headers' owner: no code (cmake/Project.cmake).\n")
    endif()
    add_library(${owner} OBJECT ${source})
    target_link_libraries(${owner} PRIVATE attnzoo::torch)
    target_compile_features(${owner} PRIVATE cxx_std_17)
    set_target_properties(${owner} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    if(kind STREQUAL "TESTS")
      target_compile_options(${owner} PRIVATE ${ATTNZOO_TEST_OPTIMIZATION})
    endif()
    target_precompile_headers(${owner} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${ATTNZOO_PRECOMPILED}>")
  endif()
  set(${out} ${owner} PARENT_SCOPE)
endfunction()

# The tests' own code at -O1: what they test is the libraries, compiled as the build type says;
# their own code compiles in three quarters of the time of -O3. In a sanitizer tree, at -O0
# (half the compile time of -O1 with the sanitizers; the libraries keep -O1).
if(ATTNZOO_SANITIZE)
  set(ATTNZOO_TEST_OPTIMIZATION $<$<COMPILE_LANGUAGE:CXX>:-O0>)
else()
  set(ATTNZOO_TEST_OPTIMIZATION $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O1>)
endif()

# attnzoo_target_defaults(<target> [NO_PCH] [TEST]): C++17, -Wall -Wextra (errors under
# ATTNZOO_WERROR), the include tree, the precompiled LibTorch headers (not with NO_PCH: targets
# without C++ sources). Executables (tools, tests, benchmarks) also see the repository root, for
# their own headers ("tools/cli/commands.h"); libraries never do, so a library header that
# reaches outside <attnzoo/...> fails to compile here and not only in an install. TEST: a test
# program, compiled with ATTNZOO_TEST_OPTIMIZATION.
function(attnzoo_target_defaults target)
  cmake_parse_arguments(ARG "NO_PCH;TEST" "" "" ${ARGN})
  target_compile_features(${target} PUBLIC cxx_std_17)
  get_target_property(type ${target} TYPE)
  set(kind SHARED)
  if(type STREQUAL "EXECUTABLE")
    target_include_directories(${target} PRIVATE ${ATTNZOO_INCLUDE_TREE} ${ATTNZOO_SOURCE_DIR})
    # -fPIC, as the libraries: one precompiled header for both (attnzoo_pch_owner).
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
    if(ARG_TEST)
      target_compile_options(${target} PRIVATE ${ATTNZOO_TEST_OPTIMIZATION})
      if(ATTNZOO_SANITIZE AND NOT ATTNZOO_SANITIZE_OPTIMIZATION STREQUAL "-O0")
        set(kind TESTS)
      endif()
    endif()
  else()
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${ATTNZOO_INCLUDE_TREE}>)
    # No <target>_EXPORTS macro (CMake's default for shared libraries): a macro defined for one
    # library and not the others would keep the shared precompiled header from being used.
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON DEFINE_SYMBOL "")
  endif()
  if(ATTNZOO_PRECOMPILED_HEADERS AND NOT ARG_NO_PCH)
    attnzoo_pch_owner(${kind} owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra $<$<BOOL:${ATTNZOO_PRECOMPILED_HEADERS}>:-Winvalid-pch>>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ATTNZOO_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>)
endfunction()

# attnzoo_add_library(<name> [SHARED] SOURCES <files...> HEADERS <files...>)
# One library of the package: the target attnzoo_<name>, used as attnzoo::<name> in this tree
# and by projects that find_package(attnzoo). HEADERS are its public headers, relative to the
# current folder; they are installed as include/attnzoo/<folder>/..., the others stay internal.
# Shared libraries carry the version and the SONAME <major>.<minor>. SHARED forces a shared
# library whatever BUILD_SHARED_LIBS says (the ops of kernels/ register themselves from static
# initialisers, which a static archive would drop).
function(attnzoo_add_library name)
  cmake_parse_arguments(ARG "SHARED" "" "SOURCES;HEADERS" ${ARGN})
  set(type "")
  if(ARG_SHARED)
    set(type SHARED)
  endif()
  set(target attnzoo_${name})
  add_library(${target} ${type} ${ARG_SOURCES})
  add_library(attnzoo::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${name}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  file(RELATIVE_PATH folder ${ATTNZOO_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  list(TRANSFORM ARG_HEADERS PREPEND ${ATTNZOO_INCLUDE_TREE}/attnzoo/${folder}/)
  target_sources(${target} PUBLIC
    FILE_SET HEADERS BASE_DIRS ${ATTNZOO_INCLUDE_TREE} FILES ${ARG_HEADERS})
  attnzoo_target_defaults(${target})
  attnzoo_unity_build(${target})
  set_property(GLOBAL APPEND PROPERTY ATTNZOO_PACKAGE_LIBRARIES ${target})
endfunction()
