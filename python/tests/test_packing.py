"""adaptiveload.packing: mixed-shape samples into one token sequence and back."""
import pytest
import torch
from torch.utils.data import DataLoader

from adaptiveload.attention import varlen_attention
from adaptiveload.models.wan_dit import patchify
from adaptiveload.packing import collate_packed, pack, unpack

# An image, a short clip, a long clip of another aspect ratio, a portrait image: [C, F, H, W].
SHAPES = [(4, 1, 8, 12), (4, 5, 6, 6), (4, 9, 4, 10), (4, 1, 12, 4)]


def latents(shapes=SHAPES, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def test_each_sample_is_its_own_patchify_rows_and_unpack_inverts_it():
    xs = latents()
    p = pack(xs, patch=(1, 2, 2), timesteps=[10.0, 200.0, 3.0, 999.0])
    lengths = [(f * h * w) // 4 for _, f, h, w in SHAPES]
    assert p.cu_seqlens.tolist() == [0] + torch.tensor(lengths).cumsum(0).tolist()
    assert p.cu_seqlens.dtype == torch.int32
    assert p.tokens.shape == (sum(lengths), 4 * 1 * 2 * 2)
    assert p.grids == [(f, h // 2, w // 2) for _, f, h, w in SHAPES]
    assert p.max_seqlen == max(lengths)
    for i, x in enumerate(xs):
        a, b = int(p.cu_seqlens[i]), int(p.cu_seqlens[i + 1])
        torch.testing.assert_close(p.tokens[a:b], patchify(x[None], (1, 2, 2))[0], rtol=0, atol=0)
    back = unpack(p.tokens, p)
    for x, y in zip(xs, back):
        assert torch.equal(x, y)
    assert p.timesteps.tolist() == [10.0, 200.0, 3.0, 999.0]
    assert p.segment_ids().tolist() == sum(([i] * n for i, n in enumerate(lengths)), [])
    # positions: (frame, row, column) of each row in its own sample's grid, patchify's order
    f, h, w = p.grids[1]
    a = int(p.cu_seqlens[1])
    assert p.positions.shape == (p.tokens.shape[0], 3) and p.positions.dtype == torch.int64
    assert p.positions[a].tolist() == [0, 0, 0] and p.positions[a + 1].tolist() == [0, 0, 1]
    assert p.positions[a + w].tolist() == [0, 1, 0] and p.positions[a + h * w].tolist() == [1, 0, 0]
    positions, p.positions = p.positions, None
    assert torch.equal(p.token_positions(), positions)  # a pack built without them: from the grids


def test_texts_of_different_lengths_and_cross_attention_per_sample():
    xs = latents()
    g = torch.Generator().manual_seed(1)
    texts = [torch.randn(n, 16, generator=g) for n in (3, 7, 1, 5)]
    p = pack(xs, text=texts)
    assert p.text.shape == (16, 16)
    assert p.cu_seqlens_text.tolist() == [0, 3, 10, 11, 16]
    assert p.max_seqlen_text == 7
    # Each sample's tokens attend to its own text only: the same as attending sample by sample.
    q = torch.randn(p.tokens.shape[0], 2, 8, generator=g)
    k = torch.randn(16, 2, 8, generator=g)
    out = varlen_attention(q, k, k, p.cu_seqlens, p.cu_seqlens_text)
    i = 2
    a, b = int(p.cu_seqlens[i]), int(p.cu_seqlens[i + 1])
    c, d = int(p.cu_seqlens_text[i]), int(p.cu_seqlens_text[i + 1])
    alone = varlen_attention(q[a:b], k[c:d], k[c:d], torch.tensor([0, b - a]), torch.tensor([0, d - c]))
    torch.testing.assert_close(out[a:b], alone)


def test_collate_packed_in_a_dataloader():
    xs = latents()
    data = [{"latent": x, "timestep": float(i), "text": torch.ones(i + 1, 3)} for i, x in enumerate(xs)]
    batches = list(DataLoader(data, batch_size=4, collate_fn=collate_packed))
    assert len(batches) == 1
    p = batches[0]
    assert p.num_samples == 4 and p.timesteps.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert p.cu_seqlens_text.tolist() == [0, 1, 3, 6, 10]


def test_bad_samples_are_named():
    with pytest.raises(ValueError, match="sample 1 of shape .* is not a whole number of patches"):
        pack([torch.zeros(4, 1, 8, 8), torch.zeros(4, 1, 7, 8)])
    with pytest.raises(ValueError, match="sample 1 is 3 channels"):
        pack([torch.zeros(4, 1, 8, 8), torch.zeros(3, 1, 8, 8)])
    with pytest.raises(ValueError, match="3 timesteps for 2 samples"):
        pack([torch.zeros(4, 1, 8, 8)] * 2, timesteps=[1, 2, 3])
    with pytest.raises(ValueError, match="text 1 must be"):
        pack([torch.zeros(4, 1, 8, 8)] * 2, text=[torch.zeros(2, 5), torch.zeros(2, 6)])
    with pytest.raises(ValueError, match="no samples"):
        pack([])
    with pytest.raises(ValueError, match=r"sample 0 must be a latent \[C, F, H, W\]"):
        pack([torch.zeros(1, 4, 1, 8, 8)])
    with pytest.raises(ValueError, match="sample 1 has no 'text'"):
        collate_packed([{"latent": torch.zeros(4, 1, 8, 8), "text": torch.zeros(1, 2)},
                        {"latent": torch.zeros(4, 1, 8, 8)}])
    p = pack([torch.zeros(4, 1, 8, 8)])
    with pytest.raises(ValueError, match=r"unpack: tokens must be \[16, features\]"):
        unpack(torch.zeros(15, 16), p)
