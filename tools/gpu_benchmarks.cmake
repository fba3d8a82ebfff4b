# The GPU benchmarks (tools/device_check.sh runs them): the attention kernels against LibTorch's
# SDPA backends, and ViT-B/16 eager and CUDA-graph replays (tools/bench_vit_cuda.py compares it
# with PyTorch eager and torch.compile). Included by tools/CMakeLists.txt and by the
# ATTNZOO_KERNELS_ONLY build.
add_executable(bench_flash ${CMAKE_CURRENT_LIST_DIR}/bench_flash.cpp)
target_link_libraries(bench_flash PRIVATE attnzoo::kernels)
attnzoo_target_defaults(bench_flash)
if(ATTNZOO_WITH_CUDA)
  add_executable(bench_vit_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_vit_cuda.cpp)
  target_link_libraries(bench_vit_cuda PRIVATE attnzoo::models)
  attnzoo_target_defaults(bench_vit_cuda)
endif()
