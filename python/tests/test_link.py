"""calibrate --allreduce-ranks N: the all-reduce measured between N gloo processes on this host,
the ring's bus and latency fitted through the gradients' time, written as the profile's "link",
and read by the planner in place of the device preset's (no timing assertions: only that the
price follows what was measured)."""
import json

import pytest

from adaptiveload import AdaptiveBatchSampler, calibrate, link


def test_fit_ring_prices_the_gradients_as_measured_and_takes_latency_from_a_small_message():
    # A 2-rank ring of 1 GB/s and 100 us: t = 2e-4 + bytes / 1e9; a noisy small point is skipped.
    ring = lambda x: link.ring_seconds(x, 2, 1e9, 1e-4)  # noqa: E731
    pts = [[4096, ring(4096)], [65536, 5 * ring(65536)], [1_000_000, ring(1_000_000)]]
    fit = link.fit_ring(pts, 2)
    assert fit["allreduce_bus_bytes_per_s"] == pytest.approx(1e9, rel=1e-9)
    assert fit["allreduce_latency_s"] == pytest.approx(1e-4, rel=1e-9)
    assert fit["max_rel_error"] == pytest.approx(0.8, rel=1e-6)  # the noisy point, and only it
    # Four ranks: the same times mean another bus (the ring moves 2 (N-1)/N of the bytes).
    four = link.fit_ring([[4096, ring(4096)], [1_000_000, ring(1_000_000)]], 4)
    assert link.ring_seconds(1_000_000, 4, four["allreduce_bus_bytes_per_s"], four["allreduce_latency_s"]) == \
        pytest.approx(ring(1_000_000), rel=1e-9)
    # Gradients no slower than the small message: latency alone, a finite bandwidth.
    # At most 10 TB/s, within what the planner reads (a profile's bytes are at most 1e15).
    flat = link.fit_ring([[4096, 1e-3], [1_000_000, 1e-3]], 2)
    assert flat["allreduce_latency_s"] >= 0 and flat["allreduce_bus_bytes_per_s"] == pytest.approx(link.MAX_BUS)
    assert link.ring_seconds(1_000_000, 2, flat["allreduce_bus_bytes_per_s"], flat["allreduce_latency_s"]) == \
        pytest.approx(1e-3, rel=1e-12)
    with pytest.raises(ValueError, match="2 or more ranks"):
        link.fit_ring([[4096, 1e-3], [1_000_000, 1e-3]], 1)
    # A small message quicker per byte than the gradients (a line through both would need a
    # negative latency): no latency, and the gradients still priced as measured.
    steep = link.fit_ring([[4096, 1e-6], [1_000_000, 1e-3]], 2)
    assert steep["allreduce_latency_s"] == 0
    assert link.ring_seconds(1_000_000, 2, steep["allreduce_bus_bytes_per_s"], 0) == pytest.approx(1e-3, rel=1e-12)
    with pytest.raises(ValueError, match="2 or more"):
        link.fit_ring([[4096, 1e-3]], 2)


@pytest.mark.parametrize("bad", [["--allreduce-ranks", "1"], ["--allreduce-ranks", "-2"],
                                 ["--allreduce-ranks", "300"]])
def test_bad_allreduce_ranks_are_refused(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--config", "tiny", "--device", "cpu", "--out", str(tmp_path / "p.json"), *bad])
    assert e.value.code == 2 and "--allreduce-ranks" in capsys.readouterr().err


def test_calibrate_writes_the_link_and_the_planner_prices_the_all_reduce_with_it(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    out = tmp_path / "p.json"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "1", "--max-batch", "2", "--allreduce-ranks", "2", "--out", str(out)])
    j = json.loads(out.read_text())
    lk = j["link"]
    assert lk == summary["link"] and lk["backend"] == "gloo" and lk["ranks"] == 2
    assert lk["gradient_sync"] == "model" and lk["reps"] >= 20
    assert lk["allreduce_bus_bytes_per_s"] > 0 and lk["allreduce_latency_s"] >= 0
    sizes = [x for x, _ in lk["points"]]
    assert sizes == sorted(sizes) and all(t > 0 for _, t in lk["points"])
    # The last point is the model's gradients (fp32), and the fitted ring prices them as measured.
    from adaptiveload.models import wan_dit
    params = sum(q.numel() for q in wan_dit.WanDiT(wan_dit.config("tiny", 1)).parameters())
    assert sizes[-1] == 4 * params == lk["gradient_bytes"]
    # The optimizer step priced as the two ranks stepped it at once, the lone time beside it.
    assert j["step"]["optimizer_s"] == lk["optimizer_s"] > 0 and j["step"]["beside_ranks"] == 2
    assert j["step"]["optimizer_alone_s"] > 0 and summary["step"] == j["step"]
    grad_s = lk["points"][-1][1]
    assert link.ring_seconds(sizes[-1], 2, lk["allreduce_bus_bytes_per_s"], lk["allreduce_latency_s"]) == \
        pytest.approx(grad_s, rel=1e-9)
    # The planner: the step's all-reduce on W ranks is the ring on this link (not the preset's)
    # of the gradients it timed: their bytes, solved from 2 ranks, give 4 ranks' price.
    csv = tmp_path / "m.csv"
    csv.write_text("path,num_frames,height,width,fps\n" + "".join(f"v{i}.mp4,{1 + 4 * (i % 5)},64,64,24\n"
                                                                  for i in range(40)))
    kw = dict(rank=0, model="tiny-dit", device="cpu", grid="tiny", cost_model="profile", seed=0)
    # The measured link (and step) with a fixed cost: 3 tiny shapes timed once each can fit
    # a flat cost (a = b = 0) that the planner refuses, and the cost is not what
    # this test is about.
    j["cost"] = {"a": 2e-6, "b": 4e-10, "c0": 1e-3, "overhead_s": 0.01, "half_efficiency_tokens": 256}
    j.pop("memory", None)
    priced = tmp_path / "priced.json"
    priced.write_text(json.dumps(j))
    j.pop("link")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(j))
    bus, lat = lk["allreduce_bus_bytes_per_s"], lk["allreduce_latency_s"]
    ar = {W: AdaptiveBatchSampler(str(csv), world_size=W, profile=str(priced), **kw).budgets["allreduce_s"]
          for W in (2, 4)}
    grad_bytes = (ar[2] - 2 * lat) * bus  # t(2) = bytes / bus + 2 latency
    assert grad_bytes == pytest.approx(lk["gradient_bytes"], rel=1e-6)
    assert ar[4] == pytest.approx(link.ring_seconds(grad_bytes, 4, bus, lat), rel=1e-9)
    before = AdaptiveBatchSampler(str(csv), world_size=2, profile=str(plain), **kw).budgets["allreduce_s"]
    assert before != pytest.approx(ar[2], rel=1e-3)  # the preset's link priced it otherwise


def test_the_step_is_timed_after_the_largest_micro_batch_measured(tmp_path, monkeypatch):
    # The sync and the optimizer follow a training step's micro-batches, not one small sample:
    # calibrate times both after a backward of its largest measured point (tokens x batch).
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    seen = {}
    real_opt = calibrate.measure_optimizer

    def opt(model, c, shape, device, reps, clock, statistic, batch):
        seen["optimizer"] = (tuple(shape), batch)
        return real_opt(model, c, shape, device, reps, clock, statistic, batch)

    def fake_link(ranks, gradient_bytes, device_type, reps, statistic, spec):
        seen["link"] = (tuple(spec["shape"]), spec["batch"])
        return {"backend": "gloo", "ranks": ranks, "allreduce_bus_bytes_per_s": 1e9, "allreduce_latency_s": 1e-4,
                "gradient_bytes": gradient_bytes, "points": [[4096, 2e-4], [gradient_bytes, 1e-3]],
                "gradient_sync": "model", "reps": reps, "statistic": statistic, "median_rel_error": 0.0,
                "max_rel_error": 0.0, "optimizer_s": 2e-3}
    monkeypatch.setattr(calibrate, "measure_optimizer", opt)
    monkeypatch.setattr(link, "measure", fake_link)
    out, meas = tmp_path / "p.json", tmp_path / "m.jsonl"
    calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1", "--reps", "1",
                    "--max-batch", "4", "--allreduce-ranks", "2", "--out", str(out), "--measurements-out", str(meas)])
    points = [json.loads(s) for s in meas.read_text().splitlines()]
    big = max(points, key=lambda q: q["tokens"] * q["batch"])
    assert big["batch"] > 1  # a real choice: not the first shape's single sample
    assert seen["optimizer"] == seen["link"] == (tuple(big["shape"]), big["batch"])


def test_every_branch_of_the_fit_gives_a_link_the_planner_reads(tmp_path):
    # calibrate must not write a profile the planner then refuses: the fallbacks too.
    csv = tmp_path / "m.csv"
    csv.write_text("path,num_frames,height,width,fps\n" + "".join(f"v{i}.mp4,{1 + 4 * (i % 5)},64,64,24\n"
                                                                  for i in range(40)))
    base = {"format": "adaptiveload-profile", "version": 1,
            "cost": {"a": 2e-6, "b": 4e-10, "c0": 1e-3, "overhead_s": 0.01, "half_efficiency_tokens": 256}}
    for points in ([[4096, 2e-4], [646144, 2e-3]], [[4096, 1e-6], [646144, 1e-3]], [[4096, 1e-3], [646144, 1e-3]],
                   [[4096, 5e-3], [65536, 5e-3], [646144, 1e-6]]):
        fit = link.fit_ring(points, 2)
        path = tmp_path / "p.json"
        path.write_text(json.dumps(dict(base, link=dict(fit, gradient_bytes=points[-1][0]))))
        s = AdaptiveBatchSampler(str(csv), world_size=2, rank=0, model="tiny-dit", device="cpu", grid="tiny",
                                 cost_model="profile", profile=str(path), seed=0)
        assert s.budgets["allreduce_s"] == pytest.approx(points[-1][1], rel=1e-9), points
