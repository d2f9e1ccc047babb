"""The documented loader with DataLoader(pin_memory=True): the packed micro-batch (collate_pack's
PackedBatch, which has a pin_memory() method for the DataLoader's pin-memory thread) and the
bucketed one (collate_stack's dict of tensors).

Which is tested depends on the machine, and each test says so: with an accelerator (CUDA), the
batches come out of the DataLoader with every tensor pinned; without one (the CPU build here),
pinning is impossible, so PackedBatch.pin_memory() must be a safe no-op (it returns the batch
itself: a tensor's pin_memory() would raise there) and DataLoader(pin_memory=True) must give the
same batches as without pinning."""
import warnings

import pytest
import torch

from adaptiveload.cache import collate_pack, collate_stack
from adaptiveload.packing import PackedBatch, collate_packed

ACCEL = torch.cuda.is_available()


def _samples(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"row": i, "shape": (0, 0, 0), "latent": torch.randn((16, *s), generator=g),
             "text": torch.randn((3 + i, 32), generator=g)} for i, s in enumerate(shapes)]


class _Items(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _tensors(batch):
    """(name, tensor) of a collated batch, the PackedBatch's fields included."""
    out = []
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            out.append((k, v))
        elif isinstance(v, PackedBatch):
            out += [(f"packed.{f}", getattr(v, f)) for f in v.__dataclass_fields__
                    if isinstance(getattr(v, f), torch.Tensor)]
    return out


def _load(items, collate, batches, pin, workers):
    loader = torch.utils.data.DataLoader(_Items(items), batch_sampler=batches, collate_fn=collate, pin_memory=pin,
                                         num_workers=workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory ... no accelerator": the CPU case, checked below
        return list(loader)


CASES = [("pack", collate_pack, [(1, 4, 6), (5, 2, 8), (1, 4, 6)], [[0, 1], [2]]),
         ("stack", collate_stack, [(2, 4, 4)] * 3, [[0, 1, 2]])]


@pytest.mark.parametrize("name,collate,shapes,batches", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_with_pin_memory(name, collate, shapes, batches, workers):
    items = _samples(shapes)
    plain = _load(items, collate, batches, False, workers)
    pinned = _load(items, collate, batches, True, workers)
    assert len(plain) == len(pinned) == len(batches)
    for a, b in zip(plain, pinned):
        ta, tb = _tensors(a), _tensors(b)
        assert [k for k, _ in ta] == [k for k, _ in tb] and ta
        for (k, x), (_, y) in zip(ta, tb):
            assert torch.equal(x, y), k
            # With an accelerator every tensor comes out pinned; without one pinning is skipped.
            assert y.is_pinned() == ACCEL, (k, name)
        if name == "pack":
            assert isinstance(b["packed"], PackedBatch)


def test_packed_batch_pin_memory_method():
    pb = collate_packed([{"latent": s["latent"], "text": s["text"]} for s in _samples([(1, 4, 6), (5, 2, 8)])])
    out = pb.pin_memory()
    if not ACCEL:
        # No accelerator: a safe no-op (Tensor.pin_memory() would raise here), the batch itself.
        assert out is pb
        return
    # CUDA: a new batch, every tensor pinned and equal, the rest unchanged.
    assert out is not pb and out.grids == pb.grids and out.shapes == pb.shapes and out.patch == pb.patch
    for f in pb.__dataclass_fields__:
        v = getattr(pb, f)
        if isinstance(v, torch.Tensor):
            assert getattr(out, f).is_pinned() and torch.equal(getattr(out, f), v), f
