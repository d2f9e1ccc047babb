"""Inputs the ops and the packing helpers must refuse by name, in every backend: tensors on
mixed devices (varlen_attention, fused_adaln: a meta tensor among CPU ones would run the fake
kernel and hand back uninitialised memory), integer attention inputs, per-token timesteps given
per sample (pack / collate_packed take them), unpack with the wrong feature width; and the
sampler's empty epoch (drop_last=True, fewer samples than ranks), said as the CLI says it."""
import csv
import warnings

import pytest
import torch

import adaptiveload
from adaptiveload import AdaptiveBatchSampler
from adaptiveload.attention import varlen_attention, varlen_sdpa_fwd
from adaptiveload.packing import collate_packed, pack, unpack

OTHER_DEVICES = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])


def qkv(lengths=(3, 5), heads=2, d=4, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    n = sum(lengths)
    q, k, v = (torch.randn(n, heads, d, generator=g).to(dtype) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    return q, k, v, cu


# --- varlen_attention: devices and dtypes -------------------------------------------------


@pytest.mark.parametrize("other", OTHER_DEVICES)
@pytest.mark.parametrize("which", ["cu_seqlens_q", "cu_seqlens_k"])
@pytest.mark.parametrize("backend", ["auto", "sdpa", "flex", "flash"])
def test_varlen_attention_refuses_offsets_on_another_device(backend, which, other):
    q, k, v, cu = qkv()
    cus = {"cu_seqlens_q": cu, "cu_seqlens_k": cu.clone()}
    cus[which] = cus[which].to(other)
    with pytest.raises(ValueError, match=f"{which} is on {other}.* but q, k and v are on cpu"):
        varlen_attention(q, k, v, cus["cu_seqlens_q"], cus["cu_seqlens_k"], backend=backend)


@pytest.mark.parametrize("other", OTHER_DEVICES)
def test_varlen_attention_refuses_qkv_off_the_offsets_device(other):
    q, k, v, cu = qkv()
    with pytest.raises(ValueError, match=f"cu_seqlens_q is on cpu but q, k and v are on {other}"):
        varlen_attention(q.to(other), k.to(other), v.to(other), cu, cu)


@pytest.mark.parametrize("other", OTHER_DEVICES)
def test_the_op_itself_refuses_a_device_mix(other):
    """The custom op called directly: a meta offset tensor dispatches to the fake kernel, which
    refuses (it had returned uninitialised memory)."""
    q, k, v, cu = qkv()
    with pytest.raises(ValueError, match=f"cu_seqlens_k is on {other}"):
        varlen_sdpa_fwd(q, k, v, cu, cu.to(other), None)


def test_compiled_varlen_attention_refuses_a_device_mix():
    torch._dynamo.reset()
    q, k, v, cu = qkv()
    f = torch.compile(lambda *a: varlen_attention(*a, backend="sdpa"), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="cu_seqlens_q is on meta but q, k and v are on cpu"):
        f(q, k, v, cu.to("meta"), cu)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["q", "k", "v", "all"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_varlen_attention_refuses_integer_tensors_by_name(name, dtype):
    q, k, v, cu = qkv()
    t = dict(q=q, k=k, v=v)
    for n in ("q", "k", "v") if name == "all" else (name,):
        t[n] = t[n].to(dtype)
    first = "q" if name == "all" else name
    for backend in ("auto", "sdpa", "flex"):
        with pytest.raises(ValueError, match=f"varlen_attention: {first} has dtype {dtype}; attention needs floating"):
            varlen_attention(t["q"], t["k"], t["v"], cu, cu, backend=backend)


# --- fused_adaln: every argument against x, cu_seqlens included ---------------------------


def adaln_inputs(lengths=(3, 5), D=8):
    g = torch.Generator().manual_seed(0)
    n, N = len(lengths), sum(lengths)
    return dict(x=torch.randn(N, D, generator=g), shift=torch.randn(n, D, generator=g),
                scale=torch.randn(n, D, generator=g), weight=torch.ones(D), bias=torch.zeros(D),
                cu_seqlens=torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist()))


@pytest.mark.parametrize("other", OTHER_DEVICES)
@pytest.mark.parametrize("name", ["shift", "scale", "weight", "bias", "cu_seqlens"])
def test_fused_adaln_refuses_each_argument_on_another_device(name, other):
    a = adaln_inputs()
    a[name] = a[name].to(other)
    with pytest.raises(RuntimeError, match=f"{name} is on {other}.* but x is on cpu"):
        adaptiveload.fused_adaln(a["x"], a["shift"], a["scale"], a["weight"], a["bias"], cu_seqlens=a["cu_seqlens"])


@pytest.mark.parametrize("other", OTHER_DEVICES)
def test_fused_adaln_refuses_x_off_the_others_device(other):
    a = adaln_inputs()
    with pytest.raises(RuntimeError, match=f"shift is on cpu but x is on {other}"):
        adaptiveload.fused_adaln(a["x"].to(other), a["shift"], a["scale"], cu_seqlens=a["cu_seqlens"])


@pytest.mark.parametrize("name", ["grad_output", "mean", "rstd"])
def test_fused_adaln_backward_refuses_each_argument_on_another_device(name):
    a = adaln_inputs()
    x, cu = a["x"], a["cu_seqlens"]
    y, mean, rstd = torch.ops.adaptiveload.adaln_fwd(x, a["shift"], a["scale"], None, None, 1e-6, cu)
    b = dict(grad_output=torch.ones_like(y), mean=mean, rstd=rstd)
    b[name] = b[name].to("meta")
    with pytest.raises(RuntimeError, match=f"{name} is on meta.* but x is on cpu"):
        torch.ops.adaptiveload.adaln_bwd(b["grad_output"], x, a["scale"], None, None, b["mean"], b["rstd"],
                                         [True] * 4, cu)


def test_compiled_fused_adaln_refuses_a_device_mix():
    torch._dynamo.reset()
    a = adaln_inputs()
    f = torch.compile(lambda x, s, c, cu: adaptiveload.fused_adaln(x, s, c, cu_seqlens=cu), fullgraph=True,
                      backend="eager")
    with pytest.raises(Exception, match="cu_seqlens is on meta but x is on cpu"):
        f(a["x"], a["shift"], a["scale"], a["cu_seqlens"].to("meta"))
    torch._dynamo.reset()


# --- pack / collate_packed / unpack -------------------------------------------------------

LATENTS = [torch.randn(4, 1, 4, 6), torch.randn(4, 3, 2, 2)]  # 6 and 3 tokens at patch (1, 2, 2)


def test_pack_takes_per_token_timesteps_per_sample():
    """The form packed_forward takes: one entry per sample, a number or that sample's [S_i]
    per-token tensor; as a pack's [N] per-token timesteps in its row order."""
    t0, t1 = torch.arange(6.0), torch.tensor(0.5)
    p = pack(LATENTS, timesteps=[t0, t1])
    assert p.timesteps.shape == (9,)
    torch.testing.assert_close(p.timesteps, torch.cat([t0, torch.full((3,), 0.5)]))
    c = collate_packed([{"latent": LATENTS[0], "timestep": t0}, {"latent": LATENTS[1], "timestep": torch.ones(3)}])
    torch.testing.assert_close(c.timesteps, torch.cat([t0, torch.ones(3)]))
    # Per sample, one value each: [n] as before, in every form.
    for t in ([0.1, 0.9], torch.tensor([0.1, 0.9]), [torch.tensor(0.1), torch.tensor([0.9])]):
        torch.testing.assert_close(pack(LATENTS, timesteps=t).timesteps, torch.tensor([0.1, 0.9]))
    torch.testing.assert_close(pack(LATENTS, timesteps=list(range(9))).timesteps, torch.arange(9))


def test_pack_refuses_timesteps_that_fit_no_sample_by_name():
    with pytest.raises(ValueError, match=r"timesteps\[1\] has 4 values; sample 1 has 3 tokens"):
        pack(LATENTS, timesteps=[torch.arange(6.0), torch.arange(4.0)])
    with pytest.raises(ValueError, match=r"timesteps\[1\] has 4 values; sample 1 has 3 tokens"):
        collate_packed([{"latent": LATENTS[0], "timestep": 0.5}, {"latent": LATENTS[1], "timestep": torch.zeros(4)}])
    with pytest.raises(ValueError, match=r"timesteps\[0\] \(sample 0\) must be a number or a tensor, got str"):
        pack(LATENTS, timesteps=["soon", torch.tensor(1.0)])
    with pytest.raises(ValueError, match="5 timesteps for 2 samples of 9 tokens"):
        pack(LATENTS, timesteps=torch.zeros(5))


def test_unpack_names_the_expected_feature_width():
    p = pack(LATENTS)
    assert [o.shape for o in unpack(p.tokens, p)] == [x.shape for x in LATENTS]
    with pytest.raises(ValueError, match=r"unpack: tokens has 15 features a row; the pack's samples need 16 \(C = 4 "
                                         r"channels x patch \(1, 2, 2\)\): shape \(9, 15\), expected \[9, 16\]"):
        unpack(p.tokens[:, :15], p)


# --- the sampler's empty epoch ------------------------------------------------------------


def test_drop_last_with_fewer_samples_than_ranks_warns_that_it_trains_nothing(tmp_path):
    path = tmp_path / "m.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "num_frames", "height", "width", "fps"])
        w.writerows([[f"i{i}.jpg", 1, 480, 640, ""] for i in range(3)])
    with pytest.warns(UserWarning, match=r"drops 3 of 3 samples \(100.0%\) at the epoch's end \(drop_last=True; it "
                                         r"trains nothing\); use drop_last=False, fewer ranks \(world_size\)"):
        s = AdaptiveBatchSampler(str(path), model="tiny-dit", device="cpu", world_size=4, rank=0, drop_last=True)
    assert len(s) == 0 and s.num_steps == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # padding (the default) trains every sample: nothing to say
        s = AdaptiveBatchSampler(str(path), model="tiny-dit", device="cpu", world_size=4, rank=0)
    assert s.num_steps == 1
