"""One rank of the two-process sampler check (run by test_distributed.py under torchrun):
gloo on CPU; rank and world size come from torch.distributed. Each rank iterates its
sampler for half an epoch, checkpoints, resumes from the checkpoint in a fresh sampler,
finishes the epoch, and all_gathers the sample ids it saw and the step metadata. Rank 0
writes them as JSON to argv[1]."""
import json
import sys

import torch
import torch.distributed as dist

from adaptiveload import AdaptiveBatchSampler


def main(out_path, manifests):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sampler = AdaptiveBatchSampler(manifests, seed=11)
    assert (sampler.rank, sampler.world_size) == (rank, world)
    half = sampler.num_steps // 2
    seen, steps = [], []
    gen = sampler.steps()
    for _ in range(half):
        st = next(gen)
        seen += [i for mb in st.micro_batches for i in mb]
        steps.append((st.step, st.global_samples, st.global_tokens))
    state = sampler.state_dict()  # after the optimizer step of step half-1
    resumed = AdaptiveBatchSampler(manifests, seed=11)
    resumed.load_state_dict(state)
    for st in resumed.steps():
        seen += [i for mb in st.micro_batches for i in mb]
        steps.append((st.step, st.global_samples, st.global_tokens))
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "seen": seen, "steps": steps,
                                      "planned": sampler.planned_rows() if rank == 0 else None,
                                      "num_steps": sampler.num_steps})
    counts = torch.tensor([len(seen)], dtype=torch.int64)
    dist.all_reduce(counts)  # a collective per epoch works: every rank reached the end in lockstep
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"ranks": gathered, "total_seen": int(counts.item())}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
