"""SMART-ART (nodes/systems/smart_art/): the leaf format and its checksum, semantics through
leaf splits, prefix splits and node upgrades, scans in key order, verbs and round trips per
operation with a warm cache, in-place and out-of-place updates, chains of replaced leaves met
through a stale cache of another compute node, deletes and re-inserts, the local lock table's
hand-overs, memory accounting, and clients stopped at failpoints. Virtual time only."""

from __future__ import annotations

import contextlib
import random

import pytest

from cluster.correctness.checker import Op, check
from cluster.correctness.conformance import rig, stress_rack
from shm.sim.env import Environment
from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.art import NODE_4, NODE_256, dump_tree
from nodes.systems.smart_art import (
    LIVE, UNIT, VALUE, KeySizeError, Leaf, SmartArtClient, SmartArtSystem, ValueTooLarge, leaf_image,
    leaf_units,
)
from shm import failpoints
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec
from shm.failpoints import ClientCrash
from shm.profile import load_profile
from shm.segment import new_prefix
from shm.verbs import VerbsHost
from workloads.stress import StressWorkload


def _k(i: int) -> bytes:
    return i.to_bytes(8, "big")          # big-endian: neighbours share their first bytes (deep trees)


def _v(i: int, ver: int = 1, size: int = 16) -> bytes:
    return (b"%d:%d:" % (i, ver)).ljust(size, b"x")


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


@contextlib.contextmanager
def two_nodes(threads=1, coroutines=1, options=None):
    """cn0, cn1 (compute) x threads x coroutines on one environment; mn0, mn1."""
    opts = SmartArtSystem.check_options(dict(options or {}), "test")
    specs = [NodeSpec("cn0", "compute", 32 << 20), NodeSpec("cn1", "compute", 32 << 20),
             NodeSpec("mn0", "memory", 64 << 20), NodeSpec("mn1", "memory", 64 << 20)]
    fabric = Fabric.create(load_profile("cx6-200g"), specs, prefix=new_prefix())
    try:
        layout = SmartArtSystem.setup(fabric, [2, 3], opts, 10_000)
        env = Environment(seed=5)
        host = VerbsHost(fabric, env)
        clients, cos = [], []
        for name in ("cn0", "cn1"):
            node = NodeRdma(host, name)
            for _ in range(threads):
                t = node.thread()
                clients.append(SmartArtSystem.client(fabric, layout, t, opts))
                cos.append([t.coroutine() for _ in range(coroutines)])
        yield fabric, layout, env, clients, cos
    finally:
        fabric.close()


def run1(env, gen):
    p = env.process(gen)
    env.run()
    assert not p.is_alive
    return p.value


class CountingCo:
    """A coroutine seen through a proxy that counts verbs and round trips (syncs with verbs)."""

    def __init__(self, co):
        self.co, self.verbs, self.rounds = co, 0, 0

    def __getattr__(self, name):
        return getattr(self.co, name)

    def _verb(self, name, *args):
        self.verbs += 1
        return getattr(self.co, name)(*args)

    def read(self, *a):
        return self._verb("read", *a)

    def write(self, *a):
        return self._verb("write", *a)

    def cas(self, *a):
        return self._verb("cas", *a)

    def sync(self):
        if self.co._pending or self.co._outstanding:
            self.rounds += 1
        return self.co.sync()


# -- the leaf ------------------------------------------------------------------------------------

def test_leaf_image_layout_and_checksum_catch_a_torn_read():
    key, value = _k(7), b"hello world"
    units = leaf_units(len(value))
    raw = leaf_image(key, value, units, rev_ptr=0x1234)
    assert len(raw) == units * UNIT == 64 and VALUE == 40
    assert int.from_bytes(raw[0:8], "little") == 0x1234 and int.from_bytes(raw[8:16], "little") == LIVE
    assert raw[24:32] == key and int.from_bytes(raw[32:36], "little") == len(value)
    assert int.from_bytes(raw[36:40], "little") == units and raw[40:51] == value
    c = SmartArtClient.__new__(SmartArtClient)
    c.fault = "none"
    leaf, _ = c.parse_leaf(99, raw)
    assert leaf == Leaf(99, LIVE, key, value, units) and leaf.capacity == 64 - 40
    torn = bytearray(raw)
    torn[45] ^= 1                                         # one byte of another version's value
    assert c.parse_leaf(99, bytes(torn))[0] is None
    assert c.parse_leaf(99, leaf_image(key, b"x" * 100, leaf_units(100))[:64]) == ("short", 3)


def test_registered_and_keys_must_be_eight_bytes_and_values_bounded():
    from nodes.systems import get_system
    assert get_system("smart-art") is SmartArtSystem and SmartArtSystem.supports_scan
    with rig(SmartArtSystem) as r:
        with pytest.raises(KeySizeError, match="exactly 8 bytes; got 5"):
            next(r.client.wrapped.insert(r.co, b"short", b"v"))
        with pytest.raises(KeySizeError, match="got 9"):
            next(r.client.wrapped.get(r.co, b"123456789"))
        with pytest.raises(ValueTooLarge):
            next(r.client.wrapped.insert(r.co, _k(1), b"x" * 20000))


# -- semantics ----------------------------------------------------------------------------------

def test_single_client_splits_upgrades_and_scans_in_order():
    rnd = random.Random(3)
    ids = list(range(0, 600, 1)) + [rnd.getrandbits(64) for _ in range(300)]    # dense and sparse keys
    with rig(SmartArtSystem, options={"cache_bytes": 1 << 20}) as r:
        model = {}
        for i in ids:
            assert r.op("insert", _k(i), _v(i)) is True
            model[_k(i)] = _v(i)
        assert r.op("insert", _k(5), b"again") is False
        for k, v in model.items():
            assert r.op("get", k) == v
        st = r.client.statistics()
        assert st.upgrades >= 5 and st.leaf_splits > 0 and st.prefix_splits > 0
        nodes, leaves = dump_tree(r.fabric, r.layout["memory_nodes"], r.layout["root"])
        assert len(leaves) == len(model) and {n.node_type for n in nodes} >= {NODE_4, NODE_256}
        keys = sorted(model)
        for start in (keys[0], keys[100], _k(599) , _k(3_000_000), keys[-1]):
            got = r.op("scan", start, 50)
            want = [(k, model[k]) for k in keys if k >= start][:50]
            assert got == want
        assert r.op("scan", b"\xff" * 8, 10) == [(k, model[k]) for k in keys if k >= b"\xff" * 8][:10]
        for i in range(0, 600, 3):                      # deletes, then scans and gets skip them
            assert r.op("delete", _k(i)) is True
            del model[_k(i)]
        assert r.op("delete", _k(0)) is False and r.op("get", _k(0)) is None and r.op("update", _k(0), b"x") is False
        keys = sorted(model)
        assert r.op("scan", _k(0), 40) == [(k, model[k]) for k in keys][:40]
        assert r.op("insert", _k(0), b"back") is True and r.op("get", _k(0)) == b"back"


def test_updates_in_place_when_the_value_fits_and_out_of_place_when_it_grows():
    with rig(SmartArtSystem) as r:
        r.op("insert", _k(1), _v(1, 1, 16))
        assert r.op("update", _k(1), _v(1, 2, 24)) is True          # 24 <= 64 - 40: in place
        st = r.client.statistics()
        assert (st.in_place_updates, st.out_of_place_updates) == (1, 0)
        assert r.op("update", _k(1), _v(1, 3, 200)) is True         # grows: a new leaf of 4 units
        assert r.op("get", _k(1)) == _v(1, 3, 200)
        assert r.op("update", _k(1), _v(1, 4, 100)) is True         # fits the 4-unit leaf: in place
        st = r.client.statistics()
        assert (st.in_place_updates, st.out_of_place_updates) == (2, 1)
        assert r.op("get", _k(1)) == _v(1, 4, 100)
        assert st.chain_hops == 0            # the client swung the entry and patched its cached image


# -- verbs per operation -------------------------------------------------------------------------

def test_verbs_and_round_trips_per_operation_with_a_warm_cache():
    with rig(SmartArtSystem, options={"local_lock": False}) as r:
        for i in range(200):
            r.op("insert", _k(i), _v(i))
        for i in range(200):
            r.op("get", _k(i))                           # warm the cache

        def measure(name, *args):
            co = CountingCo(r.co)
            r.run(getattr(r.client.wrapped, name)(co, *args))
            return co.verbs, co.rounds

        assert measure("get", _k(50)) == (1, 1)                           # READ leaf
        assert measure("update", _k(50), _v(50, 2)) == (4, 3)             # READ leaf | CAS lock | WRITE + CAS unlock
        assert measure("get", _k(50)) == (1, 1)
        assert measure("insert", _k(250), _v(250)) == (2, 2)              # WRITE leaf | CAS slot
        assert measure("insert", _k(50), _v(50)) == (3, 3)                # WRITE leaf | READ key | READ leaf: exists
        # READ leaf | WRITE new leaf | CAS status; the CAS of the entry is posted, not waited for
        assert measure("update", _k(51), _v(51, 2, 300)) == (4, 3)
        assert measure("get", _k(51)) == (1, 1)                           # the patched cache, a 384 B READ
        assert measure("delete", _k(52)) == (2, 2)                        # READ leaf | CAS status
        v, rounds = measure("scan", _k(10), 20)
        assert rounds == 3 and v == 22                                    # root | depth-7 node | 20 leaves


def test_without_cache_every_walk_starts_at_the_root():
    with rig(SmartArtSystem, options={"cache_bytes": 0}) as r:
        for i in range(50):
            r.op("insert", _k(i), _v(i))
        co = CountingCo(r.co)
        assert r.run(r.client.wrapped.get(co, _k(7))) == _v(7)
        assert co.rounds == 3                 # root, the depth-7 node, the leaf
        st = r.client.statistics()
        assert st.cache_hits == 0 and st.cache_bytes == 0


# -- chains, stale caches, deletes ----------------------------------------------------------------

def test_a_stale_cache_of_another_node_follows_the_chain_and_sees_deletes():
    with two_nodes() as (fabric, layout, env, (a, b), cos):
        ca, cb = cos[0][0], cos[1][0]

        def body():
            for i in range(20):
                assert (yield from a.insert(ca, _k(i), _v(i)))
            for i in range(20):
                assert (yield from b.get(cb, _k(i))) == _v(i)          # b caches the path
            assert (yield from a.update(ca, _k(3), _v(3, 2, 300)))      # out of place
            assert (yield from b.get(cb, _k(3))) == _v(3, 2, 300)      # via b's stale image: the chain
            assert (yield from a.delete(ca, _k(4)))
            assert (yield from b.get(cb, _k(4))) is None
            assert (yield from a.insert(ca, _k(4), _v(4, 3)))          # a new chain at the same entry
            assert (yield from b.get(cb, _k(4))) == _v(4, 3)
            assert not (yield from b.insert(cb, _k(4), b"dup"))
            assert (yield from b.update(cb, _k(4), _v(4, 4)))
            assert (yield from a.get(ca, _k(4))) == _v(4, 4)

        run1(env, body())
        sb = b.statistics()
        assert sb.chain_hops >= 1 and sb.stale_restarts >= 1


def test_concurrent_clients_on_two_nodes_keep_every_key():
    with two_nodes(threads=2, coroutines=4) as (fabric, layout, env, clients, cos):
        procs = []
        for ci, (cl, cs) in enumerate(zip(clients, cos)):
            for j, co in enumerate(cs):
                def body(cl=cl, co=co, base=(ci * 4 + j) * 100):
                    for i in range(base, base + 60):
                        assert (yield from cl.insert(co, _k(i), _v(i)))
                    for i in range(base, base + 60, 2):
                        assert (yield from cl.update(co, _k(i), _v(i, 2, 100)))
                    return True
                procs.append(env.process(body()))
        env.run()
        assert all(p.value for p in procs)
        c, co = clients[0], cos[0][0]

        def check_all():
            for n in range(16):
                for i in range(n * 100, n * 100 + 60):
                    want = _v(i, 2, 100) if i % 2 == 0 else _v(i)
                    assert (yield from c.get(co, _k(i))) == want

        run1(env, check_all())
        assert sum(cl.statistics().upgrades for cl in clients) > 0


def test_scans_during_inserts_and_upgrades_are_ordered_and_miss_no_finished_insert():
    with rig(SmartArtSystem, compute_threads=2, coroutines=2) as r:
        done, scans = [], []

        def body(cl, co, i):
            if i < 2:                                  # inserters: keys sharing 7 bytes (upgrades)
                for n in range(i, 300, 2):
                    assert (yield from cl.insert(co, _k(n), _v(n)))
                    done.append(n)
                return
            while len(done) < 300:
                before = list(done)
                got = yield from cl.scan(co, _k(0), 400)
                keys = [k for k, _ in got]
                assert keys == sorted(set(keys))
                assert all(v == _v(int.from_bytes(k, "big")) for k, v in got)
                assert set(map(_k, before)) <= set(keys)
                scans.append(len(keys))

        r.each(body)
        assert len(scans) > 5 and sum(c.statistics().upgrades for c in r.clients) >= 4
        assert r.op("scan", _k(0), 400) == [(_k(n), _v(n)) for n in range(300)]


# -- the local lock table ---------------------------------------------------------------------------

@pytest.mark.parametrize("local_lock", [True, False])
def test_hot_key_reads_and_writes_are_handed_over_on_a_node(local_lock):
    with rig(SmartArtSystem, compute_threads=2, coroutines=8, options={"local_lock": local_lock}) as r:
        r.op("insert", _k(1), _v(1))

        def body(cl, co, i):
            for n in range(20):
                if (i + n) % 2:
                    got = yield from cl.get(co, _k(1))
                    assert got is not None
                else:
                    assert (yield from cl.update(co, _k(1), _v(1, 100 * i + n + 2)))

        r.each(body)
        st = [c.statistics() for c in r.clients]
        reads, writes = sum(s.read_handover for s in st), sum(s.write_handover for s in st)
        if local_lock:
            assert reads > 20 and writes > 20
        else:
            assert reads == writes == 0


# -- memory accounting ------------------------------------------------------------------------------

def test_memory_use_counts_cache_and_leaves_and_nodes():
    with rig(SmartArtSystem, compute_threads=2, options={"cache_bytes": 20_000}) as r:
        for i in range(300):
            r.op("insert", _k(i * 1000), _v(i, 1, 16))       # 64-byte leaves
        recs = [c.statistics() for c in r.clients]
        use = SmartArtSystem.memory_use(r.layout, {0: recs})
        assert 0 < use.cache_bytes <= 20_000
        assert recs[0].cache_bytes == recs[1].cache_bytes                    # one cache per node
        nodes, leaves = dump_tree(r.fabric, r.layout["memory_nodes"], r.layout["root"])
        live = r.layout["setup_bytes"] + 300 * UNIT + sum(
            n.size // UNIT * UNIT + (UNIT if n.size % UNIT else 0) for n in nodes if n.node_type != NODE_256)
        assert use.memory_bytes >= live - 0          # replaced nodes of upgrades are still counted
        before = use.memory_bytes
        for i in range(100):
            r.op("delete", _k(i * 1000))
        after = SmartArtSystem.memory_use(r.layout, {0: [c.statistics() for c in r.clients]}).memory_bytes
        assert before - after == 100 * UNIT


def test_full_nodes_take_smart_s_footprint_and_answer_the_same():
    got = {}
    for full in (False, True):
        with rig(SmartArtSystem, options={"full_nodes": full}) as r:
            for i in range(300):
                r.op("insert", _k(i * 37), _v(i))
            assert r.op("scan", _k(0), 400) == [(_k(i * 37), _v(i)) for i in range(300)]
            st = r.client.statistics()
            got[full] = (st.memory_bytes - 300 * UNIT, st.leaf_splits + st.prefix_splits + st.upgrades)
    (exact, made0), (full, made1) = got[False], got[True]
    assert made0 == made1 and made0 > 50                         # the same tree, node by node
    assert full == made1 * 2112 and exact < full / 4             # every node block NODE_256-sized


# -- bulk load --------------------------------------------------------------------------------------

def test_bulk_load_builds_a_tree_that_answers_as_an_inserted_one():
    rnd = random.Random(9)
    ids = sorted(set(list(range(0, 700)) + [rnd.getrandbits(64) for _ in range(500)]))
    pairs = [(_k(i), _v(i, 1, 16 + i % 90)) for i in ids]
    with rig(SmartArtSystem) as r:
        SmartArtSystem.bulk_load(r.fabric, r.layout, iter(reversed(pairs)))
        nodes, leaves = dump_tree(r.fabric, r.layout["memory_nodes"], r.layout["root"])
        assert len(leaves) == len(pairs) and {n.node_type for n in nodes} >= {NODE_4, NODE_256}
        for k, v in pairs:
            assert r.op("get", k) == v
        assert r.op("scan", _k(0), 2000) == pairs
        st = r.client.statistics()
        assert st.bulk_bytes > len(pairs) * UNIT
        use = SmartArtSystem.memory_use(r.layout, {0: [st]})
        assert use.memory_bytes == r.layout["setup_bytes"] + st.bulk_bytes + st.memory_bytes
        # writes on top: updates in and out of place, deletes, inserts splitting bulk-built nodes
        model = dict(pairs)
        for i in ids[::7]:
            v = _v(i, 2, 300 if i % 2 else 20)
            assert r.op("update", _k(i), v) is True
            model[_k(i)] = v
        for i in ids[3::11]:
            assert r.op("delete", _k(i)) is True
            del model[_k(i)]
        for i in range(700, 1400, 3):
            assert r.op("insert", _k(i), _v(i)) is True
            model[_k(i)] = _v(i)
        assert r.op("scan", _k(0), 5000) == sorted(model.items())
        assert r.client.statistics().upgrades > 0


def test_bulk_load_refuses_a_tree_with_keys_and_duplicate_keys():
    with rig(SmartArtSystem) as r:
        with pytest.raises(SystemGaveUp, match="twice"):
            SmartArtSystem.bulk_load(r.fabric, r.layout, [(_k(1), b"a"), (_k(1), b"b")])
        SmartArtSystem.bulk_load(r.fabric, r.layout, [(_k(1), b"a")])
        with pytest.raises(SystemGaveUp, match="empty tree"):
            SmartArtSystem.bulk_load(r.fabric, r.layout, [(_k(2), b"a")])
        with pytest.raises(KeySizeError):
            with rig(SmartArtSystem) as r2:
                SmartArtSystem.bulk_load(r2.fabric, r2.layout, [(b"abc", b"a")])


# -- failpoints -------------------------------------------------------------------------------------

def _stress(point, **kw):
    wl = StressWorkload(keys=kw.pop("keys", 64), distribution="zipfian", value_size=kw.pop("value_size", 32),
                        mixed_sizes=kw.pop("mixed_sizes", False), hashed=kw.pop("hashed", True))
    after = kw.pop("after", 20)
    rack = stress_rack(SmartArtSystem, wl, threads=2, coroutines=4, duration_ms=kw.pop("duration_ms", 0.3), **kw)
    failpoints.arm(point, "crash", after=after, times=3)
    rack.run()
    crashed = sum(n.crashed for n in rack.nodes)
    ops = rack.history_ops
    res = check(ops)
    return rack, crashed, ops, res


@pytest.mark.parametrize("point,mixed", [("smart-art.insert.leaf_written", False),
                                         ("smart-art.update.leaf_written", True)])
def test_clients_stopped_mid_insert_or_mid_update_leave_a_linearizable_history(point, mixed):
    # mixed sizes: the point is reached only by the updates that replace their leaf (a value that
    # no longer fits); three stops after five passes need eight such updates, which 0.3 ms gave
    # only just: with coroutine switches charged (issue 40) it stops two clients, so this run is
    # 0.6 ms long (measured: three stopped, ten replacements completed)
    rack, crashed, ops, res = _stress(point, mixed_sizes=mixed, value_size=300 if mixed else 32, after=5,
                                      duration_ms=0.6 if mixed else 0.3)
    st = [c.statistics() for n in rack.nodes for c in n.clients]
    # an update stopped while leading the local lock table stops the updates it carried (write
    # combining): their values may or may not have been written, as its own
    assert crashed == 3 if not mixed else crashed >= 3
    assert sum(1 for o in ops if o.ret is None) == crashed        # exactly the stopped ones are open
    assert sum(1 for o in ops if o.ret is not None) > 300         # the others went on
    assert res.verdict == "ok", res.explain()
    if mixed:                                   # replacements happened, some of them decided by others
        assert sum(x.out_of_place_updates for x in st) >= 3


def test_clients_stopped_mid_upgrade_leave_a_linearizable_history_and_walkers_finish_the_link():
    # 4096 hashed keys, half loaded by inserts: nodes under the root grow 4 -> 8 -> 16
    rack, crashed, ops, res = _stress("art.upgrade.written", keys=4096, load=2048)
    assert crashed == 3
    assert sum(1 for o in ops if o.ret is None) == 3
    assert res.verdict == "ok", res.explain()


def test_a_stopped_upgrader_does_not_stop_other_inserts_into_the_node():
    failpoints.arm("art.upgrade.written", "crash", after=0, times=1)
    with rig(SmartArtSystem, compute_threads=2, coroutines=4) as r:
        def body(cl, co, i):
            try:
                for n in range(i, 64, 8):
                    assert (yield from cl.insert(co, _k(n), _v(n)))
            except ClientCrash:
                return "stopped"
            return "done"

        outcome = r.each(body)
        assert outcome.count("stopped") == 1 and outcome.count("done") == 7
        stopped = outcome.index("stopped")
        for n in range(64):
            got = r.op("get", _k(n))
            if n % 8 != stopped:
                assert got == _v(n)
        assert sum(c.statistics().upgrades for c in r.clients) >= 3


# -- teeth ------------------------------------------------------------------------------------------

def test_publishing_a_replacement_at_the_entry_is_caught_by_the_checker():
    """fault=entry-decides: SMART's out-of-place order (CAS the entry, then mark the old leaf),
    with cached leaf entries and in-place writers and deletes working on the old leaf."""
    from cluster.correctness.conformance import run_suite
    (out,) = run_suite("smart-art", only=["history_heavy"], options={"fault": "entry-decides"})
    assert not out.passed and "not linearizable" in out.detail
    (ok,) = run_suite("smart-art", only=["history_heavy"])
    assert ok.passed, ok.detail


def test_eager_read_delegation_is_caught_by_the_checker():
    """fault=eager-delegation: a GET takes the result of any same-key read in flight on its node,
    also one that read before the GET was invoked (lib/local_lock.py argues why not)."""
    # the conformance history's shape with the stress's default mix: gets, inserts, updates and
    # deletes only (the suite's own mix now has scans for a system with scans, a stream that happens
    # not to give a stale delegated read in its 1474 operations)
    from cluster.correctness.checker import check
    from cluster.correctness.conformance import HISTORY, stress_rack
    from workloads.stress import StressWorkload
    from nodes.systems import get_system
    system = get_system("smart-art")
    wl = StressWorkload(HISTORY.keys, distribution="zipfian", value_size=HISTORY.value_size)
    rack = stress_rack(system, wl, compute=2, threads=HISTORY.threads, coroutines=HISTORY.coroutines,
                       duration_ms=HISTORY.run_ms, options={"fault": "eager-delegation"}, seed=8)
    rack.run()
    # Whether a stress stream opens the window (a GET arriving while an older read of its key is in
    # flight, after an update of the key returned) depends on its interleaving: with two coroutine
    # switches charged per resume (issue 40) the default seed's stream does not, seed 8's does (2 and
    # 3 do not either). test_a_get_invoked_after_an_update_returned_never_takes_an_older_read
    # forces the window, whatever the timing; this one shows the checker finds it in a stress history.
    assert check(rack.history_ops, time_limit_s=20.0).verdict == "illegal"


@pytest.mark.parametrize("fault", ["eager-delegation", "none"])
def test_a_get_invoked_after_an_update_returned_never_takes_an_older_read(fault):
    """The window eager delegation breaks, forced rather than left to a stress's interleaving: on
    one compute node, GET A's leaf READ is in flight (it read the old value) while another thread's
    UPDATE writes and returns, and then GET C arrives; thread 0's core is kept busy, so A cannot
    return before C arrives. Eager delegation hands C A's old value although the update returned
    before C was invoked (the checker: not linearizable); the table's stamps make C read again."""
    key, old, new = _k(7), _v(7, 1), _v(7, 2)
    with rig(SmartArtSystem, compute_threads=3, coroutines=2, options={"fault": fault}) as r:
        assert r.op("insert", key, old) is True
        assert r.op("get", key) == old                        # warm: the GETs below READ the leaf only
        t0 = r.env.now
        seen = {}

        def body(cl, co, i):
            if i == 0:                                        # A: its READ is posted right away
                seen["A"] = (r.env.now, (yield from cl.get(co, key)), r.env.now)
            elif i == 1:                                      # thread 0's core, busy after A posted
                yield 1
                cl.thread.cpu(40_000)
            elif i == 2:                                      # the update, on thread 1
                call = r.env.now
                assert (yield from cl.update(co, key, new)) is True
                seen["W"] = (call, new, r.env.now)
            elif i == 4:                                      # C, on thread 2, once the update returned
                while "W" not in seen:
                    yield 100
                seen["C"] = (r.env.now, (yield from cl.get(co, key)), r.env.now)
        r.each(body)
    (a_call, a_got, a_ret), (w_call, _, w_ret), (c_call, c_got, c_ret) = seen["A"], seen["W"], seen["C"]
    assert a_got == old and w_ret < c_call < a_ret            # the window: A still in flight when C arrives
    assert c_got == (old if fault == "eager-delegation" else new)
    num = int.from_bytes(key, "big")
    history = [Op(0, "get", num, 1, True, a_call - t0, a_ret - t0), Op(2, "update", num, 2, True, w_call - t0, w_ret - t0),
               Op(4, "get", num, 1 if c_got == old else 2, True, c_call - t0, c_ret - t0)]
    verdict = check(history, initial={num: 1}).verdict
    assert verdict == ("illegal" if fault == "eager-delegation" else "ok")


@pytest.mark.parametrize("options", [{"local_lock": False}, {"cache_bytes": 0}, {"cache_bytes": 3000},
                                     {"full_nodes": True}])
def test_conformance_checks_pass_with_options(options):
    from cluster.correctness.conformance import run_suite
    outs = run_suite("smart-art", options=options, only=["sequential_model", "history_zipfian", "history_heavy"])
    assert all(o.passed for o in outs), [o.detail for o in outs if not o.passed]


def test_alloc_align_rounds_every_allocation_as_smarts_code_does():
    """alloc_align = 256: a leaf and a node take whole 256-byte slots (SMART's LocalAllocator starts
    every allocation at a 2^ALLOC_ALLIGN_BIT boundary), READs keep their sizes; other values are
    refused with one line."""
    from nodes.systems.lib.art import node_units, slot_units, NODE_256
    from nodes.systems.smart_art.layout import leaf_units
    assert slot_units(leaf_units(8), 4) == 4 and slot_units(node_units(NODE_256), 4) == 36
    used = {}
    for align in (64, 256):
        with rig(SmartArtSystem, options={"alloc_align": align}) as r:
            for i in range(40):
                assert r.op("insert", _k(i), _v(i)) is True
            assert all(r.op("get", _k(i)) == _v(i) for i in range(40))
            used[align] = r.client.statistics().memory_bytes
    leaf = leaf_units(len(_v(0))) * 64
    assert used[256] - used[64] >= 40 * (256 - leaf)          # each leaf a whole 256-byte slot
    assert SmartArtSystem.footprint({"alloc_align": 256}, 2024, 8, 8) == 1000 * 256
    with pytest.raises(ValueError, match="alloc_align = 100 is not a multiple of 64"):
        with rig(SmartArtSystem, options={"alloc_align": 100}):
            pass
