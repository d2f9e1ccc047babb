#!/usr/bin/env python3
"""Train a Wan-2.1-style DiT on random latents (or a latent cache) shaped by a real manifest,
with batches from AdaptiveBatchSampler, and measure imbalance, throughput and peak memory
beside the planner's prediction. The harness is the package's adaptiveload.training.train_dit
(its docstring lists the modes and options; --help), built on the set-up any training script
can import from adaptiveload.training (process groups, DDP / FSDP2 wrapping, the loss
normalised from the sampler's PlannedStep).

  python examples/train_dit.py --config tiny --strategy balanced --world-size 4 --steps 6
  torchrun --nproc_per_node 2 examples/train_dit.py --parallel ddp --packing on --epoch --subset 100
"""
import os
import sys

try:
    import adaptiveload
except ImportError:  # running from a source checkout with the extension built in place
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import adaptiveload

try:
    from adaptiveload.training import train_dit
except ModuleNotFoundError as e:  # an adaptiveload installed from an older source, without the harness
    if e.name != "adaptiveload.training":
        raise
    sys.exit(f"train_dit.py: {e}: the adaptiveload imported ({os.path.dirname(adaptiveload.__file__)}) predates "
             "adaptiveload.training; install this checkout's (pip install .) or build it in place (python setup.py "
             "build_ext --inplace) and run with PYTHONPATH=python")

if __name__ == "__main__":
    train_dit.main(exit_process=True)
