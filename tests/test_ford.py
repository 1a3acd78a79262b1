"""FORD+ (nodes/systems/ford) on a co-located rack: one compute node, two memory nodes.

Single transactions (verbs and rounds per phase, as docs/dtx.md's table says), the layout on the
replicas, aborts (a held lock, a failed validation, a user abort) leave nothing behind, the
SmallBank stress checked serializable with its total conserved, FORD's code-level hazard 1 and
the two faulty variants caught, a coordinator stopped at each failpoint and recovered from the
undo logs, the coordinator's CPU per attempt (measured on the artifact's code), and bad options."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest

from cluster.correctness.txn_suite import TxnRig, smallbank_stress
from nodes.systems.ford import FordSystem, bucket_bytes, item_bytes
from nodes.systems.ford.layout import LOCK_OFF, LOCKED
from shm.coro import VerbBatch
from workloads.smallbank import (
    SmallBank, amalgamate, balance, deposit_checking, send_payment, transact_saving, write_check,
)

WL = SmallBank(accounts=100, hot_accounts=10)


@pytest.fixture
def rig(prefix):
    with TxnRig(FordSystem, WL, prefix=prefix) as r:
        yield r


@contextlib.contextmanager
def _verbs():
    """(verb, bytes) of every verb queued, and the sync rounds."""
    log = []
    read, write, cas, sync = VerbBatch.read, VerbBatch.write, VerbBatch.cas, VerbBatch.sync
    with mock.patch.object(VerbBatch, "read", lambda co, a, n: log.append(("READ", n)) or read(co, a, n)), \
            mock.patch.object(VerbBatch, "write",
                              lambda co, a, d: log.append(("WRITE", 8 if isinstance(d, int) else len(d)))
                              or write(co, a, d)), \
            mock.patch.object(VerbBatch, "cas", lambda co, *a: log.append(("CAS", 8)) or cas(co, *a)), \
            mock.patch.object(VerbBatch, "sync", lambda co: log.append(("sync", 0)) or sync(co)):
        yield log


def _count(log):
    ops = [v for v in log if v[0] != "sync"]
    return {k: sum(1 for v in ops if v[0] == k) for k in ("READ", "WRITE", "CAS")}, sum(v[0] == "sync" for v in log)


def test_layout_sizes_and_placement(rig):
    assert item_bytes(8) == 64                          # SMART CONFIG_ITEM_SIZE for SmallBank
    assert bucket_bytes(8) == 1472                      # 22 x 64 + 8, padded to lines
    t = rig.layout["tables"]
    # savings = table 1 on memory node mn1 (fabric 2), checking = 2 on mn0 (fabric 1): SMART manager.h
    assert [n for n, _ in t["savings"]["replicas"]] == [2, 1]
    assert [n for n, _ in t["checking"]["replicas"]] == [1, 2]
    recs = rig.records("savings")
    assert len(recs) == 100
    for key, reps in recs.items():
        assert len(reps) == 2 and reps[0][:4] == reps[1][:4] == (0, 0, WL.rows("savings").__next__()[1], True)
        assert reps[0][4] != reps[1][4] or t["savings"]["replicas"][0][1] == t["savings"]["replicas"][1][1]


def test_transactions_and_their_verbs_per_phase(rig):
    # cold cache: a read-write record is found by a bucket READ and locked at validation
    with _verbs() as log:
        out = rig.run(deposit_checking, 5)
    assert out.committed and out.result == 130
    counts, rounds = _count(log)
    # E: READ bucket | V: CAS + READ version, undo-log WRITE x2 nodes | C1: 2 WRITEs x 2 replicas + flush READ
    # | release: WRITE lock x 2 replicas
    assert (counts, rounds) == ({"READ": 3, "WRITE": 2 + 4 + 2, "CAS": 1}, 3)
    # warm cache: hitchhiked CAS + READ; validation skipped (all locked in E, no read-only set)
    with _verbs() as log:
        assert rig.run(deposit_checking, 5).committed
    counts, rounds = _count(log)
    assert (counts, rounds) == ({"READ": 2, "WRITE": 2 + 4 + 2, "CAS": 1}, 3)
    assert ("READ", 64) in log and ("READ", 1) in log and ("WRITE", 16 + 64 * 1) in log   # undo log: header + image
    # read-only, 2 records, warm: READ each | READ version+lock (16 B) each
    rig.run(balance, 5)
    with _verbs() as log:
        assert rig.run(balance, 5).committed
    assert _count(log) == ({"READ": 4, "WRITE": 0, "CAS": 0}, 2)
    assert ("READ", 16) in log
    st = rig.client.statistics()
    assert st.commits == 4 and st.aborts == 0 and st.cache_hits >= 3


def test_values_move_as_smallbank_says(rig):
    init = WL.initial_balance_cents
    assert rig.run(transact_saving, 1).result == 2020
    assert rig.run(send_payment, 1, 2).committed
    assert rig.run(write_check, 2).result == -500
    assert rig.run(amalgamate, 1, 3).committed
    f = rig.final_state()
    val = lambda t, k: int.from_bytes(f[(t, k)][1], "little", signed=True)     # noqa: E731
    assert val("savings", 1) == 0 and val("checking", 1) == 0
    assert val("checking", 3) == init + (init + 2020) + (init - 500)
    assert val("checking", 2) == init + 500 - 500
    assert f[("checking", 1)][0] == 2                   # two commits: version 0 -> 2


def test_a_held_lock_aborts_and_an_abort_leaves_nothing(rig):
    rig.run(deposit_checking, 7)                        # warm the cache
    addr = rig.client.cache[(2, 7)]
    # someone else holds checking[7]'s lock
    mem = rig.fab.memory[1].host64
    from shm.fabric import gaddr_offset
    word = (gaddr_offset(addr) + LOCK_OFF) // 8
    mem[word] = LOCKED
    before = rig.final_state()
    out = rig.run(send_payment, 8, 7)
    assert not out.committed and out.reason == "lock"
    assert rig.final_state() == before
    assert int(mem[word]) == LOCKED                     # 'taken': the other's lock stays
    # checking[8] was locked by this attempt and released
    assert all(reps[0][1] == 0 for k, reps in rig.records("checking").items() if k != 7)
    mem[word] = 0
    assert rig.client.statistics().abort_lock == 1


def test_user_abort_releases_its_locks(rig):
    # drain checking[4] with an Amalgamate into 9, then SendPayment from 4 has no funds
    assert rig.run(amalgamate, 4, 9).committed
    out = rig.run(send_payment, 4, 9)
    assert (out.committed, out.reason) == (False, "user")
    assert rig.quiescent_problems() == []
    assert rig.history()[-1].status == "aborted" and rig.history()[-1].writes == ()


def test_validation_fails_when_a_read_record_changes(rig):
    """Balance reads two records; a DepositChecking commits between its execution and validation."""
    rig.run(balance, 6)
    cl, co = rig.client, rig.co
    other = rig.node.thread()
    from nodes.systems.ford import FordSystem as F
    c2 = F.client(rig.fab, rig.layout, other, rig.options)
    c2.set_codecs(WL.codecs())
    co2 = other.coroutine()

    def slow_balance(tx, a):
        tx.read("savings", a)
        tx.read("checking", a)
        yield from tx.execute()
        yield 20_000                                    # the deposit commits meanwhile
        return 0

    p1 = rig.env.process(cl.run(co, slow_balance, 6))
    p2 = rig.env.process(c2.run(co2, deposit_checking, 6))
    rig.env.run()
    assert p2.value.committed
    assert (p1.value.committed, p1.value.reason) == (False, "validation")


def test_smallbank_stress_is_serializable_and_conserves(prefix):
    rep = smallbank_stress(FordSystem, {}, prefix=prefix)
    assert rep.ok, rep.message
    assert rep.commits > 200 and rep.aborts > 0          # the hot accounts conflict
    rep = smallbank_stress(FordSystem, {"addr_cache": False}, prefix=prefix, seed=2)
    assert rep.ok, rep.message


@pytest.mark.parametrize("opts, catch", [
    ({"fault": "commit-without-validation"}, "lost update"),
    ({"abort_unlocks": "attempted"}, "lost update"),      # FORD's code (hazard 1): frees another's lock
    ({"fault": "unlock-before-backups"}, "primary unlocked"),
])
def test_faulty_variants_are_caught(prefix, opts, catch):
    rep = smallbank_stress(FordSystem, opts, prefix=prefix)
    assert not rep.ok
    assert catch in rep.message


@pytest.mark.parametrize("point", ["ford.executed", "ford.validated", "ford.primaries_written", "ford.committed"])
def test_a_coordinator_stopped_at_each_failpoint_is_recovered(prefix, point):
    rep = smallbank_stress(FordSystem, {"invisible_rereads": 20}, prefix=prefix, crash=(point, 30))
    assert rep.ok, rep.message
    assert "recovery" in rep.message


def test_unlock_before_backups_with_a_crash_loses_money(prefix):
    rep = smallbank_stress(FordSystem, {"invisible_rereads": 20, "fault": "unlock-before-backups"}, prefix=prefix,
                           crash=("ford.primaries_written", 30))
    assert not rep.ok


@contextlib.contextmanager
def _cpu_charges(rig):
    """The CPU (ns) the coordinator's thread is charged, one entry per charge."""
    from shm.coro import RdmaThread
    charges = []
    cpu = RdmaThread.cpu
    with mock.patch.object(RdmaThread, "cpu", lambda thr, ns: charges.append(ns) or cpu(thr, ns)):
        yield charges


def test_an_attempt_costs_the_cpu_the_artifact_code_measured(prefix):
    """A SmallBank transaction charges its coordinator, once per attempt, the CPU its code took in
    SMART's artifact (code_costs.py: cycles at the profile's clock), ``txn_cpu_ns`` on top; an
    attempt aborted in execution pays it too. A transaction the table does not hold, or
    ``code_cpu = "formula"``, is priced by the [software] formula."""
    from nodes.systems.ford.code_costs import CODE_CYCLES, code_ns
    with TxnRig(FordSystem, WL, {"txn_cpu_ns": 7}, prefix=prefix) as rig:
        ghz = rig.fab.profile.cpu.ghz
        assert rig.run(deposit_checking, 5).committed             # warms the address cache
        with _cpu_charges(rig) as charges:
            assert rig.run(deposit_checking, 5).committed
        assert charges == [round(CODE_CYCLES["DepositChecking"] / ghz) + 7] == [code_ns("DepositChecking", ghz) + 7]
        with _cpu_charges(rig) as charges:
            assert rig.run(send_payment, 1, 2).committed
        assert charges == [code_ns("SendPayment", ghz) + 7]

        def mine(tx, a):                                           # not a SmallBank transaction
            chk = tx.read_for_update("checking", a)
            yield from tx.execute()
            tx.write(chk, chk.value + 1)
        with _cpu_charges(rig) as charges:
            assert rig.run(mine, 5, name="Mine").committed
        assert len(charges) == 1 and 7 < charges[0] < code_ns("DepositChecking", ghz)

        # an attempt that finds its lock held aborts in execution and still pays, once
        assert rig.run(deposit_checking, 7).committed                # warm
        from shm.fabric import gaddr_offset
        mem, word = rig.fab.memory[1].host64, (gaddr_offset(rig.client.cache[(2, 7)]) + LOCK_OFF) // 8
        mem[word] = LOCKED
        with _cpu_charges(rig) as charges:
            out = rig.run(deposit_checking, 7)
        mem[word] = 0
        assert (out.committed, out.reason) == (False, "lock")
        assert charges == [code_ns("DepositChecking", ghz) + 7]
    with TxnRig(FordSystem, WL, {"code_cpu": "formula"}, prefix=prefix) as rig:
        assert rig.run(deposit_checking, 5).committed
        with _cpu_charges(rig) as charges:
            assert rig.run(deposit_checking, 5).committed
        assert len(charges) == 1 and charges[0] < code_ns("DepositChecking", rig.fab.profile.cpu.ghz)


def test_every_smallbank_and_tatp_transaction_has_its_measured_cost():
    """A workload's transaction that the table missed would fall back to the formula silently: the
    names the workloads draw and their bodies' names are all in it."""
    from nodes.systems.ford.code_costs import CODE_CYCLES, MEASURED_GHZ, MEASURED_NS, code_ns
    from workloads import smallbank, tatp
    for wl in (smallbank, tatp):
        for name in wl.TYPES:
            assert name in CODE_CYCLES and wl.BODIES[name].__name__ in CODE_CYCLES
            assert CODE_CYCLES[name] == CODE_CYCLES[wl.BODIES[name].__name__]
    assert set(MEASURED_NS) == {"smallbank", "tatp"}
    assert code_ns("Balance", MEASURED_GHZ) == MEASURED_NS["smallbank"]["Balance"]   # ns back on the host's clock
    assert code_ns("Balance", 2 * MEASURED_GHZ) == round(MEASURED_NS["smallbank"]["Balance"] / 2)
    assert code_ns("NotATransaction", 2.4) is None


def test_bad_options_are_one_line(prefix):
    for opts, word in [({"replicas": 0}, "minimum"), ({"abort_unlocks": "some"}, "not one of"),
                       ({"code_cpu": "guess"}, "not one of"),
                       ({"flush": 1}, "must be a str"), ({"nope": 1}, "unknown option")]:
        with pytest.raises(ValueError) as e:
            FordSystem.check_options(opts, "system 'ford'")
        assert word in str(e.value) and "\n" not in str(e.value)
    from shm.messages import SystemGaveUp
    with pytest.raises(SystemGaveUp, match="replicas = 3 needs"):
        TxnRig(FordSystem, WL, {"replicas": 3}, prefix=prefix)
