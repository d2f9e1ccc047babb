#include "adaptiveload/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/hash.h"

namespace adaptiveload {
namespace {

constexpr int kCompSearchPoints = 32;

std::string gb(double bytes) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

// Largest seconds one sample may cost: beyond it the scheduler's integer ticks saturate.
constexpr double kMaxSampleSeconds = 1e9;

// "auto", "free", "steps:N", "samples:N" or "tokens:N" -> (kind, N; 0 for auto and free);
// resolved into a rate per step once the pool is known (Planner::resolve_global_batch).
std::pair<std::string, double> parse_global_batch(const std::string& v) {
  const std::string help =
      " (--global-batch / global_batch); use auto, free, steps:N (steps per epoch), samples:N or "
      "tokens:N (per global step)";
  if (v == "auto" || v == "free") return {v, 0};
  const size_t colon = v.find(':');
  const std::string kind = colon == std::string::npos ? "" : v.substr(0, colon);
  if (kind != "steps" && kind != "samples" && kind != "tokens")
    throw ConfigError("global batch '" + v + "' is not understood" + help);
  const std::string num = v.substr(colon + 1);
  double x = -1;
  // Plain decimal digits (and for tokens a fraction or exponent): no sign, space or hex.
  const bool plain = !num.empty() && num.find_first_not_of(kind == "tokens" ? "0123456789.eE+" : "0123456789") ==
                                          std::string::npos && num[0] != '+' && num[0] != '.';
  if (plain) {
    try {
      size_t used = 0;
      x = std::stod(num, &used);
      if (used != num.size()) x = -1;
    } catch (...) {
      x = -1;
    }
  }
  if (!(x >= 1 && x <= 1e18) || (kind != "tokens" && x != std::floor(x)))
    throw ConfigError("global batch '" + v + "': " + kind + " must be " +
                      (kind == "tokens" ? "a number" : "a whole number") + " in 1..1e18" + help);
  return {kind, x};
}

// "1,2,4,8" -> bit mask of allowed sequence-parallel group sizes (1 is always allowed).
uint32_t parse_sp_sizes(const std::string& v) {
  uint32_t mask = 1;
  size_t i = 0;
  while (i <= v.size()) {
    const size_t j = std::min(v.find(',', i), v.size());
    const std::string t = v.substr(i, j - i);
    const bool digits = !t.empty() && t.size() <= 5 && t.find_first_not_of("0123456789") == std::string::npos;
    const int g = digits ? std::stoi(t) : 0;
    if (!(g >= 1 && g <= kMaxGroup && (g & (g - 1)) == 0))
      throw ConfigError("sequence-parallel size '" + t + "' in '" + v +
                        "' (--sp-sizes / sp_sizes) must be a power of two in 1..128, e.g. 1,2,4,8");
    mask |= 1u << __builtin_ctz(unsigned(g));
    i = j + 1;
  }
  return mask;
}

// "auto" | "off" | "per-sample" -> 0; "G" (a power of two) -> G.
int parse_sp(const std::string& v) {
  if (v == "auto" || v == "min" || v == "off" || v == "per-sample") return 0;
  const bool digits = !v.empty() && v.size() <= 5 && v.find_first_not_of("0123456789") == std::string::npos;
  const int g = digits ? std::stoi(v) : 0;
  if (!(g >= 1 && g <= kMaxGroup && (g & (g - 1)) == 0))
    throw ConfigError("sequence parallelism '" + v +
                      "' (--sp / sp) must be auto (groups for samples that do not fit one GPU, larger ones "
                      "where they shorten the epoch), min (each such sample on the smallest group it fits), "
                      "per-sample (groups tried even where every sample fits one GPU), off, or a group size "
                      "for every sample (a power of two, e.g. 4)");
  return g;
}

// Range checks of the numeric options, where they enter the core (the CLI and the Python
// sampler both come through here); each message names the option and its range.
void validate_config(PlannerConfig& c) {
  auto bad = [](const std::string& what, const std::string& range, double v) {
    throw ConfigError(what + " is " + fmt("%g", v) + "; it must be " + range);
  };
  if (c.world_size < 1 || c.world_size > kMaxWorldSize)
    bad("world size", "in 1.." + std::to_string(kMaxWorldSize), double(c.world_size));
  if (c.epoch < 0) bad("epoch", ">= 0", double(c.epoch));
  if (c.mem_budget_tokens < 0 || c.mem_budget_tokens > int64_t(1e15))
    bad("mem_budget_tokens (M_mem)", "0 (auto) or a token count up to 1e15",
        double(c.mem_budget_tokens));
  if (!(c.comp_budget >= 0 && c.comp_budget <= 1e300))
    bad("comp_budget (M_comp)", "0 (auto) or a positive finite number", c.comp_budget);
  if (!(c.p == 0 || (c.p > 0 && c.p <= kMaxP)))
    bad("p (exponent of the compute constraint B x S^p)",
        "0 (auto) or in (0, " + fmt("%g", kMaxP) + "]", c.p);
  if (!(c.step_budget_s >= 0 && c.step_budget_s <= kMaxSampleSeconds))
    bad("step_budget_s", "0 (auto) or a number of seconds up to 1e9", c.step_budget_s);
  if (!(c.collective_overlap >= 0 && c.collective_overlap <= 1))
    bad("collective_overlap", "in [0, 1]", c.collective_overlap);
  if (c.sync != "auto" && c.sync != "step" && c.sync != "micro")
    throw ConfigError("sync must be auto, step (DDP, ZeRO-1) or micro (FSDP, ZeRO-2/3), not '" + c.sync + "'");
  parse_global_batch(c.global_batch);
  parse_sp_sizes(c.sp_sizes);
  parse_sp(c.sp);
  if (c.grid.empty()) c.grid = load_model(c.model).default_grid;
}


// Advice for a sample too big for memory, following the configuration it was planned under.
std::string oversize_advice(const PlannerConfig& cfg, bool sharded, bool memory_bound, int largest_group,
                            int node_size, int heads) {
  // A larger group is advice only where one could be used: a power of two up to the node size
  // that divides the world size and the heads.
  int larger = 0;
  for (int g = 2 * largest_group; g <= node_size && larger == 0; g *= 2)
    if (cfg.world_size % g == 0 && heads % g == 0) larger = g;
  std::string a;
  auto add = [&](const std::string& s) { a += (a.empty() ? "" : ", ") + s; };
  if (memory_bound) {
    if (cfg.sp == "off")
      add("allow sequence parallelism (--sp auto) to split such a sample over a group of GPUs");
    else if (larger > 0)
      add("allow larger sequence-parallel groups (--sp-sizes with " + std::to_string(larger) +
          "; a group size must divide the world size and the model's heads and be at most the node size " +
          std::to_string(node_size) + ")");
    else if (largest_group < node_size)
      add("run on a world size that larger sequence-parallel groups divide (no group size above " +
          std::to_string(largest_group) + " divides " + std::to_string(cfg.world_size) + " ranks and " +
          std::to_string(heads) + " heads)");
    if (!cfg.checkpointing) add("enable activation checkpointing (--checkpointing on)");
    if (!sharded && cfg.world_size > 1) add("shard the model state (--sharding fsdp)");
    if (!sharded && cfg.world_size == 1)
      add("shard the model state over more GPUs (--sharding fsdp with -w > 1)");
    add("use a larger device or a smaller bucket grid");
  } else {
    add("raise --mem-budget (or leave it on auto)");
    add("use a smaller bucket grid");
  }
  return "; " + a + ", or pass --on-oversize=skip to leave such samples out";
}

}  // namespace

double Planner::usable_memory_bytes() const { return device_.memory_bytes * (1.0 - device_.memory_reserve_fraction); }

Planner::Planner(const Manifest& manifest, const PlannerConfig& config) : cfg_(config) {
  validate_config(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  grid_ = load_grid(cfg_.grid);
  init(assign_buckets(manifest, grid_, model_), &manifest);
}

Planner::Planner(Bucketing bucketing, const PlannerConfig& config) : cfg_(config) {
  validate_config(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  grid_ = load_grid(cfg_.grid);
  init(std::move(bucketing), nullptr);
}

void Planner::init(Bucketing bucketing, const Manifest* manifest) {
  bucketing_ = std::move(bucketing);
  const auto& buckets = bucketing_.buckets;
  CostContext ctx{model_, device_, cfg_.checkpointing, cfg_.profile};
  cost_ = make_cost_model(cfg_.cost_model, ctx, buckets, bucketing_.bucket_counts);
  if (cfg_.sharding != "auto" && cfg_.sharding != "none" && cfg_.sharding != "fsdp")
    throw ConfigError("sharding must be auto, none or fsdp, not '" + cfg_.sharding + "'");
  const double usable = usable_memory_bytes();
  sharded_ = cfg_.sharding == "fsdp" ||
             (cfg_.sharding == "auto" && cfg_.world_size > 1 &&
              analytic_memory_model(model_, cfg_.checkpointing).static_bytes > 0.5 * usable);
  memory_ = analytic_memory_model(model_, cfg_.checkpointing, sharded_ ? cfg_.world_size : 1);
  if (auto* prof = dynamic_cast<const ProfileCost*>(cost_.get()); prof && prof->has_memory()) memory_ = prof->memory();
  for (const auto& [v, what] :
       {std::pair{memory_.static_bytes, "static bytes"}, {memory_.m0, "m0"}, {memory_.m1, "m1"}})
    check_finite(v, std::string("memory model ") + what);
  if (memory_.static_bytes >= usable) {
    // Advice that applies: sharding over more ranks helps only once there are several.
    std::string advice;
    if (!sharded_ && cfg_.world_size > 1)
      advice = "use --sharding fsdp (shards it over the " + std::to_string(cfg_.world_size) +
               " GPUs) or a larger device";
    else if (!sharded_)
      advice = "use --sharding fsdp with more GPUs (-w), or a larger device";
    else
      advice = "use more GPUs (it is sharded over " + std::to_string(cfg_.world_size) +
               ") or a larger device";
    throw ConfigError("the model state of " + model_.name +
                      " (weights, gradients, optimizer) needs " + gb(memory_.static_bytes) +
                      " per GPU, more than the " + gb(usable) + " usable on " + device_.name +
                      "; " + advice);
  }
  // The cost of every bucket must be a usable number of seconds (a profile or preset at the
  // edge of its range could still overflow it).
  for (const Bucket& b : buckets) {
    const double t = cost_->sample_time(b), mb = cost_->microbatch_time(1, b);
    check_finite(t, "cost model '" + cost_->name() + "': seconds per sample of bucket " + b.name());
    check_finite(
        mb, "cost model '" + cost_->name() + "': seconds of one micro-batch of bucket " + b.name());
    if (!(t > 0) || mb > kMaxSampleSeconds)
      throw ConfigError("cost model '" + cost_->name() + "' gives " + fmt("%g", mb) +
                        " s for one sample of bucket " + b.name() +
                        "; it must be in (0, 1e9] s: check the model, device or profile");
  }

  // Sequence parallelism: the allowed group sizes and the cost model on each.
  sp_sizes_ = cfg_.sp == "off" ? 1u : parse_sp_sizes(cfg_.sp_sizes);
  sp_fixed_ = parse_sp(cfg_.sp);
  if (sp_fixed_ > 0) sp_sizes_ |= 1u << __builtin_ctz(unsigned(sp_fixed_));
  {
    const SeqParallel sp = seq_parallel(cfg_.world_size);
    if (sp_fixed_ > 1 && !sp.allows(sp_fixed_))
      throw ConfigError("sequence-parallel group size " + std::to_string(sp_fixed_) + " (--sp) cannot be used on " +
                        std::to_string(cfg_.world_size) + " ranks of " + device_.name + " with " + model_.name +
                        ": a group size must divide the world size and the model's " + std::to_string(model_.heads) +
                        " heads, and be at most the node size " + std::to_string(device_.node_size));
  }

  // Oversize samples: one alone exceeds device memory (on every allowed group size) or the
  // token budget.
  std::vector<int64_t> max_mem;
  std::vector<uint8_t> group;
  choose_groups(cfg_.world_size, sp_fixed_, group, max_mem);
  std::vector<uint8_t> too_big(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b)
    too_big[b] = max_mem[b] < 1 || (cfg_.mem_budget_tokens > 0 && (buckets[b].tokens + group[b] - 1) / group[b] >
                                                                      cfg_.mem_budget_tokens);
  const int largest = seq_parallel(cfg_.world_size).largest();
  const int64_t rows = int64_t(bucketing_.sample_bucket.size());
  for (int64_t row = 0; row < rows; ++row) {
    uint16_t b = bucketing_.sample_bucket[size_t(row)];
    if (b == kNoBucket) continue;
    if (!too_big[b]) {
      pool_.push_back(uint32_t(row));
      continue;
    }
    const Bucket& bk = buckets[b];
    std::string msg;
    const int g_max = sp_fixed_ > 0 ? sp_fixed_ : largest;
    const bool memory_bound = memory_.max_batch((bk.tokens + g_max - 1) / g_max, usable) < 1;
    if (memory_bound) {
      const int g = g_max;
      double need = memory_.bytes(1, (bk.tokens + g - 1) / g);
      msg = "one sample of bucket " + bk.name() + " (" + std::to_string(bk.tokens) + " tokens) needs " + gb(need) +
            (g > 1 ? " per GPU on a sequence-parallel group of " + std::to_string(g) + " (the largest allowed)" : "") +
            ", " + gb(need - usable) + " more than the " + gb(usable) + " usable on " + device_.name;
    } else {
      msg = "one sample of bucket " + bk.name() + " has " + std::to_string(bk.tokens) + " tokens" +
            (group[b] > 1 ? " (" + std::to_string((bk.tokens + group[b] - 1) / group[b]) + " per GPU on " +
                                std::to_string(int(group[b])) + ")"
                          : "") +
            ", more than the memory budget of " + std::to_string(cfg_.mem_budget_tokens) + " tokens";
    }
    if (cfg_.oversize == OversizePolicy::kError) {
      throw ConfigError(
          "manifest row " + std::to_string(row) +
          (manifest ? " (" + manifest->where(row) + ", " + std::string(manifest->path(row)) + ")"
                    : "") +
          ": " + msg + oversize_advice(cfg_, sharded_, memory_bound, largest, device_.node_size, model_.heads));
    }
    oversize_.push_back({row, msg});
  }
  if (pool_.empty()) {
    // Nothing to plan is an error, not an empty plan: say where every row went.
    const int64_t total = manifest ? manifest->total_rows() : rows;
    throw InputError(
        manifest && !manifest->files().empty() ? manifest->files().front().path : "manifest",
        "nothing to plan: " + std::to_string(total) + " row(s), " + std::to_string(bucketing_.bad) +
            " bad, " + std::to_string(bucketing_.unfit.size()) + " fit no bucket of grid '" +
            grid_.name + "', " + std::to_string(oversize_.size()) + " oversize" +
            (total == 0 ? "; the manifest has a header but no data rows (check its line endings)"
                        : "; fix the rows, or choose a grid (--grid) that fits them"));
  }

  base_.buckets = &bucketing_.buckets;
  base_.sample_bucket = &bucketing_.sample_bucket;
  base_.cost = cost_.get();
  base_.seed = cfg_.seed;
  base_.epoch = cfg_.epoch;
  base_.end_policy = cfg_.end_policy;
  base_.max_batch_memory = max_mem;
  // Groups only for the buckets planned: a skipped oversize one keeps no group.
  live_.assign(buckets.size(), 0);
  for (uint32_t id : pool_) live_[bucketing_.sample_bucket[id]] = 1;
  for (size_t b = 0; b < buckets.size(); ++b)
    if (!live_[b] || too_big[b]) group[b] = 1;
  if (std::any_of(group.begin(), group.end(), [](uint8_t g) { return g > 1; })) base_.bucket_group = group;
  base_.fixed_batch = resolve_fixed(fixed_error_);
  sync_ = cfg_.sync == "micro"  ? SyncMode::kMicro
          : cfg_.sync == "step" ? SyncMode::kStep
          : sharded_            ? SyncMode::kMicro
                                : SyncMode::kStep;
  base_.layout = layout(cfg_.world_size);
  base_.allreduce_s = sim_env(cfg_.world_size).allreduce_s;
  resolve_budgets();

  Hasher h;
  if (manifest) {
    // Per row: path, 0, num_frames (i64), height, width (i32), fps (f64), usable (u8). The bytes
    // are staged and hashed in 64 KiB blocks: the same stream (and digest) as hashing each field,
    // without a hasher call per field of 10^7 rows.
    std::vector<char> block(size_t(1) << 16);
    size_t used = 0;
    auto put = [&](const void* p, size_t n) {
      if (used + n > block.size()) {
        h.bytes(block.data(), used), used = 0;
        if (n > block.size()) return h.bytes(p, n);
      }
      std::memcpy(block.data() + used, p, n), used += n;
    };
    for (int64_t row = 0; row < manifest->total_rows(); ++row) {
      const std::string_view p = manifest->path(row);
      const ClipInfo c = manifest->clip(row);
      const uint8_t zero = 0, usable = uint8_t(manifest->usable(row));
      put(p.data(), p.size());
      put(&zero, 1), put(&c.num_frames, 8), put(&c.height, 4), put(&c.width, 4), put(&c.fps, 8), put(&usable, 1);
    }
    h.bytes(block.data(), used);
  } else {
    h.bytes(bucketing_.sample_bucket.data(), bucketing_.sample_bucket.size() * sizeof(uint16_t));
    for (const Bucket& b : bucketing_.buckets) h.pod(b.frames), h.pod(b.height), h.pod(b.width), h.pod(b.tokens);
  }
  h.str(model_.name), h.str(device_.name), h.str(grid_.name), h.str(cfg_.cost_model), h.str(cfg_.profile);
  h.pod(uint8_t(sharded_)), h.pod(uint8_t(cfg_.checkpointing)), h.pod(uint8_t(cfg_.end_policy)), h.pod(uint8_t(cfg_.oversize));
  h.pod(cfg_.mem_budget_tokens), h.pod(cfg_.comp_budget), h.pod(cfg_.p), h.pod(cfg_.step_budget_s);
  h.str(cfg_.fixed_config);
  // Resolved budgets too: a state from a planner that resolved them differently (another
  // world size under FSDP, another search result) must not replay silently.
  h.pod(base_.mem_budget_tokens), h.pod(base_.comp_budget), h.pod(base_.p), h.pod(base_.step_budget_s);
  h.pod(memory_.static_bytes);
  h.pod(uint8_t(sync_)), h.pod(cfg_.collective_overlap), h.pod(uint8_t(cfg_.reshard_after_forward));
  h.pod(uint8_t(base_.batch_kind)), h.pod(base_.batch_target);
  if (!base_.bucket_group.empty() || sp_fixed_ > 0 || cfg_.sp == "per-sample") {
    // Sequence parallelism changes plans; without it the fingerprint stays as it was.
    h.str(cfg_.sp), h.pod(sp_sizes_), h.pod(device_.node_size);
    h.bytes(base_.bucket_group.data(), base_.bucket_group.size());
  }
  fingerprint_ = h.digest();
}

void Planner::resolve_budgets() {
  const auto& buckets = bucketing_.buckets;
  std::vector<int64_t> live(buckets.size(), 0);  // buckets with samples in the pool
  for (uint32_t id : pool_) live[bucketing_.sample_bucket[id]] = 1;

  // M_mem: the largest token budget for which floor(M/S) samples of every bucket fit memory.
  int64_t M = cfg_.mem_budget_tokens;
  if (M <= 0) {
    M = INT64_MAX;
    // Tokens per GPU: a sample on a group of g holds S / g on each.
    auto per_gpu = [&](size_t b) { return (buckets[b].tokens + base_.group(uint16_t(b)) - 1) / base_.group(uint16_t(b)); };
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::min<int64_t>(M, (base_.max_batch_memory[b] + 1) * per_gpu(b) - 1);
    if (M == INT64_MAX) M = 0;
    // Never below the longest sample: each bucket's batch is capped at memory separately.
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::max<int64_t>(M, per_gpu(b));
  }
  base_.mem_budget_tokens = M;
  resolve_global_batch();
  base_.p = cfg_.p > 0 ? cfg_.p : fit_power(*cost_, buckets, bucketing_.bucket_counts).p;

  if (cfg_.comp_budget > 0) {
    base_.comp_budget = cfg_.comp_budget;
  } else if (max_group() > 1) {
    // With sequence parallelism M_comp is not searched: it never binds (dual runs as
    // equal_tokens) unless --comp-budget gives one.
    double hi = 0;
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b])
        hi = std::max(hi, double(std::max<int64_t>(1, base_.max_batch_memory[b])) *
                              std::pow(double(buckets[b].tokens), base_.p));
    base_.comp_budget = hi;
  } else if (!pool_.empty()) {
    // Search M_comp on a geometric grid from "every bucket alone" to "never binds" for the
    // best throughput of `dual`, in expectation over its random batch order: computed from the
    // per-bucket counts in O(buckets) per candidate instead of planning the pool 32 times.
    // A dual plan sees the pool only through the counts n_b: bucket b gives floor(n_b / B_b)
    // batches of B_b and one of n_b mod B_b; the N batches are shuffled uniformly and dealt W
    // to a slot (padding repeats the first batches: distinct positions again when N >= W),
    // so every slot holds a uniform W-subset and P(max <= t_j) = C(a_j, W) / C(N, W), a_j the
    // batches no slower than t_j. One slot per step (or micro sync, where slots add up): the
    // expected epoch time follows exactly. Step sync with g > 1 slots per step: the max over
    // ranks of a sum of g batch times, taken as normal (mean g mu, sd sqrt(g) sigma, the
    // expected max of W standard normals), within [g mu, g t_max]. tests/test_scale.cpp
    // compares the pick with the full search (planning and simulating every candidate), which
    // pools of up to 2^16 samples still get.
    double lo = 0, hi = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (!live[b]) continue;
      double sp = std::pow(double(buckets[b].tokens), base_.p);
      int64_t bmax = std::min<int64_t>(base_.max_batch_memory[b], std::max<int64_t>(1, M / buckets[b].tokens));
      lo = std::max(lo, sp);
      hi = std::max(hi, double(bmax) * sp);
    }
    hi = std::max(hi, lo);
    check_finite(lo, "the compute budget search's lower end (B x S^p of the longest sample)");
    check_finite(hi, "the compute budget search's upper end");
    std::vector<int64_t> count(buckets.size(), 0);
    for (uint32_t id : pool_) ++count[bucketing_.sample_bucket[id]];
    PlanProblem pr = problem(cfg_.world_size, 0, 0, {});
    pr.pool_view = &pool_;  // lent for target_steps(), not copied
    const uint64_t target_steps = pr.target_steps();
    const int64_t W = cfg_.world_size;
    const double ar = pr.allreduce_s;
    // E[max of W standard normals] = int x W phi(x) Phi(x)^(W-1) dx (midpoint rule).
    double e_w = 0;
    for (int i = 0; i < 4000; ++i) {
      const double x = -8 + 16 * (i + 0.5) / 4000, phi = std::exp(-0.5 * x * x) / std::sqrt(2 * 3.14159265358979323846);
      e_w += x * double(W) * phi * std::pow(0.5 * std::erfc(-x / std::sqrt(2.0)), double(W - 1)) * (16.0 / 4000);
    }
    std::vector<std::pair<double, int64_t>> t;  // (seconds of a batch, batches that long)
    auto expected_throughput = [&](double c) {
      pr.comp_budget = c;
      const std::vector<int64_t> B = dual_batch_sizes(pr);
      t.clear();
      int64_t N = 0, samples = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        if (count[b] == 0) continue;
        const int64_t q = count[b] / B[b], r = count[b] % B[b];
        if (q) t.emplace_back(cost_->microbatch_time(B[b], buckets[b]), q);
        if (r) t.emplace_back(cost_->microbatch_time(r, buckets[b]), 1);
        N += q + (r > 0), samples += count[b];
      }
      std::sort(t.begin(), t.end());
      const bool pad = pr.end_policy == EndPolicy::kPad;
      const int64_t slots = pad ? (N + W - 1) / W : N / W;
      if (slots == 0) return 0.0;
      const double trained = pad ? double(samples) : double(samples) * double(slots * W) / double(N);
      // f(max of a slot) summed over the max's distribution.
      auto expect = [&](auto f) {
        if (N <= W) return f(t.back().first);  // one slot holds every batch
        const double lN = std::lgamma(double(N) + 1) - std::lgamma(double(N - W) + 1);
        double e = 0, prev = 0;
        int64_t a = 0;
        for (const auto& [tj, nj] : t) {
          a += nj;
          const double F =
              a < W ? 0 : a == N ? 1 : std::exp(std::lgamma(double(a) + 1) - std::lgamma(double(a - W) + 1) - lN);
          e += f(tj) * (F - prev), prev = F;
        }
        return e;
      };
      double epoch = 0;
      if (pr.layout.sync == SyncMode::kMicro) {
        epoch = double(slots) *
                expect([&](double x) { return x + std::max(0.0, pr.layout.exposed_slot_comm(x)); });
      } else if (target_steps == 0 || target_steps >= uint64_t(slots)) {
        epoch = double(slots) * (expect([](double x) { return x; }) + ar);
      } else {
        double mu = 0, m2 = 0;
        for (const auto& [tj, nj] : t) mu += tj * double(nj), m2 += tj * tj * double(nj);
        mu /= double(N), m2 /= double(N);
        const double sigma = std::sqrt(std::max(0.0, m2 - mu * mu)), tmax = t.back().first;
        const uint64_t K = target_steps, g = uint64_t(slots) / K, big = uint64_t(slots) % K;
        auto step = [&](double gs) {
          return std::min(gs * tmax, std::max(gs * mu, gs * mu + std::sqrt(gs) * sigma * e_w)) + ar;
        };
        epoch = double(K - big) * step(double(g)) + double(big) * step(double(g + 1));
      }
      return epoch > 0 ? trained / epoch : 0.0;
    };
    // A small pool is planned and simulated at every candidate (its one batch order, not the
    // expectation, decides there; at most 32 plans of 2^16 samples).
    constexpr size_t kFullSearchMaxSamples = size_t(1) << 16;
    const bool full = pool_.size() <= kFullSearchMaxSamples;
    double best = lo, best_tp = -1;
    for (int i = 0; i < kCompSearchPoints; ++i) {
      double c = lo * std::pow(hi / lo, double(i) / (kCompSearchPoints - 1));
      double tp = 0;
      if (full) {
        PlanProblem fp = problem(cfg_.world_size, 0, 0, {});
        fp.pool_view = &pool_;
        fp.comp_budget = c;
        tp = simulate(plan_dual(fp)).throughput_samples_per_s;
      } else {
        tp = expected_throughput(c);
      }
      comp_search_.emplace_back(c, tp);
      if (tp > best_tp) best_tp = tp, best = c;
    }
    base_.comp_budget = best;
  }

  base_.step_budget_s = cfg_.step_budget_s > 0 ? cfg_.step_budget_s : auto_step_budget(*cost_);
  // Output check: resolved budgets are finite (inputs were range-checked on the way in).
  check_finite(base_.p, "the exponent p");
  check_finite(base_.comp_budget, "the compute budget M_comp");
  check_finite(base_.step_budget_s, "the step budget");
  check_finite(base_.allreduce_s, "the all-reduce time per step");
  if (!(base_.p > 0))
    throw ConfigError("the exponent p fitted to the cost model is " + fmt("%g", base_.p) +
                      "; pass --p");
}

void Planner::resolve_global_batch() {
  const auto [kind, value] = parse_global_batch(cfg_.global_batch);
  const auto& buckets = bucketing_.buckets;
  const double n = double(pool_.size());
  if (kind == "free") {
    base_.batch_kind = BatchKind::kFree, base_.batch_target = 0;
    global_batch_text_ = "free (each strategy's own)";
    return;
  }
  if (kind == "tokens") {
    base_.batch_kind = BatchKind::kTokens, base_.batch_target = value;
    global_batch_text_ = "tokens:" + fmt("%.0f", value);
    return;
  }
  if (kind == "samples") {
    base_.batch_kind = BatchKind::kSamples, base_.batch_target = value;
    global_batch_text_ = "samples:" + fmt("%.0f", value);
    return;
  }
  double steps = value;
  if (kind == "auto") {
    // The step count of a bucket loader with the same memory budget: equal_tokens' batches
    // (B = M_mem / S, capped at memory), W to a step.
    std::vector<uint64_t> per_bucket(buckets.size(), 0);
    for (uint32_t id : pool_) ++per_bucket[bucketing_.sample_bucket[id]];
    // With sequence parallelism: equal_tokens on groups of the largest g any sample needs.
    const int g = max_group();
    PlanProblem pr = base_;
    pr.world_size = cfg_.world_size;
    if (g > 1) pr = as_groups(pr, g, nullptr);
    const std::vector<int64_t> B = equal_tokens_batch_sizes(pr);
    uint64_t batches = 0;
    for (size_t b = 0; b < buckets.size(); ++b) batches += (per_bucket[b] + uint64_t(B[b]) - 1) / uint64_t(B[b]);
    const uint64_t W = uint64_t(pr.world_size);
    steps = double(std::max<uint64_t>(1, (batches + W - 1) / W));
  }
  // A step count is kept as tokens per step, as a bucket loader keeps them (its samples per
  // step swing between image and clip batches); an elastic resume keeps the rate.
  double tokens = 0;
  for (uint32_t id : pool_) tokens += double(buckets[bucketing_.sample_bucket[id]].tokens);
  base_.batch_kind = BatchKind::kTokens;
  base_.batch_target = tokens / steps;
  global_batch_text_ = "steps:" + fmt("%.0f", steps) + (kind == "auto" ? " (auto: as equal_tokens)" : "") + ", " +
                       fmt("%.0f", base_.batch_target) + " tokens (" + fmt("%.1f", n / steps) + " samples)/step";
}

std::string Planner::global_batch_text() const { return global_batch_text_; }

ParallelLayout Planner::layout(int world_size) const {
  ParallelLayout l;
  l.sync = sync_;
  l.sp = seq_parallel(world_size);
  const double P = model_.params;
  if (sync_ == SyncMode::kStep) {
    // fp32 gradients, one ring all-reduce per global step.
    l.step_sync_s = ring_allreduce_seconds(P * 4.0, world_size, device_.allreduce_bus_bytes_per_s,
                                           device_.allreduce_latency_s);
  } else {
    // Per micro-batch: a ring all-gather of the bf16 parameters in forward (again in
    // backward when resharded after forward) when they are sharded, and a reduce-scatter of
    // the fp32 gradients; each is half a ring all-reduce of its bytes.
    auto half_ring = [&](double bytes) {
      return 0.5 * ring_allreduce_seconds(bytes, world_size, device_.allreduce_bus_bytes_per_s,
                                          device_.allreduce_latency_s);
    };
    const double gathers = sharded_ ? (cfg_.reshard_after_forward ? 2.0 : 1.0) : 0.0;
    l.slot_comm_s = gathers * half_ring(P * 2.0) + half_ring(P * 4.0);
    l.overlap = cfg_.collective_overlap;
  }
  return l;
}

double Planner::auto_step_budget(const CostModel& cost) const {
  // The slowest micro-batch the memory budget admits, i.e. the longest step equal_tokens
  // already runs: balanced keeps every rank busy for up to that long.
  const auto& buckets = bucketing_.buckets;
  std::vector<uint8_t> live(buckets.size(), 0);
  for (uint32_t id : pool_) live[bucketing_.sample_bucket[id]] = 1;
  std::vector<int64_t> B = equal_tokens_batch_sizes(base_);
  const SeqParallel sp = seq_parallel(cfg_.world_size);
  double s = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!live[b]) continue;
    const int g = base_.group(uint16_t(b));
    if (g > 1)  // M_mem counts tokens per GPU: a group holds g times as many
      B[b] = std::max<int64_t>(1, std::min<int64_t>(base_.max_batch_memory[b],
                                                    base_.mem_budget_tokens * g / buckets[b].tokens));
    s = std::max(s, group_microbatch_time(cost, B[b], buckets[b], g, sp));
  }
  return s;
}

PlanProblem Planner::problem(int world_size, int64_t epoch, uint64_t segment, std::vector<uint32_t> pool) const {
  PlanProblem pr = base_;
  pr.epoch = epoch;
  pr.world_size = world_size > 0 ? world_size : cfg_.world_size;
  pr.layout = layout(pr.world_size);
  pr.allreduce_s = pr.layout.step_sync_s;
  pr.segment = segment;
  pr.pool = std::move(pool);
  if (pr.world_size != cfg_.world_size && sp_sizes_ != 1) {
    // Another world size (elastic resume) allows other group sizes: choose them again.
    std::vector<uint8_t> group;
    choose_groups(pr.world_size, sp_fixed_, group, pr.max_batch_memory);
    for (size_t b = 0; b < group.size(); ++b)
      if (pr.max_batch_memory[b] < 1 && live_[b])
        throw ConfigError("on " + std::to_string(pr.world_size) + " ranks no allowed sequence-parallel group size fits "
                          "a sample of bucket " + bucketing_.buckets[b].name() + " (it needed a group of " +
                          std::to_string(base_.group(uint16_t(b))) + " on " + std::to_string(cfg_.world_size) +
                          "); resume on a world size that the group sizes (--sp-sizes) divide");
    for (size_t b = 0; b < group.size(); ++b)
      if (!live_[b]) group[b] = 1;
    pr.bucket_group.clear();
    if (std::any_of(group.begin(), group.end(), [](uint8_t g) { return g > 1; })) pr.bucket_group = group;
  }
  return pr;
}

SeqParallel Planner::seq_parallel(int world_size) const {
  const int W = world_size > 0 ? world_size : cfg_.world_size;
  SeqParallel sp;
  for (int k = 1; (1 << k) <= kMaxGroup; ++k) {
    const int g = 1 << k;
    if ((sp_sizes_ >> k & 1u) && g <= device_.node_size && W % g == 0 && model_.heads % g == 0) sp.sizes |= 1u << k;
  }
  // Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023): around every self-attention, all-to-alls
  // of q, k, v (sequence -> heads) and of the output (heads -> sequence), each rank sending
  // (g - 1) / g of its S / g x D bf16 values; in forward, in backward (their gradients) and
  // again in the recomputed forward under checkpointing: 4 x (2 + ckpt) per layer.
  const double per_layer = 4.0 * (2 + (cfg_.checkpointing ? 1 : 0));
  const double a2a = per_layer * double(model_.layers);
  sp.a2a_s_per_token = a2a * 2.0 * double(model_.dim) / device_.alltoall_bytes_per_s;
  sp.a2a_latency_s = a2a * device_.alltoall_latency_s;
  return sp;
}

int64_t Planner::max_batch_on(size_t b, int g) const {
  const int64_t per_gpu = (bucketing_.buckets[b].tokens + g - 1) / g;
  if (cfg_.mem_budget_tokens > 0 && per_gpu > cfg_.mem_budget_tokens) return 0;
  return memory_.max_batch(per_gpu, usable_memory_bytes());
}

void Planner::choose_groups(int world_size, int fixed_g, std::vector<uint8_t>& group,
                            std::vector<int64_t>& max_mem) const {
  const auto& buckets = bucketing_.buckets;
  const SeqParallel sp = seq_parallel(world_size);
  group.assign(buckets.size(), 1);
  max_mem.assign(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (int g = fixed_g > 0 ? fixed_g : 1; g <= kMaxGroup; g *= 2) {
      if (g > 1 && !sp.allows(g)) {
        if (fixed_g > 0) break;
        continue;
      }
      group[b] = uint8_t(g);
      max_mem[b] = max_batch_on(b, g);  // 0: fits no allowed group (memory or the token budget)
      if (max_mem[b] >= 1 || fixed_g > 0) break;
    }
  }
}

int Planner::max_group() const {
  int g = 1;
  for (size_t b = 0; b < base_.bucket_group.size(); ++b)
    if (live_[b]) g = std::max(g, int(base_.bucket_group[b]));
  return g;
}

PlanProblem Planner::as_groups(const PlanProblem& pr, int g, const CostModel* group_cost) const {
  PlanProblem q = pr;
  if (g <= 1) {
    q.bucket_group.clear();
    return q;
  }
  q.world_size = pr.world_size / g;
  q.cost = group_cost;
  std::vector<uint8_t> group;
  choose_groups(pr.world_size, g, group, q.max_batch_memory);
  q.bucket_group.clear();
  // A group holds g times a GPU's tokens and does 1 / g of the compute per GPU.
  q.mem_budget_tokens = pr.mem_budget_tokens * g;
  q.comp_budget = pr.comp_budget * g;
  return q;
}

Plan Planner::run_on_groups(const StrategyEntry& s, const PlanProblem& pr, int g) const {
  // The problem's own cost model (an adapted one after online adaptation) on g ranks.
  const GroupCost cost(*pr.cost, g, seq_parallel(pr.world_size));
  const PlanProblem q = as_groups(pr, g, &cost);
  std::vector<uint8_t> live(q.max_batch_memory.size(), 0);
  for (uint32_t id : pr.pool_ids()) live[(*pr.sample_bucket)[id]] = 1;
  for (size_t b = 0; b < q.max_batch_memory.size(); ++b)
    if (q.max_batch_memory[b] < 1 && live[b])
      throw ConfigError("a sample of bucket " + bucketing_.buckets[b].name() + " does not fit a sequence-parallel group of " +
                        std::to_string(g) + "; use a larger group size");
  if (std::string(s.name) == "fixed" && q.fixed_batch.size() != bucketing_.buckets.size())
    throw ConfigError(fixed_error_);
  Plan p = s.fn(q);
  // Each of the W / g plan ranks is a group: its g ranks list the same micro-batches.
  Plan out;
  out.strategy = p.strategy;
  out.world_size = pr.world_size;
  out.sync = p.sync;
  out.sample_ids = std::move(p.sample_ids);
  out.steps = std::move(p.steps);
  out.padded_samples = p.padded_samples;
  out.dropped = std::move(p.dropped);
  out.micro_batches.reserve(p.micro_batches.size() * size_t(g));
  out.rank_begin.reserve(out.steps.size() * size_t(pr.world_size) + 1);
  for (size_t t = 0; t < out.steps.size(); ++t)
    for (int v = 0; v < q.world_size; ++v) {
      const auto [b, e] = p.rank_range(t, v);
      for (int k = 0; k < g; ++k) {
        out.micro_batches.insert(out.micro_batches.end(), p.micro_batches.begin() + long(b), p.micro_batches.begin() + long(e));
        out.rank_begin.push_back(out.micro_batches.size());
      }
    }
  out.mb_group.assign(out.micro_batches.size(), uint8_t(g));
  return out;
}

std::vector<int64_t> Planner::resolve_fixed(std::string& error) const {
  auto table = cfg_.fixed_config.empty() ? grid_.fixed_batch_sizes : load_fixed_batch_sizes(cfg_.fixed_config);
  const std::string src = cfg_.fixed_config.empty() ? "grid '" + grid_.name + "'" : cfg_.fixed_config;
  std::vector<int64_t> out(bucketing_.buckets.size(), 1);
  for (size_t b = 0; b < bucketing_.buckets.size(); ++b) {
    const Bucket& bk = bucketing_.buckets[b];
    auto tier = table.find(bk.tier);
    if (tier == table.end() || tier->second.upper_bound(bk.frames) == tier->second.begin()) {
      error = "fixed batch sizes of " + src + " have no entry for bucket " + bk.name() + " (tier " + bk.tier + ", " +
              std::to_string(bk.frames) + " frames); add one, or pass --fixed-config FILE";
      return {};
    }
    out[b] = std::prev(tier->second.upper_bound(bk.frames))->second;
  }
  return out;
}

Plan Planner::run(const StrategyEntry& s, const PlanProblem& pr) const {
  if (std::string(s.name) == "fixed" && pr.fixed_batch.size() != bucketing_.buckets.size())
    throw ConfigError(fixed_error_);
  if (!pr.bucket_group.empty()) {
    // Groups of different sizes: balanced plans them per sample; the other strategies (and
    // one g for all) run on groups of the largest g, as W / g ranks.
    int gmax = 1, gmin = 1 << 10;
    std::vector<uint8_t> live(pr.bucket_group.size(), 0);
    for (uint32_t id : pr.pool_ids()) live[(*pr.sample_bucket)[id]] = 1;
    for (size_t b = 0; b < live.size(); ++b)
      if (live[b]) gmax = std::max(gmax, int(pr.bucket_group[b])), gmin = std::min(gmin, int(pr.bucket_group[b]));
    if (std::string(s.name) != "balanced") return run_on_groups(s, pr, gmax);
    if (cfg_.sp == "min" || sp_fixed_ > 0) return gmin == gmax ? run_on_groups(s, pr, gmax) : s.fn(pr);
    return run_balanced_groups(s, pr);
  }
  if (std::string(s.name) == "balanced" && cfg_.sp == "per-sample" && seq_parallel(pr.world_size).sizes != 1)
    return run_balanced_groups(s, pr);
  if (std::string(s.name) == "balanced") return run_balanced_held(s, pr);
  return s.fn(pr);
}

Plan Planner::run_balanced_held(const StrategyEntry& s, const PlanProblem& pr) const {
  Plan held = s.fn(pr);
  // Up to kHeldCheckSamples samples, the per-step batch and then the mix are let go where
  // keeping them would leave balanced slower than a bucket loader at the same global batch
  // (small pools with long clips at few steps); beyond, both are kept.
  constexpr size_t kHeldCheckSamples = 2'000'000;
  if (pr.layout.sync != SyncMode::kStep || pr.target_steps() == 0 || pr.pool_ids().size() > kHeldCheckSamples)
    return held;
  PlanProblem q = pr;
  q.hold = 0;
  Plan quick = s.fn(q);
  double t = simulate(held).throughput_samples_per_s;
  if (t >= simulate(quick).throughput_samples_per_s) return held;
  double best_other = 0;
  for (const StrategyEntry& other : strategies())
    if (std::string(other.name) != "balanced" && !(std::string(other.name) == "fixed" && !fixed_error_.empty()))
      best_other = std::max(best_other, simulate(run(other, pr)).throughput_samples_per_s);
  if (t >= best_other) return held;
  for (const uint8_t hold : {kHoldBatch, kHoldMix}) {
    q.hold = hold;
    Plan p = s.fn(q);
    if (simulate(p).throughput_samples_per_s >= best_other) return p;
  }
  return quick;
}

Plan Planner::run_balanced_groups(const StrategyEntry& s, const PlanProblem& pr) const {
  const auto& buckets = bucketing_.buckets;
  const size_t nb = buckets.size();
  const SeqParallel sp = seq_parallel(pr.world_size);
  std::vector<uint8_t> live(nb, 0);
  for (uint32_t id : pr.pool_ids()) live[(*pr.sample_bucket)[id]] = 1;
  std::vector<int> sizes;
  for (int g = 1; g <= kMaxGroup; g *= 2)
    if (sp.allows(g)) sizes.push_back(g);
  double c_max = 0, work = 0;
  std::vector<int64_t> count(nb, 0);
  for (uint32_t id : pr.pool_ids()) ++count[(*pr.sample_bucket)[id]];
  for (size_t b = 0; b < nb; ++b)
    if (live[b]) {
      const int g = pr.group(uint16_t(b));
      c_max = std::max(c_max, group_microbatch_time(*pr.cost, 1, buckets[b], g, sp));
      work += double(count[b]) * g * group_sample_time(*pr.cost, buckets[b], g, sp);
    }
  // A rank-step's share of the work at the global batch's step count (0: free).
  const uint64_t K = pr.target_steps();
  const double share = K > 0 ? work / (double(K) * pr.world_size) : 0;
  // Candidates: a floor f for every bucket, and then long samples raised until one takes at
  // most theta (inf; a quarter of the longest sample at its smallest group; a rank-step's
  // share of the work, or half of it); each is planned and simulated, and the fastest kept.
  std::vector<std::vector<uint8_t>> cands;
  for (int f : sizes)
    for (double theta : {1e300, c_max / 4, share > 0 ? share : 1e300, share > 0 ? share / 2 : 1e300}) {
      std::vector<uint8_t> g(nb, 1);
      bool ok = true;
      for (size_t b = 0; b < nb && ok; ++b) {
        if (!live[b]) continue;
        size_t k = 0;
        while (k < sizes.size() && (sizes[k] < std::max(f, pr.group(uint16_t(b))) || max_batch_on(b, sizes[k]) < 1)) ++k;
        while (k + 1 < sizes.size() && group_microbatch_time(*pr.cost, 1, buckets[b], sizes[k], sp) > theta) ++k;
        ok = k < sizes.size();
        if (ok) g[b] = uint8_t(sizes[k]);
      }
      if (ok && std::find(cands.begin(), cands.end(), g) == cands.end()) cands.push_back(g);
    }
  if (cands.empty())
    throw ConfigError("no allowed sequence-parallel group size fits every sample on " + std::to_string(pr.world_size) +
                      " ranks (memory or --mem-budget); allow larger groups (--sp-sizes) or raise the budget");
  SimEnv env = sim_env(pr.world_size);
  env.cost = pr.cost;
  auto plan_with = [&](const std::vector<uint8_t>& g, const std::vector<uint32_t>* sub) {
    int gmin = kMaxGroup, gmax = 1;
    PlanProblem q = pr;
    if (sub) q.pool_view = sub;
    for (size_t b = 0; b < nb; ++b) {
      q.max_batch_memory[b] = max_batch_on(b, g[b]);
      if (live[b]) gmin = std::min(gmin, int(g[b])), gmax = std::max(gmax, int(g[b]));
    }
    q.bucket_group = g;
    return gmin == gmax ? run_on_groups(s, q, gmax) : s.fn(q);
  };
  // A large pool is compared on every k-th of its samples (the global batch is a rate per
  // step, so the sample keeps its shape) and only the chosen candidate is planned in full.
  constexpr size_t kSearchSamples = size_t(1) << 17;
  const std::vector<uint32_t>& ids = pr.pool_ids();
  std::vector<uint32_t> sub;
  if (ids.size() > kSearchSamples && cands.size() > 1) {
    const size_t stride = (ids.size() + kSearchSamples - 1) / kSearchSamples;
    for (size_t i = 0; i < ids.size(); i += stride) sub.push_back(ids[i]);
  }
  // The fastest among the candidates that keep the global batch's step count (as near as
  // any does): a plan of fewer, larger steps would win by running fewer collectives.
  const uint64_t target = sub.empty() ? K : [&] {
    PlanProblem q = pr;
    q.pool_view = &sub;
    return q.target_steps();
  }();
  Plan best;
  size_t best_i = 0;
  double best_tp = -1;
  uint64_t best_steps = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    Plan p = plan_with(cands[i], sub.empty() ? nullptr : &sub);
    const double tp = adaptiveload::simulate(p, env).throughput_samples_per_s;
    const uint64_t steps = target > 0 ? std::min<uint64_t>(p.num_steps(), target) : 0;
    if (steps > best_steps || (steps == best_steps && tp > best_tp))
      best_tp = tp, best_i = i, best_steps = steps, best = std::move(p);
  }
  return sub.empty() ? best : plan_with(cands[best_i], nullptr);
}

Plan Planner::plan_fixed_group(const std::string& strategy, int g, int world_size) const {
  const SeqParallel sp = seq_parallel(world_size);
  if (g > 1 && !sp.allows(g))
    throw ConfigError("sequence-parallel group size " + std::to_string(g) + " is not allowed here (sizes must divide the "
                      "world size and the model's heads, and be at most the node size)");
  PlanProblem pr = problem(world_size, cfg_.epoch, 0, {});
  pr.pool_view = &pool_;
  return run_on_groups(find_strategy(strategy), pr, g);
}

Plan Planner::plan(const std::string& strategy, int world_size, int64_t epoch) const {
  if (world_size < 0 || world_size > kMaxWorldSize)
    throw ConfigError("world size is " + std::to_string(world_size) + "; it must be in 1.." +
                      std::to_string(kMaxWorldSize) + " (or 0: the configured one)");
  PlanProblem pr = problem(world_size, epoch < 0 ? cfg_.epoch : epoch, 0, {});
  pr.pool_view = &pool_;  // the whole pool: lent, not copied (4 bytes a sample at 10M)
  return run(find_strategy(strategy), pr);
}

SimEnv Planner::sim_env(int world_size) const {
  SimEnv env;
  env.buckets = &bucketing_.buckets;
  env.cost = cost_.get();
  env.memory = memory_;
  env.device_memory_bytes = device_.memory_bytes;
  env.layout = layout(world_size);
  env.allreduce_s = env.layout.step_sync_s;  // step mode only; 0 in micro mode
  return env;
}

Metrics Planner::simulate(const Plan& plan) const { return adaptiveload::simulate(plan, sim_env(plan.world_size)); }

PlanState Planner::initial_state(const std::string& strategy, int world_size, int64_t epoch) const {
  find_strategy(strategy);
  PlanState s;
  s.strategy = strategy;
  s.fingerprint = fingerprint_;
  s.seed = cfg_.seed;
  s.epoch = epoch < 0 ? cfg_.epoch : epoch;
  s.segments = {{world_size > 0 ? world_size : cfg_.world_size, 0}};
  s.sync = sync_name(sync_);
  return s;
}

Planner::Resumed Planner::resume(const PlanState& state, int world_size, const std::string& new_cost) const {
  if (state.sync != sync_name(sync_))
    throw InputError("sampler state",
                     "was saved for a " + state.sync + "-sync plan (" +
                         (state.sync == "micro" ? "FSDP, ZeRO-2/3" : "DDP, ZeRO-1") + "), but this planner plans for " +
                         sync_name(sync_) + " sync; resume with the same sync mode (and sharding) it was saved with");
  if (state.fingerprint != fingerprint_)
    throw InputError("sampler state", "was saved for another manifest or planner configuration (fingerprint mismatch); "
                                      "resume with the same manifest and options, or start a new epoch");
  if (state.seed != cfg_.seed)
    throw InputError("sampler state", "was saved for seed " + std::to_string(state.seed) + ", not seed " +
                                          std::to_string(cfg_.seed) + "; resume with the same seed");
  if (!state.segment_costs.empty() && state.segment_costs.size() != state.segments.size())
    throw InputError("sampler state", "segment costs do not match its segments");
  const StrategyEntry& strat = find_strategy(state.strategy);
  if (world_size < 1 || world_size > kMaxWorldSize)
    throw ConfigError("world size is " + std::to_string(world_size) + "; it must be in 1.." +
                      std::to_string(kMaxWorldSize));
  std::vector<uint8_t> done(bucketing_.sample_bucket.size(), 0);
  auto remaining_pool = [&] {
    std::vector<uint32_t> pool;
    for (uint32_t id : pool_)
      if (!done[id]) pool.push_back(id);
    return pool;
  };
  // A segment planned with an adapted cost model deals by that model; budgets stay the
  // configured ones (they are part of the fingerprint).
  auto plan_segment = [&](int w, uint64_t seg, const std::string& cost) {
    PlanProblem pr = problem(w, state.epoch, seg, remaining_pool());
    std::unique_ptr<CostModel> adapted;
    if (!cost.empty()) {
      adapted = ProfileCost::from_cost_json(cost);
      pr.cost = adapted.get();
      // The step budget is seconds: an automatic one is re-derived under the adapted model;
      // a given one is raised, if needed, to the adapted model's longest single sample.
      if (cfg_.step_budget_s > 0) {
        for (uint32_t id : pr.pool_ids()) {
          const Bucket& b = bucketing_.buckets[bucketing_.sample_bucket[id]];
          pr.step_budget_s = std::max(pr.step_budget_s, adapted->microbatch_time(1, b) * (1 + 1e-9));
        }
      } else {
        pr.step_budget_s = auto_step_budget(*adapted);
      }
    }
    return run(strat, pr);
  };
  Resumed out;
  out.state = state;
  for (size_t seg = 0; seg < state.segments.size(); ++seg) {
    auto [w, steps_done] = state.segments[seg];
    Plan p = plan_segment(w, seg, state.cost_of(seg));
    if (size_t(steps_done) > p.num_steps())
      throw InputError("sampler state", "records " + std::to_string(steps_done) + " steps done but the plan has " +
                                            std::to_string(p.num_steps()));
    const bool last = seg + 1 == state.segments.size();
    if (last && w == world_size && new_cost.empty()) {
      out.plan = std::move(p);
      out.first_step = size_t(steps_done);
      return out;
    }
    for (uint64_t m = 0; m < p.rank_begin[size_t(steps_done) * size_t(w)]; ++m) {
      const MicroBatch& mb = p.micro_batches[m];
      if (!mb.padded)
        for (uint32_t k = 0; k < mb.count; ++k) done[p.sample_ids[mb.begin + k]] = 1;
    }
  }
  // World size or cost model changed: plan what is left as a new segment.
  const uint64_t seg = state.segments.size();
  // The new segment keeps the latest adapted model unless a newer one is given.
  std::string cost = new_cost.empty() ? state.cost_of(seg - 1) : canonical_cost_json(new_cost);
  out.plan = plan_segment(world_size, seg, cost);
  out.first_step = 0;
  out.state.segments.emplace_back(world_size, 0);
  if (!cost.empty() || !out.state.segment_costs.empty()) {
    out.state.segment_costs.resize(out.state.segments.size() - 1);
    out.state.segment_costs.push_back(cost);
  }
  return out;
}

}  // namespace adaptiveload
