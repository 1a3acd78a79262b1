"""Clover (nodes/systems/clover): verbs and RPCs per operation as docs/clover.md's table says; the
chain (a stale cached address walks, a reused block sends the client to the metadata server, a
long chase asks the MS); racing writers; garbage collection keeps memory flat; the MS's threads
raise its cap; the address cache's byte budget; bulk load; failpoints at every protocol step leave
a linearizable history; bad options are one line. Co-located, virtual time."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest

from cluster.correctness.checker import check
from cluster.correctness.conformance import rig
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.spec import SpecError
from nodes.systems import get_system
from nodes.systems.api import SystemGaveUp
from nodes.systems.clover import CloverSystem
from nodes.systems.clover.client import ASKING_THRESHOLD, CacheEntry
from nodes.systems.clover.layout import (
    KIND_TOMBSTONE, KIND_VALUE, M_ALLOC, M_CREATE, M_GC, M_QUERY, decode_block, empty_next, encode_block, is_link,
    next_gen, pack_ptr, ptr_gaddr, ptr_gen, ptr_node, ptr_offset, ptr_units,
)
from shm import failpoints
from shm.coro import VerbBatch
from tests.test_rack import rack_dict, run
from workloads.keys import key_bytes


def _k(i):
    return key_bytes(i, 8)


def _v(i, ver=1, size=120):
    return (b"%d:%d:" % (i, ver)).ljust(size, b"x")


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


@contextlib.contextmanager
def _verbs():
    """Record every verb (kind, bytes) and RPC (method) posted by any coroutine, and the rounds."""
    log = []
    read, write, cas, sync, rpc = VerbBatch.read, VerbBatch.write, VerbBatch.cas, VerbBatch.sync, VerbBatch.rpc
    with mock.patch.object(VerbBatch, "read", lambda co, a, n: log.append(("READ", n)) or read(co, a, n)), \
            mock.patch.object(VerbBatch, "write", lambda co, a, d: log.append(("WRITE", len(d))) or write(co, a, d)), \
            mock.patch.object(VerbBatch, "cas", lambda co, a, e, d: log.append(("CAS", 8)) or cas(co, a, e, d)), \
            mock.patch.object(VerbBatch, "sync", lambda co: log.append(("sync", 0)) or sync(co)), \
            mock.patch.object(VerbBatch, "rpc", lambda co, n, p=b"", **kw: log.append(("RPC", kw["method"]))
                              or rpc(co, n, p, **kw)):
        yield log


def _ops(log, *, gc=False):
    """(verbs and RPCs, rounds); the background GC's RPC left out unless ``gc``."""
    ops = [v for v in log if v[0] != "sync" and (gc or v != ("RPC", M_GC))]
    return ops, sum(1 for v in log if v[0] == "sync")


def _settle(r, ns=100_000):
    """Let the background GC batches go out (and their versions retire)."""
    r.run(_sleep(ns))


def _sleep(ns):
    yield ns


# -- the verbs-and-RPCs table of docs/clover.md ------------------------------------------------------

@pytest.mark.parametrize("replicas", [3, 1])
def test_verbs_and_rpcs_per_operation_as_the_docs_table_says(replicas):
    """r copies of every version: a warm get READs the cached tail (1 round); an update WRITEs r
    copies, CASes the tail's next and (r > 1) WRITEs the r-1 backups' next words; an insert of a
    new key WRITEs r copies and asks the MS to create it; a cold get asks the MS (query) and READs
    the version it names."""
    with rig(CloverSystem, options={"replicas": replicas}) as r:
        assert r.layout["replicas"] == replicas and len(r.layout["data_nodes"]) == 3
        block = 192                                               # 64 B header + 8 B key + 120 B value: 3 lines
        with _verbs() as log:
            assert r.op("insert", _k(1), _v(1)) is True
        assert _ops(log) == ([("RPC", M_QUERY)] + [("RPC", M_ALLOC)] * replicas + [("WRITE", block)] * replicas
                             + [("RPC", M_CREATE)], 1)
        with _verbs() as log:
            assert r.op("insert", _k(2), _v(2)) is True             # chunks in hand now
        assert _ops(log) == ([("RPC", M_QUERY)] + [("WRITE", block)] * replicas + [("RPC", M_CREATE)], 1)
        with _verbs() as log:
            assert r.op("get", _k(1)) == _v(1)
        assert _ops(log) == ([("READ", block)], 1)
        with _verbs() as log:
            assert r.op("update", _k(1), _v(1, 2)) is True
        backups = [("WRITE", 8)] * (replicas - 1)
        assert _ops(log) == ([("WRITE", block)] * replicas + [("CAS", 8)] + backups, 3 if replicas > 1 else 2)
        with _verbs() as log:
            assert r.op("delete", _k(1)) is True
        tomb = 128                                                # header + key, one more line
        assert _ops(log) == ([("WRITE", tomb)] * replicas + [("CAS", 8)] + backups, 3 if replicas > 1 else 2)
        with _verbs() as log:
            assert r.op("insert", _k(1), _v(1, 3)) is True          # over the cached tombstone: an append
        assert _ops(log) == ([("WRITE", block)] * replicas + [("CAS", 8)] + backups, 3 if replicas > 1 else 2)
        with _verbs() as log:
            assert r.op("insert", _k(1), _v(1, 4)) is False         # the cached tail is live: READ it
        assert _ops(log) == ([("READ", block)], 1)
        _settle(r)
        r.client.cache.drop(_k(2))
        with _verbs() as log:
            assert r.op("get", _k(2)) == _v(2)
        assert _ops(log) == ([("RPC", M_QUERY), ("READ", block)], 1)
        with _verbs() as log:
            assert r.op("get", _k(99)) is None and r.op("update", _k(99), b"x") is False
            assert r.op("delete", _k(99)) is False
        assert _ops(log) == ([("RPC", M_QUERY)] * 3, 0)
        s = r.client.statistics()
        assert s.gc_entries == 3 and s.gc_rpcs >= 1 and s.ms_creates == 2 and s.cas_failures == 0


def _timed(r, name, *args):
    """(result, virtual ns) of one operation, timed inside it (the rig's drain also runs the RPC
    layer's pending timeout events, which move the clock on after the operation ended)."""
    out = {}

    def body():
        t0 = r.env.now
        out["res"] = yield from getattr(r.client, name)(r.co, *args)
        out["ns"] = r.env.now - t0

    r.run(body())
    return out["res"], out["ns"]


def test_a_round_trip_of_each_kind_costs_what_the_fabric_prices():
    """A warm get is one READ round trip plus the client's software path; an update with r = 3 is
    three rounds; a cold get adds an RPC round trip to the MS."""
    with rig(CloverSystem, profile="cx3-56g") as r:
        assert r.op("insert", _k(1), _v(1)) is True
        assert _timed(r, "get", _k(1))[0] == _v(1)
        warm = _timed(r, "get", _k(1))[1]
        upd = _timed(r, "update", _k(1), _v(1, 2))[1]
        _settle(r)
        r.client.cache.drop(_k(1))
        cold = _timed(r, "get", _k(1))[1]
    assert 2_000 < warm < 5_000                     # READ ~2 us on cx3-56g + ~0.9 us of software
    assert warm + 3_000 < cold < warm + 5_000       # + the MS round trip (~3.2 us idle, docs/rpc.md)
    assert 3 * 2_000 < upd < 12_000, (warm, upd, cold)


# -- the chain ----------------------------------------------------------------------------------------------

def test_a_stale_cached_address_walks_the_chain_to_the_tail():
    """GC held back (a long gc_delay_us): a client whose cached address is three versions old READs
    its way along the next words (3 hops) and caches the tail; the MS is not asked."""
    with rig(CloverSystem, options={"gc_delay_us": 1e5}) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        old = r.client.cache.get(_k(1))
        for ver in range(2, 5):
            assert r.op("update", _k(1), _v(1, ver)) is True
        r.client.cache._d[_k(1)] = old                            # as another node's stale entry
        with _verbs() as log:
            assert r.op("get", _k(1)) == _v(1, 4)
        assert _ops(log) == ([("READ", 192)] * 4, 4)
        assert r.client.cache.get(_k(1)).seq == 4
        # an update from the stale address: its CAS fails, it walks, rewrites with the next seq, wins
        r.client.cache._d[_k(1)] = old._replace(kind=KIND_VALUE)
        before = r.client.cas_failures
        assert r.op("update", _k(1), _v(1, 5)) is True
        assert r.client.cas_failures == before + 1 and r.client.cache.get(_k(1)).seq == 5
        assert r.op("get", _k(1)) == _v(1, 5)


def test_a_long_chase_asks_the_metadata_server_for_a_shortcut():
    """More than ASKING_THRESHOLD versions behind: after that many hops the client asks the MS,
    whose table (kept current by GC batches) names a later version, and jumps there."""
    with rig(CloverSystem, options={"gc_batch": 1, "gc_delay_us": 0.0}) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        old = r.client.cache.get(_k(1))
        reclaim = r.client.reclaim
        with mock.patch.object(reclaim, "retire", lambda *a: None):   # keep every old version readable
            for ver in range(2, 16):
                assert r.op("update", _k(1), _v(1, ver)) is True
            _settle(r)
            r.client.cache._d[_k(1)] = old
            with _verbs() as log:
                assert r.op("get", _k(1)) == _v(1, 15)
        ops, _ = _ops(log)
        # the cached version and the 6 after it (7 hops queued), the query, then the tail the MS named
        assert ops.count(("RPC", M_QUERY)) == 1 and ops.count(("READ", 192)) == ASKING_THRESHOLD + 1
        assert ops.index(("RPC", M_QUERY)) == ASKING_THRESHOLD


def test_a_reused_block_is_told_by_its_generation_and_the_client_asks_the_ms():
    """Once the MS has acknowledged the GC entries and the epoch moved on, the old versions'
    blocks are reused for new ones with the next generation: a client holding an old address READs
    a block of another generation, drops the entry, asks the MS and READs the tail it names."""
    with rig(CloverSystem, options={"gc_batch": 1, "gc_delay_us": 0.0}) as r:
        assert r.op("insert", _k(1), _v(1)) is True
        old = r.client.cache.get(_k(1))
        for ver in range(2, 200):
            assert r.op("update", _k(1), _v(1, ver)) is True
        s = r.client.statistics()
        assert s.blocks_reused > 0 and s.bytes_reclaimed > 0
        blk = r.fabric.memory[ptr_node(old.ptr)].host[ptr_offset(old.ptr):ptr_offset(old.ptr) + 192]
        v = decode_block(blk)
        assert v is not None and v.gen != ptr_gen(old.ptr)             # reused
        r.client.cache._d[_k(1)] = old
        before = r.client.stale_addresses
        with _verbs() as log:
            assert r.op("get", _k(1)) == _v(1, 199)
        ops, _ = _ops(log)
        assert ops[0] == ("READ", 192) and ("RPC", M_QUERY) in ops
        assert r.client.stale_addresses == before + 1


def test_racing_writers_of_one_key_each_link_one_version_and_the_chain_holds_them_all():
    """32 coroutines update one key at once: every update links exactly one version (the CAS
    losers walk to the new tail and try again), the chain's seq counts them all and the final value
    is one of theirs."""
    with rig(CloverSystem, compute_threads=4, coroutines=8, options={"gc_delay_us": 1e5}) as r:
        assert r.op("insert", _k(7), _v(7)) is True

        def body(cl, co, i):
            return (yield from cl.update(co, _k(7), _v(7, 100 + i)))

        assert all(r.each(body))
        stats = [c.statistics() for c in r.clients]
        assert sum(s.cas_failures for s in stats) > 0
        final = r.op("get", _k(7))
        assert final in {_v(7, 100 + i) for i in range(32)}
        assert r.client.cache.get(_k(7)).seq == 33


def test_concurrent_inserts_of_one_new_key_create_it_once():
    """16 coroutines insert one new key: the MS creates it for exactly one, the others are told it
    exists (their first versions go back unpublished) and find it live."""
    with rig(CloverSystem, compute_threads=2, coroutines=8) as r:
        def body(cl, co, i):
            return (yield from cl.insert(co, _k(3), _v(3, i)))

        got = r.each(body)
        assert got.count(True) == 1
        assert r.op("get", _k(3)) == _v(3, got.index(True))
        assert sum(c.statistics().create_conflicts for c in r.clients) == 15


# -- garbage collection and the metadata server ----------------------------------------------------------

def test_updates_reuse_old_versions_so_memory_stays_flat():
    """Many updates of a few keys: after a warm-up the clients' groups come back from the epoch and
    no more chunks are asked for; GC entries go in batches."""
    with rig(CloverSystem, compute_threads=2, coroutines=4) as r:
        for i in range(8):
            assert r.op("insert", _k(i), _v(i)) is True

        def body(cl, co, i):
            for ver in range(60):
                assert (yield from cl.update(co, _k(i), _v(i, ver)))

        r.each(body)
        chunks = sum(c.alloc.chunks for c in r.clients)
        r.each(body)
        assert sum(c.alloc.chunks for c in r.clients) == chunks
        stats = [c.statistics() for c in r.clients]
        assert sum(s.blocks_reused for s in stats) > 400
        assert sum(s.gc_entries for s in stats) > sum(s.gc_rpcs for s in stats)     # batched


def _ms_bound_rate(ms_threads):
    """Ops per virtual us of 64 coroutines doing gets with no address cache (each one asks the MS)."""
    with rig(CloverSystem, compute_threads=8, coroutines=8, profile="cx3-56g",
             options={"cache_bytes": 0, "ms_threads": ms_threads}) as r:
        for i in range(16):
            r.op("insert", _k(i), _v(i))
        t0 = r.env.now
        ends = []

        def body(cl, co, i):
            for j in range(12):
                yield from cl.get(co, _k((i + j) % 16))
            ends.append(r.env.now)

        r.each(body)
        return 64 * 12 / (max(ends) - t0) * 1000


def test_the_metadata_servers_threads_cap_throughput_and_more_threads_raise_the_cap():
    one, two = _ms_bound_rate(1), _ms_bound_rate(2)
    assert two > 1.4 * one, (one, two)


# -- the address cache -------------------------------------------------------------------------------------

def test_the_address_cache_stays_within_its_byte_budget():
    budget = 2_000
    with rig(CloverSystem, options={"cache_bytes": budget}) as r:
        for i in range(100):
            assert r.op("insert", _k(i), _v(i)) is True
        s = r.client.statistics()
        assert s.cache_bytes <= budget and s.cache_entries == budget // 120     # pDPM's entry, 3 replicas
        assert r.client.cache.evictions > 0
        assert r.op("get", _k(0)) == _v(0)                          # evicted: the MS names it
        assert r.client.statistics().cache_misses > 0
        assert hash(s) == hash(r.client.statistics()._replace(**s._asdict()))   # an immutable record


# -- bulk load ------------------------------------------------------------------------------------------------

def test_bulk_load_answers_as_inserts_do_and_refuses_duplicates_and_a_loaded_store():
    pairs = [(_k(i), _v(i)) for i in range(500)]
    with rig(CloverSystem) as r:
        CloverSystem.bulk_load(r.fabric, r.layout, iter(pairs))
        for k, v in pairs[::7]:
            assert r.op("get", k) == v
        assert r.op("insert", _k(3), b"x") is False
        assert r.op("update", _k(3), _v(3, 2)) is True and r.op("get", _k(3)) == _v(3, 2)
        assert r.op("delete", _k(4)) is True and r.op("get", _k(4)) is None
        assert r.op("insert", _k(10_000), _v(1)) is True
        with pytest.raises(SystemGaveUp, match="already has keys"):
            CloverSystem.bulk_load(r.fabric, r.layout, iter(pairs))
    with rig(CloverSystem) as r:
        with pytest.raises(SystemGaveUp, match="given twice"):
            CloverSystem.bulk_load(r.fabric, r.layout, iter(pairs[:3] + pairs[:1]))


def test_block_format_round_trips_and_rejects_another_key_or_a_torn_copy():
    b = pack_ptr(3, 4, 5, 128)
    img = encode_block(3, 9, KIND_VALUE, b"key", b"value", (b,))
    v = decode_block(img, b"key")
    assert (v.gen, v.seq, v.kind, v.value, v.backups, v.next) == (3, 9, KIND_VALUE, b"value", (b,), empty_next(3))
    assert decode_block(img, b"kez") is None
    torn = bytearray(img)
    torn[64] ^= 1
    assert decode_block(bytes(torn)) is None
    assert decode_block(encode_block(1, 1, KIND_TOMBSTONE, b"k", b"", ())).kind == KIND_TOMBSTONE
    assert (ptr_gen(b), ptr_units(b), ptr_node(b), ptr_offset(b)) == (3, 4, 5, 128) and is_link(b)
    assert not is_link(empty_next(7)) and next_gen(0xFFFF) == 1
    assert ptr_gaddr(b) != 0


# -- failpoints: a client stopped at each protocol step ------------------------------------------------------

def _stress_rack(ms=0.6):
    from workloads.stress import StressWorkload
    d = rack_dict({"action": "load", "bulk": False}, run(ms), threads=2, coroutines=4, records=48,
                  system={"name": "clover"}, memory={"count": 4, "memory": "32MiB", "cores": 2})
    d["workload"]["valuesize"] = 32
    rack = ColocatedRack(scenario_from_dict(d, source="clover-faults.toml"), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=48, distribution="zipfian", value_size=32)
    return rack


@pytest.mark.parametrize("point, after", [("clover.insert.written", 30), ("clover.write.block_written", 20),
                                          ("clover.write.linked", 20)])
def test_clients_stopped_at_each_step_leave_a_linearizable_history(point, after):
    """Crash four clients at a protocol step, once the load is done: a first version written but
    not created, a version written but not linked (both leak, nobody sees them), a version linked
    but its backups, cache and GC entry not written (it took effect; its old version is never
    collected). Nothing waits for a crashed client, so the rest carries on, and the history, with
    the crashed operations as "may or may not have happened", is linearizable."""
    rack = _stress_rack()
    failpoints.arm(point, "crash", after=after, times=4)
    rack.run()
    assert rack.nodes[0].crashed == 4
    ops = rack.history_ops
    assert sum(1 for o in ops if o.ret is None) == 4
    assert sum(1 for o in ops if o.ret is not None and o.kind != "get") > 200
    res = check(ops)
    assert res.verdict == "ok", res.explain()


# -- options and the rack --------------------------------------------------------------------------------------

def _spec(memory, **system):
    d = rack_dict(run(0.01), system={"name": "clover", **system}, memory=memory)
    return scenario_from_dict(d, source="t.toml")


def test_bad_options_and_racks_are_one_line():
    ok = _spec({"count": 2, "cores": 1})                         # one data node + the MS: replicas 1
    assert ok.spec.system.name == "clover"
    with pytest.raises((SpecError, ValueError), match="replicas = 3 needs 3 memory nodes besides the metadata"):
        _spec({"count": 2, "cores": 1}, replicas=3)
    with pytest.raises((SpecError, ValueError), match="ms_threads = 4 exceeds the metadata server's 2 cores"):
        _spec({"count": 4, "cores": 2}, ms_threads=4)
    with pytest.raises((SpecError, ValueError), match="ms_node = 7 names no memory node"):
        _spec({"count": 4, "cores": 2}, ms_node=7)
    with pytest.raises((SpecError, ValueError), match="memory.cores"):
        _spec({"count": 4})
    with pytest.raises(ValueError, match="replicas = 6 is above the maximum"):
        CloverSystem.check_options({"replicas": 6}, "t")
    for e in (lambda: _spec({"count": 2, "cores": 1}, replicas=3),):
        with pytest.raises(Exception) as info:
            e()
        assert "\n" not in str(info.value)
    assert get_system("clover") is CloverSystem
    assert CacheEntry(1, 1, KIND_VALUE, ()).kind == KIND_VALUE
