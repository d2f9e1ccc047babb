"""Variable-length (packed) attention: several samples concatenated into one token sequence,
each attending only to itself (block-diagonal attention), in flash-attention's varlen layout.

    out = varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k)
    # q [total_q, H, d], k and v [total_k, H_kv, d] (H a multiple of H_kv), out [total_q, H, d];
    # rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q attend to rows cu_seqlens_k[i]:cu_seqlens_k[i+1]
    # of k and v: self-attention with cu_seqlens_k = cu_seqlens_q, cross-attention to each
    # sample's own text with the text's offsets.

Backends (`backend=`): "flash" (flash-attention's flash_attn_varlen_func; CUDA, fp16 / bf16),
"flex" (PyTorch's FlexAttention with a document mask over the whole pack; forward only on the
CPU, where PyTorch has no FlexAttention backward), "sdpa" (one batched attention call per
group of equal-shape segments: PyTorch's fused CPU flash kernels on the CPU,
scaled_dot_product_attention elsewhere), or "auto": flash where it is installed and the
tensors qualify, else sdpa. Every backend computes the same function; forward and backward
equal per-sample attention (python/tests/test_attention.py). The attention cost is the sum of
the segments' L_q x L_k, not the pack's total squared, which is what the planner's packed cost
model assumes (docs/planner.md).

The sdpa backend is a custom op, torch.ops.adaptiveload.varlen_sdpa_fwd -> (out, logsumexp),
with its backward another, varlen_sdpa_bwd, which reads the saved out and logsumexp
(torch.library.custom_op: one implementation for every device, a fake kernel, autograd through
register_autograd). Only their implementations read the offsets on the host (grouping the
segments needs them there), so torch.compile(fullgraph=True) traces
varlen_attention as one opaque node whose fake kernel gives the output's shape from q and v
alone. The offsets' values (0 first, non-decreasing, the row count last, keys for every
non-empty query segment) are checked by those implementations, eagerly and when a compiled
graph runs, with the same ValueErrors; the shapes, dtypes and devices (the offsets on q's
device too: any mix is refused) by varlen_attention and the fake kernel, while tracing. The
flash and flex backends check the offsets on the host before they run (a graph break under
torch.compile).
"""
import importlib.util
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["varlen_attention", "check_cu_seqlens", "segment_ids", "varlen_sdpa_fwd", "varlen_sdpa_bwd"]

BACKENDS = ("auto", "flash", "flex", "sdpa")
# Looked up once: a try-import on every call would be traced by torch.compile.
_FLASH_INSTALLED = importlib.util.find_spec("flash_attn") is not None


def _flash_varlen():
    if not _FLASH_INSTALLED:
        return None
    try:
        from flash_attn import flash_attn_varlen_func  # type: ignore
    except ImportError:
        return None
    return flash_attn_varlen_func


def _check_offsets_tensor(cu, name: str) -> None:
    """What can be checked of segment offsets without reading them: type, rank, dtype."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of segment offsets, got {type(cu).__name__}")
    if cu.dim() != 1 or cu.shape[0] < 2:
        raise ValueError(f"{name} must be 1-D with n + 1 >= 2 offsets (n segments), got shape {tuple(cu.shape)}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be int32 or int64, got {cu.dtype}")


def check_cu_seqlens(cu: torch.Tensor, total: int, name: str) -> torch.Tensor:
    """Checks segment offsets: a 1-D int32 / int64 tensor [n + 1], 0 first, non-decreasing,
    `total` last (empty segments allowed). Returns it as int64 on the CPU, for indexing
    (a host read: a synchronisation for CUDA offsets, a graph break under torch.compile)."""
    _check_offsets_tensor(cu, name)
    c = cu.detach().to("cpu", torch.int64)
    if int(c[0]) != 0:
        raise ValueError(f"{name} must start at 0, got {int(c[0])}")
    if int(c[-1]) != total:
        raise ValueError(f"{name} must end at the number of rows ({total}), got {int(c[-1])}")
    steps = c[1:] - c[:-1]
    if bool((steps < 0).any()):
        i = int(torch.nonzero(steps < 0)[0])
        raise ValueError(f"{name} must be non-decreasing: offset {i + 1} ({int(c[i + 1])}) is below offset {i} "
                         f"({int(c[i])})")
    return c


def segment_ids(cu: torch.Tensor, total: int, device=None) -> torch.Tensor:
    """Per row, the segment it belongs to: [total] int64 (rows of empty segments do not exist)."""
    c = check_cu_seqlens(cu, total, "cu_seqlens")
    lengths = c[1:] - c[:-1]
    ids = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    return ids.to(device) if device is not None else ids


def _check_tensors(q, k, v, cu_q, cu_k) -> None:
    """varlen_attention's checks that read no tensor's values: shapes, dtypes, devices. Run
    eagerly, while torch.compile traces (size comparisons become guards) and by the ops'
    fake kernels, so a wrong shape raises the same ValueError everywhere."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"varlen_attention: {name} must be [total, heads, head_dim], got {shape}")
    if k.shape != v.shape:
        raise ValueError(f"varlen_attention: k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"varlen_attention: head_dim of q ({q.shape[2]}) and k ({k.shape[2]}) differ")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"varlen_attention: q's {q.shape[1]} heads are not a multiple of k's {k.shape[1]}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_floating_point():
            raise ValueError(f"varlen_attention: {name} has dtype {t.dtype}; attention needs floating-point q, k "
                             "and v (float16, bfloat16, float32 or float64)")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"varlen_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"varlen_attention: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")
    _check_offsets_tensor(cu_q, "cu_seqlens_q")
    _check_offsets_tensor(cu_k, "cu_seqlens_k")
    # Offsets on another device would send the op to that device's kernel (a meta tensor among
    # CPU ones runs the fake kernel, whose output is uninitialised memory): refused, every backend.
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if cu.device != q.device:
            raise ValueError(f"varlen_attention: {name} is on {cu.device} but q, k and v are on {q.device}; "
                             f"move the offsets to {q.device}")
    if cu_q.shape[0] != cu_k.shape[0]:
        raise ValueError(f"varlen_attention: cu_seqlens_q has {cu_q.shape[0] - 1} segments, cu_seqlens_k "
                         f"{cu_k.shape[0] - 1}; every query segment attends to its own key segment")


def _host_offsets(q, k, cu_q, cu_k) -> Tuple[torch.Tensor, torch.Tensor]:
    """The offsets' values checked (a host read) -> (cq, ck) int64 on the CPU."""
    cq = check_cu_seqlens(cu_q, q.shape[0], "cu_seqlens_q")
    ck = check_cu_seqlens(cu_k, k.shape[0], "cu_seqlens_k")
    lq, lk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
    bad = torch.nonzero((lq > 0) & (lk == 0))
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"varlen_attention: segment {i} has {int(lq[i])} query rows but no key rows: "
                         "attention over nothing is undefined (give each non-empty query segment keys)")
    return cq, ck


def _no_autocast(t):
    return torch.autocast(device_type=t.device.type, enabled=False)


def _groups(q, k, cu_q, cu_k) -> List[Tuple[int, int, List[int], List[int]]]:
    """The non-empty query segments grouped by shape, offsets checked: (L_q, L_k, first q rows,
    first k rows) per distinct (L_q, L_k), in order of first appearance. Each group runs as one
    batched attention call [G, H, L, d]: a pack of 30 images of one size is one call, not 30."""
    cq, ck = _host_offsets(q, k, cu_q, cu_k)
    groups = {}
    for a, b, c, d in zip(cq[:-1].tolist(), cq[1:].tolist(), ck[:-1].tolist(), ck[1:].tolist()):
        if b > a:
            g = groups.setdefault((b - a, d - c), ([], []))
            g[0].append(a)
            g[1].append(c)
    return [(lq, lk, a, c) for (lq, lk), (a, c) in groups.items()]


def _adjacent(starts: List[int], length: int) -> bool:
    return all(y - x == length for x, y in zip(starts, starts[1:]))


def _gather(t, starts: List[int], length: int):
    """Rows of G segments of `length` rows each, from t [N, H(, d)] -> [G, H, length(, d)]: a view
    when the segments are adjacent (a run of equal samples), else one index_select copy."""
    if _adjacent(starts, length):
        x = t[starts[0]:starts[0] + len(starts) * length]
    else:
        x = t.index_select(0, _row_index(starts, length, t.device))
    return x.view(len(starts), length, *t.shape[1:]).transpose(1, 2)


def _scatter(dst, starts: List[int], length: int, x) -> None:
    """_gather's inverse: x [G, H, length(, d)] written to its segments' rows of dst [N, H(, d)]."""
    rows = x.transpose(1, 2).reshape(-1, *dst.shape[1:]).to(dst.dtype)  # the recomputing path's are fp32
    if _adjacent(starts, length):
        dst[starts[0]:starts[0] + len(starts) * length] = rows
    else:
        dst.index_copy_(0, _row_index(starts, length, dst.device), rows)


def _key_rows(groups, like):
    """dk or dv [N_k, H_kv, d] for a group loop to write: uninitialised when the groups cover
    every key row (zeroing costs about a small segment's attention), else zeros (key rows of a
    segment without queries get zero gradients)."""
    covered = sum(len(c) * lk for _, lk, _, c in groups)
    return like.new_empty(like.shape) if covered == like.shape[0] else like.new_zeros(like.shape)


def _whole(groups, n: int) -> bool:
    """One group holding every query row in order: its kernel's outputs, [G, L, H, d] in memory,
    are the pack's [n, H, d] rows already, used as they are (the common pack of equal samples)."""
    return len(groups) == 1 and groups[0][2][0] == 0 and len(groups[0][2]) * groups[0][0] == n \
        and _adjacent(groups[0][2], groups[0][0])


def _rows_of(x, n: int):
    """x [G, H, L(, d)] in a whole pack's order -> [n, H(, d)] (a view of the kernels' outputs)."""
    return x.transpose(1, 2).reshape(n, *x.shape[1:2], *x.shape[3:]).contiguous()


def _row_index(starts: List[int], length: int, device):
    return (torch.tensor(starts)[:, None] + torch.arange(length)).reshape(-1).to(device)


def _lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _fused_cpu(t) -> bool:
    """PyTorch's fused CPU flash-attention kernels (forward with logsumexp, backward from it) take
    fp32, fp64, bf16 and fp16 CPU tensors (strided: no copies for our [G, H, L, d] views). They
    crash the process on an empty batch, which the groups never are."""
    return t.device.type == "cpu"


@torch.library.custom_op("adaptiveload::varlen_sdpa_fwd", mutates_args=())
def varlen_sdpa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, scale: Optional[float]) -> Tuple[torch.Tensor, torch.Tensor]:
    """varlen_attention's sdpa backend as an op -> (out [total_q, H, d_v] contiguous, logsumexp
    [total_q, H] fp32, fp64 for fp64 inputs): attention over each group of equal-shape segments
    in one call. On the CPU PyTorch's fused flash kernel, whose logsumexp (per query row and
    head, of the scaled scores) the backward reads; elsewhere scaled_dot_product_attention, and
    the logsumexp is zeros, unread (varlen_sdpa_bwd recomputes there). Reads the offsets on the
    host (checked)."""
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    groups = _groups(q, k, cu_seqlens_q, cu_seqlens_k)
    n, fused = q.shape[0], _fused_cpu(q)
    whole = fused and _whole(groups, n)
    if not whole:
        out = q.new_empty((n, q.shape[1], v.shape[2]))  # every row is in one segment
        lse = (q.new_empty if fused else q.new_zeros)((n, q.shape[1]), dtype=_lse_dtype(q.dtype))
    rep = q.shape[1] // k.shape[1]
    with _no_autocast(q):  # in the inputs' dtype: varlen_attention applies autocast before the op
        for lq, lk, a, c in groups:
            qg, kg, vg = _gather(q, a, lq), _gather(k, c, lk), _gather(v, c, lk)  # [G, heads, L, d]
            if rep > 1:
                kg, vg = kg.repeat_interleave(rep, 1), vg.repeat_interleave(rep, 1)
            if fused:
                og, lg = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    qg, kg, vg, dropout_p=0.0, is_causal=False, attn_mask=None, scale=scale)
                if whole:
                    return _rows_of(og, n), _rows_of(lg, n)
                _scatter(lse, a, lq, lg)
            else:
                og = F.scaled_dot_product_attention(qg, kg, vg, scale=scale)
            _scatter(out, a, lq, og)
    return out, lse


# Query rows per step of the recomputing backward: bounds each of its [G, H, rows, L_k] fp32
# temporaries (scores, probabilities, their gradient; a handful live at once) to 64 MiB
# whatever the segments' length.
_BWD_SCORES = 1 << 24


def _sdpa_bwd_recompute(do, q, k, v, scale):
    """Attention backward from the definition, for devices without the fused CPU kernel: do, q
    [G, H, Lq, d], k, v [G, H, Lk, d] -> (dq, dk, dv) in fp32 (fp64 for fp64 inputs).
    P = softmax(s q k^T) is recomputed; dv = P^T do, dS = P * (do v^T - rowsum(P * do v^T)),
    dq = s dS k, dk = s dS^T q, over blocks of query rows."""
    acc = _lse_dtype(q.dtype)
    s = scale if scale is not None else 1.0 / q.shape[-1] ** 0.5
    qh, doh, kh, vh = (t.to(acc) for t in (q, do, k, v))
    dq = torch.empty_like(qh)
    dk, dv = torch.zeros_like(kh), torch.zeros_like(vh)
    step = max(1, _BWD_SCORES // max(1, kh.shape[0] * kh.shape[1] * kh.shape[2]))
    for r in range(0, qh.shape[2], step):
        qr, dor = qh[:, :, r:r + step], doh[:, :, r:r + step]
        p = torch.softmax(qr @ kh.transpose(-1, -2) * s, -1)  # [G, H, rows, Lk]
        dp = dor @ vh.transpose(-1, -2)
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        dq[:, :, r:r + step] = ds @ kh * s
        dk += ds.transpose(-1, -2) @ qr * s
        dv += p.transpose(-1, -2) @ dor
    return dq, dk, dv


@torch.library.custom_op("adaptiveload::varlen_sdpa_bwd", mutates_args=())
def varlen_sdpa_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    out: torch.Tensor, logsumexp: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, scale: Optional[float]
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """varlen_sdpa_fwd's backward: (dq, dk, dv) in q's dtype, contiguous, from the forward's out
    and logsumexp, one call per group of equal-shape segments. On the CPU PyTorch's fused flash
    backward (nothing [L, L] is kept between the passes); elsewhere each group's softmax is
    recomputed and differentiated in fp32 (_sdpa_bwd_recompute: plain tensor ops, so it runs
    below autograd and under dispatch modes, where torch.func.vjp's wrappers do not). Key rows
    of a segment without queries get zero gradients. First order only."""
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    shape = (q.shape[0], q.shape[1], v.shape[2])
    for name, t in (("grad_out", grad_out), ("out", out)):
        if t.shape != shape:
            raise ValueError(f"varlen_attention backward: {name} {tuple(t.shape)} must be the output's shape {shape}")
    if logsumexp.shape != shape[:2]:
        raise ValueError(f"varlen_attention backward: logsumexp {tuple(logsumexp.shape)} must be [total_q, heads] "
                         f"{shape[:2]}")
    groups = _groups(q, k, cu_seqlens_q, cu_seqlens_k)
    whole = _whole(groups, q.shape[0]) and _whole([(g[1], g[0], g[3], g[2]) for g in groups], k.shape[0])
    if not whole:
        dq = q.new_empty(q.shape)  # every query row is in a non-empty segment
        dk, dv = _key_rows(groups, k), _key_rows(groups, v)
    Hk, rep = k.shape[1], q.shape[1] // k.shape[1]
    with _no_autocast(q):  # in the inputs' dtype (fp32 math when recomputing) even under autocast
        for lq, lk, a, c in groups:
            qg, kg, vg = _gather(q, a, lq), _gather(k, c, lk), _gather(v, c, lk)
            dog = _gather(grad_out, a, lq)
            if rep > 1:
                kg, vg = kg.repeat_interleave(rep, 1), vg.repeat_interleave(rep, 1)
            if _fused_cpu(q):
                dqg, dkg, dvg = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    dog, qg, kg, vg, _gather(out, a, lq), _gather(logsumexp, a, lq), 0.0, False,
                    attn_mask=None, scale=scale)
            else:
                dqg, dkg, dvg = _sdpa_bwd_recompute(dog, qg, kg, vg, scale)
            if rep > 1:  # grouped heads summed back to H_kv
                dkg, dvg = (t.unflatten(1, (Hk, rep)).sum(2) for t in (dkg, dvg))
            if whole:  # in q's dtype: the recomputing path's are fp32
                return tuple(_rows_of(g, t.shape[0]).to(t.dtype) for g, t in ((dqg, q), (dkg, k), (dvg, v)))
            _scatter(dq, a, lq, dqg)
            _scatter(dk, c, lk, dkg)
            _scatter(dv, c, lk, dvg)
    return dq, dk, dv


@varlen_sdpa_fwd.register_fake
def _varlen_sdpa_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, scale):
    # The offsets' values are data: the implementation checks them, not this kernel.
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[2])),
            q.new_empty((q.shape[0], q.shape[1]), dtype=_lse_dtype(q.dtype)))


@varlen_sdpa_bwd.register_fake
def _varlen_sdpa_bwd_fake(grad_out, q, k, v, out, logsumexp, cu_seqlens_q, cu_seqlens_k, scale):
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, scale = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)  # O(N) statistics: no [L, L] saved
    ctx.scale = scale


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = varlen_sdpa_bwd(grad_out, q, k, v, out, lse, cu_q, cu_k, ctx.scale)
    return dq, dk, dv, None, None, None


varlen_sdpa_fwd.register_autograd(_backward, setup_context=_setup_context)


def _flex(q, k, v, cq, ck, scale):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dq = segment_ids(cq, q.shape[0], q.device)
    dk = segment_ids(ck, k.shape[0], q.device)

    def same_segment(b, h, q_idx, kv_idx):
        return dq[q_idx] == dk[kv_idx]

    mask = create_block_mask(same_segment, None, None, q.shape[0], k.shape[0], device=q.device)
    rep = q.shape[1] // k.shape[1]
    out = flex_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                         block_mask=mask, scale=scale, enable_gqa=rep > 1)
    return out[0].transpose(0, 1)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: Optional[int] = None,
                     max_seqlen_k: Optional[int] = None, *, softmax_scale: Optional[float] = None,
                     backend: str = "auto") -> torch.Tensor:
    """Block-diagonal attention over packed segments (see the module docstring).
    max_seqlen_q / max_seqlen_k: the longest segment (flash-attention needs them; computed when
    None; the sdpa backend does not use them). softmax_scale: default 1 / sqrt(head_dim). A
    segment with no query rows contributes nothing; one with query rows and no key rows is an
    error. The sdpa backend traces under torch.compile(fullgraph=True)."""
    if backend not in BACKENDS:
        raise ValueError(f"varlen_attention: backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    _check_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k)
    scale = None if softmax_scale is None else float(softmax_scale)
    if torch.is_autocast_enabled(q.device.type) and q.is_floating_point():
        # As scaled_dot_product_attention under autocast (a lower-precision op): the ops have no
        # autocast kernel and compute in the dtype they are given.
        dtype = torch.get_autocast_dtype(q.device.type)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    flash = _flash_varlen()
    flash_ok = flash is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
    if backend == "flash" and not flash_ok:
        why = ("flash-attention is not installed" if flash is None else
               "it needs CUDA tensors in float16 or bfloat16, got " + f"{q.device.type} {q.dtype}")
        raise RuntimeError(f"varlen_attention: backend 'flash' cannot run: {why}; use backend='auto'")
    if backend == "flash" or (backend == "auto" and flash_ok):
        cq, ck = _host_offsets(q, k, cu_seqlens_q, cu_seqlens_k)
        lq, lk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
        return flash(q, k, v, cu_seqlens_q.to(q.device, torch.int32), cu_seqlens_k.to(q.device, torch.int32),
                     int(max_seqlen_q if max_seqlen_q is not None else lq.max()),
                     int(max_seqlen_k if max_seqlen_k is not None else lk.max()), softmax_scale=scale)
    if backend == "flex":
        cq, ck = _host_offsets(q, k, cu_seqlens_q, cu_seqlens_k)
        return _flex(q, k, v, cq, ck, scale)
    return varlen_sdpa_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, scale)[0]
