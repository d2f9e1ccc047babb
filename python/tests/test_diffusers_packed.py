"""adaptiveload.diffusers.packed_forward (diffusers_packed.py) against diffusers' own, unpatched
WanTransformer3DModel run sample by sample (a batch of 1 each): outputs and the gradients of
every parameter, the latents and the texts, for packs of 1 to 8 samples mixing images (F = 1)
and clips of different lengths and aspect ratios with texts of different lengths; per-sample
and per-token (Wan 2.2 TI2V) timesteps; eager, with diffusers' gradient checkpointing, with
use_fused_adaln applied, under torch.compile; fp32 and bf16. Then the refusals.

Tolerances. fp32: rtol 1e-5 and an atol of the tensor's scale, as test_wan_dit_packed.py
argues: the pack adds the same fp32 terms in another order (the patch embedding as a matmul
instead of a Conv3d, fused_adaln's statistics instead of FP32LayerNorm's, the per-sample
gradients accumulated in one backward instead of n), so near zero only an error relative to
the tensor's largest magnitude means anything: outputs 1e-6 x max|ref|, gradients 1e-5 x.
bf16 (diffusers' from_pretrained(torch_dtype=bf16) layout, and fp32 weights under bf16
autocast): the project's reduced-precision rule (test_diffusers_wan.py, docs/testing.md): per
tensor, the pack's error against the unpatched model run sample by sample in fp32 is at most
2x the unpatched bf16 model's own error against it plus one bf16 ulp of the tensor's largest
value. The worst errors are printed with -s.
"""
import copy
import functools

import pytest
import torch

from conftest import as_loaded_in_bf16

pytest.importorskip("diffusers")
import diffusers  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.models.transformers import transformer_wan  # noqa: E402

from adaptiveload import diffusers as al_diffusers  # noqa: E402
from adaptiveload import diffusers_packed  # noqa: E402

# 2 blocks, dim 32 (2 heads of 16: RoPE t/h/w 8/4/4), ffn 64, text 16 wide.
TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=64, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32)
# (F, H, W) latents, patch (1, 2, 2): images, clips of 2 to 4 frames, wide, tall, square, one patch.
SHAPES = [(1, 4, 6), (3, 4, 4), (2, 6, 2), (1, 2, 2), (4, 2, 4), (1, 8, 4), (2, 4, 8), (3, 2, 6)]
TEXT_LENS = [5, 16, 1, 9, 3, 12, 7, 2]
BF16_ULP = 2.0**-8
ERRORS = {}  # case -> (output error, gradient error), relative to max|ref|, printed at the end


def make_model(dtype="fp32", seed=0, **overrides):
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**{**TINY, **overrides})
    if dtype == "bf16":
        as_loaded_in_bf16(model)
    return model


def make_inputs(n, seed, model, per_token=False, mixed=False):
    """n samples (a different mix of shapes for each seed), texts, timesteps [n] or, per token,
    one [L_i] each with the first frame clean (t = 0, TI2V's conditioning frame); `mixed`: every
    other sample's entry a single number (per sample within a per-token pack). Output weights
    w: every output element matters in the loss."""
    g = torch.Generator().manual_seed(seed)
    c, p = model.config, model.config.patch_size
    idx = [(seed + 3 * i) % len(SHAPES) for i in range(n)]
    lat = [torch.randn(c.in_channels, *SHAPES[j], generator=g) for j in idx]
    txt = [torch.randn(TEXT_LENS[j], c.text_dim, generator=g) for j in idx]
    t = torch.rand(n, generator=g) * 1000
    if per_token:
        ts = []
        for i, x in enumerate(lat):
            grid = (x.shape[1] // p[0], x.shape[2] // p[1], x.shape[3] // p[2])
            tt = torch.full(grid, float(t[i]))
            tt[0] = 0 if grid[0] > 1 else tt[0]
            ts.append(t[i:i + 1] if mixed and i % 2 else tt.flatten())
        t = ts
    c_out = c.out_channels or c.in_channels
    w = [torch.randn(c_out, *x.shape[1:], generator=g) for x in lat]
    return lat, t, txt, w


def run(model, lat, t, txt, w, packed, dtype="fp32", fp32_reference=False):
    """Outputs and gradients {name: grad} (parameters, then 'latents[i]', 'texts[i]') of
    sum_i (y_i * w_i).sum(), the pack at once or diffusers' forward sample by sample."""
    if fp32_reference:
        model = copy.deepcopy(model).float()
    io = torch.bfloat16 if dtype == "bf16" and not fp32_reference else torch.float32
    lat = [x.detach().to(io, copy=True).requires_grad_() for x in lat]
    txt = [e.detach().to(io, copy=True).requires_grad_() for e in txt]
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16-autocast" and not fp32_reference):
        if packed:
            outs = packed(model, lat, t, txt)
            sum((y.float() * wi).sum() for y, wi in zip(outs, w)).backward()
        else:
            outs = []
            for i, x in enumerate(lat):
                ti = t[i].reshape(1, -1) if isinstance(t, list) else t[i:i + 1]  # [1, L] per token, [1]
                y = model(x[None], ti.expand(1, -1) if ti.numel() > 1 else ti.flatten(), txt[i][None]).sample[0]
                (y.float() * w[i]).sum().backward()
                outs.append(y)
    grads = {k: p.grad for k, p in model.named_parameters()}
    grads.update({f"latents[{i}]": x.grad for i, x in enumerate(lat)})
    grads.update({f"texts[{i}]": e.grad for i, e in enumerate(txt)})
    return [y.detach() for y in outs], grads


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def compare(got, ref, key, dtype="fp32", ref32=None):
    (po, pg), (ro, rg) = got, ref
    assert [o.shape for o in po] == [o.shape for o in ro] and [o.dtype for o in po] == [o.dtype for o in ro]
    assert pg.keys() == rg.keys() and all(g is not None for g in pg.values())
    ERRORS[key] = (max(rel(a, b) for a, b in zip(po, ro)), max(rel(pg[k], rg[k]) for k in rg))
    if dtype == "fp32":
        for i, (a, b) in enumerate(zip(po, ro)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()) + 1e-12,
                                       msg=lambda m: f"{key}: output of sample {i}: {m}")
        for k in rg:
            torch.testing.assert_close(pg[k], rg[k], rtol=1e-5, atol=1e-5 * float(rg[k].abs().max()) + 1e-12,
                                       msg=lambda m: f"{key}: gradient of {k}: {m}")
        return
    (o32, g32) = ref32
    pairs = [(f"output {i}", po[i], ro[i], o32[i]) for i in range(len(po))]
    pairs += [(f"gradient of {k}", pg[k], rg[k], g32[k]) for k in rg]
    # against fp32: the pack's and diffusers' bf16 errors, outputs and gradients (worst tensor)
    outs, grads = pairs[:len(po)], pairs[len(po):]
    ERRORS[key] = (max(rel(a, r) for _, a, _, r in outs), max(rel(a, r) for _, a, _, r in grads),
                   max(rel(a0, r) for _, _, a0, r in outs), max(rel(a0, r) for _, _, a0, r in grads))
    for name, a, a0, r in pairs:
        packed_err, eager_err = (a.float() - r).abs().max(), (a0.float() - r).abs().max()
        bound = 2 * eager_err + BF16_ULP * r.abs().max()
        assert packed_err <= bound, f"{key}: {name}: error vs fp32 {packed_err:.3g} > 2 x unpatched's " \
                                    f"{eager_err:.3g} + 1 ulp"


def check(model, n, seed, key, dtype="fp32", per_token=False, mixed=False, packed=al_diffusers.packed_forward):
    lat, t, txt, w = make_inputs(n, seed, model, per_token, mixed)
    ref = run(model, lat, t, txt, w, None, dtype)
    ref32 = None if dtype == "fp32" else run(model, lat, t, txt, w, None, dtype, fp32_reference=True)
    compare(run(model, lat, t, txt, w, packed, dtype), ref, key, dtype, ref32)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_matches_diffusers_sample_by_sample(n):
    check(make_model(), n, seed=n, key=("fp32", "per-sample", f"n={n}", "eager"))


@pytest.mark.parametrize("mixed", [False, True], ids=["per-token", "mixed"])
def test_per_token_timesteps(mixed):
    """Wan 2.2 TI2V: timestep [1, L_i] per sample in the reference; the clean first frames reach
    their rows (the pack differs from the per-sample run). `mixed`: some samples one value."""
    model = make_model()
    check(model, 5, seed=11, key=("fp32", "mixed" if mixed else "per-token", "n=5", "eager"), per_token=True,
          mixed=mixed)
    lat, t, txt, _ = make_inputs(5, 11, model, per_token=True)
    with torch.no_grad():
        a = al_diffusers.packed_forward(model, lat, t, txt)
        b = al_diffusers.packed_forward(model, lat, torch.stack([ti[-1] for ti in t]), txt)
    assert any(not torch.allclose(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("per_token", [False, True], ids=["per-sample", "per-token"])
def test_gradient_checkpointing(per_token, monkeypatch):
    """model.enable_gradient_checkpointing(): the pack's blocks run through the model's
    _gradient_checkpointing_func (counted), recomputed in the backward, same results."""
    model = make_model()
    model.enable_gradient_checkpointing()
    calls = []
    real = model._gradient_checkpointing_func
    for m in model.modules():  # diffusers sets it on every module with gradient_checkpointing
        if hasattr(m, "_gradient_checkpointing_func"):
            monkeypatch.setattr(m, "_gradient_checkpointing_func", lambda *a: calls.append(1) or real(*a))
    check(model, 3, seed=5, key=("fp32", "per-token" if per_token else "per-sample", "n=3", "checkpointing"),
          per_token=per_token)
    assert len(calls) == TINY["num_layers"] * (3 + 1)  # per block: the 3 reference forwards and the pack's


def test_with_use_fused_adaln_and_another_config():
    """packed_forward is the same on a model patched with use_fused_adaln (it calls neither
    forward); on a config with another patch, out_channels != in_channels and no
    cross-attention norm (norm2 Identity), per token; with fused qkv projections, no grad."""
    model = make_model()
    lat, t, txt, w = make_inputs(4, 7, model)
    ref = run(model, lat, t, txt, w, None)
    al_diffusers.use_fused_adaln(model)
    compare(run(model, lat, t, txt, w, al_diffusers.packed_forward), ref, ("fp32", "per-sample", "n=4", "fused model"))
    model = make_model(patch_size=(1, 1, 2), out_channels=6, cross_attn_norm=False)
    check(model, 4, seed=3, key=("fp32", "per-token", "n=4", "patch 1x1x2, out 6, no norm2"), per_token=True)
    model = make_model()
    model.fuse_qkv_projections()  # diffusers' fused to_qkv / to_kv; outputs only (to_q & co. get no gradient)
    lat, t, txt, _ = make_inputs(3, 4, model)
    with torch.no_grad():
        ref = [model(x[None], t[i:i + 1], txt[i][None]).sample[0] for i, x in enumerate(lat)]
        got = al_diffusers.packed_forward(model, lat, t, txt)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


@pytest.mark.parametrize("dtype,per_token,ckpt", [("bf16", False, False), ("bf16", True, True),
                                                  ("bf16-autocast", False, True)],
                         ids=["bf16-per-sample", "bf16-per-token-ckpt", "bf16-autocast-ckpt"])
def test_bf16(dtype, per_token, ckpt):
    model = make_model(dtype)
    if ckpt:
        model.enable_gradient_checkpointing()
    check(model, 4, seed=9, key=(dtype, "per-token" if per_token else "per-sample", "n=4",
                                 "checkpointing" if ckpt else "eager"), dtype=dtype, per_token=per_token)


@pytest.mark.parametrize("ckpt", [False, True], ids=["eager", "checkpointing"])
def test_torch_compile(ckpt, monkeypatch):
    """torch.compile of packed_forward's layers (diffusers_packed._layers: embeddings, blocks,
    head) with fullgraph=True over a one-block model, called through packed_forward, whose
    checks, packing and unpacking stay eager (aot_eager: Dynamo's graph and AOT autograd
    through the ops' fake kernels, without inductor's C++ build time). One graph, holding both
    varlen attentions (a custom op: the offsets are read when the graph runs) and every fused
    adaLN site, inside the checkpointed block with checkpointing on. Then (without checkpointing)
    packs of other layouts: after the recompiles that make the changing sizes symbolic, new
    layouts reuse the graph (the RoPE is gathered at a positions tensor, no per-sample shape
    reaches it)."""
    torch._dynamo.reset()
    model = make_model(num_layers=1)
    if ckpt:
        model.enable_gradient_checkpointing()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    monkeypatch.setattr(diffusers_packed, "_layers", torch.compile(diffusers_packed._layers, backend=backend,
                                                                   fullgraph=True))
    check(model, 3, seed=2, key=("fp32", "per-sample", "n=3", "compile" + ("+checkpointing" if ckpt else "")))
    assert len(graphs) == 1
    targets = [n.target for m in graphs[0].modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
    calls = lambda op: sum(n in (op, op.default) for n in targets)  # noqa: E731  (packet or overload)
    assert calls(torch.ops.adaptiveload.varlen_sdpa_fwd) == 2  # attn1, attn2
    assert calls(torch.ops.adaptiveload.adaln_fwd) == 3 + 1  # the block's norm1, norm2, norm3; the output norm
    if ckpt:
        return
    compiled = []
    for n, seed in [(3, 5), (5, 2), (2, 1), (4, 7)]:  # other token counts, then other sample counts
        lat, t, txt, _ = make_inputs(n, seed, model)
        with torch.no_grad():
            got = al_diffusers.packed_forward(model, lat, t, txt)
            ref = [model(x[None], t[i:i + 1], txt[i][None]).sample[0] for i, x in enumerate(lat)]
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))
        compiled.append(len(graphs))
    assert compiled[-1] == compiled[-2] <= 3, compiled  # the last two layouts: no new graph


def snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {name: sorted(m.__dict__) for name, m in model.named_modules()})


def assert_unchanged(model, before):
    state, attrs = before
    after = model.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], v) for k, v in state.items())
    assert {name: sorted(m.__dict__) for name, m in model.named_modules()} == attrs
    assert all(p.grad is None for p in model.parameters())


def refused(model, error, match):
    before = snapshot(model)
    lat, t, txt, _ = make_inputs(2, 1, make_model())
    with pytest.raises(error, match=match) as e:
        al_diffusers.packed_forward(model, lat, t, txt)
    assert_unchanged(model, before)
    return str(e.value)


def test_refuses_unknown_sources(monkeypatch):
    """A diffusers whose source of a method the pack reproduces is not a known one is refused,
    naming the method, the installed version and what to do; nothing is run or changed."""
    model = make_model()
    monkeypatch.setattr(diffusers, "__version__", "0.99.0")
    monkeypatch.setitem(al_diffusers.KNOWN_SOURCES, "WanAttnProcessor.__call__", {"0123456789abcdef": "0.42.1"})
    msg = refused(model, al_diffusers.UnrecognisedWanModelError, r"model\.blocks\[0\]\.attn1\.processor: .*"
                  r"WanAttnProcessor\.__call__ .* has source sha256")
    assert "packed_forward" in msg and "diffusers 0.99.0" in msg and "nothing was run or changed" in msg
    assert "sample by sample" in msg
    monkeypatch.undo()

    def rope_forward(self, hidden_states):  # another computation under the same name
        return tuple(f * 2 for f in real(self, hidden_states))

    real = transformer_wan.WanRotaryPosEmbed.forward
    monkeypatch.setattr(transformer_wan.WanRotaryPosEmbed, "forward", rope_forward)
    refused(model, al_diffusers.UnrecognisedWanModelError, r"model\.rope: .*WanRotaryPosEmbed\.rope_forward")
    monkeypatch.undo()
    monkeypatch.setattr(transformer_wan, "_get_qkv_projections", lambda attn, x, ctx: None)
    refused(model, al_diffusers.UnrecognisedWanModelError, r"transformer_wan\._get_qkv_projections")
    monkeypatch.undo()
    real_block = transformer_wan.WanTransformerBlock.forward
    monkeypatch.setattr(transformer_wan.WanTransformerBlock, "forward",
                        lambda self, *a: real_block(self, *a))
    refused(model, al_diffusers.UnrecognisedWanModelError, r"model\.blocks\[0\]: .*WanTransformerBlock\.forward")


def test_refuses_what_it_does_not_support():
    """Image conditioning (Wan 2.1 I2V: image_dim, added_kv_proj_dim), another attention
    processor, a context-parallel config, and hooks on modules whose forward the pack computes
    itself."""
    msg = refused(make_model(image_dim=8, added_kv_proj_dim=32), al_diffusers.UnsupportedWanModelError,
                  r"model\.condition_embedder: an image embedder \(image_dim=8")
    assert "does not support" in msg and "image-to-video" in msg
    refused(make_model(added_kv_proj_dim=32), al_diffusers.UnsupportedWanModelError,
            r"model\.blocks\[0\]\.attn2: image conditioning keys and values \(added_kv_proj_dim=32")

    class Processor(transformer_wan.WanAttnProcessor):
        pass

    model = make_model()
    model.blocks[1].attn1.set_processor(Processor())
    refused(model, al_diffusers.UnrecognisedWanModelError, r"model\.blocks\[1\]\.attn1: processor is .*Processor, "
            "expected diffusers WanAttnProcessor")
    model = make_model()
    model.blocks[0].attn1.processor._parallel_config = object()  # what enable_parallelism sets
    msg = refused(model, al_diffusers.UnsupportedWanModelError, r"model\.blocks\[0\]\.attn1: context parallelism "
                  r"is configured")
    assert "runs whole on one device" in msg and "sample by sample" in msg
    model = make_model()
    model.blocks[1].register_forward_pre_hook(lambda m, a: None)
    refused(model, al_diffusers.UnsupportedWanModelError, r"model\.blocks\[1\]: it has torch forward pre-hook")
    model = make_model()
    model.blocks[0].attn2.forward = lambda *a, **k: a[0]
    refused(model, al_diffusers.UnsupportedWanModelError, r"model\.blocks\[0\]\.attn2: it has an instance-level "
            "forward")
    model = make_model()
    model.patch_embedding = torch.nn.Conv3d(4, 32, kernel_size=(1, 2, 2), stride=(1, 1, 1))
    refused(model, al_diffusers.UnrecognisedWanModelError, r"model\.patch_embedding: expected torch\.nn\.Conv3d "
            "with kernel_size == stride")
    refused(torch.nn.Linear(2, 2), al_diffusers.UnrecognisedWanModelError, "expected diffusers WanTransformer3DModel")


def test_input_errors():
    model = make_model()
    lat, t, txt, _ = make_inputs(2, 1, model)
    fwd = functools.partial(al_diffusers.packed_forward, model)
    with pytest.raises(ValueError, match=r"latents\[1\] must be \[4, F, H, W\]"):
        fwd([lat[0], lat[1][:3]], t, txt)
    with pytest.raises(ValueError, match=r"encoder_hidden_states\[0\] must be \[L, 16\]"):
        fwd(lat, t, [txt[0][:, :8], txt[1]])
    with pytest.raises(ValueError, match="1 texts for 2 latents"):
        fwd(lat, t, txt[:1])
    with pytest.raises(ValueError, match=r"timesteps as a tensor must be \[2\]"):
        fwd(lat, torch.zeros(2, 3), txt)
    with pytest.raises(ValueError, match=r"timesteps\[1\] has 2 values"):
        fwd(lat, [t[0], torch.zeros(2)], txt)
    with pytest.raises(ValueError, match="not a whole number of patches"):
        fwd([lat[0][:, :, :3]], t[:1], txt[:1])
    with pytest.raises(ValueError, match=r"latents\[0\] is \(1, 33, 1\) patches .* 32 positions an axis"):
        fwd([torch.zeros(4, 1, 66, 2)], t[:1], txt[:1])  # rope_max_seq_len 32 (diffusers: a view error)
    assert al_diffusers.packed_forward is diffusers_packed.packed_forward


def test_zz_print_errors():
    """Prints the errors measured above (pytest -s); runs last in this file."""
    for key, e in sorted(ERRORS.items()):
        line = f"{' / '.join(key):55s} output {e[0]:.3g}  gradients {e[1]:.3g}"
        if len(e) == 4:  # bf16: both against fp32
            line += f"  (vs fp32; diffusers bf16 vs fp32: output {e[2]:.3g}  gradients {e[3]:.3g})"
        print(line)
