// Oversize samples (one alone exceeds device memory on every allowed group size, or the token
// budget): an error with advice that follows the configuration, or left out and reported;
// what remains is the pool the strategies plan.
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

// Advice for a sample too big for memory, following the configuration it was planned under.
std::string oversize_advice(const PlannerConfig& cfg, const PlanOptions& opt, bool sharded,
                            bool memory_bound, int largest_group, int node_size, int heads) {
  // A larger group is advice only where one could be used: a power of two up to the node size
  // that divides the world size and the heads.
  int larger = 0;
  for (int g = 2 * largest_group; g <= node_size && larger == 0; g *= 2)
    if (cfg.world_size % g == 0 && heads % g == 0) larger = g;
  std::string a;
  auto add = [&](const std::string& s) { a += (a.empty() ? "" : ", ") + s; };
  if (memory_bound) {
    if (opt.sp == SpPolicy::kOff)
      add("allow sequence parallelism (" + option_word("sp", "auto") +
          ") to split such a sample over a group of GPUs");
    else if (larger > 0)
      add("allow larger sequence-parallel groups (" + option_word("sp_sizes") + " with " +
          std::to_string(larger) +
          "; a group size must divide the world size and the model's heads and be at most the node "
          "size " +
          std::to_string(node_size) + ")");
    else if (largest_group < node_size)
      add("run on a world size that larger sequence-parallel groups divide (no group size above " +
          std::to_string(largest_group) + " divides " + std::to_string(cfg.world_size) +
          " ranks and " + std::to_string(heads) + " heads)");
    if (!cfg.checkpointing)
      add("enable activation checkpointing (" + option_word("checkpointing", "on") + ")");
    if (!sharded && cfg.world_size > 1)
      add("shard the model state (" + option_word("sharding", "fsdp") + ")");
    if (!sharded && cfg.world_size == 1)
      add("shard the model state over more GPUs (" + option_word("sharding", "fsdp") + " with " +
          option_word("world_size", Spelling::kShort) + " > 1)");
    add("use a larger device or a smaller bucket grid");
  } else {
    add("raise " + option_word("mem_budget_tokens") + " (or leave it on auto)");
    add("use a smaller bucket grid");
  }
  return "; " + a + ", or pass " + option_word("on_oversize", "skip", Spelling::kEquals) +
         " to leave such samples out";
}

}  // namespace

std::vector<uint8_t> Planner::fill_pool(const Manifest* manifest, const std::vector<uint8_t>& group,
                                        const std::vector<int64_t>& max_mem) {
  const auto& buckets = bucketing_.buckets;
  const double usable = usable_memory_bytes();
  std::vector<uint8_t> too_big(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b)
    too_big[b] =
        max_mem[b] < 1 || (cfg_.mem_budget_tokens > 0 &&
                           (buckets[b].tokens + group[b] - 1) / group[b] > cfg_.mem_budget_tokens);
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
    const int g_max = opt_.sp_group > 0 ? opt_.sp_group : largest;
    const bool memory_bound = memory_.max_batch((bk.tokens + g_max - 1) / g_max, usable) < 1;
    if (memory_bound) {
      const int g = g_max;
      double need = memory_.bytes(MicroShape::uniform(1, bk), g);
      msg = "one sample of bucket " + bk.name() + " (" + std::to_string(bk.tokens) +
            " tokens) needs " + fmt_gb(need) +
            (g > 1 ? " per GPU on a sequence-parallel group of " + std::to_string(g) +
                         " (the largest allowed)"
                   : "") +
            ", " + fmt_gb(need - usable) + " more than the " + fmt_gb(usable) + " usable on " +
            device_.name;
    } else {
      msg = "one sample of bucket " + bk.name() + " has " + std::to_string(bk.tokens) + " tokens" +
            (group[b] > 1 ? " (" + std::to_string((bk.tokens + group[b] - 1) / group[b]) +
                                " per GPU on " + std::to_string(int(group[b])) + ")"
                          : "") +
            ", more than the memory budget of " + std::to_string(cfg_.mem_budget_tokens) +
            " tokens";
    }
    if (cfg_.oversize == OversizePolicy::kError) {
      throw ConfigError(
          "manifest row " + std::to_string(row) +
          (manifest ? " (" + manifest->where(row) + ", " + std::string(manifest->path(row)) + ")"
                    : "") +
          ": " + msg +
          oversize_advice(cfg_, opt_, sharded_, memory_bound, largest, device_.node_size,
                          model_.heads));
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
                        : "; fix the rows, or choose a grid (" + option_word("grid") +
                              ") that fits them"));
  }
  return too_big;
}

}  // namespace adaptiveload
