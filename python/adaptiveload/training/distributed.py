"""The distributed set-up of a training job: the process group (init_distributed, and
finish_distributed at the end), the model wrapped for DDP or FSDP2 (parallelize, in one place:
the model code stays unaware of it), a packed micro-batch through the wrapper (PackedForward),
the sequence-parallel groups made once per job, FSDP2's check that every rank runs the same
number of micro-batches, and the full state dict of a wrapped model."""
import os
import sys
from typing import Dict, List, Optional

import torch

from .. import sequence_parallel as spl
from ..packing import PackedBatch, pack, unpack
from .build import DiffusersWan, _adaptiveload_diffusers


def init_distributed(device: str) -> None:
    """The torchrun job's process group: NCCL for a CUDA --device, else gloo."""
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")


def exit_now() -> None:
    """Ends the process with status 0 at once (os._exit: no process-group or interpreter
    teardown), its output flushed; for a torchrun script whose ranks are all done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def finish_distributed(owns_group: bool, exit_process: bool) -> None:
    """The end of a torchrun job's run: every rank done (rank 0 may still be writing) before
    gloo's connections close, since a rank tearing down while another still talks to it can
    abort in gloo's threads; then, where this caller made the group (owns_group), it is
    destroyed, or with exit_process the process ends at once (exit_now). Tearing gloo down
    (destroy_process_group, then the interpreter's exit) aborts a rank now and then in gloo's
    threads ("terminate called without an active exception": 1 run in 6 to 19 of the FSDP2 x4
    test); ending the process, everything written and closed, skips that teardown."""
    torch.distributed.barrier()
    if owns_group and exit_process:
        exit_now()
    if owns_group:
        torch.distributed.destroy_process_group()


class PackedForward(torch.nn.Module):
    """The model on a PackedBatch -> its patch predictions [N, C*pt*ph*pw], as a module's forward
    (what DistributedDataParallel wraps: its gradient hooks are armed by its forward): wan-dit's
    forward_packed, or adaptiveload.diffusers.packed_forward for diffusers-wan. Given anything
    else (an ordinary batch: a packed plan's micro-batch of one shape), the model's forward."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        if len(args) != 1 or kwargs or not isinstance(args[0], PackedBatch):
            return self.model(*args, **kwargs)
        packed = args[0]
        if isinstance(self.model, DiffusersWan):
            # diffusers' packed forward takes lists (Wan's convention) and packs them itself:
            # the pack's samples and texts out, its per-sample predictions back to pack rows.
            cu = packed.cu_seqlens_text.tolist()
            texts = [packed.text[a:b] for a, b in zip(cu[:-1], cu[1:])]
            t = packed.timesteps
            if t.numel() != packed.num_samples:  # per token: each sample's rows
                t = list(torch.split(t, (packed.cu_seqlens[1:] - packed.cu_seqlens[:-1]).tolist()))
            preds = _adaptiveload_diffusers().packed_forward(self.model.inner, unpack(packed.tokens, packed), t, texts)
            return pack(preds, packed.patch).tokens
        return self.model.forward_packed(packed)


def parallelize(model: torch.nn.Module, parallel: Optional[str], device: torch.device,
                packed: bool = False) -> torch.nn.Module:
    """The parallel layout, in one place: the model the training loop calls (packed: the module
    the loop calls on a PackedBatch, a PackedForward). ddp: a DistributedDataParallel wrapper
    (buffers not broadcast in forward: ranks run different numbers of forwards per step in
    `step` mode, and the model's buffers are constant). fsdp2: fully_shard on each transformer
    block, then on the root (the embeddings and head), parameters become DTensor shards;
    resharded after forward (ZeRO-3); packed, the blocks' and the root's forward_packed are
    registered as forward methods, so FSDP2 gathers and reshards around them as around
    forward. On CPU this runs with gloo and fp32 parameters: no MixedPrecisionPolicy, no
    CPUOffloadPolicy needed."""
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(PackedForward(model) if packed else model, broadcast_buffers=False,
                                       device_ids=[device.index] if device.type == "cuda" else None)
    if parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        blocks = model.inner.blocks if isinstance(model, DiffusersWan) else model.blocks
        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        if packed:  # wan-dit (run_strategy refuses diffusers-wan packed under fsdp2)
            for block in blocks:
                register_fsdp_forward_method(block, "forward_packed")
            register_fsdp_forward_method(model, "forward_packed")
    return PackedForward(model) if packed else model


def check_micro_batch_counts(n: int, step: int, rank: int, world: int) -> None:
    """FSDP2 runs collectives in every micro-batch's forward and backward: a rank with fewer
    micro-batches than the others in a step would leave them waiting forever. All ranks
    gather every rank's count and all raise alike, so the job fails instead of hanging."""
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    torch.distributed.all_gather(counts, torch.tensor([n], dtype=torch.int64))
    counts = [int(x) for x in counts]
    if len(set(counts)) != 1:
        raise RuntimeError(f"train_dit.py --parallel fsdp2: rank {rank}, step {step}: micro-batches per rank "
                           f"{counts} differ; FSDP2 needs the same count on every rank (plan with sync='micro', "
                           f"--sync micro, or a one-micro-batch strategy such as dual)")


def full_state_dict(model: torch.nn.Module, parallel: Optional[str]) -> Dict[str, torch.Tensor]:
    """The unwrapped model's full state dict on CPU (a collective under fsdp2: every rank calls
    it; rank 0 gets the tensors)."""
    if parallel:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


_SP_GROUPS: Dict[tuple, dict] = {}


def sp_groups(world: int, sizes: List[int]) -> dict:
    """{(size, rank): SPContext} for the sizes the plan may use, created once per job
    (new_sp_groups is collective: every rank calls it, with the same sizes, in the same order)."""
    key = (world, tuple(sizes))
    if key not in _SP_GROUPS:
        _SP_GROUPS[key] = spl.new_sp_groups(world, sizes)
    return _SP_GROUPS[key]
