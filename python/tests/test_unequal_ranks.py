"""AdaptiveBatchSampler on ranks that are not alike (docs/planner.md, "Unequal ranks"): devices= and
rank_speeds= reach the core's plan (the CLI's --devices and --rank-speed), every rank reaches the
same plan, every row is planned once, and bad values are errors naming the argument."""
import collections
import os

import pytest

from adaptiveload import AdaptiveBatchSampler
from conftest import DATASETS

MANIFEST = [os.path.join(DATASETS, "taichi_hd.csv")]


def batches(world_size, **kw):
    out = []
    for r in range(world_size):
        s = AdaptiveBatchSampler(MANIFEST, world_size=world_size, rank=r, **kw)
        out.append(list(s))
    return out, s


def test_devices_and_speeds_change_balanced_plan_and_keep_every_row():
    alike, _ = batches(4)
    slow, s = batches(4, devices=["h200", "h200", "h100", "h100"], rank_speeds={1: 0.5})
    assert slow != alike  # balanced dealt by speed
    count = collections.Counter(i for rank in slow for b in rank for i in b)
    assert set(count) == set(s.planned_rows()) - set(s.dropped_rows)
    # The slow rank (1) trains fewer samples than its alike neighbour (0).
    assert sum(map(len, slow[1])) < sum(map(len, slow[0]))
    # The string forms plan the same.
    again, _ = batches(4, devices="h200:2,h100:2", rank_speeds="1=0.5")
    assert again == slow


@pytest.mark.parametrize("kw, word", [
    (dict(devices="h200:3"), "(devices)"),
    (dict(rank_speeds={9: 0.5}), "rank_speeds"),
    (dict(rank_speeds={1: 0}), "rank_speeds"),
    (dict(rank_speeds=[0.5]), "rank_speeds"),
])
def test_bad_values_name_the_argument(kw, word):
    with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
        AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, **kw)
    assert word in str(e.value)
    assert "--" not in str(e.value)  # the sampler's words, not the CLI's flags
