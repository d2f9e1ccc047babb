"""One rank of the Ulysses sequence-parallel epoch (run by test_sequence_parallel.py under
torchrun with 4 processes, gloo on CPU).

14 samples, the first distinct geometries of the TaiChi-HD and COCO manifests scaled down to
tiny token grids, are trained for one epoch by the tiny WanDiT. A hand-made schedule (until the
planner provides one) gives each step one group size, every rank busy: size 1 ([0], [1], [2],
[3]: four samples), size 2 ([0, 1], [2, 3]: two), size 4 ([0, 1, 2, 3]: one); larger samples go
to larger groups. Per step each rank computes its sample's loss and gradients on its shard,
sums the gradients over its group, and compares them with the non-parallel computation of the
same sample on the same weights in this process (sp=None: no communication). Then the groups'
gradients are averaged over the step's samples (data parallel over groups) and SGD steps.
At the end rank 0 replays the whole epoch without sequence parallelism and compares the final
weights. Rank 0 writes every rank's records as JSON to argv[1]; argv[2:] are the manifests.

pair_main is the two-process check test_sequence_parallel.py starts without torchrun
(torch.multiprocessing, gloo over a file store): the all-to-all, gather and loss reduction
forward and backward against the dense computation, and the model with g=2 against sp=None."""
import csv
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from adaptiveload import sequence_parallel as spl
from adaptiveload.models import wan_dit

SIZES = (1, 2, 4)
LR = 0.05


def tiny_grid(frames: int, height: int, width: int) -> tuple:
    """A clip's token grid scaled down for CPU: at most 3 latent frames (Wan's VAE keeps 1 of 4
    frames), about one token per 112 pixels a side."""
    return min(1 + (frames - 1) // 4, 3), max(1, int(height / 112 + 0.5)), max(1, int(width / 112 + 0.5))


def load_samples(manifests, per_manifest=(4, 10)):
    """The first `per_manifest[k]` distinct tiny geometries of each manifest, in file order:
    [(id, (f, h, w) latent shape, tokens)]."""
    out = []
    for path, k in zip(manifests, per_manifest):
        seen = set()
        with open(path, newline="") as f:
            for row_no, row in enumerate(csv.DictReader(f)):
                g = tiny_grid(int(row["num_frames"]), int(row["height"]), int(row["width"]))
                if g in seen:
                    continue
                seen.add(g)
                out.append((f"{os.path.basename(path)}:{row_no}", (g[0], 2 * g[1], 2 * g[2]), g[0] * g[1] * g[2]))
                if len(seen) == k:
                    break
    return out


def hand_schedule(samples, world):
    """[(group size, [sample index per group, in group order])]: by token count, the 8 smallest
    in two size-1 steps, the next 4 in two size-2 steps, the 2 largest in two size-4 steps;
    steps interleaved 1, 2, 4, 1, 2, 4 so groups change every step."""
    assert world == 4 and len(samples) == 14, (world, len(samples))
    order = sorted(range(len(samples)), key=lambda i: (samples[i][2], samples[i][0]))
    one, two, four = order[:8], order[8:12], order[12:]
    steps = []
    for r in range(2):
        steps += [(1, one[4 * r:4 * r + 4]), (2, two[2 * r:2 * r + 2]), (4, four[r:r + 1])]
    return steps


def sample_data(i, shape, c):
    g = torch.Generator().manual_seed(1000 + i)
    x0 = torch.randn((1, c.in_channels) + tuple(shape), generator=g)
    ctx = torch.randn(1, c.text_len, c.text_dim, generator=g)
    return x0, ctx


def loss_gen(i):
    return torch.Generator().manual_seed(2000 + i)  # t and noise: the same on every rank of the group


def make_model(c):
    torch.manual_seed(0)
    return wan_dit.WanDiT(c)


def all_reduce_step(params, flat, samples, opt):
    """Sums this rank's flat gradient over the world, divides by the step's samples, hands it
    to the parameters and steps the optimizer (data parallel over the step's groups)."""
    dist.all_reduce(flat)
    flat /= samples
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    opt.step()


def grad_errors(got, ref, rtol, atol):
    """max |got - ref|, max over tensors of max|got - ref| / max|ref|, and the worst
    |got - ref| / (atol + rtol |ref|) (<= 1: within tolerance)."""
    abs_err = max((a - b).abs().max().item() for a, b in zip(got, ref))
    rel = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(got, ref))
    ratio = max(((a - b).abs() / (atol + rtol * b.abs())).max().item() for a, b in zip(got, ref))
    return abs_err, rel, ratio


def check_exchange(sp):
    """seq_to_heads / heads_to_seq / unshard / all_reduce_sum against the dense tensors, fp64,
    exact: sequences of 1 (an empty shard), 7 (uneven) and 12 tokens, two layouts."""
    p, g = sp.position, sp.size
    for S in (1, 7, 12):
        for layout in ([2, S, 4, 3], [2, S, 3, 4, 5]):  # [B, S, H, d] and q/k/v stacked [B, S, 3, H, d]
            head_dim = len(layout) - 2
            gen = torch.Generator().manual_seed(S + len(layout))
            full = torch.randn(layout, generator=gen, dtype=torch.float64)  # the same on both ranks
            w = torch.randn(layout, generator=gen, dtype=torch.float64)
            hs = slice(p * layout[head_dim] // g, (p + 1) * layout[head_dim] // g)
            mine = (slice(None),) * head_dim + (hs,)
            start, end = sp.bounds(S)
            x = spl.shard(full, sp).clone().requires_grad_()
            assert x.shape[1] == end - start
            y = spl.seq_to_heads(x, sp, S, seq_dim=1, head_dim=head_dim)
            assert torch.equal(y, full[mine]), (S, layout)
            (y * w[mine]).sum().backward()  # d/dfull of sum_p <full[.., heads_p], w[.., heads_p]> = w
            assert torch.equal(x.grad, w[:, start:end]), (S, layout)

            y2 = full[mine].clone().requires_grad_()
            z = spl.heads_to_seq(y2, sp, seq_dim=1, head_dim=head_dim)
            assert torch.equal(z, full[:, start:end]), (S, layout)
            (z * w[:, start:end]).sum().backward()
            assert torch.equal(y2.grad, w[mine]), (S, layout)

        x = spl.shard(full, sp).clone().requires_grad_()
        u = spl.unshard(x, sp, S)
        assert torch.equal(u, full)
        (u * w).sum().backward()
        assert torch.equal(x.grad, w[:, start:end])
        x.grad = None
        total = spl.all_reduce_sum(x.sum(), sp)
        assert torch.allclose(total, full.sum(), rtol=1e-12, atol=1e-12)
        total.backward()
        assert torch.equal(x.grad, torch.ones_like(x))


def check_model(sp, rtol, atol):
    """The tiny WanDiT with g=2 against sp=None on the same weights: output (gathered),
    loss and gradients; eager and fused adaLN, with and without checkpointing; 1, 9 and 12
    tokens. Returns the worst errors seen."""
    c = wan_dit.config("tiny")
    worst = {"out_abs": 0.0, "loss_abs": 0.0, "grad_abs": 0.0, "grad_rel": 0.0, "grad_tol_ratio": 0.0}
    for fused, ckpt in ((False, False), (True, True)):
        model = make_model(c)
        model.set_fused_adaln(fused)
        model.checkpointing = ckpt
        params = list(model.parameters())
        for i, shape in enumerate(((1, 2, 2), (1, 6, 6), (2, 4, 6))):
            x0, ctx = sample_data(i, shape, c)
            t = torch.tensor([321.0])
            with torch.no_grad():
                out = spl.unshard(model(x0, t, ctx, sp=sp), sp, x0[0, 0].numel() // 4)
                ref_out = model(x0, t, ctx)
            got = wan_dit.unpatchify(out, c.patch, x0.shape[1:])
            torch.testing.assert_close(got, ref_out, rtol=rtol, atol=atol)
            worst["out_abs"] = max(worst["out_abs"], (got - ref_out).abs().max().item())

            model.zero_grad(set_to_none=True)
            loss = wan_dit.flow_matching_loss(model, x0, ctx, loss_gen(i), sp=sp).mean()
            loss.backward()
            spl.reduce_gradients(params, sp)
            grads = [q.grad.clone() for q in params]
            model.zero_grad(set_to_none=True)
            ref = wan_dit.flow_matching_loss(model, x0, ctx, loss_gen(i)).mean()
            ref.backward()
            torch.testing.assert_close(loss, ref, rtol=rtol, atol=atol)
            for q, gq in zip(params, grads):
                torch.testing.assert_close(gq, q.grad, rtol=rtol, atol=atol)
            abs_err, rel_err, ratio = grad_errors(grads, [q.grad for q in params], rtol, atol)
            worst["loss_abs"] = max(worst["loss_abs"], abs(loss.item() - ref.item()))
            worst["grad_abs"] = max(worst["grad_abs"], abs_err)
            worst["grad_rel"] = max(worst["grad_rel"], rel_err)
            worst["grad_tol_ratio"] = max(worst["grad_tol_ratio"], ratio)
    return worst


def pair_main(rank, store_path, out_dir, rtol, atol):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    groups = spl.new_sp_groups(2, (2, 1))
    assert sorted(groups) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert groups[(2, rank)].ranks == (0, 1) and groups[(2, rank)].position == rank
    assert groups[(1, rank)].ranks == (rank,) and groups[(1, rank)].position == 0
    try:
        spl.new_sp_groups(2, (3,))
        raise AssertionError("group size 3 on 2 ranks accepted")
    except ValueError as e:
        assert "world_size=2" in str(e), e
    sp = groups[(2, rank)]
    check_exchange(sp)
    worst = check_model(sp, rtol, atol)
    with open(os.path.join(out_dir, f"pair{rank}.json"), "w") as f:
        json.dump(worst, f)
    dist.barrier()
    dist.destroy_process_group()


def main(out_path, manifests):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))  # a lost peer fails, not hangs
    rank, world = dist.get_rank(), dist.get_world_size()
    rtol, atol = float(os.environ.get("SP_RTOL", "1e-5")), float(os.environ.get("SP_ATOL", "1e-6"))
    torch.set_num_threads(1)
    c = wan_dit.config("tiny")
    groups = spl.new_sp_groups(world, SIZES)
    samples = load_samples(manifests)
    steps = hand_schedule(samples, world)
    model = make_model(c)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    records = []
    t_sp = t_ref = 0.0
    for step, (size, ids) in enumerate(steps):
        sp = groups[(size, rank)]
        i = ids[rank // size]
        sid, shape, tokens = samples[i]
        x0, ctx = sample_data(i, shape, c)

        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = wan_dit.flow_matching_loss(model, x0, ctx, loss_gen(i), sp=sp).mean()
        loss.backward()
        spl.reduce_gradients(params, sp)
        grads = [p.grad.clone() for p in params]
        t_sp += time.perf_counter() - t0

        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        ref = wan_dit.flow_matching_loss(model, x0, ctx, loss_gen(i)).mean()
        ref.backward()
        ref_grads = [p.grad.clone() for p in params]
        t_ref += time.perf_counter() - t0

        abs_err, rel_err, ratio = grad_errors(grads, ref_grads, rtol, atol)
        records.append({"step": step, "rank": rank, "size": size, "ranks": list(sp.ranks), "position": sp.position,
                        "id": sid, "tokens": tokens, "shard": list(sp.bounds(tokens)), "loss": loss.item(),
                        "ref_loss": ref.item(), "grad_abs_err": abs_err, "grad_rel_err": rel_err,
                        "grad_tol_ratio": ratio})

        # Data parallel over the step's groups: a group's g ranks hold the same sample
        # gradient, so each adds 1/g of it; the mean over the step's samples follows.
        all_reduce_step(params, torch.cat([g.reshape(-1) for g in grads]) / size, len(ids), opt)

    final = torch.cat([p.detach().reshape(-1) for p in params])
    finals = [torch.empty_like(final) for _ in range(world)]
    dist.all_gather(finals, final)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "records": records, "t_sp": t_sp, "t_ref": t_ref})
    if rank == 0:
        replay = make_model(c)  # the epoch without sequence parallelism, one process
        rparams = list(replay.parameters())
        ropt = torch.optim.SGD(rparams, lr=LR)
        for _size, ids in steps:
            ropt.zero_grad(set_to_none=True)
            for i in ids:
                x0, ctx = sample_data(i, samples[i][1], c)
                (wan_dit.flow_matching_loss(replay, x0, ctx, loss_gen(i)).mean() / len(ids)).backward()
            ropt.step()
        rfinal = torch.cat([p.detach().reshape(-1) for p in rparams])
        result = {
            "world": world, "rtol": rtol, "atol": atol,
            "samples": [s[0] for s in samples], "steps": [[s, [samples[i][0] for i in ids]] for s, ids in steps],
            "ranks": gathered,
            "weights_spread": max((f - final).abs().max().item() for f in finals),
            "replay_abs_err": (final - rfinal).abs().max().item(),
            "replay_rel_err": ((final - rfinal).abs().max() / rfinal.abs().max()).item(),
            "weights_moved": (rfinal - torch.cat([p.detach().reshape(-1) for p in make_model(c).parameters()]))
            .abs().max().item(),
        }
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
