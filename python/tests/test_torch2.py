"""The fused adaLN op on PyTorch 2.x: torch.library.opcheck (schema, fake kernel, autograd
registration, AOT dispatch), torch.compile(fullgraph=True) over a Wan-style block, activation
checkpointing, and the CUDA binding's behaviour on a machine without a GPU."""
import pytest
import torch

import adaptiveload
from adaptiveload import _C
from adaptiveload.models import wan_dit

EPS = 1e-6


def make(x_shape, mod_shape, dtype=torch.float32, mod_dtype=torch.float32, affine=False, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=g).to(dtype)
    shift = (0.5 * torch.randn(mod_shape, generator=g)).to(mod_dtype)
    scale = (0.5 * torch.randn(mod_shape, generator=g)).to(mod_dtype)
    w = (1 + 0.3 * torch.randn(x_shape[-1], generator=g)).to(dtype) if affine else None
    b = (0.2 * torch.randn(x_shape[-1], generator=g)).to(dtype) if affine else None
    ts = [x, shift, scale, w, b]
    if grad:
        ts = [t.requires_grad_() if t is not None else None for t in ts]
    return ts


LAYOUTS = {
    "per_sample": ((2, 5, 24), (2, 24)),
    "per_sample_b1d": ((2, 5, 24), (2, 1, 24)),
    "per_token": ((2, 5, 24), (2, 5, 24)),
    "rows_one_sample": ((7, 24), (1, 24)),
    "rows_per_row": ((7, 24), (7, 24)),
    "odd_d": ((3, 4, 13), (3, 13)),
}


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_opcheck_forward(layout, affine):
    x_shape, mod_shape = LAYOUTS[layout]
    x, shift, scale, w, b = make(x_shape, mod_shape, affine=affine, grad=True)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_fwd.default, (x, shift, scale, w, b, EPS))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_opcheck_forward_reduced_precision(dtype):
    x, shift, scale, w, b = make((2, 5, 32), (2, 32), dtype=dtype, affine=True, grad=True)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_fwd.default, (x, shift, scale, w, b, EPS))


@pytest.mark.parametrize(
    "mask", [[True, True, True, True], [False, True, False, True], [False, False, False, False]],
    ids=["all", "some", "dx_only"],
)
@pytest.mark.parametrize("layout", ["per_sample", "per_token", "rows_one_sample"])
def test_opcheck_backward(layout, mask):
    x_shape, mod_shape = LAYOUTS[layout]
    x, shift, scale, w, b = make(x_shape, mod_shape, affine=True)
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(x, shift, scale, w, b, EPS)
    dy = torch.randn_like(y)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_bwd.default, (dy, x, scale, w, b, mean, rstd, mask))


def test_backward_op_returns_empty_tensors_for_gradients_not_asked_for():
    x, shift, scale, w, b = make((2, 3, 8), (2, 8), affine=False)
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(x, shift, scale, None, None, EPS)
    dx, dshift, dscale, dw, db = torch.ops.adaptiveload.adaln_bwd(
        torch.ones_like(y), x, scale, None, None, mean, rstd, [False, True, True, True]
    )
    assert dx.shape == x.shape and dscale.shape == scale.shape
    # not asked for (dshift), or asked for an absent weight / bias: empty, never garbage
    assert dshift.shape == dw.shape == db.shape == (0,)
    # and autograd gives None for inputs that need no gradient
    xs = x.clone().requires_grad_()
    adaptiveload.fused_adaln(xs, shift, scale).sum().backward()
    assert xs.grad is not None and shift.grad is None and scale.grad is None


def test_fake_kernel_gives_the_same_errors_as_the_real_one():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, shift, scale, _, _ = make((2, 3, 8), (2, 8))
    bad_scale = torch.randn(3, 8)
    with pytest.raises(ValueError, match="scale and shift have shape") as real:
        adaptiveload.fused_adaln(x, bad_scale, bad_scale)
    with FakeTensorMode() as mode:
        fx, fs = mode.from_tensor(x), mode.from_tensor(bad_scale)
        with pytest.raises(ValueError, match="scale and shift have shape") as fake:
            adaptiveload.fused_adaln(fx, fs, fs)
    assert str(real.value).splitlines()[0] == str(fake.value).splitlines()[0]


class WanStyleBlock(torch.nn.Module):
    """One adaLN-modulated transformer block of the Wan layout (the model's own Block) with
    its inputs built in: x [B, S, D], e [B, 6, D] fp32, text context, 3D RoPE."""

    def __init__(self, fused, dtype=torch.float32):
        super().__init__()
        c = wan_dit.config("tiny")
        torch.manual_seed(0)
        self.block = wan_dit.Block(c, use_fused=fused).to(dtype)
        self.c = c

    def forward(self, x, e, context, rope):
        return self.block(x, e, context, rope)


def block_inputs(dtype=torch.float32, grid=(2, 3, 4), B=2, seed=1):
    c = wan_dit.config("tiny")
    g = torch.Generator().manual_seed(seed)
    S = grid[0] * grid[1] * grid[2]
    x = torch.randn(B, S, c.dim, generator=g).to(dtype).requires_grad_()
    e = (0.3 * torch.randn(B, 6, c.dim, generator=g)).requires_grad_()  # Wan keeps it fp32
    context = torch.randn(B, c.text_len, c.dim, generator=g).to(dtype)
    rope = wan_dit.rope_3d(c.dim // c.heads, grid, "cpu")
    return x, e, context, rope


def run(model, inputs):
    x, e, context, rope = inputs
    x = x.detach().clone().requires_grad_()
    e = e.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    y = model(x, e, context, rope)
    (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
    grads = [x.grad, e.grad] + [p.grad for p in model.parameters()]
    return y.detach(), grads


@pytest.mark.parametrize(
    "dtype,tol,backend",
    [(torch.float32, 1e-5, "inductor"), (torch.bfloat16, 2e-2, "aot_eager")],
    ids=["fp32-inductor", "bf16-aot_eager"],
)
def test_compile_fullgraph_wan_block_matches_eager(dtype, tol, backend):
    """torch.compile(fullgraph=True) raises on any graph break; the compiled block matches
    eager in its output and every gradient. fp32 goes through inductor (C++ code generation
    on the CPU, about a minute of compiling here); bf16 through aot_eager, which traces the
    same joint forward/backward graph with the fake kernel and runs it without code generation."""
    torch._dynamo.reset()
    model = WanStyleBlock(fused=True, dtype=dtype)
    inputs = block_inputs(dtype)
    y_eager, g_eager = run(model, inputs)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y_comp, g_comp = run(compiled, inputs)
    scale = y_eager.float().abs().max().item()
    assert (y_comp.float() - y_eager.float()).abs().max().item() <= tol * max(scale, 1)
    for ge, gc in zip(g_eager, g_comp):
        assert gc is not None
        assert (gc.float() - ge.float()).abs().max().item() <= tol * max(ge.float().abs().max().item(), 1)
    # the fused op is in the compiled graph, not replaced by an eager fallback
    explain = torch._dynamo.explain(model)(*[t.detach() if torch.is_tensor(t) else t for t in inputs])
    assert explain.graph_break_count == 0 and explain.graph_count == 1


def test_compile_dynamic_shapes_runs_the_fake_kernel_symbolically():
    torch._dynamo.reset()
    f = torch.compile(lambda x, s, c: adaptiveload.fused_adaln(x, s, c), fullgraph=True, dynamic=True)
    for rows in (5, 9, 17):
        x, shift, scale, _, _ = make((2, rows, 24), (2, 24), seed=rows)
        torch.testing.assert_close(f(x, shift, scale), adaptiveload.fused_adaln(x, shift, scale))


def test_activation_checkpointing_around_the_fused_block():
    """torch.utils.checkpoint (non-reentrant) recomputes the fused forward in backward: the
    gradients equal the plain run's exactly (same kernels, same order)."""
    model = WanStyleBlock(fused=True)
    inputs = block_inputs()

    class Checkpointed(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return torch.utils.checkpoint.checkpoint(self.inner, *args, use_reentrant=False)

    y_plain, g_plain = run(model, inputs)
    y_ckpt, g_ckpt = run(Checkpointed(model), inputs)
    assert torch.equal(y_plain, y_ckpt)
    for a, b in zip(g_plain, g_ckpt):
        assert torch.equal(a, b)


def test_whole_model_with_checkpointing_matches_without():
    c = wan_dit.config("tiny")
    torch.manual_seed(0)
    a = wan_dit.WanDiT(c, fused_adaln=True, checkpointing=False)
    b = wan_dit.WanDiT(c, fused_adaln=True, checkpointing=True)
    b.load_state_dict(a.state_dict())
    x0 = torch.randn(2, c.in_channels, 2, 4, 4)
    ctx = torch.randn(2, c.text_len, c.text_dim)
    for m in (a, b):
        m.train()
        wan_dit.flow_matching_loss(m, x0, ctx, generator=torch.Generator().manual_seed(5)).mean().backward()
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=0, atol=0, msg=n)


def test_cuda_binding_without_a_gpu():
    """The extension built with CUDA (CI compiles it) imports on a machine without a GPU;
    the op has a CUDA kernel registered, and a CUDA call is refused by torch, not a crash."""
    has_cuda_kernel = torch._C._dispatch_has_kernel_for_dispatch_key("adaptiveload::adaln_fwd", "CUDA")
    assert has_cuda_kernel == bool(_C.with_cuda)
    if torch.version.cuda and _C.with_cuda:
        assert torch._C._dispatch_has_kernel_for_dispatch_key("adaptiveload::adaln_bwd", "CUDA")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the CUDA op is tested by test_adaln_op's CUDA cases")
    with pytest.raises(RuntimeError):
        x = torch.randn(2, 3, 8, device="cuda")
        adaptiveload.fused_adaln(x, torch.zeros(2, 8, device="cuda"), torch.zeros(2, 8, device="cuda"))
    # the CPU op keeps working after the refused call
    x, shift, scale, _, _ = make((2, 3, 8), (2, 8))
    assert torch.isfinite(adaptiveload.fused_adaln(x, shift, scale)).all()


def test_ci_builds_the_cuda_binding():
    """Where torch is a CUDA build and nvcc is on PATH (CI), the package must be built with
    its CUDA kernels; AL_REQUIRE_CUDA_BUILD=1 (scripts/test.sh) makes that a failure, not a skip."""
    import os
    import shutil

    if os.environ.get("AL_REQUIRE_CUDA_BUILD") != "1":
        pytest.skip("set AL_REQUIRE_CUDA_BUILD=1 to require the CUDA build (scripts/test.sh does)")
    assert torch.version.cuda, "torch is not a CUDA build"
    assert shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"), "nvcc not found"
    assert _C.with_cuda, "adaptiveload._C was built without its CUDA kernels"


FP64_LAYOUTS = ["per_sample", "per_token", "rows_one_sample", "odd_d"]


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("layout", FP64_LAYOUTS)
def test_gradcheck_fp64(layout, affine):
    """float64 runs the fp64 reference end to end, so gradcheck runs as PyTorch's own ops are
    checked: float64 inputs, default eps and tolerances, every input's gradient. The saved
    per-row mean / rstd are float64 too (test_adaln_op.py's fp64 tests go down to D = 1)."""
    x_shape, mod_shape = LAYOUTS[layout]
    args = make(x_shape, mod_shape, dtype=torch.float64, mod_dtype=torch.float64, affine=affine, grad=True)
    args = [a for a in args if a is not None]
    assert torch.autograd.gradcheck(lambda *t: adaptiveload.fused_adaln(*t), args)


def test_fp64_matches_the_eager_formula_to_fp64_precision():
    x, shift, scale, w, b = make((3, 7, 29), (3, 7, 29), dtype=torch.float64, mod_dtype=torch.float64, affine=True)
    y = adaptiveload.fused_adaln(x, shift, scale, w, b)
    ref = torch.nn.functional.layer_norm(x, (29,), w, b, eps=EPS) * (1 + scale) + shift
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    # float32 modulation with float64 x (the modulation may be float32 or x's dtype)
    y32 = adaptiveload.fused_adaln(x, shift.float(), scale.float(), w, b)
    ref32 = (torch.nn.functional.layer_norm(x, (29,), w, b, eps=EPS) * (1 + scale.float().double())
             + shift.float().double())
    torch.testing.assert_close(y32, ref32, rtol=1e-12, atol=1e-12)


def test_opcheck_fp64():
    x, shift, scale, w, b = make((2, 5, 24), (2, 24), dtype=torch.float64, mod_dtype=torch.float64, affine=True,
                                 grad=True)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_fwd.default, (x, shift, scale, w, b, EPS))
