"""``dmrack bench speed``: every layer's closed loop runs and completes verbs (how fast is the
bench's business, never a test's); the SimPy model and the emulator complete the same loop."""

from __future__ import annotations

import pytest

from cluster.experiments import speed as bs
from cluster.experiments import bench_verbs as bv


@pytest.mark.parametrize("loop", [bs.coroutine_loop, bs.raw_verbs_loop,
                                  lambda t, w: bs.coroutine_loop(t, w, numpy_addresses=True)])
def test_each_layer_completes_its_verbs(loop):
    verbs, real = loop(2, 30_000)
    # two threads of 8 outstanding READs, ~2.3 µs a round trip: about 2 x 8 x 30 / 2.3 verbs
    assert 100 <= verbs <= 300 and verbs % bs.DEPTH == 0 and real > 0


def test_the_coroutine_loop_at_depth_1_posts_one_verb_a_doorbell():
    verbs, real = bs.coroutine_loop(2, 30_000, depth=1)
    # two threads, one READ a round trip: about 2 x 30 / 2.3 verbs, far fewer than at depth 8
    assert 10 <= verbs <= 40 and real > 0


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_the_read_many_loop_runs_the_same_verbs_as_the_per_read_loop(depth):
    # one read_many per doorbell queues the READs of depth read() calls: the same virtual run
    assert bs.coroutine_loop(4, 40_000, depth=depth, many=True)[0] == bs.coroutine_loop(4, 40_000, depth=depth)[0]


def test_simpy_model_runs_the_same_loop():
    pytest.importorskip("simpy")
    verbs, real = bs.simpy_loop(2, 30_000)
    assert 100 <= verbs <= 300 and real > 0


def test_verbs_rows_name_their_targets(monkeypatch):
    # the verbs-level rows are declared in verbs.py (bench verbs --only speed) and re-exported by speed.py
    assert bs.verbs_rows is bv.verbs_rows
    monkeypatch.setattr(bv, "two_processes", lambda window, sync=None: (1000, 0.5))
    rows = bs.verbs_rows(True, lambda msg: None)
    by = {r.series: r for r in rows}
    assert by["one process"].published == bs.TARGET_COROUTINE and by["raw verbs"].published == bs.TARGET_RAW
    assert by["two processes, default window"].emulated == 2000
    assert by["one process, depth 1"].x == "32 threads x depth 1"
    assert by["one process, read_many"].x == "32 threads x depth 8"
    assert all(r.metric == "verbs/s real" and r.emulated and r.emulated > 0 for r in rows if r.series != "one process / simpy")
    if "simpy" in by:           # the coroutine loop against SimPy's model of it, beside the target ratio
        ratio = by["one process / simpy"]
        assert ratio.published == bs.TARGET_SIMPY_RATIO
        assert ratio.emulated == round(by["one process"].emulated / by["simpy"].emulated, 2)


def test_ycsb_rows_measure_a_whole_run():
    got = bs.ycsb_a("race", records=300, threads=2, coroutines=2, run_ms=0.05)
    assert got["ops_per_s"] > 0 and got["verbs_per_s"] > got["ops_per_s"] and got["virtual_us_per_s"] > 0


def test_systems_rows_warm_their_rack_before_the_clock_starts_once_per_rack(monkeypatch):
    # a cold numba cache made the first row measure the compiler (RACE 10x slow): each rack's
    # warm-up runs first, once per rack in the process
    from cluster.rack import ColocatedRack
    ran = []
    real_run = ColocatedRack.run
    monkeypatch.setattr(ColocatedRack, "run", lambda self: ran.append(self.compiled.spec.name) or real_run(self))
    monkeypatch.setattr(bs, "_WARM", set())
    for _ in range(2):
        bs.ycsb_a("race", records=300, threads=2, coroutines=2, run_ms=0.05)
    bs.bulk_load_rate("race", 2_000)
    assert [n.endswith("-warmup") for n in ran] == [True, False, False, True, False]
    assert ran[0] == ran[1] + "-warmup" and ran[1] == ran[2] and ran[3] == ran[4] + "-warmup"


@pytest.mark.parametrize("system", ["race", "sherman"])
def test_bulk_load_rate_is_measured(system):
    assert bs.bulk_load_rate(system, 2_000) > 0


def test_rack_rows_compare_processes_with_colocated(monkeypatch):
    calls = []

    def fake(colocated, overrides=None, run_ms=None):
        calls.append((colocated, overrides, run_ms))
        return (800.0, 50.0) if colocated else ((400.0, 25.0) if overrides else (1000.0, 62.5))
    monkeypatch.setattr(bs, "minimal_rack", fake)
    by = {r.series: r for r in bs.rack_rows(True, lambda msg: None)}
    assert by["processes / co-located"].emulated == 1.25 and all(r.experiment == "rack" for r in by.values())
    assert by["processes / co-located"].published == bs.TARGET_PROCESSES_RATIO == 1.3
    assert by["as processes"].published == 800 and by["as processes, no spin"].emulated == 400
    assert (False, {"profile_overrides.sync.spin_us": 0}, 10) in calls
    assert by["rack time, co-located"].emulated == 50 and by["rack time, as processes"].emulated == 62


@pytest.mark.parametrize("colocated", [True, False])
def test_the_minimal_rack_runs_in_both_modes(colocated):
    verbs_per_s, rack_us_per_s = bs.minimal_rack(colocated, run_ms=0.2)
    assert verbs_per_s > 0 and rack_us_per_s > 0
