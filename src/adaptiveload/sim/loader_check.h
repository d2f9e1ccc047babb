#pragma once
// The loader check: do a rank's DataLoader workers keep up with its training?
//
// A loader profile (JSON, written by `adaptiveload calibrate --loader ...` through
// python/adaptiveload/data_rate.py, or python/bench/bench_loader.py --out) gives the seconds
// one worker takes to load one sample (decode it from media, or read it from a latent cache),
// measured per bucket shape, and a fit `fixed_s + per_token_s * tokens` for shapes it did not
// measure. check_loader prices each rank's share of each step of a plan at those rates over
// the rank's `workers` workers (loading in parallel) and compares it with the rank's compute in
// that step (rank_times). The comparison is conservative: the rank's wait at the step's
// barrier, during which its workers keep loading, is not counted as time to load.
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/plan/plan.h"
#include "adaptiveload/sim/metrics.h"

namespace adaptiveload {

constexpr const char* kLoaderProfileFormat = "adaptiveload-loader-1";
constexpr int kMaxLoaderWorkers = 4096;

struct LoaderProfile {
  struct Entry {
    int frames = 1, height = 0, width = 0;  // the bucket (F', H', W')
    double seconds = 0;                     // one worker, one sample
  };
  std::string path;
  std::string source;  // "media" (decode) or "cache" (read), as measured
  std::vector<Entry> buckets;
  double fixed_s = 0, per_token_s = 0;  // shapes not measured: fixed_s + per_token_s * tokens
  // Seconds one worker takes to load one sample of bucket `b`.
  double sample_seconds(const Bucket& b) const;
};

// Reads and checks a loader profile; throws InputError naming the file and the bad field.
LoaderProfile read_loader_profile(const std::string& path);
LoaderProfile parse_loader_profile(const std::string& text, const std::string& where);

struct LoaderCheck {
  int workers = 0;
  int64_t rank_steps = 0;       // (step, rank) pairs with work
  int64_t slow_rank_steps = 0;  // of them, those that load slower than they train
  double max_ratio = 0;         // largest load / train seconds over (step, rank)
  // The worst (step, rank): its load and train seconds.
  int64_t worst_step = -1;
  int worst_rank = -1;
  double worst_load_s = 0, worst_train_s = 0;
  double load_s_max_rank = 0;  // the epoch's load seconds of the rank that loads most
  bool keeps_up() const { return slow_rank_steps == 0; }
};

// The check of `plan` (simulated in `env`) at `profile`'s rates with `workers` per rank.
LoaderCheck check_loader(const Plan& plan, const SimEnv& env, const LoaderProfile& profile,
                         int workers);

// The warning for a row of the comparison whose loader does not keep up; "" when it does.
// `workers_word` names the worker count in the front end's words ("--loader-workers",
// "loader_workers").
std::string loader_warning(const std::string& row, const LoaderCheck& c,
                           const LoaderProfile& profile, const std::string& workers_word);

}  // namespace adaptiveload
