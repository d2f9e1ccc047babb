// adaptiveload plan / demo: compare strategies on a manifest (or the built-in set) and
// optionally write one strategy's plan as JSONL.
#include <fstream>
#include <iostream>

#include "adaptiveload/manifest/duplicates.h"
#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/presets/resources.h"
#include "adaptiveload/util/error.h"
#include "commands.h"
#include "output_files.h"
#include "plan_options.h"

namespace adaptiveload::cli {
namespace {

// The built-in set: the real manifests shipped in data/ (data/SOURCES.md), in this order.
constexpr const char* kDemoManifests[] = {"data/taichi_hd.csv", "data/coco2017_val_images.csv"};

int run_plan(const PlanOptions& o, const Manifest& manifest, const std::string& out_path) {
  std::vector<std::string> names = o.strategy_names();
  Planner planner(manifest, o.config);
  Comparison c = compare(planner, o);
  if (!o.quiet) print_input_report(planner, manifest, o.json ? std::cerr : std::cout);
  print_drop_warnings(planner, c, std::cerr);  // even with --quiet: data left out is never silent
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
      (o.json ? std::cerr : std::cout) << "wrote " << c.plans.front().num_steps() << " steps of '"
                                       << names.front() << "' to " << out_path << "\n";
  }
  return 0;
}

struct PlanCommand : Command {
  PlanOptions opts;
  std::string out;
};

}  // namespace

Manifest load_manifests(const PlanOptions& o) {
  Manifest manifest;
  // Mapped, not copied: a plan is a short-lived process (see FileAccess).
  for (const auto& m : o.manifests) manifest.load(m, o.bad_row_policy(), FileAccess::kMap);
  // Repeated paths are said even with --quiet: they change what an epoch trains.
  const DuplicatePolicy dp = parse_duplicate_policy(o.on_duplicate);
  const std::string report = duplicate_report(manifest, apply_duplicate_policy(manifest, dp), dp);
  if (!report.empty()) std::cerr << "warning: " << report;
  return manifest;
}

Manifest demo_manifest(BadRowPolicy policy) {
  Manifest manifest;
  for (const char* name : kDemoManifests)
    manifest.load_text(*find_resource(name), std::string("built-in:") + name, policy);
  return manifest;
}

std::shared_ptr<Command> add_plan_command(CLI::App& app) {
  auto c = std::make_shared<PlanCommand>();
  c->app =
      app.add_subcommand("plan", "Plan a manifest with one or all strategies and compare them");
  c->opts.add_to(*c->app, true);
  c->app->add_option(
      "--out,-o", c->out,
      "Write the plan as JSONL (one line per global step: each rank's micro-batches as lists of "
      "manifest row ids); needs a single --strategy");
  PlanCommand* p = c.get();
  c->validate = [p] {
    p->opts.finish();
    if (!p->out.empty() && p->opts.strategy_names().size() != 1)
      throw CLI::ValidationError(
          "--out", "needs a single --strategy (" + strategy_names(", ", " or ") + ")");
  };
  c->run = [p] {
    check_outputs({{"--out", p->out}}, p->opts.input_files());  // before a manifest is read
    return run_plan(p->opts, load_manifests(p->opts), p->out);
  };
  return c;
}

std::shared_ptr<Command> add_demo_command(CLI::App& app) {
  auto c = std::make_shared<PlanCommand>();
  c->app = app.add_subcommand("demo",
                              "Compare all strategies on the built-in mixed set (3,334 Taichi-HD "
                              "clips + 5,000 COCO images)");
  c->opts.add_to(*c->app, false);
  PlanCommand* p = c.get();
  c->validate = [p] { p->opts.finish(); };
  c->run = [p] {
    check_outputs({}, p->opts.input_files());
    return run_plan(p->opts, demo_manifest(p->opts.bad_row_policy()), "");
  };
  return c;
}

}  // namespace adaptiveload::cli
