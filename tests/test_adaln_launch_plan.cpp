// The CUDA adaLN kernels' host-side launch plan (cuda/adaln_launch_plan.h), without a GPU:
// the device comes in as an SM count and an occupancy function, so the plan is checked for
// made-up devices. Properties over many shapes: the block keeps to the kernel's launch
// bound, no wide affine backward, the occupancy query asks about the variant that is then
// launched, the chunks cover every row (sample), the grid-stride steps add up, the
// workspace slots do not overlap, the plan is a pure function of its inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "adaln_cuda.h"
#include "adaln_launch_plan.h"

using namespace adaptiveload;
using namespace adaptiveload::adaln_cuda;

namespace {

// Params of a shape; pointers are made-up 256-byte aligned device addresses (the plan
// only looks at their alignment), strides = dim.
AdalnParams shape(int64_t B, int64_t L, int64_t D, bool per_token, bool bwd, bool affine,
                  bool reduce, DType xt = DType::BF16, DType mt = DType::F32) {
  AdalnParams p;
  p.batch = B;
  p.rows_per_sample = L;
  p.rows = B * L;
  p.dim = D;
  p.per_token = per_token;
  p.x_dtype = xt;
  p.mod_dtype = mt;
  p.weight_dtype = DType::F32;
  uintptr_t next = 0x10000;
  auto addr = [&]() { return reinterpret_cast<void*>(next += 0x100000); };
  p.x = addr();
  p.scale = addr();
  p.shift = addr();
  p.x_stride = p.scale_stride = p.shift_stride = D;
  if (affine) p.weight = p.bias = addr();
  if (!bwd) {
    p.y = addr();
    p.y_stride = D;
  } else {
    p.dy = addr();
    p.dx = addr();
    p.dy_stride = p.dx_stride = D;
    if (reduce) {
      p.dscale = addr();
      p.dshift = addr();
      p.dscale_stride = p.dshift_stride = D;
      if (affine) p.dweight = p.dbias = addr();
    }
  }
  return p;
}

// A made-up device: `sms` SMs, occupancy from the block size and shared memory (2048
// threads and 228 KiB an SM), each query recorded.
struct FakeDevice {
  int64_t sms = 132;
  std::vector<KernelVariant> asked;
  DeviceProps props() {
    DeviceProps d;
    d.sms = sms;
    d.blocks_per_sm = [this](const KernelVariant& v, int threads, size_t smem) {
      asked.push_back(v);
      if (threads <= 0 || threads > launch_bound(v)) return 0;
      const int by_threads = 2048 / threads;
      const int by_smem = int(228 * 1024 / (smem + 1024));
      return std::min(std::min(by_threads, by_smem), 32);
    };
    return d;
  }
};

std::string name(const AdalnParams& p, bool bwd) {
  return std::string(bwd ? "bwd" : "fwd") + " B=" + std::to_string(p.batch) +
         " L=" + std::to_string(p.rows_per_sample) + " D=" + std::to_string(p.dim) +
         (p.per_token ? " per-token" : " per-sample") + (p.weight ? " affine" : "");
}

}  // namespace

TEST(AdalnLaunchPlan, LayoutOfKnownWidths) {
  struct Want {
    int64_t D;
    bool bwd, affine;
    int team, vpt, teams;
    KernelFamily family;
  };
  const Want wants[] = {
      {1, false, false, 1, 1, 256, KernelFamily::Rows},  // one vector: a team of one
      {8, false, false, 1, 1, 256, KernelFamily::Rows},
      {1024, false, false, 64, 2, 4, KernelFamily::Rows},  // 128 vectors, two a thread
      {1024, true, true, 128, 1, 2, KernelFamily::Rows},   // affine backward: one a thread
      {1536, false, false, 96, 2, 2, KernelFamily::Rows},  // 192 vectors: 96 x 2, no padding
      {4096, false, false, 256, 2, 1, KernelFamily::Rows},
      {4104, false, false, 544, 1, 1, KernelFamily::Wide},  // 513 vectors: wide, 17 warps
      {8192, false, false, 1024, 1, 1, KernelFamily::Wide},
      {8192, true, false, 1024, 1, 1, KernelFamily::Wide},
      {8192, true, true, 512, 2, 1, KernelFamily::Rows},    // no affine wide backward
      {8193, false, false, 512, 0, 1, KernelFamily::Loop},  // looped beyond 1024 vectors
      {16384, true, true, 512, 0, 1, KernelFamily::Loop},
  };
  for (const Want& w : wants) {
    const AdalnParams p = shape(2, 16, w.D, false, w.bwd, w.affine, true);
    const Cfg c = make_layout(p, w.bwd);
    SCOPED_TRACE(name(p, w.bwd));
    EXPECT_EQ(c.team_size, w.team);
    EXPECT_EQ(c.vectors_per_thread, w.vpt);
    EXPECT_EQ(c.teams_per_block, w.teams);
    EXPECT_EQ(kernel_variant(c, w.bwd, w.affine).family, w.family);
  }
}

TEST(AdalnLaunchPlan, NoDeviceAssumes512Blocks) {
  const AdalnParams p = shape(4, 4096, 3072, false, true, true, true);
  const LaunchPlan lp = plan_launch(p, true, DeviceProps{});
  EXPECT_EQ(lp.args.c.max_blocks, 512);
  EXPECT_EQ(lp.args.c.sms, 0);
  EXPECT_LE(grid_blocks(lp.args.c), 512);
}

TEST(AdalnLaunchPlan, ResidentBlocksFromTheDevice) {
  FakeDevice dev;
  dev.sms = 7;
  const AdalnParams p = shape(4, 4096, 3072, false, false, true, false);
  const LaunchPlan lp = plan_launch(p, false, dev.props());
  ASSERT_FALSE(dev.asked.empty());
  const int per_sm = dev.props().blocks_per_sm(lp.variant, block_threads(lp.args.c), 0);
  EXPECT_EQ(lp.args.c.max_blocks, 7 * per_sm);
  EXPECT_EQ(lp.args.c.sms, 7);
  EXPECT_EQ(grid_blocks(lp.args.c), 7 * per_sm);  // 16384 rows: more chunks than blocks
}

// Over many shapes and devices: what the kernels rely on.
TEST(AdalnLaunchPlan, PlansKeepTheKernelsInvariants) {
  const int64_t dims[] = {1,    3,    7,    8,    9,    63,   64,   255,  257,   1000,  1023, 1500,
                          2048, 3072, 4095, 4097, 5120, 8191, 8192, 8193, 12288, 16384, 20000};
  const int64_t shapes[][2] = {{1, 1},    {1, 7},  {3, 5},  {2, 64},   {7, 333},
                               {1, 4096}, {16, 1}, {64, 3}, {2, 30000}};
  int plans = 0;
  for (int64_t sms : {0, 1, 4, 132}) {
    for (const auto& bl : shapes)
      for (int64_t D : dims)
        for (int mode = 0; mode < 16; ++mode) {
          const bool bwd = mode & 1, per_token = mode & 2, affine = mode & 4, reduce = mode & 8;
          if (!bwd && reduce) continue;
          const AdalnParams p = shape(bl[0], bl[1], D, per_token, bwd, affine, reduce);
          FakeDevice dev;
          dev.sms = sms;
          const LaunchPlan lp = plan_launch(p, bwd, dev.props());
          const Cfg& c = lp.args.c;
          const KernelVariant& v = lp.variant;
          SCOPED_TRACE(name(p, bwd) + " sms=" + std::to_string(sms));
          ++plans;
          // The kernel: within its launch bound, none that does not exist.
          EXPECT_LE(block_threads(c), launch_bound(v));
          EXPECT_GE(block_threads(c), 1);
          EXPECT_FALSE(v.family == KernelFamily::Wide && v.affine);
          EXPECT_EQ(v, kernel_variant(c, bwd, affine));
          EXPECT_EQ(v.backward, bwd);
          // Asked about the kernel it launches (when the device can say).
          if (sms > 0) {
            bool asked = false;
            for (const KernelVariant& a : dev.asked) asked = asked || a == v;
            EXPECT_TRUE(asked);
          } else {
            EXPECT_TRUE(dev.asked.empty());
          }
          EXPECT_LE(dynamic_smem(p, c, bwd), size_t(64 * 1024 + 2 * kEpv * kWideTeam * 4));
          // Every row in a chunk: chunks of rows cover each group, sample teams every sample.
          if (c.samples_per_chunk > 0) {
            EXPECT_FALSE(per_token);
            EXPECT_GE(c.chunks * c.samples_per_chunk, p.batch);
            EXPECT_EQ(c.rows_per_team * c.teams_per_block, c.samples_per_chunk * c.group_rows);
          } else {
            EXPECT_EQ(c.chunks, c.groups * c.chunks_per_group);
            EXPECT_GE(c.chunks_per_group * c.chunk_rows, c.group_rows);
            EXPECT_EQ(c.chunk_rows, c.teams_per_block * c.rows_per_team);
          }
          // At most 256 rows a team, or one sample a team (sample teams of longer samples).
          EXPECT_LE(c.rows_per_team,
                    c.samples_per_chunk > 0 ? std::max<int64_t>(256, c.group_rows) : 256);
          // The grid-stride walk's step, in groups and chunks, is the grid.
          const int grid = grid_blocks(c);
          EXPECT_GE(grid, 1);
          EXPECT_LE(grid, c.chunks);
          EXPECT_EQ(c.grid_step_groups * c.chunks_per_group + c.grid_step_chunks, grid);
          // Row layout: at most one vector more than ceil(D / 8), within the team's room.
          EXPECT_LE(lp.args.m.count, (D + kEpv - 1) / kEpv + 1);
          if (c.vectors_per_thread > 0 && lp.args.m.vec) {
            EXPECT_LE(lp.args.m.count, int64_t(c.team_size) * c.vectors_per_thread);
          }
          // Workspace: slots in order, inside the total, none when nothing is reduced.
          const Args& a = lp.args;
          if (!bwd || !reduce || ((per_token || c.samples_per_chunk > 0) && !affine)) {
            EXPECT_EQ(lp.workspace_floats, 0);
            EXPECT_EQ(a.off_t, -1);
            continue;
          }
          ASSERT_EQ(a.off_t, 0);
          EXPECT_EQ(a.off_s, c.chunks * D);
          int64_t end = a.off_s + c.chunks * D;
          if (a.off_q >= 0) {
            EXPECT_EQ(a.off_q, end);
            EXPECT_EQ(a.off_k, a.off_q + 2 * lp.fin.nseg * D);
            EXPECT_EQ(a.ntk, lp.fin.ntiles);
            end = a.off_k + a.ntk;
          }
          EXPECT_EQ(lp.workspace_floats, end);
          EXPECT_GE(lp.fin.nseg, 1);
          EXPECT_LE(lp.fin.nseg, 65535);
          EXPECT_EQ(lp.fin.ntiles, (D + 31) / 32);
        }
  }
  EXPECT_GT(plans, 5000);
}

TEST(AdalnLaunchPlan, PureFunctionOfItsInputs) {
  for (int64_t D : {64, 3072, 8192, 12288}) {
    const AdalnParams p = shape(3, 1000, D, false, true, D != 8192, true);
    FakeDevice a, b;
    const LaunchPlan x = plan_launch(p, true, a.props()), y = plan_launch(p, true, b.props());
    EXPECT_EQ(x.variant, y.variant);
    EXPECT_EQ(x.workspace_floats, y.workspace_floats);
    EXPECT_EQ(x.args.c.chunks, y.args.c.chunks);
    EXPECT_EQ(x.args.c.chunk_rows, y.args.c.chunk_rows);
    EXPECT_EQ(x.fin.nseg, y.fin.nseg);
    EXPECT_EQ(a.asked.size(), b.asked.size());
  }
}

TEST(AdalnLaunchPlan, RowMapOfAlignedAndShiftedOperands) {
  // D = 1000 bf16: 125 vectors in a team of 64 x 2, rows of 2000 bytes (16-byte strides).
  AdalnParams p = shape(2, 8, 1000, false, false, false, false);
  const Cfg c = make_layout(p, false);
  ASSERT_EQ(int64_t(c.team_size) * c.vectors_per_thread, 128);
  RowMap m = row_map(p, c, false);
  EXPECT_TRUE(m.vec);
  EXPECT_EQ(m.ok, kAdalnOpX | kAdalnOpY);
  EXPECT_EQ(m.head, 0);
  EXPECT_EQ(m.count, 125);
  // x two elements past a 16-byte boundary, y aligned: x's own head (6 columns) moves only
  // x whole, head 0 only y; a tie goes to x's head.
  p.x = static_cast<const char*>(p.x) + 4;
  m = row_map(p, c, false);
  EXPECT_EQ(m.ok, unsigned(kAdalnOpX));
  EXPECT_EQ(m.head, 6);
  EXPECT_EQ(m.count, 1 + 124 + 1);
  // A stride of 2002 bytes: no operand moves whole vectors.
  p = shape(2, 8, 1001, false, false, false, false);
  m = row_map(p, make_layout(p, false), false);
  EXPECT_FALSE(m.vec);
  EXPECT_EQ(m.ok, 0u);
  EXPECT_EQ(m.count, 126);
}

TEST(AdalnLaunchPlan, CudaLimits) {
  AdalnParams p = shape(1, 1, 64, false, false, false, false, DType::BF16, DType::F16);
  EXPECT_THROW(check_cuda_limits(p), std::invalid_argument);
  p.mod_dtype = DType::BF16;
  EXPECT_NO_THROW(check_cuda_limits(p));
  p.dim = max_dim() + 1;
  EXPECT_THROW(check_cuda_limits(p), std::invalid_argument);
}

// Segments (cu_seqlens): the segment kernels over one grid of chunks, whatever the offsets
// (the plan never reads them): a team of up to 512 threads looping over its vectors, more
// than one team a block only when each thread has one vector (the backward's sums past the
// first vector are the piece's workspace rows, written by one team), chunks covering every
// row, chunks + n - 1 partial slot pairs, the kFinSegments finalize.
TEST(AdalnLaunchPlan, SegmentPlansKeepTheSegmentKernelsInvariants) {
  static const int64_t cu_dummy[1] = {0};
  int plans = 0;
  for (int64_t sms : {0, 1, 132})
    for (int64_t N : {0, 1, 37, 5000, 70000})
      for (int64_t n : {1, 5, 300})
        for (int64_t D : {1, 7, 8, 9, 64, 255, 257, 1536, 4096, 4097, 8192, 12289, 16384})
          for (int mode = 0; mode < 8; ++mode) {
            const bool bwd = mode & 1, affine = mode & 2, reduce = mode & 4;
            if (!bwd && reduce) continue;
            AdalnParams p = shape(1, N, D, false, bwd, affine, reduce);
            p.batch = n;
            p.rows_per_sample = 0;
            p.cu_seqlens = cu_dummy;
            FakeDevice dev;
            dev.sms = sms;
            const LaunchPlan lp = plan_launch(p, bwd, dev.props());
            const Cfg& c = lp.args.c;
            SCOPED_TRACE(name(p, bwd) + " n=" + std::to_string(n) + " sms=" + std::to_string(sms));
            ++plans;
            EXPECT_TRUE(c.segments);
            EXPECT_EQ(lp.variant.family, KernelFamily::Seg);
            EXPECT_LE(block_threads(c), launch_bound(lp.variant));
            const int64_t nvec = (D + kEpv - 1) / kEpv;
            int64_t team = 1;  // a power of two up to a warp, then warps up to 512
            while (team < nvec && team < 32) team <<= 1;
            if (nvec > 32) team = std::min<int64_t>(512, (nvec + 31) / 32 * 32);
            EXPECT_EQ(c.team_size, team);
            if (c.teams_per_block > 1) {
              EXPECT_LE(lp.args.m.count, c.team_size);
            }
            EXPECT_LE(dynamic_smem(p, c, bwd), size_t(8 * 1024));
            EXPECT_EQ(c.chunk_rows, c.teams_per_block * c.rows_per_team);
            EXPECT_GE(c.chunks * c.chunk_rows, N);
            EXPECT_LT((c.chunks - 1) * c.chunk_rows, std::max<int64_t>(N, 1));
            if (N > 0) {
              EXPECT_LE(grid_blocks(c), c.chunks);
            }
            const Args& a = lp.args;
            if (!bwd || !reduce) {
              EXPECT_EQ(lp.workspace_floats, 0);
              continue;
            }
            EXPECT_EQ(lp.fin.mode, kFinSegments);
            EXPECT_GE(lp.fin.nseg, 1);
            EXPECT_LE(lp.fin.nseg, n);
            EXPECT_GE(lp.fin.nseg * lp.fin.span, n);
            const int64_t slots = N > 0 ? c.chunks + n - 1 : 0;
            EXPECT_EQ(partial_rows(p, c), slots);
            ASSERT_EQ(a.off_t, 0);
            EXPECT_EQ(a.off_s, slots * D);
            int64_t end = a.off_s + slots * D;
            if (a.off_q >= 0) {
              EXPECT_TRUE(affine);  // segment rows only to add dweight / dbias
              EXPECT_EQ(a.off_q, end);
              end = a.off_q + 2 * lp.fin.nseg * D + lp.fin.ntiles;
            }
            EXPECT_EQ(lp.workspace_floats, end);
          }
  EXPECT_GT(plans, 2000);
}
