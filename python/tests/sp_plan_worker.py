"""One rank of the planner-made sequence-parallel epoch (test_sequence_parallel.py runs it under
torchrun with 4 processes, gloo on CPU).

The schedule is the planner's: AdaptiveBatchSampler (balanced, step sync, sp="min": each
sample on the smallest group it fits)
on a manifest of real Taichi-HD and COCO rows, the tiny DiT preset and tiny grid, and a device
(argv[2], written by the test) whose memory holds about 108 tokens of one sample per GPU: the
grid's 17-frame 96p clips (300 tokens) need a group of 4, its 64p clips a group of 2, images
none. Every rank builds the same plan alone, creates the aligned groups once
(new_sp_groups(world, sampler.sp_sizes())), and runs its micro-batches of every step in order,
each on the group the plan gives it (PlannedStep.groups). A group micro-batch's gradients are
summed over the group and compared with the non-parallel computation of the same samples on
the same weights in this process; each rank adds its micro-batches' gradients (a group's, 1/g
of it on each of its ranks), the step all-reduces them over the world and divides by the
step's global sample count (data parallel), and SGD steps. Rank 0 replays the epoch in one
process without sequence parallelism and compares the final weights. argv: out.json,
device.json, manifest.csv."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from adaptiveload import sequence_parallel as spl
from adaptiveload.models import wan_dit
from adaptiveload.sampler import AdaptiveBatchSampler
from sp_worker import all_reduce_step, loss_gen, make_model, sample_data  # the same data, noise, weights, step

LR = 0.05


def latent_shape(geometry, c):
    frames, height, width = geometry
    return (1 + (frames - 1) // 4, height // 8, width // 8)


def micro_batch_grads(model, params, rows, shapes, c, sp):
    """Summed loss and gradients of one micro-batch's samples (sp=None: this process alone)."""
    for p in params:
        p.grad = None
    total = 0.0
    for row in rows:
        x0, ctx = sample_data(row, shapes[row], c)
        loss = wan_dit.flow_matching_loss(model, x0, ctx, loss_gen(row), sp=sp).mean()
        loss.backward()
        total += loss.item()
    if sp is not None:
        spl.reduce_gradients(params, sp)
    return total, [p.grad.clone() for p in params]


def main(out_path, device_path, manifest_path):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))  # a lost peer fails, not hangs
    rank, world = dist.get_rank(), dist.get_world_size()
    rtol, atol = float(os.environ.get("SP_RTOL", "1e-5")), float(os.environ.get("SP_ATOL", "1e-6"))
    torch.set_num_threads(1)
    c = wan_dit.config("tiny")
    sampler = AdaptiveBatchSampler(manifest_path, model="tiny-dit", device=device_path, strategy="balanced",
                                   world_size=world, rank=rank, sharding="none", sync="step", sp="min")
    sizes = sampler.sp_sizes()
    groups = spl.new_sp_groups(world, sizes)
    steps = list(sampler.steps())
    shapes = {row: latent_shape(sampler.sample_geometry(row), c) for row in sampler.planned_rows()}
    model = make_model(c)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    records = []
    t_sp = t_ref = 0.0
    for st in steps:
        acc = None
        for k, (rows, ranks) in enumerate(zip(st.micro_batches, st.groups)):
            g = len(ranks)
            sp = groups[(g, rank)]
            assert tuple(sp.ranks) == tuple(ranks), (sp.ranks, ranks)
            t0 = time.perf_counter()
            loss, grads = micro_batch_grads(model, params, rows, shapes, c, sp)
            t_sp += time.perf_counter() - t0
            t0 = time.perf_counter()
            ref_loss, ref_grads = micro_batch_grads(model, params, rows, shapes, c, None)
            t_ref += time.perf_counter() - t0
            abs_err = max((a - b).abs().max().item() for a, b in zip(grads, ref_grads))
            ratio = max(((a - b).abs() / (atol + rtol * b.abs())).max().item() for a, b in zip(grads, ref_grads))
            tokens = [shapes[r][0] * (shapes[r][1] // 2) * (shapes[r][2] // 2) for r in rows]
            records.append({"step": st.step, "rank": rank, "mb": k, "rows": list(rows), "ranks": list(sp.ranks),
                            "position": sp.position, "tokens": tokens,
                            "shards": [list(sp.bounds(n)) for n in tokens], "loss": loss, "ref_loss": ref_loss,
                            "grad_abs_err": abs_err, "grad_tol_ratio": ratio,
                            "padded": bool(st.padded_micro_batches[k])})
            flat = torch.cat([x.reshape(-1) for x in grads]) / g  # a group's g ranks hold the same sum
            acc = flat if acc is None else acc + flat
        all_reduce_step(params, acc, st.global_samples + st.padded_samples, opt)

    final = torch.cat([p.detach().reshape(-1) for p in params])
    finals = [torch.empty_like(final) for _ in range(world)]
    dist.all_gather(finals, final)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "records": records, "t_sp": t_sp, "t_ref": t_ref,
                                      "sizes": sizes, "steps": len(steps)})
    if rank == 0:
        # The epoch in one process: every step's samples (each group micro-batch once).
        by_step = {}
        for r in gathered:
            for e in r["records"]:
                if e["position"] == 0:
                    by_step.setdefault(e["step"], []).extend(e["rows"])
        replay = make_model(c)
        rparams = list(replay.parameters())
        ropt = torch.optim.SGD(rparams, lr=LR)
        for st in steps:
            ropt.zero_grad(set_to_none=True)
            for row in by_step[st.step]:
                x0, ctx = sample_data(row, shapes[row], c)
                (wan_dit.flow_matching_loss(replay, x0, ctx, loss_gen(row)).mean()
                 / (st.global_samples + st.padded_samples)).backward()
            ropt.step()
        rfinal = torch.cat([p.detach().reshape(-1) for p in rparams])
        result = {
            "world": world, "rtol": rtol, "atol": atol, "planned_rows": sampler.planned_rows(),
            "ranks": gathered,
            "weights_spread": max((f - final).abs().max().item() for f in finals),
            "replay_abs_err": (final - rfinal).abs().max().item(),
            "replay_rel_err": ((final - rfinal).abs().max() / rfinal.abs().max()).item(),
        }
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
