// Python bindings of the planner core (pybind11): PlannerConfig, Plan and Planner, with the
// resumable state as JSON, for adaptiveload.AdaptiveBatchSampler. The core stays torch-free;
// this file only converts between Python and core types. Manifest is bound in manifest_py.cpp,
// the strategy registry, the option ranges, the fits and the state functions in registry_py.cpp.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/planner/planner.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

namespace {

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

void bind_planner_config(pb::module_& m) {
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
}

void bind_plan(pb::module_& m) {
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
}

// Planner, part 1: its construction, settings and budgets, and what it makes of the manifest's
// rows (buckets, geometry, the rows it leaves out).
void def_planner_rows(pb::class_<Planner>& planner) {
  planner
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
          "(channels, frames, height, width) of the VAE latent of a manifest row at its bucket.");
}

// Planner, part 2: the cost model's prices of micro-batches and plans, and the plans themselves
// (plan, warnings, resume).
void def_planner_plans(pb::class_<Planner>& planner) {
  planner
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
}

}  // namespace

void bind_planner(pb::module_& m) {
  bind_planner_config(m);
  bind_plan(m);
  pb::class_<Planner> planner(m, "Planner");
  def_planner_rows(planner);
  def_planner_plans(planner);
}

}  // namespace py
}  // namespace adaptiveload
