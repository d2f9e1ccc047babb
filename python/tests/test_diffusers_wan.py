"""adaptiveload.diffusers.use_fused_adaln on diffusers' WanTransformer3DModel (random weights,
a tiny config): outputs and every gradient (inputs and all parameters) against the unpatched
model, in fp32, bf16 (diffusers' from_pretrained(torch_dtype=bfloat16) layout: bf16 weights,
the _keep_in_fp32_modules in fp32), bf16-cast (model.to(bfloat16): every weight bf16) and fp32
weights under bf16 autocast; per-sample (Wan 2.1,
timestep [B]) and per-token (Wan 2.2 TI2V, timestep [B, L]) modulation; with gradient
checkpointing, and under torch.compile(fullgraph=True). Then the refusals, the undo, and
examples/train_dit.py --model diffusers-wan.

Errors are max |patched - unpatched| / max |unpatched| per tensor, the worst tensor reported
(printed with -s). fp32 must agree to 1e-5. In bf16 both paths round differently (a
difference in the last fp32 bit can flip a bf16 rounding), so bf16 follows the project's rule
for reduced precision instead: per tensor, the patched model's error against the unpatched
model run in fp32 (same weights, upcast) is at most 2x the unpatched bf16 model's own error
plus one bf16 ulp of the tensor's largest value. AL_TEST_FULL=1 compiles every dtype x
modulation case (default: two, to keep this file to about a minute on 2 cores).
"""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import DATASETS, REPO, as_loaded_in_bf16

pytest.importorskip("diffusers")
import diffusers  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.models.transformers import transformer_wan  # noqa: E402

import adaptiveload  # noqa: E402

try:
    from adaptiveload import diffusers as al_diffusers
    from adaptiveload import diffusers_adaln
except ImportError:  # an installed package older than the module: use the checkout's
    adaptiveload.__path__.append(os.path.join(REPO, "python", "adaptiveload"))
    from adaptiveload import diffusers as al_diffusers
    from adaptiveload import diffusers_adaln

# 2 blocks, dim 64 (2 heads of 32), ffn 128, text 32 wide; latents [B, 4, 3, 4, 6] -> 18 tokens.
TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=4, out_channels=4,
            text_dim=32, freq_dim=32, ffn_dim=128, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32)
LATENT = (2, 4, 3, 4, 6)
TOKENS = 3 * 2 * 3
TEXT_LEN = 8
# bf16: from_pretrained(torch_dtype=bf16)'s layout; bf16-cast: model.to(bf16), every weight bf16 (the
# output norm's shift/scale are then bf16, and diffusers rounds 1 + scale to bf16: the patch must too).
DTYPES = ["fp32", "bf16", "bf16-cast", "bf16-autocast"]
FP32_TOL = 1e-5  # relative max error, fp32 patched vs unpatched
BF16_ULP = 2.0**-8
ERRORS = {}  # (dtype, modulation, mode) -> (output error, gradient error), printed at the end


def make_model(dtype: str, seed: int = 0, **overrides) -> WanTransformer3DModel:
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**{**TINY, **overrides})
    if dtype == "bf16-cast":
        model.to(torch.bfloat16)
    if dtype == "bf16":
        as_loaded_in_bf16(model)
    return model


def inputs(dtype: str, per_token: bool, upcast: bool = False, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    io = torch.bfloat16 if dtype in ("bf16", "bf16-cast") else torch.float32
    x = torch.randn(LATENT, generator=g).to(io)
    t = torch.rand((LATENT[0], TOKENS) if per_token else (LATENT[0],), generator=g) * 1000
    ctx = torch.randn((LATENT[0], TEXT_LEN, TINY["text_dim"]), generator=g).to(io)
    if upcast:
        x, ctx = x.float(), ctx.float()
    return x.requires_grad_(), t, ctx.requires_grad_()


def run(model, dtype: str, per_token: bool, fp32_reference: bool = False):
    """Output and gradients [x, context, *parameters] of a fixed weighted sum of the output.
    fp32_reference: the same computation on a copy of the model in fp32, without autocast."""
    if fp32_reference:
        model = copy.deepcopy(model).float()
    x, t, ctx = inputs(dtype, per_token, upcast=fp32_reference)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16-autocast" and not fp32_reference):
        y = model(x, t, ctx).sample
    w = torch.linspace(-1, 1, y.shape[-1])
    (y.float() * w).sum().backward()
    params = [p.grad for p in (model._orig_mod if hasattr(model, "_orig_mod") else model).parameters()]
    return y.detach(), [x.grad, ctx.grad, *params]


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)).item()


def abs_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return (a.float() - ref.float()).abs().max().item()


def compare(got, ref, dtype: str, key, ref32=None):
    """got, ref: run() of the patched and the unpatched model; ref32: run(..., fp32_reference)
    of the unpatched one (bf16 cases)."""
    (y, grads), (y0, grads0) = got, ref
    assert y.dtype == y0.dtype and y.shape == y0.shape
    assert len(grads) == len(grads0)
    for g, g0 in zip(grads, grads0):
        assert g is not None and g0 is not None and g.dtype == g0.dtype and g.shape == g0.shape
    out_err = rel_err(y, y0)
    grad_err = max(rel_err(g, g0) for g, g0 in zip(grads, grads0))
    ERRORS[key] = (out_err, grad_err)
    if dtype == "fp32":
        assert out_err <= FP32_TOL, f"output error {out_err:.3g} > {FP32_TOL}"
        assert grad_err <= FP32_TOL, f"gradient error {grad_err:.3g} > {FP32_TOL}"
        return
    names = ["output", "x.grad", "context.grad"] + [f"param[{i}].grad" for i in range(len(grads) - 2)]
    for name, a, a0, r in zip(names, [y, *grads], [y0, *grads0], [ref32[0], *ref32[1]]):
        fused, eager = abs_err(a, r), abs_err(a0, r)
        bound = 2 * eager + BF16_ULP * r.float().abs().max().item()
        assert fused <= bound, f"{name}: patched error vs fp32 {fused:.3g} > 2 x unpatched {eager:.3g} + 1 ulp"


def count_op_calls(monkeypatch):
    calls = []
    real = diffusers_adaln.fused_adaln  # the patched forwards' module
    monkeypatch.setattr(diffusers_adaln, "fused_adaln", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    return calls


@pytest.mark.parametrize("per_token", [False, True], ids=["per-sample", "per-token"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_unpatched(dtype, per_token, monkeypatch):
    """Eager, then with diffusers' gradient checkpointing on, against one unpatched run."""
    model = make_model(dtype)
    ref = run(model, dtype, per_token)
    ref32 = None if dtype == "fp32" else run(model, dtype, per_token, fp32_reference=True)
    al_diffusers.use_fused_adaln(model)
    calls = count_op_calls(monkeypatch)
    modulation = "per-token" if per_token else "per-sample"
    compare(run(model, dtype, per_token), ref, dtype, (dtype, modulation, "eager"), ref32)
    # 3 sites per block (norm1, norm2, norm3) + the output norm
    assert len(calls) == 3 * TINY["num_layers"] + 1
    model.enable_gradient_checkpointing()
    calls.clear()
    compare(run(model, dtype, per_token), ref, dtype, (dtype, modulation, "checkpointing"), ref32)
    assert len(calls) == 2 * 3 * TINY["num_layers"] + 1  # the blocks' sites again in the recomputation


COMPILE_CASES = ([(d, p) for d in DTYPES for p in (False, True)] if os.environ.get("AL_TEST_FULL") == "1"
                 else [("fp32", False), ("bf16", True)])


@pytest.mark.parametrize("dtype,per_token", COMPILE_CASES,
                         ids=[f"{d}-{'per-token' if p else 'per-sample'}" for d, p in COMPILE_CASES])
def test_compile_fullgraph_with_checkpointing(dtype, per_token):
    """torch.compile(fullgraph=True, backend="aot_eager"): no graph break, the fused op in the
    graph at every site (4 for the one block here), and the same outputs and gradients as the unpatched
    model in eager mode. aot_eager traces the joint forward/backward graph through the op's
    fake kernel without C++ code generation, which keeps this test to seconds on the CPU."""
    torch._dynamo.reset()
    model = make_model(dtype, num_layers=1)  # one block: the same graph per block, half the tracing
    ref = run(model, dtype, per_token)
    ref32 = None if dtype == "fp32" else run(model, dtype, per_token, fp32_reference=True)
    al_diffusers.use_fused_adaln(model).enable_gradient_checkpointing()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    got = run(compiled, dtype, per_token)
    assert len(graphs) == 1
    # checkpointed blocks are subgraphs of the tag_activation_checkpoint higher-order op
    op = torch.ops.adaptiveload.adaln_fwd
    fused = [n for gm in graphs[0].modules() if isinstance(gm, torch.fx.GraphModule) for n in gm.graph.nodes
             if n.target in (op, op.default)]
    assert len(fused) == 3 + 1
    compare(got, ref, dtype, (dtype, "per-token" if per_token else "per-sample", "compile+checkpointing"), ref32)


def test_cross_attn_norm_options(monkeypatch):
    """cross_attn_norm=False leaves norm2 eager; a model without a cross-attention norm
    (norm2 = Identity) has 2 sites per block; both match the unpatched model."""
    calls = count_op_calls(monkeypatch)
    model = make_model("fp32")
    ref = run(model, "fp32", False)
    al_diffusers.use_fused_adaln(model, cross_attn_norm=False)
    calls.clear()
    compare(run(model, "fp32", False), ref, "fp32", ("fp32", "per-sample", "norm2 eager"))
    assert len(calls) == 2 * TINY["num_layers"] + 1
    model = make_model("fp32", cross_attn_norm=False)
    ref = run(model, "fp32", True)
    al_diffusers.use_fused_adaln(model)
    calls.clear()
    compare(run(model, "fp32", True), ref, "fp32", ("fp32", "per-token", "no cross-attn norm"))
    assert len(calls) == 2 * TINY["num_layers"] + 1


def test_restore_and_reapply():
    model = make_model("fp32")
    keys = list(model.state_dict())
    y0, _ = run(model, "fp32", False)
    assert not al_diffusers.is_fused(model)
    assert al_diffusers.use_fused_adaln(al_diffusers.use_fused_adaln(model)) is model  # twice: same patch
    assert al_diffusers.is_fused(model) and list(model.state_dict()) == keys
    y1, _ = run(model, "fp32", False)
    assert not torch.equal(y1, y0) and rel_err(y1, y0) <= FP32_TOL  # the fused path ran
    al_diffusers.restore_eager_adaln(model)
    assert not al_diffusers.is_fused(model)
    assert all("forward" not in m.__dict__ for m in [model, *model.blocks])
    assert torch.equal(run(model, "fp32", False)[0], y0)  # diffusers' own forward, bit for bit


def assert_untouched(model):
    assert not al_diffusers.is_fused(model)
    assert all("forward" not in m.__dict__ for m in [model, *model.blocks])


def test_refuses_a_changed_block_forward(monkeypatch):
    """A diffusers whose block forward is not a known source is refused, naming the installed
    version and the method, and nothing is patched."""
    model = make_model("fp32")
    real = transformer_wan.WanTransformerBlock.forward

    def forward(self, hidden_states, encoder_hidden_states, temb, rotary_emb):  # computes something else
        return real(self, hidden_states, encoder_hidden_states, temb * 2, rotary_emb)

    monkeypatch.setattr(transformer_wan.WanTransformerBlock, "forward", forward)
    monkeypatch.setattr(diffusers, "__version__", "0.99.0")
    with pytest.raises(al_diffusers.UnrecognisedWanModelError) as e:
        al_diffusers.use_fused_adaln(model)
    msg = str(e.value)
    assert "model.blocks[0]" in msg and "WanTransformerBlock.forward" in msg and "source sha256" in msg
    assert "diffusers 0.99.0" in msg and "0.42.1" in msg and "nothing was changed" in msg
    assert_untouched(model)


def test_refuses_unexpected_modules():
    model = make_model("fp32")
    model.blocks[1].norm3 = torch.nn.LayerNorm(64, eps=1e-6)  # affine, torch's: a different computation
    with pytest.raises(al_diffusers.UnrecognisedWanModelError, match=r"model\.blocks\[1\]\.norm3: expected "
                       r"diffusers FP32LayerNorm, got torch\.nn\.modules\.normalization\.LayerNorm"):
        al_diffusers.use_fused_adaln(model)
    assert_untouched(model)

    model = make_model("fp32")
    model.blocks[0].norm1 = transformer_wan.FP32LayerNorm(64, 1e-6, elementwise_affine=True)
    with pytest.raises(al_diffusers.UnrecognisedWanModelError, match=r"model\.blocks\[0\]\.norm1: elementwise "
                       r"affine weight present"):
        al_diffusers.use_fused_adaln(model)
    assert_untouched(model)

    model = make_model("fp32")
    model.blocks[0].forward = lambda *a: a[0]  # someone else's instance-level patch
    with pytest.raises(al_diffusers.UnrecognisedWanModelError, match=r"model\.blocks\[0\]: the instance has its "
                       r"own forward"):
        al_diffusers.use_fused_adaln(model)
    assert not al_diffusers.is_fused(model) and "forward" not in model.blocks[1].__dict__

    with pytest.raises(al_diffusers.UnrecognisedWanModelError, match="expected diffusers WanTransformer3DModel, "
                       "got torch.nn.modules.linear.Linear"):
        al_diffusers.use_fused_adaln(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="cross_attn_norm must be a bool"):
        al_diffusers.use_fused_adaln(make_model("fp32"), cross_attn_norm="yes")


def test_train_dit_diffusers_wan_writes_summary(tmp_path):
    """examples/train_dit.py --model diffusers-wan: 4 emulated ranks, 2 steps of the real
    TaiChi-HD manifest's shapes, eager and fused, each with a JSON summary."""
    manifest = os.path.join(DATASETS, "taichi_hd.csv")
    out = tmp_path / "summary.json"
    # the subprocess imports the adaptiveload this test imported
    pkg_root = os.path.dirname(os.path.dirname(adaptiveload.__file__))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([pkg_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    cmd = [sys.executable, os.path.join(REPO, "examples", "train_dit.py"), "--model", "diffusers-wan",
           "--config", "tiny", "-m", manifest, "--world-size", "4", "--steps", "2", "--warmup", "0",
           "--fused", "both", "--strategy", "balanced", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert [(r["model"], r["fused_adaln"]) for r in runs] == [("diffusers-wan", False), ("diffusers-wan", True)]
    for r in runs:
        assert r["world_size"] == 4 and r["measured"]["steps"] == 2 and r["measured"]["samples"] > 0
        assert len(r["rank_times"]) == 2 and all(len(t) == 4 and min(t) > 0 for t in r["rank_times"])


def test_zz_print_errors():
    """Prints the errors measured above (pytest -s); runs last in this file."""
    for key, (o, g) in sorted(ERRORS.items()):
        print(f"{' / '.join(key):45s} output {o:.3g}  gradients {g:.3g}")
