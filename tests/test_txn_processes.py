"""Transactions on a rack of processes: the shared transaction history (nodes/txn_history.py), FORD's
recovery deciding a transaction by its owner's undo-log entry (rolled forward when whole, back
otherwise), and SmallBank on two compute-node processes with one of them killed mid-commit, its
merged history checked (cluster/correctness/txn_suite.py:smallbank_processes)."""

from __future__ import annotations

import pytest

from cluster.correctness.txn_suite import TxnRig, smallbank_processes
from nodes.systems.ford import FordSystem
from nodes.systems.ford.layout import LOG_HEADER
from nodes.txn_history import TxnHistoryLog, TxnRecord, digest
from shm import failpoints
from tests.test_rack import live_children
from workloads.smallbank import DEPOSIT_CENTS, SmallBank, deposit_checking

WL = SmallBank(accounts=40, hot_accounts=8)


def test_history_rows_round_trip_and_an_intent_left_open_reads_unknown(prefix):
    log = TxnHistoryLog.create(2, prefix=prefix, tables=("savings", "checking"), names=("Balance", "SendPayment"),
                               capacity=4)
    try:
        w = log.writer(1)
        w.append(TxnRecord(7, 3, "Balance", 10, 20, "aborted", "lock", (("savings", 1, 4),), ()))
        sent = TxnRecord(8, 3, "SendPayment", 30, 30, "unknown", "crash", (("checking", 1, 2), ("checking", 2, 5)),
                         (("checking", 1, 3, b"\x01" * 8), ("checking", 2, 6, b"\x02" * 8)), -500)
        w.intend(sent)
        w.append(sent._replace(status="committed", reason="", end_ns=45))
        w.intend(TxnRecord(9, 3, "Other", 50, 50, "unknown", "crash", (), (("savings", 2, 1, b"x"),), 130))
        rows = log.records(1)
        assert log.records(0) == [] and not log.overflowed(1)
        assert [(r.txn_id, r.status, r.reason) for r in rows] == [(7, "aborted", "lock"), (8, "committed", ""),
                                                                  (9, "unknown", "crash")]
        assert rows[0].reads == (("savings", 1, 4),) and rows[0].result is None
        assert rows[1].writes == (("checking", 1, 3, digest(b"\x01" * 8)), ("checking", 2, 6, digest(b"\x02" * 8)))
        assert (rows[1].name, rows[1].end_ns, rows[1].result) == ("SendPayment", 45, -500)
        assert (rows[2].name, rows[2].result) == ("txn", 130)          # a name outside the log's: "txn"
        # an attempt with more records than a row holds cannot be recorded whole: the region says so
        w.append(TxnRecord(10, 3, "Balance", 60, 70, "committed", "", tuple(("savings", k, 0) for k in range(9)), ()))
        assert log.overflowed(1)
    finally:
        log.close()


def _crash_deposit(rig, point: str, key: int = 3):
    """One DepositChecking on ``key`` whose coordinator stops at ``point``; what it posted lands."""
    failpoints.arm(point, "crash", after=0)
    try:
        assert rig.each(lambda client, co, i: client.run(co, deposit_checking, key)) == [None]
    finally:
        failpoints.arm(point, "off")


def test_a_commit_whole_on_every_replica_is_rolled_forward(prefix):
    """Stopped after every commit WRITE was acked (its releases never sent): the coordinator may
    have reported the commit, so recovery keeps it."""
    with TxnRig(FordSystem, WL, prefix=prefix) as rig:
        rig.run(deposit_checking, 3)                     # version 1, through the address cache next
        _crash_deposit(rig, "ford.committed")
        assert FordSystem.recover(rig.fab, rig.layout) == {"rolled_forward": 1, "rolled_back": 0, "unlocked": 0}
        reps = rig.records("checking")[3]
        assert [(v, lock) for v, lock, *_ in reps] == [(2, 0), (2, 0)]
        assert int.from_bytes(reps[0][2], "little", signed=True) == WL.initial_balance_cents + 2 * DEPOSIT_CENTS
        assert rig.quiescent_problems() == []


def test_a_commit_cut_before_its_backups_is_rolled_back(prefix):
    with TxnRig(FordSystem, WL, prefix=prefix) as rig:
        rig.run(deposit_checking, 3)
        _crash_deposit(rig, "ford.primaries_written")
        assert FordSystem.recover(rig.fab, rig.layout) == {"rolled_forward": 0, "rolled_back": 1, "unlocked": 0}
        assert [(v, lock) for v, lock, *_ in rig.records("checking")[3]] == [(1, 0), (1, 0)]
        assert rig.quiescent_problems() == []


def test_an_earlier_attempt_with_the_same_before_image_does_not_mislead_recovery(prefix):
    """An attempt that logged the same before-image and then failed validation leaves an undo-log
    entry that names other records too; recovery follows the lock word's owner, not the newest
    image, so it neither rolls the real commit back nor touches the other record."""
    with TxnRig(FordSystem, WL, prefix=prefix) as rig:
        rig.run(deposit_checking, 3)
        rig.run(deposit_checking, 4)
        _crash_deposit(rig, "ford.committed")
        entries = FordSystem.log_entries(rig.fab, rig.layout)
        (_, [(table, image)]) = entries[-1]              # the stopped commit's before-image of checking[3]
        other = next(img for _, imgs in entries for t, img in imgs if int(img[2]) == 4)
        fake = LOG_HEADER.pack(0x77 << 40 | 1, 0x77, 2) + image.tobytes() + other.tobytes()
        node = rig.layout["memory_nodes"][0]
        off = rig.layout["logs"][node] + rig.layout["log_slice_bytes"]      # the next thread's slice
        rig.fab.memory[node].host[off:off + len(fake)] = memoryview(fake)
        assert len(FordSystem.log_entries(rig.fab, rig.layout)) == len(entries) + 1
        assert FordSystem.recover(rig.fab, rig.layout)["rolled_forward"] == 1
        assert [v for v, *_ in rig.records("checking")[3]] == [2, 2]
        assert [v for v, *_ in rig.records("checking")[4]] == [1, 1]


def test_smallbank_on_processes_with_a_coordinator_killed_mid_commit():
    """cn1's process exits when a coordinator reaches ford.committed for the 21st time; cn0 runs
    on; the owner recovers, and the merged history of both processes is serializable with the
    total kept."""
    rep = smallbank_processes("ford", {}, kill=("ford.committed", 20))
    assert rep.ok, rep.message
    assert "in flight at the kill" in rep.message and "recovery {" in rep.message
    assert rep.commits > 50
    assert not live_children()


def test_the_process_stress_catches_commit_without_validation():
    rep = smallbank_processes("ford", {"fault": "commit-without-validation"}, run_ms=0.3)
    assert not rep.ok
    assert "NOT serializable" in rep.message


def test_a_kill_that_never_fires_is_a_failure_not_a_pass():
    rep = smallbank_processes("ford", {}, kill=("ford.committed", 100_000), run_ms=0.1)
    assert not rep.ok and "the kill was not tested" in rep.message


@pytest.mark.parametrize("system", ["ford", "smart-dtx"])
def test_the_check_runs_the_kill_and_the_process_stress(system):
    from cluster.correctness.txn_check import run_txn_suite
    from nodes.systems import get_system
    cls = get_system(system)
    out = run_txn_suite(cls, cls.check_options({}, system), quick=True, only=["coordinator_kill", "stress"])
    assert [(o.name, o.passed) for o in out] == [("coordinator_kill", True), ("stress", True)], out
    assert all(o.txns_checked > 100 for o in out)
