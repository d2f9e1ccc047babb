// adaptiveload report: one self-contained HTML page (inline SVG, no scripts, no network) with
// the bucket histogram, the cost model curve, the summary table and per-rank step charts for
// each strategy; --format svg also writes each chart as its own .svg beside the page.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "adaptiveload/report/html_report.h"
#include "adaptiveload/util/error.h"
#include "commands.h"
#include "output_files.h"
#include "plan_options.h"

namespace adaptiveload::cli {
namespace {

struct ReportCommand : Command {
  PlanOptions opts;
  std::vector<std::string> manifests;
  bool demo = false;
  std::string out;
  std::string format = "html";
  ReportOptions report;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f)
    throw InputError(path, "cannot open for writing; check the folder exists and is writable");
  f << text;
  f.close();
  if (!f) throw InputError(path, "write failed (disk full?)");
}

// <out stem>-<chart id>.svg beside the page.
std::string chart_path(const std::string& out, const std::string& id) {
  std::filesystem::path p(out);
  p.replace_filename(std::filesystem::path(out).stem().string() + "-" + id + ".svg");
  return p.string();
}

int run_report(ReportCommand& c) {
  const PlanOptions& o = c.opts;
  // The page, its temporary name and (--format svg) the charts beside it: none may be an input.
  std::vector<NamedFile> outputs{{"--out", c.out}, {"--out's temporary file", c.out + ".tmp"}};
  check_outputs(outputs, o.input_files());
  const Manifest manifest = c.demo ? demo_manifest(o.bad_row_policy()) : load_manifests(o);
  Planner planner(manifest, o.config);
  const Comparison cmp = compare(planner, o);
  std::ostream& info = o.json ? std::cerr : std::cout;
  if (!o.quiet) print_input_report(planner, manifest, info);
  print_drop_warnings(planner, cmp, std::cerr);
  const nlohmann::json data = comparison_json(planner, manifest, cmp);
  if (o.json)
    std::cout << data.dump(2) << "\n";
  else if (!o.quiet)
    print_table(planner, manifest, cmp, std::cout);

  ReportOptions ro = c.report;
  ro.data_json = data.dump();
  const Report rep = build_report(planner, &manifest, cmp.plans, cmp.metrics, ro);
  if (c.format == "svg") {  // the charts' names are known now; nothing is written yet
    for (const ReportChart& ch : rep.charts)
      outputs.push_back({"--format svg's chart", chart_path(c.out, ch.id)});
    check_outputs(outputs, o.input_files());
  }
  // Write the page last, through a temporary name: a failed run leaves no half page.
  const std::string tmp = c.out + ".tmp";
  write_file(tmp, rep.html);
  std::error_code ec;
  std::filesystem::rename(tmp, c.out, ec);
  if (ec) throw InputError(c.out, "cannot move the finished report into place: " + ec.message());
  std::vector<std::string> written{c.out};
  if (c.format == "svg") {
    for (const ReportChart& ch : rep.charts) {
      const std::string p = chart_path(c.out, ch.id);
      write_file(p, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + ch.svg);
      written.push_back(p);
    }
  }
  if (!o.quiet)
    info << "wrote " << c.out << " (" << (rep.html.size() + 1023) / 1024 << " KiB, "
         << rep.charts.size() << " charts)"
         << (written.size() > 1 ? " and " + std::to_string(written.size() - 1) + " .svg files" : "")
         << "\n";
  return 0;
}

}  // namespace

std::shared_ptr<Command> add_report_command(CLI::App& app) {
  auto c = std::make_shared<ReportCommand>();
  c->app = app.add_subcommand(
      "report",
      "Write an HTML report (inline SVG, no network): bucket histogram, cost model curve, "
      "summary table and per-rank step charts of every strategy");
  c->app
      ->add_option("--manifest,-m", c->manifests,
                   "Manifest file(s), CSV or JSONL with columns path,num_frames,height,width,fps "
                   "(fps empty for "
                   "images). Several files are planned together; row ids continue across them in "
                   "the order given.")
      ->check(CLI::ExistingFile);
  c->app->add_flag("--demo", c->demo, "Report on the built-in demo set instead of --manifest");
  c->opts.add_to(*c->app, false);
  c->app->add_option("--out,-o", c->out, "HTML file to write")->required();
  c->app
      ->add_option("--steps", c->report.steps,
                   "Global steps shown per strategy in the per-rank charts")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1000)));
  c->app
      ->add_option("--first-step", c->report.first_step,
                   "First global step shown in the per-rank charts")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->app
      ->add_option(
          "--format", c->format,
          "html: the page only; svg: also each chart as <out stem>-<chart>.svg beside the page")
      ->capture_default_str()
      ->check(CLI::IsMember({"html", "svg"}));
  c->app->add_option("--title", c->report.title, "Page title")->capture_default_str();
  ReportCommand* p = c.get();
  c->validate = [p] {
    if (p->demo == !p->manifests.empty())
      throw CLI::ValidationError("--manifest", "give either --manifest FILE... or --demo");
    p->opts.manifests = p->manifests;
    p->opts.finish();
  };
  c->run = [p] { return run_report(*p); };
  return c;
}

}  // namespace adaptiveload::cli
