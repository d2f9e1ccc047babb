"""MediaDataset: real clips and images decoded at the shape the planner gave them, the frames
chosen by the core's rule, captions from the manifest, and every kind of bad media reported.
The media are made here with ffmpeg (tiny, in a temporary folder)."""
import os
import shutil

import pytest
import torch

import adaptiveload
import media_gen
from adaptiveload import media
from adaptiveload.media import BadMediaError, MediaDataset, collate_media

pytestmark = [pytest.mark.skipif(not media_gen.have_ffmpeg(), reason="the ffmpeg command is not installed"),
              pytest.mark.filterwarnings("ignore:AdaptiveBatchSampler:UserWarning")]  # the plan's mix on tiny sets
OPTS = dict(model="tiny-dit", device="cpu", grid="tiny", world_size=1, rank=0, seed=3)


def _sampler(manifest, **kw):
    return adaptiveload.AdaptiveBatchSampler(manifest, **{**OPTS, **kw})


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("media"))
    paths = media_gen.make_set(folder, 18, 12)
    return folder, media_gen.manifest(folder, paths)


def _flat_clip(folder, name, frames=40, rate="30", size="96x96"):
    """A lossless clip whose frame n is flat grey n * 5: each frame says which it is."""
    out = os.path.join(folder, name)
    media_gen._run(media_gen.FF + ["-f", "lavfi", "-i", f"color=c=black:s={size}:r={rate}", "-frames:v", str(frames),
                                   "-vf", "geq=lum='N*5':cb=128:cr=128", "-c:v", "ffv1", out])
    return out


def _frame_of(pixels, levels):
    """The source frame index of each output frame (nearest flat level)."""
    means = pixels.mean(dim=(0, 2, 3))  # [F]
    return [int(torch.argmin((levels - m).abs())) for m in means]


def test_every_row_decodes_at_its_planned_shape(small_set):
    folder, manifest = small_set
    sampler = _sampler(manifest)
    data = MediaDataset(sampler, root=folder)
    planner = data._planner
    rows = planner.planned_rows()
    assert len(rows) == 30
    for row in rows:
        item = data[row]
        f, h, w, _ = planner.row_geometry(row)
        assert item["row"] == row
        assert item["shape"] == (f, h, w)
        assert item["pixels"].shape == (3, f, h, w), (row, data.path(row))
        assert item["pixels"].dtype == torch.float32
        assert -1.0 <= float(item["pixels"].min()) and float(item["pixels"].max()) <= 1.0
        assert isinstance(item["caption"], str)
    assert data.skipped == []


def test_frames_are_the_cores_and_follow_the_binding(tmp_path, monkeypatch):
    clip = _flat_clip(str(tmp_path), "flat.mkv", frames=40, rate="30")
    manifest = media_gen.manifest(str(tmp_path), [clip])
    data = MediaDataset(_sampler(manifest), root=str(tmp_path))
    from torchcodec.decoders import VideoDecoder

    levels = VideoDecoder(clip).get_frames_in_range(0, 40).data.float().mean(dim=(1, 2, 3))
    levels = levels / 127.5 - 1.0
    g = adaptiveload._C.sample_geometry(data._planner, data._manifest, 0, data.epoch)
    assert len(g["frames"]) == data[0]["shape"][0] == 17  # 40 frames at 30 fps: 21 at 16, bucket 17
    assert _frame_of(data[0]["pixels"], levels) == g["frames"]
    # The dataset decodes whatever the core says: patch the binding, see the frames follow.
    real = adaptiveload._C.sample_geometry

    def patched(planner, manifest, row, epoch=-1):
        d = real(planner, manifest, row, epoch)
        d["frames"] = [39 - k for k in range(len(d["frames"]))]
        return d

    monkeypatch.setattr(media._C, "sample_geometry", patched)
    assert _frame_of(data[0]["pixels"], levels) == [39 - k for k in range(17)]


def test_epoch_moves_the_window_and_keys_may_carry_it(tmp_path):
    clip = _flat_clip(str(tmp_path), "long.mkv", frames=120, rate="30", size="64x112")
    manifest = media_gen.manifest(str(tmp_path), [clip])
    data = MediaDataset(_sampler(manifest), root=str(tmp_path))
    firsts = set()
    for epoch in range(6):
        data.set_epoch(epoch)
        g = data.geometry(0)
        assert g["frames"] == adaptiveload._C.sample_geometry(data._planner, data._manifest, 0, epoch)["frames"]
        assert torch.equal(data[0]["pixels"], data[(0, epoch)]["pixels"])
        firsts.add(g["frames"][0])
    assert len(firsts) > 1, "the window never moved across 6 epochs (120 frames, 17 planned)"
    # Without set_epoch the dataset follows the sampler's epoch.
    data.set_epoch(None)
    for epoch in (2, 5):
        data._sampler.set_epoch(epoch)
        assert data.epoch == epoch
        assert data.geometry(0)["frames"] == adaptiveload._C.sample_geometry(data._planner, data._manifest, 0,
                                                                             epoch)["frames"]


def test_captions_from_the_manifest(tmp_path):
    _flat_clip(str(tmp_path), "c.mkv", frames=20)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"path": "c.mkv", "num_frames": 20, "height": 96, "width": 96, "fps": 30, '
                        '"text": "a grey square, caf\\u00e9"}\n')
    data = MediaDataset(_sampler(str(manifest)), root=str(tmp_path))
    assert data[0]["caption"] == "a grey square, caf\u00e9"
    csv = tmp_path / "m.csv"
    csv.write_text('path,num_frames,height,width,fps,caption\nc.mkv,20,96,96,30,"one, two"\n')
    assert MediaDataset(_sampler(str(csv)), root=str(tmp_path))[0]["caption"] == "one, two"
    # In-memory manifests carry it too.
    rows = [{"path": "c.mkv", "num_frames": 20, "height": 96, "width": 96, "fps": 30, "caption": "mem"}]
    assert MediaDataset(_sampler(rows), root=str(tmp_path))[0]["caption"] == "mem"
    cols = {k: [v] for k, v in rows[0].items()}
    assert MediaDataset(_sampler(cols), root=str(tmp_path))[0]["caption"] == "mem"
    with pytest.raises(ValueError, match="both 'caption' and 'text'"):
        _sampler({**cols, "text": ["other"]})


def test_dataloader_batches_with_collate(small_set):
    folder, manifest = small_set
    sampler = _sampler(manifest)
    data = MediaDataset(sampler, root=folder)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate_media, num_workers=0)
    planned = list(sampler)  # the epoch's micro-batches; the loader walks the same plan
    seen = 0
    for batch, rows in zip(loader, planned):
        assert batch["rows"] == list(rows) and batch["planned"] == len(rows) and batch["skipped"] == []
        shapes = {data._planner.row_geometry(r)[:3] for r in rows}
        if len(shapes) == 1:
            f, h, w = shapes.pop()
            assert batch["pixels"].shape == (len(rows), 3, f, h, w)
        seen += len(rows)
        if seen >= 12:
            break
    assert seen >= 12


# --- bad media -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_set(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = _flat_clip(str(d), "good.mkv", frames=40, rate="30")
    mp4 = os.path.join(str(d), "whole.mp4")
    media_gen._run(media_gen.FF + ["-f", "lavfi", "-i", "testsrc2=size=96x96:rate=30", "-frames:v", "40",
                                   "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", mp4])
    data = open(mp4, "rb").read()
    (d / "truncated.mp4").write_bytes(data[: len(data) // 2])  # the index (moov) at the end is lost
    fs = os.path.join(str(d), "faststart.mp4")
    media_gen._run(media_gen.FF + ["-i", mp4, "-c", "copy", "-movflags", "+faststart", fs])
    data = open(fs, "rb").read()
    (d / "cut.mp4").write_bytes(data[: len(data) * 2 // 3])  # index first, frame data cut off
    (d / "empty.mp4").write_bytes(b"")
    (d / "garbage.mp4").write_bytes(os.urandom(4096))
    (d / "notes.png").write_text("not an image\n" * 20)
    shutil.copy(good, d / "short.mkv")
    shutil.copy(good, d / "narrow.mkv")
    rows = {
        "good.mkv": "40,96,96,30",
        "missing.mp4": "40,96,96,30",
        "empty.mp4": "40,96,96,30",
        "truncated.mp4": "40,96,96,30",
        "cut.mp4": "40,96,96,30",
        "garbage.mp4": "40,96,96,30",
        "short.mkv": "80,96,96,30",  # the row says 80 frames, the file has 40
        "notes.png": "1,96,96,",
        "narrow.mkv": "40,96,128,30",  # the file is 96x96
    }
    text = "path,num_frames,height,width,fps\n" + "".join(f"{p},{v}\n" for p, v in rows.items())
    (d / "m.csv").write_text(text)
    return str(d), str(d / "m.csv")


BAD = {  # row -> (file, what the message says)
    1: ("missing.mp4", "no such file"),
    2: ("empty.mp4", "empty file (0 bytes)"),
    3: ("truncated.mp4", "not decodable as a video"),
    4: ("cut.mp4", None),  # a truncated file with its index: shorter, or frames that cannot be decoded
    5: ("garbage.mp4", "not decodable as a video"),
    6: ("short.mkv", "shorter than its manifest row says: the file has 40 frames, the row 80"),
    7: ("notes.png", "not decodable as an image"),
    8: ("narrow.mkv", "the file is 96x96 (height x width, after rotation) but the row says 96x128"),
}


@pytest.mark.parametrize("row", sorted(BAD))
def test_bad_media_errors_name_row_file_and_reason(bad_set, row):
    folder, manifest = bad_set
    data = MediaDataset(_sampler(manifest), root=folder)
    assert data[0]["pixels"].shape[0] == 3  # the good row decodes
    name, what = BAD[row]
    with pytest.raises(BadMediaError) as e:
        data[row]
    msg = str(e.value)
    assert f"manifest row {row} ({manifest}:{row + 2})" in msg and name in msg, msg
    if what is None:
        assert "shorter than its manifest row says" in msg or "cannot be decoded" in msg, msg
    else:
        assert what in msg, msg
    assert e.value.row == row and e.value.path.endswith(name)


def test_bad_media_skip_reports_rows_and_keeps_counts(bad_set):
    folder, manifest = bad_set
    sampler = _sampler(manifest)
    data = MediaDataset(sampler, root=folder, on_bad="skip")
    items = [data[r] for r in range(9)]
    assert items[0]["pixels"] is not None
    for r in BAD:
        assert items[r]["pixels"] is None and items[r]["error"]
    assert [s[0] for s in data.skipped] == sorted(BAD)
    batch = collate_media(items)
    # Never a silently shorter batch: what was left out is named, the planned count kept.
    assert batch["rows"] == [0] and batch["pixels"].shape[0] == 1
    assert [r for r, _ in batch["skipped"]] == sorted(BAD) and batch["planned"] == 9
    # Through a DataLoader with workers the report travels with the batch.
    loader = torch.utils.data.DataLoader(data, batch_sampler=[[0, 1, 2], [6, 7, 0]], collate_fn=collate_media,
                                         num_workers=2)
    got = list(loader)
    assert [b["planned"] for b in got] == [3, 3]
    assert [[r for r, _ in b["skipped"]] for b in got] == [[1, 2], [6, 7]]
    assert [b["rows"] for b in got] == [[0], [0]]


def test_arguments_are_checked(small_set):
    folder, manifest = small_set
    sampler = _sampler(manifest)
    with pytest.raises(ValueError, match="on_bad must be 'error' or 'skip'"):
        MediaDataset(sampler, on_bad="ignore")
    with pytest.raises(TypeError, match="AdaptiveBatchSampler"):
        MediaDataset(object())
    with pytest.raises(ValueError, match="is not a folder"):
        MediaDataset(sampler, root=os.path.join(folder, "nope"))


# --- acceptance: 300 files ------------------------------------------------------------------


def test_300_files_decode_at_their_planned_shapes(tmp_path):
    """Clips (15 sizes, 8-60 fps with 29.97 and 23.976, variable frame rate, rotation 90 / 180 /
    270, 0.6-2.35 s, five containers) and images of many aspect ratios (jpg, png, webp, bmp):
    every planned row decodes to exactly its planned (frames, height, width)."""
    folder = str(tmp_path)
    paths = media_gen.make_set(folder, 150, 150)
    manifest = media_gen.manifest(folder, paths)
    sampler = _sampler(manifest)
    data = MediaDataset(sampler, root=folder)
    planner = data._planner
    rows = planner.planned_rows()
    assert len(paths) >= 300 and len(rows) == len(paths), planner.left_out
    mismatches = []
    for row in rows:
        f, h, w, _ = planner.row_geometry(row)
        got = tuple(data[row]["pixels"].shape)
        if got != (3, f, h, w):
            mismatches.append((data.path(row), got, (3, f, h, w)))
    assert mismatches == [], mismatches[:10]
