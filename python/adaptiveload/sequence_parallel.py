"""Ulysses sequence parallelism (DeepSpeed-Ulysses, arXiv 2309.14509) over a torch.distributed group.

A sample's token sequence [B, S, ...] is split along S over the g ranks of its group: position p
holds tokens [start_p, end_p), an uneven split in which the first S % g positions get one token
more. Nothing is padded and nothing is masked: attention sees exactly the S real tokens, and a
shard may be empty when S < g. Per-token work (projections, norms, RoPE at global positions,
cross-attention to the replicated text, FFN, adaLN, the head) runs on the shard. Self-attention
needs every token: `seq_to_heads` turns the shard's [B, S/g, H, d] into [B, S, H/g, d] (all
tokens, this position's H/g heads), attention runs per head, `heads_to_seq` turns the result back.
Both are autograd Functions whose backward is the other one (an all-to-all is a permutation, so
its adjoint is its inverse).

The exchange is torch.distributed.all_to_all_single on one flat buffer with per-position split
sizes, which also carries the uneven sequence split. gloo on CPU supports it, uneven splits
included, in torch 2.11; the list form all_to_all raises "Backend gloo does not support
alltoall" there, so it is not used. A group of size 1 is the identity and calls nothing in
torch.distributed.

    groups = new_sp_groups(world, (1, 2, 4))          # on every rank, once
    sp = groups[(size, dist.get_rank())]              # per step: this rank's group of that size
    loss = flow_matching_loss(model, x0, ctx, gen, sp=sp).mean()   # same x0, ctx, gen on the group
    loss.backward(); reduce_gradients(model.parameters(), sp)       # = the non-parallel gradients
"""
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist


def split_sizes(n: int, g: int) -> List[int]:
    """Tokens per position when n tokens are split over g: the first n % g get one more."""
    return [n // g + (1 if p < n % g else 0) for p in range(g)]


class SPContext(NamedTuple):
    """One rank's view of its sequence-parallel group: the process group (None: the default
    group, or no communication when size is 1), the group's global ranks in order, and this
    rank's position in them (its rank inside the group)."""

    group: Optional[object]
    ranks: Tuple[int, ...]
    position: int

    @property
    def size(self) -> int:
        return len(self.ranks)

    def bounds(self, n: int) -> Tuple[int, int]:
        """[start, end) of this position's shard of an n-token sequence."""
        sizes = split_sizes(n, self.size)
        start = sum(sizes[: self.position])
        return start, start + sizes[self.position]

    def check_heads(self, heads: int, where: str = "model") -> None:
        if heads % self.size:
            raise ValueError(
                f"sequence parallelism over a group of {self.size} ranks {list(self.ranks)} splits the "
                f"attention heads evenly, but the {where} has heads={heads}, not divisible by {self.size}; "
                f"use a group size that divides {heads}")


def local_context(rank: int = 0) -> SPContext:
    """A group of one: the sequence-parallel path with no communication."""
    return SPContext(None, (rank,), 0)


def new_sp_groups(world_size: int, sizes: Iterable[int],
                  backend: Optional[str] = None) -> Dict[Tuple[int, int], SPContext]:
    """Creates, with torch.distributed.new_group, the aligned groups of consecutive ranks for
    every size in `sizes` ([0], [1], ... for 1; [0, 1], [2, 3], ... for 2; ...), smallest size
    first, so every rank makes the same calls in the same order whatever order it passes.
    Collective: every rank of the default group must call it. Returns {(size, rank):
    SPContext} for every size and every rank; a handle is usable only on its members."""
    if not dist.is_initialized():
        raise RuntimeError("new_sp_groups: torch.distributed is not initialized (call init_process_group first)")
    if world_size != dist.get_world_size():
        raise ValueError(f"new_sp_groups: world_size={world_size} but the default group has "
                         f"{dist.get_world_size()} ranks")
    sizes = sorted({int(s) for s in sizes})
    bad = [s for s in sizes if s < 1 or world_size % s]
    if bad or not sizes:
        raise ValueError(f"new_sp_groups: group sizes {bad or sizes} do not divide world_size={world_size} "
                         f"(each size must be >= 1 and divide the world size)")
    lookup: Dict[Tuple[int, int], SPContext] = {}
    for s in sizes:
        for start in range(0, world_size, s):
            ranks = tuple(range(start, start + s))
            group = dist.new_group(list(ranks), backend=backend)
            for p, r in enumerate(ranks):
                lookup[(s, r)] = SPContext(group, ranks, p)
    return lookup


def _all_to_all(x: torch.Tensor, sp: SPContext, scatter_dim: int, scatter_sizes: Sequence[int],
                gather_dim: int, gather_sizes: Sequence[int]) -> torch.Tensor:
    """Sends x's chunk `scatter_sizes[j]` along scatter_dim to position j; receives from each
    position j its chunk for us, whose gather_dim has size gather_sizes[j]; concatenates those
    along gather_dim. One all_to_all_single over flat contiguous buffers."""
    p = sp.position
    send = x.split(list(scatter_sizes), scatter_dim)
    shapes = []
    for n in gather_sizes:
        shape = list(x.shape)
        shape[scatter_dim], shape[gather_dim] = scatter_sizes[p], n
        shapes.append(shape)
    in_splits = [t.numel() for t in send]
    out_splits = [int(torch.Size(s).numel()) for s in shapes]
    send_buf = torch.cat([t.reshape(-1) for t in send])
    recv_buf = torch.empty(sum(out_splits), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(recv_buf, send_buf, output_split_sizes=out_splits, input_split_sizes=in_splits,
                           group=sp.group)
    parts = [t.view(s) for t, s in zip(recv_buf.split(out_splits), shapes)]
    return torch.cat(parts, gather_dim)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sp, seq_dim, head_dim, seq_sizes):
        ctx.args = (sp, seq_dim, head_dim, seq_sizes)
        hg = [x.shape[head_dim] // sp.size] * sp.size
        return _all_to_all(x, sp, head_dim, hg, seq_dim, seq_sizes)

    @staticmethod
    def backward(ctx, grad):
        sp, seq_dim, head_dim, seq_sizes = ctx.args
        hg = [grad.shape[head_dim]] * sp.size
        return _all_to_all(grad.contiguous(), sp, seq_dim, seq_sizes, head_dim, hg), None, None, None, None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sp, seq_dim, head_dim, seq_sizes):
        ctx.args = (sp, seq_dim, head_dim, seq_sizes)
        hg = [x.shape[head_dim]] * sp.size
        return _all_to_all(x, sp, seq_dim, seq_sizes, head_dim, hg)

    @staticmethod
    def backward(ctx, grad):
        sp, seq_dim, head_dim, seq_sizes = ctx.args
        hg = [grad.shape[head_dim] // sp.size] * sp.size
        return _all_to_all(grad.contiguous(), sp, head_dim, hg, seq_dim, seq_sizes), None, None, None, None


def seq_to_heads(x: torch.Tensor, sp: SPContext, seq_len: int, seq_dim: int = 1, head_dim: int = 2) -> torch.Tensor:
    """This position's shard [.., S_p, .., H, ..] of a seq_len-token sequence -> every token for
    its heads [.., seq_len, .., H/g, ..] (positions' heads in order). Identity for a group of one."""
    if sp.size == 1:
        return x
    seq_dim, head_dim = seq_dim % x.dim(), head_dim % x.dim()
    sp.check_heads(x.shape[head_dim], f"tensor of shape {list(x.shape)} (head dim {head_dim})")
    sizes = split_sizes(seq_len, sp.size)
    if x.shape[seq_dim] != sizes[sp.position]:
        raise ValueError(f"seq_to_heads: position {sp.position} of {sp.size} holds {sizes[sp.position]} of "
                         f"{seq_len} tokens, but the tensor has {x.shape[seq_dim]} on dim {seq_dim} "
                         f"(shape {list(x.shape)})")
    return _SeqToHeads.apply(x.contiguous(), sp, seq_dim, head_dim, tuple(sizes))


def heads_to_seq(x: torch.Tensor, sp: SPContext, seq_dim: int = 1, head_dim: int = 2) -> torch.Tensor:
    """The inverse of seq_to_heads: [.., S, .., H/g, ..] -> this position's shard [.., S_p, .., H, ..]."""
    if sp.size == 1:
        return x
    seq_dim, head_dim = seq_dim % x.dim(), head_dim % x.dim()
    sizes = split_sizes(x.shape[seq_dim], sp.size)
    return _HeadsToSeq.apply(x.contiguous(), sp, seq_dim, head_dim, tuple(sizes))


def shard(x: torch.Tensor, sp: SPContext, dim: int = 1) -> torch.Tensor:
    """This position's slice of a sequence that every rank of the group holds whole (a view)."""
    start, end = sp.bounds(x.shape[dim])
    return x.narrow(dim, start, end - start)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sp, dim, seq_len):
        ctx.args = (sp, dim, seq_len)
        sizes = split_sizes(seq_len, sp.size)
        pad = list(x.shape)
        pad[dim] = max(sizes) - x.shape[dim]
        # all_gather needs equal sizes on gloo: pad every shard to the longest, trim after.
        xp = torch.cat([x, x.new_zeros(pad)], dim).contiguous()
        out = [torch.empty_like(xp) for _ in range(sp.size)]
        dist.all_gather(out, xp, group=sp.group)
        return torch.cat([t.narrow(dim, 0, n) for t, n in zip(out, sizes)], dim)

    @staticmethod
    def backward(ctx, grad):
        sp, dim, seq_len = ctx.args
        start, end = sp.bounds(seq_len)
        return grad.narrow(dim, start, end - start), None, None, None


def unshard(x: torch.Tensor, sp: SPContext, seq_len: int, dim: int = 1) -> torch.Tensor:
    """Gathers the group's shards of a seq_len-token sequence into the whole sequence on every
    rank. Backward takes this position's slice: right when every rank then computes the same
    thing from the whole sequence (one replica of the computation, not g of them)."""
    if sp.size == 1:
        return x
    dim = dim % x.dim()
    return _Gather.apply(x, sp, dim, seq_len)


class _SumForwardIdentityBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sp):
        out = x.clone()
        dist.all_reduce(out, group=sp.group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def all_reduce_sum(x: torch.Tensor, sp: SPContext) -> torch.Tensor:
    """Sum of the group's partial values (a loss's partial sums). Backward is the identity:
    every rank holds the same total and back-propagates it through its own part only."""
    if sp.size == 1:
        return x
    return _SumForwardIdentityBackward.apply(x, sp)


def reduce_gradients(params: Iterable[torch.nn.Parameter], sp: SPContext) -> None:
    """Sums the .grad of replicated parameters over the group (one all_reduce per dtype): each
    rank's gradient covers its own tokens, the sum is the gradient of the whole sample. Call
    after backward, before any data-parallel averaging over groups."""
    if sp.size == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    for dtype in sorted({g.dtype for g in grads}, key=str):
        same = [g for g in grads if g.dtype == dtype]
        flat = torch.cat([g.reshape(-1) for g in same])
        dist.all_reduce(flat, group=sp.group)
        offset = 0
        for g in same:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


__all__ = ["SPContext", "all_reduce_sum", "heads_to_seq", "local_context", "new_sp_groups", "reduce_gradients",
           "seq_to_heads", "shard", "split_sizes", "unshard"]
