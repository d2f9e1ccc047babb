#pragma once
// Options shared by `plan`, `demo` and `report`: what to plan and under which budgets.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/sim/loader_check.h"
#include "adaptiveload/util/same_file.h"

namespace adaptiveload::cli {

struct PlanOptions {
  std::vector<std::string> manifests;
  PlannerConfig config;
  std::string strategy = "all";
  std::string mem_budget = "auto", comp_budget = "auto", p = "auto", step_budget = "auto",
              seed = "0", epoch = "0";
  std::string on_bad_row = "error", on_oversize = "error", end_policy = "pad", checkpointing = "on";
  std::string on_duplicate = "warn";
  std::string reshard = "on";
  // The loader check (sim/loader_check.h): a loader profile and DataLoader workers per rank;
  // without them no output changes.
  std::string loader_profile;
  int loader_workers = 0;
  bool json = false;
  bool quiet = false;

  // Adds the options to a subcommand; `with_manifest` adds --manifest.
  void add_to(CLI::App& app, bool with_manifest);
  // Turns the strings into config values; throws CLI::ValidationError naming the option.
  void finish();
  BadRowPolicy bad_row_policy() const {
    return on_bad_row == "skip" ? BadRowPolicy::kSkip : BadRowPolicy::kError;
  }
  std::vector<std::string> strategy_names() const;
  // The files the options read (manifests, --profile, --fixed-config, preset files), named by
  // their flags, for the output check (output_files.h).
  std::vector<NamedFile> input_files() const;

 private:
  // add_to's options by topic, in --help's order: what to plan (manifests, presets, ranks,
  // strategy, seed, epoch); budgets and cost model; memory layout, sync, global batch, sequence
  // parallelism and packing; policies, the loader check and the output flags.
  void add_input_options(CLI::App& app, bool with_manifest);
  void add_budget_options(CLI::App& app);
  void add_layout_options(CLI::App& app);
  void add_policy_options(CLI::App& app);
};

// Everything the CLI computed for a set of strategies.
struct Comparison {
  std::vector<Plan> plans;
  std::vector<Metrics> metrics;
  std::vector<std::vector<std::string>>
      warnings;  // per plan: the targets it misses (Planner::warnings)
  std::vector<std::pair<std::string, std::string>> left_out;  // (strategy, why) not in a comparison
  // With --loader-profile: the profile and, per plan, whether its loader keeps up; else empty.
  LoaderProfile loader_profile;
  std::vector<LoaderCheck> loader;
};

Comparison compare(const Planner& planner, const std::vector<std::string>& names);
// compare(), and the loader check of every plan when the options give a loader profile.
Comparison compare(const Planner& planner, const PlanOptions& o);

// The manifests named by --manifest, and the built-in demo set.
Manifest load_manifests(const PlanOptions& o);
Manifest demo_manifest(BadRowPolicy policy);

// How a comparison is shown, defined in plan_report.cpp:
// Human table and JSON object of a comparison; `inputs` describes manifests and budgets.
void print_table(const Planner& planner, const Manifest& manifest, const Comparison& c,
                 std::ostream& out);
nlohmann::json comparison_json(const Planner& planner, const Manifest& manifest,
                               const Comparison& c);
// A warning per strategy that drops more than kDropWarnFraction of the planned samples
// (drop_warning, planner.h), and each target a plan misses (Comparison::warnings).
void print_drop_warnings(const Planner& planner, const Comparison& c, std::ostream& out);
// Lines about skipped bad rows, unfit and oversize samples (never silent).
void print_input_report(const Planner& planner, const Manifest& manifest, std::ostream& out);

}  // namespace adaptiveload::cli
