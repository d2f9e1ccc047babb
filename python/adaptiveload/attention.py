"""Variable-length (packed) attention: several samples concatenated into one token sequence,
each attending only to itself (block-diagonal attention), in flash-attention's varlen layout.

    out = varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k)
    # q [total_q, H, d], k and v [total_k, H_kv, d] (H a multiple of H_kv), out [total_q, H, d];
    # rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q attend to rows cu_seqlens_k[i]:cu_seqlens_k[i+1]
    # of k and v: self-attention with cu_seqlens_k = cu_seqlens_q, cross-attention to each
    # sample's own text with the text's offsets.

Backends (`backend=`): "flash" (flash-attention's flash_attn_varlen_func; CUDA, fp16 / bf16),
"flex" (PyTorch's FlexAttention with a document mask over the whole pack; forward only on the
CPU, where PyTorch has no FlexAttention backward), "sdpa" (PyTorch's
scaled_dot_product_attention on each segment), or "auto": flash where it is installed and the
tensors qualify, else sdpa. Every backend computes the same function; forward and backward
equal per-sample attention (python/tests/test_attention.py). The attention cost is the sum of
the segments' L_q x L_k, not the pack's total squared, which is what the planner's packed cost
model assumes (docs/planner.md).
"""
from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["varlen_attention", "check_cu_seqlens", "segment_ids"]

BACKENDS = ("auto", "flash", "flex", "sdpa")


def _flash_varlen():
    try:
        from flash_attn import flash_attn_varlen_func  # type: ignore
    except ImportError:
        return None
    return flash_attn_varlen_func


def check_cu_seqlens(cu: torch.Tensor, total: int, name: str) -> torch.Tensor:
    """Checks segment offsets: a 1-D int32 / int64 tensor [n + 1], 0 first, non-decreasing,
    `total` last (empty segments allowed). Returns it as int64 on the CPU, for indexing."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of segment offsets, got {type(cu).__name__}")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must be 1-D with n + 1 >= 2 offsets (n segments), got shape {tuple(cu.shape)}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be int32 or int64, got {cu.dtype}")
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


def _check(q, k, v, cu_q, cu_k):
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
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"varlen_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"varlen_attention: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")
    cq = check_cu_seqlens(cu_q, q.shape[0], "cu_seqlens_q")
    ck = check_cu_seqlens(cu_k, k.shape[0], "cu_seqlens_k")
    if cq.numel() != ck.numel():
        raise ValueError(f"varlen_attention: cu_seqlens_q has {cq.numel() - 1} segments, cu_seqlens_k "
                         f"{ck.numel() - 1}; every query segment attends to its own key segment")
    lq, lk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
    bad = torch.nonzero((lq > 0) & (lk == 0))
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"varlen_attention: segment {i} has {int(lq[i])} query rows but no key rows: "
                         "attention over nothing is undefined (give each non-empty query segment keys)")
    return cq, ck


def _sdpa_segments(q, k, v, cq, ck, scale):
    rep = q.shape[1] // k.shape[1]
    outs = []
    for i in range(cq.numel() - 1):
        a, b, c, d = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if b == a:
            continue
        qi = q[a:b].transpose(0, 1)  # [H, Lq, d]
        ki = k[c:d].transpose(0, 1)
        vi = v[c:d].transpose(0, 1)
        if rep > 1:
            ki, vi = ki.repeat_interleave(rep, 0), vi.repeat_interleave(rep, 0)
        outs.append(F.scaled_dot_product_attention(qi, ki, vi, scale=scale).transpose(0, 1))
    if not outs:
        return q.new_zeros(q.shape)
    return torch.cat(outs, 0)


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
    None). softmax_scale: default 1 / sqrt(head_dim). A segment with no query rows contributes
    nothing; one with query rows and no key rows is an error."""
    if backend not in BACKENDS:
        raise ValueError(f"varlen_attention: backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    cq, ck = _check(q, k, v, cu_seqlens_q, cu_seqlens_k)
    flash = _flash_varlen()
    flash_ok = flash is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
    if backend == "flash" and not flash_ok:
        why = ("flash-attention is not installed" if flash is None else
               "it needs CUDA tensors in float16 or bfloat16, got " + f"{q.device.type} {q.dtype}")
        raise RuntimeError(f"varlen_attention: backend 'flash' cannot run: {why}; use backend='auto'")
    if backend == "flash" or (backend == "auto" and flash_ok):
        lq, lk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
        return flash(q, k, v, cu_seqlens_q.to(q.device, torch.int32), cu_seqlens_k.to(q.device, torch.int32),
                     int(max_seqlen_q if max_seqlen_q is not None else lq.max()),
                     int(max_seqlen_k if max_seqlen_k is not None else lk.max()), softmax_scale=softmax_scale)
    if backend == "flex":
        return _flex(q, k, v, cq, ck, softmax_scale)
    return _sdpa_segments(q, k, v, cq, ck, softmax_scale)
