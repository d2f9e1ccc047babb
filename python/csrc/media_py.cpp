// Python bindings of the data path's core rules (geometry/sample_geometry.h): which source
// frames, which resize and which crop give a manifest row its planned shape. The Python
// dataset (adaptiveload.media) decodes what this says and computes none of it itself. And the
// loader check (sim/loader_check.h): whether a plan's loader keeps up with its training.
#include <torch/extension.h>

#include <string>

#include "adaptiveload/geometry/sample_geometry.h"
#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/sim/loader_check.h"

namespace adaptiveload {
namespace py {
namespace pb = pybind11;

namespace {

// Why a row has no bucket, in the planner's words (its left-out reason), for the error.
std::string why_no_bucket(const Planner& planner, const Manifest& manifest, int64_t row) {
  if (!manifest.usable(row))
    return manifest.skipped_duplicate(row) ? "left out as a repeat of an earlier path"
                                           : "a bad manifest row";
  for (const UnfitRow& u : planner.bucketing().unfit)
    if (u.row == row) return u.reason;
  return "it fits no bucket";
}

pb::dict geometry_dict(const Planner& planner, const Manifest& manifest, int64_t row,
                       int64_t epoch) {
  const auto& sb = planner.bucketing().sample_bucket;
  if (sb.size() != size_t(manifest.total_rows()))
    throw std::invalid_argument("sample_geometry: the manifest has " +
                                std::to_string(manifest.total_rows()) +
                                " rows but the planner was made from " + std::to_string(sb.size()) +
                                ": pass the manifest the planner was made from");
  if (row < 0 || row >= manifest.total_rows())
    throw pb::index_error("sample_geometry: row " + std::to_string(row) +
                          " out of range (the manifest has " +
                          std::to_string(manifest.total_rows()) + " rows)");
  if (sb[size_t(row)] == kNoBucket)
    throw std::invalid_argument("sample_geometry: manifest row " + std::to_string(row) + " (" +
                                manifest.where(row) +
                                ") has no planned shape: " + why_no_bucket(planner, manifest, row));
  const Bucket& b = planner.bucketing().buckets[sb[size_t(row)]];
  const uint64_t ep = uint64_t(epoch < 0 ? planner.config().epoch : epoch);
  const SampleGeometry g =
      sample_geometry(manifest.clip(row), b, planner.grid().fps, planner.config().seed, ep, row);
  pb::dict d;
  d["frames"] = g.frames;
  d["resize"] = pb::make_tuple(g.resize_h, g.resize_w);
  d["crop"] = pb::make_tuple(g.crop_top, g.crop_left, g.height, g.width);
  d["shape"] = pb::make_tuple(b.frames, b.height, b.width);
  d["bucket"] = b.name();
  return d;
}

pb::dict loader_check_dict(const Planner& planner, const Plan& plan, const std::string& profile,
                           int workers) {
  const LoaderProfile lp = read_loader_profile(profile);
  const LoaderCheck c = check_loader(plan, planner.sim_env(plan.world_size), lp, workers);
  pb::dict d;
  d["workers"] = c.workers;
  d["keeps_up"] = c.keeps_up();
  d["max_load_train_ratio"] = c.max_ratio;
  d["slow_rank_steps"] = c.slow_rank_steps;
  d["rank_steps"] = c.rank_steps;
  d["worst"] = pb::dict(pb::arg("step") = c.worst_step, pb::arg("rank") = c.worst_rank,
                        pb::arg("load_s") = c.worst_load_s, pb::arg("train_s") = c.worst_train_s);
  d["load_s_max_rank"] = c.load_s_max_rank;
  d["source"] = lp.source;
  const std::string w = loader_warning(plan.strategy, c, lp, "loader_workers");
  d["warning"] = w.empty() ? pb::object(pb::none()) : pb::object(pb::str(w));
  return d;
}

}  // namespace

void bind_media(pb::module_& m) {
  m.def(
      "loader_check", &loader_check_dict, pb::arg("planner"), pb::arg("plan"), pb::arg("profile"),
      pb::arg("workers"),
      "Whether the plan's DataLoader workers keep up (sim/loader_check.h): a loader profile's "
      "seconds per sample priced over each rank's share of each step, over `workers` workers, "
      "against the rank's simulated compute. A dict: workers, keeps_up, max_load_train_ratio, "
      "slow_rank_steps, rank_steps, worst {step, rank, load_s, train_s}, load_s_max_rank, source, "
      "warning (None when it keeps up).");
  m.def("sample_geometry", &geometry_dict, pb::arg("planner"), pb::arg("manifest"), pb::arg("row"),
        pb::arg("epoch") = -1,
        "The planner's rule for one manifest row (geometry/sample_geometry.h): a dict with "
        "'frames' (the "
        "source frame indices to decode, F' of them: the clip resampled to the grid's fps, a "
        "window of F' grid "
        "frames whose start is drawn per (seed, epoch, row); [0] for an image), 'resize' ((h, w): "
        "the frame "
        "resized with its aspect kept, no upscaling), 'crop' ((top, left, H', W') in the resized "
        "frame), "
        "'shape' ((F', H', W'): the bucket) and 'bucket' (its name). epoch -1: the planner's "
        "configured epoch. "
        "ValueError for a row with no planned shape, naming it and why.");
}

}  // namespace py
}  // namespace adaptiveload
