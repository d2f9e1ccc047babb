"""Training with the sampler's plans: the set-up any training loop over AdaptiveBatchSampler
shares, and the project's measuring harness built on it.

The set-up (import these in a training script):
    init_distributed(device)          the torchrun job's process group (NCCL on CUDA, else gloo)
    finish_distributed(owns, exit)    every rank done, then the group torn down (or the process ended)
    parallelize(model, "ddp" | "fsdp2" | None, device, packed=False)
                                      the model wrapped as the parallel layout needs, in one place
    PackedForward(model)              a PackedBatch through a wrapper's forward (DDP's hooks armed)
    full_state_dict(model, parallel)  the unwrapped model's state (FSDP2's shards gathered)
    check_micro_batch_counts(...)     FSDP2: every rank runs the step's same number of micro-batches
    loss_scale(world, parallel), step_loss(per_sample, planned_step, scale)
                                      the loss normalised over the step's global samples (PlannedStep)
    flow_matching_loss_of(...), buckets_loss(...)   the flow-matching loss with its draws given

The harness: train_dit (python -m adaptiveload.training.train_dit, or examples/train_dit.py)
trains the Wan-style DiT (or diffusers' Wan) on a plan and measures it beside the prediction;
compare runs it per strategy and writes the table (docs/evaluation.md). Its pieces: options
(the command line), inputs (random inputs at the planned buckets), data_feed (a latent
cache's), subset (manifest subsets), metrics (timing and the metrics), build (the models).
"""
from .distributed import (
    PackedForward,
    check_micro_batch_counts,
    finish_distributed,
    full_state_dict,
    init_distributed,
    parallelize,
)
from .loss import buckets_loss, flow_matching_loss_of, loss_scale, step_loss

__all__ = ["PackedForward", "check_micro_batch_counts", "finish_distributed", "full_state_dict", "init_distributed",
           "parallelize", "buckets_loss", "flow_matching_loss_of", "loss_scale", "step_loss"]
