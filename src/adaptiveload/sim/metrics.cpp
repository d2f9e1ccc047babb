#include "adaptiveload/sim/metrics.h"

#include <algorithm>

#include "adaptiveload/util/error.h"

namespace adaptiveload {

double ring_allreduce_seconds(double bytes, int W, double bus_bytes_per_s, double latency_s) {
  if (W <= 1) return 0;
  return 2.0 * (W - 1) / W * bytes / bus_bytes_per_s + 2.0 * (W - 1) * latency_s;
}

std::vector<double> rank_times(const Plan& plan, const SimEnv& env) {
  const size_t W = size_t(plan.world_size);
  std::vector<double> out(plan.num_steps() * W, 0.0);
  for (size_t i = 0; i < out.size(); ++i) {
    for (uint64_t m = plan.rank_begin[i]; m < plan.rank_begin[i + 1]; ++m) {
      const MicroBatch& mb = plan.micro_batches[m];
      out[i] += env.cost->microbatch_time(mb.count, (*env.buckets)[mb.bucket]);
    }
  }
  return out;
}

Metrics simulate(const Plan& plan, const SimEnv& env) {
  Metrics m;
  m.name = plan.strategy;
  const size_t W = size_t(plan.world_size);
  const size_t steps = plan.num_steps();
  m.steps = int64_t(steps);
  m.padded = plan.padded_samples;
  m.dropped = int64_t(plan.dropped.size());
  std::vector<double> T = rank_times(plan, env);
  double sum_mean = 0, sum_max = 0, sum_step_mean = 0, sum_step_maxmin = 0, total_time = 0;
  double mem_sum = 0, mem_max = 0, div_sum = 0;
  std::vector<uint8_t> seen(env.buckets->size(), 0);
  std::vector<uint16_t> touched;
  for (size_t t = 0; t < steps; ++t) {
    double mx = 0, mn = 1e300, sum = 0, peak = 0;
    for (size_t r = 0; r < W; ++r) {
      double x = T[t * W + r];
      mx = std::max(mx, x), mn = std::min(mn, x), sum += x;
      for (uint64_t i = plan.rank_begin[t * W + r]; i < plan.rank_begin[t * W + r + 1]; ++i) {
        const MicroBatch& mb = plan.micro_batches[i];
        peak = std::max(peak, env.memory.bytes(mb.count, (*env.buckets)[mb.bucket].tokens));
        if (!seen[mb.bucket]) seen[mb.bucket] = 1, touched.push_back(mb.bucket);
        if (!mb.padded) {
          m.samples += mb.count;
          m.tokens += int64_t(mb.count) * (*env.buckets)[mb.bucket].tokens;
        }
      }
    }
    double mean = sum / double(W);
    sum_mean += mean, sum_max += mx;
    if (mx > 0) sum_step_mean += (mx - mean) / mx, sum_step_maxmin += (mx - mn) / mx;
    total_time += mx + env.allreduce_s;
    double util = peak / env.device_memory_bytes;
    mem_sum += util, mem_max = std::max(mem_max, util);
    div_sum += double(touched.size());
    for (uint16_t b : touched) seen[b] = 0;
    touched.clear();
  }
  if (steps > 0) {
    m.imbalance = sum_max > 0 ? 1.0 - sum_mean / sum_max : 0.0;
    m.imbalance_step_mean = sum_step_mean / double(steps);
    m.imbalance_step_maxmin = sum_step_maxmin / double(steps);
    m.peak_memory_utilization_mean = mem_sum / double(steps);
    m.peak_memory_utilization_max = mem_max;
    m.diversity = div_sum / double(steps);
    m.micro_batches_per_rank_step = double(plan.micro_batches.size()) / double(steps * W);
    m.global_batch_samples_mean = double(m.samples) / double(steps);
  }
  m.epoch_time_s = total_time;
  if (total_time > 0) {
    m.throughput_samples_per_s = double(m.samples) / total_time;
    m.throughput_tokens_per_s = double(m.tokens) / total_time;
  }
  const std::string of = " of strategy '" + m.name + "'";
  for (const auto& [v, what] : {std::pair{m.imbalance, "imbalance"},
                                {m.imbalance_step_mean, "imbalance_step_mean"},
                                {m.imbalance_step_maxmin, "imbalance_step_maxmin"},
                                {m.throughput_samples_per_s, "throughput_samples_per_s"},
                                {m.throughput_tokens_per_s, "throughput_tokens_per_s"},
                                {m.epoch_time_s, "epoch_time_s"},
                                {m.peak_memory_utilization_mean, "peak_memory_utilization_mean"},
                                {m.peak_memory_utilization_max, "peak_memory_utilization_max"},
                                {m.diversity, "diversity"},
                                {m.micro_batches_per_rank_step, "micro_batches_per_rank_step"},
                                {m.global_batch_samples_mean, "global_batch_samples_mean"}})
    check_finite(v, std::string("simulated metric '") + what + "'" + of);
  return m;
}

}  // namespace adaptiveload
