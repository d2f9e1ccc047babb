"""Fault tests with real processes: a two-process torchrun (gloo, CPU) trains a tiny model
with the sampler, checkpointing model + optimizer + sampler state after every step; the
whole process group is SIGKILLed mid-epoch and the run is restarted from its last
checkpoint, with the same or another world size. Every sample of the epoch must be trained
exactly once, and the model must come out bit-identical to an uninterrupted run. A manifest
that changed between runs is refused.

Commit protocol (what "trained" means): after its optimizer step every rank appends the step
number and the sample ids it trained to its own log (flushed and fsynced), all ranks meet at
a barrier, and only then rank 0 writes the checkpoint (temp file + os.replace, atomic). A
step is trained iff a committed checkpoint covers it: log lines of an attempt count only for
steps below the step the next attempt resumed from (the last checkpoint that attempt
committed); the final attempt runs to the end of the epoch.

This file is also the worker: torchrun runs it as a script (`python test_faults.py ...`).
"""
import argparse
import collections
import contextlib
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import time

from conftest import kill_tree
from conftest import torchrun as run_under_torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 5
DIM = 6
# A small token budget so that a few hundred rows make a couple of dozen steps.
SAMPLER = dict(strategy="balanced", seed=SEED, mem_budget=100_000)


def features(ids):
    """Deterministic inputs and targets of samples `ids` (what a dataset would load)."""
    import torch

    xs, ys = [], []
    for i in ids:
        g = torch.Generator().manual_seed(1000 + int(i))
        x = torch.randn(DIM, generator=g)
        xs.append(x)
        ys.append(x.sum() * 0.5 + 0.1 * (int(i) % 7))
    return torch.stack(xs), torch.stack(ys)


def worker(argv):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from adaptiveload import AdaptiveBatchSampler

    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--attempt", type=int, required=True)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--hold-at", type=int, default=-1,
                    help="in this step, once every rank logged it and before it is committed, wait to be killed")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt = os.path.join(a.run_dir, "ckpt.pt")
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = AdaptiveBatchSampler(a.manifest, **SAMPLER)
    resumed_from = 0
    if os.path.exists(ckpt):
        ck = torch.load(ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sampler.load_state_dict(ck["sampler"])
        resumed_from = ck["steps_done"]
    assert sampler.step == resumed_from
    ddp = DDP(model)
    log = open(os.path.join(a.run_dir, f"log_a{a.attempt}_r{rank}.jsonl"), "a")
    if rank == 0:
        with open(os.path.join(a.run_dir, f"attempt{a.attempt}.json"), "w") as f:
            json.dump({"resumed_from": resumed_from, "world_size": world, "num_steps": sampler.num_steps}, f)
    for st in sampler.steps():
        ids = []
        for i, mb in enumerate(st.micro_batches):
            x, y = features(mb)
            sync = i + 1 == len(st.micro_batches)
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss = ((ddp(x).squeeze(1) - y) ** 2).sum() * world / (st.global_samples + st.padded_samples)
                loss.backward()
            ids += mb
        opt.step()
        opt.zero_grad()
        log.write(json.dumps({"step": st.step, "ids": ids, "padded": st.padded_samples}) + "\n")
        log.flush()
        os.fsync(log.fileno())
        dist.barrier()  # every rank's log of this step is on disk before the commit
        if st.step == a.hold_at:
            # The kill lands here, however fast or slow the machine is: mid-epoch, with this
            # step logged by every rank but not committed (so it must not count as trained).
            if rank == 0:
                open(os.path.join(a.run_dir, "holding"), "w").close()
            while True:
                time.sleep(1)
        if rank == 0:
            tmp = ckpt + ".tmp"
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "sampler": sampler.state_dict(),
                 "steps_done": st.step + 1},
                tmp,
            )
            os.replace(tmp, ckpt)
        time.sleep(a.sleep)
    dist.barrier()
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(a.run_dir, "final_model.pt"))
        with open(os.path.join(a.run_dir, "done"), "w") as f:
            f.write(str(sampler.num_steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    worker(sys.argv[1:])
    sys.exit(0)

# ----------------------------------------------------------------------------- the tests
import pytest  # noqa: E402
import torch  # noqa: E402

from adaptiveload import AdaptiveBatchSampler  # noqa: E402


def write_manifest(path, rows=520, seed=3):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "num_frames", "height", "width", "fps"])
        for i in range(rows):
            if rng.random() < 0.5:
                w.writerow([f"v{i}.mp4", rng.randrange(17, 300), rng.choice([360, 480, 720]),
                            rng.choice([640, 854, 1280]), rng.choice([24, 30])])
            else:
                w.writerow([f"i{i}.jpg", 1, rng.choice([360, 480, 720, 1024]), rng.choice([480, 640, 1024]), ""])


def torchrun(nproc, run_dir, manifest, attempt, sleep=0.0, kill_at_step=None, timeout=900):
    """Runs the worker under torchrun; with kill_at_step, the workers hold in that step after
    logging it and before committing it, and the whole process group (agent and workers) is
    SIGKILLed then. `timeout` only guards against a hang (a loaded machine is slow, not wrong)."""
    cmd, env = run_under_torchrun(nproc, os.path.join(run_dir, f"torchrun_a{attempt}"))
    cmd += [os.path.abspath(__file__), "--manifest", manifest, "--run-dir", run_dir, "--attempt", str(attempt),
            "--sleep", str(sleep)]
    if kill_at_step is not None:
        cmd += ["--hold-at", str(kill_at_step)]
    out = open(os.path.join(run_dir, f"torchrun_a{attempt}.out"), "w")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + timeout
    killed = False
    try:
        while proc.poll() is None:
            if time.time() > deadline:
                raise AssertionError(f"torchrun attempt {attempt} timed out")
            if kill_at_step is not None and os.path.exists(os.path.join(run_dir, "holding")):
                kill_tree(proc.pid)
                killed = True
                proc.wait()
                os.remove(os.path.join(run_dir, "holding"))
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
        out.close()
    text = open(os.path.join(run_dir, f"torchrun_a{attempt}.out")).read()
    if kill_at_step is None:
        assert proc.returncode == 0, text[-4000:]
    return killed, text


def trained_log(run_dir):
    """(sample id -> times trained, padded repeats) over the committed steps of all attempts."""
    attempts = sorted(int(n[7:-5]) for n in os.listdir(run_dir) if n.startswith("attempt") and n.endswith(".json"))
    info = {a: json.load(open(os.path.join(run_dir, f"attempt{a}.json"))) for a in attempts}
    count, padded, steps_seen = collections.Counter(), 0, []
    for k, a in enumerate(attempts):
        start = info[a]["resumed_from"]
        end = info[attempts[k + 1]]["resumed_from"] if k + 1 < len(attempts) else info[a]["num_steps"]
        step_padded = {}
        for r in range(info[a]["world_size"]):
            path = os.path.join(run_dir, f"log_a{a}_r{r}.jsonl")
            for line in open(path) if os.path.exists(path) else []:
                e = json.loads(line)
                if start <= e["step"] < end:
                    count.update(e["ids"])
                    step_padded[e["step"]] = e["padded"]
        assert sorted(step_padded) == list(range(start, end)), f"attempt {a}: committed steps missing from the log"
        padded += sum(step_padded.values())
        steps_seen += sorted(step_padded)
    assert steps_seen == list(range(len(steps_seen))), "a step was run twice or skipped"
    return count, padded, info


def assert_exactly_once(run_dir, manifest):
    count, padded, info = trained_log(run_dir)
    planned = AdaptiveBatchSampler(manifest, **SAMPLER, world_size=2).planned_rows()
    assert set(count) == set(planned), f"lost: {sorted(set(planned) - set(count))[:10]}"
    assert sum(c - 1 for c in count.values()) == padded, "a sample was trained twice (beyond the padded repeats)"
    return info


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A W=2 run SIGKILLed about a third into the epoch; its directory is copied per test."""
    base = tmp_path_factory.mktemp("faults")
    manifest = str(base / "manifest.csv")
    write_manifest(manifest)
    steps = AdaptiveBatchSampler(manifest, **SAMPLER, world_size=2).num_steps
    assert steps >= 12, steps
    run = base / "killed"
    run.mkdir()
    killed, text = torchrun(2, str(run), manifest, attempt=0, kill_at_step=steps // 3)
    assert killed and not (run / "done").exists(), "the run finished before the kill: " + text[-2000:]
    done = torch.load(run / "ckpt.pt")["steps_done"]
    assert steps // 3 <= done < steps
    return manifest, run, steps


def test_sigkill_mid_epoch_then_restart_trains_every_sample_once(killed_run, tmp_path):
    manifest, killed, steps = killed_run
    run = tmp_path / "run"
    shutil.copytree(killed, run)
    torchrun(2, str(run), manifest, attempt=1)
    assert (run / "done").exists()
    info = assert_exactly_once(str(run), manifest)
    assert 0 < info[1]["resumed_from"] < steps
    # Bit-identical to an uninterrupted run: the checkpoint holds everything training needs.
    ref = tmp_path / "ref"
    ref.mkdir()
    torchrun(2, str(ref), manifest, attempt=0)
    assert_exactly_once(str(ref), manifest)
    a, b = torch.load(run / "final_model.pt"), torch.load(ref / "final_model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed model differs from the uninterrupted one"


@pytest.mark.parametrize("new_world", [1, 3])
def test_restart_with_another_world_size(killed_run, tmp_path, new_world):
    manifest, killed, steps = killed_run
    run = tmp_path / "run"
    shutil.copytree(killed, run)
    torchrun(new_world, str(run), manifest, attempt=1)
    assert (run / "done").exists()
    info = assert_exactly_once(str(run), manifest)
    assert info[1]["world_size"] == new_world


def test_changed_manifest_is_refused_on_restart(killed_run, tmp_path):
    manifest, killed, _ = killed_run
    state = torch.load(killed / "ckpt.pt")["sampler"]
    rows = open(manifest).read().splitlines()
    changed = tmp_path / "manifest.csv"
    # One clip re-encoded at another height between the runs.
    parts = rows[5].split(",")
    parts[2] = "240" if parts[2] != "240" else "360"
    changed.write_text("\n".join(rows[:5] + [",".join(parts)] + rows[6:]) + "\n")
    sampler = AdaptiveBatchSampler(str(changed), **SAMPLER, world_size=2, rank=0)
    with pytest.raises(ValueError, match="another manifest or planner configuration.*fingerprint mismatch"):
        sampler.load_state_dict(state)
    # A row removed, and another seed: refused too.
    removed = tmp_path / "removed.csv"
    removed.write_text("\n".join(rows[:-1]) + "\n")
    with pytest.raises(ValueError, match="fingerprint mismatch"):
        AdaptiveBatchSampler(str(removed), **SAMPLER, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        AdaptiveBatchSampler(manifest, **dict(SAMPLER, seed=SEED + 1), world_size=2).load_state_dict(state)
    # The unchanged manifest still resumes.
    AdaptiveBatchSampler(manifest, **SAMPLER, world_size=2).load_state_dict(state)
