// Host-side launch planning of the CUDA adaLN kernels: which kernel variant runs, in what
// work layout (teams, chunks, grid), with what row layout, finalize plan and workspace.
// Plain C++ (no CUDA headers): the device's properties come in as arguments (SM count and
// an occupancy query per kernel variant), so the gtest suite tests the plan without a GPU
// (tests/test_adaln_launch_plan.cpp). The CUDA side (adaln_cuda.cu) fills them from the
// runtime; adaln_{fwd,bwd}_launch_template.cuh map a KernelVariant to its kernel, the one place
// that both the launch and the occupancy query go through. See docs/kernels.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace adaln_cuda {

constexpr int kEpv = 8;                // elements per vector (16 bytes of 16-bit data)
constexpr int kMaxTeam = 512;          // threads per row (and per block): 128 registers a thread
constexpr int kWideTeam = 1024;        // one vector a thread: 64 registers a thread
constexpr int kBlockTarget = 256;      // threads a block of small teams aims at
constexpr int kFinalizeThreads = 512;  // the finalize's (32, 16) blocks

// Vector layout of every row (row_map). With `vec`: `head` columns up to the column where
// the rows of the operands in `ok` reach a 16-byte boundary, then `full` whole vectors (8
// columns each, 16-byte aligned in every row of the operands of `ok`, which move them 128
// bits at a time; the other operands element by element), then the tail. Head and tail
// are moved element by element; that is at most one vector more than ceil(D / 8). Without
// `vec` (no operand has a 16-byte row stride reaching 16 bytes at a column the team has
// room for) vector v is columns 8v .. 8v + 7, all moved element by element. count: the
// vectors of a row.
struct RowMap {
  int64_t D = 0, head = 0, full = 0, count = 0;
  unsigned ok = 0;  // AdalnRowOperand bits (adaln_cuda.h)
  bool vec = false;
};

// Work layout shared by the kernels (make_cfg). Field order and types are the kernels'
// parameter layout (Args): keep them.
struct Cfg {
  int team_size = 1;           // threads per row (power of two <= 32, or a multiple of 32)
  int teams_per_block = 1;     // rows (teams) a block works on at once
  int vectors_per_thread = 1;  // of the row, in registers; 0: the looped kernels (D > 8192)
  int64_t rows_per_team = 1;   // rows per team per chunk
  int64_t chunk_rows = 1;      // rows per chunk = teams_per_block * rows_per_team
  int64_t group_rows = 0;      // rows per group (a sample; all rows when per-token)
  int64_t chunks_per_group = 0;
  int64_t groups = 0;        // samples (1 per-token, 0 without rows)
  int64_t chunks = 0;        // chunks in all
  int64_t max_blocks = 512;  // blocks launched at most: resident on the device at once
  int64_t sms = 0;           // SMs of the device (0: unknown)
  // The grid-stride step of the launched grid in groups and chunks (ChunkWalk).
  int64_t grid_step_groups = 0, grid_step_chunks = 0;
  // Sample teams (per-sample modulation, samples shorter than a chunk): a chunk is
  // samples_per_chunk whole samples, team t of the block takes samples t, t + teams, ... of
  // it, rows_per_team = (samples_per_chunk / teams_per_block) group_rows; the backward
  // writes each sample's dscale / dshift from the team's registers and keeps one pair of
  // partial rows a chunk for dweight / dbias. 0: chunks of rows (above).
  int64_t samples_per_chunk = 0;
  // Segments (cu_seqlens): the segment kernels (adaln_seg_kernels.cuh), one group of all rows
  // in chunks of chunk_rows, each chunk walked piece by piece (its runs of rows in one
  // segment); team_size threads a row looping over its vectors (vectors_per_thread 0).
  bool segments = false;
};

// The kernels' parameters (forward and backward kernels alike).
struct Args {
  AdalnParams p;
  Cfg c;
  // Workspace slots (floats, -1 = absent): the chunk partials S2 and S1 ([K, D] each), the
  // finalize's segment rows ([2, nseg, D]) and its tickets (ntk unsigned), see ws_layout.
  int64_t off_s, off_t, off_q, off_k;
  RowMap m;
  int64_t ntk = 0;  // finalize tickets the backward kernel zeroes (block 0)
};

// ---------------------------------------------------------------- kernel variants

// The kernel families (one .cuh each): rows in one team's registers (adaln_*_kernel), one
// vector a thread in teams of up to kWideTeam (adaln_*_wide_kernel), rows looped over by
// a block (adaln_*_loop_kernel), segments of any lengths (adaln_*_seg_kernel).
enum class KernelFamily : int { Rows = 0, Wide = 1, Loop = 2, Seg = 3 };

// One kernel instantiation, less its dtypes: what kernel_variant picks for a Cfg and what
// visit_fwd_kernel / visit_bwd_kernel (adaln_{fwd,bwd}_launch_template.cuh) turn into a kernel.
struct KernelVariant {
  bool backward = false;
  KernelFamily family = KernelFamily::Rows;
  int vectors_per_thread = 1;  // Rows: 1 or 2; Wide: 1; Loop, Seg: 0
  bool sample_teams = false;   // Rows, Wide: Cfg::samples_per_chunk > 0
  bool affine = false;         // backward Rows, Loop: weight or bias given (Seg: at run time)
};
bool operator==(const KernelVariant& a, const KernelVariant& b);

// The variant that runs c (bwd: the backward; affine: weight or bias given).
KernelVariant kernel_variant(const Cfg& c, bool bwd, bool affine);
// The kernel's __launch_bounds__: the most threads a block of it may have.
int launch_bound(const KernelVariant& v);
// Threads a block, and dynamic shared memory of the backward kernels (the teams' partial
// rows: [rpb][D] when rpb > 1, with sample teams and dweight / dbias two a team
// [rpb][2][D], up to 64 KiB at D = 8192, one team a block; the wide kernels' accumulators
// [2][8][ts]; the segment kernels' teams' sums [rpb][D] when rpb > 1, at most 8 KiB); 0 for
// the forward and the looped kernels.
int block_threads(const Cfg& c);
size_t dynamic_smem(const AdalnParams& p, const Cfg& c, bool bwd);
// Blocks of the launched grid: every chunk, at most the resident blocks.
int grid_blocks(const Cfg& c);

// ---------------------------------------------------------------- the device

// What the plan needs of the device. sms: its SM count (0: unknown). blocks_per_sm: the
// occupancy query, blocks of variant v with that block size and dynamic shared memory one
// SM holds at once (0: unknown). Without a GPU both say 0 and the plan assumes 512
// resident blocks.
struct DeviceProps {
  int64_t sms = 0;
  std::function<int(const KernelVariant& v, int block_threads, size_t dynamic_smem)> blocks_per_sm;
};

// ---------------------------------------------------------------- the plan

// Team, vectors a thread and teams a block for D (the kernel variant); make_chunks then
// cuts the rows.
Cfg make_layout(const AdalnParams& p, bool bwd);
// Rows per chunk for G resident blocks (c from make_layout, c.sms set).
void make_chunks(const AdalnParams& p, int64_t G, bool bwd, Cfg& c);
// The whole work layout: the kernel variant for D, then chunks for as many blocks as the
// device holds of it (512 when it cannot say).
Cfg make_cfg(const AdalnParams& p, bool bwd, const DeviceProps& dev);

// The vector layout of the rows (the device pointers and strides decide it).
RowMap row_map(const AdalnParams& p, const Cfg& c, bool bwd);

// The finalize (adaln_finalize_kernel): the backward's chunk partials become dscale /
// dshift (per-sample) and dweight / dbias in one launch of (32, 16) blocks over (column
// tiles, segments). Modes:
//   kFinRows    per-token (or sample teams): segment s = chunk rows [s span, (s + 1) span);
//   kFinSamples per-sample, few chunks a sample: segment s = samples [s span, (s + 1) span);
//   kFinSplit   per-sample, many chunks a sample (few samples): segment s = chunks
//               [j span, (j + 1) span) of sample s / nsg (j = s % nsg);
//   kFinSegments cu_seqlens: segment s = cu_seqlens segments [s span, (s + 1) span), each
//               one's partial slots (found from cu_seqlens) summed by the block's 16 phases.
enum FinMode : int { kFinRows = 0, kFinSamples = 1, kFinSplit = 2, kFinSegments = 3 };
struct FinPlan {
  int mode = kFinRows;
  int64_t ntiles = 0;  // column tiles of 32 (grid x)
  int64_t nseg = 1;    // segments (grid y); > 1: segment rows and tickets in the workspace
  int64_t span = 0;    // rows (kFinRows), samples (kFinSamples) or chunks (kFinSplit) a segment
  int64_t nsg = 1;     // kFinSplit: segments a sample
};
FinPlan fin_plan(const AdalnParams& p, const Cfg& c);

// Workspace slot offsets (floats) into a; returns the total floats.
int64_t ws_layout(const AdalnParams& p, const Cfg& c, const FinPlan& f, Args& a);
// Partial rows of each of the backward's two accumulators ([K, D] slots): one a chunk, or
// with segments one a piece, chunks + n - 1 at most (the segment kernels' slot k + s).
int64_t partial_rows(const AdalnParams& p, const Cfg& c);

// Everything a call launches: kernel arguments (row map and workspace slots filled in),
// the kernel variant and the finalize plan.
struct LaunchPlan {
  Args args;
  KernelVariant variant;
  FinPlan fin;
  int64_t workspace_floats = 0;
};
LaunchPlan plan_launch(const AdalnParams& p, bool bwd, const DeviceProps& dev);

// Throws std::invalid_argument for params the CUDA kernels do not take (dim, mod_dtype).
void check_cuda_limits(const AdalnParams& p);
int64_t max_dim();

}  // namespace adaln_cuda
}  // namespace adaptiveload
