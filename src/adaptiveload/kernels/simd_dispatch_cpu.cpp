// Run-time choice of the CPU SIMD path: what this CPU runs (CPUID, and XCR0 for the OS's
// save of the vector registers, both through the compiler's __builtin_cpu_supports), and
// the AL_SIMD override (scalar | avx2 | avx512 | auto) that tests and benchmarks use to run
// a narrower path on a wider CPU. A request for a path the CPU lacks is lowered, never
// honoured: running it would die with SIGILL.
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/simd_cpu.h"

#if AL_SIMD_X86
#include <cpuid.h>
#endif

namespace adaptiveload {
namespace {

#if AL_SIMD_X86
bool cpu_has_avx2_set() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  unsigned a = 0, b = 0, c = 0,
           d = 0;  // F16C: CPUID.1:ECX (not a __builtin_cpu_supports name in clang 14)
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
bool cpu_has_avx512_set() {
  __builtin_cpu_init();
  return cpu_has_avx2_set() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
#endif

}  // namespace

const char* cpu_simd_name(CpuSimd s) {
  switch (s) {
    case CpuSimd::Scalar:
      return "scalar";
    case CpuSimd::Avx2:
      return "avx2";
    case CpuSimd::Avx512:
      return "avx512";
  }
  return "unknown";
}

bool parse_cpu_simd(const std::string& name, CpuSimd* out) {
  for (CpuSimd s : {CpuSimd::Scalar, CpuSimd::Avx2, CpuSimd::Avx512})
    if (name == cpu_simd_name(s)) {
      *out = s;
      return true;
    }
  return false;
}

bool cpu_simd_supported(CpuSimd s) {
  switch (s) {
    case CpuSimd::Scalar:
      return true;
#if AL_SIMD_X86
    case CpuSimd::Avx2: {
      static const bool ok = cpu_has_avx2_set();
      return ok;
    }
    case CpuSimd::Avx512: {
      static const bool ok = cpu_has_avx512_set();
      return ok;
    }
#else
    case CpuSimd::Avx2:
    case CpuSimd::Avx512:
      return false;
#endif
  }
  return false;
}

CpuSimd cpu_simd_best() {
  if (cpu_simd_supported(CpuSimd::Avx512)) return CpuSimd::Avx512;
  if (cpu_simd_supported(CpuSimd::Avx2)) return CpuSimd::Avx2;
  return CpuSimd::Scalar;
}

CpuSimd resolve_cpu_simd(const char* al_simd, CpuSimd best, std::string* note) {
  if (note != nullptr) note->clear();
  const std::string v = al_simd == nullptr ? std::string() : std::string(al_simd);
  if (v.empty() || v == "auto") return best;
  CpuSimd want = best;
  if (!parse_cpu_simd(v, &want)) {
    if (note != nullptr)
      *note = "AL_SIMD=" + v + " is not one of scalar, avx2, avx512, auto; using " +
              cpu_simd_name(best);
    return best;
  }
  if (static_cast<int32_t>(want) > static_cast<int32_t>(best)) {
    if (note != nullptr)
      *note =
          "AL_SIMD=" + v + " asks for a path this CPU does not run; using " + cpu_simd_name(best);
    return best;
  }
  return want;
}

CpuSimd adaln_cpu_simd() {
  static const CpuSimd chosen = [] {
    std::string note;
    const CpuSimd s = resolve_cpu_simd(std::getenv("AL_SIMD"), cpu_simd_best(), &note);
    if (!note.empty()) std::fprintf(stderr, "adaptiveload: %s\n", note.c_str());
    return s;
  }();
  return chosen;
}

}  // namespace adaptiveload
