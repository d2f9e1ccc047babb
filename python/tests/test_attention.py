"""varlen_attention against attention computed sample by sample (fp64, explicit softmax), forward
and backward, for the sdpa and flex backends on the CPU (flash needs a GPU and flash-attention)."""
import math

import pytest
import torch

from adaptiveload.attention import check_cu_seqlens, segment_ids, varlen_attention


def cu(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32)


def reference(q, k, v, lq, lk, scale=None):
    """Per sample: softmax(q k^T * scale) v in float64, heads repeated for grouped k / v."""
    out, a, c = [], 0, 0
    rep = q.shape[1] // k.shape[1]
    for nq, nk in zip(lq, lk):
        qi = q[a:a + nq].double().transpose(0, 1)
        ki = k[c:c + nk].double().transpose(0, 1).repeat_interleave(rep, 0)
        vi = v[c:c + nk].double().transpose(0, 1).repeat_interleave(rep, 0)
        s = (scale if scale is not None else 1 / math.sqrt(q.shape[2]))
        w = torch.softmax(qi @ ki.transpose(1, 2) * s, -1)
        out.append((w @ vi).transpose(0, 1))
        a, c = a + nq, c + nk
    return torch.cat(out, 0) if out else q.new_zeros(q.shape, dtype=torch.float64)


CASES = [
    # (query lengths, key lengths (None: self-attention), heads q, heads kv)
    ([7], None, 2, 2),                     # one segment
    ([1, 5, 16, 3], None, 3, 3),           # lengths 1 and many
    ([4, 0, 9, 0, 2], None, 2, 2),         # empty segments
    ([6, 11, 2], [3, 8, 5], 4, 4),         # cross-attention: text of another length per sample
    ([5, 0, 7], [2, 4, 6], 2, 2),          # cross, an empty query segment with keys
    ([10, 3], None, 4, 2),                 # grouped heads (GQA)
]


@pytest.mark.parametrize("backend", ["sdpa", "flex", "auto"])
@pytest.mark.parametrize("lq,lk,hq,hk", CASES)
def test_forward_and_backward_equal_per_sample_attention(backend, lq, lk, hq, hk):
    lk = lq if lk is None else lk
    g = torch.Generator().manual_seed(len(lq) * 31 + hq)
    d = 8
    q = torch.randn(sum(lq), hq, d, generator=g, requires_grad=True)
    k = torch.randn(sum(lk), hk, d, generator=g, requires_grad=True)
    v = torch.randn(sum(lk), hk, d, generator=g, requires_grad=True)
    if backend == "flex":
        # PyTorch's FlexAttention has no backward on the CPU: the forward here, both on a GPU.
        q, k, v = q.detach(), k.detach(), v.detach()
        out = varlen_attention(q, k, v, cu(lq), cu(lk), backend=backend)
        torch.testing.assert_close(out.double(), reference(q, k, v, lq, lk), rtol=1e-5, atol=1e-5)
        return
    out = varlen_attention(q, k, v, cu(lq), cu(lk), backend=backend)
    ref = reference(q, k, v, lq, lk)
    assert out.shape == (sum(lq), hq, d)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), grad.float())
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for name, a, b in zip("qkv", got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5, msg=lambda m: f"d{name}: {m}")


def test_int64_offsets_and_a_custom_scale():
    lq = [3, 4]
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(7, 2, 4, generator=g) for _ in range(3))
    c = cu(lq).long()
    out = varlen_attention(q, k, v, c, c, softmax_scale=0.3)
    torch.testing.assert_close(out.double(), reference(q, k, v, lq, lq, 0.3), rtol=1e-5, atol=1e-5)


def test_segments_do_not_see_each_other():
    # Changing one sample's keys and values leaves every other sample's output unchanged.
    g = torch.Generator().manual_seed(5)
    lq = [4, 6, 3]
    q, k, v = (torch.randn(13, 2, 8, generator=g) for _ in range(3))
    base = varlen_attention(q, k, v, cu(lq), cu(lq))
    k2, v2 = k.clone(), v.clone()
    k2[4:10] += 3.0
    v2[4:10] -= 2.0
    moved = varlen_attention(q, k2, v2, cu(lq), cu(lq))
    torch.testing.assert_close(moved[:4], base[:4])
    torch.testing.assert_close(moved[10:], base[10:])
    assert not torch.allclose(moved[4:10], base[4:10])


def test_bad_offsets_are_refused_by_name():
    q = torch.randn(5, 2, 4)
    with pytest.raises(ValueError, match="cu_seqlens_q must start at 0"):
        varlen_attention(q, q, q, torch.tensor([1, 5], dtype=torch.int32), cu([5]))
    with pytest.raises(ValueError, match=r"cu_seqlens_k must end at the number of rows \(5\), got 4"):
        varlen_attention(q, q, q, cu([5]), torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="non-decreasing"):
        varlen_attention(q, q, q, torch.tensor([0, 3, 2, 5], dtype=torch.int32), cu([3, 0, 2]))
    with pytest.raises(ValueError, match="int32 or int64"):
        varlen_attention(q, q, q, torch.tensor([0.0, 5.0]), cu([5]))
    with pytest.raises(ValueError, match="2 segments, cu_seqlens_k 1"):
        varlen_attention(q, q, q, cu([2, 3]), cu([5]))
    with pytest.raises(ValueError, match="segment 1 has 3 query rows but no key rows"):
        varlen_attention(q, q[:2], q[:2], cu([2, 3]), cu([2, 0]))
    with pytest.raises(ValueError, match=r"q must be \[total, heads, head_dim\]"):
        varlen_attention(q[0], q, q, cu([5]), cu([5]))
    with pytest.raises(ValueError, match="not a multiple"):
        varlen_attention(torch.randn(5, 3, 4), q, q, cu([5]), cu([5]))
    with pytest.raises(ValueError, match="backend must be one of"):
        varlen_attention(q, q, q, cu([5]), cu([5]), backend="xformers")


def test_flash_backend_says_why_it_cannot_run_here():
    q = torch.randn(5, 2, 4)
    with pytest.raises(RuntimeError, match="backend 'flash' cannot run"):
        varlen_attention(q, q, q, cu([5]), cu([5]), backend="flash")


def test_segment_ids_and_offsets_helpers():
    assert segment_ids(cu([2, 0, 3]), 5).tolist() == [0, 0, 2, 2, 2]
    assert check_cu_seqlens(cu([1, 1]), 2, "x").dtype == torch.int64
