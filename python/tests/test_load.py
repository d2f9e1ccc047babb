"""Load: the sampler's state stays small and independent of the dataset size (the planning
side of 10M samples x 1024 ranks is measured by build/bench/bench_plan)."""
import json
import random

import pytest

from adaptiveload import AdaptiveBatchSampler


def columns(n, seed=0):
    rng = random.Random(seed)
    video = [rng.random() < 0.4 for _ in range(n)]
    return {
        "path": [f"s{i}.{'mp4' if v else 'jpg'}" for i, v in enumerate(video)],
        "num_frames": [rng.randrange(17, 400) if v else 1 for v in video],
        "height": [rng.choice([360, 480, 720, 1080]) for _ in range(n)],
        "width": [rng.choice([480, 640, 854, 1280, 1920]) for _ in range(n)],
        "fps": [rng.choice([24.0, 30.0]) if v else None for v in video],
    }


def state_bytes(sampler):
    return len(json.dumps(sampler.state_dict()).encode())


@pytest.mark.parametrize("strategy", ["balanced", "equal_tokens"])
def test_state_is_small_and_constant_in_dataset_size(strategy):
    sizes = {}
    for n in (1_000, 100_000):
        s = AdaptiveBatchSampler(columns(n), strategy=strategy, world_size=64, rank=5, seed=3)
        steps = s.steps()
        for _ in range(min(7, s.num_steps - 1)):
            next(steps)
        # Two elastic changes add two segments: still small.
        st = s.state_dict()
        s2 = AdaptiveBatchSampler(columns(n), strategy=strategy, world_size=48, rank=5, seed=3)
        s2.load_state_dict(st)
        next(s2.steps())
        s3 = AdaptiveBatchSampler(columns(n), strategy=strategy, world_size=1024, rank=1000, seed=3)
        s3.load_state_dict(s2.state_dict())
        sizes[n] = (state_bytes(s), state_bytes(s3))
    for n, (one, three) in sizes.items():
        assert one < 1024 and three < 1024, (n, one, three)
    # O(1): the same number of bytes up to the digits of the step counts.
    assert abs(sizes[100_000][0] - sizes[1_000][0]) <= 4, sizes
    assert abs(sizes[100_000][1] - sizes[1_000][1]) <= 8, sizes
