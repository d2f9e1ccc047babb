// Python bindings of the core's module-level functions (pybind11): the strategy registry
// (strategies()) and the option ranges (option_ranges()), the duplicate policy, the cost-model
// fits (fit_profile, fit_observations, observation_time) and the resumable state
// (parse_state, dump_state). Split from planner_py.cpp; module.cpp registers it after the
// planner's classes, whose names its docstrings use.
#include <torch/extension.h>

#include <string>
#include <utility>
#include <vector>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/manifest/duplicates.h"
#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/planner/option_ranges.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

namespace {

// One micro-batch as Python gives it: (tokens, batch), or for a pack a list of (tokens, batch)
// parts.
ObservedMicroBatch observed_micro_batch(const pb::handle& mb) {
  const pb::sequence seq = pb::reinterpret_borrow<pb::sequence>(mb);
  if (seq.size() == 2 && pb::isinstance<pb::int_>(seq[0]))
    return {seq[0].cast<int64_t>(), seq[1].cast<int64_t>()};
  return ObservedMicroBatch(mb.cast<std::vector<std::pair<int64_t, int64_t>>>());
}

pb::dict state_to_dict(const PlanState& s) {
  pb::dict d;
  d["version"] = s.version;
  d["strategy"] = s.strategy;
  d["fingerprint"] = s.fingerprint;
  d["seed"] = s.seed;
  d["epoch"] = s.epoch;
  d["sync"] = std::string(sync_name(s.sync));
  d["layout"] = s.layout;
  pb::list segs;
  // (world_size, steps_done, cost): cost "" unless online adaptation set one.
  pb::list speeds;  // per segment its learned speed factors, [] where none
  for (size_t i = 0; i < s.segments.size(); ++i) {
    segs.append(pb::make_tuple(s.segments[i].first, s.segments[i].second, s.cost_of(i)));
    speeds.append(pb::cast(s.speeds_of(i)));
  }
  d["segments"] = segs;
  d["speeds"] = speeds;
  return d;
}

// The fits of the cost and memory models to measurements, and the fitted model's price.
void bind_calibration(pb::module_& m) {
  m.def(
      "fit_profile",
      [](const std::vector<pb::dict>& points, const std::string& model, const std::string& device,
         const std::vector<pb::dict>& held_out) {
        auto measurements = [](const std::vector<pb::dict>& dicts) {
          std::vector<Measurement> pts;
          for (const pb::dict& d : dicts) {
            Measurement x;
            x.tokens = d["tokens"].cast<int64_t>();
            x.batch = d["batch"].cast<int64_t>();
            x.time_s = d["time_s"].cast<double>();
            x.peak_bytes = d.contains("peak_bytes") && !d["peak_bytes"].is_none()
                               ? d["peak_bytes"].cast<double>()
                               : -1;
            pts.push_back(x);
          }
          return pts;
        };
        const std::vector<Measurement> pts = measurements(points);
        CalibrationFit f = fit_calibration(pts);
        const HeldOutErrors h = held_out_errors(f, measurements(held_out));
        pb::dict s;
        s["points"] = f.points, s["a"] = f.a, s["b"] = f.b, s["c0"] = f.c0,
        s["overhead_s"] = f.overhead_s;
        s["half_efficiency_tokens"] = f.half_efficiency_tokens;
        s["median_rel_error"] = f.median_rel_error, s["max_rel_error"] = f.max_rel_error;
        s["power_p"] = f.power_p, s["power_k"] = f.power_k;
        s["power_median_rel_error"] = f.power_median_rel_error,
        s["power_max_rel_error"] = f.power_max_rel_error;
        s["has_memory"] = f.has_memory, s["static_bytes"] = f.static_bytes, s["m0"] = f.m0,
        s["m1"] = f.m1;
        s["held_out_points"] = h.points, s["held_out_median_rel_error"] = h.median_rel_error;
        s["held_out_max_rel_error"] = h.max_rel_error;
        return pb::make_tuple(profile_json(f, pts, model, device, h), s);
      },
      pb::arg("points"), pb::arg("model"), pb::arg("device"),
      pb::arg("held_out") = std::vector<pb::dict>{},
      "Fits the cost and memory models to measurements [{tokens, batch, time_s, peak_bytes}] and "
      "returns "
      "(profile_json, summary); `held_out` measurements are not fitted: the summary's "
      "held_out_median_rel_error "
      "and held_out_max_rel_error are the fit's errors on them (0 points: both 0).");
  m.def(
      "fit_observations",
      [](const pb::list& observations, double overhead_s, double half_efficiency_tokens,
         double pack_sample_s) {
        // Each observation is (micro-batches, seconds); a micro-batch is (tokens, batch), or
        // for a pack a list of (tokens, batch) parts.
        std::vector<Observation> obs;
        for (const pb::handle& h : observations) {
          const auto [mbs, t] = h.cast<std::pair<pb::sequence, double>>();
          Observation o;
          o.time_s = t;
          for (const pb::handle& mb : mbs) o.micro_batches.push_back(observed_micro_batch(mb));
          obs.push_back(std::move(o));
        }
        CalibrationFit f = fit_observations(obs, overhead_s, half_efficiency_tokens, pack_sample_s);
        pb::dict s;
        s["points"] = f.points, s["a"] = f.a, s["b"] = f.b, s["c0"] = f.c0,
        s["overhead_s"] = f.overhead_s;
        s["half_efficiency_tokens"] = f.half_efficiency_tokens,
        s["pack_sample_s"] = f.pack_sample_s;
        s["median_rel_error"] = f.median_rel_error, s["max_rel_error"] = f.max_rel_error;
        return pb::make_tuple(cost_json(f), s);
      },
      pb::arg("observations"), pb::arg("overhead_s") = -1.0,
      pb::arg("half_efficiency_tokens") = -1.0, pb::arg("pack_sample_s") = -1.0,
      "Fits the cost model (overhead, half-efficiency tokens and the seconds per sample of a pack "
      "kept when given "
      ">= 0; the last is fitted only where some micro-batch is a pack) to [([(tokens, batch), "
      "...], seconds), ...] "
      "(one rank's step each; a packed micro-batch is a list of (tokens, batch) parts) and returns "
      "(cost_json, summary) for Planner.resume(..., new_cost=cost_json).");
  m.def(
      "observation_time",
      [](const pb::dict& cost, const pb::sequence& micro_batches) {
        CalibrationFit f;
        f.a = cost["a"].cast<double>(), f.b = cost["b"].cast<double>(),
        f.c0 = cost["c0"].cast<double>();
        f.overhead_s = cost["overhead_s"].cast<double>();
        f.half_efficiency_tokens = cost["half_efficiency_tokens"].cast<double>();
        if (cost.contains("pack_sample_s")) f.pack_sample_s = cost["pack_sample_s"].cast<double>();
        Observation o;
        for (const pb::handle& mb : micro_batches)
          o.micro_batches.push_back(observed_micro_batch(mb));
        return observation_time(f, o);
      },
      pb::arg("cost"), pb::arg("micro_batches"),
      "The cost model's seconds for micro-batches run one after another: `cost` has a, b, c0, "
      "overhead_s "
      "and half_efficiency_tokens, and pack_sample_s where the fit gave one (a profile's or "
      "fit_observations' "
      "cost object); each micro-batch is (tokens, batch) or, for a pack, a list of (tokens, batch) "
      "parts, priced "
      "overhead + sum_i B_i t(S_i) (1 + N_half / N) + n pack_sample_s (n its samples).");
}

// The resumable state: the core's JSON to a dict and fields to the JSON.
void bind_state(pb::module_& m) {
  m.def(
      "parse_state", [](const std::string& text) { return state_to_dict(state_from_json(text)); },
      pb::arg("state_json"),
      "Validates a state JSON and returns it as a dict (ValueError if corrupt).");
  m.def(
      "dump_state",
      [](const std::string& strategy, uint64_t fingerprint, uint64_t seed, int64_t epoch,
         const pb::list& segments, const std::string& sync, int layout,
         const std::vector<std::vector<double>>& speeds) {
        PlanState s;
        if (!parse_sync(sync, s.sync))
          throw std::invalid_argument("sync must be " + sync_names("'"));
        if (layout < 1 || layout > PlanState::kLayout)
          throw std::invalid_argument("layout must be 1 to " + std::to_string(PlanState::kLayout));
        s.layout = layout;
        s.strategy = strategy, s.fingerprint = fingerprint, s.seed = seed, s.epoch = epoch;
        bool any_cost = false, any_speeds = false;
        for (const pb::handle& h : segments) {
          pb::tuple t = pb::tuple(pb::reinterpret_borrow<pb::object>(h));
          if (t.size() != 2 && t.size() != 3)
            throw std::invalid_argument("a segment is (world_size, steps[, cost])");
          s.segments.emplace_back(t[0].cast<int>(), t[1].cast<int64_t>());
          std::string cost = t.size() == 3 ? t[2].cast<std::string>() : "";
          any_cost = any_cost || !cost.empty();
          s.segment_costs.push_back(cost.empty() ? cost : canonical_cost_json(cost));
        }
        if (!speeds.empty() && speeds.size() != s.segments.size())
          throw std::invalid_argument("speeds are one list per segment");
        for (const auto& f : speeds) {
          s.segment_speeds.push_back(canonical_speeds(f));
          any_speeds = any_speeds || !s.segment_speeds.back().empty();
        }
        if (!any_cost) s.segment_costs.clear();
        if (!any_speeds) s.segment_speeds.clear();
        for (size_t i = 0; i < s.segment_speeds.size(); ++i)
          if (!s.segment_speeds[i].empty() &&
              s.segment_speeds[i].size() != size_t(s.segments[i].first))
            throw std::invalid_argument(
                "a segment's speeds are one factor per rank of its world size");
        return state_to_json(s);
      },
      pb::arg("strategy"), pb::arg("fingerprint"), pb::arg("seed"), pb::arg("epoch"),
      pb::arg("segments"), pb::arg("sync") = "step", pb::arg("layout") = int(PlanState::kLayout),
      pb::arg("speeds") = std::vector<std::vector<double>>{},
      "The core's state JSON for these fields (layout: as parse_state gives it; 1 for a state "
      "saved before "
      "the evened layouts; speeds: per segment its learned speed factors, [] where none).");
}

}  // namespace

void bind_registry(pb::module_& m) {
  // The registry and the option ranges, for the Python side's checks and messages: one list
  // in the core (strategy/strategy_registry.cpp, planner/option_ranges.cpp), read here.
  m.def(
      "strategies",
      [] {
        pb::list out;
        for (const StrategyEntry& s : strategies()) {
          pb::dict d;
          d["name"] = s.name;
          d["summary"] = s.summary;
          std::vector<std::string> modes;
          for (const SyncModeName& mode : kSyncModes)
            if (s.serves(mode.mode)) modes.push_back(mode.name);
          d["sync_modes"] = modes;
          d["mixes_groups"] = s.mixes_groups();
          d["needs_fixed_batch"] = s.needs_fixed_batch();
          d["baseline"] = s.baseline();
          d["packs"] = s.packs();
          d["packs_when_asked"] = s.packs_when_asked();
          out.append(std::move(d));
        }
        return out;
      },
      "The registered strategies in registry order, one dict each: name, summary, sync_modes (the "
      "sync modes it plans for, of 'step' and 'micro'), mixes_groups (plans sequence-parallel "
      "group sizes per sample), needs_fixed_batch (needs per-bucket batch sizes) and baseline "
      "(the strategy speedups are measured against).");
  m.def(
      "option_ranges",
      [] {
        pb::dict out;
        for (const OptionRange& r : option_ranges()) {
          pb::dict d;
          d["option"] = r.option;
          d["python"] = *r.python ? pb::object(pb::str(r.python)) : pb::object(pb::none());
          switch (r.kind) {
            case OptionRange::Kind::kInteger:
              d["kind"] = "integer", d["min"] = r.int_lo, d["max"] = r.int_hi,
              d["min_open"] = false;
              break;
            case OptionRange::Kind::kReal:
              d["kind"] = "real", d["min"] = r.lo, d["max"] = r.hi, d["min_open"] = r.lo_open;
              break;
            case OptionRange::Kind::kChoice:
              d["kind"] = "choice", d["choices"] = r.choices;
              break;
            case OptionRange::Kind::kText:
              d["kind"] = "text";
              break;
          }
          d["zero_is_auto"] = r.zero_is_auto;
          out[pb::str(r.name)] = std::move(d);
        }
        return out;
      },
      "The planner's options by PlannerConfig field: {'option': CLI flag, 'python': the sampler's "
      "argument (None: the planner's only), 'kind': 'integer' | 'real' | 'choice' | 'text', 'min', "
      "'max' (inclusive; 'min_open': min excluded), or 'choices' (in the "
      "CLI's order), 'zero_is_auto' (0 means auto)}.");
  m.def(
      "apply_duplicate_policy",
      [](Manifest& manifest, const std::string& policy) {
        const DuplicatePolicy p = parse_duplicate_policy(policy);
        return duplicate_report(manifest, apply_duplicate_policy(manifest, p), p);
      },
      pb::arg("manifest"), pb::arg("policy"),
      "Finds rows that repeat an earlier row's path and applies 'warn', 'skip' or 'error' "
      "(ValueError); "
      "returns the report ('' when there are none).");
  bind_calibration(m);
  bind_state(m);
}

}  // namespace py
}  // namespace adaptiveload
