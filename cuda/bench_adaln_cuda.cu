// Benchmark of the fused adaLN CUDA kernels (llm.c style).
//
// 1. checks fwd and bwd against the fp64 CPU reference on small awkward shapes (exit 1 on
//    a failure);
// 2. per configuration, measures the device copy bandwidth on the same bytes
//    (cudaMemcpyAsync device-to-device of the x tensor), then times the kernel with CUDA
//    events: warm-up, `--reps` repetitions, median;
// 3. prints one line per (shape, B, dtype, mode): ms, effective GB/s (fwd: read x + write
//    y; bwd: read x, dy + write dx), the copy GB/s and the fraction; then JSON lines.
//
//   bench_adaln_cuda [--quick] [--shapes=a,b] [--batches=1,4] [--dtypes=bf16,f32]
//                    [--modes=fwd,bwd] [--reps=N] [--max-gb=N] [--no-check]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adaln_cuda.h"
#include "adaln_cuda_testing.h"
#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"

using namespace adaptiveload;
using cuda_testing::cuda_ok;

namespace {

struct Shape {
  const char* name;
  int64_t L, D;
};
const Shape kShapes[] = {
    {"wan1.3b-480p", 32760, 1536},
    {"wan14b-720p", 75600, 5120},
    {"hunyuan-720p", 118800, 3072},
    {"image", 1560, 1536},
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (true) {
    const size_t b = s.find(',', a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

template <typename F>
double median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "event");
  cuda_ok(cudaEventCreate(&b), "event");
  f();  // warm-up
  cuda_ok(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cuda_ok(cudaEventSynchronize(b), "timed run");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void fill_kernel(unsigned short* p, int64_t n, unsigned seed, bool f32) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    unsigned z = unsigned(i) * 2654435761u + seed;
    z ^= z >> 15;
    const float v = float(z & 0xffff) / 65536.f * 2.f - 1.f;
    if (f32) {
      reinterpret_cast<float*>(p)[i] = v;
    } else {
      unsigned u = __float_as_uint(v);
      p[i] = (unsigned short)(u >> 16);  // a bf16 / valid-ish f16 bit pattern; values do not matter
                                         // for timing
    }
  }
}

void fill(void* p, DType t, int64_t n, unsigned seed) {
  if (n == 0) return;
  if (t == DType::F16) {
    // f16 from the top bits of a float would make many infs: use small uniform values
    std::vector<unsigned short> h(size_t(std::min<int64_t>(n, 1 << 20)));
    for (size_t i = 0; i < h.size(); ++i)
      h[i] = (unsigned short)(0x3000 + ((i * 2654435761u + seed) % 0x0c00));
    for (int64_t off = 0; off < n; off += int64_t(h.size()))
      cuda_ok(cudaMemcpy(static_cast<unsigned short*>(p) + off, h.data(),
                         size_t(std::min<int64_t>(int64_t(h.size()), n - off)) * 2,
                         cudaMemcpyHostToDevice),
              "fill");
    return;
  }
  fill_kernel<<<1024, 256>>>(static_cast<unsigned short*>(p), n, seed, t == DType::F32);
  cuda_ok(cudaGetLastError(), "fill");
}

bool run_checks() {
  using adaln_check::AdalnCase;
  bool ok = true;
  std::printf("# checks against the fp64 CPU reference (tolerance rule of DESIGN.md)\n");
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
        const auto f = adaln_check::check_adaln_fwd(c, cuda_testing::run_fwd_cuda);
        const auto b = adaln_check::check_adaln_bwd(c, cuda_testing::run_bwd_cuda);
        std::printf("check %-40s fwd %s  bwd %s\n", c.name().c_str(), f.ok ? "ok" : "FAIL",
                    b.ok ? "ok" : "FAIL");
        if (!f.ok) std::printf("%s", f.report.c_str());
        if (!b.ok) std::printf("%s", b.report.c_str());
        ok = ok && f.ok && b.ok;
      }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> shapes = {"wan1.3b-480p", "wan14b-720p", "hunyuan-720p", "image"};
  std::vector<std::string> dtypes = {"bf16", "f32"}, modes = {"fwd", "bwd"};
  std::vector<int64_t> batches = {1, 4};
  int reps = 20;
  double max_gb = 60;
  bool check = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* k) {
      return a.rfind(k, 0) == 0 ? a.substr(std::strlen(k)) : std::string();
    };
    if (a == "--quick") {
      shapes = {"wan1.3b-480p"};
      batches = {1};
      dtypes = {"bf16"};
    } else if (a == "--no-check") {
      check = false;
    } else if (!val("--shapes=").empty()) {
      shapes = split(val("--shapes="));
    } else if (!val("--dtypes=").empty()) {
      dtypes = split(val("--dtypes="));
    } else if (!val("--modes=").empty()) {
      modes = split(val("--modes="));
    } else if (!val("--batches=").empty()) {
      batches.clear();
      for (const auto& b : split(val("--batches="))) batches.push_back(std::atoll(b.c_str()));
    } else if (!val("--reps=").empty()) {
      reps = std::max(1, std::atoi(val("--reps=").c_str()));
    } else if (!val("--max-gb=").empty()) {
      max_gb = std::atof(val("--max-gb=").c_str());
    } else {
      std::fprintf(stderr, "unknown argument %s (see the header of bench_adaln_cuda.cu)\n",
                   a.c_str());
      return 2;
    }
  }
  std::string why;
  if (!cuda_testing::have_device(&why)) {
    std::printf("no usable CUDA device (%s): nothing to benchmark\n", why.c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# adaLN CUDA benchmark on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  if (check && !run_checks()) {
    std::printf("CHECK FAILED\n");
    return 1;
  }
  std::printf("# %-13s %2s %8s %5s %-4s %-3s %9s %8s %9s %6s\n", "shape", "B", "rows", "D", "type",
              "mod", "ms", "GB/s", "copyGB/s", "frac");
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
      for (const std::string& dn : dtypes) {
        const DType t = dn == "f32" ? DType::F32 : dn == "f16" ? DType::F16 : DType::BF16;
        const int64_t N = B * sh->L, D = sh->D, count = N * D;
        const size_t tbytes = size_t(count) * dtype_size(t);
        for (const std::string& mode : modes) {
          const bool bwd = mode == "bwd";
          const double need_gb = double(tbytes) * (bwd ? 3 : 2) / (1 << 30);
          if (need_gb > max_gb) {
            std::printf("  %-13s %2lld %8lld %5lld %-4s %-3s skipped: needs %.1f GiB\n", sh->name,
                        (long long)B, (long long)N, (long long)D, dn.c_str(), mode.c_str(),
                        need_gb);
            continue;
          }
          void *x, *out, *dy = nullptr, *scale, *shift, *ds = nullptr, *dt = nullptr, *ws = nullptr;
          float *mean, *rstd;
          cuda_ok(cudaMalloc(&x, tbytes), "malloc x");
          cuda_ok(cudaMalloc(&out, tbytes), "malloc y");
          cuda_ok(cudaMalloc(&scale, size_t(B * D) * 4), "malloc");
          cuda_ok(cudaMalloc(&shift, size_t(B * D) * 4), "malloc");
          cuda_ok(cudaMalloc(reinterpret_cast<void**>(&mean), size_t(N) * 4), "malloc");
          cuda_ok(cudaMalloc(reinterpret_cast<void**>(&rstd), size_t(N) * 4), "malloc");
          fill(x, t, count, 1);
          fill(scale, DType::F32, B * D, 2);
          fill(shift, DType::F32, B * D, 3);
          AdalnParams p;
          p.rows = N;
          p.dim = D;
          p.batch = B;
          p.rows_per_sample = sh->L;
          p.x_dtype = t;
          p.mod_dtype = DType::F32;
          p.x = x;
          p.scale = scale;
          p.shift = shift;
          p.y = out;
          p.mean = mean;
          p.rstd = rstd;
          adaln_set_contiguous_strides(p);
          adaln_fwd_cuda(p, nullptr);
          const double copy_ms = median_ms(
              [&] { cudaMemcpyAsync(out, x, tbytes, cudaMemcpyDeviceToDevice, nullptr); }, reps);
          const double copy_gbps = 2.0 * double(tbytes) / (copy_ms * 1e6);
          double ms;
          size_t moved;
          if (!bwd) {
            ms = median_ms([&] { adaln_fwd_cuda(p, nullptr); }, reps);
            moved = 2 * tbytes;
          } else {
            cuda_ok(cudaMalloc(&dy, tbytes), "malloc dy");
            cuda_ok(cudaMalloc(&ds, size_t(B * D) * 4), "malloc");
            cuda_ok(cudaMalloc(&dt, size_t(B * D) * 4), "malloc");
            fill(dy, t, count, 4);
            p.dy = dy;
            p.dx = out;
            p.dscale = ds;
            p.dshift = dt;
            p.workspace_bytes = adaln_bwd_cuda_workspace_bytes(p);
            if (p.workspace_bytes) cuda_ok(cudaMalloc(&ws, p.workspace_bytes), "malloc workspace");
            p.workspace = ws;
            ms = median_ms([&] { adaln_bwd_cuda(p, nullptr); }, reps);
            moved = 3 * tbytes;
          }
          const double gbps = double(moved) / (ms * 1e6), frac = gbps / copy_gbps;
          std::printf("  %-13s %2lld %8lld %5lld %-4s %-3s %9.4f %8.1f %9.1f %5.0f%%\n", sh->name,
                      (long long)B, (long long)N, (long long)D, dn.c_str(), mode.c_str(), ms, gbps,
                      copy_gbps, 100 * frac);
          std::fflush(stdout);
          char line[512];
          std::snprintf(
              line, sizeof line,
              "{\"bench\":\"adaln_cuda\",\"gpu\":\"%s\",\"shape\":\"%s\",\"B\":%lld,\"rows\":%lld,"
              "\"D\":%lld,"
              "\"dtype\":\"%s\",\"mod_dtype\":\"f32\",\"mode\":\"%s\",\"ms\":%.5f,\"gbps\":%.2f,"
              "\"copy_gbps\":%.2f,\"frac_copy\":%.4f,\"workspace_bytes\":%zu,\"reps\":%d}",
              prop.name, sh->name, (long long)B, (long long)N, (long long)D, dn.c_str(),
              mode.c_str(), ms, gbps, copy_gbps, frac, p.workspace_bytes, reps);
          json.push_back(line);
          for (void* q : {x, out, dy, scale, shift, ds, dt, ws, static_cast<void*>(mean),
                          static_cast<void*>(rstd)})
            if (q) cudaFree(q);
        }
      }
  }
  for (const std::string& j : json) std::printf("%s\n", j.c_str());
  return 0;
}
