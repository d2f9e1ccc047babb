// adaptiveload calibrate: fit the cost and memory models to measurements and write a profile.
//   --measurements FILE: fit measured micro-batches (JSONL {"tokens","batch","time_s","peak_bytes"})
//   otherwise: measure first, on this machine's GPU with the Python package:
//              python3 -m adaptiveload.calibrate ... (it writes the measurements, then fits them)
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/util/error.h"
#include "commands.h"

namespace adaptiveload::cli {
namespace {

struct CalibrateCommand : Command {
  std::string measurements, out = "profile.json", model = "wan2.1-1.3b", device = "unknown";
  std::vector<std::string> passthrough;
};

int run_calibrate(CalibrateCommand& c) {
  if (c.measurements.empty()) {
    // Measuring needs PyTorch and the model: hand over to the Python package.
    const char* env = std::getenv("ADAPTIVELOAD_PYTHON");
    std::string python = env && *env ? env : "python3";
    std::vector<std::string> args = {python, "-m", "adaptiveload.calibrate", "--out", c.out, "--model", c.model};
    args.insert(args.end(), c.passthrough.begin(), c.passthrough.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    throw ConfigError("could not start '" + python +
                      " -m adaptiveload.calibrate' to measure (install the Python package, or set ADAPTIVELOAD_PYTHON "
                      "to its interpreter); or fit existing measurements with --measurements FILE");
  }
  std::vector<Measurement> pts = read_measurements(c.measurements);
  CalibrationFit f = fit_calibration(pts);
  std::ofstream o(c.out);
  if (!o) throw InputError(c.out, "cannot open for writing");
  o << profile_json(f, pts, c.model, c.device) << "\n";
  if (!o) throw InputError(c.out, "write failed (disk full?)");
  printf("fitted %zu measurements: seconds per sample = %.4g*S + %.4g*S^2 + %.4g; overhead %.4g s; "
         "efficiency halves at %.0f tokens per micro-batch\n",
         f.points, f.a, f.b, f.c0, f.overhead_s, f.half_efficiency_tokens);
  printf("fit error of the micro-batch time: median %.1f%%, max %.1f%%\n", 100 * f.median_rel_error,
         100 * f.max_rel_error);
  printf("best single exponent (the paper's B x S^p): p = %.3f, error median %.1f%%, max %.1f%%\n", f.power_p,
         100 * f.power_median_rel_error, 100 * f.power_max_rel_error);
  if (f.has_memory)
    printf("memory: M_static %.2f GB, m0 %.1f MB per sample, m1 %.1f KB per token\n", f.static_bytes / 1e9, f.m0 / 1e6,
           f.m1 / 1e3);
  printf("wrote %s (use: adaptiveload plan --profile %s)\n", c.out.c_str(), c.out.c_str());
  return 0;
}

}  // namespace

std::shared_ptr<Command> add_calibrate_command(CLI::App& app) {
  auto c = std::make_shared<CalibrateCommand>();
  c->app = app.add_subcommand("calibrate",
                              "Fit the cost model (a*S + b*S^2 + c0, overhead, small-batch efficiency) and the memory "
                              "model to measurements and write a profile for plan --profile and the sampler");
  c->app->add_option("--measurements", c->measurements,
                     "JSONL of measured micro-batches {\"tokens\":S,\"batch\":B,\"time_s\":T,\"peak_bytes\":M}; "
                     "without it, measures first with `python3 -m adaptiveload.calibrate` (needs PyTorch)")
      ->check(CLI::ExistingFile);
  c->app->add_option("--out,-o", c->out, "Profile file to write")->capture_default_str();
  c->app->add_option("--model", c->model, "Model the measurements are of (recorded in the profile)")
      ->capture_default_str();
  c->app->add_option("--device", c->device, "Device the measurements are of (recorded in the profile)")
      ->capture_default_str();
  c->app->add_option("args", c->passthrough, "Further options for the measuring script (after --)");
  CalibrateCommand* p = c.get();
  c->run = [p] { return run_calibrate(*p); };
  return c;
}

}  // namespace adaptiveload::cli
