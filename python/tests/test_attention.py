"""varlen_attention against attention computed sample by sample (fp64, explicit softmax), forward
and backward, for the sdpa and flex backends on the CPU (flash needs a GPU and flash-attention);
the sdpa backend's custom ops under torch.library.opcheck and torch.compile(fullgraph=True)."""
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
    ([3, 5, 3, 0, 3, 5], None, 2, 2),      # equal shapes apart: one batched call per shape, gathered
    ([4, 4, 4, 7], [2, 2, 2, 3], 4, 2),    # a run of equal shapes (a view), cross, grouped heads
    ([5, 5, 5], [3, 3, 3], 4, 2),          # one shape: the kernels' outputs are the pack's rows
    ([4, 0, 4], [2, 3, 2], 2, 2),          # one shape for the queries, keys of an empty one between
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


# The sdpa backend as custom ops (adaptiveload::varlen_sdpa_fwd / varlen_sdpa_bwd) under
# torch.library.opcheck and torch.compile(fullgraph=True). The cases: cross-attention with an
# empty query segment and grouped heads; self-attention with empty segments.
OP_CASES = [([5, 0, 7], [2, 4, 6], 4, 2), ([4, 0, 9, 0, 2], None, 2, 2)]


def make_qkv(lq, lk, hq, hk, seed, d=8, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lq), hq, d, generator=g)
    k, v = (torch.randn(sum(lk), hk, d, generator=g) for _ in range(2))
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def per_sample_sdpa(q, k, v, lq, lk):
    """Eager scaled_dot_product_attention sample by sample (autograd's own backward)."""
    out, a, c = [], 0, 0
    rep = q.shape[1] // k.shape[1]
    for nq, nk in zip(lq, lk):
        if nq:
            qi, ki, vi = (t.transpose(0, 1) for t in (q[a:a + nq], k[c:c + nk], v[c:c + nk]))
            ki, vi = ki.repeat_interleave(rep, 0), vi.repeat_interleave(rep, 0)
            out.append(torch.nn.functional.scaled_dot_product_attention(qi, ki, vi).transpose(0, 1))
        a, c = a + nq, c + nk
    return torch.cat(out, 0)


@pytest.mark.parametrize("lq,lk,hq,hk", OP_CASES)
def test_opcheck_sdpa_ops(lq, lk, hq, hk):
    """Schema, fake kernels, autograd registration, AOT dispatch with static and dynamic shapes
    (test_aot_dispatch_dynamic), for the forward with inputs that require grad and the backward."""
    from adaptiveload.attention import varlen_sdpa_bwd, varlen_sdpa_fwd

    lk = lq if lk is None else lk
    q, k, v = make_qkv(lq, lk, hq, hk, seed=len(lq))
    for c in (cu(lq), cu(lq).long()):
        torch.library.opcheck(varlen_sdpa_fwd, (q, k, v, c, cu(lk), None))
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    q, k, v = q.detach(), k.detach(), v.detach()
    out, lse = varlen_sdpa_fwd(q, k, v, cu(lq), cu(lk), 0.3)
    assert out.shape == q.shape and lse.shape == (sum(lq), hq) and lse.dtype == torch.float32
    torch.library.opcheck(varlen_sdpa_bwd, (grad, q, k, v, out, lse, cu(lq), cu(lk), 0.3))


@pytest.mark.parametrize("lq,lk,hq,hk", OP_CASES)
def test_fullgraph_compile_equals_per_sample_sdpa(lq, lk, hq, hk):
    """torch.compile(fullgraph=True) of varlen_attention, forward and backward, against eager
    SDPA sample by sample: fp32 within 1e-5. aot_eager: Dynamo's graph and AOT autograd's forward
    and backward graphs, through the fake kernels, without inductor's C++ build time (the op
    is opaque to inductor either way)."""
    torch._dynamo.reset()
    lk = lq if lk is None else lk
    q, k, v = make_qkv(lq, lk, hq, hk, seed=7)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    f = torch.compile(lambda *a: varlen_attention(*a, backend="sdpa"), fullgraph=True, backend=backend)
    out = f(q, k, v, cu(lq), cu(lk))
    ref = per_sample_sdpa(q, k, v, lq, lk)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for name, a, b in zip("qkv", got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"d{name}: {m}")
    op = torch.ops.adaptiveload.varlen_sdpa_fwd.default
    assert len(graphs) == 1 and [n.target for n in graphs[0].graph.nodes].count(op) == 1


def test_compiled_packs_of_any_layout_and_bad_offsets():
    """dynamic=True: one graph serves packs of other lengths and segment counts (the offsets are
    read when the graph runs, not when it is traced), and bad offsets raise the same ValueError
    from the compiled graph as eagerly. (The first pack's sizes are all different: Dynamo's duck
    sizing would otherwise guard on an equality they happen to have, and recompile.)"""
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    f = torch.compile(lambda *a: varlen_attention(*a), fullgraph=True, dynamic=True, backend=backend)
    for i, (lq, lk) in enumerate([([3, 6], [2, 4]), ([6, 0, 2, 7], [1, 3, 2, 5]), ([9, 4, 1], [4, 1, 3])]):
        q, k, v = make_qkv(lq, lk, 2, 1, seed=i)
        out = f(q, k, v, cu(lq), cu(lk))
        ref = per_sample_sdpa(q, k, v, lq, lk)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        for a, b in zip(torch.autograd.grad(out.sum(), (q, k, v)), torch.autograd.grad(ref.sum(), (q, k, v))):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert len(graphs) == 1, len(graphs)
    q = torch.randn(5, 2, 4)
    with pytest.raises(ValueError, match=r"cu_seqlens_k must end at the number of rows \(5\), got 4"):
        f(q, q, q, cu([2, 3]), torch.tensor([0, 1, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="segment 1 has 3 query rows but no key rows"):
        f(q, q[:2], q[:2], cu([2, 3]), cu([2, 0]))
    # A shape error is found while tracing: fullgraph=True reports the ValueError as Dynamo's
    # Unsupported ("observed exception"), naming it; without fullgraph it is the ValueError.
    with pytest.raises(torch._dynamo.exc.Unsupported, match="not a multiple"):
        f(torch.randn(5, 3, 4), q, q, cu([2, 3]), cu([2, 3]))


def test_bf16_and_direct_op_calls():
    """bf16: the op's fp32 backward within bf16 rounding of the fp64 reference; autocast casts
    fp32 inputs to bf16 before the op; the ops called directly check their arguments as
    varlen_attention does."""
    from adaptiveload.attention import varlen_sdpa_bwd, varlen_sdpa_fwd

    lq, lk = [6, 11, 2], [3, 8, 5]
    q, k, v = (t.detach().bfloat16().requires_grad_() for t in make_qkv(lq, lk, 4, 2, seed=3))
    out = varlen_attention(q, k, v, cu(lq), cu(lk))
    ref = reference(q, k, v, lq, lk)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), grad.bfloat16())
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for name, a, b in zip("qkv", got, want):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), b.double(), rtol=2e-2, atol=2e-2, msg=lambda m: f"d{name}: {m}")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # fp32 in: bf16 attention, as F.sdpa under autocast
        auto = varlen_attention(q.float(), k.float(), v.float(), cu(lq), cu(lk))
    assert auto.dtype == torch.bfloat16 and torch.equal(auto, out)
    x = torch.randn(5, 2, 4)
    with pytest.raises(ValueError, match="cu_seqlens_q must start at 0"):
        varlen_sdpa_fwd(x, x, x, torch.tensor([1, 5]), cu([5]), None)
    with pytest.raises(ValueError, match="head_dim of q"):
        varlen_sdpa_fwd(x, x[..., :2], x[..., :2], cu([5]), cu([5]), None)
    with pytest.raises(ValueError, match="grad_out"):
        varlen_sdpa_bwd(x[:4], x, x, x, x, x[..., 0], cu([5]), cu([5]), None)
    with pytest.raises(ValueError, match="logsumexp"):
        varlen_sdpa_bwd(x, x, x, x, x, x[:4, :, 0], cu([5]), cu([5]), None)


@pytest.mark.parametrize("lq,lk,hq,hk", CASES[-4:])
def test_recomputing_backward_off_the_cpu_kernels(monkeypatch, lq, lk, hq, hk):
    """The path for devices without PyTorch's fused CPU kernels (scaled_dot_product_attention per
    group, the backward recomputed in fp32), run here on the CPU: the same values as the fused
    path within 1e-5."""
    import adaptiveload.attention as attention

    lk = lq if lk is None else lk
    q, k, v = make_qkv(lq, lk, hq, hk, seed=11)
    grad = torch.randn(sum(lq), hq, 8, generator=torch.Generator().manual_seed(12))
    fused = varlen_attention(q, k, v, cu(lq), cu(lk), backend="sdpa")
    want = torch.autograd.grad(fused, (q, k, v), grad)
    monkeypatch.setattr(attention, "_fused_cpu", lambda t: False)
    out = varlen_attention(q, k, v, cu(lq), cu(lk), backend="sdpa")
    torch.testing.assert_close(out, fused, rtol=1e-5, atol=1e-5)
    for name, a, b in zip("qkv", torch.autograd.grad(out, (q, k, v), grad), want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"d{name}: {m}")
    qb, kb, vb = (t.detach().bfloat16().requires_grad_() for t in (q, k, v))  # gradients in the inputs' dtype
    outb = varlen_attention(qb, kb, vb, cu(lq), cu(lk), backend="sdpa")
    assert outb.dtype == torch.bfloat16
    assert all(t.dtype == torch.bfloat16 for t in torch.autograd.grad(outb, (qb, kb, vb), grad.bfloat16()))


def test_gradcheck_fp64():
    """gradcheck with its defaults on the fused CPU kernels in fp64: cross-attention, an empty
    query segment, two segments of one shape apart, grouped heads."""
    lq, lk = [3, 0, 2, 3], [2, 4, 3, 2]
    q, k, v = (t.detach().double().requires_grad_() for t in make_qkv(lq, lk, 4, 2, seed=13, d=4))
    assert torch.autograd.gradcheck(lambda *t: varlen_attention(*t, cu(lq), cu(lk), backend="sdpa"), (q, k, v))
