"""examples/train_dit.py's options and inputs: every numeric option range-checked when parsed
(an argparse error naming it, exit status 2), bad manifest rows an error by default and
reported when skipped, duplicates passed through to the sampler, and a sequence-parallel plan
trained under torchrun (2 processes, gloo, CPU; the explicit all-reduce and FSDP2): samples on
a group of 2 beside samples alone, every planned sample trained exactly once, the same losses
and weights as one process running the same plan without sequence parallelism."""
import collections
import csv
import json
import os
import subprocess
import sys

import pytest
import torch

import adaptiveload
from adaptiveload.training import train_dit
from conftest import DATASETS, REPO, run_guarded, torchrun

SCRIPT = os.path.join(REPO, "examples", "train_dit.py")
FIELDS = ["path", "num_frames", "height", "width", "fps"]
TINY = ["--config", "tiny", "--device", "cpu", "--threads", "1", "--warmup", "0"]
HANG_TIMEOUT_S = 300  # a hang guard: the run takes 10-30 s on the 2-core machine
LOSS_RTOL = 1e-5  # per-step loss, fp32, sequence-parallel sums against whole-sample means
UPDATE_RTOL = 1e-3  # final - initial weights per tensor, as test_sharded_torchrun.py (AdamW)


@pytest.mark.parametrize("argv,option", [
    (["--world-size", "0"], "--world-size/-w"),
    (["-w", str(2**20 + 1)], "--world-size/-w"),
    (["--layers", "0"], "--layers"),
    (["--subset", "0"], "--subset"),
    (["--warmup", "-1"], "--warmup"),
    (["--steps", "0"], "--steps"),
    (["--threads", "0"], "--threads"),
    (["--adapt-every", "0"], "--adapt-every"),
    (["--mem-budget", "0"], "--mem-budget"),
    (["--mem-budget", "2e15"], "--mem-budget"),
    (["--mem-budget", "1.5"], "--mem-budget"),
    (["--lr", "0"], "--lr"),
    (["--lr", "-1e-4"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "--seed"),
    (["--sp", "3"], "--sp"),
    (["--sp", "0"], "--sp"),
    (["--sp-sizes", "1,3"], "--sp-sizes"),
    (["--on-bad-row", "ignore"], "--on-bad-row"),
    (["--on-duplicate", "keep"], "--on-duplicate"),
    (["--on-oversize", "drop"], "--on-oversize"),
])
def test_out_of_range_option_is_a_parse_error_naming_it(argv, option, capsys):
    with pytest.raises(SystemExit) as e:
        train_dit.parse_args(argv)
    assert e.value.code == 2
    assert f"argument {option}:" in capsys.readouterr().err


def test_range_ends_are_accepted_and_unset_options_are_none():
    a = train_dit.parse_args(["--seed", str(2**64 - 1), "--warmup", "0", "--mem-budget", "4e4", "--world-size", "1",
                              "--sp", "2", "--sp-sizes", "4,1,2", "--lr", "1e-3"])
    assert (a.seed, a.warmup, a.mem_budget, a.world_size, a.sp, a.sp_sizes, a.lr) == (
        2**64 - 1, 0, 40000, 1, "2", (1, 2, 4), 1e-3)
    # Not given: None (the default), never a 0 read as "default" by a falsy test.
    a = train_dit.parse_args([])
    assert (a.layers, a.subset, a.threads, a.mem_budget, a.adapt_every) == (None,) * 5
    assert (a.on_bad_row, a.on_duplicate, a.on_oversize, a.sp) == ("error", "warn", "error", "auto")


def test_world_size_zero_from_the_command_line():
    """The reported crash: `train_dit.py --world-size 0` was an IndexError; now a usage error."""
    proc = subprocess.run([sys.executable, SCRIPT, "--world-size", "0"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                              adaptiveload.__file__))))
    assert proc.returncode == 2, proc.stderr
    assert "argument --world-size/-w: must be 1..1048576, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def real_rows(n_clips, n_images, clip_size=(480, 640)):
    """The first n_clips Taichi-HD clips of clip_size (height, width) and n_images COCO images."""
    rows = []
    with open(os.path.join(DATASETS, "taichi_hd.csv"), newline="") as f:
        rows += [r for r in csv.DictReader(f) if (int(r["height"]), int(r["width"])) == clip_size][:n_clips]
    with open(os.path.join(DATASETS, "coco2017_val_images.csv"), newline="") as f:
        rows += [r for _, r in zip(range(n_images), csv.DictReader(f))]
    return rows


def write_csv(path, rows, raw_lines=()):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
        for line in raw_lines:
            f.write(line + "\n")
    return str(path)


BAD_LINE = "taichi/broken.mp4,many,480,640,29.97"  # line 8 of the file below: num_frames not a number


def test_bad_row_is_an_error_by_default(tmp_path, capsys):
    manifest = write_csv(tmp_path / "m.csv", real_rows(3, 3), [BAD_LINE])
    with pytest.raises(SystemExit) as e:
        train_dit.main(TINY + ["-m", manifest, "--world-size", "2", "--steps", "1"])
    msg = str(e.value.code)
    assert msg.startswith("train_dit.py: ") and "m.csv" in msg and ":8" in msg and "num_frames" in msg, msg


def test_skipped_bad_rows_are_reported(tmp_path, capsys):
    manifest = write_csv(tmp_path / "m.csv", real_rows(3, 3), [BAD_LINE])
    log = tmp_path / "ids.jsonl"
    (r,) = train_dit.main(TINY + ["-m", manifest, "--world-size", "2", "--steps", "1", "--on-bad-row", "skip",
                                  "--log-samples", str(log)])
    err = capsys.readouterr().err
    assert "train_dit.py: skipped 1 bad manifest row(s) (--on-bad-row skip):" in err, err
    detail = err.split("skipped 1 bad manifest row(s)")[1].splitlines()[1]
    assert "m.csv" in detail and ":8" in detail and "num_frames" in detail, err
    assert r["measured"]["samples"] > 0
    trained = {i for line in open(log) for i in json.loads(line)["ids"]}
    assert 6 not in trained  # the bad row's id (row ids count the bad row)
    # A --subset's rows are in-memory rows to the sampler: still named by file and line.
    train_dit.main(TINY + ["-m", manifest, "--world-size", "2", "--steps", "1", "--on-bad-row", "skip",
                           "--subset", "10"])
    err = capsys.readouterr().err
    assert "skipped 1 bad manifest row(s)" in err and "m.csv:8 (subset row 6): field 'num_frames'" in err, err
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in real_rows(2, 2)) + '{"path": "x.mp4"}\n')
    with pytest.raises(SystemExit) as e:
        train_dit.main(TINY + ["-m", str(jsonl), "--world-size", "2", "--steps", "1", "--subset", "10"])
    assert "m.jsonl:5: no 'num_frames', 'height', 'width' key" in str(e.value.code), e.value.code


def test_duplicate_policy_is_passed_through(tmp_path):
    rows = real_rows(2, 2)
    manifest = write_csv(tmp_path / "m.csv", rows + rows[:1])
    with pytest.raises(SystemExit) as e:
        train_dit.main(TINY + ["-m", manifest, "--world-size", "2", "--steps", "1", "--on-duplicate", "error"])
    assert "train_dit.py: " in str(e.value.code) and rows[0]["path"] in str(e.value.code), e.value.code


def small_gpu(path):
    """A device whose memory holds ~131 tokens of one tiny-DiT sample per GPU (as
    test_sequence_parallel.small_gpu): on the tiny grid, images (60 tokens) fit one GPU, the
    480x640 clips (240 tokens) need a group of 2."""
    state = 98_304 * 18 + 3e9
    path.write_text(json.dumps({"name": "small-gpu", "memory_gb": (state + 360_000) / 1e9, "peak_tflops": 0.1,
                                "efficiency": 0.3, "allreduce_bus_gbps": 5, "microbatch_overhead_ms": 2,
                                "half_efficiency_tokens": 256, "memory_reserve_fraction": 0, "node_size": 8,
                                "alltoall_gbps": 5}))
    return str(path)


def run_torchrun(nproc, args, run_dir):
    cmd, env = torchrun(nproc, run_dir / "torchrun_logs")
    return run_guarded(cmd + [SCRIPT] + args, env, HANG_TIMEOUT_S, f"torchrun with {nproc} processes")


@pytest.mark.parametrize("parallel", [None, "fsdp2"])
def test_torchrun_trains_a_sequence_parallel_plan(tmp_path, parallel):
    """The explicit all-reduce (step sync), and FSDP2 (micro sync: its all-gathers and
    reduce-scatters on the world interleave with the groups' all-to-alls)."""
    manifest = write_csv(tmp_path / "m.csv", real_rows(4, 8))
    device = small_gpu(tmp_path / "gpu.json")
    sync = "micro" if parallel == "fsdp2" else "step"
    plan = ["-m", manifest, "--planner-device", device, "--sp", "min", "--strategy", "balanced", "--epoch",
            "--inputs", "per-sample", "--sync", sync]
    samplers = [adaptiveload.AdaptiveBatchSampler(manifest, model="tiny-dit", device=device, grid="tiny",
                                                  world_size=2, rank=r, mem_budget=4096, checkpointing=False,
                                                  sp="min", sync=sync) for r in range(2)]
    sizes = {len(g) for s in samplers for st in s.steps() for g in st.groups}
    assert sizes == {1, 2}, f"precondition: the plan mixes samples alone and on a group of 2, got {sizes}"

    log, model_path = tmp_path / "ids", tmp_path / "model.pt"
    rc, out, seconds = run_torchrun(2, TINY + plan + ["--log-samples", str(log), "--save-model", str(model_path)]
                                    + (["--parallel", parallel] if parallel else []), tmp_path)
    assert rc == 0, out[-4000:]
    entries = [json.loads(line) for r in range(2) for line in open(f"{log}.rank{r}")]
    # Each group micro-batch logged by both ranks of the group, at positions 0 and 1, with
    # one loss (the whole samples', all-reduced over the group).
    by_mb = collections.defaultdict(list)
    for e in entries:
        by_mb[(e["step"], tuple(e["group"]), tuple(e["ids"]))].append(e)
    assert {len(k[1]) for k in by_mb} == {1, 2}
    for (step, group, ids), es in by_mb.items():
        assert sorted(e["rank"] for e in es) == list(group) and sorted(e["position"] for e in es) == list(
            range(len(group))), (step, group, ids)
        assert len({tuple(e["losses"]) for e in es}) == 1, (step, group, ids)
    # Every planned sample trained exactly once (padded repeats apart), as the plan says.
    trained = collections.Counter(i for e in entries if e["position"] == 0 and not e["padded"] for i in e["ids"])
    assert sorted(trained) == samplers[0].planned_rows() and set(trained.values()) == {1}
    padded = sum(len(e["ids"]) for e in entries if e["position"] == 0 and e["padded"])
    assert padded == sum(st.padded_samples for st in samplers[0].steps())

    # The same plan in one process, emulated ranks, no sequence parallelism: the same losses
    # per step and the same weights.
    ref_log, ref_model = tmp_path / "ref.jsonl", tmp_path / "ref.pt"
    threads = torch.get_num_threads()
    try:
        train_dit.main(TINY + plan + ["--world-size", "2", "--log-samples", str(ref_log),
                                      "--save-model", str(ref_model)])
    finally:
        torch.set_num_threads(threads)
    ref = [json.loads(line) for line in open(ref_log)]
    assert all(e["position"] == 0 for e in ref)  # a group's micro-batch ran once

    def step_losses(es):
        out = collections.defaultdict(float)
        for e in es:
            if e["position"] == 0:
                out[e["step"]] += sum(e["losses"])
        return out

    got, want = step_losses(entries), step_losses(ref)
    assert sorted(got) == sorted(want)
    loss_err = max(abs(got[k] - want[k]) / abs(want[k]) for k in want)
    assert loss_err <= LOSS_RTOL, loss_err
    final, reference = torch.load(model_path), torch.load(ref_model)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        from adaptiveload.models import wan_dit
        init = wan_dit.WanDiT(wan_dit.config("tiny")).state_dict()
    update_err = max(((final[k] - init[k]) - (reference[k] - init[k])).abs().max().item()
                     / (reference[k] - init[k]).abs().max().item() for k in reference)
    assert update_err <= UPDATE_RTOL, update_err
    print(f"\nsequence-parallel plan under torchrun x2 ({parallel or 'all-reduce'}): {len(by_mb)} micro-batches, "
          f"{sum(len(k[1]) == 2 for k in by_mb)} on a group of 2, {seconds:.1f} s; loss rel err {loss_err:.2g}, "
          f"update rel err {update_err:.2g}")


@pytest.mark.parametrize("model", ["wan-dit", "diffusers-wan"])
def test_packed_emulated_epoch_matches_its_unpacked_run(tmp_path, model):
    """--packing on with emulated ranks: every planned sample trained once, in packs mixing
    shapes, each sample's loss that of the same micro-batch run unpacked (--packed-forward
    buckets) within LOSS_RTOL, for our DiT (forward_packed) and diffusers' Wan
    (adaptiveload.diffusers.packed_forward); --packing both runs bucketed, then packed, and the
    summaries say which."""
    if model == "diffusers-wan":
        pytest.importorskip("diffusers")
    manifest = write_csv(tmp_path / "m.csv", real_rows(6, 24))
    base = TINY + ["-m", manifest, "-w", "2", "--epoch", "--inputs", "per-sample", "--strategy", "balanced",
                   "--model", model]
    logs = {}
    for forward in ("varlen", "buckets"):
        logs[forward] = tmp_path / f"{forward}.jsonl"
        (r,) = train_dit.main(base + ["--packing", "on", "--packed-forward", forward, "--log-samples",
                                      str(logs[forward])])
        assert (r["packing"], r["packed_forward"]) == ("on", forward)
        assert r["packs"]["mixed_shapes"] > 0, r["packs"]
    packed, unpacked = ([json.loads(line) for line in open(logs[f])] for f in ("varlen", "buckets"))
    assert [(e["step"], e["rank"], e["ids"]) for e in packed] == [(e["step"], e["rank"], e["ids"]) for e in unpacked]
    trained = collections.Counter(i for e in packed if not e["padded"] for i in e["ids"])
    planned = adaptiveload.AdaptiveBatchSampler(manifest, model="tiny-dit", device="cpu", grid="tiny", world_size=2,
                                                rank=0, mem_budget=4096, checkpointing=False,
                                                packing="on").planned_rows()
    assert sorted(trained) == planned and set(trained.values()) == {1}
    err = max(abs(a - b) / abs(b) for p, u in zip(packed, unpacked) for a, b in zip(p["losses"], u["losses"]))
    assert err <= LOSS_RTOL, err
    if model == "wan-dit":
        both = train_dit.main(base + ["--packing", "both", "--steps", "1"])
        assert [r["packing"] for r in both] == ["off", "on"] and both[0]["packs"] is None


@pytest.mark.parametrize("model", ["wan-dit", "diffusers-wan"])
def test_a_packed_plans_one_shape_micro_batches_run_as_ordinary_batches(tmp_path, monkeypatch, model):
    """The planner prices a micro-batch of one shape as a bucketed one (only a pack of several
    shapes pays the profile's pack_sample_s), so train_dit runs it as one, through the same
    PackedForward module as the packs: the varlen forward is called for exactly the packs that
    mix shapes, and every micro-batch is trained (our DiT and diffusers' Wan)."""
    if model == "diffusers-wan":
        pytest.importorskip("diffusers")
    clip = real_rows(1, 0)[0]
    rows = [dict(clip, path=f"one_shape/{i:03d}.mp4") for i in range(100)] + real_rows(0, 4)
    manifest = write_csv(tmp_path / "m.csv", rows)
    calls = []
    packed_loss = train_dit.wan_dit_packed.flow_matching_loss_packed

    def counted(model, x0s, *args, **kwargs):
        calls.append(len({tuple(x.shape) for x in x0s}))
        return packed_loss(model, x0s, *args, **kwargs)

    monkeypatch.setattr(train_dit.wan_dit_packed, "flow_matching_loss_packed", counted)
    log = tmp_path / "log.jsonl"
    (r,) = train_dit.main(TINY + ["-m", manifest, "-w", "2", "--epoch", "--strategy", "balanced", "--packing", "on",
                                  "--model", model, "--log-samples", str(log)])
    entries = [json.loads(line) for line in open(log)]
    shapes = [e["shapes"] for e in entries]
    assert 1 in shapes and any(n > 1 for n in shapes), shapes  # precondition: both kinds planned
    assert sorted(calls) == sorted(n for n in shapes if n > 1)
    assert r["packs"]["trained"] == len(entries) and r["packs"]["mixed_shapes"] == len(calls)


def test_interleaved_runs_train_what_they_train_one_after_another(tmp_path):
    """--interleave: the runs take one global step each in turn (the log alternates between
    them step by step), and each run trains exactly what it trains alone: the same steps, the
    same micro-batches on the same ranks, the same per-sample losses (per-sample inputs), the
    same summary counts."""
    manifest = write_csv(tmp_path / "m.csv", real_rows(6, 24))
    base = TINY + ["-m", manifest, "-w", "2", "--epoch", "--inputs", "per-sample", "--strategy",
                   "equal_tokens,balanced"]
    logs, results = {}, {}
    for mode in ("sequential", "interleaved"):
        logs[mode] = tmp_path / f"{mode}.jsonl"
        results[mode] = train_dit.main(base + ["--log-samples", str(logs[mode])]
                                       + (["--interleave"] if mode == "interleaved" else []))
    seq, inter = ([json.loads(line) for line in open(logs[m])] for m in ("sequential", "interleaved"))
    key = lambda e: (e["strategy"], e["step"], e["rank"], e["ids"], e["losses"])  # noqa: E731
    assert sorted(map(key, inter), key=str) == sorted(map(key, seq), key=str)
    # Sequential: every equal_tokens line before every balanced line. Interleaved: the steps in
    # the order they ran alternate between the strategies while both still have steps.
    order = lambda log: [s for i, s in enumerate(e["strategy"] for e in log)  # noqa: E731
                         if i == 0
                         or (log[i - 1]["strategy"], log[i - 1]["step"]) != (log[i]["strategy"], log[i]["step"])]
    assert order(seq) == sorted(order(seq), key=["equal_tokens", "balanced"].index)
    turns = order(inter)
    steps = {s: turns.count(s) for s in ("equal_tokens", "balanced")}
    both = 2 * min(steps.values())
    assert min(steps.values()) >= 2, steps
    assert turns[:both] == ["equal_tokens", "balanced"] * (both // 2), turns
    for a, b in zip(results["sequential"], results["interleaved"]):
        assert a["strategy"] == b["strategy"]
        for k in ("steps", "samples"):
            assert a["measured"][k] == b["measured"][k], (a["strategy"], k)
        assert a["predicted"] == b["predicted"]


def test_rank_order_interleaved_spreads_every_emulated_rank_over_the_step(tmp_path):
    """--rank-order interleaved: the emulated ranks train the same micro-batches on the same
    ranks with the same per-sample losses as rank by rank (exactly in the first step, whose
    weights are the same; later up to the order the gradients were summed in), and within each
    step the micro-batches run in interleaved_order of their planned prices, each rank's in plan
    order, not rank by rank."""
    manifest = write_csv(tmp_path / "m.csv", real_rows(6, 24))
    base = TINY + ["-m", manifest, "-w", "3", "--epoch", "--inputs", "per-sample", "--strategy", "balanced"]
    logs = {}
    for order in ("sequential", "interleaved"):
        path = tmp_path / f"{order}.jsonl"
        train_dit.main(base + ["--log-samples", str(path), "--rank-order", order])
        logs[order] = [json.loads(line) for line in open(path)]
    seq, inter = logs["sequential"], logs["interleaved"]
    where = lambda e: (e["step"], e["rank"], tuple(e["ids"]))  # noqa: E731
    assert sorted(map(where, inter)) == sorted(map(where, seq))
    losses = {where(e): e["losses"] for e in seq}
    first = min(e["step"] for e in seq)
    for e in inter:
        if e["step"] == first:
            assert e["losses"] == losses[where(e)]
        else:
            assert e["losses"] == pytest.approx(losses[where(e)], rel=1e-4, abs=1e-6)
    spread = 0
    for step in sorted({e["step"] for e in inter}):
        ran = [e for e in inter if e["step"] == step]
        plan = [[e for e in seq if e["step"] == step and e["rank"] == r] for r in range(3)]
        price = {where(e): e["predicted_s"] for e in ran}  # logged with --rank-order interleaved
        expected = train_dit.interleaved_order([[price[where(e)] for e in row] for row in plan])
        assert [where(e) for e in ran] == [where(plan[k][i]) for k, i in expected]
        ranks = [e["rank"] for e in ran]
        spread += ranks != sorted(ranks)
    assert spread > 0  # some step ran its ranks' micro-batches interleaved


def test_rank_order_interleaved_runs_a_group_micro_batch_once(tmp_path):
    """Emulated ranks with sequence-parallel groups: with --rank-order interleaved a group's
    micro-batch still runs once, when the first of its ranks reaches it, and is logged once as
    the group's first rank's (position 0); the epoch trains what it trains rank by rank."""
    manifest = write_csv(tmp_path / "m.csv", real_rows(4, 8))
    device = small_gpu(tmp_path / "gpu.json")
    base = TINY + ["-m", manifest, "--planner-device", device, "--sp", "min", "--strategy", "balanced", "--epoch",
                   "--inputs", "per-sample", "--world-size", "2"]
    logs, results = {}, {}
    for order in ("sequential", "interleaved"):
        path = tmp_path / f"{order}.jsonl"
        (results[order],) = train_dit.main(base + ["--log-samples", str(path), "--rank-order", order])
        logs[order] = [json.loads(line) for line in open(path)]
    seq, inter = logs["sequential"], logs["interleaved"]
    assert {len(e["group"]) for e in inter} == {1, 2}, "precondition: the plan mixes groups of 1 and 2"
    where = lambda e: (e["step"], e["rank"], tuple(e["group"]), tuple(e["ids"]))  # noqa: E731
    assert sorted(map(where, inter)) == sorted(map(where, seq))
    for e in inter:
        assert e["position"] == 0 and e["rank"] == e["group"][0]
    losses = {where(e): e["losses"] for e in seq}
    for e in inter:
        assert e["losses"] == pytest.approx(losses[where(e)], rel=1e-4, abs=1e-6)
    for k in ("steps", "samples"):
        assert results["interleaved"]["measured"][k] == results["sequential"]["measured"][k]
    assert results["interleaved"]["rank_order"] == "interleaved"


def test_interleaved_order_places_each_micro_batch_at_its_midpoint():
    """A rank's micro-batches keep their order; across ranks they go by the midpoint of their
    span in their rank's share of the step, ties to the lower rank; an empty rank has none."""
    assert train_dit.interleaved_order([[3, 1, 1], [1, 1, 1, 1, 1], [], [5]]) == [
        (1, 0), (0, 0), (1, 1), (1, 2), (3, 0), (0, 1), (1, 3), (0, 2), (1, 4)]
    assert train_dit.interleaved_order([[0.0, 0.0], [2.0]]) == [(0, 0), (1, 0), (0, 1)]  # no prices: by count


def test_compare_discards_its_warm_up_repetitions(tmp_path, monkeypatch, capsys):
    """compare.py --discard N: N repetitions run first (the same runs, the same arguments) and
    none of them is in the table or the JSON; --interleave reaches train_dit and the table says
    so; --discard out of range is refused naming it."""
    from adaptiveload.training import compare
    calls = []

    def fake_main(argv):  # the n-th call's samples/s is 100 + n: the discarded ones are told apart
        calls.append(list(argv))
        sps = 100.0 + len(calls)
        return [{"strategy": s, "fused_adaln": False, "plan_steps": 3, "model": "wan-dit", "config": "tiny",
                 "layers": 2, "world_size": 2, "mode": "emulated", "device": "cpu", "clock": "thread",
                 "measured": {"imbalance": 0.1, "throughput_samples_per_s": sps, "steps": 3, "samples": 9,
                              "time_s": 9 / sps, "throughput_tokens_per_s": 1.0},
                 "predicted": {"imbalance": 0.1, "throughput_samples_per_s": 100.0, "throughput_tokens_per_s": 1.0}}
                for s in ("equal_tokens", "balanced")]

    monkeypatch.setattr(compare.train_dit, "main", fake_main)
    rows = compare.main(["--out-dir", str(tmp_path), "--strategies", "equal_tokens,balanced", "--fused", "off",
                         "--repeat", "2", "--discard", "2", "--epoch", "--interleave"])
    assert len(calls) == 4 and all(c == calls[0] for c in calls) and "--interleave" in calls[0]
    assert [r["samples_per_s_runs"] for r in rows] == [[103.0, 104.0], [103.0, 104.0]]
    out = json.loads((tmp_path / "compare.json").read_text())
    assert len(out["repeats"]) == 2 and "2 repetitions after 2 discarded" in out["meta"]
    assert "the runs interleaved a step each in turn" in (tmp_path / "compare.md").read_text()
    with pytest.raises(SystemExit) as e:
        compare.main(["--out-dir", str(tmp_path), "--discard", "-1"])
    assert e.value.code == 2 and "--discard must be" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--sp", "2", "--packing", "on"], "--sp 2 runs every sample on a sequence-parallel group of 2"),
])
def test_packing_refuses_what_it_cannot_train(tmp_path, argv, message):
    manifest = write_csv(tmp_path / "m.csv", real_rows(2, 2))
    with pytest.raises(SystemExit) as e:
        train_dit.main(TINY + ["-m", manifest, "-w", "2", "--steps", "1"] + argv)
    assert message in str(e.value.code), e.value.code


def test_packing_with_a_plan_needing_groups_says_so(tmp_path):
    """Samples that fit no single GPU need sequence-parallel groups, which packs do not take:
    the planner's refusal, as train_dit.py's error, naming --packing off."""
    manifest = write_csv(tmp_path / "m.csv", real_rows(4, 8))
    with pytest.raises(SystemExit) as e:
        train_dit.main(TINY + ["-m", manifest, "--planner-device", small_gpu(tmp_path / "gpu.json"), "--sp", "min",
                               "--packing", "on", "-w", "2", "--steps", "1"])
    msg = str(e.value.code)
    assert msg.startswith("train_dit.py: packing") and "sequence-parallel group" in msg and "--packing off" in msg, msg
