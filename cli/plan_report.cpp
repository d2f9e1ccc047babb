// How a comparison is shown: the table, the JSON object, the warnings and the report on the
// inputs (declared in plan_options.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <type_traits>
#include <variant>

#include "adaptiveload/report/metric_columns.h"
#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/format.h"
#include "plan_options.h"

namespace adaptiveload::cli {
namespace {

bool mixes_groups(const StrategyEntry& s) { return s.mixes_groups(); }
bool runs_one_group(const StrategyEntry& s) {
  return !s.mixes_groups() && !s.packs();
}  // packers: none

// The load column: the worst load / train ratio, '!' when over 1.
std::string loader_cell(const LoaderCheck& c) {
  if (c.rank_steps == 0) return "-";
  const std::string ratio = std::isfinite(c.max_ratio) ? fmt("%.2fx", c.max_ratio) : "inf";
  return ratio + (c.keeps_up() ? " " : "!");
}

nlohmann::json loader_json(const LoaderCheck& c) {
  return {{"workers", c.workers},
          {"keeps_up", c.keeps_up()},
          // null: a rank loads in a step it spends no time training (a cost model of zero)
          {"max_load_train_ratio",
           std::isfinite(c.max_ratio) ? nlohmann::json(c.max_ratio) : nlohmann::json()},
          {"slow_rank_steps", c.slow_rank_steps},
          {"rank_steps", c.rank_steps},
          {"worst",
           {{"step", c.worst_step},
            {"rank", c.worst_rank},
            {"load_s", c.worst_load_s},
            {"train_s", c.worst_train_s}}},
          {"load_s_max_rank", c.load_s_max_rank}};
}

}  // namespace

void print_input_report(const Planner& planner, const Manifest& manifest, std::ostream& out) {
  const Bucketing& bk = planner.bucketing();
  for (const auto& f : manifest.files())
    out << "manifest " << f.path << ": " << thousands(f.rows) << " rows (row ids " << f.first_row
        << ".." << f.first_row + f.rows - 1 << ")\n";
  if (!manifest.bad_rows().empty()) {
    out << "skipped " << manifest.bad_rows().size() << " bad row(s):\n";
    for (size_t i = 0; i < manifest.bad_rows().size() && i < 5; ++i)
      out << "  " << manifest.bad_rows()[i].message() << "\n";
    if (manifest.bad_rows().size() > 5)
      out << "  ... and " << manifest.bad_rows().size() - 5 << " more\n";
  }
  if (!bk.unfit.empty()) {
    out << bk.unfit.size() << " sample(s) fit no bucket of grid '" << planner.grid().name
        << "' and are not planned:\n";
    for (size_t i = 0; i < bk.unfit.size() && i < 5; ++i)
      out << "  row " << bk.unfit[i].row << " (" << manifest.where(bk.unfit[i].row)
          << "): " << bk.unfit[i].reason << "\n";
    if (bk.unfit.size() > 5) out << "  ... and " << bk.unfit.size() - 5 << " more\n";
  }
  if (!planner.oversize().empty()) {
    out << planner.oversize().size() << " oversize sample(s) skipped (--on-oversize=skip):\n";
    for (size_t i = 0; i < planner.oversize().size() && i < 5; ++i)
      out << "  row " << planner.oversize()[i].row << ": " << planner.oversize()[i].message << "\n";
  }
}

void print_table(const Planner& planner, const Manifest& manifest, const Comparison& c,
                 std::ostream& out) {
  const Bucketing& bk = planner.bucketing();
  const auto& cfg = planner.config();
  out << "AdaptiveLoad plan: " << thousands(bk.usable - int64_t(planner.oversize().size()))
      << " samples in " << bk.buckets.size() << " buckets (" << thousands(manifest.total_rows())
      << " rows, " << bk.bad << " bad, " << bk.unfit.size() << " unfit, "
      << planner.oversize().size() << " oversize"
      << (bk.duplicates > 0 ? ", " + thousands(bk.duplicates) + " repeats left out" : "") << ")\n";
  out << "model " << planner.model().name << ", " << cfg.world_size << " x "
      << planner.device().name << ", cost model " << planner.cost().name() << ", checkpointing "
      << (cfg.checkpointing ? "on" : "off") << ", " << (planner.sharded() ? "fsdp" : "ddp") << ", "
      << sync_name(planner.sync()) << " sync" << (planner.options().sync ? "" : " (auto)")
      << (planner.packing() ? ", packing on" : "") << ", seed " << cfg.seed << ", epoch "
      << cfg.epoch << "\n";
  out << "global batch: " << planner.global_batch_text() << "\n";
  if (!planner.ranks().empty())
    out << "ranks: " << planner.ranks().summary() << "; speeds relative to "
        << planner.device().name
        << ", whose memory sizes every strategy's batches (balanced deals each rank its share)\n";
  if (planner.groups_in_use()) {
    // Samples per group size (per-sample groups), and what the other strategies run on.
    std::map<int, int64_t> per_g;
    for (size_t b = 0; b < bk.buckets.size(); ++b)
      if (bk.bucket_counts[b] > 0)
        per_g[planner.bucket_groups().empty() ? 1 : planner.bucket_groups()[b]] +=
            bk.bucket_counts[b];
    out << "sequence parallelism (" << sp_policy_text(planner.options()) << ", sizes "
        << cfg.sp_sizes << "): samples on g GPUs:";
    for (const auto& [g, n] : per_g) out << " g=" << g << " " << thousands(n);
    const std::string mixing = strategy_names("/", "/", mixes_groups);
    out << "; " << mixing << " mixes them, " << strategy_names("/", "/", runs_one_group)
        << " run all on g=" << planner.max_group() << ", " << mixing << " g=G: every sample on G\n";
  }
  out << "budgets: M_mem " << thousands(planner.mem_budget_tokens()) << " tokens"
      << (cfg.mem_budget_tokens ? "" : " (auto)") << ", M_comp "
      << fmt("%.4g", planner.comp_budget()) << " (B x S^" << fmt("%.3f", planner.p())
      << (cfg.comp_budget > 0 ? "" : ", auto") << "), step budget "
      << fmt("%.3f", planner.step_budget_s()) << " s" << (cfg.step_budget_s > 0 ? "" : " (auto)")
      << "\n\n";
  // Speedups compare strategies on the same samples: one that dropped samples trained fewer,
  // so its samples/s is over a different set and it gets no speedup (marked '*').
  const double base = speedup_base(c.metrics);
  bool any_dropped = false;
  // The name column fits the longest name ("balanced bucketed" with --packing on), 13 wide at
  // least.
  size_t name_width = 13;
  for (const auto& m : c.metrics) name_width = std::max(name_width, m.name.size() + 1);
  out << std::left << std::setw(int(name_width)) << "strategy" << std::right;
  for (const MetricColumn& col : metric_columns())
    if (col.cli_width > 0) out << std::setw(col.cli_width) << col.heading(false);
  if (!c.loader.empty()) out << std::setw(8) << "load";
  out << "\n";
  for (size_t i = 0; i < c.metrics.size(); ++i) {
    const Metrics& m = c.metrics[i];
    any_dropped = any_dropped || m.dropped > 0;
    const Speedup s = speedup(m, base);
    out << std::left << std::setw(int(name_width)) << m.name << std::right;
    for (const MetricColumn& col : metric_columns())
      if (col.cli_width > 0) out << std::setw(col.cli_width) << col.text(m, s, false);
    if (!c.loader.empty()) out << std::setw(8) << loader_cell(c.loader[i]);
    out << "\n";
  }
  out << "\nimbalance: idle fraction of the GPUs, 1 - sum_t mean_r T / sum_t max_r T; max-mean, "
         "max-min: per-step "
         "mean of (max-mean)/max and (max-min)/max.\n"
         "samples/s, tokens/s: samples and video tokens trained (padded repeats and dropped "
         "samples not counted) per "
         "second of the simulated epoch, synchronisation included; speedup: "
         "samples/s relative to "
      << baseline_strategy()
      << ".\n"
         "mem avg, mem max: per-step peak memory over ranks / device memory, mean and max over the "
         "epoch; buckets: "
         "distinct buckets per global step; steps: global steps in the epoch; batch: samples per "
         "global step (mean); mb/rank: micro-batches per rank per step (gradient accumulation).\n"
         "fixed: share of GPU time in per-micro-batch fixed costs (overhead and small-batch "
         "inefficiency); useful: share of GPU time in trained samples' work at full efficiency; "
         "tok dev: largest deviation of a step's tokens from their mean; sync: share of the epoch "
         "in synchronisation the compute does not hide "
         "(step: one gradient all-reduce per step; micro: every micro-batch's all-gathers and "
         "reduce-scatter beyond what overlaps); g: sequence-parallel group sizes (GPUs per sample) "
         "used.\n"
         "padded: repeated samples added at the epoch's end so every rank has work (--end-policy "
         "pad); dropped: "
         "samples left out of the epoch for that reason (--end-policy drop).\n";
  if (!c.loader.empty())
    out << "load: the largest ratio over steps and ranks of the seconds a rank's "
        << c.loader.front().workers << " DataLoader worker(s) take to load its share of a step ("
        << c.loader_profile.path
        << ") to the seconds it trains it; '!' marks a loader that would not keep up (over 1).\n";
  if (any_dropped)
    out << "*: samples dropped (--end-policy drop): a strategy that drops trains fewer samples "
           "than the others, so "
           "it, and every strategy when "
        << baseline_strategy()
        << " drops, gets no speedup; compare with "
           "--end-policy pad.\n";
}

void print_drop_warnings(const Planner& planner, const Comparison& c, std::ostream& out) {
  const int64_t planned = int64_t(planner.bucketing().usable) - int64_t(planner.oversize().size());
  for (const auto& m : c.metrics) {
    const std::string w = drop_warning(m.name, int64_t(m.dropped), planned, m.samples == 0);
    if (!w.empty()) out << "warning: " << w << "\n";
  }
  for (const auto& w : c.warnings)
    for (const std::string& line : w) out << "warning: " << line << "\n";
  for (size_t i = 0; i < c.loader.size(); ++i) {
    const std::string w =
        loader_warning(c.metrics[i].name, c.loader[i], c.loader_profile, "--loader-workers");
    if (!w.empty()) out << "warning: " << w << "\n";
  }
  for (const auto& [name, why] : c.left_out)
    out << "note: '" << name << "' is not in the comparison: " << why << "\n";
}

nlohmann::json comparison_json(const Planner& planner, const Manifest& manifest,
                               const Comparison& c) {
  using json = nlohmann::json;
  json out;
  out["strategies"] = json::array();
  for (size_t i = 0; i < c.metrics.size(); ++i) {
    const Metrics& m = c.metrics[i];
    json row = json::object();
    for (const MetricField& f : metric_fields())
      std::visit(
          [&](auto read) {
            if constexpr (std::is_pointer_v<decltype(read)>)
              row[f.key] = read(m);
            else
              row[f.key] = m.*read;
          },
          f.read);
    row["warnings"] = i < c.warnings.size() ? c.warnings[i] : std::vector<std::string>();
    if (i < c.loader.size()) row["loader"] = loader_json(c.loader[i]);
    out["strategies"].push_back(std::move(row));
  }
  out["left_out"] = json::array();
  for (const auto& [name, why] : c.left_out)
    out["left_out"].push_back({{"name", name}, {"reason", why}});
  const auto& cfg = planner.config();
  const Bucketing& bk = planner.bucketing();
  json files = json::array();
  for (const auto& f : manifest.files())
    files.push_back({{"path", f.path}, {"rows", f.rows}, {"first_row", f.first_row}});
  json buckets = json::array();
  for (size_t b = 0; b < bk.buckets.size(); ++b) {
    const Bucket& x = bk.buckets[b];
    buckets.push_back(
        {{"name", x.name()},
         {"frames", x.frames},
         {"height", x.height},
         {"width", x.width},
         {"tokens", x.tokens},
         {"samples", bk.bucket_counts[b]},
         {"sp_group", planner.bucket_groups().empty() ? 1 : int(planner.bucket_groups()[b])},
         {"sample_time_s", planner.cost().sample_time(x)}});
  }
  char fp[17];
  snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(planner.fingerprint()));
  out["inputs"] = {{"manifests", files},
                   {"rows", manifest.total_rows()},
                   {"bad_rows", bk.bad},
                   {"unfit", bk.unfit.size()},
                   {"oversize", planner.oversize().size()},
                   {"usable", bk.usable - int64_t(planner.oversize().size())},
                   {"model", planner.model().name},
                   {"device", planner.device().name},
                   {"grid", planner.grid().name},
                   {"cost_model", planner.cost().name()},
                   {"checkpointing", cfg.checkpointing},
                   {"sharding", planner.sharded() ? "fsdp" : "none"},
                   {"world_size", cfg.world_size},
                   {"seed", cfg.seed},
                   {"epoch", cfg.epoch},
                   {"mem_budget_tokens", planner.mem_budget_tokens()},
                   {"comp_budget", planner.comp_budget()},
                   {"p", planner.p()},
                   {"step_budget_s", planner.step_budget_s()},
                   {"sync", sync_name(planner.sync())},
                   {"global_batch", cfg.global_batch},
                   {"global_batch_resolved", planner.global_batch_text()},
                   {"collective_overlap", cfg.collective_overlap},
                   {"reshard_after_forward", cfg.reshard_after_forward},
                   {"sp", cfg.sp},
                   {"sp_sizes", cfg.sp_sizes},
                   {"sp_max_group", planner.max_group()},
                   {"end_policy", cfg.end_policy == EndPolicy::kPad ? "pad" : "drop"},
                   {"fingerprint", fp},
                   {"buckets", buckets}};
  if (planner.packing()) out["inputs"]["packing"] = "on";  // absent: off
  if (!c.loader.empty()) {                                 // absent: no loader check
    out["inputs"]["loader_profile"] = c.loader_profile.path;
    out["inputs"]["loader_source"] = c.loader_profile.source;
    out["inputs"]["loader_workers"] = c.loader.front().workers;
  }
  if (!planner.ranks().empty()) {  // absent: alike ranks
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t r = 0; r < planner.ranks().device.size(); ++r)
      ranks.push_back({{"rank", r},
                       {"device", planner.ranks().device[r].name},
                       {"speed", planner.ranks().speed[r]},
                       {"memory_bytes", planner.ranks().device[r].memory_bytes}});
    out["inputs"]["ranks"] = ranks;
  }
  return out;
}

}  // namespace adaptiveload::cli
