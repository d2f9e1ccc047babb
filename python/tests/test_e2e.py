"""End-to-end on CPU with the tiny Wan-style DiT (issue 5's CI checks): rank emulation for
every strategy, a real two-process torchrun (gloo) with `balanced`, calibration, and the
loss going down on a fixed batch."""
import collections
import json
import math
import os
import random
import re
import subprocess
import warnings

import pytest
import torch

import adaptiveload
from adaptiveload import calibrate
from adaptiveload.models import wan_dit
from adaptiveload.training import train_dit
from conftest import DATASETS, HERE, REPO, torchrun

MANIFESTS = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]

TINY = ["--config", "tiny", "--device", "cpu", "--threads", "2"] + sum((["-m", m] for m in MANIFESTS), [])


def planned_ids(strategy, world_size, steps):
    """Multiset of sample ids the plan gives all ranks in its first `steps` steps (padded
    repeats included, as they are trained)."""
    ids = collections.Counter()
    for r in range(world_size):
        s = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny",
                                              strategy=strategy, world_size=world_size, rank=r, mem_budget=4096,
                                              checkpointing=False, on_bad_row="skip", on_oversize="skip")
        for _t, st in zip(range(steps), s.steps()):
            for mb in st.micro_batches:
                ids.update(mb)
    return ids


def check_summary(r):
    for part in ("measured", "predicted"):
        for k in ("imbalance", "imbalance_step_mean", "imbalance_step_maxmin", "throughput_samples_per_s",
                  "throughput_tokens_per_s"):
            v = r[part][k]
            assert math.isfinite(v) and v >= 0, (part, k, v)
        assert 0 <= r[part]["imbalance"] < 1
    assert r["measured"]["samples"] > 0
    assert len(r["rank_times"]) == r["measured"]["steps"] == len(r["predicted_rank_times"])


def test_emulated_ranks_every_strategy(tmp_path):
    log = tmp_path / "ids.jsonl"
    out = tmp_path / "summary.json"
    W, steps = 3, 2
    results = train_dit.main(TINY + ["--strategy", "equal_tokens,fixed,dual,balanced", "--world-size", str(W),
                                     "--steps", str(steps), "--warmup", "0", "--log-samples", str(log),
                                     "--out", str(out)])
    assert [r["strategy"] for r in results] == ["equal_tokens", "fixed", "dual", "balanced"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    got = collections.defaultdict(collections.Counter)
    with open(log) as f:
        for line in f:
            e = json.loads(line)
            got[e["strategy"]].update(e["ids"])
    for r in results:
        check_summary(r)
        assert r["world_size"] == W and r["mode"] == "emulated" and r["measured"]["steps"] == steps
        assert got[r["strategy"]] == planned_ids(r["strategy"], W, steps), (
            f"{r['strategy']}: trained ids differ from the plan's first {steps} steps")


def test_torchrun_two_processes_balanced(tmp_path):
    out, log = tmp_path / "summary.json", tmp_path / "ids"
    cmd, env = torchrun(2, tmp_path / "logs", [HERE])
    steps = 2
    cmd += [os.path.join(REPO, "examples", "train_dit.py")] + TINY + [
        "--strategy", "balanced", "--steps", str(steps), "--warmup", "0", "--threads", "1",
        "--out", str(out), "--log-samples", str(log)]
    # The timeout only guards against a hang: a loaded machine is slow, not wrong.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(out.read_text())
    check_summary(r)
    assert r["mode"] == "ddp" and r["world_size"] == 2
    assert all(len(t) == 2 for t in r["rank_times"])  # both ranks' times gathered
    got = collections.Counter()
    for rank in (0, 1):
        for line in open(f"{log}.rank{rank}"):
            e = json.loads(line)
            assert e["rank"] == rank
            got.update(e["ids"])
    assert got == planned_ids("balanced", 2, steps)


def test_loss_decreases_on_a_fixed_batch():
    torch.manual_seed(0)
    c = wan_dit.config("tiny")
    model = wan_dit.WanDiT(c, fused_adaln=True)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    x0 = torch.randn(2, 16, 3, 8, 12)
    ctx = torch.randn(2, c.text_len, c.text_dim)
    losses = []
    for _ in range(30):
        g = torch.Generator().manual_seed(7)  # same t and noise every step: a fixed objective
        loss = wan_dit.flow_matching_loss(model, x0, ctx, g).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def cli_plans_with(prof):
    """Runs `adaptiveload plan --profile prof` with the repository's CLI; skips if not built."""
    cli = os.path.join(REPO, "build", "cli", "adaptiveload")
    if not os.path.exists(cli):
        pytest.skip("CLI not built")
    res = subprocess.run([cli, "plan", "-m", MANIFESTS[0], "--model", "tiny-dit", "--grid", "tiny", "--device", "cpu",
                          "--profile", str(prof), "-q"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "cost model profile" in res.stdout


# The tiny sweep of adaptiveload.calibrate: its token counts, and batches 1, 2, 4 (--max-batch 4).
TINY_TOKENS = [(1 + (f - 1) // 4) * (h // 16) * (w // 16) for f, h, w in calibrate.SHAPES["tiny"]]
TINY_BATCHES = [1, 2, 4]


def test_calibration_fit_recovers_a_known_model(tmp_path):
    """The fit, on measurements generated from a known cost and memory model with 3% noise
    (a loaded machine's timings would test the machine, not the fit)."""
    truth = dict(a=2e-5, b=1e-7, c0=5e-4, overhead_s=2e-3, half=64.0, static_bytes=3e8, m0=2e6, m1=4e4)

    def seconds(S, B):
        return truth["overhead_s"] + (truth["a"] * S + truth["b"] * S * S + truth["c0"]) * (B + truth["half"] / S)

    rng = random.Random(0)
    points = [{"tokens": S, "batch": B, "time_s": seconds(S, B) * (1 + 0.03 * (2 * rng.random() - 1)),
               "peak_bytes": truth["static_bytes"] + B * (truth["m0"] + truth["m1"] * S)}
              for S in TINY_TOKENS for B in TINY_BATCHES]
    profile, summary = calibrate.fit(points, "tiny-dit", "cpu")
    assert summary["points"] == len(points) == 18
    assert summary["median_rel_error"] < 0.15, summary
    for S in TINY_TOKENS:  # the fitted model predicts the noiseless truth
        for B in TINY_BATCHES:
            fit = summary["overhead_s"] + (summary["a"] * S + summary["b"] * S * S + summary["c0"]) * (
                B + summary["half_efficiency_tokens"] / S)
            assert abs(fit - seconds(S, B)) / seconds(S, B) < 0.06, (S, B, fit, seconds(S, B))
    assert summary["has_memory"]
    for k in ("static_bytes", "m0", "m1"):  # peak memory is exact (no noise): so is its fit
        assert abs(summary[k] - truth[k]) / truth[k] < 0.02, (k, summary)
    prof = tmp_path / "profile.json"
    prof.write_text(profile + "\n")
    p = json.loads(prof.read_text())
    assert p["format"] == "adaptiveload-profile" and p["fit"]["points"] == 18
    s = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny", profile=str(prof),
                                          world_size=2, rank=0, mem_budget=4096)
    assert s.num_steps > 0
    cli_plans_with(prof)


def test_calibration_reports_held_out_measurements_without_fitting_them():
    """Held-out measurements (shapes the sweep measures but does not fit) are errors of
    prediction: exact points of a known model predict an unseen shape within rounding, and a
    held-out point 30% off is reported as 0.3 / 1.3 without pulling the fit."""
    def seconds(S, B):
        return 2e-3 + (2e-5 * S + 1e-7 * S * S + 5e-4) * (B + 64.0 / S)

    fitted = [{"tokens": S, "batch": B, "time_s": seconds(S, B)} for S in TINY_TOKENS[:-1] for B in TINY_BATCHES]
    S = TINY_TOKENS[-1]
    held = [{"tokens": S, "batch": B, "time_s": seconds(S, B)} for B in TINY_BATCHES]
    profile, summary = calibrate.fit(fitted, "tiny-dit", "cpu", held)
    assert summary["points"] == len(fitted) and summary["held_out_points"] == 3
    assert summary["held_out_max_rel_error"] < 0.01, summary
    assert json.loads(profile)["fit"]["held_out_points"] == 3
    held[1] = dict(held[1], time_s=1.3 * held[1]["time_s"])
    _, off = calibrate.fit(fitted, "tiny-dit", "cpu", held)
    assert abs(off["held_out_max_rel_error"] - 0.3 / 1.3) < 0.01 and off["held_out_median_rel_error"] < 0.01, off
    assert (off["a"], off["b"]) == (summary["a"], summary["b"])  # not fitted
    assert calibrate.fit(fitted, "tiny-dit", "cpu")[1]["held_out_points"] == 0
    with pytest.raises(ValueError, match="held-out measurement 0 has no time_s"):
        calibrate.fit(fitted, "tiny-dit", "cpu", [{"tokens": 10, "batch": 1}])


def test_calibration_on_cpu_measures_the_sweep_and_writes_a_usable_profile(tmp_path):
    """The real measuring run. Its timings are whatever this machine gives, so it asserts the
    work done (every point of the sweep, measured once) and a usable profile, not how well the
    times fit (test_calibration_fit_recovers_a_known_model does that). One thread on the thread
    clock, as scripts/cpu_eval.sh calibrates: on the wall clock a loaded CI machine (a parallel
    build beside it) gave fits 25-58% off, some flat (a = b = 0), which the planner then refuses
    for its exponent p; on the thread clock the same load gave 3-7%."""
    prof, meas = tmp_path / "profile.json", tmp_path / "measurements.jsonl"
    summary = calibrate.main(["--config", "tiny", "--device", "cpu", "--threads", "1", "--clock", "thread",
                              "--out", str(prof), "--max-batch", "4", "--reps", "2", "--measurements-out", str(meas)])
    points = [json.loads(line) for line in meas.read_text().splitlines()]
    assert sorted((pt["tokens"], pt["batch"]) for pt in points) == sorted(
        (S, B) for S in TINY_TOKENS for B in TINY_BATCHES)
    assert all(math.isfinite(pt["time_s"]) and pt["time_s"] > 0 for pt in points)
    assert summary["points"] == len(points)
    for k in ("a", "b", "c0", "overhead_s", "half_efficiency_tokens", "median_rel_error", "max_rel_error"):
        assert math.isfinite(summary[k]) and summary[k] >= 0, (k, summary)
    p = json.loads(prof.read_text())
    assert p["format"] == "adaptiveload-profile" and p["fit"]["points"] == len(points)
    # The optimizer step, timed once a repetition (at least 5) over the model's parameters.
    params = sum(x.numel() for x in wan_dit.WanDiT(wan_dit.config("tiny")).parameters())
    assert p["step"]["optimizer"] == "AdamW" and p["step"]["parameters"] == params and p["step"]["reps"] == 5
    assert math.isfinite(p["step"]["optimizer_s"]) and p["step"]["optimizer_s"] > 0
    assert summary["step"] == p["step"]
    # The sampler and the planner accept it, and price the optimizer step once a step.
    s = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny", profile=str(prof),
                                          world_size=2, rank=0, mem_budget=4096)
    assert s.num_steps > 0
    assert s.budgets["step_fixed_s"] == p["step"]["optimizer_s"]
    plain = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny",
                                              world_size=2, rank=0, mem_budget=4096)
    assert plain.budgets["step_fixed_s"] == 0.0  # the analytic model prices no optimizer step
    cli_plans_with(prof)


def test_online_adaptation_replans_and_trains_every_sample_once(tmp_path):
    """Real training and timing with a refit after every step. The fitted model and so the
    re-planned rest of the epoch depend on this machine's speed; what does not is asserted:
    a refit at every step boundary from the first one with enough observations, coefficients
    that are usable, and every sample trained exactly once across the re-plans. (How well a
    refit finds the cost model is test_hardening.test_adaptation_to_a_known_cost_model.)"""
    from adaptiveload import sampler as sampler_module

    # A small slice of the real manifests, trained for a whole epoch with a refit after every step.
    small = tmp_path / "small.csv"
    with open(MANIFESTS[0]) as f:
        rows = f.read().splitlines()[:201]
    with open(MANIFESTS[1]) as f:
        rows += f.read().splitlines()[1:201]
    small.write_text("\n".join(rows) + "\n")
    log, out = tmp_path / "ids.jsonl", tmp_path / "out.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (r,) = train_dit.main(["--config", "tiny", "--device", "cpu", "--threads", "2", "-m", str(small),
                               "--strategy", "balanced", "--world-size", "3", "--steps", "1000", "--warmup", "0",
                               "--adapt-every", "1", "--log-samples", str(log), "--out", str(out)])
    check_summary(r)
    s = adaptiveload.AdaptiveBatchSampler(str(small), model="tiny-dit", device="cpu", grid="tiny", world_size=3,
                                          rank=0, mem_budget=4096, checkpointing=False)
    # The first refit: after the first step with MIN_OBSERVATIONS rank-steps at 3 or more token
    # counts, read off the initial plan (which no timing changes).
    seen, k0 = set(), None
    for k, _ in enumerate(s.steps()):
        seen.update(s._planner(3).row_geometry(mb[0])[3] for rank in range(3) for mb in s._plan.rank_step(k, rank))
        if (k + 1) * 3 >= sampler_module.MIN_OBSERVATIONS and len(seen) >= 3:
            k0 = k
            break
    steps = r["measured"]["steps"]  # the whole (re-planned) epoch ran: --steps exceeds it
    assert k0 is not None and k0 + 1 < steps
    skipped = sorted(int(re.search(r"after step (\d+)", str(w.message)).group(1)) + 1 for w in caught
                     if "skipped the refit" in str(w.message))
    refits = [a["step"] for a in r["adaptations"]]
    assert sorted(refits + skipped) == list(range(k0 + 1, steps)), (k0, steps, refits, skipped)
    assert len(r["adaptations"]) >= 1, skipped
    for a in r["adaptations"]:
        assert math.isfinite(a["median_rel_error"]) and a["a"] >= 0 and a["b"] >= 0
    got = collections.Counter(i for line in open(log) for i in json.loads(line)["ids"])
    assert sorted(got) == s.planned_rows()
    assert set(got.values()) == {1}, "a sample was trained twice across re-plans"
