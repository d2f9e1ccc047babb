"""Makes `adaptiveload` importable from an in-place build (setup.py build_ext --inplace)
when it is not installed, and holds shared paths."""
import contextlib
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The real manifests (TaiChi-HD clips, COCO val images), shipped in the repository's data/.
DATASETS = os.path.join(REPO, "data")

try:
    import adaptiveload  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import adaptiveload  # noqa: F401


def torchrun(nproc, log_dir, extra_paths=()):
    """(command prefix, environment) to run a script under torchrun (torch.distributed.run)
    with `nproc` local processes on CPU: the package (and `extra_paths`) importable, one
    OpenMP thread per process."""
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(adaptiveload.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, *extra_paths] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc_per_node={nproc}",
           "--log_dir", str(log_dir)]
    return cmd, env


def run_guarded(cmd, env, timeout_s, what):
    """Runs `cmd` in a session of its own; returns (returncode, output, seconds). Past
    `timeout_s` the process and every descendant are SIGKILLed and the test fails naming
    `what`: a hang (a collective some rank never joined)."""
    import subprocess
    import time

    import pytest

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, _ = proc.communicate()
        pytest.fail(f"{what} did not finish within {timeout_s} s (a hang: a collective some rank never joined); "
                    f"killed its process group. Last output:\n{out[-3000:]}")
    return proc.returncode, out, time.perf_counter() - t0


def kill_tree(pid):
    """SIGKILLs pid's process group and every descendant. torch 2.11's elastic agent starts
    each worker in a session of its own, so killing the agent's group alone would leave
    workers blocked in a collective running on."""
    parents = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += [c for c, pp in parents.items() if pp == p]
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for p in tree:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)


def as_loaded_in_bf16(model):
    """A diffusers model as from_pretrained(torch_dtype=torch.bfloat16) loads it: fp32 where a
    name component is in _keep_in_fp32_modules (Wan: norm1..3, scale_shift_table,
    time_embedder, rope), bf16 elsewhere. Returns the model."""
    import torch

    keep = set(model._keep_in_fp32_modules)
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.is_floating_point():
                t.data = t.data.float() if keep & set(name.split(".")) else t.data.to(torch.bfloat16)
    return model
