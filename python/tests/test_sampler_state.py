"""States saved by earlier builds load and resume exactly: state dicts (and a pickled
PlannedStep) captured from the single-module sampler (adaptiveload/sampler.py), with the
micro-batches that build yielded after loading them into a fresh sampler. A change that
breaks them breaks users' checkpoints.

The manifest is generated (300 rows of seven shapes), so the cases need no files.
"""
import pickle

import pytest

import adaptiveload
from adaptiveload import sampler as sampler_module
from adaptiveload.sampler import AdaptiveBatchSampler, PlannedStep

F, H, W = [1, 33, 81, 49, 17, 1, 65], [480, 720, 480, 256, 480, 720, 480], [832, 1280, 640, 448, 832, 1280, 480]
ROWS = [dict(path=f"clip{i}.mp4", num_frames=F[i % 7], height=H[i % 7], width=W[i % 7],
             fps=None if F[i % 7] == 1 else 16) for i in range(300)]

# (name, sampler keywords, the saved state, how the rest was read ("iter": micro-batches,
# "steps": per step), (epoch, step, len) right after loading, the rest of the epoch).
CASES = [
    # mid_step
    ("mid_step", {"rank": 1, "seed": 7, "world_size": 2}, {
        "format": "adaptiveload-sampler", "version": 1, "world_size": 2, "rank": 1, "step_offset": 8,
        "core": ('{"epoch":0,"fingerprint":"bda2f6e708127c38","format":"adaptiveload-state",'
                 '"seed":"0000000000000007","segments":[[2,1]],"strategy":"balanced","version":1}'),
    }, "iter", (0, 1, 40),
     [[262, 220, 108, 10], [155], [190], [92], [183], [198, 9], [55, 69, 118], [6, 230], [60, 32, 179],
      [38, 24, 213], [266, 70, 259, 84, 154, 287, 182, 203, 28, 175, 56, 63, 280, 133], [218], [274], [64], [197],
      [233, 275], [48, 202, 209], [111, 195], [228, 130, 158], [283, 87, 185, 227], [43], [57], [50], [16, 107],
      [296, 128], [184, 149], [83, 293], [151, 123, 298], [199, 157, 136, 129], [124, 61, 75, 131, 68, 54], [8],
      [106], [127], [2, 254], [79, 51], [240, 23], [13, 223], [144, 249, 277], [241, 164, 101, 276],
      [264, 187, 299, 194, 250, 285]]),
    # elastic
    ("elastic", {"rank": 0, "seed": 7, "world_size": 3}, {
        "format": "adaptiveload-sampler", "version": 1, "world_size": 3, "rank": 0, "step_offset": 5,
        "core": ('{"epoch":0,"fingerprint":"bda2f6e708127c38","format":"adaptiveload-state",'
                 '"seed":"0000000000000007","segments":[[2,1],[3,0]],"strategy":"balanced",'
                 '"version":1}'),
    }, "iter", (0, 1, 35),
     [[83, 55], [200, 165, 137], [192, 129, 157], [252, 217, 35, 287, 49], [260], [57], [113], [100], [48, 111],
      [32, 95, 249], [255, 150, 94], [299, 138, 33, 208, 180, 194], [120], [225], [240, 93], [261],
      [104, 293, 146], [123], [108, 227], [259, 140, 98, 161, 210], [148], [239], [106], [289], [167, 76],
      [144, 179, 186], [59, 248, 178], [124, 285, 82, 40, 215], [162], [288], [128, 226], [198], [244, 216, 125],
      [235], [66, 220, 31]]),
    # micro_sync
    ("micro_sync", {"drop_last": True, "rank": 0, "strategy": "dual", "sync": "micro", "world_size": 2}, {
        "format": "adaptiveload-sampler", "version": 1, "world_size": 2, "rank": 0, "step_offset": 0,
        "core": ('{"epoch":2,"fingerprint":"db238e8ee3cffdb3","format":"adaptiveload-state",'
                 '"seed":"0000000000000000","segments":[[2,2]],"strategy":"dual","sync":"micro",'
                 '"version":1}'),
    }, "steps", (2, 2, 14),
     [[[23, 9, 296, 121, 79], [97, 223, 244, 146, 55, 6], [176, 204], [71, 141]],
      [[275, 30, 177, 254, 289], [162, 50], [288, 92]],
      [[256, 53, 242, 11, 207, 235, 74, 228, 193, 221, 81, 263, 95, 179, 25, 186, 214], [134, 253],
       [203, 224, 189, 28, 231, 112, 70, 217, 259, 84, 287, 56, 119, 147, 294, 140, 266, 7, 154, 280, 14, 210, 98,
        0, 91, 35, 77, 42, 161, 175, 238, 49, 63, 21, 273, 133, 182, 196, 126, 168, 105, 245, 252],
       [274, 113]],
      [[5, 243, 117, 89, 82, 19, 96, 187, 215, 250, 138, 278, 201, 54, 299, 271, 26, 166, 159, 173, 285, 152, 292,
        75, 194, 110, 131, 47, 222, 208, 33, 12, 40, 61, 180, 103, 145, 68, 264, 257, 236, 229, 124],
       [15, 1], [281, 64]]]),
    # adapted
    ("adapted", {"adapt_every": 2, "rank": 0, "seed": 3, "strategy": "equal_tokens", "world_size": 2}, {
        "format": "adaptiveload-sampler", "version": 1, "world_size": 2, "rank": 0, "step_offset": 0,
        "core": ('{"epoch":0,"fingerprint":"7aaf01cdf6ef6132","format":"adaptiveload-state",'
                 '"seed":"0000000000000003","segments":[[2,4],[2,0,{"a":0.0,'
                 '"b":7.302859456379464e-12,"c0":0.010041744265184767,'
                 '"half_efficiency_tokens":2048.0,"overhead_s":0.003}]],"strategy":"equal_tokens",'
                 '"version":1}'),
    }, "steps", (0, 4, 2),
     [[[208, 159, 278, 33, 264, 292, 250, 82, 26, 173, 131, 138, 124, 236, 40, 257, 75, 145, 222, 12, 180, 68, 166,
        299, 271, 19, 110, 5, 61, 194, 117, 201, 229, 54, 89, 96, 47, 187, 285, 215, 103, 152, 243]],
      [[254, 233, 296, 247, 58, 156, 121, 135, 128, 170, 142, 72, 9, 212, 198, 37, 86, 163, 149, 289, 219]]]),
]
PICKLED_STEP = (
    b'\x80\x04\x95\xcf\x00\x00\x00\x00\x00\x00\x00\x8c\x14adaptiveload.sampler\x94\x8c\x0bPlan'
    b'nedStep\x94\x93\x94)\x81\x94}\x94(\x8c\x05epoch\x94K\x03\x8c\x04step\x94K\x05\x8c\rmic'
    b'ro_batches\x94]\x94(]\x94(K\x04K\x01e]\x94K\x07ae\x8c\x0eglobal_sam'
    b'ples\x94K\x03\x8c\rglobal_tokens\x94MH\x12\x8c\x0epadded_sampl'
    b'es\x94K\x01\x8c\x14padded_micro_batches\x94]\x94(\x89\x88e\x8c\x06grou'
    b'ps\x94]\x94(K\x00K\x01\x86\x94h\x12eub.'
)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_saved_state_loads_and_resumes_as_it_did(case):
    name, kw, state, how, position, rest = case
    s = AdaptiveBatchSampler(ROWS, **kw)
    s.load_state_dict(state)
    assert s.state_dict() == state  # the same format, field for field
    assert (s.epoch, s.step, len(s)) == position
    assert (list(s) if how == "iter" else [st.micro_batches for st in s.steps()]) == rest


def test_planned_step_pickles_as_it_did():
    step = PlannedStep(3, 5, [[4, 1], [7]], 3, 4680, 1, [False, True], [(0, 1), (0, 1)])
    assert pickle.loads(PICKLED_STEP) == step
    assert pickle.dumps(step, protocol=4) == PICKLED_STEP
    assert PlannedStep.__module__ == AdaptiveBatchSampler.__module__ == "adaptiveload.sampler"


def test_public_names_stay_importable():
    assert adaptiveload.AdaptiveBatchSampler is AdaptiveBatchSampler and adaptiveload.PlannedStep is PlannedStep
    assert sampler_module.AdaptiveBatchSampler is AdaptiveBatchSampler
    constants = ("STATE_FORMAT", "STATE_VERSION", "MIN_OBSERVATIONS", "MIN_FIT_TOKEN_COUNTS", "MAX_WORLD_SIZE",
                 "MAX_SEED", "MAX_INT64", "MAX_MEM_BUDGET", "MAX_COMP_BUDGET", "MAX_STEP_SECONDS", "COST_MODELS")
    assert {name: getattr(sampler_module, name) for name in constants} == {
        "STATE_FORMAT": "adaptiveload-sampler", "STATE_VERSION": 1, "MIN_OBSERVATIONS": 8, "MIN_FIT_TOKEN_COUNTS": 3,
        "MAX_WORLD_SIZE": 1 << 20, "MAX_SEED": 2**64 - 1, "MAX_INT64": 2**63 - 1, "MAX_MEM_BUDGET": 10**15,
        "MAX_COMP_BUDGET": 1e300, "MAX_STEP_SECONDS": 1e9, "COST_MODELS": ("analytic", "power", "profile"),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_old_state_keeps_its_layout_for_its_epoch_only():
    """A state saved before the evened layouts (no "layout" in its core) resumes its epoch as it
    was planned and saves as it was read; the next epoch is planned, and saved, as this build
    plans (layout 3), the same plan a fresh sampler makes for that epoch."""
    name, kw, state, how, position, rest = CASES[0]
    s = AdaptiveBatchSampler(ROWS, **kw)
    s.load_state_dict(state)
    assert '"layout"' not in s.state_dict()["core"]
    s.set_epoch(1)
    assert '"layout":3' in s.state_dict()["core"]
    fresh = AdaptiveBatchSampler(ROWS, **kw)
    fresh.set_epoch(1)
    assert list(s) == list(fresh)
