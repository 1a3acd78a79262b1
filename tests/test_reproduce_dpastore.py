"""``dmrack reproduce dpastore``'s runners on tiny racks: deterministic in virtual time."""

from __future__ import annotations

import pytest

from cluster.experiments import dpastore as D


def tiny(**kw):
    base = dict(keys=3000, client_nodes=1, client_threads=2, qd=4, window_us=(20, 60), traversers=4, stitchers=2)
    base.update(kw)
    return D.point(**base)


def test_a_get_point_measures_the_store_and_repeats_exactly():
    a, b = tiny(op="get"), tiny(op="get")
    assert a["ops"] > 30 and a["failed"] == 0
    assert a["mops"] == b["mops"] and a["p50"] == b["p50"]
    assert 3.0 <= a["inner_lines_per_node"] <= 5.0


def test_mixes_and_ranges_run_and_fail_nothing():
    r = tiny(op="get:0.5,insert:0.5")
    assert r["failed"] == 0 and r["ops"] > 20
    assert tiny(op="range")["failed"] == 0


def test_parse_mix_and_queue_depths():
    assert D.parse_mix("get") == {"get": 1.0}
    assert D.parse_mix("range:0.95,insert:0.05") == {"range": 0.95, "insert": 0.05}
    assert D.default_qd({"get": 1.0}) == 32 and D.default_qd({"insert": 1.0}) == 18
    with pytest.raises(ValueError, match="sum to 1"):
        D.parse_mix("get:0.5,insert:0.4")
    with pytest.raises(ValueError, match="kinds are"):
        D.parse_mix("scan")


def test_caches_scale_with_the_data():
    o = D.cache_overrides(D.PAPER_KEYS // 100)
    assert o["dpa.l2_bytes"] % 64 == 0 and 15_000 <= o["dpa.l2_bytes"] <= 16_000


def test_table1_and_bulkload_rows(monkeypatch):
    monkeypatch.setitem(D.TABLE_KEYS, True, 20_000)
    rows = D.table1(True, lambda m: None) + D.bulkload(True, lambda m: None)
    by = {(r.series, r.x): r for r in rows}
    assert by["sparse", "index overhead"].emulated > 0
    assert by["face", "DPA memory (50 M pairs)"].emulated > by["sparse", "DPA memory (50 M pairs)"].emulated
    assert by["bytes copied to DPA memory (50 M sparse)", "COPY stitches"].published == 192


def test_the_b3220_card_runs_the_same_points_and_receives_pings_faster():
    """Fig. 14's second card: the same tiny GET point runs on bf3-b3220 (its rack's profile, not
    the system's default bf3), and 64 DPA threads' pings, bound by the NIC's receive path on bf3,
    are served faster there (the B3220's packet matching, shm/profiles/bf3-b3220.toml)."""
    from cluster.experiments.devices import udp_ping
    b3220 = tiny(op="get", profile=D.B3220)
    assert b3220["ops"] > 30 and b3220["failed"] == 0
    slow, fast = (udp_ping(64, window=20_000, profile=p)["mops"] for p in ("bf3", D.B3220))
    assert fast > 1.3 * slow
    assert "fig14" in D.EXPERIMENTS and "fig14" in D.SIDE_BY_SIDE


def test_the_retrain_part_shows_shorter_chains_with_retraining():
    rows = {(r.series, r.x, r.metric): r.emulated for r in D.retrain(True, lambda _m: None)}
    on, off = (f"ROLEX, retrain_synonyms = {D.RETRAIN_BUDGETS[0]}", "ROLEX, retrain_synonyms = 0 (never)")
    assert rows[(on, "end", "retrains")] >= 1 and rows[(off, "end", "retrains")] == 0
    assert rows[("chain mean at the end: retraining / never", "ratio", "x")] < 1
