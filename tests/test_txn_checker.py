"""The serializability checker (cluster/correctness/serializability.py) on hand-made histories:
a serializable one, a lost update (both as a duplicate install and as a ww/rw cycle), write skew,
a dirty read, a crashed coordinator's possible write, and final states that leak an aborted write."""

from __future__ import annotations

from cluster.correctness.serializability import check_history, find_cycle, Edge
from nodes.systems.txn import TxnRecord

X, Y = ("acct", 1), ("acct", 2)


def T(i, reads=(), writes=(), status="committed", name="t"):
    return TxnRecord(i, 0, name, 0, 0, status, "", tuple(reads), tuple(writes))


def r(rec, v):
    return (rec[0], rec[1], v)


def w(rec, v, value=b"\0"):
    return (rec[0], rec[1], v, value)


def test_a_serial_chain_is_serializable():
    h = [T(1, [r(X, 0)], [w(X, 1, b"a")]),
         T(2, [r(X, 1), r(Y, 0)], [w(Y, 1, b"b")]),
         T(3, [r(X, 1), r(Y, 1)]),                       # read-only, sees both
         T(4, [r(X, 0)], status="aborted")]              # aborted: ignored
    rep = check_history(h, final={X: (1, b"a"), Y: (1, b"b")})
    assert rep.ok, rep.message
    assert rep.committed == 3 and rep.edges >= 3
    assert "serializable" in rep.message


def test_lost_update_as_duplicate_install_names_both():
    h = [T(1, [r(X, 0)], [w(X, 1)], name="deposit"), T(2, [r(X, 0)], [w(X, 1)], name="deposit")]
    rep = check_history(h)
    assert not rep.ok
    assert "lost update" in rep.message and "T0x1(deposit)" in rep.message and "T0x2(deposit)" in rep.message


def test_lost_update_with_distinct_versions_is_a_cycle():
    # T2 read x0 but installed x2 after T1's x1: T2 -rw-> T1 (x1 follows what T2 read), T1 -ww-> T2
    h = [T(1, [r(X, 0)], [w(X, 1)]), T(2, [r(X, 0)], [w(X, 2)])]
    rep = check_history(h)
    assert not rep.ok and rep.cycle
    kinds = sorted(e.kind for e in rep.cycle)
    assert kinds == ["rw", "ww"]
    assert {e.src for e in rep.cycle} == {1, 2}


def test_write_skew_is_a_two_rw_cycle():
    h = [T(1, [r(X, 0), r(Y, 0)], [w(Y, 1)]), T(2, [r(X, 0), r(Y, 0)], [w(X, 1)])]
    rep = check_history(h)
    assert not rep.ok
    assert [e.kind for e in rep.cycle] == ["rw", "rw"]
    assert "cycle" in rep.message and "-rw acct[" in rep.message


def test_read_only_anomaly_three_cycle():
    # T1 writes x then y... classic: T3 sees T2's y but not T1's x, though T1 -> T2
    h = [T(1, [r(X, 0)], [w(X, 1)]),
         T(2, [r(X, 1), r(Y, 0)], [w(Y, 1)]),
         T(3, [r(X, 0), r(Y, 1)])]
    rep = check_history(h)
    assert not rep.ok and len(rep.cycle) == 3


def test_dirty_read_and_crashed_coordinators_possible_write():
    dirty = [T(1, [r(X, 0)], [w(X, 1)], status="aborted"), T(2, [r(X, 1)])]
    rep = check_history(dirty)
    assert not rep.ok and "dirty read" in rep.message
    crashed = [T(1, [r(X, 0)], [w(X, 1)], status="unknown"), T(2, [r(X, 1)])]
    assert check_history(crashed).ok


def test_final_state_catches_a_leaked_or_wrong_write():
    h = [T(1, [r(X, 0)], [w(X, 1, b"a")])]
    assert check_history(h, final={X: (1, b"a")}).ok
    rep = check_history(h, final={X: (2, b"z")})
    assert not rep.ok and "no committed transaction installed" in rep.message
    rep = check_history(h, final={X: (1, b"z")})
    assert not rep.ok and "not what" in rep.message
    rep = check_history(h, final={X: (0, b"")})
    assert not rep.ok and "version 1 was committed" in rep.message


def test_find_cycle_on_an_acyclic_diamond_and_a_long_cycle():
    e = lambda a, b: Edge(a, b, "ww", X, 0)           # noqa: E731
    assert find_cycle([e(1, 2), e(1, 3), e(2, 4), e(3, 4)]) == []
    cyc = find_cycle([e(0, 1), e(1, 2), e(2, 3), e(3, 4), e(4, 1)])
    assert [x.src for x in cyc] == [1, 2, 3, 4]
