// adaptiveload calibrate: fit the cost and memory models to measurements and write a profile.
//   --measurements FILE: fit measured micro-batches, JSONL of
//                        {"tokens", "batch", "time_s", "peak_bytes"}
//   otherwise: measure first, on this machine's GPU, with the Python package: runs
//              `<python> -m adaptiveload.calibrate ...` (it measures, then fits) with the
//              project's Python (find_python) and exits with its status.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/util/error.h"
#include "commands.h"
#include "output_files.h"

namespace adaptiveload::cli {
namespace {

struct CalibrateCommand : Command {
  std::string measurements, out = "profile.json", model = "wan2.1-1.3b", device = "unknown";
  std::vector<std::string> passthrough;
};

// Exit status of the bootstrap below when the interpreter cannot import the package (the
// `sys.exit(86)` in it); calibrate itself exits 0, 1 (fit failed) or 2 (usage error).
constexpr int kNoPackage = 86;
// Runs the measuring module, or says why the package does not import (then exits kNoPackage).
constexpr const char* kBootstrap =
    "import sys\n"
    "try:\n"
    "    from adaptiveload import calibrate\n"
    "except ImportError as e:\n"
    "    sys.stderr.write('adaptiveload calibrate: ' + sys.executable + ' cannot import "
    "adaptiveload: ' + str(e) + "
    "'\\n')\n"
    "    sys.exit(86)\n"
    "sys.exit(0 if calibrate.main(sys.argv[1:]) else 1)\n";

bool is_executable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
}

// The repository this executable was built in: the source file's own path, as the compiler
// saw it (absolute under CMake), two levels up (cli/cmd_calibrate.cpp).
std::string compiled_source_dir() {
  const std::string file = __FILE__;
  return file.empty() || file[0] != '/' ? std::string() : parent_dir(parent_dir(file));
}

struct Python {
  std::string path, why;  // the interpreter, and how it was chosen (for messages)
};

// The Python that measures: $AL_PYTHON (or the older $ADAPTIVELOAD_PYTHON); else the project's
// environment, .venv/bin/python in a folder above this executable (<repo>/build*/cli/) or in
// the source folder it was compiled from; else python3 on PATH.
Python find_python() {
  for (const char* var : {"AL_PYTHON", "ADAPTIVELOAD_PYTHON"}) {
    const char* env = std::getenv(var);
    if (!env || !*env) continue;
    if (!is_executable(env))
      throw ConfigError(
          std::string(var) + "=" + env +
          " is not an executable file; set it to the Python that has the adaptiveload package "
          "(for example <repo>/.venv/bin/python), or unset it");
    return {env, std::string("from ") + var};
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string dir = parent_dir(exe);
    for (int up = 0; up < 4 && !dir.empty(); ++up, dir = parent_dir(dir))
      if (is_executable(dir + "/.venv/bin/python"))
        return {dir + "/.venv/bin/python", "the project's environment beside this executable"};
  }
  const std::string src = compiled_source_dir();
  if (!src.empty() && is_executable(src + "/.venv/bin/python"))
    return {src + "/.venv/bin/python", "the project's environment in " + src};
  return {"python3", "python3 on PATH (no AL_PYTHON, no project .venv found)"};
}

std::string setup_hint() {
  const std::string src = compiled_source_dir();
  return "set up the project's environment with scripts/python_env.sh" +
         (src.empty() ? std::string()
                      : " (in " + src + "; it creates .venv there, which calibrate then uses)") +
         ", or point AL_PYTHON at a Python that has the package: AL_PYTHON=/path/to/python "
         "adaptiveload calibrate "
         "...; or fit existing measurements with --measurements FILE";
}

// Runs `python -c kBootstrap args...` and returns its exit status (128 + signal if killed).
int run_measuring_python(const Python& py, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {py.path, "-c", kBootstrap};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error(std::string("calibrate: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(argv[0], argv.data());
    const std::string msg =
        "adaptiveload calibrate: cannot run " + py.path + ": " + std::strerror(errno) + "\n";
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      throw std::runtime_error(std::string("calibrate: waitpid failed: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_calibrate(CalibrateCommand& c) {
  check_outputs({{"--out", c.out}}, {{"--measurements", c.measurements}});
  if (c.measurements.empty()) {
    // Measuring needs PyTorch and the model: hand over to the Python package.
    const Python py = find_python();
    std::cerr << "adaptiveload calibrate: measuring with " << py.path << " (" << py.why << ")\n";
    std::vector<std::string> args = {"--out", c.out, "--model", c.model};
    args.insert(args.end(), c.passthrough.begin(), c.passthrough.end());
    const int rc = run_measuring_python(py, args);
    if (rc == 127) throw ConfigError("could not start " + py.path + " to measure; " + setup_hint());
    if (rc == kNoPackage)
      throw ConfigError(py.path + " cannot import the adaptiveload package; " + setup_hint());
    return rc;
  }
  std::vector<Measurement> pts, held;
  for (const Measurement& m : read_measurements(c.measurements))
    (m.held_out ? held : pts).push_back(m);
  CalibrationFit f = fit_calibration(pts);
  const HeldOutErrors h = held_out_errors(f, held);
  std::ofstream o(c.out);
  if (!o) throw InputError(c.out, "cannot open for writing");
  o << profile_json(f, pts, c.model, c.device, h) << "\n";
  if (!o) throw InputError(c.out, "write failed (disk full?)");
  printf(
      "fitted %zu measurements: seconds per sample = %.4g*S + %.4g*S^2 + %.4g; overhead %.4g s; "
      "efficiency halves at %.0f tokens per micro-batch\n",
      f.points, f.a, f.b, f.c0, f.overhead_s, f.half_efficiency_tokens);
  printf("fit error of the micro-batch time: median %.1f%%, max %.1f%%\n", 100 * f.median_rel_error,
         100 * f.max_rel_error);
  if (h.points)
    printf(
        "held-out error (%zu measurements marked held_out, not fitted): median %.1f%%, max "
        "%.1f%%\n",
        h.points, 100 * h.median_rel_error, 100 * h.max_rel_error);
  printf("best single exponent (the paper's B x S^p): p = %.3f, error median %.1f%%, max %.1f%%\n",
         f.power_p, 100 * f.power_median_rel_error, 100 * f.power_max_rel_error);
  if (f.has_memory)
    printf("memory: M_static %.2f GB, m0 %.1f MB per sample, m1 %.1f KB per token\n",
           f.static_bytes / 1e9, f.m0 / 1e6, f.m1 / 1e3);
  printf("wrote %s (use: adaptiveload plan --profile %s)\n", c.out.c_str(), c.out.c_str());
  return 0;
}

}  // namespace

std::shared_ptr<Command> add_calibrate_command(CLI::App& app) {
  auto c = std::make_shared<CalibrateCommand>();
  c->app = app.add_subcommand(
      "calibrate",
      "Fit the cost model (a*S + b*S^2 + c0, overhead, small-batch efficiency) and the memory "
      "model to measurements and write a profile for plan --profile and the sampler");
  c->app
      ->add_option("--measurements", c->measurements,
                   "JSONL of measured micro-batches "
                   "{\"tokens\":S,\"batch\":B,\"time_s\":T,\"peak_bytes\":M}; lines with "
                   "\"held_out\":true are not fitted, and the fit's errors on them are reported; "
                   "without it, measures first with `python -m adaptiveload.calibrate` (needs "
                   "PyTorch and the "
                   "package; the Python is $AL_PYTHON, else the project's .venv, else python3)")
      ->check(CLI::ExistingFile);
  c->app->add_option("--out,-o", c->out, "Profile file to write")->capture_default_str();
  c->app->add_option("--model", c->model, "Model the measurements are of (recorded in the profile)")
      ->capture_default_str();
  c->app
      ->add_option("--device", c->device,
                   "Device the measurements are of (recorded in the profile)")
      ->capture_default_str();
  c->app->add_option(
      "args", c->passthrough,
      "Further options for the measuring script (after --); `-- --loader media|cache "
      "--loader-manifest PATH` measures the DataLoader instead of the model and writes a "
      "loader profile (--loader-out) for `plan --loader-profile FILE --loader-workers N`");
  CalibrateCommand* p = c.get();
  c->run = [p] { return run_calibrate(*p); };
  return c;
}

}  // namespace adaptiveload::cli
