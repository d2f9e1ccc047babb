"""The sampler's strategy names and option ranges come from the core (_C.strategies(),
_C.option_ranges()): one list, the registry's, also the CLI's and the fuzzer's."""
import pytest

import adaptiveload
from adaptiveload import _C
from adaptiveload.sampler import _ranges


def test_the_registry_lists_the_built_in_strategies_with_their_properties():
    by_name = {s["name"]: s for s in _C.strategies()}
    assert set(by_name) == {"equal_tokens", "fixed", "dual", "balanced", "greedy_pack"}
    assert by_name["balanced"]["mixes_groups"] and not by_name["dual"]["mixes_groups"]
    assert by_name["fixed"]["needs_fixed_batch"]
    # Packing: the greedy packer always packs, balanced with packing="on".
    assert by_name["greedy_pack"]["packs"] and not by_name["balanced"]["packs"]
    assert by_name["balanced"]["packs_when_asked"] and not by_name["dual"]["packs_when_asked"]
    assert all(set(s["sync_modes"]) <= {"step", "micro"} and s["sync_modes"] for s in by_name.values())


def test_the_sampler_reads_the_registry_when_it_checks_a_strategy(monkeypatch):
    real = _C.strategies()
    toy = dict(real[0], name="toy_packer", summary="a strategy registered for this test")
    monkeypatch.setattr(_C, "strategies", lambda: real + [toy])
    assert "toy_packer" in _ranges.strategies()
    with pytest.raises((TypeError, ValueError), match="toy_packer"):
        adaptiveload.AdaptiveBatchSampler(manifest=["x.csv"], strategy=7)


def test_the_sampler_ranges_are_the_cores():
    r = _C.option_ranges()
    assert _ranges.MAX_WORLD_SIZE == r["world_size"]["max"] == 1 << 20
    assert _ranges.MAX_SEED == 2**64 - 1
    assert _ranges.SYNCS == ("auto", "step", "micro")
    assert _ranges.COST_MODELS == tuple(r["cost_model"]["choices"])


def test_every_python_list_of_strategies_and_sync_modes_is_the_registrys(monkeypatch):
    """The sampler's, train_dit's and compare's lists of strategy names and sync modes are the
    core's registry (none written by hand: a hand list had left greedy_pack out), read when used,
    so a strategy registered in the core reaches every one of them."""
    from adaptiveload import sampler
    from adaptiveload.training import compare, options, train_dit

    def python_lists():
        names = [s["name"] for s in _C.strategies()]
        helps = {a.dest: a for a in train_dit.parser()._actions}
        assert all(n in helps["strategy"].help for n in names), helps["strategy"].help
        return {
            "sampler.strategies()": list(sampler.strategies()) == sorted(names),
            "options.strategy_names()": options.strategy_names() == names,
            "compare --strategies default": compare.strategies_of(compare.parser().parse_known_args([])[0].strategies)
            == names,
            "train_dit.PACKING_STRATEGIES": train_dit.PACKING_STRATEGIES == {s["name"] for s in _C.strategies()
                                                                            if s["packs"]},
            "train_dit --sync choices": helps["sync"].choices == [m for m in _ranges.SYNCS if m != "auto"],
        }

    assert "greedy_pack" in [s["name"] for s in _C.strategies()]
    assert _ranges.SYNCS == tuple(_C.option_ranges()["sync"]["choices"])
    lists = python_lists()
    assert all(lists.values()), [k for k, ok in lists.items() if not ok]
    # A strategy registered in the core is in every list read at use (PACKING_STRATEGIES is read at import).
    real = _C.strategies()
    monkeypatch.setattr(_C, "strategies", lambda: real + [dict(real[0], name="toy_strategy", packs=False)])
    lists = python_lists()
    assert all(lists.values()), [k for k, ok in lists.items() if not ok]
    assert "toy_strategy" in compare.strategies_of("all") and "toy_strategy" in sampler.strategies()
