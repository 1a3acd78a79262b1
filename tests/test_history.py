"""nodes/history.py: scan records (a scan record plus its scan-item continuation records), read
back into results; a co-located run recording a stress with scans."""

from __future__ import annotations

import pytest

from nodes import history as h
from nodes.history import GARBAGE, NONE, HistoryLog, scan_results


@pytest.fixture
def log(prefix):
    lg = HistoryLog.create(2, prefix=prefix, capacity=8)
    yield lg
    lg.close()


def test_existing_kinds_keep_their_codes_and_fields(log):
    assert h.KINDS[:6] == ("get", "insert", "update", "put", "delete", "scan") and h.KINDS[6] == "scan-item"
    w = log.writer(0)
    s = w.invoke(3, "get", (1 << 64) - 5, None, 100)
    w.complete(s, True, 150, 7)
    r = log.records(0)[0].tolist()
    assert r[h.R_CLIENT] == 3 and r[h.R_KIND] == 0 and r[h.R_KEY] == -5 and r[h.R_VALUE] == 7
    assert (r[h.R_OK], r[h.R_CALL], r[h.R_RET], r[h.R_SEQ]) == (1, 100, 150, 0)


def test_scan_round_trip_with_interleaved_records(log):
    w = log.writer(1)
    scan = w.invoke(9, "scan", 5, 4, 10)                    # a scan in flight ...
    get = w.invoke(8, "get", 6, None, 12)                   # ... while another coroutine records
    empty = w.invoke(7, "scan", 1 << 63, 2, 13)
    assert w.complete_scan(empty, 20, []) is True
    assert w.complete_scan(scan, 30, [(5, 1), ((1 << 64) - 1, GARBAGE), (2, 3)]) is True
    w.complete(get, True, 31, None)
    rows = log.records(1)
    assert len(rows) == 6 and not log.overflowed(1)
    assert [int(r[h.R_KIND]) for r in rows] == [5, 0, 5, 6, 6, 6]
    res = scan_results(rows)
    assert res == {scan: ((5, 1), (-1, GARBAGE), (2, 3)), empty: ()}
    r = rows[scan].tolist()
    assert (r[h.R_KEY], r[h.R_VALUE], r[h.R_OK], r[h.R_RET]) == (5, 4, 1, 30)
    assert rows[empty].tolist()[h.R_KEY] == -(1 << 63)
    # an item names its scan, its position and the result's length
    it = rows[4].tolist()
    assert (it[h.R_CLIENT], it[h.R_CALL], it[h.R_OK], it[h.R_RET], it[h.R_SEQ]) == (9, scan, 1, 3, 4)


def test_an_unreturned_scan_has_no_result(log):
    w = log.writer(0)
    s = w.invoke(1, "scan", 0, 3, 5)
    assert scan_results(log.records(0)) == {}
    assert log.records(0)[s].tolist()[h.R_RET] == NONE


def test_a_scan_that_overflows_the_region(log):
    """Items that fit are written, the overflow flag is set, the scan stays unreturned: a
    well-defined state that the merge refuses (overflow) and a reader treats as no result."""
    w = log.writer(0)
    for i in range(5):
        w.complete(w.invoke(1, "put", i, i + 1, i), True, i + 1)
    s = w.invoke(2, "scan", 0, 4, 10)                       # slot 5; 2 slots left for 4 items
    assert w.complete_scan(s, 20, [(0, 1), (1, 2), (2, 3), (3, 4)]) is False
    assert log.overflowed(0) and log.statistics().records[0] == 8
    rows = log.records(0)
    assert rows[s].tolist()[h.R_RET] == NONE and [int(r[h.R_KIND]) for r in rows[6:]] == [6, 6]
    assert scan_results(rows) == {}
    assert w.invoke(1, "get", 0, None, 30) == -1              # nothing more is recorded


def test_a_returned_scan_missing_items_is_refused(log):
    w = log.writer(0)
    s = w.invoke(2, "scan", 0, 4, 10)
    w.complete_scan(s, 20, [(0, 1), (1, 2)])
    rows = log.records(0)
    with pytest.raises(ValueError, match="not its complete result"):
        scan_results(rows[:2])                           # the second item lost


def test_a_colocated_stress_with_scans_records_them():
    """Sherman under a stress mix with scans: scans are recorded with the pairs returned, keys in
    byte order, versions of writes the history holds; the whole history checks linearizable."""
    from cluster.correctness.checker import check, key_order
    from cluster.correctness.conformance import stress_rack
    from nodes.systems import get_system
    from workloads.stress import StressWorkload
    wl = StressWorkload(32, mix={"get": 2, "insert": 1, "update": 1, "delete": 1, "scan": 1}, value_size=32,
                        max_scan=6)
    rack = stress_rack(get_system("sherman"), wl, compute=1, threads=1, coroutines=4, duration_ms=0.2)
    rack.run()
    ops = rack.history_ops
    scans = [op for op in ops if op.kind == "scan" and op.ret is not None]
    assert len(scans) >= 5 and any(len(s.result) > 1 for s in scans)
    keys = set(wl.key_ids().tolist())
    for s in scans:
        assert s.key in keys and 1 <= s.value <= 6 and len(s.result) <= s.value
        assert all(k in keys and v != GARBAGE for k, v in s.result)
        order = [key_order(k) for k, _ in s.result]
        assert order == sorted(order) and all(o >= key_order(s.key) for o in order)
    result = check(ops, time_limit_s=20.0)
    assert result.verdict == "ok" and result.statistics().scans == sum(op.kind == "scan" for op in ops), \
        result.explain()
