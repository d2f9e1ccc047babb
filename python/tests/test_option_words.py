"""Every error and warning the sampler can raise names Python arguments, never the CLI's flags:
each argument of AdaptiveBatchSampler driven to a refusal or a warning (the core's messages
name options through the one option table, util/option_word.h, in the caller's words).
The CLI's words for the same messages are scripts/plan_identity.sh's (byte-identical)."""
import csv
import inspect
import json
import re
import warnings

import pytest

from adaptiveload import _C, AdaptiveBatchSampler

FIELDS = ["path", "num_frames", "height", "width", "fps"]
# A CLI flag in a message: --word, or a one-letter -w, where a word starts.
FLAG = re.compile(r"(?:^|[\s(\[`'\"/,;])(--?[a-zA-Z][\w-]*)")


def csv_file(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(rows)
    return str(path)


def device_file(path, memory_gb):
    path.write_text(json.dumps({"name": "small-gpu", "memory_gb": memory_gb, "peak_tflops": 0.1, "efficiency": 0.3,
                                "allreduce_bus_gbps": 5, "microbatch_overhead_ms": 2, "half_efficiency_tokens": 256,
                                "memory_reserve_fraction": 0, "node_size": 8, "alltoall_gbps": 5}))
    return str(path)


CLIPS = [[f"c{i}.mp4", 17, 480, 640, 16] for i in range(6)]
IMAGES = [[f"i{i}.jpg", 1, 480, 640, ""] for i in range(6)]


def small_gpu(tmp_path):
    """On the tiny grid: images fit one GPU, 480x640 clips need a group of 2 (as
    test_sequence_parallel.small_gpu)."""
    return device_file(tmp_path / "gpu.json", (98_304 * 18 + 3e9 + 360_000) / 1e9)


# (case, the sampler's arguments (the manifest from `rows`), words the text must hold). The
# arguments marked "tmp" are files made by the case.
CASES = [
    ("bad_row", dict(rows=[["a.mp4", "lots", 480, 640, 16]] + IMAGES), ["on_bad_row='skip'"]),
    ("duplicate_warn", dict(rows=IMAGES + IMAGES[:1]), ["on_duplicate='skip'", "on_duplicate='error'"]),
    ("duplicate_skip", dict(rows=IMAGES + IMAGES[:1], on_duplicate="skip"), ["(on_duplicate='skip')"]),
    ("duplicate_error", dict(rows=IMAGES + IMAGES[:1], on_duplicate="error"),
     ["on_duplicate='skip'", "on_duplicate='warn'"]),
    ("oversize_memory", dict(rows=CLIPS, device="small", sp="off", checkpointing=False, sharding="none",
                             world_size=4), ["sp='auto'", "checkpointing=True", "sharding='fsdp'",
                                             "on_oversize='skip'"]),
    ("oversize_one_rank", dict(rows=CLIPS, device="small", sp="off", sharding="none", world_size=1),
     ["sharding='fsdp' with world_size > 1"]),
    ("oversize_larger_groups", dict(rows=CLIPS, device="small", sp_sizes=(1,), sharding="none", world_size=4),
     ["sp_sizes"]),
    ("mem_budget", dict(rows=CLIPS, mem_budget=100), ["raise mem_budget", "on_oversize='skip'"]),
    ("grid", dict(rows=[["s.mp4", 17, 8, 8, 16]]), ["choose a grid (grid)"]),
    ("global_batch_form", dict(rows=IMAGES, global_batch="lots"), ["(global_batch)"]),
    ("global_batch_steps", dict(rows=IMAGES, global_batch="steps:100", world_size=2), ["(global_batch)"]),
    ("sp_form", dict(rows=IMAGES, sp="x"), ["(sp)"]),
    ("sp_group", dict(rows=IMAGES, sp="4", world_size=2), ["(sp) cannot be used"]),
    ("sp_sizes_form", dict(rows=IMAGES, sp_sizes="3"), ["(sp_sizes)"]),
    ("packing", dict(rows=CLIPS + IMAGES, device="small", sp="min", sharding="none", world_size=2, packing="on"),
     ["packing='on'", "packing='off'", "mem_budget"]),
    ("drop_last", dict(rows=IMAGES[:1], world_size=4, drop_last=True),
     ["drop_last=True", "it trains nothing", "drop_last=False", "fewer ranks (world_size)"]),
    ("model_state", dict(rows=IMAGES, device="tiny", sharding="none", world_size=1),
     ["sharding='fsdp' with more GPUs (world_size)"]),
    ("model_state_ranks", dict(rows=IMAGES, device="tiny", sharding="none", world_size=2),
     ["use sharding='fsdp' (shards it"]),
    ("profile_file", dict(rows=IMAGES, profile="bad"), ["profile"]),
    ("cost_model", dict(rows=IMAGES, cost_model="profile"), ["cost_model='profile'", "profile="]),
    # The sampler's own checks: each names its argument.
    ("world_size", dict(rows=IMAGES, world_size=0), ["world_size"]),
    ("rank", dict(rows=IMAGES, world_size=2, rank=2), ["rank"]),
    ("seed", dict(rows=IMAGES, seed=-1), ["seed"]),
    ("comp_budget", dict(rows=IMAGES, comp_budget=-1), ["comp_budget"]),
    ("adapt_every", dict(rows=IMAGES, adapt_every=0), ["adapt_every"]),
    ("adapt", dict(rows=IMAGES, adapt="sometimes"), ["adapt must be one of"]),
    ("sync", dict(rows=IMAGES, sync="sometimes"), ["sync"]),
    ("sharding", dict(rows=IMAGES, sharding="zero"), ["sharding"]),
    ("on_oversize", dict(rows=IMAGES, on_oversize="drop"), ["on_oversize"]),
    ("checkpointing", dict(rows=IMAGES, checkpointing="maybe"), ["checkpointing"]),
    ("packing_word", dict(rows=IMAGES, packing="tight"), ["packing"]),
    ("grid_name", dict(rows=IMAGES, grid="no-such-grid"), ["grid"]),
    ("on_bad_row_word", dict(rows=IMAGES, on_bad_row="ignore"), ["on_bad_row"]),
    ("strategy", dict(rows=IMAGES, strategy="all"), ["strategy='all'"]),
    ("model", dict(rows=IMAGES, model=7), ["model"]),
    ("device", dict(rows=IMAGES, device=7), ["device"]),
    ("manifest", dict(rows=None, manifest=42), ["manifest"]),
    ("devices", dict(rows=IMAGES, world_size=4, devices="h200:3"), ["(devices)"]),
    ("rank_speeds", dict(rows=IMAGES, world_size=4, rank_speeds={9: 0.5}), ["(rank_speeds)"]),
]


def drive(tmp_path, rows=(), **kw):
    """The sampler on `rows` with `kw` -> the text of every error and warning it raised."""
    if kw.get("device") == "small":
        kw["device"] = small_gpu(tmp_path)
    elif kw.get("device") == "tiny":
        kw["device"] = device_file(tmp_path / "tiny.json", 0.001)
    if kw.get("profile") == "bad":
        (tmp_path / "profile.json").write_text("{\"cost\": 1}")
        kw["profile"] = str(tmp_path / "profile.json")
    if rows is not None:
        kw.setdefault("manifest", csv_file(tmp_path / "m.csv", rows))
    kw.setdefault("model", "tiny-dit")
    kw.setdefault("device", "cpu")
    texts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            AdaptiveBatchSampler(**kw)
        except Exception as e:  # noqa: BLE001  (every refusal's text is checked)
            texts.append(f"{type(e).__name__}: {e}")
    texts += [str(w.message) for w in caught]
    return texts


@pytest.mark.parametrize("case,kw,words", CASES, ids=[c[0] for c in CASES])
def test_each_refusal_and_warning_names_python_arguments(tmp_path, case, kw, words):
    texts = drive(tmp_path, **kw)
    text = "\n".join(texts)
    assert texts, f"{case}: the sampler raised and warned nothing"
    flags = FLAG.findall(text)
    assert not flags, f"{case}: CLI flags {flags} in what the sampler said:\n{text}"
    for w in words:
        assert w in text, f"{case}: {w!r} not in what the sampler said:\n{text}"


def test_every_argument_of_the_sampler_is_driven():
    """Each argument of AdaptiveBatchSampler has a case above (a new argument needs one)."""
    params = set(inspect.signature(AdaptiveBatchSampler.__init__).parameters) - {"self"}
    driven = {k for _, kw, _ in CASES for k in kw} - {"rows"}
    driven |= {"manifest"}  # every case gives one
    missing = params - driven
    assert not missing, f"sampler arguments no case drives: {sorted(missing)}"


def test_the_option_table_gives_each_option_both_front_ends_words():
    """The core's table: each option's CLI flag and its sampler argument (None: the planner's
    only, named PlannerConfig.<field> in Python)."""
    r = _C.option_ranges()
    assert r["mem_budget_tokens"]["option"] == "--mem-budget" and r["mem_budget_tokens"]["python"] == "mem_budget"
    assert r["end_policy"]["python"] == "drop_last" and r["packing"]["python"] == "packing"
    assert r["fixed_config"]["python"] is None and r["sp"]["kind"] == "text"
    params = set(inspect.signature(AdaptiveBatchSampler.__init__).parameters)
    assert all(v["python"] in params for v in r.values() if v["python"] is not None)
