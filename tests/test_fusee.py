"""FUSEE (nodes/systems/fusee): the verbs of every operation with 3 replicas and with 1; SNAPSHOT's
decision rule; a hot key updated by many coroutines (last writer wins, replicas equal); replicated
KV blocks; the address cache's bypass; the bulk load; failpoints at every phase boundary (a stalled
winner or inserter finished by another client from its log); bad options. Co-located, virtual time."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest

from cluster.correctness.checker import check
from cluster.correctness.conformance import rig
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from nodes.systems.api import SystemGaveUp
from nodes.systems.fusee import FuseeSystem
from nodes.systems.fusee.client import FAIL, WIN_ALL, WIN_MAJOR
from nodes.systems.fusee.layout import COMMITTED, OP_UPDATE, REPLICATING, decode_tail, tail_offset, word_node, \
    word_offset, word_units
from nodes.systems.race.layout import UNIT
from shm import failpoints
from shm.coro import VerbBatch
from shm.fabric import gaddr_node, gaddr_offset
from tests.test_rack import rack_dict, run
from workloads.keys import key_bytes


def _k(i):
    return key_bytes(i, 8)


def _v(i, ver=1, size=16):
    return (b"%d:%d:" % (i, ver)).ljust(size, b"x")


def _word(fabric, addr):
    return int(fabric.memory[gaddr_node(addr)].host64[gaddr_offset(addr) // 8])


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


class Verbs:
    """The verbs a coroutine queues and its rounds (``sync``), in order."""

    def __init__(self):
        self.log = []

    @contextlib.contextmanager
    def counting(self):
        orig = {n: getattr(VerbBatch, n) for n in ("read", "write", "cas", "faa", "sync")}

        def wrap(name):
            def f(co, *a):
                self.log.append(name)
                return orig[name](co, *a)
            return f
        with contextlib.ExitStack() as st:
            for n in orig:
                st.enter_context(mock.patch.object(VerbBatch, n, wrap(n)))
            yield self

    def rounds(self):
        """The verbs of each round, joined: ``["write*3 read*2", "cas", ...]``."""
        out, cur = [], []
        for v in self.log:
            if v == "sync":
                out.append(" ".join(f"{n}*{cur.count(n)}" if cur.count(n) > 1 else n
                                    for n in dict.fromkeys(cur)))
                cur = []
            else:
                cur.append(v)
        return out


def _slot_of(r, key):
    """(primary slot address, its backups) of a key, found through a client's lookup."""
    c = r.client.wrapped
    from nodes.systems.lib.hashing import hash64
    h = hash64(key)

    def find():
        got = yield from c._lookup(r.co, key, h)
        return got[0]
    slot = r.run(find())
    return slot, c._backups(h, slot)


# -- verbs ------------------------------------------------------------------------------------------

THREE = {
    # READ 2 c.b. + READ the cached block (hit): one round; FUSEE prefetches the buckets on a hit
    "get-hit": ["read*3"],
    # READ 2 c.b. | READ the block
    "get-miss": ["read*2", "read"],
    # WRITE block x3 + READ 2 c.b. + READ cached block | CAS 2 backups | log commit x3 | CAS primary
    "update-hit": ["write*3 read*3", "cas*2", "write*3", "cas"],
    # WRITE x3 + READ 2 c.b. | READ block | CAS 2 backups | log commit x3 | CAS primary
    "update": ["write*3 read*2", "read", "cas*2", "write*3", "cas"],
    # WRITE log block x3 + READ 2 c.b. | READ block | CAS backups -> tombstone | commit x3 |
    # CAS primary -> 0 + CAS backups tombstone -> 0
    "delete": ["write*3 read*2", "read", "cas*2", "write*3", "cas*3"],
    # RACE's insert (WRITE x3 + READ 2 c.b. | CAS 0 -> T | READ 2 c.b. | CAS T -> C|R), then the
    # backups 0 -> C, then the primary C|R -> C
    "insert": ["write*3 read*2", "cas", "read*2", "cas", "cas*2", "cas"],
}

ONE = {
    "get-hit": ["read*3"],
    "get-miss": ["read*2", "read"],
    "update-hit": ["write read*3", "cas"],
    "update": ["write read*2", "read", "cas"],
    "delete": ["write read*2", "read", "cas"],
    "insert": ["write read*2", "cas", "read*2", "cas"],
}


@pytest.mark.parametrize("memory_nodes, table", [(3, THREE), (1, ONE)])
def test_verbs_per_operation(memory_nodes, table):
    """The docs' table: a cache hit costs one round for a get and saves the block READ round of an
    update; SNAPSHOT adds the backup CASes and the log commit round to RACE's update."""
    with rig(FuseeSystem, memory_nodes=memory_nodes) as r:
        assert r.layout["replicas"] == min(3, memory_nodes)

        def verbs(op, *args):
            v = Verbs()
            with v.counting():
                r.op(op, *args)
            return v.rounds()
        assert verbs("insert", _k(5), _v(5)) == table["insert"]
        assert verbs("get", _k(5)) == table["get-hit"]          # the insert cached its slot
        assert verbs("update", _k(5), _v(5, 2)) == table["update-hit"]
        # its own update raised the key's miss count (FUSEE's update_cache): 1 of 3, above 0.1
        assert verbs("update", _k(5), _v(5, 3)) == table["update"]
        assert verbs("get", _k(5)) == table["get-miss"]
        assert verbs("delete", _k(5)) == table["delete"]
        assert verbs("get", _k(5)) == ["read*2"]
        st = r.client.statistics()
        assert st.cache_hits == 2 and st.cache_bypassed == 3 and st.win_all == 3


def test_snapshot_decision_follows_fuses_rule():
    with rig(FuseeSystem, memory_nodes=3) as r:
        d = r.client.wrapped._decide
        old, a, b, c = 0x10, 0x20, 0x30, 0x40
        assert d([old, old], old, a) == WIN_ALL
        assert d([a, a], old, a) == WIN_ALL                      # a recovery that CASed before
        assert d([b, b], old, a) == FAIL
        assert d([b, old], old, a) == -1                         # split: smallest (a) wins unless FINISH
        assert d([b, old], old, c) == -2                         # split, not the smallest
        assert d([old, old, b, old], old, a) == WIN_MAJOR
        assert d([b, b, b, old], old, a) == FAIL
        assert d([b, c, c, c], old, a) == FAIL                   # none of ours


# -- races ------------------------------------------------------------------------------------------

def test_a_hot_key_updated_by_many_coroutines_keeps_its_replicas_equal():
    """32 updates of one key at once: every one returns True (the losers are overwritten, last
    writer wins), one written value is left, and every backup slot holds the primary's word."""
    with rig(FuseeSystem, memory_nodes=3, compute_threads=2, coroutines=16) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        res = r.each(lambda c, co, i: c.update(co, _k(1), _v(1, 100 + i)))
        assert res == [True] * 32
        final = r.op("get", _k(1))
        assert final in {_v(1, 100 + i) for i in range(32)}
        slot, bks = _slot_of(r, _k(1))
        words = {_word(r.fabric, a) for a in [slot] + bks}
        assert len(words) == 1 and not next(iter(words)) & REPLICATING
        st = [c.statistics() for c in r.clients]
        won = sum(s.win_all + s.win_major + s.win_little for s in st)
        assert sum(s.overwritten for s in st) == 32 - won > 0
        assert sum(s.consensus_fail + s.consensus_finish for s in st) == 32 - won


def test_update_and_delete_of_one_key_at_once():
    """A delete that loses a round to an update looks again and deletes the new value; an update
    that loses to a delete is overwritten: either way the key ends absent and both return True."""
    with rig(FuseeSystem, memory_nodes=3, coroutines=2) as r:
        for rnd in range(6):
            assert r.op("insert", _k(2), _v(2, rnd)) is True
            u = r.env.process(r.client.update(r.cos[0][0], _k(2), _v(2, 50 + rnd)))
            d = r.env.process(r.client.delete(r.cos[0][1], _k(2)))
            r.env.run()
            assert u.value is True and d.value is True
            assert r.op("get", _k(2)) is None


def test_kv_blocks_are_written_to_replicas_on_distinct_memory_nodes():
    with rig(FuseeSystem, memory_nodes=3) as r:
        assert r.op("insert", _k(3), _v(3, size=100)) is True
        assert r.op("update", _k(3), _v(3, 2, size=100)) is True
        slot, _ = _slot_of(r, _k(3))
        w = _word(r.fabric, slot)
        c = r.client.wrapped
        copies = c.block_copies(word_node(w), word_offset(w))
        assert len({gaddr_node(a) for a in copies}) == 3
        n = word_units(w) * UNIT
        blocks = {bytes(r.fabric.memory[gaddr_node(a)].host[gaddr_offset(a):gaddr_offset(a) + n]) for a in copies}
        assert len(blocks) == 1                                  # identical, log tail included
        tail = decode_tail(next(iter(blocks))[tail_offset(word_units(w)):])
        assert tail[3] == OP_UPDATE and tail[4] == COMMITTED and tail[2] != 0   # old value committed


def test_the_cache_is_bypassed_for_a_key_other_clients_keep_rewriting():
    with rig(FuseeSystem, memory_nodes=2, compute_threads=2) as r:
        reader, writer = r.clients
        assert r.op("insert", _k(4), _v(4)) is True
        co_r, co_w = r.cos[0][0], r.cos[1][0]
        for i in range(4):
            assert r.run(reader.get(co_r, _k(4))) == _v(4, i + 1 if i else 1)
            r.run(writer.update(co_w, _k(4), _v(4, i + 2)))
        st = reader.statistics()
        assert st.cache_bypassed >= 1 and st.cache_hits >= 1
        assert r.client.statistics().cache_entries == 1


# -- bulk load --------------------------------------------------------------------------------------

def test_bulk_load_fills_every_index_replica_and_answers_as_inserts():
    pairs = [(_k(i), _v(i)) for i in range(300)]
    with rig(FuseeSystem, memory_nodes=3) as r:
        FuseeSystem.bulk_load(r.fabric, r.layout, iter(pairs))
        for k, v in pairs[::7]:
            assert r.op("get", k) == v
        assert r.op("insert", _k(1), b"x") is False
        assert r.op("update", _k(2), _v(2, 9)) is True
        assert r.op("get", _k(2)) == _v(2, 9)
        assert r.op("delete", _k(3)) is True and r.op("get", _k(3)) is None
        slot, bks = _slot_of(r, _k(10))
        assert len({_word(r.fabric, a) for a in [slot] + bks}) == 1
        # a bulk-loaded block has its replicas too (the load's regions are replicated chunks)
        w = _word(r.fabric, slot)
        copies = r.client.wrapped.block_copies(word_node(w), word_offset(w))
        n = word_units(w) * UNIT
        assert len({gaddr_node(a) for a in copies}) == 3
        assert len({bytes(r.fabric.memory[gaddr_node(a)].host[gaddr_offset(a):gaddr_offset(a) + n]) for a in copies}) == 1


# -- failpoints and recovery ------------------------------------------------------------------------

def _crash_one(r, point, gen):
    failpoints.arm(point, "crash")
    r.env.process(gen)
    with pytest.raises(BaseException) as crashed:
        r.env.run()
    assert isinstance(crashed.value.__cause__ or crashed.value, failpoints.ClientCrash)
    failpoints.disarm_all()


@pytest.mark.parametrize("point", ["fusee.snapshot.backups_cased", "fusee.snapshot.backups_settled",
                                   "fusee.snapshot.log_committed"])
def test_a_winner_that_stopped_is_finished_by_the_next_writer_of_its_key(point):
    """A client stops inside its SNAPSHOT round: gets still return the old value (the primary is
    the truth), and the next update of the key loses to the stopped winner, waits, then finishes
    the winner's round from the backups and its log (commit, primary CAS) and ends overwritten."""
    with rig(FuseeSystem, memory_nodes=3, coroutines=2) as r:
        assert r.op("insert", _k(7), _v(7)) is True
        _crash_one(r, point, r.client.update(r.cos[0][0], _k(7), _v(7, 2)))
        other = r.cos[0][1]
        assert r.run(r.client.get(other, _k(7))) == _v(7)
        assert r.run(r.client.update(other, _k(7), _v(7, 3))) is True
        assert r.run(r.client.get(other, _k(7))) == _v(7, 2)        # the stopped write took effect
        st = r.client.statistics()
        assert st.helped_rounds == 1 and st.overwritten == 1
        slot, bks = _slot_of(r, _k(7))
        w = _word(r.fabric, slot)
        assert {_word(r.fabric, a) for a in bks} == {w}
        c = r.client.wrapped
        tail = decode_tail(bytes(r.fabric.memory[word_node(w)].host[word_offset(w) + tail_offset(word_units(w)):
                                                                    word_offset(w) + word_units(w) * UNIT]))
        assert tail[4] == COMMITTED and c.statistics().primary_polls > 30


@pytest.mark.parametrize("point", ["fusee.insert.committed", "fusee.insert.replicated"])
def test_an_inserter_that_stopped_is_replicated_by_the_next_writer(point):
    with rig(FuseeSystem, memory_nodes=3, coroutines=2) as r:
        _crash_one(r, point, r.client.insert(r.cos[0][0], _k(8), _v(8)))
        other = r.cos[0][1]
        assert r.run(r.client.get(other, _k(8))) == _v(8)           # committed: readers see it
        assert r.run(r.client.insert(other, _k(8), b"dup")) is False
        assert r.run(r.client.delete(other, _k(8))) is True
        assert r.client.statistics().helped_inserts == 1
        assert r.run(r.client.get(other, _k(8))) is None


def _stress_rack(memory_nodes=3):
    from workloads.stress import StressWorkload
    d = rack_dict({"action": "load", "bulk": False}, run(4.0), threads=2, coroutines=4, records=32,
                  system={"name": "fusee"}, memory={"count": memory_nodes, "memory": "32MiB"})
    d["workload"]["valuesize"] = 32
    rack = ColocatedRack(scenario_from_dict(d, source="fusee-faults.toml"), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    return rack


@pytest.mark.parametrize("point", ["fusee.update.found", "fusee.delete.found", "fusee.snapshot.backups_cased",
                                   "fusee.snapshot.backups_settled", "fusee.snapshot.log_committed",
                                   "fusee.insert.committed", "fusee.insert.replicated"])
def test_clients_stopped_at_each_phase_leave_a_linearizable_history(point):
    """Five clients stop at a phase boundary of their protocol under a zipfian stress with inserts
    and deletes: their operations never return, the others finish what the stopped ones left
    (rounds and replications), and the history is linearizable."""
    rack = _stress_rack()
    failpoints.arm(point, "crash", after=5, times=5)
    rack.run()
    assert rack.nodes[0].crashed == 5
    ops = rack.history_ops
    assert sum(1 for o in ops if o.ret is None) == 5
    assert sum(1 for o in ops if o.ret is not None and o.kind != "get") > 100
    res = check(ops)
    assert res.verdict == "ok", res.explain()


# -- options ----------------------------------------------------------------------------------------

def test_bad_options_are_one_line():
    from cluster.spec import spec_from_dict
    d = rack_dict(system={"name": "fusee", "replicas": 3})
    with pytest.raises(ValueError, match="replicas = 3 needs as many memory nodes; the rack has 2"):
        spec_from_dict(d, source="t.toml")
    d = rack_dict(system={"name": "fusee", "chunk_bytes": 3 << 20})
    with pytest.raises(ValueError, match="chunk_bytes = 3145728 must be a power of two"):
        spec_from_dict(d, source="t.toml")
    with pytest.raises(ValueError, match="replicas = 11 is above the maximum 10"):
        FuseeSystem.check_options({"replicas": 11}, "t")
    with pytest.raises(ValueError, match="miss_rate_threshold = 2.0 is above the maximum 1"):
        FuseeSystem.check_options({"miss_rate_threshold": 2.0}, "t")
    with pytest.raises(SystemGaveUp, match="replicas = 3 needs as many memory nodes"):
        with rig(FuseeSystem, memory_nodes=2, options={"replicas": 3}):
            pass
