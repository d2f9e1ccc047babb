// Run-time choice of the SIMD path of the optimised CPU adaLN (adaln_fwd_cpu /
// adaln_bwd_cpu), and entry points that run an explicit path (tests, benchmarks).
//
// The library is built for the baseline target of its architecture; the vector paths are
// compiled with per-function target attributes (simd_cpu.h) and run only where the CPU and
// OS have them. AL_SIMD=scalar|avx2|avx512|auto (environment) narrows the choice; a path the
// CPU lacks is never run. Paths differ in summation order, each within the tolerance rule,
// and each is deterministic across thread counts.
#pragma once

#include <cstdint>
#include <string>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {

enum class CpuSimd : int32_t {
  Scalar = 0,  // one lane, any CPU
  Avx2 = 1,    // x86-64 AVX2 + FMA + F16C, 8 fp32 lanes
  Avx512 = 2,  // x86-64 AVX-512 F + BW + VL (and the AVX2 set), 16 fp32 lanes
};

// "scalar" / "avx2" / "avx512".
const char* cpu_simd_name(CpuSimd s);
// Reads one of those names (case-sensitive) into *out; false for anything else.
bool parse_cpu_simd(const std::string& name, CpuSimd* out);
// True when this build has the path and this CPU and OS run it (CPUID, XCR0).
bool cpu_simd_supported(CpuSimd s);
// The widest supported path.
CpuSimd cpu_simd_best();
// The path an AL_SIMD value selects, given the best supported one: null, "" or "auto" ->
// best; "scalar" / "avx2" / "avx512" -> that path, lowered to best if the CPU lacks it;
// anything else -> best. *note (if given) gets a one-line explanation when the request was
// not honoured, and is cleared otherwise.
CpuSimd resolve_cpu_simd(const char* al_simd, CpuSimd best, std::string* note = nullptr);
// The path adaln_{fwd,bwd}_cpu(p) run: resolve_cpu_simd(getenv("AL_SIMD"), cpu_simd_best()),
// decided once per process; a note, if any, is printed once to stderr.
CpuSimd adaln_cpu_simd();

// The optimised CPU path on an explicit SIMD path (tests, benchmarks). Throws
// std::invalid_argument when !cpu_simd_supported(path).
void adaln_fwd_cpu(const AdalnParams& p, CpuSimd path);
void adaln_bwd_cpu(const AdalnParams& p, CpuSimd path);

}  // namespace adaptiveload
