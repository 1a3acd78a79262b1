"""Marlin (nodes/systems/marlin): single-client semantics with splits, tombstones and compaction;
the verbs of every operation; the Spear lock (IDUs wait for a split, a split waits for IDUs,
the split's WRITE never covers the lock word); concurrent IDUs on one leaf; failpoints at every
protocol step; deliberate bugs the checker catches; memory accounting. Co-located, virtual time."""

from __future__ import annotations

import contextlib
import random
from unittest import mock

import pytest

from cluster.correctness import conformance
from cluster.correctness.checker import check
from cluster.correctness.conformance import rig
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from nodes.systems import get_system
from nodes.systems.api import MemoryUse, SystemGaveUp
from nodes.systems.lib.spear import SMO_STATUS, SMO_UP_LIMIT, signed
from nodes.systems.marlin import LOCK_OFFSET, MAX_VALUE, MarlinSystem
from nodes.systems.marlin.layout import ITEM, LEAF_SLOTS, TOMBSTONE
from nodes.systems.sherman import ShermanSystem
from nodes.systems.sherman.client import CACHED_NODE_BYTES
from nodes.systems.sherman.layout import LINE, NODE_BYTES, unpack_root
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
    """The 8-byte word at global address ``addr`` (little-endian, unsigned)."""
    return int(fabric.memory[gaddr_node(addr)].host64[gaddr_offset(addr) // 8])


def _root(r):
    return unpack_root(_word(r.fabric, r.layout["root"]))


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


def test_single_client_splits_tombstones_and_scans_in_order():
    n = 1500
    ids = list(range(n))
    random.Random(1).shuffle(ids)
    with rig(MarlinSystem) as r:
        def body():
            for i in ids:
                assert (yield from r.client.insert(r.co, _k(i), _v(i)))
            for i in ids[:100]:
                assert not (yield from r.client.insert(r.co, _k(i), _v(i, 2)))
            for i in ids[::3]:
                assert (yield from r.client.update(r.co, _k(i), _v(i, 3, 40 + i % 300)))
            for i in ids[1::7]:
                assert (yield from r.client.delete(r.co, _k(i)))
                assert not (yield from r.client.delete(r.co, _k(i)))
                assert not (yield from r.client.update(r.co, _k(i), _v(i, 4)))
            for i in ids[1::14]:                  # back into their tombstones
                assert (yield from r.client.insert(r.co, _k(i), _v(i, 5)))
            return True
        assert r.run(body())
        live = {_k(i): _v(i) for i in ids}
        for i in ids[::3]:
            live[_k(i)] = _v(i, 3, 40 + i % 300)
        for i in ids[1::7]:
            live.pop(_k(i), None)
        for i in ids[1::14]:
            live[_k(i)] = _v(i, 5)
        for i in random.Random(2).sample(ids, 300) + [n + 1]:
            assert r.op("get", _k(i)) == live.get(_k(i))
        order = sorted(live)
        got = r.op("scan", b"\x00" * 8, n + 10)
        assert [k for k, _ in got] == order and all(v == live[k] for k, v in got)
        mid = order[len(order) // 2]
        assert [k for k, _ in r.op("scan", mid, 50)] == [k for k in order if k >= mid][:50]
        s = r.client.statistics()
        assert s.leaf_splits > n // LEAF_SLOTS and s.root_splits >= 1, s
        assert s.idu_waits == s.smo_conflicts == s.item_mismatches == 0      # one client: no races
        assert s.remote_lock_retries == 0


def test_deleted_entries_are_dropped_when_a_full_leaf_compacts_instead_of_splitting():
    with rig(MarlinSystem) as r:
        for i in range(LEAF_SLOTS):
            assert r.op("insert", _k(i), _v(i)) is True
        for i in range(5):
            assert r.op("delete", _k(i)) is True
        for i in range(LEAF_SLOTS, LEAF_SLOTS + 5):      # 10 live + 5 tombstones: the 16th compacts
            assert r.op("insert", _k(i), _v(i)) is True
        s = r.client.statistics()
        assert s.leaf_splits == 0 and s.compactions >= 1 and s.tombstones_dropped == 5
        assert _root(r)[1] == 0
        assert [k for k, _ in r.op("scan", _k(0), 100)] == sorted(_k(i) for i in range(5, LEAF_SLOTS + 5))


class Verbs:
    """Counts the verbs a coroutine queues and its rounds (``sync`` calls), by kind."""

    def __init__(self):
        self.log = []

    @contextlib.contextmanager
    def counting(self):
        orig = {n: getattr(VerbBatch, n) for n in ("read", "write", "cas", "faa", "sync")}

        def wrap(name):
            def f(co, *a):
                self.log.append((name, a[1] if name in ("read",) else len(a[1]) if name == "write" else None))
                return orig[name](co, *a)
            return f
        with contextlib.ExitStack() as st:
            for n in orig:
                st.enter_context(mock.patch.object(VerbBatch, n, wrap(n)))
            yield self

    def kinds(self):
        return [k for k, _ in self.log]


@pytest.mark.parametrize("op, args, verbs", [
    # READ leaf | READ item
    ("get", (_k(5),), ["read", "sync", "read", "sync"]),
    # WRITE item + FAA +1 + READ leaf | CAS entry | FAA -1 (posted, unsignaled)
    ("update", (_k(5), _v(5, 2)), ["write", "faa", "read", "sync", "cas", "sync", "faa"]),
    # ... | CAS an empty entry | WRITE its key + WRITE its hint + FAA -1 (unsignaled)
    ("insert", (_k(6), _v(6)), ["write", "faa", "read", "sync", "cas", "sync", "write", "write", "faa"]),
    # FAA +1 + READ leaf | CAS entry -> tombstone | FAA -1 (unsignaled)
    ("delete", (_k(5),), ["faa", "read", "sync", "cas", "sync", "faa"]),
])
def test_verbs_per_operation_with_a_warm_cache(op, args, verbs):
    with rig(MarlinSystem) as r:
        assert r.op("insert", _k(5), _v(5)) is True
        v = Verbs()
        with v.counting():
            r.op(op, *args)
        assert v.kinds() == verbs
        assert v.kinds().count("sync") == 2                     # two round trips waited for


def test_a_scan_reads_each_leaf_and_then_its_items_in_one_round():
    with rig(MarlinSystem) as r:
        for i in range(8):
            assert r.op("insert", _k(i), _v(i)) is True
        v = Verbs()
        with v.counting():
            got = r.op("scan", _k(0), 100)
        assert len(got) == 8
        assert v.kinds() == ["read", "sync"] + ["read"] * 8 + ["sync"]


def test_get_through_a_pending_entry_reads_the_items_key():
    """An entry bound by CAS whose key WRITE has not landed (a crashed inserter) is still found:
    its key is in its item."""
    with rig(MarlinSystem) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        failpoints.arm("verbs.post", "crash", after=2)           # the key WRITE + FAA -1 post
        r.env.process(r.client.insert(r.co, _k(2), _v(2)))
        with pytest.raises(BaseException) as crashed:
            r.env.run()
        assert isinstance(crashed.value.__cause__ or crashed.value, failpoints.ClientCrash)
        failpoints.disarm_all()
        leaf = _root(r)[0]
        assert _word(r.fabric, leaf + LOCK_OFFSET) == 1           # the crashed IDU's count stays
        co = r.node.threads[0].coroutine()
        got = []
        r.env.process((lambda: (yield from _collect(r.client, co, got)))())
        r.env.run()
        assert got == [_v(2)]
        assert r.client.statistics().pending_reads >= 1


def _collect(client, co, out):
    out.append((yield from client.get(co, _k(2))))
    # an update of the pending key works too, and a second insert of it is refused
    assert (yield from client.update(co, _k(2), _v(2, 2)))
    assert not (yield from client.insert(co, _k(2), _v(2, 3)))
    assert (yield from client.get(co, _k(2))) == _v(2, 2)


def test_an_idu_waits_while_a_split_holds_the_leaf():
    with rig(MarlinSystem) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        lock = _root(r)[0] + LOCK_OFFSET
        mem = r.fabric.memory[gaddr_node(lock)].host64
        idx = gaddr_offset(lock) // 8
        mem[idx] = SMO_STATUS & ((1 << 64) - 1)                   # an SMO holds the leaf ...

        def release():
            yield 20_000
            mem[idx] = 0                                          # ... until 20 us

        r.env.process(release())
        t0 = r.env.now
        assert r.op("update", _k(1), _v(1, 2)) is True
        assert r.env.now >= t0 + 20_000
        s = r.client.statistics()
        assert s.idu_waits == 1 and s.spin_reads > 3
        assert r.op("get", _k(1)) == _v(1, 2)
        assert _word(r.fabric, lock) == 0


def test_a_split_waits_for_the_idus_inside_the_leaf_and_never_writes_the_lock_word():
    with rig(MarlinSystem) as r:
        for i in range(LEAF_SLOTS):
            assert r.op("insert", _k(i), _v(i)) is True
        leaf = _root(r)[0]
        lock = leaf + LOCK_OFFSET
        mem = r.fabric.memory[gaddr_node(lock)].host64
        idx = gaddr_offset(lock) // 8
        mem[idx] = 1                                              # an IDU is inside the leaf ...

        def leave():
            yield 30_000
            mem[idx] = (int(mem[idx]) - 1) & ((1 << 64) - 1)       # ... and leaves at 30 us

        r.env.process(leave())
        writes = []
        orig = VerbBatch.write
        with mock.patch.object(VerbBatch, "write",
                               lambda co, addr, data: writes.append((addr, len(data))) or orig(co, addr, data)):
            assert r.op("insert", _k(99), _v(99)) is True
        assert r.env.now >= 30_000
        s = r.client.statistics()
        assert s.leaf_splits == 1 and s.spin_reads > 3
        assert (leaf, LOCK_OFFSET) in writes                      # the old leaf: every byte but the lock
        assert all(not (a <= lock < a + n) for a, n in writes)
        assert _word(r.fabric, lock) == 0
        assert len(r.op("scan", _k(0), 100)) == LEAF_SLOTS + 1


def test_two_splits_of_one_leaf_back_off_and_both_land():
    """Many coroutines fill one leaf at once: SMOs meet SMOs and IDUs meet SMOs, nothing is lost."""
    n = 1200                                    # ~27 keys a split of a 45-entry leaf
    with rig(MarlinSystem, compute_threads=4, coroutines=4, seed=4) as r:
        workers = 16

        def load(cl, co, i):
            for kid in range(i, n, workers):
                assert (yield from cl.insert(co, _k(kid), _v(kid)))
            return True

        assert all(r.each(load))
        got = r.op("scan", _k(0), n + 1)
        assert sorted(k for k, _ in got) == sorted(_k(i) for i in range(n))
        total = lambda f: sum(getattr(c.statistics(), f) for c in r.clients)      # noqa: E731
        assert total("leaf_splits") > 20
        assert total("idu_waits") > 0


def test_concurrent_updates_of_one_leaf_do_not_exclude_each_other():
    """16 coroutines update 8 keys of one leaf: no lock serialises them (Spear counts IDUs), so
    they take about the time of one update each; a CAS that lost to another update of the same
    key retries from the value it found."""
    with rig(MarlinSystem, compute_threads=4, coroutines=4, seed=2) as r:
        for i in range(8):
            assert r.op("insert", _k(i), _v(i, 0)) is True
        written = {i: {_v(i, 0)} for i in range(8)}

        def hammer(cl, co, i):
            for j in range(4):
                v = _v(i % 8, 1 + i * 4 + j, 24)
                written[i % 8].add(v)
                assert (yield from cl.update(co, _k(i % 8), v))
            return True

        t0 = r.env.now
        assert all(r.each(hammer))
        per_update = (r.env.now - t0) / 4
        with rig(MarlinSystem) as one:
            assert one.op("insert", _k(0), _v(0)) is True
            u0 = one.env.now
            assert one.op("update", _k(0), _v(0, 1)) is True
            single = one.env.now - u0
        assert per_update < 4 * single                           # 16 concurrent writers, not 16x
        assert sum(c.statistics().cas_failures for c in r.clients) > 0
        for i in range(8):
            assert r.op("get", _k(i)) in written[i]
        assert _word(r.fabric, _root(r)[0] + LOCK_OFFSET) == 0


def test_values_round_trip_up_to_the_largest_item():
    with rig(MarlinSystem) as r:
        for size in (0, 1, 48, 49, 1000, MAX_VALUE):
            key = _k(size + 1)
            v = bytes(random.Random(size).randbytes(size))
            assert r.op("insert", key, v) is True and r.op("get", key) == v
        with pytest.raises(Exception, match="at most"):
            r.op("insert", _k(7), b"v" * (MAX_VALUE + 1))
        with pytest.raises(Exception, match="exactly 8 bytes"):
            r.op("get", b"short")


# -- memory accounting ------------------------------------------------------------------------------

@pytest.mark.parametrize("system", [MarlinSystem, ShermanSystem])
def test_memory_use_counts_the_cache_the_blocks_and_setup(system):
    with rig(system) as r:
        s0 = r.client.statistics()
        assert s0.memory_bytes == 0 and s0.cache_bytes == 0
        assert r.layout["setup_bytes"] > NODE_BYTES
        for i in range(600):
            assert r.op("insert", _k(i), _v(i, 1, 24)) is True
        s = r.client.statistics()
        assert s.cache_bytes == len(r.client.cache.nodes) * CACHED_NODE_BYTES > 0
        assert s.memory_bytes == r.client.alloc.used_bytes
        # every node and one 64-byte item (Marlin) or out-of-line block (Sherman's packed leaf
        # holds 8-byte values inline; these are 24 B) per key
        assert s.memory_bytes == s.nodes_allocated * NODE_BYTES + 600 * LINE
        use = system.memory_use(r.layout, {0: [s, s]})
        assert use == MemoryUse(s.cache_bytes, 2 * s.memory_bytes + r.layout["setup_bytes"])
        # a delete unlinks the item (epoch reclamation returns it later)
        r.op("delete", _k(3))
        if system is MarlinSystem:
            assert r.client.statistics().memory_bytes == s.memory_bytes - LINE


def test_cache_bytes_bounds_the_index_cache():
    budget = 2 * CACHED_NODE_BYTES
    with rig(MarlinSystem, options={"cache_bytes": budget}) as r:
        for i in range(1500):
            assert r.op("insert", _k(i), _v(i)) is True
        assert r.client.cache.capacity == 2 and r.client.statistics().cache_bytes <= budget
        assert r.op("get", _k(77)) == _v(77)
    assert MarlinSystem.check_options({}, "t")["cache_bytes"] == 0


# -- failpoints: a client stopped at each step ------------------------------------------------------

def _stress_rack(ms=1.0):
    """A rack that loads all 64 keys of the stress workload, so that its inserts only take back
    their keys' tombstones and no leaf splits during the run."""
    from workloads.stress import StressWorkload
    d = rack_dict({"action": "load", "bulk": False}, run(ms), threads=2, coroutines=4, records=64,
                  system={"name": "marlin"})
    d["workload"]["valuesize"] = 32
    rack = ColocatedRack(scenario_from_dict(d, source="marlin-faults.toml"), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    return rack


@pytest.mark.parametrize("point, after", [("marlin.idu.entered", 300), ("marlin.item.written", 150)])
def test_clients_stopped_inside_an_idu_leave_a_linearizable_history(point, after):
    """Crash five clients inside IDUs (after the FAA +1; between the item WRITE and the entry
    CAS), once the load is done: their operations never return and their counts stay in the
    leaves' Spear words, but IDUs do not exclude each other, so the rest of the rack carries on,
    and the history, with the crashed operations as "may or may not have happened", is
    linearizable."""
    rack = _stress_rack()
    failpoints.arm(point, "crash", after=after, times=5)          # past the load (its leaves split)
    rack.run()
    assert rack.nodes[0].crashed == 5
    ops = rack.history_ops
    assert sum(1 for o in ops if o.ret is None) == 5
    assert sum(1 for o in ops if o.ret is not None and o.kind != "get") > 300   # IDUs went on
    res = check(ops)
    assert res.verdict == "ok", res.explain()


@pytest.mark.parametrize("point", ["marlin.split.drained", "marlin.split.right_written"])
def test_a_client_stopped_inside_a_split_blocks_only_that_leafs_idus(point):
    """A split stopped after it drained the leaf, or after it wrote the new right leaf but before
    it cut the old one: the old leaf is whole (the right leaf is not reachable), gets of its keys
    and IDUs of other leaves go on, IDUs of that leaf wait for the SMO (Spear has no lease)."""
    with rig(MarlinSystem, coroutines=3) as r:
        for i in range(LEAF_SLOTS):
            assert r.op("insert", _k(i), _v(i)) is True
        leaf = _root(r)[0]
        failpoints.arm(point, "crash")
        r.env.process(r.client.insert(r.co, _k(100), _v(100)))
        with pytest.raises(BaseException) as crashed:
            r.env.run()
        assert isinstance(crashed.value.__cause__ or crashed.value, failpoints.ClientCrash)
        failpoints.disarm_all()
        assert signed(_word(r.fabric, leaf + LOCK_OFFSET)) == SMO_STATUS + 1
        reader, writer = r.cos[0][1], r.cos[0][2]

        def reads():
            for i in range(LEAF_SLOTS):
                assert (yield from r.client.get(reader, _k(i))) == _v(i)
            assert (yield from r.client.get(reader, _k(100))) is None
            return True

        p = r.env.process(reads())
        r.env.run(until=p)
        assert p.value is True
        w = r.env.process(r.client.update(writer, _k(3), _v(3, 2)))
        r.env.run(until=r.env.now + 50_000)
        assert w.is_alive and r.client.statistics().idu_waits == 1    # still waiting for the SMO


# -- deliberate bugs ----------------------------------------------------------------------------------

def test_deliberate_bugs_are_caught_by_the_checker():
    # the zipfian history (the suite's mix has had 10 % scans since dmrack check's stress has them)
    with pytest.raises(conformance.ConformanceFailure, match="history_zipfian"):
        conformance.CHECKS["history_zipfian"](get_system("marlin"), {"fault": "retire-new-item"})


def _zipfian_stress(fault: str, run_ms: float, seed: int) -> str:
    """The conformance history's shape and mix, zipfian, ``run_ms`` long: "ok", "illegal" (the
    checker's verdict) or "corrupt" (a client found an entry pointing at another key's item)."""
    from cluster.correctness.conformance import HISTORY, stress_mix, stress_rack
    from workloads.stress import StressWorkload
    system = get_system("marlin")
    wl = StressWorkload(HISTORY.keys, mix=stress_mix(system), distribution="zipfian", value_size=HISTORY.value_size)
    rack = stress_rack(system, wl, compute=2, threads=HISTORY.threads, coroutines=HISTORY.coroutines,
                       duration_ms=run_ms, options={"fault": fault}, seed=seed)
    try:
        rack.run()
    except SystemGaveUp as e:
        assert "holds another key" in str(e), e
        return "corrupt"
    return check(rack.history_ops, time_limit_s=20.0).verdict


def test_a_split_that_skips_the_drain_is_caught_by_a_longer_stress():
    """smo-skips-drain needs an IDU inside a leaf while a split of that leaf rewrites it: a rare
    window, which the conformance history's 1 ms meets on some interleavings only (seed 1 met it
    until coroutine switches were charged, issue 40; seed 2 still does). 3 ms meets it on seeds 1, 2
    and 3 (measured: corrupt, illegal, illegal) and the correct code passes the same runs."""
    assert _zipfian_stress("smo-skips-drain", 3.0, seed=1) in ("illegal", "corrupt")
    assert _zipfian_stress("none", 3.0, seed=1) == "ok"


def test_spear_constants_and_signed_words():
    assert SMO_STATUS == -1_000_000 and SMO_UP_LIMIT == -100_000
    assert signed((SMO_STATUS + 1) & ((1 << 64) - 1)) == SMO_STATUS + 1 and signed(5) == 5
    assert ITEM == 16 and TOMBSTONE == 1 and LOCK_OFFSET == NODE_BYTES - 8


def test_bulk_load_builds_a_tree_that_answers_as_an_inserted_one():
    rnd = random.Random(9)
    pairs = [(_k(i), bytes(rnd.randbytes(rnd.choice((8, 48, 49, 300))))) for i in range(1200)]
    with rig(MarlinSystem) as bulk, rig(MarlinSystem) as inserted:
        MarlinSystem.bulk_load(bulk.fabric, bulk.layout, pairs)
        for k, v in pairs:
            assert inserted.op("insert", k, v) is True
        for k, v in pairs[::3] + [(_k(i), None) for i in range(1200, 1210)]:
            assert bulk.op("get", k) == inserted.op("get", k) == v
        assert bulk.op("scan", _k(0), 2000) == inserted.op("scan", _k(0), 2000)
        assert bulk.op("update", _k(7), b"seven") is True and bulk.op("get", _k(7)) == b"seven"
        assert bulk.op("delete", _k(8)) is True and bulk.op("get", _k(8)) is None
        for i in range(1200, 2500):
            assert bulk.op("insert", _k(i), _v(i)) is True
        assert bulk.client.statistics().leaf_splits > 0
        assert all(bulk.op("get", _k(i)) == _v(i) for i in range(1200, 2500, 37))
        with pytest.raises(SystemGaveUp, match="empty tree"):
            MarlinSystem.bulk_load(bulk.fabric, bulk.layout, [(_k(5000), b"a")])


def test_histories_stay_linearizable_with_atomics_as_weak_as_a_nics():
    """``nic.atomic_write_race`` (docs/fabric.md, "Atomicity"): a WRITE landing inside another
    client's atomic can be undone. Marlin WRITEs an entry's item word only in a split, when no IDU
    can CAS it (Spear drained them), and never WRITEs the lock word, so nothing is lost."""
    class WeakAtomics(MarlinSystem):
        rack_tables = {"profile_overrides": {"nic.atomic_write_race": True}}

    conformance.CHECKS["history_zipfian"](WeakAtomics, None)


def test_spear_smo_from_outside_an_idu_waits_for_every_idu_and_a_second_smo_backs_off():
    from nodes.systems.lib.spear import Spear
    from shm.fabric import gaddr
    with rig(MarlinSystem, coroutines=2) as r:
        off = r.fabric.allocate(1, 64)
        lock = gaddr(1, off)
        host = r.fabric.memory[1].host64
        host[off // 8] = 2                                        # two IDUs inside
        first, second = Spear("t"), Spear("t")
        a, b = r.cos[0]
        times = {}

        def smo(spear, co, name, delay):
            yield delay
            ok = yield from spear.smo_enter(co, lock, inside_idu=False)
            times[name] = (ok, r.env.now)
            if ok:
                yield 5_000                                       # the split's work
                spear.queue_smo_exit(co, lock, inside_idu=False)
                yield co.sync()

        def idus_leave():
            for t in (10_000, 20_000):
                yield t - r.env.now
                host[off // 8] = int(host[off // 8]) - 1 & ((1 << 64) - 1)

        r.env.process(smo(first, a, "first", 0))
        r.env.process(smo(second, b, "second", 3_000))
        r.env.process(idus_leave())
        r.env.run()
        assert times["first"][0] is True and times["first"][1] >= 20_000
        assert times["second"] == (False, times["second"][1]) and times["second"][1] >= times["first"][1] + 5_000
        assert second.smo_conflicts == 1 and first.spin_reads > 3
        assert int(host[off // 8]) == 0


def test_packed_entries_are_aligned_inside_one_line_and_clear_of_versions_hints_and_lock():
    """45 entries of 16 B, three per line of lines 1..15: each item word 8-byte aligned (entries
    are CASed there), each entry and its hint in one line (a line lands at one instant), none
    over a line's nv or hints or the Spear word."""
    from nodes.systems.marlin.layout import hint_offset, item_offset, key_offset
    assert LEAF_SLOTS == 45
    taken = set()
    for e in range(1, LEAF_SLOTS + 1):
        k, it, h = key_offset(e), item_offset(e), hint_offset(e)
        assert it % 8 == 0 and it == k + 8
        line = k // LINE
        assert 1 <= line <= 15 and (it + 7) // LINE == line and h // LINE == line
        assert 4 <= h % LINE < 8 and k % LINE >= 8
        span = set(range(k, k + 16)) | {h}
        assert not span & taken and LOCK_OFFSET not in span
        taken |= span


def _probe_reference(buf, key: bytes, home: int) -> int:
    """leaf_probe in plain Python over leaf_entries: the same packed answer, -1 if torn."""
    from nodes.systems.marlin.layout import EMPTY, item_offset, leaf_entries
    nv = int.from_bytes(buf[0:4], "little")
    if any(int.from_bytes(buf[i * LINE:i * LINE + 4], "little") != nv for i in range(1, 16)):
        return -1
    found = pending = 0
    for e, hint, kb, _ in leaf_entries(buf, 0):
        if hint and kb == key and not found:
            found = e
        elif not hint:
            pending |= 1 << (e - 1)
    free = 0
    for n in range(LEAF_SLOTS):
        e = (home + n) % LEAF_SLOTS + 1
        if int.from_bytes(buf[item_offset(e):item_offset(e) + 8], "little") == EMPTY:
            free = e
            break
    return found | free << 8 | pending << 16


def test_leaf_probe_matches_its_plain_python_reference_on_random_leaves():
    import numpy as np

    from nodes.systems.marlin.layout import hint_offset, item_offset, key_offset, leaf_image, leaf_probe
    rnd = random.Random(3)
    for trial in range(300):
        n = rnd.randrange(LEAF_SLOTS + 1)
        keys = [rnd.randbytes(8) for _ in range(n)]
        buf = np.frombuffer(bytearray(leaf_image(7, 0, None, 0, [(kb, 64 * (i + 2)) for i, kb in enumerate(keys)])),
                            np.uint8).copy()
        for e in rnd.sample(range(1, LEAF_SLOTS + 1), rnd.randrange(6)):
            what = rnd.choice(("pending", "empty", "tombstone"))
            if what == "pending":                 # bound, key not written yet
                buf[hint_offset(e)] = 0
                buf[item_offset(e):item_offset(e) + 8] = np.frombuffer((4096).to_bytes(8, "little"), np.uint8)
            elif what == "empty":
                buf[key_offset(e):key_offset(e) + 16] = 0
                buf[hint_offset(e)] = 0
            else:
                buf[item_offset(e):item_offset(e) + 8] = np.frombuffer(TOMBSTONE.to_bytes(8, "little"), np.uint8)
        if trial % 10 == 0:                       # a line of another version: a torn snapshot
            buf[LINE * rnd.randrange(1, 16)] ^= 1
        probe = keys[rnd.randrange(n)] if n and rnd.random() < 0.7 else rnd.randbytes(8)
        home = rnd.randrange(LEAF_SLOTS)
        got = leaf_probe(buf.view(np.int64), 0, np.int64(int.from_bytes(probe, "little", signed=True)), home)
        assert got == _probe_reference(bytes(buf), probe, home), trial
