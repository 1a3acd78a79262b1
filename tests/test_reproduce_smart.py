"""dmrack reproduce smart: every experiment runs on a tiny configuration and returns rows of its
own name (the figures themselves are checked by running ``dmrack reproduce smart --quick``)."""

from __future__ import annotations

import pytest

from cluster.experiments import reproduce_smart as rs

TINY = {
    "fig7": dict(threads=(2,), records=1_000, warm_ms=0.02, measure_ms=0.05, workloads=("a", "c")),
    "fig8": dict(threads=(2,), records=1_000, warm_ms=0.02, measure_ms=0.05, workloads=("c",)),
    "fig7def": dict(compute_nodes=(1, 2), threads=2, records=1_000, warm_ms=0.02, measure_ms=0.05,
                    workloads=("c",)),
    "fig9": dict(idles_us=(0, 20), threads=2, records=1_000),
    "fig12": dict(threads=(2,), records=1_000, warm_ms=0.02, measure_ms=0.05, workloads=("c",)),
    "fig12def": dict(nodes=(1, 2), threads=2, records=1_000, warm_ms=0.02, measure_ms=0.05, workloads=("c",)),
    "fig13": dict(threads=(4, 56), depths=(4, 16), warm_us=10, window_us=20),
    "fig14": dict(threads=(4,), records=1_000, warm_ms=0.02, measure_ms=0.05,
                  configs=(rs.FIG14_CONFIGS[0], rs.FIG14_CONFIGS[1], rs.FIG14_CONFIGS[3])),
    "table1": dict(intervals_ms=(32,), duration_us=160, depth=4),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_experiment_rows(name):
    rows = rs.EXPERIMENTS[name](True, lambda msg: None, **TINY[name])
    assert rows
    assert {r.experiment for r in rows} <= ({"fig13a", "fig13b"} if name == "fig13" else {name})
    assert all(r.emulated is None or r.emulated == r.emulated for r in rows)   # no NaN
    mops = [r.emulated for r in rows if r.metric == "Mops"]
    assert mops and all(m is not None and m > 0 for m in mops)


@pytest.mark.parametrize("name", ["fig12", "fig13", "table1"])
def test_rigs_side_by_side_give_the_rows_of_one_after_the_other(name):
    """Figs. 12 and 13 and Table 1 run each fresh rig or rack as a point (two at a time here): the
    same rows, in the same order, as one after the other."""
    serial = rs.EXPERIMENTS[name](True, lambda msg: None, jobs=1, **TINY[name])
    assert rs.EXPERIMENTS[name](True, lambda msg: None, jobs=2, **TINY[name]) == serial


def test_fig14_counts_retries():
    rows = rs.fig14(True, lambda msg: None, **TINY["fig14"])
    retries = {r.series: r.emulated for r in rows if r.metric == "retries / update"}
    assert set(retries) == {"w/o ConflictAvoid", "+Backoff", "+CoroThrot (SMART-HT)"}
    assert all(v is not None and v >= 0 for v in retries.values())
    retried = {r.series: r.emulated for r in rows if r.metric == "% updates retried"}
    assert set(retried) == set(retries) and all(0 <= v <= 100 for v in retried.values())
    # an update that retried counted at least one retry
    assert all(retried[k] / 100 <= retries[k] + 1e-9 for k in retries)
    cmax = [r.emulated for r in rows if r.metric == "mean c_max ops (window end)"]
    # SMART-HT only, read as its window ended; its credits start at the artifact's 64
    assert len(cmax) == 1 and 1 <= cmax[0] <= 64


def test_registry_lists_every_experiment():
    assert list(rs.EXPERIMENTS) == ["fig3", "fig4", "fig5", "fig7", "fig7def", "fig8", "fig9", "fig10", "fig11",
                                    "fig12", "fig12def", "fig13", "fig14", "table1"]


def test_fig7def_scales_out_over_compute_nodes():
    """Each point's rack has that many compute nodes (each its own NIC, so its own doorbells): two
    nodes of two threads do more than one, and the rows carry the artifact's totals by node count."""
    rows = rs.fig7def(True, lambda msg: None, **TINY["fig7def"])
    got = {(r.series, r.x, r.metric): r for r in rows}
    for system in ("race", "smart-ht"):
        one, two = got[(f"{system}, read-only", 1, "Mops")], got[(f"{system}, read-only", 2, "Mops")]
        assert two.emulated > one.emulated
        assert two.published == rs.SCALE_OUT_ARTIFACT[(system, "c")][2]
        assert got[(f"{system}, read-only", "2 / 1 compute nodes", "Mops ratio")].emulated > 1
    assert got[("smart-ht / race, read-only", "largest", "Mops ratio")].published == 3.8


def test_fig12_rows_carry_the_artifacts_points():
    """Each thread count's Mops sits beside the artifact's (fig12-ycsb-*.csv) where it ran that
    count; the ratios the text gives stay the text's, the others are the artifact's."""
    rows = rs.fig12(True, lambda msg: None, threads=(1,), records=1_000, warm_ms=0.02, measure_ms=0.05,
                    workloads=("a", "b"))
    got = {(r.series, r.x, r.metric): r for r in rows}
    for w in ("a", "b"):
        for series, *_ in rs.FIG12_SYSTEMS:
            row = got[(f"{series}, YCSB {w.upper()}", 1, "Mops")]
            assert row.published == rs.FIG12_ARTIFACT[(series, w)][1] and "fig12-ycsb-" in row.source
    assert got[("smart-bt / sherman, YCSB B", 1, "ratio")].published == rs.FIG12_PUBLISHED["b"]
    write_heavy = got[("smart-bt / sherman, YCSB A", 1, "ratio")]
    assert write_heavy.published == pytest.approx(0.438 / 0.421)
    # write-heavy's updates queue on hot leaves for milliseconds: its racks warm up as fig7's A does
    kw = rs._btree_scenarios(True, ("a",))[2]["a"]
    assert (kw["smart-bt"]["warm_ms"], kw["smart-bt"]["measure_ms"]) == rs.CONTENDED_MS[True]
    # SMART's B+-tree code releases a lock with a WRITE of its own once the write-back completed
    assert all(k["options"]["combine"] is False for k in kw.values())


def test_fig7_peak_ratios_are_the_texts_or_the_artifacts():
    """Write-heavy's ratio of the peaks is the text's (5.7 / 2.8); read-only's, where the text only
    bounds RACE from above, the artifact's over the same thread counts."""
    rows = rs.fig7(True, lambda msg: None, **{**TINY["fig7"], "threads": (1, 8)})
    got = {r.series: r for r in rows if r.metric == "ratio"}
    assert got["smart-ht / race, write-heavy"].published == pytest.approx(5.7 / 2.8)
    art = {s: max(rs.HASH_TABLE_ARTIFACT[(s, "c")][t] for t in (1, 8)) for s in ("race", "smart-ht")}
    read_only = got["smart-ht / race, read-only"]
    assert read_only.published == pytest.approx(art["smart-ht"] / art["race"]) and "fig8-ycsb-c" in read_only.source


def test_fig3_rows_carry_the_artifacts_points(monkeypatch):
    """Each policy's Mops at each thread count sits beside the artifact's fig3a.csv (the text's 110
    Mops where §3.2 gives it), in the verbs bench's rows and in the reproduction's."""
    from cluster.experiments import bench_verbs as bv
    monkeypatch.setattr(bv, "_onesided_closed_loop", lambda rig, **kw: kw["threads"] + (0.5 if kw["op"] == "write" else 0))
    assert {series for series, *_ in bv.FIG3_POLICIES} == set(bv.FIG3_ARTIFACT)
    got = {(r.series, r.x): r for r in rs.fig3(True, lambda msg: None) if r.metric == "Mops"}
    assert got[("shared_qp", 16)].published == bv.FIG3_ARTIFACT["shared_qp"][16]
    assert got[("shared_qp", 16)].source == bv.FIG3_SOURCE and got[("shared_qp", 16)].experiment == "fig3"
    assert got[("multiplexed q=2", 24)].published == 14.368
    assert got[("per_thread_doorbell", 96)].published == 110.0 and got[("per_thread_doorbell", 96)].source is None
    # Fig. 3(b): the same policies writing, series of their own beside fig3b.csv
    write = got[("per_thread_qp, WRITE", 32)]
    assert write.published == bv.FIG3B_ARTIFACT["per_thread_qp"][32] and write.source == bv.FIG3B_SOURCE
    assert {s for s, _ in got} == set(bv.FIG3_ARTIFACT) | {f"{s}, WRITE" for s in bv.FIG3B_ARTIFACT}


def test_fig14_rows_carry_the_artifacts_points():
    """Fig. 14's Mops sit beside the artifact's fig14.csv, its retries beside fig14bc.csv's counts
    (attempts - 1 per update, and the share that retried); the text's 96-thread figures stand where
    it gives them."""
    rows = rs.fig14(True, lambda msg: None, **{**TINY["fig14"], "threads": (1,)})
    got = {(r.series, r.metric): r for r in rows if r.x == 1}
    assert got[("w/o ConflictAvoid", "Mops")].published == rs.FIG14_ARTIFACT["w/o ConflictAvoid"][1]
    assert got[("+Backoff", "retries / update")].published == pytest.approx(1.017 - 1)
    assert got[("+Backoff", "% updates retried")].published == pytest.approx(100 * (1 - 0.984))
    assert got[("+Backoff", "% updates retried")].source == rs.FIG14BC_SOURCE
    text = rs.fig14(True, lambda msg: None, **{**TINY["fig14"], "threads": (96,), "records": 300,
                                                "warm_ms": 0.005, "measure_ms": 0.01})
    at96 = {(r.series, r.metric): r for r in text if r.x == 96}
    assert at96[("w/o ConflictAvoid", "retries / update")].published == 11.5          # the text's
    assert at96[("+CoroThrot (SMART-HT)", "% updates retried")].published == 6.7
    assert at96[("+Backoff", "retries / update")].published == pytest.approx(0.136)   # the artifact's


def test_fig13_rows_carry_the_artifacts_points():
    """Fig. 13's Mops rows sit beside the artifact's fig13a.csv (by thread count) and fig13b.csv
    (by batch, at 96 threads); fixed C_max = 8 is the model's own series, with nothing published."""
    rows = rs.fig13(True, lambda msg: None, threads=(8, 96), depths=(4, 64), warm_us=10, window_us=20)
    got = {(r.experiment, r.series, r.x, r.metric): r for r in rows}
    for name in ("per-thread QP", "+ThdResAlloc", "+WorkReqThrot"):
        assert got[("fig13a", name, 8, "Mops")].published == rs.FIG13A_ARTIFACT[name][8]
    assert got[("fig13b", "+WorkReqThrot, 96 threads", 4, "Mops")].published == rs.FIG13B_ARTIFACT["+WorkReqThrot"][4]
    assert got[("fig13b", "+WorkReqThrot, 96 threads", 64, "Mops")].published is None      # not in the artifact
    assert got[("fig13b", "fixed C_max=8, 96 threads", 4, "Mops")].published is None
    fall = got[("fig13a", "+ThdResAlloc", "≥56 threads", "min / peak")]
    assert fall.published == pytest.approx(80.141 / 80.141)   # over 8 and 96 threads: 96 is both
    assert fall.source and "fig13a" in fall.source


def test_fig12def_gives_each_compute_node_its_memory_node():
    """n compute and n memory nodes, as the artifact's scale-out script runs the B+-trees: two of
    each do more than one, and the rows carry the artifact's totals by n."""
    rows = rs.fig12def(True, lambda msg: None, **TINY["fig12def"])
    got = {(r.series, r.x, r.metric): r for r in rows}
    for series, *_ in rs.FIG12_SYSTEMS:
        one, two = got[(f"{series}, YCSB C", 1, "Mops")], got[(f"{series}, YCSB C", 2, "Mops")]
        assert two.emulated > one.emulated
        assert two.published == rs.SCALE_OUT_BTREE_ARTIFACT[(series, "c")][1]
    assert got[("smart-bt / sherman, YCSB C", 2, "Mops ratio")].published is None   # the text's is at eight


def test_fig9_idle_time_lowers_the_load():
    """An idle time after each operation lowers the throughput, and the latency with it."""
    rows = rs.fig9(True, lambda msg: None, **TINY["fig9"])
    got = {(r.series, r.x, r.metric): r.emulated for r in rows}
    for system in ("race", "smart-ht"):
        assert got[(system, "idle 20 µs", "Mops")] < got[(system, "idle 0 µs", "Mops")]
        assert got[(system, "idle 20 µs", "p50 µs")] <= got[(system, "idle 0 µs", "p50 µs")]
    pub = {(r.series, r.x, r.metric): r.published for r in rows}
    assert pub[("race", "idle 0 µs", "Mops")] == rs.FIG9_ARTIFACT["race"][0][0]
    assert pub[("race", "idle 20 µs", "Mops")] is None          # the artifact has no 20 µs point


def test_fig8_adds_one_technique_at_a_time():
    """+ThdResAlloc is RACE with a doorbell per thread and nothing of SMART; +WorkReqThrot adds
    adaptive throttling and no conflict avoidance: the racks' SMART switches say so."""
    from cluster.experiments.bench_ycsb import scenario_dict
    from cluster.scenario import scenario_from_dict
    from nodes.systems import get_system
    configs = {}
    for series, system, policy, smart in rs.FIG8_SERIES:
        doc = scenario_dict(system, "c", (2,), records=1_000, warm_ms=0.02, measure_ms=0.05, qp_policy=policy,
                            **({"smart": smart} if smart is not None else {}))
        spec = scenario_from_dict(doc, source="test").spec
        configs[series] = (spec.compute.qp_policy,
                           spec.smart_config(getattr(get_system(system), "smart_defaults", None)))
    policy, cfg = configs["+ThdResAlloc"]
    assert policy == "per_thread_doorbell" and not cfg.enabled
    policy, cfg = configs["+WorkReqThrot"]
    assert policy == "per_thread_doorbell" and cfg.throttle == "adaptive"
    assert not cfg.backoff and not cfg.coro_throttle


def test_fig10_and_fig11_rows_on_a_tiny_rack():
    """FORD+ and SMART-DTX on a few coordinators (TATP, 5,000 subscribers on two PMem nodes): the
    rows carry the artifact's points at the same thread counts; virtual time, deterministic."""
    from cluster.experiments import smart_dtx
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(smart_dtx, "_windows", lambda quick, idle_us=0.0: (20.0 + 2 * idle_us, 40.0 + 2 * idle_us))
        rows = rs.fig10(True, lambda msg: None, threads=(1, 8), workloads=("tatp",))
        rows11 = rs.fig11(True, lambda msg: None, idles=(0, 16), threads=4, workloads=("tatp",))
    got = {(r.series, r.x, r.metric): r for r in rows}
    for s in ("ford+", "smart-dtx"):
        r = got[(f"{s}, tatp", 8, "Mtxn/s")]
        assert r.emulated > 0 and r.published == smart_dtx.FIG10_ARTIFACT[("tatp", s)][8][0]
        assert 0.1 < got[(f"{s}, tatp", 1, "abort rate")].emulated < 0.45      # TATP's by-construction aborts
    assert [r.published for r in rows if r.metric == "max ratio"] == [2.6]
    assert {r.experiment for r in rows11} == {"fig11"}
    p50 = {(r.series, r.x): r.emulated for r in rows11 if r.metric == "p50 µs"}
    assert all(v > 0 for v in p50.values()) and len(p50) == 4
    assert any(r.metric == "p50 change %" and r.published == -77.0 for r in rows11)


def test_one_ford_thread_attempts_from_the_profiles_cpu_prices():
    """The coordinator's CPU is priced from the profile's [software] table, not fitted to a figure:
    one FORD+ thread x 8 coroutines attempts transactions at a rate of the artifact's order
    (SmallBank 0.247, TATP 0.517 M/s, ae/raw-reference/fig10-*.csv); fig10 reports it as a check."""
    from cluster.experiments.smart_dtx import dtx_point
    for wl, rate in (("smallbank", 0.247), ("tatp", 0.517)):
        p = dtx_point("one thread", "ford+", wl, 1, True, 50.0, 300.0)
        assert rate / 4 < p["attempts_m"] < rate * 4, (wl, p)


def test_hot_key_updates_pile_up_over_milliseconds():
    """Why fig5/fig7 A/fig14 warm up for milliseconds (CONTENDED_MS): under 100 % updates at
    zipf 0.99 an update of a hot key stays in flight while it retries, so the operations in
    flight fill with hot-key updates and RACE's throughput (no back-off) falls well below its
    first millisecond's. Virtual time, co-located: deterministic."""
    from cluster.experiments.bench_ycsb import scenario_dict
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = scenario_dict("race", "a", (16,), records=2_000, warm_ms=1.0, measure_ms=1.0,
                        properties={**rs.SMART_KEYS, **rs.UPDATE_ONLY})
    doc["step"] = doc["step"][:3] + [{"action": "run", "duration_ms": 1.0}] * 6
    res = ColocatedRack(scenario_from_dict(doc, source="test")).run()
    per_ms = [s.ops for s in res.steps if s.index >= 4]      # after set threads 16: six 1 ms runs
    assert len(per_ms) == 6 and per_ms[0] > 1_000
    assert max(per_ms[-2:]) < 0.5 * per_ms[0], per_ms


@pytest.mark.parametrize("workload, props, artifact_mops", [("c", {}, 0.571), ("a", rs.UPDATE_ONLY, 0.237)])
def test_one_race_thread_runs_the_artifacts_rate(workload, props, artifact_mops):
    """RACE's per-operation CPU (search_cpu_ns, write_cpu_ns) is calibrated so that one thread with
    8 coroutines runs SMART's artifact rates: read-only 0.571 Mops (fig8-ycsb-c.csv), update-only
    0.237 (fig5a.csv). Uniform keys, so no conflict enters; virtual time, deterministic."""
    from cluster.experiments.bench_ycsb import measure
    (p,), _ = measure("race", workload, (1,), records=2_000, warm_ms=0.3, measure_ms=1.0,
                      properties={"requestdistribution": "uniform", **props})
    assert p["mops"] == pytest.approx(artifact_mops, rel=0.05)


def test_only_takes_commas_and_repeats():
    from cluster.cli import _only
    assert _only(None) is None and _only([]) is None
    assert _only(["fig5,fig7", "fig12"]) == ["fig5", "fig7", "fig12"]
    assert _only(["fig5,"]) == ["fig5"]
