"""AdaptiveBatchSampler as the batch_sampler of PyTorch 2.x data loaders, with worker
processes: torchdata's StatefulDataLoader (state_dict mid-epoch, loaded into a new loader,
resumes exactly; the sampler's state travels inside the loader's) and the plain DataLoader
with persistent workers, pinned memory and the spawn start method."""
import contextlib
import csv
import itertools
import os

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from adaptiveload import AdaptiveBatchSampler
from conftest import DATASETS

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


def subset_manifest(clips=240, images=240):
    """The first rows of the real manifests: a mix of 480p / 720p clips and COCO images."""
    rows = []
    for name, n in (("taichi_hd.csv", clips), ("coco2017_val_images.csv", images)):
        with open(os.path.join(DATASETS, name), newline="") as f:
            rows += list(itertools.islice(csv.DictReader(f), n))
    return rows


MANIFEST = subset_manifest()


class RowDataset(Dataset):
    """Returns (row id, the worker that loaded it) as tensors; module level so that the
    spawn start method can pickle it."""

    def __len__(self):
        return len(MANIFEST)

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return torch.tensor(i), torch.tensor(-1 if info is None else info.id)


def ids_of(batch):
    ids, _ = batch
    return ids.tolist()


def make_sampler(world_size=2, rank=1, **kw):
    return AdaptiveBatchSampler(MANIFEST, world_size=world_size, rank=rank, strategy="balanced", **kw)


def reference(epoch=0, **kw):
    s = make_sampler(**kw)
    s.set_epoch(epoch)
    return [list(mb) for mb in s]


def test_manifest_subset_gives_a_multi_step_plan():
    ref = reference()
    s = make_sampler()
    assert s.num_steps >= 5 and len(ref) >= 10  # enough positions to cut at


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly_mid_epoch(workers):
    ref = reference()
    cuts = sorted({0, 1, 3, len(ref) // 2, len(ref) - 1})
    for cut in cuts:
        sampler = make_sampler()
        loader = StatefulDataLoader(RowDataset(), batch_sampler=sampler, num_workers=workers)
        it = iter(loader)
        seen = [ids_of(next(it)) for _ in range(cut)]
        state = loader.state_dict()
        del it, loader  # the first job dies here
        # The sampler's own state is inside the loader's (torchdata's Stateful protocol).
        assert sampler.state_dict() is not None
        assert any(isinstance(v, dict) and "core" in v for v in _walk(state)), state.keys()

        sampler2 = make_sampler()
        loader2 = StatefulDataLoader(RowDataset(), batch_sampler=sampler2, num_workers=workers)
        loader2.load_state_dict(state)
        rest = [ids_of(b) for b in loader2]
        assert seen + rest == ref, f"cut at {cut}"
        # and the next epoch after the resumed one is the sampler's epoch 1
        sampler2.set_epoch(1)
        assert [ids_of(b) for b in loader2] == reference(epoch=1)


def _walk(d):
    yield d
    if isinstance(d, dict):
        for v in d.values():
            yield from _walk(v)


def test_stateful_dataloader_state_at_epoch_end_starts_the_next_epoch():
    """A checkpoint taken after epoch 0 finished; the resumed job's loop calls set_epoch(1)
    before iterating, and the loader restores its state only at that iter(): epoch 1 runs,
    epoch 0 is not repeated."""
    sampler = make_sampler()
    loader = StatefulDataLoader(RowDataset(), batch_sampler=sampler, num_workers=2)
    first = [ids_of(b) for b in loader]
    assert first == reference()
    state = loader.state_dict()
    sampler2 = make_sampler()
    loader2 = StatefulDataLoader(RowDataset(), batch_sampler=sampler2, num_workers=2)
    loader2.load_state_dict(state)
    sampler2.set_epoch(1)
    assert [ids_of(b) for b in loader2] == reference(epoch=1)
    sampler2.set_epoch(2)
    assert [ids_of(b) for b in loader2] == reference(epoch=2)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_persistent_pinned(context):
    """Two epochs through one DataLoader with persistent workers: every micro-batch in plan
    order, loaded by both workers, and each epoch covers this rank's share exactly."""
    sampler = make_sampler()
    loader = DataLoader(
        RowDataset(), batch_sampler=sampler, num_workers=2, persistent_workers=True,
        pin_memory=torch.cuda.is_available(), multiprocessing_context=context,
    )
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(loader)
        assert [ids_of(b) for b in batches] == reference(epoch=epoch)
        workers = {w for _, ws in batches for w in ws.tolist()}
        assert workers == {0, 1}


def test_dataloader_pin_memory_flag_is_accepted_without_a_gpu():
    sampler = make_sampler()
    with pytest.warns(UserWarning) if not torch.cuda.is_available() else contextlib.nullcontext():
        loader = DataLoader(RowDataset(), batch_sampler=sampler, num_workers=0, pin_memory=True)
        batches = [ids_of(b) for b in loader]
    assert batches == reference()


def test_finished_state_loaded_after_set_epoch_runs_the_chosen_epoch_next():
    """Without a loader: set_epoch(1), then a state that finished epoch 0. The restored
    position has nothing left; the next iteration is epoch 1 (not a repeat of epoch 0)."""
    done = make_sampler()
    list(done)
    state = done.state_dict()
    s = make_sampler()
    s.set_epoch(1)
    s.load_state_dict(state)
    assert s.epoch == 0 and len(s) == 0 and list(s) == []
    assert [list(mb) for mb in s] == reference(epoch=1) and s.epoch == 1
    # load first, then set_epoch: epoch 1 at once
    t = make_sampler()
    t.load_state_dict(state)
    t.set_epoch(1)
    assert [list(mb) for mb in t] == reference(epoch=1)
