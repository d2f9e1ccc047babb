// bench_plan_e2e: the whole CLI path at scale (issue 3's target: `adaptiveload plan` of a
// 10-million-row manifest, reading, geometry, automatic budgets, the plan and writing JSONL,
// in under 5 s on one core and under 64 bytes per row of peak memory beyond the file).
//
//   ./build/bench/bench_plan_e2e [--rows 1000000,10000000] [--formats csv,jsonl] [--dir DIR]
//                                [--reps N] [--strategy balanced] [--ranks W] [--packing on]
//
// Writes synthetic manifests once into DIR (default build-e2e/manifests, git-ignored): rows
// drawn from the shared Taichi-HD clips and COCO images (their sizes, frame counts and fps;
// 40% clips, 60% images) with unique paths of 50-70 characters. Then runs exactly
// `adaptiveload plan -m FILE -s STRATEGY --out OUT.jsonl -q` in a child pinned to one core
// (sched_setaffinity, as taskset does) and takes the child's peak RSS from wait4. Beside each
// size it runs bench_plan (the in-memory planner on synthetic buckets) for the same strategy
// and ranks (not with --packing on, which bench_plan does not plan). Prints a table and one
// JSON line per configuration; the median of --reps runs.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/util/rng.h"
#include "pin_cpu.h"

using namespace adaptiveload;

namespace {

struct Template {
  int64_t frames;
  int32_t h, w;
  double fps;
};

// Geometry of the real manifests shipped in data/ (Taichi-HD clips, COCO images).
std::vector<Template> templates() {
  std::vector<Template> out;
  for (const char* f : {"/taichi_hd.csv", "/coco2017_val_images.csv"}) {
    Manifest m;
    m.load(std::string(AL_DATA_DIR) + f,
           BadRowPolicy::kError);  // a missing file is an error, not other data
    for (int64_t r = 0; r < m.total_rows(); ++r) {
      const ClipInfo c = m.clip(r);
      out.push_back({c.num_frames, c.height, c.width, c.fps});
    }
  }
  return out;
}

// Writes `rows` rows as CSV or JSONL (json.dumps style) into `path`; deterministic.
void generate(const std::string& path, uint64_t rows, bool jsonl,
              const std::vector<Template>& tpl) {
  FILE* f = fopen((path + ".tmp").c_str(), "wb");
  if (!f) {
    perror(path.c_str());
    exit(1);
  }
  static char iobuf[1 << 20];
  setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
  if (!jsonl) fputs("path,num_frames,height,width,fps\n", f);
  Rng rng(20240611, 7);
  static const char kId[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  char id[12], p[128], fps[32];
  for (uint64_t i = 0; i < rows; ++i) {
    const Template& t = tpl[rng.below(uint32_t(tpl.size()))];
    if (t.frames > 1) {
      for (int k = 0; k < 11; ++k) id[k] = kId[rng.below(64)];
      id[11] = 0;
      const uint32_t start = rng.below(5000);
      snprintf(p, sizeof p, "videos/taichi_hd/train/%s/%s_%u_%llu.mp4", id, id, start,
               static_cast<unsigned long long>(start + t.frames));
      snprintf(fps, sizeof fps, "%.15g", t.fps);
    } else {
      snprintf(p, sizeof p, "images/coco2017/train2017/shard_%04llu/%012llu.jpg",
               static_cast<unsigned long long>(i / 10000), static_cast<unsigned long long>(i));
      fps[0] = 0;
    }
    if (jsonl) {
      fprintf(f, "{\"path\": \"%s\", \"num_frames\": %lld, \"height\": %d, \"width\": %d", p,
              static_cast<long long>(t.frames), t.h, t.w);
      if (fps[0]) fprintf(f, ", \"fps\": %s", fps);
      fputs("}\n", f);
    } else {
      fprintf(f, "%s,%lld,%d,%d,%s\n", p, static_cast<long long>(t.frames), t.h, t.w, fps);
    }
  }
  if (fclose(f) != 0 || rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    perror(path.c_str());
    exit(1);
  }
}

struct Run {
  double seconds = 0;
  long peak_kb = 0;
  int status = -1;
};

// Runs argv in a child pinned to CPU 0; stdout and stderr go to `log`.
Run run_pinned(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  fflush(stdout);  // else the child's freopen writes the parent's buffered lines again
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    pin_to_cpu0();
    if (!freopen(log.c_str(), "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Run r;
  struct rusage ru;
  if (pid < 0 || wait4(pid, &r.status, 0, &ru) != pid) return r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_kb = ru.ru_maxrss;
  return r;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// The directory of this binary (build/bench), to find the CLI and bench_plan beside it.
std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string s(buf, size_t(n));
  return s.substr(0, s.rfind('/'));
}

// bench_plan's JSON line for one strategy: {plan_s + setup_s, peak_bytes_per_sample}.
bool in_memory(const std::string& bench_plan, uint64_t rows, int ranks, const std::string& strategy,
               const std::string& log, double& seconds, double& bytes) {
  Run r = run_pinned({bench_plan, "--samples", std::to_string(rows), "--ranks",
                      std::to_string(ranks), "--strategy", strategy},
                     log);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) return false;
  FILE* f = fopen(log.c_str(), "r");
  if (!f) return false;
  char line[1024];
  bool ok = false;
  while (fgets(line, sizeof line, f)) {
    const char* j = strstr(line, "{\"bench\":\"plan\"");
    if (!j) continue;
    double setup = 0, plan = 0;
    const char *s = strstr(j, "\"setup_s\":"), *p = strstr(j, "\"plan_s\":"),
               *b = strstr(j, "\"peak_bytes_per_sample\":");
    if (!s || !p || !b) continue;
    setup = atof(s + 10), plan = atof(p + 9), bytes = atof(b + 24);
    seconds = setup + plan;
    ok = true;
  }
  fclose(f);
  return ok;
}

constexpr const char* kUsage =
    "usage: bench_plan_e2e [--rows N,N..] [--formats csv,jsonl] [--dir DIR] [--reps N]\n"
    "                      [--strategy NAME] [--ranks W] [--packing on|off]\n"
    "  Runs `adaptiveload plan -m FILE -s NAME --out OUT -q` on generated manifests of N rows\n"
    "  (default 1000000,10000000) on one core; prints seconds and peak bytes per row beyond the\n"
    "  file, beside bench_plan's in-memory figure. --ranks W passes -w W (default: the CLI's 8);\n"
    "  --packing on passes --packing on (packed micro-batches; no in-memory figure then).\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rows_list = {"1000000", "10000000"}, formats = {"csv", "jsonl"};
  std::string dir = "build-e2e/manifests", strategy = "balanced", packing = "off";
  int reps = 1, ranks = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      printf("%s", kUsage);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "bench_plan_e2e: unknown or incomplete argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--rows") {
      rows_list = split(v);
    } else if (a == "--formats") {
      formats = split(v);
    } else if (a == "--dir") {
      dir = v;
    } else if (a == "--strategy") {
      strategy = v;
    } else if (a == "--packing") {
      if (v != "on" && v != "off") {
        fprintf(stderr, "bench_plan_e2e: --packing is on or off, got '%s'\n", v.c_str());
        return 2;
      }
      packing = v;
    } else if (a == "--reps" || a == "--ranks") {
      (a == "--reps" ? reps : ranks) = atoi(v.c_str());
      if ((a == "--reps" ? reps : ranks) < 1) {
        fprintf(stderr, "bench_plan_e2e: %s needs a positive integer, got '%s'\n", a.c_str(),
                v.c_str());
        return 2;
      }
    } else {
      fprintf(stderr, "bench_plan_e2e: unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  for (const auto& f : formats) {
    if (f != "csv" && f != "jsonl") {
      fprintf(stderr, "bench_plan_e2e: format '%s' is not csv or jsonl\n", f.c_str());
      return 2;
    }
  }
  const std::string bin = self_dir();
  const std::string cli = bin + "/../cli/adaptiveload", bench_plan = bin + "/bench_plan";
  if (access(cli.c_str(), X_OK) != 0) {
    fprintf(stderr, "bench_plan_e2e: no CLI at %s (build the adaptiveload target)\n", cli.c_str());
    return 1;
  }
  mkdir(dir.c_str(), 0755);
  const std::vector<Template> tpl = templates();
  printf(
      "bench_plan_e2e: `adaptiveload plan -s %s --packing %s --out` on one core, %s ranks, median "
      "of %d\n",
      strategy.c_str(), packing.c_str(), ranks ? std::to_string(ranks).c_str() : "default (8)",
      reps);
  printf("%-6s %10s %9s %9s %9s %10s | %12s %12s\n", "format", "rows", "file MB", "seconds",
         "peak MB", "B/row+file", "in-mem s", "in-mem B/row");
  int failures = 0;
  for (const auto& rs : rows_list) {
    const uint64_t rows = std::strtoull(rs.c_str(), nullptr, 10);
    if (rows == 0) {
      fprintf(stderr, "bench_plan_e2e: --rows needs positive integers, got '%s'\n", rs.c_str());
      return 2;
    }
    double mem_s = -1, mem_b = -1;
    if (packing == "off" && access(bench_plan.c_str(), X_OK) == 0 &&
        !in_memory(bench_plan, rows, ranks ? ranks : 8, strategy, dir + "/bench_plan.log", mem_s,
                   mem_b))
      mem_s = mem_b = -1;
    for (const auto& fmt : formats) {
      const std::string file = dir + "/synthetic_" + rs + "." + fmt;
      struct stat st;
      if (stat(file.c_str(), &st) != 0) {
        fprintf(stderr, "writing %s ...\n", file.c_str());
        generate(file, rows, fmt == "jsonl", tpl);
        stat(file.c_str(), &st);
      }
      std::vector<std::string> args = {
          cli, "plan", "-m", file, "-s", strategy, "--out", file + ".plan.jsonl", "-q"};
      if (ranks) args.insert(args.end(), {"-w", std::to_string(ranks)});
      if (packing == "on") args.insert(args.end(), {"--packing", "on"});
      std::vector<Run> runs;
      for (int k = 0; k < reps; ++k) {
        Run r = run_pinned(args, file + ".log");
        if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
          printf("%-6s %10llu FAILED (status %d; see %s.log)\n", fmt.c_str(),
                 static_cast<unsigned long long>(rows), r.status, file.c_str());
          ++failures;
          runs.clear();
          break;
        }
        runs.push_back(r);
      }
      if (runs.empty()) continue;
      std::sort(runs.begin(), runs.end(),
                [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
      const Run& r = runs[runs.size() / 2];
      const double file_b = double(st.st_size), peak_b = double(r.peak_kb) * 1024.0;
      const double per_row = (peak_b - file_b) / double(rows);
      printf("%-6s %10llu %9.1f %9.3f %9.1f %10.1f | %12.3f %12.1f\n", fmt.c_str(),
             static_cast<unsigned long long>(rows), file_b / 1e6, r.seconds, peak_b / 1e6, per_row,
             mem_s, mem_b);
      printf(
          "{\"bench\":\"plan_e2e\",\"format\":\"%s\",\"rows\":%llu,\"strategy\":\"%s\",\"packing\":"
          "\"%s\",\"ranks\":%d,"
          "\"file_bytes\":%.0f,\"seconds\":%.4f,\"peak_bytes\":%.0f,\"peak_bytes_per_row_beyond_"
          "file\":%.2f,"
          "\"in_memory_s\":%.4f,\"in_memory_bytes_per_sample\":%.2f,\"target_s\":5,\"target_"
          "bytes\":64}\n",
          fmt.c_str(), static_cast<unsigned long long>(rows), strategy.c_str(), packing.c_str(),
          ranks ? ranks : 8, file_b, r.seconds, peak_b, per_row, mem_s, mem_b);
      fflush(stdout);
    }
  }
  return failures ? 1 : 0;
}
