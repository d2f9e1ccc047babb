"""Train a Wan-2.1-style DiT on random latents shaped by a real manifest, with batches from
AdaptiveBatchSampler, and measure what DESIGN.md's metrics say: imbalance, throughput, peak
memory — beside the planner's prediction for the same steps.

Models (--model): wan-dit, our own (adaptiveload.models.wan_dit); diffusers-wan, diffusers'
WanTransformer3DModel built from the same dimensions with random weights (--config
wan2.1-1.3b is Wan 2.1 T2V 1.3B's config), its adaLN fused by adaptiveload.diffusers.

Two modes:
  emulated ranks (default): one process, one device; each global step runs every emulated
      rank's micro-batches in turn, timing each rank (CUDA events on GPU, wall clock on CPU);
      the step time is the slowest rank's, as in synchronous data parallelism. --rank-order
      sequential (default) runs them rank by rank; interleaved spreads each rank's over the
      step, so a drift of the machine's speed within a step falls on every rank alike.
  real data parallel: under torchrun (WORLD_SIZE set); NCCL on GPU, gloo on CPU. Each rank
      runs its micro-batches without synchronising gradients, then one explicit all-reduce
      per step; per-rank compute times are all-gathered.
  --parallel ddp / fsdp2 (under torchrun): the model wrapped as training jobs wrap it.
      ddp: DistributedDataParallel, no_sync() on all but the last micro-batch of a step (one
      all-reduce per step; ranks may run different numbers of micro-batches: the sampler's
      `step` sync mode). fsdp2: torch.distributed.fsdp.fully_shard on every block and on the
      root (FSDP2; works on CPU with gloo, fp32, no mixed-precision policy); every
      micro-batch's forward all-gathers and its backward reduce-scatters, so every rank must
      run the same number of micro-batches in every step (the sampler's `micro` sync mode),
      which the script checks before each step and fails loudly, naming rank and step, if not.
      Inputs are then a pure function of (seed, epoch, sample id) (--inputs per-sample), so a
      single-process run of the same plan (emulated ranks, --inputs per-sample) trains on the
      same tensors: python/tests/test_sharded_torchrun.py compares the two.

Sequence parallelism (--sp, --sp-sizes: the sampler's sp and sp_sizes; default auto): the
planner may run a sample too big for one GPU on an aligned group of ranks (PlannedStep.groups).
  under torchrun: the groups are created once (sequence_parallel.new_sp_groups), and each rank
      runs each micro-batch on its group's SPContext (wan-dit's sp= path, Ulysses): every rank
      of the group holds the same per-sample inputs and its shard of the tokens, and back-
      propagates the whole samples' loss through its shard; the step's gradient sum over the
      world then counts each sample once (as python/tests/sp_plan_worker.py's reduce over the
      group, then 1/g on each rank), and the loss is normalised by the step's samples, a
      group's counted once. --model diffusers-wan has no sp path: a plan with groups is refused.
  emulated ranks: a group's micro-batch runs once, whole, without sequence parallelism (the
      same loss and gradients), when the first of the group's ranks reaches it (the group's
      first rank with --rank-order sequential); each rank of the group is charged 1/g of its
      time, and it is logged once, as the group's first rank's (position 0). A note on stderr
      says so.
  --adapt-every with groups is refused (the refit does not model groups yet).

Packing (--packing on; both: each strategy bucketed, then packed): the sampler plans packed
micro-batches (packing="on": samples of any buckets in one micro-batch) and each that mixes
shapes is trained as one pack, one varlen token sequence (wan-dit:
models.wan_dit_packed.flow_matching_loss_packed; diffusers-wan:
adaptiveload.diffusers.packed_forward); one of a single shape runs as an ordinary batch, as the
planner prices it. Each sample's inputs are the unpacked path's at its own bucket (with
--inputs per-sample, the same tensors), the loss is normalised as unpacked (per-sample losses
summed over the step's global samples).
Under torchrun, ddp wraps a PackedForward module (the pack through DDP's forward, so its
hooks run), fsdp2 registers the blocks' and the root's forward_packed with FSDP2. Plans with
sequence-parallel groups are refused (a pack trains its samples on one GPU).
--packed-forward buckets runs each pack as one ordinary batch per shape: the same losses and
gradients, the reference python/tests/test_sharded_torchrun.py checks packed runs against.

Manifests: a bad row stops the run naming file, line and field (--on-bad-row error, the
default); --on-bad-row skip leaves bad rows out and says on stderr how many, with the first
messages, as it says which rows fit no bucket or are oversize (--on-oversize skip). Every
numeric option is range-checked when parsed (an argparse error naming it).

The harness is this module (python -m adaptiveload.training.train_dit, or examples/train_dit.py,
which runs it); the set-up it shares with any training loop (process groups, DDP / FSDP2
wrapping, the loss normalised from PlannedStep) is adaptiveload.training's.

Examples:
  python examples/train_dit.py --config tiny --strategy balanced --world-size 4 --steps 6
  python examples/train_dit.py --model diffusers-wan --config tiny --fused both --epoch --subset 200
  torchrun --nproc_per_node 8 examples/train_dit.py --config wan2.1-1.3b --layers 4 --device cuda
  torchrun --nproc_per_node 4 examples/train_dit.py --parallel fsdp2 --sync micro --epoch --subset 100
  torchrun --nproc_per_node 2 examples/train_dit.py --sp 2 --epoch --subset 10 --log-samples ids
  torchrun --nproc_per_node 2 examples/train_dit.py --parallel ddp --packing on --epoch --subset 100
The summary (one JSON object per strategy x kernel setting) goes to --out and stdout.
"""
import contextlib
import json
import os
import sys
import time
from typing import Dict, List

import torch

from .. import link
from ..models import wan_dit, wan_dit_packed
from ..sampler import AdaptiveBatchSampler
from .build import build_model
from .data_feed import (
    cache_feed,
    cache_inputs,
    check_feed_args,
    feed_order,
    loader_waits,
    media_encoder,
    media_feed,
    media_inputs,
)
from .distributed import (  # noqa: F401
    check_micro_batch_counts,
    exit_now,
    finish_distributed,
    full_state_dict,
    init_distributed,
    parallelize,
    sp_groups,
)
from .inputs import make_batch, pack_inputs, sample_inputs
from .loss import buckets_loss, flow_matching_loss_of, loss_scale, step_loss
from .metrics import (  # noqa: F401
    Timer,
    interleaved_order,
    jitter_prediction,
    metrics,
    profile_inputs_timed,
    profile_jitter,
    say_result,
    sync_wait,
)
from .options import (  # noqa: F401
    DEFAULT_MANIFESTS,
    PACKING_STRATEGIES,
    PACKINGS,
    PAPER,
    check_packed_model,
    inputs_timed_of,
    mem_budget_of,
    planned_runs,
    sampler_sync_options,
)
from .options import parse_args as _parse_args
from .options import parser as _parser
from .subset import load_subset, locate, report_left_out


def parse_args(argv=None):
    """The command line's options (options.parse_args, this module's docstring as --help's description)."""
    return _parse_args(argv, __doc__)


def parser():
    """The command line's parser (options.parser with this module's docstring)."""
    return _parser(__doc__)


def largest_group(samplers) -> int:
    """The largest sequence-parallel group in these samplers' plans of the epoch (1: none)."""
    return max([len(g) for s in samplers for st in s.schedule() for g in st.groups] or [1])


def run_strategy(args, strategy: str, fused: bool, dist_rank: int, dist_world: int, report: bool = True,
                 packing: bool = False) -> dict:
    """One run (a strategy, a kernel setting, a packing) start to end: its summary."""
    run = strategy_steps(args, strategy, fused, dist_rank, dist_world, report, packing)
    while True:
        try:
            next(run)
        except StopIteration as done:
            return done.value


def run_interleaved(runs: list) -> list:
    """Advances the runs (strategy_steps generators) one global step of their loops each in turn
    (a run's set-up and epoch warm-up come with its first turn), in their order, until each has
    ended: a drift of the machine's speed (clock frequency, caches,
    other load) then falls on every run alike, step by step, instead of on whichever ran at the
    time. Returns their summaries in the runs' order. Every rank of a torchrun job takes the
    same turns (the plans are the same on every rank), so the collectives match."""
    results = [None] * len(runs)
    live = list(range(len(runs)))
    while live:
        for i in list(live):
            try:
                next(runs[i])
            except StopIteration as done:
                results[i] = done.value
                live.remove(i)
    return results


# long-function: one run's state (samplers, model, optimizer, log, timers) lives across the
# yields of this generator; its set-up, step (train_step) and summary are its stages in order
def strategy_steps(args, strategy: str, fused: bool, dist_rank: int, dist_world: int, report: bool = True,
                   packing: bool = False):
    """A generator of one run: it sets the run up (samplers, model, warm-up) and trains one
    global step a turn, yielding after each step of the loop; its return value (StopIteration's)
    is the run's summary. run_strategy runs it to the end, run_interleaved beside others."""
    device = torch.device(args.device)
    ddp = dist_world > 1
    # Trained as packs: packing asked for, or a strategy that always packs (its micro-batches mix shapes).
    packs = packing or strategy in PACKING_STRATEGIES
    if packs:
        check_packed_model(args, ddp)
        if args.sp.isdigit() and int(args.sp) > 1:
            sys.exit(f"train_dit.py: --sp {args.sp} runs every sample on a sequence-parallel group of {args.sp}, "
                     "and a pack trains its samples on one GPU; use --sp auto or off with --packing on, or "
                     "--packing off")
    W = dist_world if ddp else args.world_size
    c = wan_dit.config(args.config, args.layers)
    grid = args.grid or ("tiny" if args.config == "tiny" else "wan")
    planner_device = args.planner_device or ("h200" if device.type == "cuda" else "cpu")
    mem_budget = mem_budget_of(args)
    manifests = args.manifest or DEFAULT_MANIFESTS
    if args.data == "cache":
        if not args.cache or args.manifest:
            sys.exit("train_dit.py: --data cache trains from the cache folder --cache DIR (it is the manifest; "
                     "no --manifest)")
        manifests = args.cache
    elif args.data == "media" and not args.manifest:
        sys.exit("train_dit.py: --data media decodes the files of a manifest: give --manifest (made by adaptiveload "
                 "scan) and --media-root, the folder its relative paths are under")
    subset_bad: List[str] = []
    origins: List[str] = []
    try:
        if args.subset is not None:
            manifests, origins, subset_bad = load_subset(manifests, args.subset, args.on_bad_row)
        samplers = [
            AdaptiveBatchSampler(
                manifests, model=c.preset, device=planner_device, grid=grid, strategy=strategy, world_size=W,
                rank=r, seed=args.seed, mem_budget=mem_budget, profile=args.profile,
                checkpointing=args.checkpointing, on_bad_row=args.on_bad_row, on_oversize=args.on_oversize,
                on_duplicate=args.on_duplicate, sp=args.sp, sp_sizes=args.sp_sizes, adapt_every=args.adapt_every,
                **sampler_sync_options(args), **({"packing": "on"} if packing else {}))
            for r in ([dist_rank] if ddp else range(W))
        ]
    except (OSError, ValueError) as e:  # a bad row, a missing file, an option the planner refuses
        msg = locate(str(e), origins)
        for keyword, option in (("on_bad_row='skip'", "--on-bad-row skip"),
                                ("on_oversize='skip'", "--on-oversize skip"),
                                ("packing='off'", "--packing off"), ("sp='auto'", "--sp auto")):
            msg = msg.replace(keyword, option)  # the sampler's advice, in this script's options
        sys.exit("train_dit.py: " + msg)
    if report and dist_rank == 0:
        report_left_out(samplers[0], subset_bad, origins)
    # Sequence parallelism: the largest group any rank's micro-batches run on (the same on every
    # rank: under torchrun the ranks' maxima are all-reduced, so all agree to create the groups).
    max_group = largest_group(samplers)
    if ddp:
        m = torch.tensor([max_group], dtype=torch.int64)
        torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX)
        max_group = int(m)
    if max_group > 1:
        if ddp and args.model != "wan-dit":
            sys.exit(f"train_dit.py: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                     "ranks, which only --model wan-dit implements (Ulysses); use --model wan-dit, or plan with "
                     "--sp off (a sample that fits no single GPU is then oversize: --on-oversize skip leaves it out)")
        if args.adapt_every is not None:
            sys.exit(f"train_dit.py: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                     "ranks, and online adaptation (--adapt-every) does not model groups yet; drop --adapt-every "
                     "or plan with --sp off")
        if not ddp and report:
            print(f"train_dit.py: note: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                  "ranks; emulated ranks run each such micro-batch once, whole, on its group's first rank, and "
                  "charge every rank of the group 1/g of its time (under torchrun the group's ranks run it "
                  "together, split over the sequence)", file=sys.stderr)
    groups = sp_groups(dist_world, samplers[0].sp_sizes()) if ddp and max_group > 1 else {}
    torch.manual_seed(args.seed)
    model = build_model(args.model, c, fused, args.checkpointing).to(device)
    # Every rank builds the same weights (same seed) before wrapping: FSDP2 keeps each rank's
    # shard of them, DDP broadcasts rank 0's.
    # A pack through one varlen forward: the loop calls `wrapped` on a PackedBatch.
    varlen = packs and args.packed_forward == "varlen"
    wrapped = parallelize(model, args.parallel if ddp else None, device, packed=varlen)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    amp = device.type == "cuda"
    dtype = torch.float32
    gen = torch.Generator().manual_seed((args.seed + 1000 * dist_rank) % 2**64)
    per_sample = (args.inputs or ("per-sample" if args.parallel else "stream")) == "per-sample"
    feed = encode = None
    if args.data != "random":  # the loop's micro-batches read ahead; per-sample timesteps and noise
        per_sample = True
        check_feed_args(args, args.rank_order == "interleaved" and not ddp)
        order = feed_order(samplers, args, samplers[0].num_steps)
        if args.data == "cache":
            feed = cache_feed(args.cache, samplers[0], order, args.num_workers)
        else:
            encode = media_encoder(args.vae, device)
            feed = media_feed(samplers[0], order, args.num_workers, args.media_root)
    # The gradient of a step is the mean over its global samples (loss.loss_scale says how).
    scale = loss_scale(W, args.parallel if ddp else None)
    # One log per process (ranks of a torchrun job append to their own file).
    log_path = f"{args.log_samples}.rank{dist_rank}" if args.log_samples and ddp else args.log_samples
    # Line-buffered: interleaved runs (--interleave) append to the same file, a whole line each.
    log = open(log_path, "a", buffering=1) if log_path else None
    group_seconds: Dict[tuple, float] = {}  # emulated ranks: a group micro-batch's time, by (step, ranks, ids)
    mixed = [0, 0]  # packs this process trained in the measured steps, and those of them mixing shapes

    def train_step(steps, log_it: bool, measured: bool = True):
        """This process's micro-batches of one global step (one sampler per emulated rank, or
        this rank's), the gradient sync, the optimizer step (measured: a step the summary
        counts, not a warm-up). Returns (per-rank compute seconds, sync + optimizer seconds,
        under torchrun this rank's (busy, wait) wall seconds up to and at the step's barrier:
        see sync_wait; else None)."""
        rank_times = [0.0] * len(samplers)
        t_start = time.perf_counter()
        if feed is not None:  # the loader's waits counted in measured steps only
            feed.counting = measured
        if ddp and args.parallel == "fsdp2":
            check_micro_batch_counts(len(steps[0].micro_batches), steps[0].step, dist_rank, dist_world)
        if interleave_ranks:  # emulated ranks, each rank's micro-batches spread over the step
            order = interleaved_order([[mb_times[st.step - plan_first][s.rank][i] for i in range(len(st.micro_batches))]
                                       for s, st in zip(samplers, steps)])
        else:  # rank by rank (one sampler under torchrun)
            order = [(k, i) for k, st in enumerate(steps) for i in range(len(st.micro_batches))]
        for k, i in order:
            s, st = samplers[k], steps[k]
            mb = st.micro_batches[i]
            n = len(st.micro_batches)
            ranks = tuple(st.groups[i]) if st.groups else (s.rank,)
            g = len(ranks)
            key = (st.step, ranks, tuple(mb))
            if g > 1 and not ddp and key in group_seconds:
                # emulated: the group's first visit ran it; each of its ranks is charged once
                seconds, left = group_seconds[key]
                rank_times[k] += seconds
                if left == 1:
                    del group_seconds[key]
                else:
                    group_seconds[key] = (seconds, left - 1)
                continue
            sp = groups[(g, dist_rank)] if g > 1 and ddp else None

            def draw(s=s, mb=mb, st=st, g=g):
                # A group's ranks must hold the same tensors: per-sample inputs.
                if encode is not None:
                    return media_inputs(feed.take(mb, s.rank), encode, s, c, args.seed, st.epoch, device, dtype, packs)
                if feed is not None:
                    return cache_inputs(feed.take(mb, s.rank), c, args.seed, st.epoch, device, dtype, packs)
                if packs:  # each sample at its own bucket (packing plans no groups)
                    return pack_inputs(s, mb, c, device, dtype, args.seed, st.epoch, None if per_sample else gen)
                if per_sample or g > 1:
                    return sample_inputs(s, mb, c, args.seed, st.epoch, device, dtype)
                return make_batch(s, mb, c, device, dtype, gen) + (None, None)
            # Drawn before the timing, or inside it (--time-inputs: on, or as the profile was calibrated).
            inputs = None if inputs_timed else draw()
            # DDP: one all-reduce per step, in the last micro-batch's backward.
            no_sync = args.parallel == "ddp" and ddp and i + 1 < n
            with Timer(device, args.clock) as tm, (wrapped.no_sync() if no_sync else contextlib.nullcontext()):
                x0, ctx, tt, noise = inputs or draw()
                shapes = len({tuple(x.shape) for x in x0}) if packs else 1  # a pack's distinct latent shapes
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
                    # A micro-batch of one shape runs as one ordinary batch, packed plan or not:
                    # the planner prices it so (only a pack of several shapes pays the packed
                    # forward's cost per sample, the profile's pack_sample_s).
                    if varlen and shapes > 1:
                        per = wan_dit_packed.flow_matching_loss_packed(model, x0, ctx, t=tt, noises=noise,
                                                                       forward=wrapped)
                    elif packs:
                        per = buckets_loss(wrapped, x0, ctx, tt, noise)
                    elif per_sample or g > 1:
                        per = flow_matching_loss_of(wrapped, x0, ctx, tt, noise, sp, c.patch)
                    else:
                        per = wan_dit.flow_matching_loss(wrapped, x0, ctx)
                    loss = step_loss(per, st, scale)
                loss.backward()
            seconds = tm.elapsed()
            if g > 1 and not ddp:
                seconds /= g  # each rank of the group busy 1/g of the whole micro-batch's time
                group_seconds[key] = (seconds, g - 1)
            rank_times[k] += seconds
            if packs and measured:
                mixed[0] += 1
                mixed[1] += shapes > 1
            if log and log_it:
                padded = bool(st.padded_micro_batches[i]) if st.padded_micro_batches else False
                entry = {"strategy": strategy, "fused_adaln": fused, "epoch": st.epoch,
                         "step": st.step, "rank": ranks[0] if g > 1 and not ddp else s.rank, "ids": mb,
                         "padded": padded, "group": list(ranks),
                         "position": 0 if g > 1 and not ddp else ranks.index(s.rank),
                         "losses": per.detach().float().tolist(), "seconds": seconds}
                if mb_times is not None:  # the planner's price of it (with jitter or --rank-order interleaved)
                    entry["predicted_s"] = mb_times[st.step - plan_first][s.rank][i]
                if packs:  # the pack's distinct latent shapes (1: one bucket)
                    entry.update(packing="on", shapes=shapes)
                log.write(json.dumps(entry) + "\n")
        if ddp and not steps[0].micro_batches and args.parallel != "fsdp2":
            # A rank with nothing to train in a step still joins the step's all-reduce (DDP's,
            # or the explicit one over every parameter's gradient): a zero-weighted backward
            # through the model, so its gradient is zeros.
            x0 = torch.zeros((1, c.in_channels, 1, 2 * c.patch[1], 2 * c.patch[2]), device=device, dtype=dtype)
            ctx = torch.zeros((1, c.text_len, c.text_dim), device=device, dtype=dtype)
            t0 = torch.zeros(1, device=device)
            if varlen:  # through the packed forward (DDP's hooks are armed by the module it wraps)
                per = wan_dit_packed.flow_matching_loss_packed(model, list(x0), list(ctx), t=t0, noises=list(x0),
                                                               forward=wrapped)
            else:
                per = flow_matching_loss_of(wrapped, x0, ctx, t0, x0)
            (per.sum() * 0).backward()
        # Under torchrun, this rank's wall seconds from the step's start to the barrier (its
        # micro-batches and everything around them: inputs, logging) and its wait there.
        busy_s = time.perf_counter() - t_start
        busy_wait = (busy_s, sync_wait()) if ddp and not args.parallel else None
        # The explicit all-reduce runs on the process group's threads (gloo), which the thread
        # clock would not see: under torchrun its region is timed on the wall clock.
        with Timer(device, "wall" if ddp and not args.parallel else args.clock) as tm:
            if ddp and not args.parallel:
                link.gradient_sync(model, torch.distributed)  # as calibrate --allreduce-ranks times it
            opt.step()
            opt.zero_grad(set_to_none=True)
        return rank_times, tm.elapsed(), busy_wait

    total_steps = samplers[0].num_steps
    predicted_times = samplers[0].predicted_rank_times()  # [steps][W] seconds, the planner's model
    plan_first = samplers[0].num_steps - len(predicted_times)  # global index of the plan's first step
    # Every micro-batch's price, [steps][W][micro-batches]: with the profile's jitter, to price
    # the measured steps' spread (jitter_prediction); with --rank-order interleaved, to spread
    # each emulated rank's micro-batches over the step (interleaved_order).
    jitter = profile_jitter(args.profile)
    inputs_timed = inputs_timed_of(args)
    interleave_ranks = args.rank_order == "interleaved" and not ddp
    mb_times = samplers[0].predicted_micro_batch_times() if jitter or interleave_ranks else None
    warmup_in_loop = args.warmup
    run_steps = args.warmup + args.steps
    if args.epoch:
        # Warm-up on the epoch's first steps (schedule() does not move the samplers), then every step.
        warm = [s.schedule() for s in samplers]
        for _ in range(min(args.warmup, total_steps)):
            train_step([next(it) for it in warm], log_it=False, measured=False)
        del warm
        warmup_in_loop, run_steps = 0, 2**62  # until the epoch ends (a re-plan may change its step count)
    steps_iters = [s.steps() for s in samplers]
    times, extra, peaks, pred, waits = [], [], [], [], []
    samples = tokens = 0
    pred_mb = []
    adaptations = []
    stride = max(1, total_steps // run_steps) if args.spread else 1
    for t in range(run_steps):
        try:
            for _ in range(stride - 1):  # steps skipped by --spread: not run, not measured
                for it in steps_iters:
                    next(it)
            steps = [next(it) for it in steps_iters]
        except StopIteration:
            break
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        rank_times, sync_s, busy_wait = train_step(steps, log_it=True, measured=t >= warmup_in_loop)
        if ddp:
            gathered = [None] * dist_world
            torch.distributed.all_gather_object(gathered, (rank_times[0], busy_wait))
            rank_times, busy_wait = [g[0] for g in gathered], [g[1] for g in gathered]
        if t >= warmup_in_loop:
            pred.append(predicted_times[steps[0].step - plan_first])
            if jitter:
                pred_mb.append(mb_times[steps[0].step - plan_first])
            times.append(rank_times)
            extra.append(sync_s)
            if ddp and busy_wait[0] is not None:
                waits.append(busy_wait)  # per rank (busy, wait) wall seconds
            samples += steps[0].global_samples
            tokens += steps[0].global_tokens
            if device.type == "cuda":
                peaks.append(torch.cuda.max_memory_allocated())
        if args.adapt_every is not None:
            # Every rank has every rank's times (emulated, or all-gathered above): same update.
            fits = [s.observe_step(steps[0].step, rank_times) for s in samplers]
            if fits[0] is not None:
                adaptations.append(fits[0])
                steps_iters = [s.steps() for s in samplers]  # the re-planned rest of the epoch
                predicted_times = samplers[0].predicted_rank_times()
                plan_first = samplers[0].num_steps - len(predicted_times)
                mb_times = samplers[0].predicted_micro_batch_times() if jitter or interleave_ranks else None
        yield  # one step done: run_interleaved may advance another run here
    if log:
        log.close()
    if args.save_model:
        state = full_state_dict(model if varlen else wrapped, args.parallel if ddp else None)
        if dist_rank == 0:
            torch.save(state, args.save_model)
    measured = metrics(times, samples, tokens, extra)
    if feed is not None:
        measured.update(loader_waits(feed, times, W, ddp))
    if waits:
        # The idle fraction as the ranks saw it, on the wall clock: each rank's wait for the
        # slowest at the step's barrier over its busy time (from the step's start to the
        # barrier) and that wait; and the busy time outside the timed micro-batches (inputs,
        # unless the profile timed them with the micro-batches; logging, the loop; with --clock
        # thread also time the thread was not running), as a share of the busy time, which the
        # planner does not price.
        busy = sum(b for w in waits for b, _ in w)
        wait = sum(x for w in waits for _, x in w)
        measured["idle_measured"] = wait / (busy + wait) if busy + wait > 0 else 0.0
        measured["outside_compute"] = 1 - sum(map(sum, times)) / busy if busy > 0 else 0.0
        measured["busy_wait_s"] = waits
    # Per step beside the ranks' compute: the modelled all-reduce (real ranks only: emulated ones
    # run none) and the profile's optimizer step.
    budgets = samplers[0].budgets
    allreduce = (budgets.get("allreduce_s", 0.0) if ddp else 0.0) + budgets.get("step_fixed_s", 0.0)
    predicted = metrics(pred, samples, tokens, [allreduce] * len(pred))
    if jitter:
        # The same steps with the calibrated spread of every micro-batch's seconds.
        predicted["with_jitter"] = jitter_prediction(pred_mb, jitter, samples, tokens, [allreduce] * len(pred_mb))
    if peaks:
        total_mem = torch.cuda.get_device_properties(device).total_memory
        measured["peak_memory_bytes"] = max(peaks)
        measured["peak_memory_utilization"] = max(peaks) / total_mem
    return {
        "strategy": strategy,
        "fused_adaln": fused,
        "model": args.model,
        "config": args.config,
        "layers": c.layers,
        "world_size": W,
        "mode": (args.parallel or "ddp") if ddp else "emulated",  # ddp: the explicit all-reduce, or the wrapper
        "rank_order": None if ddp else args.rank_order,  # emulated: rank by rank, or spread over the step
        "parallel": args.parallel if ddp else None,
        "sync": getattr(samplers[0], "sync", None),
        "inputs": "per-sample" if per_sample else "stream",
        "inputs_timed": inputs_timed,  # drawn inside each micro-batch's timing (--time-inputs)
        # packing: "on" when the micro-batches were trained as packs (--packing on, or a strategy that
        # always packs); packs: this process's packs in the measured steps and those mixing shapes
        # (the planner may keep one-shape micro-batches where that plan is faster)
        "packing": "on" if packs else "off",
        "packed_forward": args.packed_forward if packs else None,
        "packs": {"trained": mixed[0], "mixed_shapes": mixed[1]} if packs else None,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "clock": args.clock if device.type == "cpu" else "cuda events",
        "measured": measured,
        "predicted": predicted,
        "rank_times": times,
        "predicted_rank_times": pred,
        "plan_steps": total_steps,
        "adaptations": adaptations,
    }


def main(argv=None, exit_process: bool = False) -> List[dict]:
    """Runs the strategies and returns their summaries. exit_process (the script's entry):
    under torchrun, once every rank is done, the process ends at once (os._exit) instead of
    destroying the process group it made and shutting Python down."""
    args = parse_args(argv)
    if args.clock == "thread" and args.threads != 1:
        sys.exit("train_dit.py: --clock thread times this thread only: use it with --threads 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.parallel and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        sys.exit(f"train_dit.py: --parallel {args.parallel} runs under torchrun with 2 or more processes "
                 "(WORLD_SIZE is not set or 1); without torchrun, ranks are emulated in one process")
    fused_opts = {"off": [False], "on": [True], "both": [False, True]}[args.fused]
    packing_opts = PACKINGS[args.packing]
    if args.save_model and len(args.strategy.split(",")) * len(fused_opts) * len(packing_opts) > 1:
        sys.exit("train_dit.py: --save-model takes one run: give one strategy, --fused on or off and --packing on "
                 "or off")
    dist_world = int(os.environ.get("WORLD_SIZE", "1"))
    dist_rank = 0
    # A caller that runs main() several times in one torchrun job (compare.py --repeat) makes
    # the process group once (init_distributed) and keeps it: re-creating it on the same
    # rendezvous can hang.
    owns_group = dist_world > 1 and not torch.distributed.is_initialized()
    if dist_world > 1:
        if owns_group:
            init_distributed(args.device)
        dist_rank = torch.distributed.get_rank()
        if args.device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            args.device = f"cuda:{local}"
    runs = planned_runs(args.strategy, packing_opts, fused_opts)
    # What the plan leaves out is said once (the manifest and options are the same for every run).
    if args.interleave:
        results = run_interleaved([strategy_steps(args, strategy, fused, dist_rank, dist_world, report=i == 0,
                                                  packing=packing)
                                   for i, (strategy, packing, fused) in enumerate(runs)])
        for r in results:
            say_result(r, args, dist_rank)
    else:
        results = []
        for i, (strategy, packing, fused) in enumerate(runs):
            results.append(run_strategy(args, strategy, fused, dist_rank, dist_world, report=i == 0, packing=packing))
            say_result(results[-1], args, dist_rank)
    if dist_rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    if dist_world > 1:
        finish_distributed(owns_group, exit_process)
    return results


if __name__ == "__main__":
    main(exit_process=True)
