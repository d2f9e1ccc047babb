"""WanDiT's packed forward (models/wan_dit_packed.py) against the unpacked model run sample by
sample (a batch of 1 each): outputs and every parameter's gradient, fp32 on the CPU, for packs
of 1, 2, 5 and 8 samples mixing images and clips of different frame counts and aspect ratios
with texts of different lengths; eager and fused adaLN; with and without activation
checkpointing; per-token timesteps; the packed flow-matching loss.

Tolerances: rtol 1e-5 (the acceptance), and an atol of the tensor's scale for the entries
that are sums of terms of both signs: the packed and per-sample runs add the same fp32 terms
in another order (the patch embedding as a matmul over [N, D] rows instead of a Conv3d,
per-sample gradients accumulated in one backward instead of n), so near zero only an error
relative to the tensor's largest magnitude means anything. Outputs: atol 1e-6 x max|ref|
(measured at most 3.7e-7 x). Gradients: 1e-5 x max|ref| (measured at most 5.4e-6 x, for
cross_attn.k.bias, whose exact gradient nearly cancels: softmax ignores a bias added to every
key, but for the RMSNorm after it; every other parameter at most 1.2e-6 x).
"""
import functools

import pytest
import torch

from adaptiveload.models import wan_dit
from adaptiveload.models.wan_dit_packed import flow_matching_loss_packed, forward_packed, predict_packed
from adaptiveload.packing import pack, unpack

C = 16
# (F, H, W) latents, patch (1, 2, 2): images (F = 1), clips of 2 to 4 frames, wide, tall, square,
# a single patch; and text lengths 1 to 16 (the tiny config's text_len).
SHAPES = [(1, 4, 6), (3, 4, 4), (2, 6, 2), (1, 2, 2), (4, 2, 4), (1, 8, 4), (2, 4, 8), (3, 2, 6)]
TEXT_LENS = [5, 16, 1, 9, 3, 12, 7, 2]


def make_model(fused=False, checkpointing=False, seed=0):
    torch.manual_seed(seed)
    m = wan_dit.WanDiT(wan_dit.config("tiny"), fused_adaln=fused, checkpointing=checkpointing)
    m.train()
    return m


def make_inputs(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = [(i * 3) % len(SHAPES) for i in range(n)]  # a different mix for each n, images and clips
    lat = [torch.randn(C, *SHAPES[j], generator=g) for j in idx]
    ctx = [torch.randn(TEXT_LENS[j], 32, generator=g) for j in idx]
    t = torch.rand(n, generator=g) * 1000
    w = [torch.randn(x.shape, generator=g) for x in lat]  # output weights: every output matters in the loss
    return lat, t, ctx, w


def grads(model):
    return {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def close(a, b, what, scale=1e-6):
    """assert_close at rtol 1e-5, atol `scale` x max|b| (see the module docstring)."""
    atol = scale * float(b.abs().max()) + 1e-12
    torch.testing.assert_close(a, b, rtol=1e-5, atol=atol, msg=lambda m: f"{what}: {m}")


def reference(model, lat, t, ctx, w):
    """The unpacked model, one sample at a time; gradients accumulated over the samples."""
    model.zero_grad(set_to_none=True)
    outs = []
    for i, x in enumerate(lat):
        y = model(x[None], t[i:i + 1], ctx[i][None])[0]
        (y * w[i]).sum().backward()
        outs.append(y.detach())
    return outs, grads(model)


def packed_run(model, lat, t, ctx, w):
    model.zero_grad(set_to_none=True)
    outs = predict_packed(model, lat, t, ctx)
    sum((y * wi).sum() for y, wi in zip(outs, w)).backward()
    return [y.detach() for y in outs], grads(model)


def check_equal(ref, got):
    (ro, rg), (po, pg) = ref, got
    assert [o.shape for o in po] == [o.shape for o in ro]
    for i, (a, b) in enumerate(zip(po, ro)):
        close(a, b, f"output of sample {i}")
    assert pg.keys() == rg.keys()
    for k in rg:
        close(pg[k], rg[k], f"gradient of {k}", scale=1e-5)


@functools.lru_cache(maxsize=None)
def reference_of(n, fused):
    """The per-sample reference for make_inputs(n, seed=n), computed once for both
    checkpointing settings (it never checkpoints)."""
    return reference(make_model(fused), *make_inputs(n, seed=n))


# Checkpointing on the packs of 2 and 8 only, to keep the file's run time down (it changes
# no numerics; the check is that the recomputation sees the same segments).
@pytest.mark.parametrize("n,checkpointing", [(1, False), (2, False), (5, False), (8, False), (2, True), (8, True)],
                         ids=["1", "2", "5", "8", "2-ckpt", "8-ckpt"])
@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
def test_packed_equals_sample_by_sample(n, checkpointing, fused):
    lat, t, ctx, w = make_inputs(n, seed=n)
    check_equal(reference_of(n, fused), packed_run(make_model(fused, checkpointing), lat, t, ctx, w))


def test_method_and_rows():
    """model.forward_packed is forward_packed; its rows are unpack's input in the pack's order."""
    model = make_model().eval()
    lat, t, ctx, _ = make_inputs(3)
    packed = pack(lat, model.c.patch, timesteps=t, text=ctx)
    with torch.no_grad():
        rows = model.forward_packed(packed)
        assert rows.shape == (int(packed.cu_seqlens[-1]), C * 4)
        torch.testing.assert_close(rows, forward_packed(model, packed), rtol=0, atol=0)
        for y, x, ti, c in zip(unpack(rows, packed), lat, t, ctx):
            close(y, model(x[None], ti[None], c[None])[0], "unpacked rows")


def _per_token_t(lat, t_sample):
    """Per-token timesteps in the pack's row order: frame 0 of each clip clean (t = 0, Wan 2.2
    TI2V's image-conditioned first frame), the other frames at the sample's t."""
    rows = []
    for x, ti in zip(lat, t_sample):
        F_, H, W = x.shape[1], x.shape[2] // 2, x.shape[3] // 2
        tt = torch.full((F_, H * W), float(ti))
        if F_ > 1:
            tt[0] = 0
        rows.append(tt.flatten())
    return torch.cat(rows)


@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
def test_per_token_timesteps(fused):
    """Per-token timesteps: constant within each sample they are the per-sample run; varying
    within samples, the pack equals each sample packed alone with its own rows' timesteps."""
    n = 5
    lat, t, ctx, w = make_inputs(n, seed=11)
    lengths = [x.shape[1] * (x.shape[2] // 2) * (x.shape[3] // 2) for x in lat]
    t_const = torch.repeat_interleave(t, torch.tensor(lengths))
    check_equal(reference(make_model(fused), lat, t, ctx, w), packed_run(make_model(fused, True), lat, t_const, ctx, w))

    t_tok = _per_token_t(lat, t)
    model = make_model(fused)
    model.zero_grad(set_to_none=True)
    outs, a = [], 0
    for i, x in enumerate(lat):
        y = predict_packed(model, [x], t_tok[a:a + lengths[i]], [ctx[i]])[0]
        (y * w[i]).sum().backward()
        outs.append(y.detach())
        a += lengths[i]
    alone = (outs, grads(model))
    check_equal(alone, packed_run(make_model(fused), lat, t_tok, ctx, w))
    # And the clean first frames did change the clips' outputs (the rows were read per token).
    with torch.no_grad():
        per_sample = predict_packed(model, lat, t, ctx)
    assert any(not torch.allclose(p, q) for p, q in zip(per_sample, outs))


def test_flow_matching_loss_packed():
    """The packed loss: the per-sample losses flow_matching_loss gives sample by sample from
    the same generator, and the gradient of their mean."""
    n = 5
    lat, _, ctx, _ = make_inputs(n, seed=21)
    model = make_model()
    model.zero_grad(set_to_none=True)
    g = torch.Generator().manual_seed(7)
    ref = torch.cat([wan_dit.flow_matching_loss(model, x[None], c[None], g) for x, c in zip(lat, ctx)])
    (ref.mean()).backward()
    ref_g = grads(model)
    model.zero_grad(set_to_none=True)
    got = flow_matching_loss_packed(model, lat, ctx, torch.Generator().manual_seed(7))
    assert got.shape == (n,)
    got.mean().backward()
    close(got.detach(), ref.detach(), "per-sample losses")
    for k, v in grads(model).items():
        close(v, ref_g[k], f"gradient of {k}", scale=1e-5)


def test_errors_name_what_is_wrong():
    model = make_model()
    lat, t, ctx, _ = make_inputs(2)
    with pytest.raises(ValueError, match="no timesteps"):
        forward_packed(model, pack(lat, model.c.patch, text=ctx))
    with pytest.raises(ValueError, match="no text"):
        forward_packed(model, pack(lat, model.c.patch, timesteps=t))
    with pytest.raises(ValueError, match="patch"):
        forward_packed(model, pack([x[:, :, :, :4] for x in lat], (1, 1, 2), timesteps=t, text=ctx))
    packed = pack(lat, model.c.patch, timesteps=t, text=ctx)
    packed.timesteps = torch.zeros(3)
    with pytest.raises(ValueError, match=r"timesteps must be \[2\] \(per sample\)"):
        forward_packed(model, packed)
    with pytest.raises(ValueError, match="text must be"):
        forward_packed(model, pack(lat, model.c.patch, timesteps=t, text=[c[:, :8] for c in ctx]))


def test_torch_compile():
    """torch.compile(fullgraph=True) of the packed forward with the fused kernel and activation
    checkpointing: one graph, no break (aot_eager: Dynamo's graph and AOT autograd through the
    ops' fake kernels, without inductor's C++ build time), holding every varlen attention (self
    and cross, a custom op: the offsets are read when the graph runs) and every fused adaLN
    site, inside the checkpointed blocks; outputs and gradients as sample by sample. Packs of
    other sizes and mixes of shapes then cost one recompile (Dynamo's automatic dynamic shapes:
    the sizes that changed become symbolic) and every further pack runs that graph: the RoPE
    positions are a tensor, and the grids never reach the graph. (dynamic=True from the start
    would trace eps symbolically, specialise it, and trace twice.)"""
    torch._dynamo.reset()
    lat, t, ctx, w = make_inputs(3, seed=3)
    ref = reference(make_model(True), lat, t, ctx, w)
    model = make_model(True, checkpointing=True)
    packed = pack(lat, model.c.patch, timesteps=t, text=ctx)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    step = torch.compile(lambda p: forward_packed(model, p), backend=backend, fullgraph=True)
    model.zero_grad(set_to_none=True)
    outs = unpack(step(packed), packed)
    sum((y * wi).sum() for y, wi in zip(outs, w)).backward()
    check_equal(ref, ([y.detach() for y in outs], grads(model)))
    assert len(graphs) == 1
    targets = [n.target for m in graphs[0].modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
    calls = lambda op: sum(n in (op, op.default) for n in targets)  # noqa: E731  (packet or overload)
    assert calls(torch.ops.adaptiveload.varlen_sdpa_fwd) == 2 * len(model.blocks)  # self- and cross-attention
    assert calls(torch.ops.adaptiveload.adaln_fwd) == 2 * len(model.blocks) + 1  # norm1, norm3; the head
    with torch.no_grad():
        for n in (5, 2, 8):
            lat, t, ctx, _ = make_inputs(n, seed=n)
            other = pack(lat, model.c.patch, timesteps=t, text=ctx)
            close(step(other), forward_packed(model, other), f"pack of {n}")
    assert len(graphs) == 2, f"{len(graphs)} graphs: packs of other layouts recompiled more than once"


def test_fused_modulation_reads_segments(monkeypatch):
    """With the fused kernel, every modulation site of a per-sample pack hands the kernel the
    samples' rows [n, D] and the pack's cu_seqlens (the kernel reads row i on sample i's rows),
    never per-token copies [N, D]; per-token timesteps pass [N, D] rows without offsets."""
    from adaptiveload import packing  # Segments.modulate, the packed forwards' one adaLN site

    calls = []
    real = packing.fused_adaln

    def spy(x, shift, scale, **kw):
        calls.append((x.shape[0], shift.shape[0], scale.shape[0], kw.get("cu_seqlens")))
        return real(x, shift, scale, **kw)

    monkeypatch.setattr(packing, "fused_adaln", spy)
    model = make_model(fused=True).eval()
    lat, t, ctx, _ = make_inputs(4, seed=3)
    packed = pack(lat, model.c.patch, timesteps=t, text=ctx)
    with torch.no_grad():
        forward_packed(model, packed)
    N, n = int(packed.cu_seqlens[-1]), 4
    assert len(calls) == 2 * len(model.blocks) + 1  # norm1 and norm3 of every block, and the head
    for rows, ns, nc, cu in calls:
        assert (rows, ns, nc) == (N, n, n)
        assert cu is not None and torch.equal(cu, packed.cu_seqlens)

    calls.clear()
    lengths = (packed.cu_seqlens[1:] - packed.cu_seqlens[:-1]).long()
    per_token = pack(lat, model.c.patch, timesteps=torch.repeat_interleave(t, lengths), text=ctx)
    with torch.no_grad():
        forward_packed(model, per_token)
    assert calls and all((rows, ns, nc, cu) == (N, N, N, None) for rows, ns, nc, cu in calls)
