#include "adaptiveload/sim/loader_check.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

using json = nlohmann::json;

const char* kAdvice = "re-measure it with `adaptiveload calibrate --loader ...`";

double number(const json& j, const char* key, const std::string& where, const std::string& field) {
  if (!j.contains(key) || !j[key].is_number())
    throw InputError(where, "loader profile field '" + field + "' must be a number; " + kAdvice);
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < 0)
    throw InputError(
        where, "loader profile field '" + field + "' must be finite and >= 0, got " + fmt("%g", v));
  return v;
}

int side(const json& e, const char* key, const std::string& where, const std::string& field) {
  if (!e.contains(key) || !e[key].is_number_integer() || e[key].get<int64_t>() < 1 ||
      e[key].get<int64_t>() > 1 << 20)
    throw InputError(
        where, "loader profile field '" + field + "' must be a whole number >= 1; " + kAdvice);
  return int(e[key].get<int64_t>());
}

}  // namespace

double LoaderProfile::sample_seconds(const Bucket& b) const {
  for (const Entry& e : buckets)
    if (e.frames == b.frames && e.height == b.height && e.width == b.width) return e.seconds;
  return fixed_s + per_token_s * double(b.tokens);
}

LoaderProfile parse_loader_profile(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(where, std::string("loader profile is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kLoaderProfileFormat)
    throw InputError(where, std::string("not a loader profile (its 'format' must be \"") +
                                kLoaderProfileFormat + "\"; a cost profile goes to " +
                                option_word("profile") + "); " + kAdvice);
  LoaderProfile p;
  p.path = where;
  p.source = j.contains("source") && j["source"].is_string() ? j["source"].get<std::string>() : "";
  if (!j.contains("fit") || !j["fit"].is_object())
    throw InputError(where, std::string("loader profile has no 'fit'; ") + kAdvice);
  p.fixed_s = number(j["fit"], "fixed_s", where, "fit.fixed_s");
  p.per_token_s = number(j["fit"], "per_token_s", where, "fit.per_token_s");
  if (!j.contains("buckets") || !j["buckets"].is_array())
    throw InputError(where, std::string("loader profile has no 'buckets' list; ") + kAdvice);
  for (size_t i = 0; i < j["buckets"].size(); ++i) {
    const json& e = j["buckets"][i];
    const std::string f = "buckets[" + std::to_string(i) + "].";
    if (!e.is_object())
      throw InputError(
          where, "loader profile field 'buckets[" + std::to_string(i) + "]' must be an object");
    p.buckets.push_back(
        {side(e, "frames", where, f + "frames"), side(e, "height", where, f + "height"),
         side(e, "width", where, f + "width"), number(e, "seconds", where, f + "seconds")});
  }
  return p;
}

LoaderProfile read_loader_profile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "cannot open the loader profile");
  std::ostringstream s;
  s << f.rdbuf();
  return parse_loader_profile(s.str(), path);
}

LoaderCheck check_loader(const Plan& plan, const SimEnv& env, const LoaderProfile& profile,
                         int workers) {
  if (workers < 1 || workers > kMaxLoaderWorkers)
    throw ConfigError("loader workers must be 1.." + std::to_string(kMaxLoaderWorkers) + ", got " +
                      std::to_string(workers));
  LoaderCheck c;
  c.workers = workers;
  const std::vector<Bucket>& buckets = *env.buckets;
  std::vector<double> per_bucket(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) per_bucket[b] = profile.sample_seconds(buckets[b]);
  const std::vector<double> train = rank_times(plan, env);
  const size_t W = size_t(plan.world_size);
  std::vector<double> rank_load(W, 0.0);
  for (size_t i = 0; i < train.size(); ++i) {
    double load = 0;
    for (uint64_t m = plan.rank_begin[i]; m < plan.rank_begin[i + 1]; ++m) {
      const MicroBatch& mb = plan.micro_batches[m];
      const uint32_t* ids = plan.ids(mb);
      for (uint32_t k = 0; k < mb.count; ++k)
        load += per_bucket[mb.bucket == kPackedBucket ? (*env.sample_bucket)[ids[k]] : mb.bucket];
    }
    if (plan.rank_begin[i] == plan.rank_begin[i + 1]) continue;  // no work, nothing to load
    load /= workers;
    rank_load[i % W] += load;
    ++c.rank_steps;
    const double ratio = train[i] > 0 ? load / train[i] : (load > 0 ? INFINITY : 0.0);
    if (load > train[i]) ++c.slow_rank_steps;
    if (c.worst_step < 0 || ratio > c.max_ratio) {
      c.max_ratio = ratio;
      c.worst_step = int64_t(i / W);
      c.worst_rank = int(i % W);
      c.worst_load_s = load;
      c.worst_train_s = train[i];
    }
  }
  for (double x : rank_load) c.load_s_max_rank = std::max(c.load_s_max_rank, x);
  return c;
}

std::string loader_warning(const std::string& row, const LoaderCheck& c,
                           const LoaderProfile& profile, const std::string& workers_word) {
  if (c.keeps_up()) return "";
  const std::string what = profile.source == "cache"   ? "cache reads"
                           : profile.source == "media" ? "decoding"
                                                       : "loading";
  return "strategy '" + row + "': the loader would not keep up: at " + profile.path + "'s rates (" +
         what + ") with " + std::to_string(c.workers) + " worker(s) per rank, rank " +
         std::to_string(c.worst_rank) + "'s share of step " + std::to_string(c.worst_step) +
         " takes " + fmt("%.3g", c.worst_load_s) + " s to load and " +
         fmt("%.3g", c.worst_train_s) + " s to train (" + fmt("%.2f", c.max_ratio) + "x); " +
         std::to_string(c.slow_rank_steps) + " of " + std::to_string(c.rank_steps) +
         " rank-steps load slower than they train: raise " + workers_word +
         (profile.source == "cache"
              ? ""
              : ", or train from a latent cache (python -m adaptiveload.cache)");
}

}  // namespace adaptiveload
