"""Edge cases of the fused adaLN op that test_adaln_op.py does not cover: non-finite inputs,
D = 1, zero rows in every layout, more rows than a CUDA grid's y/z limit (65,535) with a
small D, and inputs on different devices or of unsupported dtypes (clear errors)."""
import pytest
import torch
import torch.nn.functional as F

import adaptiveload

EPS = 1e-6


def eager(x, shift, scale, w=None, b=None):
    if x.dim() == 3 and shift.dim() == 2:  # per sample [B, D] -> [B, 1, D]
        shift, scale = shift[:, None, :], scale[:, None, :]
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS) * (1 + scale) + shift


def rows_finite(t):
    return torch.isfinite(t.reshape(-1, t.shape[-1])).all(dim=1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_finite_x_poisons_only_its_row(bad, dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 48).to(dtype)
    x[1, 3, 7] = bad
    shift, scale = torch.randn(2, 48), torch.randn(2, 48)
    xr = x.detach().clone().requires_grad_(True)
    sh, sc = shift.clone().requires_grad_(True), scale.clone().requires_grad_(True)
    y = adaptiveload.fused_adaln(xr, sh, sc)
    finite = rows_finite(y.float())
    assert not finite[8]  # row (1, 3) is non-finite, as in PyTorch's LayerNorm
    assert finite[torch.arange(10) != 8].all()
    ref = eager(x.float().double(), shift.double(), scale.double())
    good = torch.arange(10) != 8
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(
        y.float().double().reshape(10, 48)[good], ref.reshape(10, 48)[good], rtol=tol, atol=tol
    )
    # Backward: the bad row's dx is non-finite, the other rows' dx stay finite; the
    # reductions over the bad sample's rows (dscale/dshift of sample 1) may be non-finite.
    y.float().sum().backward()
    assert rows_finite(xr.grad.float())[good].all()
    assert torch.isfinite(sh.grad).all()  # dshift = sum dy: independent of x
    assert torch.isfinite(sc.grad[0]).all()


def test_non_finite_modulation_reaches_only_its_sample():
    x = torch.randn(3, 4, 16)
    shift, scale = torch.randn(3, 16), torch.randn(3, 16)
    scale[2, 5] = float("nan")
    y = adaptiveload.fused_adaln(x, shift, scale)
    assert torch.isnan(y[2, :, 5]).all()
    assert torch.isfinite(y[:2]).all() and torch.isfinite(y[2][:, torch.arange(16) != 5]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_d1_normalises_to_zero(dtype):
    # One feature: x - mean(x) = 0, so y = shift exactly, and dx = 0.
    x = (torch.randn(3, 7, 1) * 100).to(dtype).requires_grad_(True)
    shift = torch.randn(3, 1, requires_grad=True)
    scale = torch.randn(3, 1, requires_grad=True)
    y = adaptiveload.fused_adaln(x, shift, scale)
    assert y.dtype == dtype and y.shape == (3, 7, 1)
    torch.testing.assert_close(y.float(), shift[:, None, :].detach().expand(3, 7, 1).to(dtype).float())
    y.float().sum().backward()
    assert torch.equal(x.grad.float(), torch.zeros(3, 7, 1))
    torch.testing.assert_close(shift.grad, torch.full((3, 1), 7.0))
    torch.testing.assert_close(scale.grad, torch.zeros(3, 1))


def test_d1_gradcheck():
    x = torch.randn(2, 3, 1, requires_grad=True)
    shift = torch.randn(2, 1, requires_grad=True)
    scale = torch.randn(2, 1, requires_grad=True)
    with pytest.warns(UserWarning):  # fp32 inputs: "not a double precision floating point"
        assert torch.autograd.gradcheck(
            lambda a, b, c: adaptiveload.fused_adaln(a, b, c), (x, shift, scale), eps=1e-2, atol=1e-2, rtol=1e-2
        )


@pytest.mark.parametrize(
    "x_shape,mod_shape",
    [((0, 16), (1, 16)), ((0, 16), (0, 16)), ((2, 0, 16), (2, 16)), ((2, 0, 16), (2, 0, 16)), ((0, 0, 16), (0, 16))],
)
def test_zero_rows_in_every_layout(x_shape, mod_shape):
    x = torch.randn(x_shape, requires_grad=True)
    shift = torch.randn(mod_shape, requires_grad=True)
    scale = torch.randn(mod_shape, requires_grad=True)
    w = torch.ones(16, requires_grad=True)
    b = torch.zeros(16, requires_grad=True)
    y = adaptiveload.fused_adaln(x, shift, scale, w, b)
    assert y.shape == x.shape
    y.sum().backward()
    # A sum over no rows is zero, not garbage.
    for t in (x, shift, scale, w, b):
        assert t.grad.shape == t.shape and not t.grad.abs().sum()


@pytest.mark.parametrize("per_token", [False, True])
def test_more_rows_than_a_cuda_grid_dimension(per_token):
    # 200,003 rows x D = 4 (> 65,535, the limit of a CUDA grid's y / z dimension): on CPU it
    # must simply work, and match PyTorch.
    torch.manual_seed(1)
    n, d = 200_003, 4
    x = torch.randn(n, d, requires_grad=True)
    mod = (n, d) if per_token else (1, d)
    shift = torch.randn(mod, requires_grad=True)
    scale = torch.randn(mod, requires_grad=True)
    y = adaptiveload.fused_adaln(x, shift, scale)
    ref = eager(x.double(), shift.double(), scale.double())
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)
    g = torch.randn(n, d)
    y.backward(g)
    xd, sd, cd = (t.detach().double().requires_grad_(True) for t in (x, shift, scale))
    eager(xd, sd, cd).backward(g.double())
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(shift.grad.double(), sd.grad, rtol=1e-4, atol=1e-3 * (1 if per_token else n**0.5))
    torch.testing.assert_close(scale.grad.double(), cd.grad, rtol=1e-4, atol=1e-3 * (1 if per_token else n**0.5))


@pytest.mark.parametrize(
    "x_dtype,mod_dtype,w_dtype,pattern",
    [
        (torch.int32, torch.float32, None, "x has dtype"),
        (torch.float16, torch.float64, None, "must be float32 or x's dtype"),  # float64 x is supported
        (torch.float32, torch.float64, None, "must be float32 or x's dtype"),
        (torch.bfloat16, torch.float16, None, "must be float32 or x's dtype"),
        (torch.float32, torch.int64, None, "scale has dtype int64"),
        (torch.float32, torch.float32, torch.int32, "weight has dtype int32"),
    ],
)
def test_unsupported_dtypes_are_clear_errors(x_dtype, mod_dtype, w_dtype, pattern):
    x = torch.ones(2, 3, 8, dtype=x_dtype)
    mod = torch.ones(2, 8, dtype=mod_dtype)
    w = None if w_dtype is None else torch.ones(8, dtype=w_dtype)
    with pytest.raises(ValueError, match=pattern):
        adaptiveload.fused_adaln(x, mod, mod, w, w)


@pytest.mark.skipif(not torch.cuda.is_available() or not adaptiveload._C.with_cuda, reason="needs a CUDA build and GPU")
@pytest.mark.parametrize("on_gpu", ["x", "shift", "scale", "weight"])
def test_inputs_on_different_devices_are_clear_errors(on_gpu):
    t = {
        "x": torch.randn(2, 3, 8),
        "shift": torch.randn(2, 8),
        "scale": torch.randn(2, 8),
        "weight": torch.ones(8),
    }
    t[on_gpu] = t[on_gpu].cuda()
    with pytest.raises(RuntimeError, match=f"{on_gpu} is on"):
        adaptiveload.fused_adaln(t["x"], t["shift"], t["scale"], t["weight"], torch.zeros(8, device=t["weight"].device))
