#include "adaptiveload/cost/calibration.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// Non-negative least squares, small and dense (Lawson-Hanson active set), on rows X (n x k)
// and targets y. Returns x >= 0 minimising |X x - y|.
std::vector<double> nnls(const std::vector<std::vector<double>>& X, const std::vector<double>& y) {
  const size_t n = X.size(), k = X.empty() ? 0 : X[0].size();
  std::vector<double> x(k, 0.0);
  std::vector<bool> passive(k, false);
  auto solve_passive = [&](std::vector<double>& z) {
    // Normal equations on the passive set, Gaussian elimination with partial pivoting.
    std::vector<size_t> idx;
    for (size_t j = 0; j < k; ++j)
      if (passive[j]) idx.push_back(j);
    const size_t m = idx.size();
    std::vector<std::vector<double>> A(m, std::vector<double>(m + 1, 0.0));
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < m; ++j) A[i][j] += X[r][idx[i]] * X[r][idx[j]];
        A[i][m] += X[r][idx[i]] * y[r];
      }
    for (size_t i = 0; i < m; ++i) A[i][i] += 1e-12 * (A[i][i] + 1e-30);  // ridge for conditioning
    for (size_t c = 0; c < m; ++c) {
      size_t piv = c;
      for (size_t r = c + 1; r < m; ++r)
        if (std::fabs(A[r][c]) > std::fabs(A[piv][c])) piv = r;
      std::swap(A[c], A[piv]);
      if (std::fabs(A[c][c]) < 1e-300) continue;
      for (size_t r = 0; r < m; ++r) {
        if (r == c) continue;
        double f = A[r][c] / A[c][c];
        for (size_t j = c; j <= m; ++j) A[r][j] -= f * A[c][j];
      }
    }
    z.assign(k, 0.0);
    for (size_t i = 0; i < m; ++i)
      z[idx[i]] = std::fabs(A[i][i]) < 1e-300 ? 0.0 : A[i][m] / A[i][i];
  };
  for (int iter = 0; iter < 100; ++iter) {
    std::vector<double> w(k, 0.0);  // gradient -X^T (X x - y)
    for (size_t r = 0; r < n; ++r) {
      double res = y[r];
      for (size_t j = 0; j < k; ++j) res -= X[r][j] * x[j];
      for (size_t j = 0; j < k; ++j) w[j] += X[r][j] * res;
    }
    size_t best = k;
    double wmax = 1e-15;
    for (size_t j = 0; j < k; ++j)
      if (!passive[j] && w[j] > wmax) wmax = w[j], best = j;
    if (best == k) break;
    passive[best] = true;
    for (int inner = 0; inner < 100; ++inner) {
      std::vector<double> z;
      solve_passive(z);
      bool feasible = true;
      for (size_t j = 0; j < k; ++j)
        if (passive[j] && z[j] <= 0) feasible = false;
      if (feasible) {
        x = z;
        break;
      }
      double alpha = 1.0;
      for (size_t j = 0; j < k; ++j)
        if (passive[j] && z[j] <= 0) alpha = std::min(alpha, x[j] / (x[j] - z[j]));
      for (size_t j = 0; j < k; ++j) {
        x[j] += alpha * (z[j] - x[j]);
        if (passive[j] && x[j] <= 1e-300) passive[j] = false, x[j] = 0;
      }
    }
  }
  return x;
}

double model_time(const CalibrationFit& f, double S, double B) {
  const double t = f.a * S + f.b * S * S + f.c0;
  return f.overhead_s + t * (B + f.half_efficiency_tokens / S);
}

void errors(const std::vector<Measurement>& pts, const std::vector<double>& pred, double& median,
            double& max) {
  std::vector<double> e;
  for (size_t i = 0; i < pts.size(); ++i)
    e.push_back(std::fabs(pred[i] - pts[i].time_s) / pts[i].time_s);
  std::sort(e.begin(), e.end());
  median = e.empty()      ? 0
           : e.size() % 2 ? e[e.size() / 2]
                          : 0.5 * (e[e.size() / 2 - 1] + e[e.size() / 2]);
  max = e.empty() ? 0 : e.back();
}

}  // namespace

namespace {

// A micro-batch's tokens N = sum_i B_i S_i (a pack's ramp is on them).
double pack_tokens(const ObservedMicroBatch& mb) {
  double n = 0;
  for (auto [S, B] : mb.parts) n += double(S) * double(B);
  return n;
}

// The time part of the fit: N_half from 0 and a geometric grid; for each, a linear NNLS fit
// of (a, b, c0, overhead, pack_sample) on relative error (rows scaled by 1 / T); the columns
// of a fixed coefficient move to the known side, and pack_sample's is there only when some
// observation holds a pack.
CalibrationFit fit_time(const std::vector<Observation>& obs, double fixed_overhead = -1,
                        double fixed_half = -1, double fixed_pack_sample = -1) {
  std::set<int64_t> distinct;
  bool any_pack = false;
  for (const auto& o : obs) {
    if (o.micro_batches.empty() || !(o.time_s > 0) || !std::isfinite(o.time_s))
      throw ConfigError("calibration: an observation needs micro-batches and time_s > 0");
    for (const ObservedMicroBatch& mb : o.micro_batches) {
      if (mb.parts.empty())
        throw ConfigError("calibration: an observed micro-batch needs at least one sample");
      any_pack = any_pack || mb.parts.size() > 1;
      for (auto [S, B] : mb.parts) {
        if (S <= 0 || B <= 0)
          throw ConfigError(
              "calibration: a measurement needs tokens > 0, batch > 0 and time_s > 0");
        distinct.insert(S);
      }
    }
  }
  if (distinct.size() < 3)
    throw ConfigError("calibration needs measurements at 3 or more token counts (got " +
                      std::to_string(distinct.size()) + "); sweep more buckets");
  CalibrationFit best;
  double best_err = 1e300;
  std::vector<double> grid = {0};
  for (double h = 16; h <= 262144; h *= 1.4142135623730951) grid.push_back(h);
  if (fixed_half >= 0) grid = {fixed_half};
  const bool fit_overhead = fixed_overhead < 0;
  const bool fit_pack_sample = any_pack && fixed_pack_sample < 0;
  const double known_pack_sample = fixed_pack_sample > 0 ? fixed_pack_sample : 0;
  const size_t col_overhead = 3, col_pack = fit_overhead ? 4 : 3;
  for (double nh : grid) {
    std::vector<std::vector<double>> X;
    std::vector<double> y;
    for (const auto& o : obs) {
      const double w = 1.0 / o.time_s;
      std::vector<double> row(3 + (fit_overhead ? 1 : 0) + (fit_pack_sample ? 1 : 0), 0.0);
      double known = 0;  // the fixed coefficients' share of this observation, in units of 1/T
      for (const ObservedMicroBatch& mb : o.micro_batches) {
        if (mb.parts.size() == 1) {
          const double S = double(mb.parts[0].first), u = double(mb.parts[0].second) + nh / S;
          row[0] += u * S * w, row[1] += u * S * S * w, row[2] += u * w;
        } else {  // a pack: sum_i B_i t(S_i) at the ramp of its total tokens, and its samples
          const double ramp = 1.0 + nh / pack_tokens(mb);
          double n = 0;
          for (auto [Si, Bi] : mb.parts) {
            const double S = double(Si), u = double(Bi) * ramp;
            row[0] += u * S * w, row[1] += u * S * S * w, row[2] += u * w;
            n += double(Bi);
          }
          if (fit_pack_sample)
            row[col_pack] += n * w;
          else
            known += known_pack_sample * n * w;
        }
        if (fit_overhead)
          row[col_overhead] += w;
        else
          known += fixed_overhead * w;
      }
      X.push_back(row);
      y.push_back(1.0 - known);
    }
    std::vector<double> c = nnls(X, y);
    CalibrationFit f;
    f.a = c[0], f.b = c[1], f.c0 = c[2],
    f.overhead_s = fit_overhead ? c[col_overhead] : fixed_overhead;
    f.half_efficiency_tokens = nh;
    f.pack_sample_s = fit_pack_sample ? c[col_pack] : known_pack_sample;
    double sq = 0;
    for (const auto& o : obs) {
      double r = (observation_time(f, o) - o.time_s) / o.time_s;
      sq += r * r;
    }
    if (sq < best_err - 1e-15) best_err = sq, best = f;
  }
  best.points = obs.size();
  std::vector<double> e;
  for (const auto& o : obs) e.push_back(std::fabs(observation_time(best, o) - o.time_s) / o.time_s);
  std::sort(e.begin(), e.end());
  best.median_rel_error =
      e.size() % 2 ? e[e.size() / 2] : 0.5 * (e[e.size() / 2 - 1] + e[e.size() / 2]);
  best.max_rel_error = e.back();
  // Output check: a fit is a cost model, so it must be finite (an extreme measurement can
  // still overflow the least squares).
  for (const auto& [v, what] : {std::pair{best.a, "a"},
                                {best.b, "b"},
                                {best.c0, "c0"},
                                {best.overhead_s, "overhead_s"},
                                {best.pack_sample_s, "pack_sample_s"},
                                {best.median_rel_error, "median relative error"}})
    check_finite(v, std::string("the calibration fit's ") + what);
  return best;
}

}  // namespace

CalibrationFit fit_observations(const std::vector<Observation>& obs, double fixed_overhead_s,
                                double fixed_half_efficiency_tokens, double fixed_pack_sample_s) {
  return fit_time(obs, fixed_overhead_s, fixed_half_efficiency_tokens, fixed_pack_sample_s);
}

double observation_time(const CalibrationFit& f, const Observation& o) {
  double t = 0;
  for (const ObservedMicroBatch& mb : o.micro_batches) {
    if (mb.parts.size() == 1) {
      t += model_time(f, double(mb.parts[0].first), double(mb.parts[0].second));
      continue;
    }
    double w = 0, n = 0;
    for (auto [S, B] : mb.parts)
      w += (f.a * double(S) + f.b * double(S) * double(S) + f.c0) * double(B), n += double(B);
    t += pack_seconds(f.overhead_s, w, f.half_efficiency_tokens, pack_tokens(mb), n,
                      f.pack_sample_s);
  }
  return t;
}

HeldOutErrors held_out_errors(const CalibrationFit& fit, const std::vector<Measurement>& pts) {
  HeldOutErrors h;
  std::vector<double> pred;
  for (const auto& p : pts) {
    if (p.tokens <= 0 || p.batch <= 0 || !(p.time_s > 0) || !std::isfinite(p.time_s))
      throw ConfigError(
          "calibration: a held-out measurement needs tokens > 0, batch > 0 and time_s > 0");
    pred.push_back(observation_time(fit, {{{p.tokens, p.batch}}, p.time_s}));
  }
  h.points = pts.size();
  if (!pts.empty()) errors(pts, pred, h.median_rel_error, h.max_rel_error);
  return h;
}

std::string cost_json(const CalibrationFit& f) {
  nlohmann::json j = {{"a", f.a},
                      {"b", f.b},
                      {"c0", f.c0},
                      {"overhead_s", f.overhead_s},
                      {"half_efficiency_tokens", f.half_efficiency_tokens}};
  if (f.pack_sample_s > 0)
    j["pack_sample_s"] = f.pack_sample_s;  // absent: 0, as before packs were fitted
  return j.dump();
}

CalibrationFit fit_calibration(const std::vector<Measurement>& pts) {
  std::vector<Observation> obs;
  for (const auto& p : pts) {
    if (p.tokens <= 0 || p.batch <= 0 || !(p.time_s > 0) || !std::isfinite(p.time_s))
      throw ConfigError("calibration: a measurement needs tokens > 0, batch > 0 and time_s > 0");
    obs.push_back({{{p.tokens, p.batch}}, p.time_s});
  }
  CalibrationFit best = fit_time(obs);

  // The paper's single exponent for comparison: per-sample time k * S^p, same overhead model.
  {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& p : pts) {
      const double S = double(p.tokens), B = double(p.batch);
      const double per = (p.time_s - best.overhead_s) / (B + best.half_efficiency_tokens / S);
      if (per <= 0) continue;
      const double x = std::log(S), yv = std::log(per);
      sw += 1, sx += x, sy += yv, sxx += x * x, sxy += x * yv;
    }
    const double var = sxx / sw - (sx / sw) * (sx / sw);
    best.power_p = sw > 1 && var > 1e-12 ? (sxy / sw - (sx / sw) * (sy / sw)) / var : 1.0;
    best.power_k = sw > 0 ? std::exp((sy - best.power_p * sx) / sw) : 0.0;
    std::vector<double> pp;
    for (const auto& p : pts) {
      const double S = double(p.tokens), B = double(p.batch);
      pp.push_back(best.overhead_s + best.power_k * std::pow(S, best.power_p) *
                                         (B + best.half_efficiency_tokens / S));
    }
    errors(pts, pp, best.power_median_rel_error, best.power_max_rel_error);
  }

  // Memory: M = static + m0 * B + m1 * B * S, least squares (absolute bytes), when measured.
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  for (const auto& p : pts)
    if (p.peak_bytes >= 0) {
      X.push_back({1.0, double(p.batch), double(p.batch) * double(p.tokens)});
      y.push_back(p.peak_bytes);
    }
  if (X.size() >= 3) {
    // Scale columns to unit size for conditioning.
    double s[3] = {0, 0, 0};
    for (auto& r : X)
      for (int j = 0; j < 3; ++j) s[j] = std::max(s[j], std::fabs(r[j]));
    for (auto& r : X)
      for (int j = 0; j < 3; ++j) r[j] /= s[j];
    double ys = 0;
    for (double v : y) ys = std::max(ys, v);
    for (double& v : y) v /= ys;
    std::vector<double> c = nnls(X, y);
    best.has_memory = true;
    best.static_bytes = c[0] / s[0] * ys;
    best.m0 = c[1] / s[1] * ys;
    best.m1 = c[2] / s[2] * ys;
  }
  for (const auto& [v, what] : {std::pair{best.power_p, "power p"},
                                {best.power_k, "power k"},
                                {best.static_bytes, "static bytes"},
                                {best.m0, "m0"},
                                {best.m1, "m1"}})
    check_finite(v, std::string("the calibration fit's ") + what);
  return best;
}

std::vector<Measurement> read_measurements(const std::string& path) {
  std::vector<Measurement> out;
  const std::string text = read_file(path);
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line);
    try {
      auto j = nlohmann::json::parse(s);
      // get<int64_t>() of a double outside int64's range is undefined behaviour: check first.
      auto count = [&](const char* key) {
        const nlohmann::json& v = j.at(key);
        if (v.is_number_float() && !(std::fabs(v.get<double>()) < 9e15))
          throw InputError(where, std::string("'") + key + "' is out of range");
        return v.get<int64_t>();
      };
      Measurement m;
      m.tokens = count("tokens");
      m.batch = count("batch");
      m.time_s = j.at("time_s").get<double>();
      m.peak_bytes = j.contains("peak_bytes") && !j["peak_bytes"].is_null()
                         ? j["peak_bytes"].get<double>()
                         : -1;
      m.held_out = j.contains("held_out") && j["held_out"].get<bool>();
      if (m.tokens <= 0 || m.batch <= 0 || !(m.time_s > 0))
        throw InputError(where, "tokens and batch must be positive and time_s > 0");
      out.push_back(m);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(
          where,
          std::string("expected {\"tokens\":S,\"batch\":B,\"time_s\":T,\"peak_bytes\":M}: ") +
              e.what());
    }
  }
  return out;
}

std::string profile_json(const CalibrationFit& f, const std::vector<Measurement>& points,
                         const std::string& model, const std::string& device,
                         const HeldOutErrors& held) {
  using json = nlohmann::json;
  json j;
  j["format"] = "adaptiveload-profile";
  j["version"] = 1;
  j["model"] = model;
  j["device"] = device;
  j["cost"] = {{"a", f.a},
               {"b", f.b},
               {"c0", f.c0},
               {"overhead_s", f.overhead_s},
               {"half_efficiency_tokens", f.half_efficiency_tokens}};
  if (f.pack_sample_s > 0) j["cost"]["pack_sample_s"] = f.pack_sample_s;
  if (f.has_memory) j["memory"] = {{"static_bytes", f.static_bytes}, {"m0", f.m0}, {"m1", f.m1}};
  j["fit"] = {{"points", f.points},
              {"median_rel_error", f.median_rel_error},
              {"max_rel_error", f.max_rel_error},
              {"power_p", f.power_p},
              {"power_k", f.power_k},
              {"power_median_rel_error", f.power_median_rel_error},
              {"power_max_rel_error", f.power_max_rel_error}};
  if (held.points) {
    j["fit"]["held_out_points"] = held.points;
    j["fit"]["held_out_median_rel_error"] = held.median_rel_error;
    j["fit"]["held_out_max_rel_error"] = held.max_rel_error;
  }
  j["points"] = json::array();
  for (const auto& p : points) {
    json q = {{"tokens", p.tokens}, {"batch", p.batch}, {"time_s", p.time_s}};
    if (p.peak_bytes >= 0) q["peak_bytes"] = p.peak_bytes;
    j["points"].push_back(q);
  }
  return j.dump(2);
}

}  // namespace adaptiveload
