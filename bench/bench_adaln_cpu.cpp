// Benchmark of the fused adaLN CPU path (llm.c style), every SIMD path side by side.
//
// 1. checks every SIMD path this CPU runs (AVX-512, AVX2, scalar) and every pass (fwd, bwd;
//    bf16, f16, f32) against the fp64 reference on small awkward shapes, exits 1 on a failure;
// 2. per configuration, measures the copy bandwidth of this machine on the same bytes
//    (memcpy x -> y, split over the same OpenMP threads as the kernel), then times the
//    kernel on each path: warm-up, `--reps` repetitions, median (and the fastest, in JSON);
// 3. prints one line per (shape, B, dtype, mode) with, for each path, ms, effective GB/s
//    (bytes that must move: fwd reads x and writes y, bwd reads x, dy and writes dx) and the
//    fraction of the copy bandwidth, then the path adaln_fwd_cpu / adaln_bwd_cpu dispatch to
//    (AL_SIMD=scalar|avx2|avx512 narrows it) and its time relative to the fastest path;
//    then one JSON line per (configuration, path).
//
//   bench_adaln_cpu                 all shapes, B in {1, 4}, bf16 and f32, every path
//   bench_adaln_cpu --quick         Wan 1.3B 480p, B = 1, bf16 only
//   bench_adaln_cpu --shapes=wan1.3b-480p,image --batches=1 --dtypes=bf16 --reps=7
//   --paths=avx512,avx2 times only those paths (a path this CPU lacks is reported, skipped);
//   --max-gb=N skips configurations whose tensors need more than N GiB (default 8);
//   --layouts=sample,seg: the modulation per sample (B samples of L rows, [B, D]) and / or
//   per segment (the same B * L rows as a packed batch cut into --segments=n segments of
//   mixed lengths, one of them empty, cu_seqlens, [n, D]; default 8), each beside the copy;
//   a seg line also prints the bytes of the six [N, D] fp32 modulation tensors of a Wan
//   block that per-token modulation would materialise, against the six [n, D].
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

using namespace adaptiveload;

namespace {

struct Shape {
  const char* name;
  int64_t L, D;  // tokens per sample, hidden size
};
// Tokens per sample of the target models (latent frames x patches).
const Shape kShapes[] = {
    {"wan1.3b-480p", 32760, 1536},
    {"wan14b-720p", 75600, 5120},
    {"hunyuan-720p", 118800, 3072},
    {"image", 1560, 1536},
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = s.find(',', a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median and fastest of `reps` timed calls after one warm-up. On a shared machine the
// fastest repetition is the one least disturbed by other processes.
struct Timing {
  double median_ms = 0, min_ms = 0;
};

template <typename F>
Timing time_ms(F&& f, int reps) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double a = now_ms();
    f();
    t.push_back(now_ms() - a);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

// Page-aligned, first-touched by the same static thread partition the kernels use.
struct Mem {
  void* p = nullptr;
  size_t n = 0;
  explicit Mem(size_t bytes) : n(bytes) {
    p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
    if (p == nullptr) {
      std::fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
      std::exit(2);
    }
  }
  ~Mem() { std::free(p); }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
};

void fill(void* p, DType t, int64_t count, uint64_t seed, float lo, float hi) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = uint64_t(i) * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    const float v = lo + (hi - lo) * float(z >> 40) * (1.f / 16777216.f);
    if (t == DType::F32)
      static_cast<float*>(p)[i] = v;
    else if (t == DType::BF16)
      static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
    else
      static_cast<uint16_t*>(p)[i] = float_to_f16(v);
  }
}

// memcpy split over the threads: each thread copies its contiguous slice.
void parallel_copy(void* dst, const void* src, size_t bytes) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const size_t a = bytes * size_t(tid) / size_t(nt) / 64 * 64;
    const size_t b = tid + 1 == nt ? bytes : bytes * size_t(tid + 1) / size_t(nt) / 64 * 64;
    std::memcpy(static_cast<char*>(dst) + a, static_cast<const char*>(src) + a, b - a);
  }
}

// n segment lengths summing to N, mixed (weights 1 .. 8 from a fixed hash), the second
// one empty: a packed batch of clips and images of different sizes.
std::vector<int64_t> segment_offsets(int64_t N, int64_t n) {
  std::vector<double> w(static_cast<size_t>(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = uint64_t(i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
    w[size_t(i)] = (n > 1 && i == 1) ? 0.0 : double(1 + (z >> 61));
    total += w[size_t(i)];
  }
  std::vector<int64_t> cu(size_t(n + 1), 0);
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += w[size_t(i)];
    cu[size_t(i + 1)] = i + 1 == n ? N : int64_t(double(N) * acc / total);
  }
  return cu;
}

bool run_checks(const std::vector<CpuSimd>& paths) {
  using adaln_check::AdalnCase;
  bool ok = true;
  std::printf("# checks against the fp64 reference (tolerance rule of DESIGN.md)\n");
  for (CpuSimd path : paths)
    for (DType xt : {DType::BF16, DType::F16, DType::F32})
      for (int64_t D : {1536, 1500})
        for (bool tok : {false, true}) {
          AdalnCase c;
          c.batch = 2;
          c.L = 301;
          c.D = D;
          c.per_token = tok;
          c.x_dtype = xt;
          c.weight = c.bias = D == 1500;
          const auto f = adaln_check::check_adaln_fwd(
              c, [&](const AdalnParams& p) { adaln_fwd_cpu(p, path); });
          const auto b = adaln_check::check_adaln_bwd(
              c, [&](const AdalnParams& p) { adaln_bwd_cpu(p, path); });
          std::printf("check %-6s %-40s fwd %s  bwd %s\n", cpu_simd_name(path), c.name().c_str(),
                      f.ok ? "ok" : "FAIL", b.ok ? "ok" : "FAIL");
          if (!f.ok) std::printf("%s", f.report.c_str());
          if (!b.ok) std::printf("%s", b.report.c_str());
          ok = ok && f.ok && b.ok;
        }
  for (CpuSimd path : paths)  // segments: empty, one row, long ones
    for (DType xt : {DType::BF16, DType::F32}) {
      AdalnCase c;
      c.segments = {0, 1, 300, 17, 0, 285};
      c.D = 1536;
      c.x_dtype = xt;
      const auto f =
          adaln_check::check_adaln_fwd(c, [&](const AdalnParams& p) { adaln_fwd_cpu(p, path); });
      const auto b =
          adaln_check::check_adaln_bwd(c, [&](const AdalnParams& p) { adaln_bwd_cpu(p, path); });
      std::printf("check %-6s %-40s fwd %s  bwd %s\n", cpu_simd_name(path), c.name().c_str(),
                  f.ok ? "ok" : "FAIL", b.ok ? "ok" : "FAIL");
      ok = ok && f.ok && b.ok;
    }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> shapes = {"wan1.3b-480p", "wan14b-720p", "hunyuan-720p", "image"};
  std::vector<std::string> dtypes = {"bf16", "f32"}, modes = {"fwd", "bwd"};
  std::vector<std::string> path_names = {"avx512", "avx2", "scalar"};
  std::vector<int64_t> batches = {1, 4};
  std::vector<std::string> layouts = {"sample"};
  int64_t nseg = 8;
  int reps = 5;
  double max_gb = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* k) {
      return a.rfind(k, 0) == 0 ? a.substr(std::strlen(k)) : std::string();
    };
    if (a == "--quick") {
      shapes = {"wan1.3b-480p"};
      batches = {1};
      dtypes = {"bf16"};
    } else if (!val("--shapes=").empty()) {
      shapes = split(val("--shapes="));
    } else if (!val("--dtypes=").empty()) {
      dtypes = split(val("--dtypes="));
    } else if (!val("--modes=").empty()) {
      modes = split(val("--modes="));
    } else if (!val("--paths=").empty()) {
      path_names = split(val("--paths="));
    } else if (!val("--batches=").empty()) {
      batches.clear();
      for (const auto& b : split(val("--batches="))) batches.push_back(std::atoll(b.c_str()));
    } else if (!val("--reps=").empty()) {
      reps = std::max(1, std::atoi(val("--reps=").c_str()));
    } else if (!val("--max-gb=").empty()) {
      max_gb = std::atof(val("--max-gb=").c_str());
    } else if (!val("--layouts=").empty()) {
      layouts = split(val("--layouts="));
    } else if (!val("--segments=").empty()) {
      nseg = std::max<int64_t>(1, std::atoll(val("--segments=").c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--shapes=a,b] [--batches=1,4] [--dtypes=bf16,f16,f32] "
                   "[--modes=fwd,bwd] [--paths=avx512,avx2,scalar] [--reps=N] [--max-gb=N] "
                   "[--layouts=sample,seg] [--segments=n]\n  shapes:",
                   argv[0]);
      for (const Shape& s : kShapes) std::fprintf(stderr, " %s", s.name);
      std::fprintf(stderr, "\n");
      return 2;
    }
  }
  std::vector<CpuSimd> paths;
  for (const std::string& n : path_names) {
    CpuSimd s;
    if (!parse_cpu_simd(n, &s)) {
      std::fprintf(stderr, "unknown SIMD path %s (avx512, avx2, scalar)\n", n.c_str());
      return 2;
    }
    if (cpu_simd_supported(s))
      paths.push_back(s);
    else
      std::printf("# path %s: not run, this CPU (or build) lacks it\n", n.c_str());
  }
  const CpuSimd dispatched = adaln_cpu_simd();
  const char* al_simd = std::getenv("AL_SIMD");
  std::printf("# adaLN CPU benchmark: %d OpenMP threads; paths:", omp_get_max_threads());
  for (CpuSimd s : paths) std::printf(" %s", cpu_simd_name(s));
  std::printf("; dispatched: %s (best on this CPU %s, AL_SIMD=%s)\n", cpu_simd_name(dispatched),
              cpu_simd_name(cpu_simd_best()), al_simd ? al_simd : "unset");
  std::vector<std::pair<std::string, std::string>> runs;  // (layout, dtype)
  for (const std::string& lay : layouts)
    for (const std::string& dn : dtypes) runs.emplace_back(lay, dn);
  if (!run_checks(paths)) {
    std::printf("CHECK FAILED\n");
    return 1;
  }
  std::printf("# %-13s %2s %8s %5s %-4s %-3s %-6s %8s", "shape", "B", "rows", "D", "type", "mod",
              "layout", "copyGB/s");
  for (CpuSimd s : paths)
    std::printf(" | %9s %7s %5s", (std::string(cpu_simd_name(s)) + " ms").c_str(), "GB/s", "copy");
  std::printf(" | dispatched  vs-fastest\n");
  std::vector<std::string> json;
  for (const std::string& sname : shapes) {
    const Shape* sh = nullptr;
    for (const Shape& s : kShapes)
      if (sname == s.name) sh = &s;
    if (sh == nullptr) {
      std::fprintf(stderr, "unknown shape %s\n", sname.c_str());
      return 2;
    }
    for (int64_t B : batches)
      for (const auto& [lay, dn] : runs) {
        const DType t = dn == "f32" ? DType::F32 : dn == "f16" ? DType::F16 : DType::BF16;
        const int64_t N = B * sh->L, D = sh->D, count = N * D;
        const size_t es = dtype_size(t), tbytes = size_t(count) * es;
        const bool seg = lay == "seg";
        const std::vector<int64_t> cu = segment_offsets(N, nseg);
        const int64_t mrows = seg ? nseg : B;  // rows of the modulation
        if (seg && dn == dtypes.front())
          std::printf(
              "# %s B=%lld as %lld segments: six fp32 modulation tensors per token %.1f MiB, "
              "per segment %.1f KiB\n",
              sh->name, (long long)B, (long long)nseg, 6.0 * double(N * D) * 4 / (1 << 20),
              6.0 * double(nseg * D) * 4 / 1024);
        for (const std::string& mode : modes) {
          const bool bwd = mode == "bwd";
          const double need_gb = double(tbytes) * (bwd ? 3 : 2) / (1 << 30);
          if (need_gb > max_gb) {
            std::printf(
                "  %-13s %2lld %8lld %5lld %-4s %-3s %-6s skipped: needs %.1f GiB > "
                "--max-gb=%.0f\n",
                sh->name, (long long)B, (long long)N, (long long)D, dn.c_str(), mode.c_str(),
                lay.c_str(), need_gb, max_gb);
            continue;
          }
          Mem x(tbytes), out(tbytes), scale(size_t(mrows * D) * 4), shift(size_t(mrows * D) * 4);
          Mem mean(size_t(N) * 4), rstd(size_t(N) * 4);
          fill(x.p, t, count, 1, -2.f, 2.f);
          fill(out.p, t, count, 2, 0.f, 0.f);
          fill(scale.p, DType::F32, mrows * D, 3, -0.5f, 0.5f);
          fill(shift.p, DType::F32, mrows * D, 4, -0.5f, 0.5f);
          AdalnParams p;
          p.rows = N;
          p.dim = D;
          p.batch = mrows;
          p.rows_per_sample = seg ? 0 : sh->L;
          if (seg) {
            p.cu_seqlens = cu.data();
            p.cu_seqlens_i64 = true;
          }
          p.x_dtype = t;
          p.mod_dtype = DType::F32;  // Wan keeps its modulation in fp32
          p.x = x.p;
          p.scale = scale.p;
          p.shift = shift.p;
          p.y = out.p;
          p.mean = static_cast<float*>(mean.p);
          p.rstd = static_cast<float*>(rstd.p);
          adaln_set_contiguous_strides(p);
          adaln_fwd_cpu(p);  // saved stats for the backward
          const double copy_ms =
              time_ms([&] { parallel_copy(out.p, x.p, tbytes); }, reps).median_ms;
          const double copy_gbps = 2.0 * double(tbytes) / (copy_ms * 1e6);
          Mem dy(bwd ? tbytes : 1), ds(size_t(mrows * D) * 4), dt(size_t(mrows * D) * 4);
          if (bwd) {
            fill(dy.p, t, count, 5, -1.f, 1.f);
            p.dy = dy.p;
            p.dx = out.p;  // the y buffer is free now
            p.dscale = ds.p;
            p.dshift = dt.p;
          }
          const size_t moved = (bwd ? 3 : 2) * tbytes;
          std::printf("  %-13s %2lld %8lld %5lld %-4s %-3s %-6s %8.2f", sh->name, (long long)B,
                      (long long)N, (long long)D, dn.c_str(), mode.c_str(), lay.c_str(), copy_gbps);
          std::vector<double> ms(paths.size());
          for (size_t k = 0; k < paths.size(); ++k) {
            const CpuSimd path = paths[k];
            const Timing tk = bwd ? time_ms([&] { adaln_bwd_cpu(p, path); }, reps)
                                  : time_ms([&] { adaln_fwd_cpu(p, path); }, reps);
            ms[k] = tk.median_ms;
            const double gbps = double(moved) / (ms[k] * 1e6), frac = gbps / copy_gbps;
            std::printf(" | %9.3f %7.2f %4.0f%%", ms[k], gbps, 100 * frac);
            std::fflush(stdout);
            char line[640];
            std::snprintf(
                line, sizeof line,
                "{\"bench\":\"adaln_cpu\",\"shape\":\"%s\",\"B\":%lld,\"rows\":%lld,\"D\":%lld,"
                "\"dtype\":\"%s\",\"mod_dtype\":\"f32\",\"layout\":\"%s\",\"segments\":%lld,"
                "\"mode\":\"%s\",\"simd\":\"%s\","
                "\"dispatched\":\"%s\",\"ms\":%.4f,\"gbps\":%.3f,\"copy_gbps\":%.3f,"
                "\"frac_copy\":%.4f,\"ms_min\":%.4f,\"threads\":%d,\"reps\":%d}",
                sh->name, (long long)B, (long long)N, (long long)D, dn.c_str(), lay.c_str(),
                (long long)(seg ? nseg : 0), mode.c_str(), cpu_simd_name(path),
                cpu_simd_name(dispatched), ms[k], gbps, copy_gbps, frac, tk.min_ms,
                omp_get_max_threads(), reps);
            json.push_back(line);
          }
          // The dispatched path's time over the fastest path's (1.00: dispatch picked the best).
          std::string rel = "-";
          const double best = ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end());
          for (size_t k = 0; k < paths.size(); ++k)
            if (paths[k] == dispatched) {
              char b[32];
              std::snprintf(b, sizeof b, "%.2fx", ms[k] / best);
              rel = b;
            }
          std::printf(" | %-10s %s\n", cpu_simd_name(dispatched), rel.c_str());
          std::fflush(stdout);
        }
      }
  }
  for (const std::string& j : json) std::printf("%s\n", j.c_str());
  return 0;
}
