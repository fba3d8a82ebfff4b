// Keeps the memory of freed tensors in the process for the next ones, rather than handing it back
// to the kernel and faulting it in again. LibTorch's CPU tensors come from malloc; glibc's malloc
// maps blocks above a threshold it raises at run time (up to 32 MiB) with their own mmap and
// returns the top of its heap whenever more than twice that lies free there. A forward pass frees
// and allocates activations of a few MiB each, layer after layer, so with the defaults some of them
// start as fresh pages every time: 2,200 to 5,400 page faults a forward of ViT-Ti at batch 8 on
// the 2-core Zen 5 (docs/benchmarks.md), each a trap and 4 KiB zeroed. ONNX Runtime and OpenVINO
// keep arenas of their own for the same reason. Torch-free.
#pragma once

namespace attnzoo {

// Where the C library is glibc: blocks up to kHeapBlockLimit come from the heap (larger ones are
// still mapped, and unmapped when freed), and up to kHeapKeepLimit of free memory at the heap's
// top is kept (more is returned). The resident memory stays at most the forward's peak plus that.
// Process-wide and idempotent; `attnzoo` calls it at the start of every command but `serve` (a
// server unloads models, and what it frees it hands back) unless the environment has
// ATTNZOO_KEEP_FREED_MEMORY=0; a program embedding the library may call it, or
// set glibc's own GLIBC_TUNABLES=glibc.malloc.mmap_threshold=...:glibc.malloc.trim_threshold=....
// Returns whether the settings took (false elsewhere than glibc).
bool retain_freed_heap_memory();

inline constexpr long kHeapBlockLimit = 32L << 20;
inline constexpr long kHeapKeepLimit = 256L << 20;

}  // namespace attnzoo
