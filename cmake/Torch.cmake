# LibTorch as the imported target attnzoo::torch. Included by attnzoo's build and, installed
# beside attnzooConfig.cmake, by the projects that find_package(attnzoo), so both find LibTorch
# the same way.
#
# Where: Torch_DIR when the caller sets it; else CMAKE_PREFIX_PATH (the build passes the pinned
# wheel's torch.utils.cmake_prefix_path); else ATTNZOO_TORCH_DIR_HINT, the folder of the
# TorchConfig.cmake an installed attnzoo was built against.
# ATTNZOO_TORCH_CPU_ONLY: link LibTorch's CPU libraries alone (torch_cpu, c10), not libtorch.so,
# which needs libtorch_cuda.so and, through it, the CUDA libraries of the wheel: on a machine
# without a GPU they cost about 350 MB of memory per process and add to the start-up time
# (docs/reliability.md). CUDA devices are then unavailable to attnzoo and to LibTorch.
# Sets: ATTNZOO_TORCH_FOUND, ATTNZOO_TORCH_DIR (that folder), ATTNZOO_TORCH_INCLUDE_DIRS,
# ATTNZOO_TORCH_LIBRARY_DIR, ATTNZOO_TORCH_HAS_CUDA, Torch_VERSION.
# Also attnzoo::c10: LibTorch's base library alone (devices, scalar types, the c10::Error of
# TORCH_CHECK), for core/, which every library links, the torch-free ones included.
if(TARGET attnzoo::torch)
  return()
endif()
set(ATTNZOO_TORCH_FOUND OFF)

find_package(Torch CONFIG QUIET HINTS ${ATTNZOO_TORCH_DIR_HINT})
if(Torch_FOUND)
  set(ATTNZOO_TORCH_FOUND ON)
  add_library(attnzoo::torch INTERFACE IMPORTED)
  set(ATTNZOO_TORCH_DIR ${Torch_DIR})
  set(ATTNZOO_TORCH_LIBRARY_DIR ${TORCH_INSTALL_PREFIX}/lib)
  if(ATTNZOO_TORCH_CPU_ONLY)
    # torch_cpu and c10 alone: libtorch.so would bring libtorch_cuda.so and the CUDA libraries.
    target_link_libraries(attnzoo::torch INTERFACE torch_cpu_library c10)
    target_compile_options(attnzoo::torch INTERFACE ${TORCH_CXX_FLAGS})
  else()
    target_link_libraries(attnzoo::torch INTERFACE ${TORCH_LIBRARIES})
  endif()
  # The imported `torch` target's include directories are SYSTEM already; TORCH_INCLUDE_DIRS is
  # added again for the plain-variable consumers (CUDA sources).
  set(ATTNZOO_TORCH_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS})
  target_include_directories(attnzoo::torch SYSTEM INTERFACE ${ATTNZOO_TORCH_INCLUDE_DIRS})
  set(ATTNZOO_TORCH_HAS_CUDA OFF)
  if((TARGET torch_cuda OR TORCH_CUDA_LIBRARIES) AND NOT ATTNZOO_TORCH_CPU_ONLY)
    set(ATTNZOO_TORCH_HAS_CUDA ON)
  endif()
else()
  # A CUDA-enabled wheel's TorchConfig insists on a CUDA toolkit. Without one (a plain Debian
  # machine), link the CPU libraries of the same wheel directly: the CUDA parts are then unused.
  set(_attnzoo_torch_roots)
  foreach(dir ${Torch_DIR} ${CMAKE_PREFIX_PATH} ${ATTNZOO_TORCH_DIR_HINT})
    list(APPEND _attnzoo_torch_roots ${dir}/../../..)  # <root>/share/cmake/Torch
    list(APPEND _attnzoo_torch_roots ${dir}/..)        # <root>/share/cmake
  endforeach()
  find_path(ATTNZOO_TORCH_ROOT "share/cmake/Torch/TorchConfig.cmake"
            PATHS ${_attnzoo_torch_roots} NO_DEFAULT_PATH)
  if(ATTNZOO_TORCH_ROOT)
    set(ATTNZOO_TORCH_FOUND ON)
    add_library(attnzoo::torch INTERFACE IMPORTED)
    get_filename_component(ATTNZOO_TORCH_ROOT ${ATTNZOO_TORCH_ROOT} ABSOLUTE)
    set(ATTNZOO_TORCH_DIR ${ATTNZOO_TORCH_ROOT}/share/cmake/Torch)
    set(ATTNZOO_TORCH_LIBRARY_DIR ${ATTNZOO_TORCH_ROOT}/lib)
    message(STATUS "TorchConfig failed (no CUDA toolkit?); linking the CPU libraries of "
                   "${ATTNZOO_TORCH_ROOT}")
    set(ATTNZOO_TORCH_INCLUDE_DIRS
        ${ATTNZOO_TORCH_ROOT}/include ${ATTNZOO_TORCH_ROOT}/include/torch/csrc/api/include)
    target_include_directories(attnzoo::torch SYSTEM INTERFACE ${ATTNZOO_TORCH_INCLUDE_DIRS})
    set(_attnzoo_torch_libs torch torch_cpu c10)
    if(ATTNZOO_TORCH_CPU_ONLY)
      set(_attnzoo_torch_libs torch_cpu c10)
    endif()
    foreach(lib ${_attnzoo_torch_libs})
      find_library(ATTNZOO_TORCH_${lib} ${lib} PATHS ${ATTNZOO_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH)
      target_link_libraries(attnzoo::torch INTERFACE ${ATTNZOO_TORCH_${lib}})
    endforeach()
    target_link_options(attnzoo::torch INTERFACE "LINKER:--no-as-needed")
    target_compile_definitions(attnzoo::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
    set(ATTNZOO_TORCH_HAS_CUDA OFF)
    set(Torch_VERSION "unknown")
  endif()
endif()
if(NOT ATTNZOO_TORCH_FOUND)
  return()
endif()
# libtorch.so of the PyPI wheel exports its own (statically linked) copy of std::filesystem, which
# precedes libstdc++ in the search order of anything linked against it and crashes there
# (std::filesystem::remove_all jumps to address 0). Naming libstdc++ ahead of every object and
# library puts the system's implementation first.
target_link_options(attnzoo::torch INTERFACE
                    "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")

find_library(ATTNZOO_TORCH_C10_LIBRARY c10 PATHS ${ATTNZOO_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH)
add_library(attnzoo::c10 INTERFACE IMPORTED)
target_include_directories(attnzoo::c10 SYSTEM INTERFACE ${ATTNZOO_TORCH_INCLUDE_DIRS})
target_link_libraries(attnzoo::c10 INTERFACE ${ATTNZOO_TORCH_C10_LIBRARY})
