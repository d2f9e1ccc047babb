"""Real sharded training runs: examples/train_dit.py under torchrun (gloo, CPU) with FSDP2
(`fully_shard`, the sampler's `micro` sync mode) and with DDP + no_sync (`step` mode), 2 and 4
processes, over a whole epoch of a real manifest subset (the first 155 TaiChi-HD clips and
the first 155 COCO images) with the tiny Wan-style DiT.

Each run is checked against the plan and against one process:
  coverage: every rank trained exactly the micro-batches the plan gave it, in step order, so
      every planned sample id was trained exactly once over all ranks; padded end-of-epoch
      repeats (flagged by the sampler) are counted separately and must equal the plan's;
  loss: the step's loss (sum of every rank's per-sample losses / global samples) equals a
      single-process run of the same plan (emulated ranks, same per-sample inputs, same
      order) within LOSS_RTOL, and the final weights' update (final - initial) within
      UPDATE_RTOL of that run's, fp32 throughout.
A run that does not exit within TIMEOUT_S is a hang: its process group is killed and the
test fails naming the run. Wall times and measured errors go to build/sharded_torchrun.json
(and to stdout, `pytest -s`).
"""
import collections
import csv
import inspect
import json
import os
import time

import pytest
import torch

import adaptiveload
from conftest import DATASETS, REPO, run_guarded, torchrun

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)
if not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed has no gloo backend in this torch build", allow_module_level=True)

from adaptiveload.models import wan_dit  # noqa: E402
from adaptiveload.training import train_dit  # noqa: E402

# 155 + 155 rows: the step-mode balanced plan then gives ranks different micro-batch counts in
# some steps at 2 and at 4 ranks (DDP's no_sync accumulation over unequal counts is exercised).
ROWS = [("taichi_hd.csv", 155), ("coco2017_val_images.csv", 155)]
SEED = 0
TIMEOUT_S = 300  # a hang guard: each run takes 10-35 s on the 2-core CI machine
LOSS_RTOL = 1e-5  # per-step loss, relative; measured up to ~2e-8 (fp32, different summation order)
UPDATE_RTOL = 1e-3  # per tensor, max |dW - dW_ref| / max |dW_ref|; measured up to 1.2e-4 (AdamW: near-zero
# gradients make some elements' updates sensitive), the loss check is the strict one
TRAIN = ["--config", "tiny", "--device", "cpu", "--threads", "1", "--epoch", "--warmup", "0", "--seed", str(SEED)]
FIGURES = os.path.join(REPO, "build", "sharded_torchrun.json")
HAS_SYNC = "sync" in inspect.signature(adaptiveload.AdaptiveBatchSampler.__init__).parameters


def plan_options(parallel):
    """(strategy, sync) each wrapper trains with. FSDP2 needs the same number of micro-batches
    on every rank in every step: balanced with sync='micro' where the sampler has the option,
    else dual (one micro-batch per rank per step). DDP: balanced in step mode."""
    if parallel == "fsdp2":
        return ("balanced", "micro") if HAS_SYNC else ("dual", None)
    return ("balanced", "step") if HAS_SYNC else ("balanced", None)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    rows = []
    for name, n in ROWS:
        with open(os.path.join(DATASETS, name), newline="") as f:
            reader = csv.DictReader(f)
            rows += [r for _, r in zip(range(n), reader)]
    path = tmp_path_factory.mktemp("manifest") / "subset.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "num_frames", "height", "width", "fps"])
        w.writeheader()
        w.writerows(rows)
    return str(path)


def samplers(manifest, strategy, sync, world, **options):
    """The plan train_dit.py computes (its sampler options for --config tiny on the CPU, and
    `options`, e.g. packing="on"), one sampler per rank."""
    extra = {"sync": sync} if sync and HAS_SYNC else {}
    return [adaptiveload.AdaptiveBatchSampler(
        manifest, model="tiny-dit", device="cpu", grid="tiny", strategy=strategy, world_size=world, rank=r,
        seed=SEED, mem_budget=4096, checkpointing=False, on_bad_row="skip", on_oversize="skip", **extra, **options)
        for r in range(world)]


def run_torchrun(name, nproc, args, run_dir, script=None, timeout_s=TIMEOUT_S):
    """Runs train_dit.py (or script) under torchrun in its own process group; returns (rc,
    output, seconds). After timeout_s the agent and its workers are SIGKILLed and the test
    fails: a hang, named."""
    cmd, env = torchrun(nproc, run_dir / "torchrun_logs")
    cmd += [script or os.path.join(REPO, "examples", "train_dit.py")] + args
    return run_guarded(cmd, env, timeout_s, f"{name}: torchrun with {nproc} processes")


def read_log(paths):
    """Per-micro-batch log lines of train_dit.py --log-samples, in the order each rank wrote them."""
    entries = []
    for p in paths:
        with open(p) as f:
            entries += [json.loads(line) for line in f]
    return entries


def step_losses(entries):
    """{step: sum of every rank's per-sample losses} (the step's loss times its global samples)."""
    out = collections.defaultdict(float)
    for e in entries:
        out[e["step"]] += sum(e["losses"])
    return dict(out)


_references = {}


def plan_key(plan):
    """Every rank's micro-batches of every step: plans equal under this key train alike."""
    return tuple(tuple((st.step, tuple(map(tuple, st.micro_batches))) for st in s.steps()) for s in plan)


def reference(manifest, strategy, sync, world, tmp_dir, extra=(), plan=None):
    """One process, `world` emulated ranks, the same plan and per-sample inputs (and train_dit
    options `extra`): (log entries, final state dict). Cached per plan (per `plan`'s
    micro-batches where given: two sync modes planning the same micro-batches share a run)."""
    key = (tuple(extra), plan_key(plan)) if plan is not None else (strategy, sync, world, tuple(extra))
    if key not in _references:
        tag = f"ref_{strategy}_{sync}_{world}_{len(_references)}"
        log, model = tmp_dir / f"{tag}.jsonl", tmp_dir / f"{tag}.pt"
        threads = torch.get_num_threads()
        try:
            train_dit.main(TRAIN + ["-m", manifest, "--strategy", strategy, "--world-size", str(world),
                                    "--inputs", "per-sample", "--log-samples", str(log), "--save-model", str(model)]
                           + (["--sync", sync] if sync else []) + list(extra))
        finally:
            torch.set_num_threads(threads)
        _references[key] = (read_log([log]), torch.load(model))
    return _references[key]


def initial_weights():
    """The weights train_dit.py starts from (torch.manual_seed(seed), then the model)."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        return {k: v.detach().clone() for k, v in wan_dit.WanDiT(wan_dit.config("tiny")).state_dict().items()}


def record(name, figures):
    os.makedirs(os.path.dirname(FIGURES), exist_ok=True)
    try:
        with open(FIGURES) as f:
            allf = json.load(f)
    except (OSError, ValueError):
        allf = {}
    allf[name] = figures
    with open(FIGURES, "w") as f:
        json.dump(allf, f, indent=2, sort_keys=True)
    print(f"\n{name}: {json.dumps(figures)}")


def check_coverage(name, plan, entries, parallel):
    """Each rank trained exactly its planned micro-batches, in order, so every planned sample
    exactly once (padded repeats apart, as many as planned). Returns (Counter of the samples
    trained, padded samples trained, micro-batches per rank per step)."""
    padded_planned = trained_padded = 0
    trained = collections.Counter()
    for r, s in enumerate(plan):
        mine = [(e["step"], e["ids"], e["padded"]) for e in entries if e["rank"] == r]
        want = [(st.step, mb, bool(st.padded_micro_batches[i]) if st.padded_micro_batches else False)
                for st in s.steps() for i, mb in enumerate(st.micro_batches)]
        assert mine == want, f"{name}: rank {r} trained other micro-batches than its plan"
    for st in plan[0].steps():
        padded_planned += st.padded_samples
    for e in entries:
        if e["padded"]:
            trained_padded += len(e["ids"])
        else:
            trained.update(e["ids"])
    planned = set(plan[0].planned_rows())
    assert set(trained) == planned, (f"{name}: {len(planned - set(trained))} planned samples never trained, "
                                     f"{len(set(trained) - planned)} trained but not planned")
    twice = [i for i, n in trained.items() if n > 1]
    assert not twice, f"{name}: samples trained more than once: {twice[:10]}"
    assert trained_padded == padded_planned
    counts = [[len(st.micro_batches) for st in s.steps()] for s in plan]
    if parallel == "fsdp2":  # what the worker asserts before each step, from the plan's side
        assert all(len(set(c)) == 1 for c in zip(*counts)), f"{name}: unequal micro-batch counts {counts}"
    return trained, trained_padded, counts


def check_against_reference(name, plan, entries, model_path, ref_entries, ref_model):
    """The step losses within LOSS_RTOL of the one-process run's and the final weights' update
    (final - initial, per tensor) within UPDATE_RTOL. Returns (loss, update, weight) max
    relative errors."""
    got, want = step_losses(entries), step_losses(ref_entries)
    assert sorted(got) == sorted(want) == list(range(plan[0].num_steps))
    loss_err = max(abs(got[k] - want[k]) / abs(want[k]) for k in want)
    assert loss_err <= LOSS_RTOL, f"{name}: per-step loss differs from one process by {loss_err:.3g} (relative)"
    final, init = torch.load(model_path), initial_weights()
    assert sorted(final) == sorted(ref_model) == sorted(init)
    update_err = weight_err = 0.0
    for k, ref in ref_model.items():
        d_ref, d = ref - init[k], final[k] - init[k]
        assert d_ref.abs().max() > 0, f"{k} did not change in the reference run"
        update_err = max(update_err, ((d - d_ref).abs().max() / d_ref.abs().max()).item())
        weight_err = max(weight_err, ((final[k] - ref).abs().max() / ref.abs().max()).item())
    assert update_err <= UPDATE_RTOL, f"{name}: final weight update differs from one process by {update_err:.3g}"
    return loss_err, update_err, weight_err


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("parallel", ["fsdp2", "ddp"])
def test_sharded_epoch_matches_one_process(manifest, tmp_path, parallel, world):
    strategy, sync = plan_options(parallel)
    name = f"{parallel} x{world} ({strategy}, sync={sync or 'default'})"
    log, model_path, summary = tmp_path / "ids", tmp_path / "model.pt", tmp_path / "summary.json"
    args = TRAIN + ["-m", manifest, "--parallel", parallel, "--strategy", strategy, "--log-samples", str(log),
                    "--save-model", str(model_path), "--out", str(summary)] + (["--sync", sync] if sync else [])
    rc, out, seconds = run_torchrun(name, world, args, tmp_path)
    assert rc == 0, f"{name}: torchrun exited with {rc}:\n{out[-4000:]}"
    (result,) = json.loads(summary.read_text())
    assert result["mode"] == parallel and result["world_size"] == world and result["inputs"] == "per-sample"

    plan = samplers(manifest, strategy, sync, world)
    entries = read_log([f"{log}.rank{r}" for r in range(world)])
    trained, trained_padded, counts = check_coverage(name, plan, entries, parallel)
    ref_entries, ref_model = reference(manifest, strategy, sync, world, tmp_path.parent)
    loss_err, update_err, weight_err = check_against_reference(name, plan, entries, model_path, ref_entries,
                                                               ref_model)
    planned = set(plan[0].planned_rows())
    record(name, {
        "wall_s": round(seconds, 2), "steps": plan[0].num_steps, "micro_batches_per_rank": [sum(c) for c in counts],
        "steps_with_unequal_counts": sum(len(set(c)) > 1 for c in zip(*counts)),
        "samples_trained": sum(trained.values()), "planned": len(planned), "padded": trained_padded,
        "loss_max_rel_err": loss_err, "update_max_rel_err": update_err, "weight_max_rel_err": weight_err,
        "sampler_sync": result["sync"]})


def check_packed_epoch(manifest, tmp_path, parallel, what, mixes):
    """--packing on under torchrun x2 on `manifest`, checked against one process running the same
    micro-batches unpacked (--packed-forward buckets: each shape of a micro-batch an ordinary
    batch), sample by sample and step by step, and the final weights' update. mixes(mixed):
    the precondition on the plan's micro-batches (True: it mixes shapes)."""
    world = 2
    strategy, sync = plan_options(parallel)
    name = f"{parallel} x{world} packed{what} ({strategy}, sync={sync or 'default'})"
    log, model_path, summary = tmp_path / "ids", tmp_path / "model.pt", tmp_path / "summary.json"
    plan = samplers(manifest, strategy, sync, world, packing="on")
    mixed = [len({s.sample_geometry(i) for i in mb}) > 1 for s in plan for st in s.steps() for mb in st.micro_batches]
    assert mixes(mixed), f"precondition on the packs' shapes: {sum(mixed)} of {len(mixed)} mix shapes"
    args = TRAIN + ["-m", manifest, "--parallel", parallel, "--strategy", strategy, "--packing", "on",
                    "--log-samples", str(log), "--save-model", str(model_path), "--out", str(summary)] + (
                        ["--sync", sync] if sync else [])
    rc, out, seconds = run_torchrun(name, world, args, tmp_path)
    assert rc == 0, f"{name}: torchrun exited with {rc}:\n{out[-4000:]}"
    (result,) = json.loads(summary.read_text())
    assert (result["packing"], result["packed_forward"], result["inputs"]) == ("on", "varlen", "per-sample")
    assert len(result["predicted_rank_times"]) == result["measured"]["steps"] == plan[0].num_steps
    entries = read_log([f"{log}.rank{r}" for r in range(world)])
    assert [e["shapes"] > 1 for e in entries] == mixed  # the logged packs are the plan's, mixed as planned
    trained, trained_padded, counts = check_coverage(name, plan, entries, parallel)

    ref_entries, ref_model = reference(manifest, strategy, sync, world, tmp_path.parent, plan=plan,
                                       extra=["--packing", "on", "--packed-forward", "buckets"])
    per_sample = lambda es: {(e["step"], i): x for e in es for i, x in zip(e["ids"], e["losses"])}  # noqa: E731
    got, want = per_sample(entries), per_sample(ref_entries)
    assert sorted(got) == sorted(want)
    sample_err = max(abs(got[k] - want[k]) / abs(want[k]) for k in want)
    assert sample_err <= LOSS_RTOL, f"{name}: a sample's loss differs from its unpacked run by {sample_err:.3g}"
    loss_err, update_err, weight_err = check_against_reference(name, plan, entries, model_path, ref_entries,
                                                               ref_model)
    record(name, {
        "wall_s": round(seconds, 2), "steps": plan[0].num_steps, "micro_batches_per_rank": [sum(c) for c in counts],
        "packs_mixing_shapes": sum(mixed), "packs": len(mixed), "samples_trained": sum(trained.values()),
        "padded": trained_padded, "sample_loss_max_rel_err": sample_err, "loss_max_rel_err": loss_err,
        "update_max_rel_err": update_err, "weight_max_rel_err": weight_err, "sampler_sync": result["sync"]})


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp"])
def test_packed_epoch_matches_unpacked_one_process(manifest, tmp_path, parallel):
    """Each micro-batch (samples of mixed shapes) trained as one pack through
    flow_matching_loss_packed, as one process trains it unpacked (check_packed_epoch)."""
    check_packed_epoch(manifest, tmp_path, parallel, "", lambda mixed: sum(mixed) > len(mixed) // 2)


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp"])
def test_packed_epoch_runs_one_shape_micro_batches_as_ordinary_batches(tmp_path, parallel):
    """A packed plan's micro-batches of one shape run as ordinary batches through the same
    wrapped module (train_dit's PackedForward, under DDP's hooks or FSDP2's gathers) beside its
    packs of several shapes in one epoch: 100 copies of one Taichi-HD clip and 4 COCO images
    plan both kinds; every sample's loss and the update as one process trains them unpacked."""
    with open(os.path.join(DATASETS, "taichi_hd.csv"), newline="") as f:
        clip = next(csv.DictReader(f))
    with open(os.path.join(DATASETS, "coco2017_val_images.csv"), newline="") as f:
        images = [r for _, r in zip(range(4), csv.DictReader(f))]
    path = tmp_path / "one_shape.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "num_frames", "height", "width", "fps"], extrasaction="ignore")
        w.writeheader()
        w.writerows([dict(clip, path=f"one_shape/{i:03d}.mp4") for i in range(100)] + images)
    check_packed_epoch(str(path), tmp_path, parallel, " (one-shape micro-batches)",
                       lambda mixed: any(mixed) and not all(mixed))


def test_fsdp2_fails_loudly_on_unequal_micro_batch_counts(manifest, tmp_path):
    """FSDP2 given a step-mode balanced plan (ranks with different micro-batch counts) must stop
    with an error naming the step, not hang in a collective."""
    for world in (2, 4):
        counts = [[len(st.micro_batches) for st in s.steps()] for s in samplers(manifest, "balanced", "step", world)]
        bad = [t for t, c in enumerate(zip(*counts)) if len(set(c)) > 1]
        if bad:
            break
    assert bad, "precondition: the step-mode plan of this subset gives some step unequal counts at 2 or 4 ranks"
    args = TRAIN + ["-m", manifest, "--parallel", "fsdp2", "--strategy", "balanced", "--sync", "step"]
    rc, out, seconds = run_torchrun(f"fsdp2 x{world} with a step-mode plan", world, args, tmp_path)
    assert rc != 0
    assert f"step {bad[0]}: micro-batches per rank" in out, out[-4000:]
    record(f"fsdp2 x{world} refusing a step-mode plan", {"wall_s": round(seconds, 2), "failed_at_step": bad[0]})

HANGING_WORKER = """
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
open(os.path.join(sys.argv[1], f"pid{dist.get_rank()}"), "w").write(str(os.getpid()))
if dist.get_rank() == 0:
    dist.barrier()  # rank 1 never joins: a hang, as a rank short of micro-batches under FSDP2 would be
else:
    time.sleep(3600)
"""


def test_hang_guard_kills_the_run_and_names_it(tmp_path):
    """The guard the runs above rely on: a torchrun whose ranks never meet fails with a message
    naming the run, and no worker is left behind."""
    script = tmp_path / "hang.py"
    script.write_text(HANGING_WORKER)
    with pytest.raises(pytest.fail.Exception, match="hanging run: torchrun with 2 processes did not finish"):
        run_torchrun("hanging run", 2, [str(tmp_path)], tmp_path, script=str(script), timeout_s=20)
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    time.sleep(0.5)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone
        assert state == "Z", f"worker {pid} still running after the guard fired"
