// The options and the comparison; how a comparison is shown (table, JSON, warnings) is in
// plan_report.cpp.
#include "plan_options.h"

#include <charconv>
#include <cmath>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload::cli {
namespace {

// A positive finite number up to `max`, or 'auto' (0).
double parse_auto(const std::string& v, const char* option, double max) {
  if (v == "auto") return 0;
  try {
    size_t used = 0;
    double d = std::stod(v, &used);
    if (used == v.size() && std::isfinite(d) && d > 0 && d <= max) return d;
  } catch (...) {
  }
  throw CLI::ValidationError(
      option, "must be a positive number up to " + fmt("%g", max) + " or 'auto', got '" + v + "'");
}

// A whole number in 0..max written in plain digits: no sign, no wrap-around, no clamping
// (--seed: 0 <= seed < 2^64, as the Python sampler; --epoch).
uint64_t parse_whole(const std::string& v, const char* option, uint64_t max,
                     const std::string& range) {
  uint64_t x = 0;
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc() && end == v.data() + v.size() && x <= max) return x;
  }
  throw CLI::ValidationError(option, "must be an integer in " + range + ", got '" + v + "'");
}

// The option's choices from the core's table (planner/option_ranges.h).
CLI::IsMember choices(const char* name) { return CLI::IsMember(option_range(name).choices); }

// The cost-model registry's names: "analytic, power, or profile".
std::string cost_model_list() {
  const std::vector<std::string> names = cost_model_names();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? ", or " : ", ") + names[i];
  return out;
}

std::string names_of(const std::string& kind) {
  std::string out;
  for (const auto& n : preset_names(kind)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

// The options in the order --help lists them.
void PlanOptions::add_to(CLI::App& app, bool with_manifest) {
  add_input_options(app, with_manifest);
  add_budget_options(app);
  add_layout_options(app);
  add_policy_options(app);
}

void PlanOptions::add_input_options(CLI::App& app, bool with_manifest) {
  if (with_manifest) {
    app.add_option("--manifest,-m", manifests,
                   "Manifest file(s), CSV or JSONL with columns path,num_frames,height,width,fps "
                   "(fps empty for "
                   "images), or a latent cache folder (python -m adaptiveload.cache, or "
                   "musubi-tuner's): its "
                   "rows plan at their cached shapes. Several are planned together; row ids "
                   "continue across "
                   "them in the order given.")
        ->required()
        ->check(CLI::ExistingPath);
  }
  app.add_option("--model", config.model,
                 "Model preset (" + names_of("models") + ") or a JSON file")
      ->capture_default_str();
  app.add_option("--device", config.device,
                 "Device preset (" + names_of("devices") + ") or a JSON file")
      ->capture_default_str();
  app.add_option("--grid", config.grid,
                 "Bucket grid preset (" + names_of("grids") +
                     ") or a JSON file; default: the model preset's own grid (cogvideox for "
                     "CogVideoX, tiny for "
                     "tiny-dit, wan otherwise)");
  app.add_option("--world-size,-w", config.world_size, "Number of GPUs (ranks)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxWorldSize));
  app.add_option("--devices", config.devices,
                 "Ranks that are not alike: a device preset per rank in rank order, as runs "
                 "(h200:8,h100:8) or a "
                 "list; each rank's memory and speed from its preset; budgets from the device of "
                 "least memory");
  app.add_option("--rank-speed", config.rank_speed,
                 "Known speed factors of ranks, rank=factor (e.g. 5=0.7,12=0.9: rank 5 runs at "
                 "0.7x its device)");
  app.add_option("--strategy,-s", strategy,
                 "Strategy: " + adaptiveload::strategy_names() + ", or all")
      ->capture_default_str();
  app.add_option("--seed", seed, "Random seed of the plan, 0 <= seed < 2^64")
      ->capture_default_str();
  app.add_option("--epoch", epoch, "Epoch to plan, 0 <= epoch < 2^63")->capture_default_str();
}

void PlanOptions::add_budget_options(CLI::App& app) {
  app.add_option("--mem-budget", mem_budget,
                 "M_mem in tokens per micro-batch (B x S <= M_mem), or 'auto': the largest for "
                 "which every bucket's "
                 "batch fits device memory")
      ->capture_default_str();
  app.add_option(
         "--comp-budget", comp_budget,
         "M_comp of the dual constraint (B x S^p <= M_comp), or 'auto': chosen by simulating dual")
      ->capture_default_str();
  app.add_option("--p", p,
                 "Exponent p of the compute constraint, or 'auto': fitted to the cost model")
      ->capture_default_str();
  app.add_option("--step-budget", step_budget,
                 "balanced: most seconds of work per rank per step, or 'auto': the slowest "
                 "micro-batch the memory budget admits (the longest step equal_tokens runs)")
      ->capture_default_str();
  app.add_option("--cost-model", config.cost_model, "Cost model: " + cost_model_list())
      ->capture_default_str()
      ->check(choices("cost_model"));
  app.add_option("--profile", config.profile,
                 "Profile file from `adaptiveload calibrate` (implies --cost-model profile)")
      ->check(CLI::ExistingFile);
  app.add_option("--checkpointing", checkpointing, "Full activation checkpointing (on/off)")
      ->capture_default_str()
      ->check(choices("checkpointing"));
}

void PlanOptions::add_layout_options(CLI::App& app) {
  app.add_option("--sharding", config.sharding,
                 "Model state per GPU: none (DDP), fsdp (fully sharded over the ranks), or auto "
                 "(fsdp when the "
                 "unsharded state would take over half the memory)")
      ->capture_default_str()
      ->check(choices("sharding"));
  app.add_option(
         "--sync", config.sync,
         "Synchronisation of the training engine: step (DDP, ZeRO-1: one gradient all-reduce per "
         "step; "
         "ranks may run different numbers of micro-batches), micro (FSDP, FSDP2, HSDP, ZeRO-2/3: "
         "collectives in every micro-batch, so every rank runs the same number of micro-batches "
         "per "
         "step), or auto: micro when the model state is sharded (--sharding), else step")
      ->capture_default_str()
      ->check(choices("sync"));
  app.add_option(
         "--global-batch", config.global_batch,
         "Global batch the plan keeps: auto (the step count of a bucket loader with the same "
         "memory "
         "budget, i.e. equal_tokens on -w ranks), steps:N (N global steps per epoch), samples:N or "
         "tokens:N (per global step, over all ranks), or free (balanced picks its own step count "
         "and "
         "the other strategies run one micro-batch per rank per step). Every strategy is planned "
         "for "
         "the same global batch; a bucket loader with more batches than that accumulates gradients")
      ->capture_default_str();
  app.add_option("--overlap", config.collective_overlap,
                 "micro sync: share (0..1) of each micro-batch's collectives (parameter "
                 "all-gather, gradient "
                 "reduce-scatter) that overlaps its compute")
      ->capture_default_str()
      ->check(
          CLI::Range(option_range("collective_overlap").lo, option_range("collective_overlap").hi));
  app.add_option("--reshard-after-forward", reshard,
                 "micro sync with sharded parameters: all-gather them again in backward (FSDP2's "
                 "reshard_after_forward, ZeRO-3), on/off")
      ->capture_default_str()
      ->check(choices("reshard_after_forward"));
  app.add_option(
         "--sp", config.sp,
         "Sequence parallelism (Ulysses): auto (a sample that does not fit one GPU runs on a group "
         "of "
         "GPUs: the smallest it fits, or a larger one where balanced's simulation says that "
         "shortens "
         "the epoch; no groups when every sample fits), min (always the smallest it fits), "
         "per-sample "
         "(groups tried even when every sample fits one GPU), off (one GPU per sample; a sample "
         "that "
         "does not fit is oversize), or a group size G "
         "for every sample (one fixed size, as a trainer's sp_size). Only balanced mixes group "
         "sizes; "
         "the other strategies run every sample on the largest group any sample needs. With groups "
         "in "
         "use (a sample needs one, or per-sample) the table adds balanced on each fixed group size "
         "(balanced g=G) for comparison. Groups and --packing on exclude each other")
      ->capture_default_str();
  app.add_option("--sp-sizes", config.sp_sizes,
                 "Allowed sequence-parallel group sizes, powers of two; one is used only where it "
                 "divides the "
                 "world size and the model's heads and fits in a node (the device preset's "
                 "node_size). Groups "
                 "are aligned blocks of consecutive ranks")
      ->capture_default_str();
  app.add_option("--packing", config.packing,
                 "Packed micro-batches: off (every micro-batch holds samples of one bucket) or on "
                 "(balanced "
                 "packs samples of any buckets into one micro-batch, a varlen sequence in which "
                 "each sample "
                 "attends only to itself, within the memory budget's tokens; the table adds the "
                 "greedy packer "
                 "greedy_pack and bucketed balanced beside it). Every sample still runs on one "
                 "GPU: packing where "
                 "sequence-parallel groups are in use (--sp G, samples that do not fit one GPU, or "
                 "balanced under "
                 "--sp per-sample) is refused")
      ->capture_default_str()
      ->check(choices("packing"));
}

void PlanOptions::add_policy_options(CLI::App& app) {
  app.add_option("--fixed-config", config.fixed_config,
                 "JSON of per-bucket batch sizes for `fixed`: {\"<tier>\": {\"<frames>\": B}}")
      ->check(CLI::ExistingFile);
  app.add_option(
         "--end-policy", end_policy,
         "A final step that cannot give every rank work: pad (repeat samples, flagged) or drop")
      ->capture_default_str()
      ->check(choices("end_policy"));
  app.add_option("--on-bad-row", on_bad_row,
                 "Bad manifest rows: error (stop) or skip (count and report)")
      ->capture_default_str()
      ->check(choices("on_bad_row"));
  app.add_option("--on-duplicate", on_duplicate,
                 "Rows that repeat an earlier row's path (a clip listed twice, a manifest given "
                 "twice): warn "
                 "(keep them, say so), skip (keep the first of each path) or error")
      ->capture_default_str()
      ->check(choices("on_duplicate"));
  app.add_option("--on-oversize", on_oversize,
                 "A sample too big for memory alone: error or skip (count and report)")
      ->capture_default_str()
      ->check(choices("on_oversize"));
  app.add_option("--loader-profile", loader_profile,
                 "Loader profile (JSON) from `adaptiveload calibrate --loader ...` or "
                 "python/bench/bench_loader.py: "
                 "seconds a DataLoader worker takes to decode or read a sample, by bucket. With "
                 "--loader-workers, "
                 "the table adds a 'load' column (the largest ratio of a rank's load time in a "
                 "step to its train "
                 "time), --json a 'loader' object per strategy, and a warning says when a rank's "
                 "share of a step "
                 "would take longer to load than to train")
      ->check(CLI::ExistingFile);
  app.add_option("--loader-workers", loader_workers,
                 "DataLoader workers per rank for --loader-profile's check")
      ->check(CLI::Range(1, kMaxLoaderWorkers));
  app.add_flag("--json", json, "Print one JSON object on stdout instead of the table");
  app.add_flag("--quiet,-q", quiet, "Print only the table or JSON");
}

void PlanOptions::finish() {
  // Ranges from the core's table (planner/option_ranges.h), named by option here.
  const double mem = parse_auto(mem_budget, "--mem-budget", double(kMaxMemBudgetTokens));
  if (mem != std::floor(mem))
    throw CLI::ValidationError(
        "--mem-budget", "must be a whole number of tokens or 'auto', got '" + mem_budget + "'");
  config.mem_budget_tokens = int64_t(mem);
  config.comp_budget = parse_auto(comp_budget, "--comp-budget", kMaxCompBudget);
  config.p = parse_auto(p, "--p", kMaxP);
  config.step_budget_s = parse_auto(step_budget, "--step-budget", kMaxSampleSeconds);
  config.seed = parse_whole(seed, "--seed", kMaxSeed,
                            "0 .. " + std::to_string(kMaxSeed) + " (0 <= seed < 2^64)");
  config.epoch = int64_t(
      parse_whole(epoch, "--epoch", uint64_t(kMaxEpoch), "0 .. " + std::to_string(kMaxEpoch)));
  config.checkpointing = checkpointing == "on";
  config.reshard_after_forward = reshard == "on";
  config.end_policy = end_policy == "drop" ? EndPolicy::kDrop : EndPolicy::kPad;
  config.oversize = on_oversize == "skip" ? OversizePolicy::kSkip : OversizePolicy::kError;
  if (!config.profile.empty() && config.cost_model == "analytic") config.cost_model = "profile";
  if (config.cost_model == "profile" && config.profile.empty())
    throw CLI::ValidationError("--cost-model", "'profile' needs --profile FILE");
  strategy_names();  // validates --strategy
  if (!loader_profile.empty() && loader_workers == 0)
    throw CLI::ValidationError("--loader-profile",
                               "needs --loader-workers N (DataLoader workers per rank)");
  if (loader_profile.empty() && loader_workers > 0)
    throw CLI::ValidationError("--loader-workers",
                               "needs --loader-profile FILE (the measured loader rates)");
}

std::vector<std::string> PlanOptions::strategy_names() const {
  std::vector<std::string> out;
  if (strategy == "all") {
    // The packers only with --packing on.
    for (const auto& s : strategies())
      if (!s.packs() || config.packing == "on") out.push_back(s.name);
    return out;
  }
  try {
    find_strategy(strategy);
  } catch (const std::exception& e) {
    // The CLI alone also compares them all.
    throw CLI::ValidationError("--strategy", std::string(e.what()) + ", or all");
  }
  return {strategy};
}

std::vector<NamedFile> PlanOptions::input_files() const {
  std::vector<NamedFile> in;
  for (const auto& m : manifests) in.push_back({"--manifest", m});
  // Preset names are not files; a path that exists is read (same_existing_file).
  for (const auto& [flag, path] : {std::pair{"--profile", config.profile},
                                   {"--fixed-config", config.fixed_config},
                                   {"--model", config.model},
                                   {"--device", config.device},
                                   {"--grid", config.grid},
                                   {"--loader-profile", loader_profile}})
    in.push_back({flag, path});
  return in;
}

Comparison compare(const Planner& planner, const std::vector<std::string>& names) {
  Comparison c;
  for (const auto& n : names) {
    // Comparing them all, a strategy that cannot run on these inputs is left out and said;
    // asked for alone, it is an error.
    if (names.size() > 1 && !planner.cannot_plan(find_strategy(n)).empty()) {
      c.left_out.emplace_back(n, planner.cannot_plan(find_strategy(n)));
      continue;
    }
    c.plans.push_back(planner.plan(n));
    c.metrics.push_back(planner.simulate(c.plans.back()));
    c.warnings.push_back(planner.warnings(c.plans.back()));
  }
  // With packing, each strategy that packs when asked (balanced) also bucketed, beside its packs.
  if (names.size() > 1 && planner.packing()) {
    for (const std::string& n : names) {
      if (!find_strategy(n).packs_when_asked() || !planner.cannot_plan(find_strategy(n)).empty())
        continue;
      Plan p = planner.plan_bucketed(n);
      Metrics m = planner.simulate(p);
      m.name = n + " bucketed";
      c.warnings.push_back(planner.row_warnings(p, m.name));  // under its own row's name
      c.metrics.push_back(std::move(m));
      c.plans.push_back(std::move(p));
    }
  }
  // With sequence parallelism in use, each strategy that mixes group sizes (balanced) on each
  // single fixed group size that every sample fits (today's practice: one sp_size for the
  // run) beside its per-sample groups; with --sp per-sample from g=1, as groups are in use.
  if (names.size() > 1 && planner.groups_in_use()) {
    const SeqParallel sp = planner.seq_parallel();
    for (const std::string& n : names) {
      if (!find_strategy(n).mixes_groups()) continue;
      for (int g = planner.max_group(); g <= kMaxGroup; g *= 2) {
        if (!sp.allows(g)) continue;
        Plan p = planner.plan_fixed_group(n, g);
        Metrics m = planner.simulate(p);
        m.name = n + " g=" + std::to_string(g);
        c.metrics.push_back(std::move(m));
        c.plans.push_back(std::move(p));
        c.warnings.emplace_back();  // shown for comparison; its step count follows from g
      }
    }
  }
  return c;
}

Comparison compare(const Planner& planner, const PlanOptions& o) {
  Comparison c = compare(planner, o.strategy_names());
  if (o.loader_profile.empty()) return c;
  c.loader_profile = read_loader_profile(o.loader_profile);
  for (const Plan& p : c.plans)
    c.loader.push_back(
        check_loader(p, planner.sim_env(p.world_size), c.loader_profile, o.loader_workers));
  return c;
}

}  // namespace adaptiveload::cli
