// bench_plan: planning time and peak memory at scale (issue 2's target: 10 million samples,
// 1024 ranks, under 5 s and under 64 bytes of resident memory per sample, on one core).
//
//   ./build/bench/bench_plan [--samples N] [--ranks W] [--strategy NAME|all] [--sync
//   step|micro|both]
//                            [--model NAME] [--grid NAME] [--sp auto|min|per-sample|off|G]
//
// --model wan2.1-14b --grid wan-long: a fifth of the 720p clips at 1080p and clips up to 121
// frames, whose longest do not fit one GPU: balanced plans them on sequence-parallel groups.
//
// Samples are synthetic but shaped by published corpus statistics (DESIGN.md / shared
// SOURCES.md): 30% images, 70% clips with a log-normal duration (median 8.5 s, Panda-70M's
// mean clip) at 720p (50%), 480p (30%) and 360p (20%). Each strategy runs in a forked child
// pinned to one core; its peak RSS (getrusage) minus the RSS before the samples were made is
// the memory figure. Prints a table and one JSON line per strategy.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/rng.h"
#include "pin_cpu.h"

using namespace adaptiveload;

namespace {

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Synthetic bucketing of n samples on the Wan grid.
Bucketing synthetic(uint64_t n, const ModelPreset& model, const BucketGrid& grid) {
  Bucketing bk;
  // Bucket table: every (tier, ratio, frames) of the grid.
  std::vector<std::vector<std::vector<uint16_t>>> id(grid.tiers.size());
  for (size_t t = 0; t < grid.tiers.size(); ++t) {
    id[t].resize(grid.tiers[t].sizes.size());
    for (size_t r = 0; r < grid.tiers[t].sizes.size(); ++r) {
      for (int f : grid.frames) {
        Bucket b = make_bucket(f, grid.tiers[t].sizes[r].h, grid.tiers[t].sizes[r].w, model);
        b.tier = grid.tiers[t].name;
        b.ratio = grid.tiers[t].sizes[r].ratio;
        id[t][r].push_back(uint16_t(bk.buckets.size()));
        bk.buckets.push_back(b);
      }
    }
  }
  bk.bucket_counts.assign(bk.buckets.size(), 0);
  bk.sample_bucket.resize(n);
  Rng rng(12345, 1);
  auto uniform = [&] { return (double(rng.next_u32()) + 0.5) / 4294967296.0; };
  const double kPi = 3.14159265358979323846;
  for (uint64_t i = 0; i < n; ++i) {
    const bool image = rng.below(100) < 30;
    const uint32_t u = rng.below(100);
    // Clips: 20% in the second tier, 30% the third, the rest the fourth; with a fifth tier
    // (wan-long's 1080p), a fifth of them there.
    const size_t top = grid.tiers.size() > 4 && u >= 80 ? grid.tiers.size() - 1 : 3;
    size_t tier = image ? (u < 20 ? 0 : u < 70 ? 1 : 2) : (u < 20 ? 1 : u < 50 ? 2 : top);
    const uint32_t v = rng.below(100);
    size_t ratio = v < 70 ? 0 : v < 85 ? 1 : v < 93 ? 3 : v < 97 ? 4 : 2;  // 16:9 mostly
    size_t fi = 0;
    if (!image) {
      double z = std::sqrt(-2 * std::log(uniform())) * std::cos(2 * kPi * uniform());
      double seconds = 8.5 * std::exp(0.6 * z);
      int frames = int(seconds * grid.fps) + 1;
      fi = 1;
      while (fi + 1 < grid.frames.size() && grid.frames[fi + 1] <= frames) ++fi;
    }
    uint16_t b = id[tier][ratio][fi];
    bk.sample_bucket[i] = b;
    ++bk.bucket_counts[b];
  }
  bk.usable = int64_t(n);
  return bk;
}

struct Result {
  double plan_s = 0, setup_s = 0;
  long peak_kb = 0;
  uint64_t steps = 0, micro_batches = 0;
  double imbalance = 0;
  int group_min = 1, group_max = 1;
};

}  // namespace

constexpr const char* kUsage =
    "usage: bench_plan [--samples N] [--ranks W] [--strategy NAME|all] [--sync step|micro|both]\n"
    "                  [--model NAME] [--grid NAME] [--sp auto|min|per-sample|off|G]\n"
    "  Times the planner on N synthetic samples (default 10,000,000) for W ranks (default 1024),\n"
    "  each strategy (equal_tokens, fixed, dual, balanced, or all) in a child process on one "
    "core,\n"
    "  and prints a table plus one JSON line per strategy; --sync: the sync mode(s) planned for\n"
    "  (step: DDP, micro: FSDP / ZeRO-2/3; both: side by side; default step). --model and --grid:\n"
    "  presets (default wan2.1-1.3b and its grid); wan2.1-14b with wan-long has samples that need\n"
    "  sequence-parallel groups; --sp as the CLI's (min: each on the smallest group it fits).\n";

int main(int argc, char** argv) {
  uint64_t n = 10'000'000;
  int W = 1024;
  std::string only = "all";
  std::string sync = "step", model_name = "wan2.1-1.3b", grid_name, sp_mode = "auto";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      printf("%s", kUsage);
      return 0;
    }
    const bool known = arg == "--samples" || arg == "--ranks" || arg == "--strategy" ||
                       arg == "--sync" || arg == "--model" || arg == "--grid" || arg == "--sp";
    if (!known || i + 1 >= argc) {
      fprintf(stderr, "bench_plan: %s '%s'\n%s", known ? "missing value after" : "unknown argument",
              arg.c_str(), kUsage);
      return 2;
    }
    const std::string v = argv[++i];
    try {
      size_t used = 0;
      if (arg == "--samples") {
        n = std::stoull(v, &used);
        if (used != v.size() || n == 0 || v[0] == '-') throw std::invalid_argument(v);
      } else if (arg == "--ranks") {
        W = std::stoi(v, &used);
        if (used != v.size() || W < 1 || W > kMaxWorldSize) throw std::invalid_argument(v);
      } else if (arg == "--sync") {
        SyncMode parsed;
        if (v != "both" && !parse_sync(v, parsed)) throw std::invalid_argument(v);
        sync = v;
      } else if (arg == "--model") {
        model_name = v;
      } else if (arg == "--grid") {
        grid_name = v;
      } else if (arg == "--sp") {
        sp_mode = v;
      } else {
        only = v;
      }
    } catch (const std::exception&) {
      fprintf(stderr, "bench_plan: %s needs %s, got '%s'\n", arg.c_str(),
              arg == "--sync"    ? (sync_names() + " or both").c_str()
              : arg == "--ranks" ? "a positive integer up to 1048576"
                                 : "a positive integer",
              v.c_str());
      return 2;
    }
  }
  printf("bench_plan: %llu synthetic samples, %d ranks, %s on h200, one core per strategy\n",
         static_cast<unsigned long long>(n), W, model_name.c_str());
  printf("%-13s %6s %9s %9s %11s %10s %9s %9s %10s\n", "strategy", "sync", "setup s", "plan s",
         "peak MB", "B/sample", "steps", "mb", "imbalance");
  int failures = 0;
  std::vector<std::string> modes{sync};
  if (sync == "both") {
    modes.clear();
    for (const SyncModeName& m : kSyncModes) modes.push_back(m.name);
  }
  for (const std::string& mode : modes)
    for (const auto& s : strategies()) {
      if (only != "all" && only != s.name) continue;
      int fd[2];
      if (pipe(fd) != 0) return 1;
      pid_t pid = fork();
      if (pid == 0) {
        pin_to_cpu0();
        const long base_kb = rss_kb();
        Result r;
        PlannerConfig cfg;
        cfg.world_size = W;
        cfg.sync = mode;
        cfg.model = model_name;
        cfg.grid = grid_name;
        cfg.sp = sp_mode;
        cfg.comp_budget =
            8e6;  // fixed M_comp (binds on 720p clips): the automatic search plans dual 32 times
        ModelPreset model = load_model(cfg.model);
        BucketGrid grid = load_grid(cfg.grid.empty() ? model.default_grid : cfg.grid);
        Bucketing bk = synthetic(n, model, grid);
        auto t0 = std::chrono::steady_clock::now();
        Planner planner(std::move(bk), cfg);
        auto t1 = std::chrono::steady_clock::now();
        Plan plan = planner.plan(s.name);
        auto t2 = std::chrono::steady_clock::now();
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r.setup_s = std::chrono::duration<double>(t1 - t0).count();
        r.plan_s = std::chrono::duration<double>(t2 - t1).count();
        r.peak_kb = ru.ru_maxrss - base_kb;
        r.steps = plan.num_steps();
        r.micro_batches = plan.micro_batches.size();
        const Metrics m = planner.simulate(plan);
        r.imbalance = m.imbalance;
        r.group_min = m.group_min, r.group_max = m.group_max;
        if (write(fd[1], &r, sizeof r) != sizeof r) _exit(1);
        _exit(0);
      }
      close(fd[1]);
      Result r;
      bool ok = read(fd[0], &r, sizeof r) == sizeof r;
      close(fd[0]);
      int status = 0;
      waitpid(pid, &status, 0);
      if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("%-13s %6s FAILED (child status %d)\n", s.name, mode.c_str(), status);
        ++failures;
        continue;
      }
      const double bytes_per_sample = double(r.peak_kb) * 1024.0 / double(n);
      printf("%-13s %6s %9.3f %9.3f %11.1f %10.1f %9llu %9llu %9.2f%% g %d-%d\n", s.name,
             mode.c_str(), r.setup_s, r.plan_s, r.peak_kb / 1024.0, bytes_per_sample,
             static_cast<unsigned long long>(r.steps),
             static_cast<unsigned long long>(r.micro_batches), 100 * r.imbalance, r.group_min,
             r.group_max);
      printf(
          "{\"bench\":\"plan\",\"sync\":\"%s\",\"strategy\":\"%s\",\"samples\":%llu,\"ranks\":%d,"
          "\"setup_s\":%.4f,\"plan_s\":%.4f,"
          "\"peak_bytes_per_sample\":%.2f,\"steps\":%llu,\"imbalance\":%.5f,\"target_s\":5,"
          "\"target_bytes\":64}\n",
          mode.c_str(), s.name, static_cast<unsigned long long>(n), W, r.setup_s, r.plan_s,
          bytes_per_sample, static_cast<unsigned long long>(r.steps), r.imbalance);
    }
  return failures ? 1 : 0;
}
