// Python bindings of the planner core (pybind11): Manifest, PlannerConfig, Planner, Plan,
// the resumable state, the strategy registry (strategies()) and the option ranges
// (option_ranges()), for adaptiveload.AdaptiveBatchSampler. The core stays torch-free;
// this file only converts between Python and core types.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/manifest/cache_folder.h"
#include "adaptiveload/manifest/duplicates.h"
#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/planner/option_ranges.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

namespace {

BadRowPolicy bad_row_policy(bool skip) { return skip ? BadRowPolicy::kSkip : BadRowPolicy::kError; }

int64_t checked_row(const Manifest& m, int64_t row) {
  if (row < 0 || row >= m.total_rows())
    throw pb::index_error("row " + std::to_string(row) + " out of range (the manifest has " +
                          std::to_string(m.total_rows()) + " rows)");
  return row;
}

// Micro-batch range of (step, rank); IndexError naming what is out of range.
std::pair<uint64_t, uint64_t> checked_range(const Plan& p, size_t step, int rank) {
  if (step >= p.num_steps())
    throw pb::index_error("step " + std::to_string(step) + " out of range");
  if (rank < 0 || rank >= p.world_size)
    throw pb::index_error("rank " + std::to_string(rank) + " out of range");
  return p.rank_range(step, rank);
}

// One rank's micro-batches of one step as lists of row ids.
pb::list rank_step(const Plan& p, size_t step, int rank) {
  auto [first, last] = checked_range(p, step, rank);
  pb::list out;
  for (uint64_t m = first; m < last; ++m) {
    const MicroBatch& mb = p.micro_batches[m];
    pb::list ids;
    for (uint32_t k = 0; k < mb.count; ++k) ids.append(p.sample_ids[mb.begin + k]);
    out.append(std::move(ids));
  }
  return out;
}

// The shape of a micro-batch of these manifest rows (cost/shape.h): its samples by bucket, in
// the order the buckets first appear. It refers to the planner's buckets.
MicroShape rows_shape(const Planner& self, const std::vector<int64_t>& rows) {
  const auto& sb = self.bucketing().sample_bucket;
  MicroShape shape;
  for (int64_t row : rows) {
    if (row < 0 || size_t(row) >= sb.size())
      throw pb::index_error("row " + std::to_string(row) + " out of range");
    if (sb[size_t(row)] == kNoBucket)
      throw std::invalid_argument("manifest row " + std::to_string(row) + " fits no bucket");
    shape.add(self.bucketing().buckets[sb[size_t(row)]]);
  }
  return shape;
}

// The sequence-parallel costs of `world_size` ranks for a group of `group`: any power of two
// that divides the world size (the cost model's formula, not the planner's allowed sizes: a
// schedule made elsewhere may use groups the planner would not, e.g. more ranks than heads).
SeqParallel group_sp(const Planner& self, int group, int world_size) {
  const int W = world_size > 0 ? world_size : self.config().world_size;
  if (group < 1 || group > kMaxGroup || (group & (group - 1)) != 0 || W % group != 0)
    throw std::invalid_argument("group of " + std::to_string(group) + " ranks on " +
                                std::to_string(W) + ": a group is a power of two, at most " +
                                std::to_string(kMaxGroup) + ", that divides the world size");
  return group == 1 ? SeqParallel{} : self.sim_env(W).layout.sp;
}

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

}  // namespace

void bind_planner(pb::module_& m) {
  m.def(
      "musubi_text_file",
      [](const std::string& latent_path) {
        const size_t slash = latent_path.rfind('/');
        const std::string dir = slash == std::string::npos ? "" : latent_path.substr(0, slash + 1);
        MusubiName n;
        if (!parse_musubi_name(latent_path.substr(dir.size()), n))
          throw std::invalid_argument(latent_path + " is not a musubi-tuner latent file name " +
                                      "(<key>_<W>x<H>_<arch>.safetensors)");
        return dir + n.item_key + "_" + n.arch + "_te.safetensors";
      },
      pb::arg("latent_path"),
      "The text-encoder output file of a musubi-tuner latent file (manifest/cache_folder.h).");
  pb::class_<Manifest>(m, "Manifest")
      .def(pb::init<>())
      .def(
          "load",
          [](Manifest& self, const std::string& path, bool skip) {
            self.load(path, bad_row_policy(skip));
          },
          pb::arg("path"), pb::arg("skip_bad_rows") = false,
          "Appends the rows of a CSV or JSONL file.")
      .def(
          "add_rows",
          [](Manifest& self, const std::vector<std::string>& path,
             const std::vector<std::string>& num_frames, const std::vector<std::string>& height,
             const std::vector<std::string>& width, const std::vector<std::string>& fps,
             const std::string& source, bool skip, const std::vector<std::string>& caption) {
            const size_t n = path.size();
            if (num_frames.size() != n || height.size() != n || width.size() != n ||
                fps.size() != n || (!caption.empty() && caption.size() != n))
              throw std::invalid_argument("add_rows: columns have different lengths");
            for (size_t i = 0; i < n; ++i)
              self.add_row(path[i], num_frames[i], height[i], width[i], fps[i], source, int64_t(i),
                           bad_row_policy(skip), caption.empty() ? std::string() : caption[i]);
          },
          pb::arg("path"), pb::arg("num_frames"), pb::arg("height"), pb::arg("width"),
          pb::arg("fps"), pb::arg("source"), pb::arg("skip_bad_rows") = false,
          pb::arg("caption") = std::vector<std::string>{},
          "Appends rows given as string columns (empty fps = image); `source` names them in "
          "errors, "
          "the 'line' of a row is its 0-based index.")
      .def_property_readonly("total_rows", &Manifest::total_rows)
      .def(
          "path",
          [](const Manifest& self, int64_t row) {
            return std::string(self.path(checked_row(self, row)));
          },
          pb::arg("row"), "The row's path as the manifest gives it.")
      .def(
          "caption",
          [](const Manifest& self, int64_t row) {
            return std::string(self.caption(checked_row(self, row)));
          },
          pb::arg("row"),
          "The row's caption (its `caption` or `text` column), '' when it has none.")
      .def_property_readonly("has_captions", &Manifest::has_captions)
      .def(
          "clip",
          [](const Manifest& self, int64_t row) {
            const ClipInfo c = self.clip(checked_row(self, row));
            return pb::make_tuple(c.num_frames, c.height, c.width, c.fps);
          },
          pb::arg("row"),
          "(num_frames, height, width, fps) of the row (zeros for a bad row; fps 0 for an image).")
      .def(
          "where",
          [](const Manifest& self, int64_t row) { return self.where(checked_row(self, row)); },
          pb::arg("row"), "'file:line' of the row, for messages.")
      .def("usable",
           [](const Manifest& self, int64_t row) {
             if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
             return self.usable(row);
           })
      .def(
          "fixed",
          [](const Manifest& self, int64_t row) {
            if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
            return self.fixed(row);
          },
          pb::arg("row"), "Whether the row is a latent cache's (its shape is its bucket).")
      .def(
          "row_path",
          [](const Manifest& self, int64_t row) {
            if (row < 0 || row >= self.total_rows()) throw pb::index_error("row out of range");
            return std::string(self.path(row));
          },
          pb::arg("row"), "The row's path as its manifest gives it.")
      .def_property_readonly("bad_rows", [](const Manifest& self) {
        std::vector<std::string> out;
        for (const BadRow& b : self.bad_rows()) out.push_back(b.message());
        return out;
      });

  pb::class_<PlannerConfig>(m, "PlannerConfig")
      .def(pb::init<>())
      .def_readwrite("model", &PlannerConfig::model)
      .def_readwrite("device", &PlannerConfig::device)
      .def_readwrite("grid", &PlannerConfig::grid)
      .def_readwrite("cost_model", &PlannerConfig::cost_model)
      .def_readwrite("profile", &PlannerConfig::profile)
      .def_readwrite("checkpointing", &PlannerConfig::checkpointing)
      .def_readwrite("world_size", &PlannerConfig::world_size)
      .def_readwrite("seed", &PlannerConfig::seed)
      .def_readwrite("epoch", &PlannerConfig::epoch)
      .def_readwrite("mem_budget_tokens", &PlannerConfig::mem_budget_tokens)
      .def_readwrite("comp_budget", &PlannerConfig::comp_budget)
      .def_readwrite("p", &PlannerConfig::p)
      .def_readwrite("step_budget_s", &PlannerConfig::step_budget_s)
      .def_readwrite("fixed_config", &PlannerConfig::fixed_config)
      .def_readwrite("sharding", &PlannerConfig::sharding)
      .def_readwrite("sync", &PlannerConfig::sync)
      .def_readwrite("sp", &PlannerConfig::sp)
      .def_readwrite("sp_sizes", &PlannerConfig::sp_sizes)
      .def_readwrite("packing", &PlannerConfig::packing)
      .def_readwrite("devices", &PlannerConfig::devices)
      .def_readwrite("rank_speed", &PlannerConfig::rank_speed)
      .def_readwrite("global_batch", &PlannerConfig::global_batch)
      .def_readwrite("collective_overlap", &PlannerConfig::collective_overlap)
      .def_readwrite("reshard_after_forward", &PlannerConfig::reshard_after_forward)
      .def_property(
          "end_policy",
          [](const PlannerConfig& c) { return c.end_policy == EndPolicy::kDrop ? "drop" : "pad"; },
          [](PlannerConfig& c, const std::string& v) {
            if (v != "pad" && v != "drop")
              throw std::invalid_argument("end_policy must be 'pad' or 'drop', got '" + v + "'");
            c.end_policy = v == "drop" ? EndPolicy::kDrop : EndPolicy::kPad;
          })
      .def_property(
          "oversize",
          [](const PlannerConfig& c) {
            return c.oversize == OversizePolicy::kSkip ? "skip" : "error";
          },
          [](PlannerConfig& c, const std::string& v) {
            if (v != "error" && v != "skip")
              throw std::invalid_argument("on_oversize must be 'error' or 'skip', got '" + v + "'");
            c.oversize = v == "skip" ? OversizePolicy::kSkip : OversizePolicy::kError;
          });

  pb::class_<Plan>(m, "Plan")
      .def_property_readonly("num_steps", &Plan::num_steps)
      .def_readonly("world_size", &Plan::world_size)
      .def_readonly("strategy", &Plan::strategy)
      .def_readonly("padded_samples", &Plan::padded_samples)
      .def_property_readonly("sync", [](const Plan& p) { return std::string(sync_name(p.sync)); })
      .def_property_readonly("dropped",
                             [](const Plan& p) { return std::vector<uint32_t>(p.dropped); })
      .def("rank_step", &rank_step, pb::arg("step"), pb::arg("rank"),
           "Micro-batches (lists of row ids) of `rank` in global step `step`.")
      .def(
          "rank_step_padded",
          [](const Plan& p, size_t step, int rank) {
            auto [first, last] = checked_range(p, step, rank);
            std::vector<bool> out;
            for (uint64_t m = first; m < last; ++m) out.push_back(p.micro_batches[m].padded != 0);
            return out;
          },
          pb::arg("step"), pb::arg("rank"),
          "Per micro-batch of rank_step(step, rank): True when it repeats earlier samples "
          "(end-of-epoch padding, to keep ranks in lockstep); a trainer may skip or down-weight "
          "those.")
      .def(
          "rank_step_groups",
          [](const Plan& p, size_t step, int rank) {
            auto [first, last] = checked_range(p, step, rank);
            std::vector<int> out;
            for (uint64_t m = first; m < last; ++m) out.push_back(p.group(m));
            return out;
          },
          pb::arg("step"), pb::arg("rank"),
          "Per micro-batch of rank_step(step, rank): the size g of its sequence-parallel group, "
          "the aligned block of ranks [rank - rank % g, rank - rank % g + g) (1: this rank alone).")
      .def_property_readonly("has_groups", [](const Plan& p) { return !p.mb_group.empty(); })
      .def(
          "rank_counts",
          [](const Plan& p, int rank) {
            if (rank < 0 || rank >= p.world_size) throw pb::index_error("rank out of range");
            std::vector<uint64_t> out(p.num_steps());
            for (size_t t = 0; t < p.num_steps(); ++t) {
              auto [a, b] = p.rank_range(t, rank);
              out[t] = b - a;
            }
            return out;
          },
          pb::arg("rank"), "Number of micro-batches of `rank` in every step.")
      .def(
          "step_info",
          [](const Plan& p, size_t step) {
            if (step >= p.num_steps()) throw pb::index_error("step out of range");
            const StepInfo& s = p.steps[step];
            return pb::make_tuple(s.samples, s.tokens, s.padded);
          },
          pb::arg("step"), "(samples, tokens, padded) of a global step over all ranks.");

  pb::class_<Planner>(m, "Planner")
      .def(pb::init<const Manifest&, const PlannerConfig&>(), pb::arg("manifest"),
           pb::arg("config"), pb::keep_alive<1, 2>(), pb::call_guard<pb::gil_scoped_release>())
      .def_property_readonly("fingerprint", &Planner::fingerprint)
      .def_property_readonly("mem_budget_tokens", &Planner::mem_budget_tokens)
      .def_property_readonly("comp_budget", &Planner::comp_budget)
      .def_property_readonly("p", &Planner::p)
      .def_property_readonly("step_budget_s", &Planner::step_budget_s)
      .def_property_readonly(
          "sync", [](const Planner& self) { return std::string(sync_name(self.sync())); })
      .def_property_readonly("sharded", &Planner::sharded)
      .def_property_readonly("global_batch", &Planner::global_batch_text)
      .def_property_readonly("max_group", &Planner::max_group)
      .def(
          "allowed_groups",
          [](const Planner& self, int world_size) {
            std::vector<int> out;
            const SeqParallel sp = self.seq_parallel(world_size);
            for (int g = 1; g <= kMaxGroup; g *= 2)
              if (sp.allows(g)) out.push_back(g);
            return out;
          },
          pb::arg("world_size"), "Sequence-parallel group sizes usable on world_size ranks.")
      .def(
          "slot_comm_s",
          [](const Planner& self, int world_size) {
            return self.sim_env(world_size).layout.slot_comm_s;
          },
          pb::arg("world_size"),
          "micro sync: modelled collectives of one micro-batch slot, seconds (0 in step sync).")
      .def("step_fixed_s", &Planner::step_fixed_s, pb::arg("world_size") = 0,
           "Seconds every global step spends once beside its micro-batches and collectives on "
           "world_size ranks "
           "(the optimizer step, from a calibrated profile's \"step\", over W when sharded; 0 "
           "without one).")
      .def_property_readonly("num_oversize",
                             [](const Planner& self) { return self.oversize().size(); })
      .def(
          "planned_rows",
          [](const Planner& self) {
            // The sample pool: rows with a bucket that are not oversize, ascending.
            std::vector<uint8_t> over(self.bucketing().sample_bucket.size(), 0);
            for (const OversizeSample& o : self.oversize()) over[size_t(o.row)] = 1;
            std::vector<int64_t> rows;
            const auto& sb = self.bucketing().sample_bucket;
            for (size_t r = 0; r < sb.size(); ++r)
              if (sb[r] != kNoBucket && !over[r]) rows.push_back(int64_t(r));
            return rows;
          },
          "Manifest rows the planner schedules each epoch (usable, fit a bucket, not oversize).")
      .def_property_readonly("left_out",
                             [](const Planner& self) {
                               // Rows that fit no bucket or are oversize (skipped), with the
                               // reason.
                               std::vector<std::pair<int64_t, std::string>> out;
                               for (const UnfitRow& u : self.bucketing().unfit)
                                 out.emplace_back(u.row, u.reason);
                               for (const OversizeSample& o : self.oversize())
                                 out.emplace_back(o.row, o.message);
                               return out;
                             })
      .def(
          "row_geometry",
          [](const Planner& self, int64_t row) {
            const auto& sb = self.bucketing().sample_bucket;
            if (row < 0 || size_t(row) >= sb.size()) throw pb::index_error("row out of range");
            if (sb[size_t(row)] == kNoBucket)
              throw std::invalid_argument("manifest row " + std::to_string(row) +
                                          " fits no bucket");
            const Bucket& b = self.bucketing().buckets[sb[size_t(row)]];
            return pb::make_tuple(b.frames, b.height, b.width, b.tokens);
          },
          pb::arg("row"), "(frames, height, width, tokens) of the bucket a manifest row trains at.")
      .def(
          "latent_shape",
          [](const Planner& self, int64_t row) {
            const auto& sb = self.bucketing().sample_bucket;
            if (row < 0 || size_t(row) >= sb.size()) throw pb::index_error("row out of range");
            if (sb[size_t(row)] == kNoBucket)
              throw std::invalid_argument("manifest row " + std::to_string(row) +
                                          " fits no bucket");
            const auto s = latent_shape(self.bucketing().buckets[sb[size_t(row)]], self.model());
            return pb::make_tuple(s[0], s[1], s[2], s[3]);
          },
          pb::arg("row"),
          "(channels, frames, height, width) of the VAE latent of a manifest row at its bucket.")
      .def(
          "micro_batch_shape",
          [](const Planner& self, const std::vector<int64_t>& rows) {
            const MicroShape shape = rows_shape(self, rows);
            pb::list out;
            for (const ShapePart& p : shape.parts())
              out.append(pb::make_tuple(p.bucket->tokens, p.count));
            return out;
          },
          pb::arg("rows"),
          "[(tokens, samples), ...]: the micro-batch of these manifest rows by bucket (one entry "
          "when "
          "every row is of one bucket, several for a pack), as the cost model and fit_observations "
          "take it.")
      .def(
          "rank_times",
          [](const Planner& self, const Plan& plan) {
            // The simulator's per-(step, rank) compute seconds, [steps][W].
            std::vector<double> flat = rank_times(plan, self.sim_env(plan.world_size));
            std::vector<std::vector<double>> out(plan.num_steps());
            for (size_t t = 0; t < out.size(); ++t)
              out[t].assign(flat.begin() + int64_t(t) * plan.world_size,
                            flat.begin() + int64_t(t + 1) * plan.world_size);
            return out;
          },
          pb::arg("plan"),
          "Predicted compute seconds of every rank in every step, [steps][world_size].")
      .def(
          "micro_batch_seconds",
          [](const Planner& self, const std::vector<int64_t>& rows, int group, int world_size) {
            // The simulator's price of a micro-batch (sim/metrics.cpp): group_cost of its shape.
            return group_cost(self.cost(), rows_shape(self, rows), group,
                              group_sp(self, group, world_size));
          },
          pb::arg("rows"), pb::arg("group") = 1, pb::arg("world_size") = 0,
          "Seconds of one micro-batch of these manifest rows (one varlen pack when they are of "
          "several "
          "buckets) on each rank of a sequence-parallel group of `group` ranks of `world_size` (0: "
          "the "
          "config's; any power of two dividing it, Ulysses all-to-alls priced), as the simulator "
          "prices the planner's own micro-batches; 0 for no rows.")
      .def(
          "micro_batch_work",
          [](const Planner& self, const std::vector<int64_t>& rows, int group, int world_size) {
            return group_work(self.cost(), rows_shape(self, rows), group,
                              group_sp(self, group, world_size));
          },
          pb::arg("rows"), pb::arg("group") = 1, pb::arg("world_size") = 0,
          "Its work at full efficiency (micro_batch_seconds less the overhead, the small-batch "
          "ramp and a pack's cost per sample): "
          "what the table's `useful` and `fixed` columns count.")
      .def_property_readonly("cost_overhead_s",
                             [](const Planner& self) { return self.cost().overhead_s; })
      .def_property_readonly("cost_pack_sample_s",
                             [](const Planner& self) { return self.cost().pack_sample_s; })
      .def_property_readonly("cost_half_efficiency_tokens",
                             [](const Planner& self) { return self.cost().half_efficiency_tokens; })
      .def(
          "allreduce_s",
          [](const Planner& self, int world_size) { return self.sim_env(world_size).allreduce_s; },
          pb::arg("world_size"), "Modelled gradient all-reduce seconds per step.")
      .def("plan", &Planner::plan, pb::arg("strategy"), pb::arg("world_size") = 0,
           pb::arg("epoch") = -1, pb::call_guard<pb::gil_scoped_release>())
      .def("warnings", &Planner::warnings, pb::arg("plan"),
           "The targets a full-epoch plan misses (global batch, step mix), one sentence each.")
      .def("drop_warning", &Planner::drop_warning, pb::arg("plan"),
           "The sentence for a plan that drops more than 1% of the planned samples at the epoch's "
           "end "
           "(drop_last=True; the CLI's warning, in Python's words), '' otherwise.")
      .def("target_steps", &Planner::target_steps, pb::arg("world_size") = 0,
           "Global steps the global batch asks for (0: free).")
      .def(
          "initial_state",
          [](const Planner& self, const std::string& strategy, int world_size, int64_t epoch) {
            return state_to_json(self.initial_state(strategy, world_size, epoch));
          },
          pb::arg("strategy"), pb::arg("world_size") = 0, pb::arg("epoch") = -1,
          "State JSON at the start of an epoch.")
      .def(
          "resume",
          [](const Planner& self, const std::string& state_json, int world_size,
             const std::string& new_cost, const std::vector<double>& new_speeds) {
            PlanState st = state_from_json(state_json);
            Planner::Resumed r;
            {
              pb::gil_scoped_release release;
              r = self.resume(st, world_size, new_cost, new_speeds);
            }
            return pb::make_tuple(std::move(r.plan), r.first_step, state_to_json(r.state));
          },
          pb::arg("state_json"), pb::arg("world_size"), pb::arg("new_cost") = "",
          pb::arg("new_speeds") = std::vector<double>{},
          "(plan, first_step, state_json): the plan that continues `state` on `world_size` ranks; "
          "with "
          "`new_cost` (a cost object from fit_observations) and / or `new_speeds` (learned speed "
          "factors, "
          "one per rank, learn_rank_speeds), the rest of the epoch is re-planned with them.")
      .def("configured_speeds", &Planner::configured_speeds, pb::arg("world_size") = 0,
           "Each rank's configured speed (devices=, rank_speeds=), 1 for alike ranks.");

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

}  // namespace py
}  // namespace adaptiveload
