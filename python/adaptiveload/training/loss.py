"""The training loss of a micro-batch and its normalisation over the step: flow matching with the
timestep and noise given (sequence-parallel or not), a pack's losses one ordinary batch per
shape, and the scale that makes a step's gradient the mean over its global samples (from the
sampler's PlannedStep), whatever the ranks, wrappers and groups."""
from typing import Dict, List, Optional

import torch

from .. import sequence_parallel as spl
from ..patches import patchify


def loss_scale(world: int, parallel: Optional[str]) -> int:
    """The factor of the loss that makes the step's gradient the mean over its global samples:
    DDP and FSDP2 average the gradients over the `world` ranks, so each rank scales by world;
    the explicit all-reduce (parallel None under torchrun) and emulated ranks sum (1).
    A micro-batch on a sequence-parallel group: each of its ranks back-propagates the whole
    samples' loss through its own tokens only, so its gradient is its share of the samples'
    gradient, and the sum over the group's ranks is the gradient once. The world's sum (the
    all-reduce, or DDP's / FSDP2's reduction times world) therefore counts each of a group's
    samples once, as sp_plan_worker.py's reduce_gradients over the group then 1/g on each rank
    does, without a collective per micro-batch: the normaliser counts it once too."""
    return world if parallel else 1


def step_loss(per_sample: torch.Tensor, step, scale: int = 1) -> torch.Tensor:
    """A micro-batch's loss for backward: its per-sample losses summed, times `scale`
    (loss_scale), over the step's samples (step: the sampler's PlannedStep, its
    global_samples and padded_samples). Padded repeats are trained too (every rank runs its
    micro-batches), so they count in the normaliser."""
    return per_sample.sum() * scale / (step.global_samples + step.padded_samples)


def buckets_loss(model, x0s, ctxs, t, noises) -> torch.Tensor:
    """A pack's per-sample losses [n] with one ordinary batch per shape (--packed-forward buckets):
    the samples of each shape stacked, flow_matching_loss_of, the losses back in pack order."""
    by_shape: Dict[tuple, List[int]] = {}
    for k, x0 in enumerate(x0s):
        by_shape.setdefault(tuple(x0.shape), []).append(k)
    parts, order = [], []
    for ks in by_shape.values():
        stack = lambda v: torch.stack([v[k] for k in ks])  # noqa: E731
        parts.append(flow_matching_loss_of(model, stack(x0s), stack(ctxs), t[ks], stack(noises)))
        order += ks
    per = torch.cat(parts)
    return per[torch.argsort(torch.tensor(order, device=per.device))]


def flow_matching_loss_of(model, x0, ctx, t, noise, sp: Optional[spl.SPContext] = None,
                          patch=(1, 2, 2)) -> torch.Tensor:
    """wan_dit.flow_matching_loss with the timestep t [B] and noise given: per-sample MSE [B].
    With sp (every rank of the group passing the same x0, ctx, t, noise; wan-dit only): the
    model returns this rank's shard of the patch predictions [B, S_p, C*pt*ph*pw]; each rank
    sums its shard's squared errors, the sums are added over the group, so every rank returns
    the whole samples' losses, and backward reaches only this rank's tokens (as
    wan_dit.flow_matching_loss(..., sp=) does)."""
    tt = t.view(-1, 1, 1, 1, 1).to(x0.dtype)
    xt = (1 - tt) * x0 + tt * noise
    if sp is not None:
        pred = model(xt, t * 1000, ctx, sp=sp)
        target = patchify(noise - x0, patch)
        start, end = sp.bounds(target.shape[1])
        partial = (pred.float() - target[:, start:end].float()).pow(2).flatten(1).sum(1)  # [B]
        return spl.all_reduce_sum(partial, sp) / x0[0].numel()
    pred = model(xt, t * 1000, ctx)
    return (pred.float() - (noise - x0).float()).pow(2).flatten(1).mean(1)
