"""What a new user hit through the sampler, each kept fixed: an unreachable global batch is
a warning, repeated paths are reported (or left out, or refused), a CSV row with more fields
than its header is a bad row, the strategy error lists what the sampler takes, and a step's
sample counts leave the padded repeats out."""
import csv
import os
import warnings

import pytest

from adaptiveload import AdaptiveBatchSampler
from conftest import DATASETS

TAICHI = os.path.join(DATASETS, "taichi_hd.csv")
COCO = os.path.join(DATASETS, "coco2017_val_images.csv")


def subset(tmp_path, clips, images):
    """A CSV of the first `clips` Taichi-HD rows and the first `images` COCO rows."""
    rows = []
    for name, n in ((TAICHI, clips), (COCO, images)):
        with open(name, newline="") as f:
            rows += list(csv.reader(f))[1:n + 1]
    path = tmp_path / f"subset_{clips}_{images}.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "num_frames", "height", "width", "fps"])
        w.writerows(rows)
    return str(path)


def test_an_unreachable_global_batch_is_a_warning(tmp_path):
    m = subset(tmp_path, 500, 500)
    with pytest.warns(UserWarning, match=r"plans 124 steps, not the 1,000 of the global batch.*fill at most 124"):
        s = AdaptiveBatchSampler(m, world_size=8, rank=0, global_batch="steps:1000")
    assert s.num_steps == 124
    with pytest.warns(UserWarning,
                      match=r"not the 997 of the global batch \(samples:1\): 997 samples on 8 ranks fill at most 124"):
        AdaptiveBatchSampler(m, world_size=8, rank=0, global_batch="samples:1", strategy="dual")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reachable step count plans without a word about it
        s = AdaptiveBatchSampler(m, world_size=8, rank=0, global_batch="steps:16", strategy="dual")
    assert s.num_steps == 16


def test_repeated_paths_are_reported_skipped_or_refused():
    with pytest.warns(UserWarning,
                      match=r"(?s)5,000 row\(s\) repeat the path of an earlier row.*same manifest given twice"):
        s = AdaptiveBatchSampler([COCO, COCO], world_size=2, rank=0, strategy="dual")
    assert len(s.planned_rows()) > 5000
    with pytest.warns(UserWarning, match=r"left out \(on_duplicate='skip'\)"):
        s = AdaptiveBatchSampler([COCO, COCO], world_size=2, rank=0, strategy="dual", on_duplicate="skip")
    planned = s.planned_rows()
    assert len(planned) < 5000 and max(planned) < 5000  # only the first copy of each path
    with pytest.raises(ValueError,
                       match=r"coco2017_val_images.csv:2: path 'coco/val2017/000000397133.jpg' repeats row 0"):
        AdaptiveBatchSampler([COCO, COCO], world_size=2, rank=0, on_duplicate="error")
    with pytest.raises(ValueError, match="on_duplicate"):
        AdaptiveBatchSampler(COCO, world_size=2, rank=0, on_duplicate="keep")


def test_a_csv_row_with_more_fields_than_its_header_is_a_bad_row(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("num_frames,height,width,fps,path\n121,1080,1920,16,clips/a,b.mp4\n1,480,640,,x.jpg\n")
    with pytest.raises(ValueError, match=r"m.csv:2: row has 6 fields, the header 5"):
        AdaptiveBatchSampler(str(p), world_size=1, rank=0)
    s = AdaptiveBatchSampler(str(p), world_size=1, rank=0, on_bad_row="skip")
    assert s.planned_rows() == [1] and len(s.bad_rows) == 1


def test_the_strategy_error_lists_what_the_sampler_takes():
    with pytest.raises(ValueError) as e:
        AdaptiveBatchSampler(COCO, world_size=1, rank=0, strategy="nope")
    msg = str(e.value)
    assert "balanced" in msg and "all" not in msg.replace("balanced", "")


def test_step_samples_leave_the_padded_repeats_out():
    samplers = [AdaptiveBatchSampler(COCO, world_size=16, rank=r, strategy="equal_tokens") for r in range(16)]
    steps = [list(s.steps()) for s in samplers]
    padded = 0
    for t, st in enumerate(steps[0]):
        run = sum(len(mb) for ranks in steps for mb in ranks[t].micro_batches)
        repeats = sum(len(mb) for ranks in steps
                      for mb, pad in zip(ranks[t].micro_batches, ranks[t].padded_micro_batches) if pad)
        assert st.global_samples == run - repeats and st.padded_samples == repeats
        padded += repeats
    assert padded > 0  # the case this test is about
