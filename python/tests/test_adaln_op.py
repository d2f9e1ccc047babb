"""The fused adaLN op against plain PyTorch (layer_norm, then * (1 + scale), then + shift).

Correctness rule (docs/DESIGN.md): against an fp64 reference, the op's error is at most 2x
PyTorch's own same-dtype error plus a small atol. fp16 LayerNorm is not implemented on CPU
in torch 1.13, so the fp16 "PyTorch" baseline is fp32 LayerNorm rounded to fp16, then the
same eager modulation (a slightly better baseline than a true fp16 path: stricter for us).
"""
import pytest
import torch
import torch.nn.functional as F

import adaptiveload
from adaptiveload.nn import AdaLayerNormModulate

EPS = 1e-6
ATOL = {torch.float32: 1e-5, torch.bfloat16: 1e-3, torch.float16: 1e-3}
SHAPES = [(1, 1, 1023), (3, 7, 256), (2, 5, 1500), (2, 33, 96), (37, 64)]  # [B, L, D] or [N, D]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def mod_shape(shape, per_token):
    if per_token:
        return shape
    return (shape[0], shape[-1]) if len(shape) == 3 else (1, shape[-1])


def bcast(m, x):
    """Modulation as it broadcasts against x in eager PyTorch."""
    if x.dim() == 3 and m.dim() == 2:
        return m[:, None, :]
    return m


def eager(x, shift, scale, weight=None, bias=None):
    """The plain PyTorch adaLN in x's dtype (fp16: fp32 LayerNorm rounded, see above)."""
    if x.dtype == torch.float16:
        w = None if weight is None else weight.float()
        b = None if bias is None else bias.float()
        n = F.layer_norm(x.float(), (x.shape[-1],), w, b, EPS).half()
    else:
        n = F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)
    return (n * (1 + bcast(scale, x)) + bcast(shift, x)).to(x.dtype)


def make(shape, dtype, per_token, mod_fp32=True, affine=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    D = shape[-1]
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    mdt = torch.float32 if mod_fp32 else dtype
    shift = (torch.randn(mod_shape(shape, per_token), generator=g) * 0.5).to(mdt)
    scale = (torch.randn(mod_shape(shape, per_token), generator=g) * 0.5).to(mdt)
    weight = bias = None
    if affine:
        weight = (1 + 0.3 * torch.randn(D, generator=g)).to(dtype)
        bias = (0.2 * torch.randn(D, generator=g)).to(dtype)
    return x, shift, scale, weight, bias


def f64(t):
    return None if t is None else t.double()


def check_rule(name, ours, torch_same, ref, dtype):
    err_ours = (ours.double() - ref).abs().max().item() if ref.numel() else 0.0
    err_torch = (torch_same.double() - ref).abs().max().item() if ref.numel() else 0.0
    atol = ATOL[dtype] * max(1.0, ref.abs().max().item() if ref.numel() else 1.0)
    assert err_ours <= 2 * err_torch + atol, (
        f"{name}: error {err_ours:.3g} > 2 x PyTorch's {err_torch:.3g} + {atol:.3g}"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_forward_matches_pytorch(shape, dtype, per_token, affine):
    x, shift, scale, w, b = make(shape, dtype, per_token, mod_fp32=(dtype != torch.float16), affine=affine)
    y = adaptiveload.fused_adaln(x, shift, scale, w, b, eps=EPS)
    assert y.shape == x.shape and y.dtype == x.dtype
    ref = eager(x.double(), shift.double(), scale.double(), f64(w), f64(b))
    check_rule("y", y, eager(x, shift, scale, w, b), ref, dtype)


@pytest.mark.parametrize("shape", [(1, 1, 1023), (3, 7, 256), (2, 5, 1500), (37, 64)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_backward_matches_pytorch_autograd(shape, dtype, per_token, affine):
    """Every gradient against fp64 autograd of the eager formula, by the same rule."""
    inputs = make(shape, dtype, per_token, mod_fp32=True, affine=affine, seed=1)
    g = torch.Generator().manual_seed(2)
    dy = torch.randn(shape, generator=g).to(dtype)

    def grads(fn, tensors):
        ts = [None if t is None else t.detach().clone().requires_grad_() for t in tensors]
        fn(*ts).backward(dy.to(ts[0].dtype))
        return [None if t is None else t.grad for t in ts]

    ours = grads(lambda *t: adaptiveload.fused_adaln(*t, eps=EPS), inputs)
    ref = grads(eager, [f64(t) for t in inputs])
    same = grads(eager, list(inputs))
    for name, o, r, s in zip(["dx", "dshift", "dscale", "dweight", "dbias"], ours, ref, same):
        if r is None:
            assert o is None
            continue
        assert o.shape == r.shape and o.dtype == s.dtype, name
        check_rule(name, o, s, r, dtype)


def test_modulation_in_x_dtype_and_b1d_layout():
    """[B, 1, D] modulation (Wan's layout) equals [B, D]; modulation may be in x's dtype."""
    x, shift, scale, _, _ = make((2, 9, 128), torch.bfloat16, False, mod_fp32=False)
    y2 = adaptiveload.fused_adaln(x, shift, scale)
    y3 = adaptiveload.fused_adaln(x, shift[:, None], scale[:, None])
    assert torch.equal(y2, y3)
    xs = x.clone().requires_grad_()
    s3 = shift[:, None].clone().requires_grad_()
    adaptiveload.fused_adaln(xs, s3, scale[:, None]).sum().backward()
    assert s3.grad.shape == (2, 1, 128) and s3.grad.dtype == torch.bfloat16


def test_gradcheck_fp32():
    """torch.autograd.gradcheck of the op's autograd kernel on the fast fp32 path (float64
    inputs run the fp64 reference instead: test_torch2.test_gradcheck_fp64 checks those with
    gradcheck's defaults). In fp32, finite-difference eps 1e-3 and tolerances 1e-2: backward
    is the derivative of forward for every input (x, shift, scale, weight, bias)."""
    g = torch.Generator().manual_seed(3)
    for per_token in (False, True):
        shape = (2, 3, 8)
        x = torch.randn(shape, generator=g).requires_grad_()
        ms = shape if per_token else (2, 8)
        shift = (0.5 * torch.randn(ms, generator=g)).requires_grad_()
        scale = (0.5 * torch.randn(ms, generator=g)).requires_grad_()
        w = (1 + 0.3 * torch.randn(8, generator=g)).requires_grad_()
        b = (0.2 * torch.randn(8, generator=g)).requires_grad_()
        with pytest.warns(UserWarning):  # "not a double precision floating point"
            assert torch.autograd.gradcheck(
                lambda *t: adaptiveload.fused_adaln(*t), (x, shift, scale, w, b), eps=1e-3, atol=1e-2, rtol=1e-2
            )


def test_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch.library.opcheck needs torch >= 2.4 (this is {torch.__version__})")
    x, shift, scale, w, b = make((2, 3, 16), torch.float32, False, affine=True)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_fwd.default, (x, shift, scale, w, b, EPS))


def test_double_backward_matches_eager():
    """Double backward is implemented (create_graph=True goes through differentiable PyTorch
    ops; test_adaln_segments.py gradgradchecks it in fp64): the second-order gradient equals
    eager PyTorch's."""
    x0, shift, scale, _, _ = make((2, 3, 16), torch.float32, False)
    second = []
    for fn in (adaptiveload.fused_adaln, eager):
        x = x0.clone().requires_grad_()
        (gx,) = torch.autograd.grad(fn(x, shift, scale).pow(2).sum(), x, create_graph=True)
        gx.sum().backward()
        second.append(x.grad)
    torch.testing.assert_close(second[0], second[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "x_shape,mod_shape_,per_token",
    [((2, 7, 48), (2, 48), False), ((2, 7, 48), (2, 1, 48), False), ((2, 7, 48), (2, 7, 48), True),
     ((11, 48), (1, 48), False), ((11, 48), (11, 48), True)],
)
def test_meta_tensors_propagate_shapes(x_shape, mod_shape_, per_token):
    meta = dict(device="meta")
    x = torch.empty(x_shape, dtype=torch.bfloat16, requires_grad=True, **meta)
    shift = torch.empty(mod_shape_, **meta)
    scale = torch.empty(mod_shape_, requires_grad=True, **meta)
    w = torch.empty(x_shape[-1], dtype=torch.bfloat16, **meta)
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(x, shift, scale, w, None, EPS)
    assert y.device.type == "meta" and y.shape == x.shape and y.dtype == torch.bfloat16
    assert mean.shape == x_shape[:-1] and rstd.dtype == torch.float32
    assert y.requires_grad
    dx, dshift, dscale, dw, db = torch.ops.adaptiveload.adaln_bwd(
        y.detach(), x.detach(), scale.detach(), w, None, mean, rstd, [True, True, True, False]
    )
    assert dx.shape == x.shape and dshift.shape == mod_shape_ and dscale.shape == mod_shape_
    # A gradient not asked for (here dbias, and there is no bias) is an empty [0] tensor.
    assert dw.shape == (x_shape[-1],) and db.shape == (0,) and db.dtype == x.dtype
    # Errors are the same on meta tensors: shapes are checked before any data is touched.
    with pytest.raises(ValueError, match="scale"):
        torch.ops.adaptiveload.adaln_fwd(x, shift, torch.empty(3, 48, **meta), None, None, EPS)


def test_non_contiguous_inputs_are_made_contiguous():
    x, shift, scale, w, b = make((4, 9, 64), torch.float32, True, affine=True)
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, non-contiguous
    st = shift.transpose(0, 1).contiguous().transpose(0, 1)
    w2 = torch.stack([w, w], 1)[:, 0]  # stride 2
    assert not xt.is_contiguous() and not st.is_contiguous() and not w2.is_contiguous()
    assert torch.equal(adaptiveload.fused_adaln(xt, st, scale, w2, b), adaptiveload.fused_adaln(x, shift, scale, w, b))


def test_empty_rows():
    x = torch.randn(0, 5, 32, requires_grad=True)
    shift = torch.randn(0, 32, requires_grad=True)
    scale = torch.randn(0, 32)
    y = adaptiveload.fused_adaln(x, shift, scale)
    assert y.shape == (0, 5, 32)
    y.sum().backward()
    assert x.grad.shape == x.shape and shift.grad.shape == shift.shape


def r(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape).to(dtype=dtype, device=device)


BAD_INPUTS = {  # name: (args, exception, message pattern)
    "x4d": ((r(2, 3, 4, 8), r(2, 8), r(2, 8)), ValueError, r"x has shape \[2, 3, 4, 8\]"),
    "mod_batch": ((r(2, 3, 8), r(3, 8), r(3, 8)), ValueError, r"scale and shift have shape \[3, 8\]"),
    "mod_mismatch": ((r(2, 3, 8), r(2, 8), r(2, 1, 8)), ValueError, r"shift has shape \[2, 8\] but scale"),
    # float64 x is supported (the fp64 reference); a float64 modulation with float32 x is not
    "mod_f64_x_f32": (
        (r(2, 3, 8), r(2, 8, dtype=torch.float64), r(2, 8, dtype=torch.float64)),
        ValueError,
        "must be float32 or x's dtype",
    ),
    "mod_f16_x_f32": (
        (r(2, 3, 8), r(2, 8, dtype=torch.half), r(2, 8, dtype=torch.half)),
        ValueError,
        "must be float32 or x's dtype",
    ),
    "mixed_mod": (
        (r(2, 3, 8), r(2, 8), r(2, 8, dtype=torch.bfloat16)),
        ValueError,
        "shift has dtype float32 but scale",
    ),
    "weight": ((r(2, 3, 8), r(2, 8), r(2, 8), torch.ones(7)), ValueError, r"weight has shape \[7\]"),
    "2d_mod": ((r(5, 8), r(2, 8), r(2, 8)), ValueError, r"\[1, D\] = \[1, 8\]"),
    "device": ((r(2, 3, 8), r(2, 8, device="meta"), r(2, 8)), RuntimeError, "shift is on meta"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_inputs_give_clear_errors(name):
    args, exc, pattern = BAD_INPUTS[name]
    with pytest.raises(exc, match=pattern):
        adaptiveload.fused_adaln(*args)


def test_module():
    m = AdaLayerNormModulate(64, elementwise_affine=True)
    assert m.weight.shape == (64,) and "elementwise_affine=True" in repr(m)
    x, shift, scale, _, _ = make((2, 5, 64), torch.float32, False)
    y = m(x, shift, scale)
    ref = eager(x, shift, scale, m.weight.detach(), m.bias.detach())
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    y.sum().backward()
    assert m.weight.grad is not None and m.bias.grad is not None
    plain = AdaLayerNormModulate(64)
    assert plain.weight is None and list(plain.parameters()) == []
    with pytest.raises(ValueError, match="last dimension must be 64"):
        plain(torch.randn(2, 5, 32), shift, scale)


# --- float64: fp64 end to end (the CPU reference, saved mean / rstd in float64 too) ---------

FP64_D = [1, 2, 8]
FP64_LAYOUTS = {"per_sample": False, "per_token": True}


def make_fp64(D, per_token, affine, seed=3):
    """x [2, 3, D] and the rest drawn in float64 (not float32 values widened: those would hide
    float32 rounding of the statistics), all requiring grad."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float64)

    ms = mod_shape((2, 3, D), per_token)
    x, shift, scale = rand(2, 3, D) * 2 + 0.5, 0.5 * rand(*ms), 0.5 * rand(*ms)
    w, b = (1 + 0.3 * rand(D), 0.2 * rand(D)) if affine else (None, None)
    return [None if t is None else t.requires_grad_() for t in (x, shift, scale, w, b)]


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("layout", sorted(FP64_LAYOUTS))
@pytest.mark.parametrize("D", FP64_D, ids=lambda d: f"D{d}")
def test_fp64_gradcheck_default_tolerances(D, layout, affine):
    """gradcheck with its defaults (eps 1e-6, atol 1e-5, rtol 1e-3) down to D = 1, where
    x - mean is exactly 0: with a float32 mean it was x's float32 rounding (~1e-7 |x|) times
    rstd = 1 / sqrt(eps) = 1000, so xhat ~1e-4 instead of 0 and dscale = sum dy * xhat failed."""
    args = [t for t in make_fp64(D, FP64_LAYOUTS[layout], affine) if t is not None]
    assert torch.autograd.gradcheck(adaptiveload.fused_adaln, args)


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("layout", sorted(FP64_LAYOUTS))
@pytest.mark.parametrize("D", FP64_D + [1023], ids=lambda d: f"D{d}")
def test_fp64_forward_and_backward_equal_eager_fp64(D, layout, affine):
    """y and every gradient within 1e-12 of eager float64 autograd (layer_norm * (1 + scale) +
    shift). Measured max abs difference <= 1.5e-14 for D = 2 - 1023 (values O(1) - O(10)), and
    5e-13 at D = 1, eager's own rounding there (its dx is not exactly 0, ours is). float32
    statistics left every gradient 8e-8 - 7e-5 off (dx 7.6e-8 at D = 8)."""
    ours_in = make_fp64(D, FP64_LAYOUTS[layout], affine)
    ref_in = [None if t is None else t.detach().clone().requires_grad_() for t in ours_in]
    dy = torch.randn((2, 3, D), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    y = adaptiveload.fused_adaln(*ours_in, eps=EPS)
    y_ref = eager(*ref_in)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    y.backward(dy)
    y_ref.backward(dy)
    for name, o, r in zip(["dx", "dshift", "dscale", "dweight", "dbias"], ours_in, ref_in):
        if o is None:
            continue
        assert o.grad.dtype == torch.float64, name
        torch.testing.assert_close(o.grad, r.grad, rtol=1e-12, atol=1e-12, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64], ids=str)
def test_saved_statistics_dtype(dtype, device):
    """mean / rstd are float64 for float64 x and float32 for every other dtype, from the CPU
    kernel and from the fake kernel (meta tensors)."""
    x, shift, scale, w, b = make((2, 3, 8), dtype, False, mod_fp32=False, affine=True)
    x, shift, scale, w, b = (t.to(device) for t in (x, shift, scale, w, b))
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(x, shift, scale, w, b, EPS)
    want = torch.float64 if dtype == torch.float64 else torch.float32
    assert y.dtype == dtype and mean.dtype == want and rstd.dtype == want
    assert mean.shape == rstd.shape == (2, 3)
    # The backward takes them back as they are; the other statistics dtype is a clear error.
    torch.ops.adaptiveload.adaln_bwd(y, x, scale, w, b, mean, rstd, [True] * 4)
    other = torch.float32 if dtype == torch.float64 else torch.float64
    with pytest.raises(ValueError, match=f"mean must be {str(want)[6:]}"):
        torch.ops.adaptiveload.adaln_bwd(y, x, scale, w, b, mean.to(other), rstd, [True] * 4)


@pytest.mark.parametrize(
    "mask", [[True, True, True, True], [False, True, False, True], [False, False, False, False]],
    ids=["all", "some", "dx_only"],
)
@pytest.mark.parametrize("layout", sorted(FP64_LAYOUTS))
def test_opcheck_fp64_both_ops(layout, mask):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip(f"torch.library.opcheck needs torch >= 2.4 (this is {torch.__version__})")
    x, shift, scale, w, b = make_fp64(8, FP64_LAYOUTS[layout], affine=True)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_fwd.default, (x, shift, scale, w, b, EPS))
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(*(t.detach() for t in (x, shift, scale, w, b)), EPS)
    assert mean.dtype == torch.float64
    dy = torch.randn_like(y)
    args = (dy, x.detach(), scale.detach(), w.detach(), b.detach(), mean, rstd, mask)
    torch.library.opcheck(torch.ops.adaptiveload.adaln_bwd.default, args)
