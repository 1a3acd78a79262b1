"""Sherman (nodes/systems/sherman): single-client semantics with leaf, internal and root splits,
sorted scans across leaves, concurrency on one and two compute nodes (HOCL local hand-over and
remote masked-CAS contention), index-cache staleness, torn-read retries."""

from __future__ import annotations

import contextlib
import random
from unittest import mock

import pytest

from cluster.correctness.conformance import rig
from shm.sim.env import Environment
from nodes.systems.sherman import INLINE_VALUE, KeySizeError, ShermanSystem
from nodes.systems.sherman.layout import LINE, NODE_BYTES, PACKED_ENTRY, unpack_root
from shm.coro import VerbBatch, NodeRdma
from shm.fabric import REGION_HOST, Fabric, NodeSpec, gaddr_node, gaddr_offset, gaddr_region
from shm.profile import load_profile
from shm.segment import new_prefix
from shm.verbs import VerbsHost
from workloads.keys import key_bytes

LAYOUTS = ("packed", "per-line")


def _k(i):
    return key_bytes(i, 8)


def _v(i, ver=1, size=16):
    return (b"%d:%d:" % (i, ver)).ljust(size, b"x")


@contextlib.contextmanager
def two_node_rig(prefix, threads=4, coroutines=4, options=None):
    """Two compute nodes (cn0, cn1) x threads x coroutines on one environment, two memory nodes."""
    opts = ShermanSystem.check_options(dict(options or {}), "test")
    specs = [NodeSpec("cn0", "compute", 32 << 20), NodeSpec("cn1", "compute", 32 << 20),
             NodeSpec("mn0", "memory", 64 << 20), NodeSpec("mn1", "memory", 64 << 20)]
    fabric = Fabric.create(load_profile("cx6-200g"), specs, prefix=prefix)
    try:
        layout = ShermanSystem.setup(fabric, [2, 3], opts, 10_000)
        env = Environment(seed=5)
        host = VerbsHost(fabric, env)
        nodes = [NodeRdma(host, "cn0"), NodeRdma(host, "cn1")]
        clients, cos = [], []
        for n in nodes:
            for _ in range(threads):
                t = n.thread()
                clients.append(ShermanSystem.client(fabric, layout, t, opts))
                cos.append([t.coroutine() for _ in range(coroutines)])
        yield fabric, layout, env, clients, cos
    finally:
        fabric.close()


def run_all(env, clients, cos, body):
    procs = []
    for cl, cs in zip(clients, cos):
        for co in cs:
            procs.append(env.process(body(cl, co, len(procs))))
    env.run()
    assert not any(p.is_alive for p in procs)
    return [p.value for p in procs]


def total(clients, field):
    return sum(getattr(c.statistics(), field) for c in clients)


@pytest.mark.parametrize("leaf_layout, min_splits", [("packed", 60), ("per-line", 100)])
def test_single_client_splits_everywhere_and_scans_in_order(leaf_layout, min_splits):
    n = 3000 if leaf_layout == "per-line" else 6000
    ids = list(range(n))
    random.Random(1).shuffle(ids)
    with rig(ShermanSystem, options={"leaf_layout": leaf_layout}) as r:
        def body():
            for i in ids:
                assert (yield from r.client.insert(r.co, _k(i), _v(i)))
            for i in ids[:200]:
                assert not (yield from r.client.insert(r.co, _k(i), _v(i, 2)))
            for i in ids[::3]:
                assert (yield from r.client.update(r.co, _k(i), _v(i, 3, 40 + i % 200)))
            for i in ids[1::7]:
                assert (yield from r.client.delete(r.co, _k(i)))
            assert not (yield from r.client.update(r.co, _k(n + 5), _v(1)))
            assert not (yield from r.client.delete(r.co, _k(n + 5)))
            return True
        assert r.run(body())
        live = {}
        for i in ids:
            live[_k(i)] = _v(i)
        for i in ids[::3]:
            live[_k(i)] = _v(i, 3, 40 + i % 200)
        for i in ids[1::7]:
            live.pop(_k(i), None)
        for i in random.Random(2).sample(ids, 400):
            assert r.op("get", _k(i)) == live.get(_k(i))
        order = sorted(live)
        got = r.op("scan", b"\x00" * 8, n + 10)
        assert [k for k, _ in got] == order and all(v == live[k] for k, v in got)
        mid = order[len(order) // 2]
        got = r.op("scan", mid, 100)
        assert [k for k, _ in got] == [k for k in order if k >= mid][:100]
        s = r.client.statistics()
        assert s.leaf_splits > min_splits and s.internal_splits >= 2 and s.root_splits >= 2
        root, level = unpack_root(int(r.fabric.memory[gaddr_node(r.layout["root"])].host64[
            gaddr_offset(r.layout["root"]) // 8]))
        assert level == s.root_splits and level >= 2 and r.client.cache.root == (root, level)
        assert s.blocks_written > 0           # values over the inline field went out of line


def test_bad_keys_and_values_are_refused():
    with rig(ShermanSystem) as r:
        with pytest.raises(Exception, match="exactly 8 bytes"):
            r.op("insert", b"short", b"v")
        with pytest.raises(Exception, match="at most"):
            r.op("insert", _k(1), b"v" * (64 << 10))
    assert issubclass(KeySizeError, ValueError)


def test_concurrent_inserts_and_updates_many_coroutines(prefix):
    n = 2400
    with two_node_rig(prefix) as (fabric, layout, env, clients, cos):
        workers = sum(len(c) for c in cos)

        def load(cl, co, i):
            for kid in range(i, n, workers):
                assert (yield from cl.insert(co, _k(kid), _v(kid, 1, 8 + kid % 60)))
            for kid in range(i, n, 3 * workers):
                assert (yield from cl.update(co, _k(kid), _v(kid, 2)))
            return True

        assert all(run_all(env, clients, cos, load))

        def read(cl, co, i):
            bad = []
            for kid in range((i + 7) % workers, n, workers):
                want = _v(kid, 2) if kid % (3 * workers) == (kid % workers) and kid % (3 * workers) < workers \
                    else _v(kid, 1, 8 + kid % 60)
                got = yield from cl.get(co, _k(kid))
                if got != want:
                    bad.append((kid, got, want))
            return bad

        assert not [b for res in run_all(env, clients, cos, read) for b in res]
        got = []
        env.process(_collect(clients[0], cos[0][0], got))
        env.run()
        assert [k for k, _ in got[0]] == sorted(_k(i) for i in range(n))
        assert total(clients, "leaf_splits") > 50 and total(clients, "local_lock_waits") > 0   # 54-entry leaves
        # the other compute node's cache went stale as this one split nodes: fences caught it
        assert total(clients, "sibling_follows") + total(clients, "cache_invalidations") > 0


def _collect(cl, co, out):
    out.append((yield from cl.scan(co, b"\x00" * 8, 1 << 20)))


def test_hot_key_updates_exercise_handover_and_remote_lock_contention(prefix):
    with two_node_rig(prefix) as (fabric, layout, env, clients, cos):
        written = set()

        def setup(cl, co, i):
            if i == 0:
                assert (yield from cl.insert(co, _k(42), _v(42, 0)))
            return True

        run_all(env, clients[:1], cos[:1], setup)
        written.add(_v(42, 0))

        def hammer(cl, co, i):
            for j in range(8):
                v = _v(42, 1 + i * 8 + j, 24)
                written.add(v)
                assert (yield from cl.update(co, _k(42), v))
                got = yield from cl.get(co, _k(42))
                assert got in written
            return True

        assert all(run_all(env, clients, cos, hammer))
        assert total(clients, "local_lock_waits") > 0 and total(clients, "handovers") > 0
        assert total(clients, "remote_lock_retries") > 0
        # every lock is free again, locally and remotely
        assert all(not c.locks.held for c in clients)
        for m, off in layout["locks"].items():
            assert not fabric.memory[m].device[off:off + layout["lock_slots"] * 2].any()


def test_no_handover_option_releases_remotely_every_time(prefix):
    with two_node_rig(prefix, threads=2, coroutines=4, options={"max_handover": 0}) as (fabric, layout, env,
                                                                                           clients, cos):
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(1), _v(1)))

        def hammer(cl, co, i):
            for j in range(4):
                assert (yield from cl.update(co, _k(1), _v(1, j)))
            return True

        run_all(env, clients, cos, hammer)
        assert total(clients, "handovers") == 0 and total(clients, "local_lock_waits") > 0


def test_without_the_local_tier_every_coroutine_spins_on_the_remote_lock(prefix):
    with two_node_rig(prefix, threads=2, coroutines=4, options={"hierarchical": False}) as (fabric, layout, env,
                                                                                              clients, cos):
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(1), _v(1)))

        def hammer(cl, co, i):
            for j in range(4):
                assert (yield from cl.update(co, _k(1), _v(1, 10 * i + j)))
            return True

        run_all(env, clients, cos, hammer)
        assert total(clients, "local_lock_waits") == 0 and total(clients, "handovers") == 0
        assert total(clients, "remote_lock_retries") > 0
        assert all(not c.locks.held for c in clients)


# CHIME's build of its Sherman baseline (dmemsys/CHIME exp/params/common.json, src/Tree.cpp): the lock
# in host memory, no HOCL hand-over, SMART's read delegation and write combining per key
CHIME_SHERMAN = {"lock_memory": "host", "hierarchical": False, "local_lock": True}


def _hot_updates(prefix, options):
    """Every coroutine of two compute nodes updates one key with 8-byte values (inline in the
    packed leaf); returns the clients' statistics summed and the key's final value."""
    with two_node_rig(prefix, threads=2, coroutines=4, options=options) as (fabric, layout, env, clients, cos):
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(7), b"v0000000"))
        written = {b"v0000000"}

        def hammer(cl, co, i):
            for j in range(6):
                v = b"v%03d%03d" % (i, j)
                written.add(v)
                assert (yield from cl.update(co, _k(7), v))
                assert (yield from cl.get(co, _k(7))) in written
            return True

        assert all(run_all(env, clients, cos, hammer))
        final = []
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: _collect_get(cl, co, final))
        assert final[0] in written
        stats = {f: total(clients, f) for f in ("updates", "write_handover", "read_handover", "remote_lock_retries",
                                                "local_lock_waits", "handovers")}
        assert all(not c.locks.held for c in clients)
        return stats


def _collect_get(cl, co, out):
    out.append((yield from cl.get(co, _k(7))))


def test_write_combining_carries_same_key_updates_and_spins_less(prefix):
    plain = _hot_updates(prefix, {"lock_memory": "host", "hierarchical": False})
    chime = _hot_updates(new_prefix(), CHIME_SHERMAN)
    assert plain["write_handover"] == 0 and plain["read_handover"] == 0
    # of a node's 8 coroutines updating the key, one goes remote and carries the others' values
    assert chime["write_handover"] > chime["updates"] // 4
    assert chime["read_handover"] > 0
    # fewer writers spin on the remote lock, so fewer of its CASes fail
    assert chime["remote_lock_retries"] < plain["remote_lock_retries"]
    assert chime["local_lock_waits"] == chime["handovers"] == 0    # no HOCL tier in CHIME's Sherman


def test_write_combining_leaves_long_values_to_the_lock(prefix):
    """A value longer than an entry holds has its block written before the lock, so it is not
    combined: every update takes the lock itself."""
    with two_node_rig(prefix, threads=1, coroutines=4, options=CHIME_SHERMAN) as (fabric, layout, env, clients, cos):
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(3), _v(3)))

        def hammer(cl, co, i):
            for j in range(3):
                assert (yield from cl.update(co, _k(3), _v(3, 10 * i + j, 24)))
            return True

        run_all(env, clients, cos, hammer)
        assert total(clients, "write_handover") == 0 and total(clients, "updates") == 8 * 3


def test_readers_that_wait_for_the_lock_read_again_while_it_is_held(prefix):
    for free, expect_locked in ((True, False), (False, True)):
        with two_node_rig(prefix, threads=2, coroutines=4, options={"lock_free_reads": free}) as (
                fabric, layout, env, clients, cos):
            run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(1), _v(1)))

            def mixed(cl, co, i):
                for j in range(6):
                    if i % 2:
                        assert (yield from cl.update(co, _k(1), _v(1, 10 * i + j)))
                    else:
                        assert (yield from cl.get(co, _k(1))) is not None
                return True

            run_all(env, clients, cos, mixed)
            assert (total(clients, "locked_reads") > 0) == expect_locked


def test_lock_table_in_host_memory_is_used_and_left_free(prefix):
    with two_node_rig(prefix, threads=2, coroutines=2, options={"lock_memory": "host"}) as (fabric, layout, env,
                                                                                              clients, cos):
        run_all(env, clients[:1], [cos[0][:1]], lambda cl, co, i: cl.insert(co, _k(1), _v(1)))
        lock = clients[0].lock_of(clients[0].cache.root[0])
        assert gaddr_region(lock[0]) == REGION_HOST

        def hammer(cl, co, i):
            for j in range(4):
                assert (yield from cl.update(co, _k(1), _v(1, 10 * i + j)))
            return True

        run_all(env, clients, cos, hammer)
        assert total(clients, "remote_lock_retries") > 0
        for m, off in layout["locks"].items():
            assert not fabric.memory[m].host[off:off + layout["lock_slots"] * 2].any()


def _update_ns(options) -> int:
    """Virtual ns of one uncontended update of a key in a one-leaf tree."""
    with rig(ShermanSystem, options=options) as r:
        assert r.op("insert", _k(5), _v(5)) is True
        t0 = r.env.now
        assert r.op("update", _k(5), _v(5, 2)) is True
        assert r.op("get", _k(5)) == _v(5, 2)
        return r.env.now - t0


def test_ablations_cost_what_they_remove():
    base = _update_ns({})
    # without command combination the unlock waits for the write-back: one more round trip
    assert _update_ns({"combine": False}) > base + 1000
    # a lock CAS in host memory is a PCIe read-modify-write instead of an on-chip access
    assert _update_ns({"lock_memory": "host"}) > base


@pytest.mark.parametrize("leaf_layout, entry_writes, size", [("per-line", True, LINE), ("per-line", False, NODE_BYTES),
                                                            ("packed", True, PACKED_ENTRY),
                                                            ("packed", False, NODE_BYTES)])
def test_without_two_level_versions_an_update_writes_back_the_whole_leaf(leaf_layout, entry_writes, size):
    with rig(ShermanSystem, options={"entry_writes": entry_writes, "leaf_layout": leaf_layout}) as r:
        assert r.op("insert", _k(5), _v(5, size=8)) is True
        sizes = []
        write = VerbBatch.write
        with mock.patch.object(VerbBatch, "write", lambda co, addr, data: sizes.append(len(data)) or write(co, addr, data)):
            assert r.op("update", _k(5), _v(5, 2, size=8)) is True
        assert r.op("get", _k(5)) == _v(5, 2, size=8)
        assert sizes[0] == size and sizes[1:] == [2]      # the write-back, then the 16-bit unlock


@pytest.mark.parametrize("leaf_layout", LAYOUTS)
def test_bulk_load_builds_a_tree_that_answers_as_an_inserted_one(leaf_layout):
    rnd = random.Random(9)
    inline = ShermanSystem.leaf_layout_of({"leaf_layout": leaf_layout}).inline
    pairs = [(_k(i), bytes(rnd.randbytes(rnd.choice((8, inline, inline + 1, 300))))) for i in range(1500)]
    opts = {"leaf_layout": leaf_layout}
    with rig(ShermanSystem, options=opts) as bulk, rig(ShermanSystem, options=opts) as inserted:
        ShermanSystem.bulk_load(bulk.fabric, bulk.layout, pairs)
        for k, v in pairs:
            assert inserted.op("insert", k, v) is True
        for k, v in pairs[::3] + [(_k(i), None) for i in range(1500, 1520)]:
            assert bulk.op("get", k) == inserted.op("get", k) == v
        assert bulk.op("scan", _k(0), 2000) == inserted.op("scan", _k(0), 2000)
        assert len(bulk.op("scan", _k(0), 2000)) == 1500
        # the bulk-loaded tree takes writes as any other: updates, deletes, inserts that split
        assert bulk.op("update", _k(7), b"seven") is True and bulk.op("get", _k(7)) == b"seven"
        assert bulk.op("delete", _k(8)) is True and bulk.op("get", _k(8)) is None
        for i in range(1500, 4000):
            assert bulk.op("insert", _k(i), _v(i)) is True
        assert bulk.client.statistics().leaf_splits > 0
        assert all(bulk.op("get", _k(i)) == _v(i) for i in range(1500, 4000, 37))


def test_bulk_load_refuses_a_tree_with_keys_and_duplicate_keys():
    from nodes.systems.api import SystemGaveUp
    with rig(ShermanSystem) as r:
        with pytest.raises(SystemGaveUp, match="twice"):
            ShermanSystem.bulk_load(r.fabric, r.layout, [(_k(1), b"a"), (_k(1), b"b")])
        assert r.op("insert", _k(2), b"x") is True
        with pytest.raises(SystemGaveUp, match="empty tree"):
            ShermanSystem.bulk_load(r.fabric, r.layout, [(_k(3), b"a")])


@pytest.mark.parametrize("leaf_layout", LAYOUTS)
def test_torn_leaf_read_is_retried(leaf_layout):
    with rig(ShermanSystem, options={"leaf_layout": leaf_layout}) as r:
        assert r.op("insert", _k(7), _v(7)) is True
        root, level = r.client.cache.root or unpack_root(0)
        assert level == 0
        node, off = gaddr_node(root), gaddr_offset(root)
        host = r.fabric.memory[node].host
        # per-line: line 5 from "another write" (its node version differs); packed: the rear
        # version from a whole-leaf write whose last line has landed and first has not
        at = 5 * LINE if leaf_layout == "per-line" else NODE_BYTES - 4
        saved = bytes(host[off + at:off + at + 4])
        host[off + at] ^= 0x55

        def repair():
            yield 5000
            host[off + at:off + at + 4] = memoryview(saved)

        r.env.process(repair())
        assert r.op("get", _k(7)) == _v(7)
        s = r.client.statistics()
        assert s.torn_reads > 0
        assert r.env.now >= 5000


@pytest.mark.parametrize("leaf_layout", LAYOUTS)
def test_values_inline_and_out_of_line_round_trip(leaf_layout):
    inline = ShermanSystem.leaf_layout_of({"leaf_layout": leaf_layout}).inline
    with rig(ShermanSystem, options={"leaf_layout": leaf_layout}) as r:
        sizes = sorted({0, 1, inline, inline + 1, INLINE_VALUE + 1, 1000, 4000, (16 << 10) - 1})
        for size in sizes:
            key = _k(size + 1)
            v = bytes(random.Random(size).randbytes(size))
            assert r.op("insert", key, v) is True and r.op("get", key) == v
            v2 = v[::-1] + b"z"
            assert r.op("update", key, v2) is True and r.op("get", key) == v2
        got = r.op("scan", _k(0), 100)
        assert [k for k, _ in got] == sorted(k for k, _ in got) and len(got) == len(sizes)


def test_statistics_record_is_immutable_and_cache_is_shared_per_node(prefix):
    with two_node_rig(prefix, threads=2, coroutines=1) as (fabric, layout, env, clients, cos):
        assert clients[0].cache is clients[1].cache and clients[0].cache is not clients[2].cache
        assert clients[0].locks is clients[1].locks
        s = clients[0].statistics()
        hash(s)
        assert NODE_BYTES == 1024


ABLATIONS = [{"lock_memory": "host"}, {"hierarchical": False}, {"combine": False}, {"entry_writes": False},
             {"lock_free_reads": False},
             {"lock_memory": "host", "hierarchical": False, "combine": False, "entry_writes": False,
              "lock_free_reads": False}]


@pytest.mark.parametrize("options", [{"cache_nodes": 0}, {"max_handover": 0, "lock_slots": 4},
                                     {"leaf_layout": "per-line"}, {**CHIME_SHERMAN, "leaf_layout": "per-line"}]
                         + ABLATIONS)
def test_conformance_rig_checks_pass_with_options(options):
    from cluster.correctness.conformance import CHECKS
    for name in ("single_client", "no_torn_values", "insert_race", "load_then_read"):
        CHECKS[name](ShermanSystem, options)


def test_without_index_cache_every_descent_reads_the_path():
    with rig(ShermanSystem, options={"cache_nodes": 0}) as r:
        for i in range(400):
            assert r.op("insert", _k(i), _v(i)) is True
        before = r.client.statistics()
        assert r.op("get", _k(123)) == _v(123)
        after = r.client.statistics()
        assert after.cache_misses > before.cache_misses and after.cache_hits == before.cache_hits


def test_unlock_before_write_is_caught_by_the_checker():
    """The deliberate bug (system option fault = "unlock-before-write"): the leaf's lock is free
    before the entry is written back. The co-located stress history is not linearizable; the same
    run without the fault passes (the conformance suite runs it for every system)."""
    from cluster.correctness import conformance
    from nodes.systems import get_system
    with pytest.raises(conformance.ConformanceFailure, match="not linearizable"):
        conformance.CHECKS["history_uniform"](get_system("sherman"), {"fault": "unlock-before-write"})


def test_retiring_the_new_block_is_caught_by_the_checker():
    """fault = "retire-new-block": an update or insert retires the out-of-line block it just
    published instead of the one it replaced, so a live value is reused under its entry (use
    after free). The conformance suite's load of values up to 56 B (some out of line) reads keys
    back with another key's bytes."""
    from cluster.correctness import conformance
    from nodes.systems import get_system
    with pytest.raises(conformance.ConformanceFailure, match="loaded keys read wrong"):
        conformance.CHECKS["load_then_read"](get_system("sherman"), {"fault": "retire-new-block"})


def test_value_after_unlock_is_caught_without_chaos():
    """fault = "value-after-unlock": an out-of-line value's block is WRITTEN only once the entry
    that points to it and the unlock completed, a window of one round trip. The conformance
    suite's same-key readers (no_torn_values, values up to 1000 B) follow the new entry inside it
    and read the block before its value: caught without --chaos (docs/checking.md)."""
    from cluster.correctness import conformance
    from nodes.systems import get_system
    with pytest.raises(conformance.ConformanceFailure, match="no update wrote"):
        conformance.CHECKS["no_torn_values"](get_system("sherman"), {"fault": "value-after-unlock"})


# -- Sherman's packed leaf (leaf_layout = "packed", the default): verbs and bytes per operation ----

@contextlib.contextmanager
def _verbs():
    """Record (verb, bytes) of every verb posted by any coroutine, and the ``sync`` rounds."""
    log = []
    read, write, masked_cas, sync = VerbBatch.read, VerbBatch.write, VerbBatch.masked_cas, VerbBatch.sync
    with mock.patch.object(VerbBatch, "read", lambda co, a, n: log.append(("READ", n)) or read(co, a, n)), \
            mock.patch.object(VerbBatch, "write", lambda co, a, d: log.append(("WRITE", len(d))) or write(co, a, d)), \
            mock.patch.object(VerbBatch, "masked_cas", lambda co, *a: log.append(("CAS", 8)) or masked_cas(co, *a)), \
            mock.patch.object(VerbBatch, "sync", lambda co: log.append(("sync", 0)) or sync(co)):
        yield log


def _ops(log):
    return [v for v in log if v[0] != "sync"], sum(1 for v in log if v[0] == "sync")


def test_packed_leaf_verbs_and_bytes_per_get_update_insert():
    """Warm cache, one-leaf tree, no contention: a get READs the 1 KB leaf; an update and an
    insert take the lock (masked CAS), READ the leaf, and WRITE back only the 18-byte entry with
    the 2-byte unlock in the same doorbell: 3 rounds, 4 verbs, 18 B of entry written."""
    with rig(ShermanSystem) as r:
        assert r.layout["leaf_layout"] == "packed"
        assert r.op("insert", _k(1), _v(1, size=8)) is True
        assert r.op("get", _k(1)) == _v(1, size=8)             # warms the root
        with _verbs() as log:
            t0 = r.env.now
            assert r.op("get", _k(1)) == _v(1, size=8)
            get_ns = r.env.now - t0
        assert _ops(log) == ([("READ", NODE_BYTES)], 1)
        for kind, key in (("update", _k(1)), ("insert", _k(2))):
            with _verbs() as log:
                assert r.op(kind, key, _v(9, size=8)) is True
            assert _ops(log) == ([("CAS", 8), ("READ", NODE_BYTES), ("WRITE", PACKED_ENTRY), ("WRITE", 2)], 3), kind
            assert r.op("get", key) == _v(9, size=8)
        assert get_ns > 0
        # a value over Sherman's 8-byte inline field goes to a block, written with the lock CAS,
        # and a get READs it in a second round (the entry's word carries the block's units)
        with _verbs() as log:
            assert r.op("update", _k(1), b"v" * 40) is True
        assert _ops(log)[0] == [("WRITE", 16 + 40), ("CAS", 8), ("READ", NODE_BYTES), ("WRITE", PACKED_ENTRY), ("WRITE", 2)]
        with _verbs() as log:
            assert r.op("get", _k(1)) == b"v" * 40
        assert _ops(log) == ([("READ", NODE_BYTES), ("READ", 64)], 2)


def test_packed_leaf_holds_54_entries_and_splits_on_the_55th():
    """Sherman's kLeafCardinality: (1024 - 35 - 2 - 8) / 18 = 54 entries in a 1 KB leaf (the
    per-line leaf holds 15). The 55th insert splits: WRITE the new right leaf (1 KB), then the
    left leaf (1 KB) with the unlock, then the separator goes into a new root."""
    from nodes.systems.sherman.layout import PACKED_SLOTS, PackedLeaf, PerLineLeaf
    assert PACKED_SLOTS == 54 and PerLineLeaf.slots == 15
    with rig(ShermanSystem) as r:
        for i in range(54):
            assert r.op("insert", _k(i), _v(i, size=8)) is True
        assert r.client.statistics().leaf_splits == 0
        root, level = unpack_root(int(r.fabric.memory[gaddr_node(r.layout["root"])].host64[
            gaddr_offset(r.layout["root"]) // 8]))
        host = r.fabric.memory[gaddr_node(root)].host
        assert len(PackedLeaf.entries(host, gaddr_offset(root))) == 54 and level == 0
        with _verbs() as log:
            assert r.op("insert", _k(54), _v(54, size=8)) is True
        ops, _ = _ops(log)
        assert ops[:3] == [("CAS", 8), ("READ", NODE_BYTES), ("WRITE", NODE_BYTES)]     # lock, leaf, right leaf
        assert ops[3:5] == [("WRITE", NODE_BYTES), ("WRITE", 2)]                       # left leaf + unlock
        s = r.client.statistics()
        assert s.leaf_splits == 1 and s.root_splits == 1
        left = PackedLeaf.entries(host, gaddr_offset(root))
        assert len(left) == 27                                     # 55 entries split 27 / 28
        assert [k for k, _ in r.op("scan", _k(0), 100)] == [_k(i) for i in range(55)]


def test_packed_leaf_reader_retries_an_entry_torn_by_a_concurrent_write():
    """An entry write lands line by line: a READ that sees its first line new and its second old
    has f != r and reads again (torn_reads); the node's front/rear versions are untouched by
    entry writes. Staged here by writing a half-landed entry into memory and completing it later."""
    from nodes.systems.sherman.layout import PACKED_HEADER, packed_entry
    with rig(ShermanSystem) as r:
        for i in range(2):
            assert r.op("insert", _k(i), _v(i, size=8)) is True
        root, _ = r.client.cache.root
        node, off = gaddr_node(root), gaddr_offset(root)
        host = r.fabric.memory[node].host
        e = off + PACKED_HEADER + PACKED_ENTRY                 # slot 2 (key 1): leaf bytes 50..67
        assert (e - off) // LINE != (e - off + PACKED_ENTRY - 1) // LINE   # spans two lines
        new = packed_entry(host[e] + 1, _k(1), 8, b"NEWVALUE")
        cut = LINE - (e - off) % LINE                          # bytes of the entry in its first line
        host[e:e + cut] = memoryview(new[:cut])                # first line landed, second not yet

        def land_rest():
            yield 5000
            host[e + cut:e + PACKED_ENTRY] = memoryview(new[cut:])

        r.env.process(land_rest())
        torn = r.client.statistics().torn_reads
        assert r.op("get", _k(1)) == b"NEWVALUE"
        assert r.client.statistics().torn_reads > torn and r.env.now >= 5000


def test_smart_bt_and_marlin_keep_the_per_line_leaf():
    from nodes.systems.marlin import MarlinSystem
    from nodes.systems.smart_bt import SmartBTSystem
    for system in (SmartBTSystem, MarlinSystem):
        assert "leaf_layout" not in {o.name for o in system.options}
        with rig(system) as r:
            assert r.layout["leaf_layout"] == "per-line"


def _probe_reference(leaf: bytes, key: bytes) -> int:
    """Sherman's packed-leaf probe written out: torn (-1) if the front and rear node versions
    differ or an entry's f and r bytes differ; else the slot holding ``key`` | the first free slot << 8."""
    from nodes.systems.sherman.layout import PACKED_HEADER, PACKED_REAR, PACKED_SLOTS
    if leaf[:4] != leaf[PACKED_REAR:PACKED_REAR + 4]:
        return -1
    found = free = 0
    for s in range(PACKED_SLOTS):
        e = leaf[PACKED_HEADER + s * PACKED_ENTRY:PACKED_HEADER + (s + 1) * PACKED_ENTRY]
        if e[0] != e[17]:
            return -1
        if e[0] >> 4 == 0:
            free = free or s + 1
        elif not found and e[1:9] == key:
            found = s + 1
    return found | free << 8


def test_packed_leaf_probe_matches_its_reference_on_random_leaves():
    import numpy as np

    from nodes.systems.sherman.layout import PackedLeaf, packed_entry, packed_leaf_image
    rng = random.Random(7)
    keys = [rng.getrandbits(64).to_bytes(8, "little") for _ in range(200)]
    keys += [bytes(8), b"\xff" * 8, (1 << 63).to_bytes(8, "little")]       # the sign bit set, or not
    buf = np.zeros(3 * NODE_BYTES, np.uint8)
    for trial in range(300):
        present = rng.sample(keys, rng.randint(0, 54))
        entries = [(rng.randrange(16), 8, k, bytes(8)) for k in present]
        img = packed_leaf_image(rng.getrandbits(32), 0, None, 0, entries)
        for s in rng.sample(range(len(entries)), min(len(entries), rng.randint(0, 3))):    # freed slots
            at = 32 + s * PACKED_ENTRY
            img[at:at + PACKED_ENTRY] = packed_entry(0, bytes(8), 0, b"", used=False)
        if trial % 10 == 0:                     # torn: a version byte or an entry's r byte off
            img[rng.choice([0, 32 + 17 + PACKED_ENTRY * rng.randrange(len(entries) or 1)])] ^= 1
        off = NODE_BYTES * rng.randrange(3)
        buf[off:off + NODE_BYTES] = np.frombuffer(bytes(img), np.uint8)
        for key in rng.sample(keys, 8) + present[:2]:
            assert PackedLeaf.probe(buf, None, off, key) == _probe_reference(bytes(img), key), (trial, key)
