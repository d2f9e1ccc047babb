#pragma once
// The simulator: runs a plan through a cost and memory model and reports DESIGN.md's metrics.
// step sync mode: for step t and rank r, T(t,r) = sum of its micro-batch times; a step takes
//   max_r T(t,r) + the gradient all-reduce.
// micro sync mode: the ranks meet at every micro-batch slot i of a step (every rank runs the
//   same number of micro-batches); a step takes sum_i [max_r T(t,r,i) + the slot's
//   collectives not hidden behind its compute] (ParallelLayout::exposed_slot_comm), and the
//   idle time is counted inside every slot.
// Both modes: every step also takes ParallelLayout::step_fixed_s (a calibrated profile's
//   optimizer step; 0 without one), which is not synchronisation (collective_s).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/plan/layout.h"
#include "adaptiveload/plan/plan.h"

namespace adaptiveload {

struct SimEnv {
  const std::vector<Bucket>* buckets = nullptr;
  // Per manifest row, its bucket: read for packed micro-batches (MicroBatch::bucket is
  // kPackedBucket), whose shape is their samples' buckets.
  const std::vector<uint16_t>* sample_bucket = nullptr;
  const CostModel* cost = nullptr;  // the "true" cost of a micro-batch
  MemoryModel memory;
  double device_memory_bytes = 0;
  double allreduce_s = 0;  // per global step (step sync mode)
  ParallelLayout layout;   // sync mode; micro mode's collectives per slot; rank speeds
  // Ranks that are not alike (--devices): per rank its device's memory and the bytes it may
  // fill (empty: every rank device_memory_bytes). Rank r's peak counts against its own.
  std::vector<double> rank_memory_bytes, rank_usable_bytes;
  double memory_of(size_t r) const {
    return rank_memory_bytes.empty() ? device_memory_bytes : rank_memory_bytes[r];
  }
};

struct Metrics {
  std::string name;
  double imbalance = 0;              // 1 - sum_t mean_r T / sum_t max_r T (idle fraction)
  double imbalance_step_mean = 0;    // mean over steps of (max - mean) / max
  double imbalance_step_maxmin = 0;  // mean over steps of (max - min) / max
  double throughput_samples_per_s = 0;
  double throughput_tokens_per_s = 0;
  double epoch_time_s = 0;
  double peak_memory_utilization_mean = 0;  // per step max_r peak / device memory
  double peak_memory_utilization_max = 0;
  double diversity = 0;                    // mean distinct buckets per global step
  double micro_batches_per_rank_step = 0;  // mean gradient-accumulation depth
  double global_batch_samples_mean = 0;
  double global_batch_tokens_mean = 0;
  // Largest |x_t - mean| / mean over the steps of the global samples and tokens per step.
  double global_batch_samples_max_dev = 0;
  double global_batch_tokens_max_dev = 0;
  // Seconds of the epoch spent in synchronisation the compute does not hide: the all-reduces
  // (step mode) or the exposed collectives of every slot (micro mode).
  double collective_s = 0;
  // Share of GPU time in per-micro-batch fixed costs: sum over micro-batches of
  // (T(B, S) - B * sample_time) over W x epoch time.
  double fixed_cost_fraction = 0;
  // Share of GPU time in useful work: the trained (not padded) micro-batches' work at full
  // efficiency (group_work of their shapes) over W x epoch time; 1 less idle, fixed costs,
  // exposed synchronisation and padded repeats.
  double useful_fraction = 0;
  std::string sync = "step";
  // Sequence-parallel group sizes of the plan's micro-batches (1 and 1: none).
  int group_min = 1, group_max = 1;
  int64_t steps = 0;
  int64_t samples = 0;  // distinct samples trained (padded repeats excluded)
  int64_t tokens = 0;
  int64_t padded = 0;
  int64_t dropped = 0;
};

// The one list of Metrics' reported fields (metric_fields()): `plan --json` writes every
// entry under its key, the HTML report's summary table takes its data-key and data-value from
// it, the CLI table and that summary table pick their columns from it
// (report/metric_columns.h), and simulate() checks every real-valued one is finite, in this
// order. A new field of Metrics is one line there.
struct MetricField {
  using Read =
      std::variant<double Metrics::*, int64_t Metrics::*, int Metrics::*, std::string Metrics::*,
                   double (*)(const Metrics&)>;  // the last: derived from the others
  const char* key;
  Read read;
  bool real() const {
    return !std::holds_alternative<int64_t Metrics::*>(read) &&
           !std::holds_alternative<int Metrics::*>(read) &&
           !std::holds_alternative<std::string Metrics::*>(read);
  }
  // The value as a number (0 for text fields).
  double number(const Metrics& m) const;
};

const std::vector<MetricField>& metric_fields();
// The field named `key`; throws std::out_of_range for a key that is not in the table.
const MetricField& metric_field(const std::string& key);

// Seconds of one ring all-reduce of `bytes` over W ranks: 2 (W-1)/W * bytes / bus bandwidth
// + 2 (W-1) * latency. Zero for W = 1.
double ring_allreduce_seconds(double bytes, int world_size, double bus_bytes_per_s,
                              double latency_s);

// The parallel layout of `sync` on `world_size` ranks: each sync mode's collectives, from the
// model's parameter count and the device's all-reduce bandwidth and latency (step: one fp32
// gradient all-reduce a step; micro: each micro-batch's bf16 parameter all-gathers when
// `sharded`, twice with `reshard_after_forward`, and its fp32 gradient reduce-scatter, of
// which `overlap` hides behind compute). A new sync mode adds its collectives here.
ParallelLayout parallel_layout(SyncMode sync, int world_size, const SeqParallel& sp, double params,
                               const DevicePreset& device, bool sharded, bool reshard_after_forward,
                               double overlap);

Metrics simulate(const Plan& plan, const SimEnv& env);

// The shape of micro-batch m of the plan (into `out`, cleared first): mb.count samples of
// mb.bucket, or for a packed micro-batch each sample's bucket. Throws ConfigError for a pack
// when env.sample_bucket is not set or names no bucket for one of its samples.
void micro_shape(const Plan& plan, uint64_t m, const SimEnv& env, MicroShape& out);
// Seconds of micro-batch m on its sequence-parallel group, as simulate() counts it: group_cost
// of its shape (built in `scratch`).
double micro_batch_seconds(const Plan& plan, uint64_t m, const SimEnv& env, MicroShape& scratch);

// Per-(step, rank) compute times of a plan, step-major (for reports and plots); rank r's
// micro-batches at its speed (ParallelLayout::rank_speed).
std::vector<double> rank_times(const Plan& plan, const SimEnv& env);

// The plan contract on ranks that are not alike: every micro-batch within its own rank's
// memory (SimEnv::rank_usable_bytes). "" when it holds, else the first micro-batch over it:
// its step, rank, samples and bytes against the rank's.
std::string check_rank_memory(const Plan& plan, const SimEnv& env);

}  // namespace adaptiveload
