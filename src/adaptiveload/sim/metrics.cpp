#include "adaptiveload/sim/metrics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

const std::vector<MetricField>& metric_fields() {
  static const std::vector<MetricField> table = {
      {"name", &Metrics::name},
      {"imbalance", &Metrics::imbalance},
      {"imbalance_step_mean", &Metrics::imbalance_step_mean},
      {"imbalance_step_maxmin", &Metrics::imbalance_step_maxmin},
      {"throughput_samples_per_s", &Metrics::throughput_samples_per_s},
      {"throughput_tokens_per_s", &Metrics::throughput_tokens_per_s},
      {"epoch_time_s", &Metrics::epoch_time_s},
      {"peak_memory_utilization_mean", &Metrics::peak_memory_utilization_mean},
      {"peak_memory_utilization_max", &Metrics::peak_memory_utilization_max},
      {"diversity", &Metrics::diversity},
      {"micro_batches_per_rank_step", &Metrics::micro_batches_per_rank_step},
      {"global_batch_samples_mean", &Metrics::global_batch_samples_mean},
      {"global_batch_tokens_mean", &Metrics::global_batch_tokens_mean},
      {"global_batch_samples_max_dev", &Metrics::global_batch_samples_max_dev},
      {"global_batch_tokens_max_dev", &Metrics::global_batch_tokens_max_dev},
      {"collective_s", &Metrics::collective_s},
      {"fixed_cost_fraction", &Metrics::fixed_cost_fraction},
      {"useful_fraction", &Metrics::useful_fraction},
      {"sync", &Metrics::sync},
      {"group_min", &Metrics::group_min},
      {"group_max", &Metrics::group_max},
      {"steps", &Metrics::steps},
      {"samples", &Metrics::samples},
      {"tokens", &Metrics::tokens},
      {"padded", &Metrics::padded},
      {"dropped", &Metrics::dropped},
      // Share of the planned samples left out at the epoch's end (--end-policy drop).
      {"dropped_fraction",
       +[](const Metrics& m) {
         return double(m.dropped) / double(std::max<int64_t>(1, m.samples + m.dropped));
       }},
  };
  return table;
}

const MetricField& metric_field(const std::string& key) {
  for (const MetricField& f : metric_fields())
    if (key == f.key) return f;
  throw std::out_of_range("no metric field '" + key + "'");
}

double MetricField::number(const Metrics& m) const {
  struct Number {
    const Metrics& m;
    double operator()(double Metrics::*p) const { return m.*p; }
    double operator()(int64_t Metrics::*p) const { return double(m.*p); }
    double operator()(int Metrics::*p) const { return double(m.*p); }
    double operator()(std::string Metrics::*) const { return 0; }
    double operator()(double (*f)(const Metrics&)) const { return f(m); }
  };
  return std::visit(Number{m}, read);
}

double ring_allreduce_seconds(double bytes, int W, double bus_bytes_per_s, double latency_s) {
  if (W <= 1) return 0;
  return 2.0 * (W - 1) / W * bytes / bus_bytes_per_s + 2.0 * (W - 1) * latency_s;
}

ParallelLayout parallel_layout(SyncMode sync, int world_size, const SeqParallel& sp, double params,
                               const DevicePreset& device, bool sharded, bool reshard_after_forward,
                               double overlap) {
  ParallelLayout l;
  l.sync = sync;
  l.sp = sp;
  const double P = params;
  switch (sync) {  // every mode its collectives (a new mode is a compile warning here)
    case SyncMode::kStep:
      // fp32 gradients, one ring all-reduce per global step.
      l.step_sync_s = ring_allreduce_seconds(P * 4.0, world_size, device.allreduce_bus_bytes_per_s,
                                             device.allreduce_latency_s);
      return l;
    case SyncMode::kMicro:
      break;
  }
  {
    // Per micro-batch: a ring all-gather of the bf16 parameters in forward (again in
    // backward when resharded after forward) when they are sharded, and a reduce-scatter of
    // the fp32 gradients; each is half a ring all-reduce of its bytes.
    auto half_ring = [&](double bytes) {
      return 0.5 * ring_allreduce_seconds(bytes, world_size, device.allreduce_bus_bytes_per_s,
                                          device.allreduce_latency_s);
    };
    const double gathers = sharded ? (reshard_after_forward ? 2.0 : 1.0) : 0.0;
    l.slot_comm_s = gathers * half_ring(P * 2.0) + half_ring(P * 4.0);
    l.overlap = overlap;
  }
  return l;
}

namespace {

// Micro-batches of a plan by their shapes, through one reused shape.
class Shapes {
 public:
  Shapes(const Plan& plan, const SimEnv& env) : plan_(plan), env_(env) {}
  const MicroShape& of(uint64_t m) {
    micro_shape(plan_, m, env_, shape_);
    return shape_;
  }
  // Seconds of micro-batch m (on its sequence-parallel group).
  double time(uint64_t m) { return micro_batch_seconds(plan_, m, env_, shape_); }

 private:
  const Plan& plan_;
  const SimEnv& env_;
  MicroShape shape_;
};

// Step sync with sequence-parallel groups: the ranks of a group start a micro-batch together,
// when the last of them is ready. Each rank runs its list in order; returns the step's end
// time of every rank. Throws when the lists deadlock (a group's ranks disagree).
void group_step_clocks(const Plan& plan, size_t t, Shapes& shapes, const ParallelLayout& layout,
                       std::vector<double>& clock, std::vector<uint64_t>& next) {
  const int W = plan.world_size;
  clock.assign(size_t(W), 0.0);
  next.resize(size_t(W));
  for (int r = 0; r < W; ++r) next[size_t(r)] = plan.rank_range(t, r).first;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < W; ++r) {
      const uint64_t end = plan.rank_range(t, r).second;
      while (next[size_t(r)] < end) {
        const uint64_t m = next[size_t(r)];
        const int g = plan.group(m);
        const int first = r - r % g;
        if (g > 1) {
          if (r != first) break;  // the group's first rank starts it
          bool ready = true;
          double start = 0;
          for (int k = first; k < first + g && ready; ++k) {
            const uint64_t n = next[size_t(k)];
            ready = n < plan.rank_range(t, k).second && plan.group(n) == g &&
                    plan.micro_batches[n].begin == plan.micro_batches[m].begin;
            if (ready) start = std::max(start, clock[size_t(k)]);
          }
          if (!ready) break;
          const double x = shapes.time(m) / layout.group_speed(size_t(first), g);
          for (int k = first; k < first + g; ++k) clock[size_t(k)] = start + x, ++next[size_t(k)];
        } else {
          clock[size_t(r)] += shapes.time(m) / layout.speed(size_t(r));
          ++next[size_t(r)];
        }
        progress = true;
      }
    }
  }
  for (int r = 0; r < W; ++r)
    if (next[size_t(r)] != plan.rank_range(t, r).second)
      throw ConfigError("plan of strategy '" + plan.strategy + "': in step " + std::to_string(t) +
                        " rank " + std::to_string(r) +
                        " waits for a sequence-parallel group whose ranks list other "
                        "micro-batches (the plan would hang)");
}

}  // namespace

void micro_shape(const Plan& plan, uint64_t m, const SimEnv& env, MicroShape& out) {
  const MicroBatch& mb = plan.micro_batches[m];
  out.clear();
  if (mb.bucket != kPackedBucket) {
    out.add((*env.buckets)[mb.bucket], mb.count);
    return;
  }
  if (!env.sample_bucket)
    throw ConfigError("plan of strategy '" + plan.strategy +
                      "' has packed micro-batches; the simulator needs "
                      "each sample's bucket (SimEnv::sample_bucket)");
  const uint32_t* ids = plan.ids(mb);
  const std::vector<uint16_t>& sb = *env.sample_bucket;
  for (uint32_t k = 0; k < mb.count; ++k) {
    // The ids are scattered over the manifest: fetch a few ahead.
    if (k + 8 < mb.count && ids[k + 8] < sb.size()) __builtin_prefetch(sb.data() + ids[k + 8]);
    const uint16_t b = ids[k] < sb.size() ? sb[ids[k]] : kPackedBucket;
    if (b >= env.buckets->size())
      throw ConfigError("plan of strategy '" + plan.strategy + "' packs sample " +
                        std::to_string(ids[k]) + ", which has no bucket");
    out.add((*env.buckets)[b]);
  }
}

double micro_batch_seconds(const Plan& plan, uint64_t m, const SimEnv& env, MicroShape& scratch) {
  micro_shape(plan, m, env, scratch);
  return group_cost(*env.cost, scratch, plan.group(m), env.layout.sp);
}

std::vector<double> rank_times(const Plan& plan, const SimEnv& env) {
  const size_t W = size_t(plan.world_size);
  std::vector<double> out(plan.num_steps() * W, 0.0);
  Shapes shapes(plan, env);
  for (size_t i = 0; i < out.size(); ++i) {
    for (uint64_t m = plan.rank_begin[i]; m < plan.rank_begin[i + 1]; ++m) {
      const size_t g = size_t(plan.group(m)), r = i % W;
      out[i] += shapes.time(m) / env.layout.group_speed(r - r % g, int(g));
    }
  }
  return out;
}

std::string check_rank_memory(const Plan& plan, const SimEnv& env) {
  const size_t W = size_t(plan.world_size);
  Shapes shapes(plan, env);
  for (size_t i = 0; i + 1 < plan.rank_begin.size(); ++i) {
    const size_t r = i % W;
    const double usable =
        env.rank_usable_bytes.empty() ? env.device_memory_bytes : env.rank_usable_bytes[r];
    for (uint64_t m = plan.rank_begin[i]; m < plan.rank_begin[i + 1]; ++m) {
      const double bytes = env.memory.bytes(shapes.of(m), plan.group(m));
      if (bytes > usable)
        return "plan of strategy '" + plan.strategy + "': step " + std::to_string(i / W) +
               " rank " + std::to_string(r) + " has a micro-batch of " +
               std::to_string(plan.micro_batches[m].count) + " samples needing " + fmt_gb(bytes) +
               ", over the " + fmt_gb(usable) +
               " its device may fill (a plan for other devices? plan with this " +
               option_word("devices") + ")";
    }
  }
  return "";
}

// long-function: one walk over the plan's steps, ranks and micro-batches that fills every metric
// from the same per-rank clocks
Metrics simulate(const Plan& plan, const SimEnv& env) {
  Metrics m;
  m.name = plan.strategy;
  const size_t W = size_t(plan.world_size);
  const size_t steps = plan.num_steps();
  const bool micro = env.layout.lockstep_slots();  // slot by slot (the mode's trait)
  m.sync = sync_name(env.layout.sync);
  if (plan.sync != env.layout.sync)
    throw ConfigError("plan of strategy '" + m.name + "' was made for " + sync_name(plan.sync) +
                      " sync mode, not " + m.sync);
  m.steps = int64_t(steps);
  m.padded = plan.padded_samples;
  m.dropped = int64_t(plan.dropped.size());
  double sum_mean = 0, sum_max = 0, sum_step_mean = 0, sum_step_maxmin = 0, total_time = 0;
  double mem_sum = 0, mem_max = 0, div_sum = 0, fixed_sum = 0, useful_sum = 0;
  std::vector<uint8_t> seen(env.buckets->size(), 0);
  std::vector<uint16_t> touched;
  const bool groups = !plan.mb_group.empty();
  const bool unequal = env.layout.unequal_ranks();
  if (unequal && env.layout.rank_speed.size() != W)
    throw ConfigError("plan of strategy '" + m.name + "' is for " + std::to_string(W) +
                      " ranks; the simulator has " + std::to_string(env.layout.rank_speed.size()) +
                      " rank speeds (" + option_word("devices") + ", " + option_word("rank_speed") +
                      "): give one a rank");
  if (groups && plan.mb_group.size() != plan.micro_batches.size())
    throw ConfigError("plan of strategy '" + m.name + "' has " +
                      std::to_string(plan.mb_group.size()) + " group sizes for " +
                      std::to_string(plan.micro_batches.size()) + " micro-batches");
  std::vector<double> clock;
  std::vector<uint64_t> next;
  Shapes shapes(plan, env);
  if (groups) m.group_min = kMaxGroup, m.group_max = 1;
  for (uint8_t g : plan.mb_group)
    if (g < 1 || (g & (g - 1)) != 0 || W % g != 0)
      throw ConfigError("plan of strategy '" + m.name + "' has a sequence-parallel group of " +
                        std::to_string(int(g)) +
                        " ranks; group sizes are powers of two that divide the world size " +
                        std::to_string(W));
  for (size_t t = 0; t < steps; ++t) {
    double mx = 0, mn = 1e300, sum = 0, peak = 0;
    for (size_t r = 0; r < W; ++r) {
      double x = 0;  // this rank's time in the step
      for (uint64_t i = plan.rank_begin[t * W + r]; i < plan.rank_begin[t * W + r + 1]; ++i) {
        const MicroBatch& mb = plan.micro_batches[i];
        const MicroShape& shape = shapes.of(i);
        const int g = plan.group(i);
        // On ranks that are not alike, seconds at the rank's speed (its group's slowest).
        const double speed = unequal ? env.layout.group_speed(r - r % size_t(g), g) : 1.0;
        const double time = group_cost(*env.cost, shape, g, env.layout.sp) / speed;
        x += time;
        peak = std::max(peak, env.memory.bytes(shape, g) / env.memory_of(r));
        const double work = group_work(*env.cost, shape, g, env.layout.sp) / speed;
        fixed_sum += time - work;
        if (!mb.padded) useful_sum += work;
        for (const ShapePart& part : shape.parts()) {
          const uint16_t b = uint16_t(part.bucket - env.buckets->data());
          if (!seen[b]) seen[b] = 1, touched.push_back(b);
        }
        if (groups) m.group_min = std::min(m.group_min, g), m.group_max = std::max(m.group_max, g);
        if (!mb.padded && r % size_t(g) == 0) {  // a group's sample counts once
          m.samples += mb.count;
          m.tokens += shape.tokens();
        }
      }
      mx = std::max(mx, x), mn = std::min(mn, x), sum += x;
    }
    if (groups && !micro) {
      // Ranks of a group wait for each other: the step ends with the last rank's clock.
      group_step_clocks(plan, t, shapes, env.layout, clock, next);
      mx = *std::max_element(clock.begin(), clock.end());
    }
    double mean = sum / double(W);
    if (micro) {
      // Slot by slot: the i-th micro-batch of every rank runs together.
      const auto [b0, e0] = plan.rank_range(t, 0);
      const uint64_t slots = e0 - b0;
      for (size_t r = 1; r < W; ++r) {
        const auto [b, e] = plan.rank_range(t, int(r));
        if (e - b != slots)
          throw ConfigError("plan of strategy '" + m.name + "' gives rank " + std::to_string(r) +
                            " " + std::to_string(e - b) + " micro-batches in step " +
                            std::to_string(t) + " and rank 0 " + std::to_string(slots) +
                            "; micro sync mode needs the same count on every rank");
      }
      double smax = 0, smean = 0, smin = 0, comm = 0;
      for (uint64_t i = 0; i < slots; ++i) {
        double x_max = 0, x_min = 1e300, x_sum = 0;
        for (size_t r = 0; r < W; ++r) {
          const uint64_t mi = plan.rank_begin[t * W + r] + i;
          const int g = plan.group(mi);
          if (g > 1 && plan.micro_batches[mi].begin !=
                           plan.micro_batches[plan.rank_begin[t * W + r - r % size_t(g)] + i].begin)
            throw ConfigError("plan of strategy '" + m.name + "': in step " + std::to_string(t) +
                              " slot " + std::to_string(i) + " rank " + std::to_string(r) +
                              " is not running its sequence-parallel "
                              "group's micro-batch (the plan would hang)");
          const double x = shapes.time(mi) / env.layout.group_speed(r - r % size_t(g), g);
          x_max = std::max(x_max, x), x_min = std::min(x_min, x), x_sum += x;
        }
        smax += x_max, smean += x_sum / double(W), smin += x_min;
        comm += std::max(0.0, env.layout.exposed_slot_comm(x_max));
      }
      mx = smax, mean = smean, mn = slots ? smin : 0;
      m.collective_s += comm;
      total_time += smax + comm;
    } else {
      m.collective_s += env.allreduce_s;
      total_time += mx + env.allreduce_s;
    }
    total_time += env.layout.step_fixed_s;  // the optimizer step, once a step in every mode
    sum_mean += mean, sum_max += mx;
    if (mx > 0) sum_step_mean += (mx - mean) / mx, sum_step_maxmin += (mx - mn) / mx;
    double util = peak;  // over each rank's own device memory
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
    double n_all = 0, tok_all = 0;
    for (const StepInfo& si : plan.steps) n_all += double(si.samples), tok_all += double(si.tokens);
    const double n_mean = n_all / double(steps), tok_mean = tok_all / double(steps);
    m.global_batch_samples_mean = double(m.samples) / double(steps);
    m.global_batch_tokens_mean = double(m.tokens) / double(steps);
    for (const StepInfo& si : plan.steps) {
      if (n_mean > 0)
        m.global_batch_samples_max_dev = std::max(m.global_batch_samples_max_dev,
                                                  std::abs(double(si.samples) - n_mean) / n_mean);
      if (tok_mean > 0)
        m.global_batch_tokens_max_dev = std::max(m.global_batch_tokens_max_dev,
                                                 std::abs(double(si.tokens) - tok_mean) / tok_mean);
    }
  }
  if (m.group_min > m.group_max) m.group_min = m.group_max;
  if (total_time > 0) m.fixed_cost_fraction = fixed_sum / (double(W) * total_time);
  if (total_time > 0) m.useful_fraction = useful_sum / (double(W) * total_time);
  m.epoch_time_s = total_time;
  if (total_time > 0) {
    m.throughput_samples_per_s = double(m.samples) / total_time;
    m.throughput_tokens_per_s = double(m.tokens) / total_time;
  }
  const std::string of = " of strategy '" + m.name + "'";
  for (const MetricField& f : metric_fields())
    if (f.real()) check_finite(f.number(m), std::string("simulated metric '") + f.key + "'" + of);
  return m;
}

}  // namespace adaptiveload
