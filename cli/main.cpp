// adaptiveload: plan video-DiT training batches and compare batching strategies.
//   adaptiveload demo                     built-in mixed image + video set, Wan 2.1 1.3B, 8 x H200
//   adaptiveload plan --manifest FILE     the same comparison for your manifest; --out writes a plan
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/presets/resources.h"
#include "adaptiveload/util/error.h"
#include "plan_options.h"

using namespace adaptiveload;
using namespace adaptiveload::cli;

namespace {

constexpr const char* kDemoManifest = "data/demo_manifest.csv";

int run_plan(const PlanOptions& o, const Manifest& manifest, const std::string& out_path) {
  std::vector<std::string> names = o.strategy_names();
  Planner planner(manifest, o.config);
  Comparison c = compare(planner, names);
  if (!o.quiet) print_input_report(planner, manifest, o.json ? std::cerr : std::cout);
  if (o.json) {
    std::cout << comparison_json(planner, manifest, c).dump(2) << "\n";
  } else {
    print_table(planner, manifest, c, std::cout);
  }
  if (!out_path.empty()) {
    std::ofstream f(out_path, std::ios::binary);
    if (!f) throw InputError(out_path, "cannot open for writing");
    write_plan_jsonl(c.plans.front(), f);
    if (!f) throw InputError(out_path, "write failed (disk full?)");
    if (!o.quiet)
      (o.json ? std::cerr : std::cout) << "wrote " << c.plans.front().num_steps() << " steps of '" << names.front()
                                       << "' to " << out_path << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AdaptiveLoad: compute-balanced batches for video diffusion transformer training.\n"
               "Plans per-rank batches under a memory and a compute budget and simulates how each batching "
               "strategy loads the cluster (imbalance, throughput, memory, bucket diversity)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "adaptiveload 0.1.0");

  PlanOptions plan_opts;
  std::string out_path;
  CLI::App* plan = app.add_subcommand("plan", "Plan a manifest with one or all strategies and compare them");
  plan_opts.add_to(*plan, true);
  plan->add_option("--out,-o", out_path,
                   "Write the plan as JSONL (one line per global step: each rank's micro-batches as lists of "
                   "manifest row ids); needs a single --strategy");

  PlanOptions demo_opts;
  CLI::App* demo = app.add_subcommand(
      "demo", "Compare all strategies on the built-in mixed set (3,334 Taichi-HD clips + 5,000 COCO images)");
  demo_opts.add_to(*demo, false);

  try {
    app.parse(argc, argv);
    if (*plan) {
      plan_opts.finish();
      if (!out_path.empty() && plan_opts.strategy_names().size() != 1)
        throw CLI::ValidationError("--out", "needs a single --strategy (equal_tokens, fixed, dual or balanced)");
    }
    if (*demo) demo_opts.finish();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string sub = *plan ? " plan" : *demo ? " demo" : "";
    std::cerr << "adaptiveload" << sub << ": error: " << e.what() << " (see 'adaptiveload" << sub << " --help')\n";
    return 2;
  }

  try {
    if (*plan) {
      Manifest manifest;
      for (const auto& m : plan_opts.manifests) manifest.load(m, plan_opts.bad_row_policy());
      return run_plan(plan_opts, manifest, out_path);
    }
    if (*demo) {
      Manifest manifest;
      manifest.load_text(*find_resource(kDemoManifest), std::string("built-in:") + kDemoManifest,
                         demo_opts.bad_row_policy());
      return run_plan(demo_opts, manifest, "");
    }
  } catch (const ConfigError& e) {
    std::cerr << "adaptiveload: error: " << e.what() << "\n";
    return 2;
  } catch (const InputError& e) {
    std::cerr << "adaptiveload: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "adaptiveload: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
