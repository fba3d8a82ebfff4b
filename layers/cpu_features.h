// What the CPU offers, as LibTorch detects it (not installed: none of it is API).
#pragma once

namespace attnzoo::detail {

// Whether the CPU has the instruction-set feature LibTorch names `feature` in
// at::cpu::get_cpu_capabilities() ("avx2", "avx512_vnni", "amx_int8", ...); false for a name it
// does not know.
bool cpu_has(const char* feature);

}  // namespace attnzoo::detail
