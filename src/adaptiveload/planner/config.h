#pragma once
// The planner's configuration (PlannerConfig) and where its options are read and range-checked:
// the CLI and the Python sampler both come through resolve_options, so each message names the
// option and its range once.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "adaptiveload/plan/plan.h"
#include "adaptiveload/planner/option_ranges.h"

namespace adaptiveload {

enum class OversizePolicy { kError, kSkip };

struct PlannerConfig {
  std::string model = "wan2.1-1.3b";
  std::string device = "h200";
  std::string grid;                     // "" = the model preset's default_grid
  std::string cost_model = "analytic";  // analytic | power | profile
  std::string profile;                  // profile file (from `calibrate`)
  bool checkpointing = true;
  // "none" (DDP: every rank holds the full model state), "fsdp" (fully sharded over the
  // world size), or "auto": fsdp when the unsharded state would take over half the memory.
  std::string sharding = "auto";
  // Ranks the budgets are resolved for (FSDP sharding, the M_comp search). Keep it across an
  // elastic resume (Planner::resume takes the new world size): it is part of the fingerprint.
  int world_size = 8;
  uint64_t seed = 0;
  int64_t epoch = 0;              // default epoch of plan(); budgets are resolved on epoch 0
  int64_t mem_budget_tokens = 0;  // M_mem; 0 = the largest that fits device memory for every bucket
  double comp_budget = 0;         // M_comp in S^p units; 0 = auto (simulator search for `dual`)
  double p = 0;              // exponent of the compute constraint; 0 = fitted to the cost model
  double step_budget_s = 0;  // balanced: seconds per rank per step; 0 = auto
  std::string fixed_config;  // per-bucket batch sizes for `fixed`; "" = the grid's
  EndPolicy end_policy = EndPolicy::kPad;
  OversizePolicy oversize = OversizePolicy::kError;
  // Synchronisation of the training engine (plan/layout.h): "step" (DDP, ZeRO-1), "micro"
  // (FSDP, HSDP, ZeRO-2/3), or "auto": micro when the model state is sharded, else step.
  std::string sync = "auto";
  // micro mode: share of a slot's collectives that overlap its compute, 0..1 (FSDP2's
  // prefetching hides most of the all-gathers), and whether parameters are all-gathered again
  // in backward (FSDP2 reshard_after_forward, the default; ZeRO-3 likewise).
  double collective_overlap = 0.7;
  bool reshard_after_forward = true;
  // The global batch: "auto" (the step count a bucket loader of the same memory budget,
  // equal_tokens, gives on the configured world size), "steps:N" (N steps per epoch),
  // "samples:N" or "tokens:N" (per global step), or "free" (balanced picks its own step count).
  std::string global_batch = "auto";
  // Sequence parallelism (docs/planner.md): "auto" gives a sample that does not fit one GPU
  // the smallest allowed group of ranks it fits, and balanced then tries larger groups where
  // they shorten the simulated epoch; "min" keeps the smallest; "per-sample" tries groups
  // even when every sample fits one GPU; "off" plans every sample on one GPU (a sample that
  // does not fit is oversize); a number G: every sample on G ranks (one fixed group size, as
  // Open-Sora's sp_size). Strategies other than balanced run one g for all samples: the
  // largest any sample needs.
  std::string sp = "auto";
  // Allowed group sizes, powers of two; a size is used only where it divides the world size
  // and the model's heads (Ulysses splits heads) and is at most the device's node size.
  std::string sp_sizes = "1,2,4,8";
  // Packed micro-batches (docs/planner.md, "Packing"): "off" plans micro-batches of one bucket;
  // "on" lets balanced (and the greedy packer, greedy_pack) put samples of any buckets in one
  // micro-batch, a pack within the memory budget's tokens. The bucket loaders are unchanged.
  std::string packing = "off";
  // Ranks that are not alike (docs/planner.md, "Unequal ranks"; planner/ranks.h): a device
  // preset per rank, "h200:8,h100:8" in rank order or a list ("": every rank `device`), and
  // stated speed factors, "5=0.7,12=0.9" (""): none). Both empty: alike ranks, as before.
  std::string devices;
  std::string rank_speed;
};

enum class Sharding : uint8_t { kAuto, kNone, kFsdp };
// kAuto: groups for samples that do not fit one GPU, larger ones where balanced's simulation
// says they shorten the epoch; kMin: each such sample on the smallest group it fits;
// kPerSample: groups tried even where every sample fits one GPU; kOff: one GPU a sample;
// kFixed: every sample on PlanOptions::sp_group ranks.
enum class SpPolicy : uint8_t { kAuto, kMin, kPerSample, kOff, kFixed };
// The global batch: kAuto (a bucket loader's step count), kFree (each strategy's own),
// kSteps (N steps per epoch), kSamples / kTokens (N per global step).
enum class BatchForm : uint8_t { kAuto, kFree, kSteps, kSamples, kTokens };

// PlannerConfig's option words as types, read and range-checked once (resolve_options) where
// a configuration enters the core; below the Planner's constructor no option is compared as text.
struct PlanOptions {
  Sharding sharding = Sharding::kAuto;
  std::optional<SyncMode> sync;  // none: auto (micro when the model state is sharded)
  SpPolicy sp = SpPolicy::kAuto;
  int sp_group = 0;       // kFixed: the group size, a power of two; 0 otherwise
  uint32_t sp_sizes = 1;  // allowed group sizes, bit k: 2^k (with kOff: 1, one GPU a sample)
  BatchForm batch = BatchForm::kAuto;
  double batch_value = 0;  // N of kSteps, kSamples, kTokens
  bool packing = false;    // --packing on
};

// Range checks of the numeric options and the option words of `c`, each message naming the
// option; fills the grid from the model preset when it is empty. Throws ConfigError.
PlanOptions resolve_options(PlannerConfig& c);
// The policy in its option word: "auto", "min", "per-sample", "off", or the group size.
std::string sp_policy_text(const PlanOptions& o);
// "auto", "free", "steps:N", "samples:N" or "tokens:N" -> (form, N; 0 for auto and free).
std::pair<BatchForm, double> parse_global_batch(const std::string& v);
// "1,2,4,8" -> bit mask of allowed sequence-parallel group sizes (1 is always allowed).
uint32_t parse_sp_sizes(const std::string& v);
// "auto" | "min" | "off" | "per-sample" -> 0; "G" (a power of two) -> G.
int parse_sp(const std::string& v);

}  // namespace adaptiveload
