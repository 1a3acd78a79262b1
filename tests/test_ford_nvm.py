"""FORD+ on persistent memory: SMART's setup (cx6-200g, 2 memory blades of Optane PMem, docs/nvm.md)
holding the tables and undo logs, and what a power failure of a memory node keeps.

FORD's selective remote flush (RFLUSH 2: one 1-byte READ after the last read-write record's backup
WRITE, on that backup's QP) makes durable every earlier WRITE of the coordinator's QP to that node,
nothing on the other node: the primaries of the last record's table and, in an Amalgamate, the
savings backup stay volatile until a later verb of the same QP drains them (the brief's §1.5). These
tests say exactly which copies survive, that the recovery (the highest surviving version of each
record, written to every replica, unlocked) leaves SmallBank whole, and that without the flush a
committed transaction is lost."""

from __future__ import annotations

import pytest

from cluster.correctness.txn_suite import TxnRig, smallbank_stress
from nodes.systems.ford import INVISIBLE, LOCKED, FordSystem
from nodes.systems.ford.layout import owner_of
from shm.nvm import power_fail
from workloads.smallbank import SmallBank, amalgamate, deposit_checking

WL = SmallBank(accounts=100, hot_accounts=10)


def _cents(b):
    return int.from_bytes(b, "little", signed=True)


@pytest.fixture
def rig(prefix):
    with TxnRig(FordSystem, WL, memory_kind="nvm", prefix=prefix) as r:
        assert sorted(r.fab.nvm) == [1, 2]               # both memory nodes are PMem
        yield r


def test_deposit_survives_on_the_flushed_backup_only(rig):
    rig.run(deposit_checking, 5)                          # warm the address cache
    assert rig.run(deposit_checking, 5).committed         # the last transaction: nothing flushes after it
    (pv, pl, pval, _, _), (bv, bl, bval, _, _) = rig.records("checking")[5]
    assert (pv, pl, bv, bl) == (2, 0, 2, 0)
    # checking's primary is on mn0, its backup on mn1 (SMART's placement: table 2 -> blade 0)
    assert power_fail(rig.fab, "mn0") > 0 and power_fail(rig.fab, "mn1") > 0
    (pv, pl, pval, _, _), (bv, bl, bval, _, _) = rig.records("checking")[5]
    # the primary's commit WRITEs were never flushed: back to version 1, but locked (the hitchhiked
    # CAS is an atomic and the READ in its doorbell flushed its write-back)
    assert (pv, pl, _cents(pval)) == (1, LOCKED, WL.initial_balance_cents + 130)
    # the backup keeps the committed record with C1's INVISIBLE lock word (the release is not
    # flushed), which names the committing transaction (layout.owner_of), not LOCKED
    assert (bv, _cents(bval)) == (2, WL.initial_balance_cents + 260)
    assert bl & INVISIBLE and not bl & LOCKED and owner_of(bl) == rig.history()[-1].txn_id
    got = FordSystem.recover_power_failure(rig.fab, rig.layout)
    assert got == {"repaired": 1, "unlocked": 0}
    assert rig.quiescent_problems() == []
    assert _cents(rig.final_state()[("checking", 5)][1]) == WL.initial_balance_cents + 260


def test_amalgamate_leaves_its_savings_backup_unflushed(rig):
    rig.run(amalgamate, 2, 4)                             # warm: the addresses of three other records
    assert rig.run(amalgamate, 1, 3).committed
    for node in ("mn0", "mn1"):
        power_fail(rig.fab, node)
    sav, chk1, chk3 = rig.records("savings")[1], rig.records("checking")[1], rig.records("checking")[3]
    # the flush READ went to mn1 (checking[3]'s backup), so mn1 keeps savings[1]'s primary and both
    # checking backups at version 1; mn0 lost the checking primaries and savings[1]'s backup
    assert [r[0] for r in sav] == [1, 0]                  # replicas: primary (mn1), backup (mn0)
    assert [r[0] for r in chk1] == [0, 1] and [r[0] for r in chk3] == [0, 1]   # primary (mn0), backup (mn1)
    FordSystem.recover_power_failure(rig.fab, rig.layout)
    f = rig.final_state()
    assert _cents(f[("savings", 1)][1]) == 0 and _cents(f[("checking", 1)][1]) == 0
    assert _cents(f[("checking", 3)][1]) == 3 * WL.initial_balance_cents
    assert rig.quiescent_problems() == []


@pytest.mark.parametrize("nodes", [(0,), (1,), (0, 1)])
def test_smallbank_on_nvm_survives_a_power_failure(prefix, nodes):
    rep = smallbank_stress(FordSystem, {}, memory_kind="nvm", power_fail=nodes, prefix=prefix, attempts=40)
    assert rep.ok, rep.message
    assert "lines lost" in rep.message


def test_without_the_flush_a_committed_transaction_is_lost(prefix):
    rep = smallbank_stress(FordSystem, {"flush": "none"}, memory_kind="nvm", power_fail=(0, 1), prefix=prefix,
                           attempts=40)
    assert not rep.ok
    assert "was committed" in rep.message
