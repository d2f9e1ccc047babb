// Host-side launch planning of the CUDA adaLN kernels (adaln_launch_plan.h). Plain C++:
// compiled into adaptiveload_cuda and into the gtest binary, which tests it without a GPU.
#include "adaln_launch_plan.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "adaln_cuda.h"

namespace adaptiveload {
namespace adaln_cuda {

namespace {

int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The wide kernels (teams of more than kMaxTeam threads, one vector a thread).
bool wide(const Cfg& c) { return c.vectors_per_thread == 1 && c.team_size > kMaxTeam; }

}  // namespace

bool operator==(const KernelVariant& a, const KernelVariant& b) {
  return a.backward == b.backward && a.family == b.family &&
         a.vectors_per_thread == b.vectors_per_thread && a.sample_teams == b.sample_teams &&
         a.affine == b.affine;
}

KernelVariant kernel_variant(const Cfg& c, bool bwd, bool affine) {
  KernelVariant v;
  v.backward = bwd;
  v.affine = bwd && affine;
  v.vectors_per_thread = c.vectors_per_thread;
  if (c.segments) {  // affine or not at run time: one kernel a dtype pair
    v.family = KernelFamily::Seg;
    v.affine = false;
    return v;
  }
  if (c.vectors_per_thread == 0) {
    v.family = KernelFamily::Loop;
    return v;
  }
  v.family = wide(c) ? KernelFamily::Wide : KernelFamily::Rows;
  v.sample_teams = c.samples_per_chunk > 0;
  return v;
}

int launch_bound(const KernelVariant& v) {
  return v.family == KernelFamily::Wide ? kWideTeam : kMaxTeam;
}

int block_threads(const Cfg& c) { return c.team_size * c.teams_per_block; }

size_t dynamic_smem(const AdalnParams& p, const Cfg& c, bool bwd) {
  if (bwd && c.segments && c.teams_per_block > 1)
    return size_t(c.teams_per_block) * size_t(p.dim) * sizeof(float);
  if (!bwd || c.vectors_per_thread == 0) return 0;
  const size_t teams = size_t(c.teams_per_block);
  const size_t rows =
      c.samples_per_chunk > 0 ? ((p.dweight || p.dbias) ? 2 * teams : 0) : (teams > 1 ? teams : 0);
  const size_t sacc =
      wide(c) ? 2 * size_t(kEpv) * size_t(c.team_size) : 0;  // the wide kernels' sums
  return (rows * size_t(p.dim) + sacc) * sizeof(float);
}

int grid_blocks(const Cfg& c) {
  return int(std::min<int64_t>({c.chunks, c.max_blocks, int64_t(1) << 30}));
}

// Rows of up to 1024 vectors (D <= 8192) sit in one team's registers: above 512 vectors
// one vector a thread in a team of up to 1024 threads (the wide kernels; not the affine
// backward, which spilled 32-36 bytes at their 64 registers, so it keeps 2 vectors a
// thread in teams of up to 512); up to 512 the least padding, preferring 2 vectors a
// thread (more loads in flight), except for the affine backward, whose accumulators plus
// weight and bias would spill at 2 when 1 fits in a team.
Cfg make_layout(const AdalnParams& p, bool bwd) {
  Cfg c;
  const int64_t nvec = (p.dim + kEpv - 1) / kEpv;
  const bool affine = p.weight || p.bias;
  if (p.cu_seqlens) {
    // The segment kernels: a team of up to 512 threads a row looping over its vectors, so
    // that one vector a thread covers D <= 4096 (held in registers); beyond, the team is
    // the block (the backward's accumulators past the first vector rely on that).
    c.segments = true;
    c.vectors_per_thread = 0;
    c.team_size = nvec <= 32 ? pow2_ceil(int(std::max<int64_t>(nvec, 1)))
                             : int(std::min<int64_t>(kMaxTeam, (nvec + 31) / 32 * 32));
  } else if (nvec > int64_t(kWideTeam)) {  // looped kernels: one team of kMaxTeam a block
    c.team_size = kMaxTeam;
    c.vectors_per_thread = 0;
  } else if (nvec > int64_t(kMaxTeam) && !(bwd && affine)) {
    c.team_size = int((nvec + 31) / 32 * 32);
    c.vectors_per_thread = 1;
  } else {
    const bool prefer1 = bwd && affine;
    int64_t best_waste = -1;
    for (int vpt : {prefer1 ? 1 : 2, prefer1 ? 2 : 1}) {
      const int64_t raw = (nvec + vpt - 1) / vpt;
      const int64_t ts =
          raw <= 32 ? pow2_ceil(int(std::max<int64_t>(raw, 1))) : (raw + 31) / 32 * 32;
      if (ts > kMaxTeam) continue;
      const int64_t waste = ts * vpt - nvec;
      if (best_waste < 0 || waste < best_waste) {
        best_waste = waste;
        c.team_size = int(ts);
        c.vectors_per_thread = vpt;
      }
    }
  }
  c.teams_per_block = c.team_size >= kBlockTarget ? 1 : kBlockTarget / c.team_size;
  return c;
}

// One chunk a block where the samples allow (a chunk never straddles one), so the grid
// fills the device once and the backward writes few partial rows; at most 256 rows a team
// (more chunks than blocks beyond that). Backward: a chunk's two fp32 partial rows cost 16
// bytes a column (written, then read by the finalize); at least kPartialShare times that
// in row traffic (x, dy, dx and per-token modulation in and out) a chunk, i.e. partials at
// most 1/8 of it, unless that leaves fewer chunks than SMs (small N): then one chunk an
// SM, C >= N / SMs.
constexpr int64_t kPartialShare = 8;
void make_chunks(const AdalnParams& p, int64_t G, bool bwd, Cfg& c) {
  const int64_t N = p.rows;
  const int64_t teams = c.teams_per_block;
  const bool one_group = p.per_token || c.segments;  // segments: one grid of chunks
  c.max_blocks = std::max<int64_t>(G, 1);
  c.group_rows = one_group ? N : p.rows_per_sample;
  c.groups = one_group ? (N > 0 ? 1 : 0) : p.batch;
  const int64_t L = c.group_rows;
  int64_t R = std::clamp<int64_t>(cdiv(N, c.max_blocks * teams), 1, 256);
  if (bwd && N > 0) {
    const int64_t row_bytes = 3 * int64_t(dtype_size(p.x_dtype)) +
                              (p.per_token ? 3 * int64_t(dtype_size(p.mod_dtype)) : 0);
    const int64_t cmin = cdiv(16 * kPartialShare, row_bytes);
    const int64_t spread = std::max<int64_t>(1, N / std::max<int64_t>(c.sms, 1));
    R = std::clamp<int64_t>(std::max(R, cdiv(std::min(cmin, spread), teams)), 1, 256);
  }
  c.samples_per_chunk = 0;
  if (!one_group && c.vectors_per_thread > 0 && L >= 1 && L < teams * R) {
    // Samples shorter than the chunk wanted: chunks of whole samples, one team a sample,
    // instead of chunks cut at every sample (idle teams, a pair of partial rows a sample).
    const int64_t per_team = std::clamp<int64_t>(cdiv(R, L), 1, std::max<int64_t>(1, 256 / L));
    c.samples_per_chunk = teams * per_team;
    c.rows_per_team = per_team * L;
    c.chunk_rows = c.samples_per_chunk * L;
    c.chunks_per_group = 1;
    c.chunks = cdiv(c.groups, c.samples_per_chunk);
    return;
  }
  R = std::min<int64_t>(R, std::max<int64_t>(1, cdiv(L, teams)));
  c.rows_per_team = R;
  c.chunk_rows = teams * R;
  c.chunks_per_group = L > 0 ? (L + c.chunk_rows - 1) / c.chunk_rows : 0;
  c.chunks = c.groups * c.chunks_per_group;
}

Cfg make_cfg(const AdalnParams& p, bool bwd, const DeviceProps& dev) {
  Cfg c = make_layout(p, bwd);
  const bool affine = p.weight || p.bias;
  // Blocks the device holds of the kernel variant `c` selects (0: it cannot say).
  auto resident = [&] {
    if (dev.sms <= 0 || !dev.blocks_per_sm) return int64_t(0);
    return int64_t(dev.blocks_per_sm(kernel_variant(c, bwd, affine), block_threads(c),
                                     dynamic_smem(p, c, bwd))) *
           dev.sms;
  };
  const int64_t G = resident();
  c.sms = std::max<int64_t>(dev.sms, 0);
  make_chunks(p, G > 0 ? G : 512, bwd, c);
  if (c.samples_per_chunk > 0) {  // sample teams: their own kernel variant (and shared memory)
    const int64_t G2 = resident();
    if (G2 > 0 && G2 != G) make_chunks(p, G2, bwd, c);
  }
  if (c.chunks_per_group > 0) {
    c.grid_step_groups = grid_blocks(c) / c.chunks_per_group;
    c.grid_step_chunks = grid_blocks(c) % c.chunks_per_group;
  }
  return c;
}

void check_cuda_limits(const AdalnParams& p) {
  if (p.dim > max_dim())
    throw std::invalid_argument("AdalnParams.dim (" + std::to_string(p.dim) +
                                ") exceeds the CUDA kernels' limit of " +
                                std::to_string(max_dim()) + " (32-bit columns)");
  if (p.mod_dtype != DType::F32 && p.mod_dtype != p.x_dtype)
    throw std::invalid_argument(std::string("AdalnParams.mod_dtype (") + dtype_name(p.mod_dtype) +
                                ") must be f32 or equal to x_dtype (" + dtype_name(p.x_dtype) +
                                ") for the CUDA kernels");
}

// Rows wider than 8192 take the looped kernels; columns are 32-bit in the kernels.
int64_t max_dim() { return std::numeric_limits<int32_t>::max() - kEpv; }

// An operand can move whole vectors when its elements are aligned, its row stride is a
// multiple of 16 bytes and its rows reach 16 bytes at the head column; the head is the
// column (0-7, with a whole vector after it) that lets the most bytes of a row move that
// way (x's own head on a tie, then the smallest). The others move element by element at
// the same columns.
RowMap row_map(const AdalnParams& p, const Cfg& c, bool bwd) {
  RowMap m;
  m.D = p.dim;
  m.count = (p.dim + kEpv - 1) / kEpv;
  struct Op {
    const void* ptr;
    int64_t stride;
    size_t sz;
    unsigned bit;
  };
  const size_t es = dtype_size(p.x_dtype), em = dtype_size(p.mod_dtype);
  Op ops[6];
  int n = 0;
  auto add = [&](const void* ptr, int64_t stride, size_t sz, unsigned bit) {
    if (ptr) ops[n++] = Op{ptr, stride, sz, bit};
  };
  add(p.x, p.x_stride, es, kAdalnOpX);
  if (bwd) {
    add(p.dy, p.dy_stride, es, kAdalnOpDy);
    add(p.dx, p.dx_stride, es, kAdalnOpDx);
  } else {
    add(p.y, p.y_stride, es, kAdalnOpY);
  }
  if (p.per_token) {
    add(p.scale, p.scale_stride, em, kAdalnOpScale);
    if (bwd) {
      add(p.dscale, p.dscale_stride, em, kAdalnOpDscale);
      add(p.dshift, p.dshift_stride, em, kAdalnOpDshift);
    } else {
      add(p.shift, p.shift_stride, em, kAdalnOpShift);
    }
  }
  auto fits = [](const Op& o, int64_t h) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(o.ptr);
    return a % o.sz == 0 && (o.stride * int64_t(o.sz)) % 16 == 0 &&
           (a + uintptr_t(h) * o.sz) % 16 == 0;
  };
  const uintptr_t ax = reinterpret_cast<uintptr_t>(p.x);
  const int64_t hx = ax % es == 0 ? int64_t((16 - ax % 16) % 16 / es) : 0;
  const int64_t room = int64_t(c.team_size) * c.vectors_per_thread;  // vectors a team holds
  int64_t best_h = 0;
  unsigned best = 0;
  size_t best_bytes = 0;
  for (int64_t k = -1; k < kEpv; ++k) {
    const int64_t h = k < 0 ? hx : k;
    const int64_t full = (p.dim - h) / kEpv, count = (h > 0) + full + (p.dim - h - full * kEpv > 0);
    if (full == 0 || (c.vectors_per_thread > 0 && count > room)) continue;  // room in the team
    unsigned bits = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; ++i)
      if (fits(ops[i], h)) bits |= ops[i].bit, bytes += ops[i].sz;
    if (bytes > best_bytes) best_h = h, best = bits, best_bytes = bytes;
  }
  if (best == 0) return m;
  const int64_t full = (p.dim - best_h) / kEpv, tail = p.dim - best_h - full * kEpv;
  m.vec = true;
  m.ok = best;
  m.head = best_h;
  m.full = full;
  m.count = (best_h > 0) + full + (tail > 0);
  return m;
}

// Enough (32, 16) blocks for two an SM over the column tiles, and segments of 16 - 256 rows
// (1 - 16 serial loads a thread).
FinPlan fin_plan(const AdalnParams& p, const Cfg& c) {
  FinPlan f;
  f.ntiles = cdiv(p.dim, 32);
  const int64_t K = c.chunks;
  const int64_t target = 2 * (c.sms > 0 ? c.sms : 132);
  const int64_t want = f.ntiles > 0 ? cdiv(target, f.ntiles) : 1;  // segments for `target`
  auto segments = [&](int64_t rows, int64_t most) {                // >= 1, <= most (when most >= 1)
    const int64_t hi = std::max<int64_t>(1, std::min<int64_t>({cdiv(rows, 16), most, 65535}));
    return std::clamp<int64_t>(std::max(want, cdiv(rows, 256)), 1, hi);
  };
  if (c.segments) {  // whole segments a finalize segment, as kFinSamples
    const int64_t n = p.batch, slots = partial_rows(p, c);
    f.mode = kFinSegments;
    f.span = std::max<int64_t>(1, cdiv(n, segments(slots, n)));
    f.nseg = n > 0 ? cdiv(n, f.span) : 1;
    return f;
  }
  if (p.per_token || c.samples_per_chunk > 0) {  // sample teams: dscale / dshift written already
    f.mode = kFinRows;
    f.span = std::max<int64_t>(1, cdiv(K, segments(K, K)));
    f.nseg = K > 0 ? cdiv(K, f.span) : 1;
    return f;
  }
  const int64_t B = c.groups, cps = c.chunks_per_group;
  // Split a sample only when each of its segments still has 16 chunks or more.
  const int64_t nsg = B > 0 ? std::min(cdiv(want, B), cps / 16) : 0;
  if (nsg >= 2) {
    f.mode = kFinSplit;
    f.span = cdiv(cps, nsg);
    f.nsg = cdiv(cps, f.span);
    f.nseg = B * f.nsg;
    return f;
  }
  f.mode = kFinSamples;
  f.span = std::max<int64_t>(1, cdiv(B, segments(B * cps, B)));
  f.nseg = B > 0 ? cdiv(B, f.span) : 1;
  return f;
}

// off_t / off_s: the backward kernel's two accumulators, one fp32 partial row per chunk
// each ([K, D]); with more than one finalize segment (and something to add over them)
// off_q: [2, nseg, D] segment sums, off_k: one unsigned ticket a column tile.
int64_t ws_layout(const AdalnParams& p, const Cfg& c, const FinPlan& f, Args& a) {
  a.off_s = a.off_t = a.off_q = a.off_k = -1;
  a.ntk = 0;
  const bool total = p.dweight || p.dbias;
  if (!(p.per_token || c.samples_per_chunk > 0 ? total : (total || p.dscale || p.dshift))) return 0;
  int64_t n = 0;
  const int64_t slot = partial_rows(p, c) * p.dim;
  a.off_t = n, n += slot;
  a.off_s = n, n += slot;
  if (f.nseg > 1 && ((f.mode != kFinSamples && f.mode != kFinSegments) || total)) {
    a.off_q = n, n += 2 * f.nseg * p.dim;
    a.off_k = n, n += f.ntiles;  // unsigned, one a float slot
    a.ntk = f.ntiles;
  }
  return n;
}

int64_t partial_rows(const AdalnParams& p, const Cfg& c) {
  return c.segments && c.chunks > 0 ? c.chunks + p.batch - 1 : c.chunks;
}

LaunchPlan plan_launch(const AdalnParams& p, bool bwd, const DeviceProps& dev) {
  LaunchPlan lp{Args{p, make_cfg(p, bwd, dev), -1, -1, -1, -1, {}}, {}, {}, 0};
  Args& a = lp.args;
  a.m = row_map(p, a.c, bwd);
  lp.variant = kernel_variant(a.c, bwd, p.weight || p.bias);
  if (bwd) {
    lp.fin = fin_plan(p, a.c);
    lp.workspace_floats = ws_layout(p, a.c, lp.fin, a);
  }
  return lp;
}

}  // namespace adaln_cuda
}  // namespace adaptiveload
