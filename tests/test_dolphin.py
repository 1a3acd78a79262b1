"""Dolphin (nodes/systems/dolphin): verbs per operation, leaf splits and special nodes, backtracking,
scans, the raw 8-byte layout, failpoints at each protocol step. Co-located and deterministic."""

from __future__ import annotations

import pytest

from cluster.correctness.checker import check
from cluster.correctness.conformance import rig
from cluster.rack import ColocatedRack
from nodes.systems import get_system
from nodes.systems.dolphin.layout import SLOTS, LeafFormat
from nodes.systems.lib.art import NODE_16, dump_tree
from shm import failpoints
from cluster.scenario import scenario_from_dict
from tests.test_faults import LOAD
from tests.test_rack import rack_dict, run

DOLPHIN = get_system("dolphin")
RAW = {"value_bytes": 8}


def be(n: int) -> bytes:
    """Key number ``n`` as Dolphin orders keys (big-endian)."""
    return n.to_bytes(8, "big")


def v8(n: int) -> bytes:
    return (n + 1).to_bytes(8, "little")


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


def posts(r) -> int:
    return r.threads[0].statistics().posts


def test_raw_leaf_is_the_papers_1088_bytes():
    fmt = LeafFormat.of(8)
    assert (fmt.slots, fmt.values_off, fmt.lock_off, fmt.rear_off, fmt.size) == (SLOTS, 552, 1072, 1080, 1088)
    big = LeafFormat.of(1000)
    assert big.values_off % 64 == 0 and big.slot_bytes % 64 == 0 and big.size <= 9 << 10


def test_get_is_one_read_and_update_two_round_trips_with_a_warm_cache():
    with rig(DOLPHIN, options=RAW) as r:
        for n in range(40):
            assert r.op("insert", be(0x1000 + n), v8(n)) is True
        r.op("get", be(0x1000))                      # warms the radix cache
        p = posts(r)
        assert r.op("get", be(0x1005)) == v8(5)
        assert posts(r) - p == 1                     # READ leaf
        p = posts(r)
        assert r.op("update", be(0x1005), v8(99)) is True
        assert posts(r) - p == 2                     # [FAA +1, READ leaf] then [WRITE value, FAA -1]
        p = posts(r)
        assert r.op("delete", be(0x1006)) is True
        assert posts(r) - p == 2                     # [FAA +1, READ leaf] then [CAS key, FAA -1]
        assert r.op("get", be(0x1005)) == v8(99) and r.op("get", be(0x1006)) is None


def test_a_full_prefix_splits_into_leaves_under_a_special_node_and_every_key_stays():
    keys = [(0xAB << 56) | (0x42 << 8) | b for b in range(256)]          # one 7-byte prefix, 256 keys
    with rig(DOLPHIN, options=RAW) as r:
        for i, k in enumerate(keys):
            assert r.op("insert", be(k), v8(i)) is True
        st = r.clients[0].statistics()
        assert st.special_nodes == 1 and st.leaf_splits >= 3
        assert all(r.op("get", be(k)) == v8(i) for i, k in enumerate(keys))
        nodes, _ = dump_tree(r.fabric, r.layout["memory_nodes"], r.layout["root"])
        special = [n for n in nodes if n.header.depth == 7]
        assert len(special) == 1 and len(special[0].children()) == st.leaf_splits + 1
        got = r.op("scan", be(keys[100]), 120)
        assert [k for k, _ in got] == [be(k) for k in keys[100:220]]


def test_a_walk_from_stale_cached_nodes_finds_the_leaf_a_split_moved_the_key_to():
    base = (0x17 << 56) | (0x99 << 8)
    with rig(DOLPHIN, options=RAW) as r:
        cl = r.clients[0]
        for n in range(60):
            assert r.op("insert", be(base | n), v8(n)) is True
        old_root = cl.cache.get(b"").copy()            # names the prefix's only leaf
        for n in range(60, 200):
            assert r.op("insert", be(base | n), v8(n)) is True
        assert cl.statistics().special_nodes == 1
        special = cl.cache.get(be(base)[:7]).copy()
        for n in range(200, 256):                      # more splits the cached special node misses
            assert r.op("insert", be(base | n), v8(n)) is True
        cl.cache.put(be(base)[:7], special)
        before = cl.statistics().backtracks
        assert r.op("get", be(base | 250)) == v8(250)
        assert cl.statistics().backtracks == before + 1   # the special node READ again, not the root
        cl.cache.clear()
        cl.cache.put(b"", old_root)
        before = cl.statistics().restarts
        assert r.op("get", be(base | 190)) == v8(190)
        assert r.op("update", be(base | 191), v8(1)) is True
        assert cl.statistics().restarts > before


def test_a_scan_starts_from_a_cached_special_nodes_leaves_and_catches_a_stale_image():
    """Dolphin's range_query starts from the entries of the cached node: a scan within a cached
    special node READs its leaves in one doorbell, no node. A split published after the image was
    cached leaves a leaf that ends before the next cached one starts (or a last leaf short of the
    prefix's end): the scan walks again without the cache and returns every key."""
    base = (0x21 << 56) | (0x42 << 8)
    with rig(DOLPHIN, options=RAW) as r:
        cl = r.clients[0]
        for n in range(0, 256, 2):
            assert r.op("insert", be(base | n), v8(n)) is True
        assert cl.statistics().special_nodes == 1
        r.op("get", be(base | 100))                      # the special node is cached
        p = posts(r)
        assert r.op("scan", be(base | 10), 20) == [(be(base | n), v8(n)) for n in range(10, 50, 2)]
        assert posts(r) - p == 1                         # the leaves' READs, in one doorbell
        special = cl.cache.get(be(base)[:7]).copy()
        for n in range(1, 256, 2):                       # splits the cached image misses
            assert r.op("insert", be(base | n), v8(n)) is True
        cl.cache.put(be(base)[:7], special)
        before = cl.statistics().stale_scans
        assert r.op("scan", be(base | 0), 256) == [(be(base | n), v8(n)) for n in range(256)]
        assert cl.statistics().stale_scans == before + 1
        # from a key the image's covering leaf no longer holds (it was cut at 62, the image's next
        # leaf starts at 96): the scan goes on from its own start, never from the leaf's end below it
        cl.cache.put(be(base)[:7], special)
        assert r.op("scan", be(base | 70), 10) == [(be(base | n), v8(n)) for n in range(70, 80)]
        assert cl.statistics().stale_scans == before + 2


def test_deleted_slots_come_back_through_compaction_not_reuse():
    base = 0x5500000000000000
    with rig(DOLPHIN, options=RAW) as r:
        for n in range(SLOTS):
            assert r.op("insert", be(base | n), v8(n)) is True
        for n in range(0, SLOTS, 2):
            assert r.op("delete", be(base | n)) is True
        assert r.op("insert", be(base | 200), v8(200)) is True      # no empty slot: an SMO compacts
        st = r.clients[0].statistics()
        assert st.compactions == 1 and st.leaf_splits == 0
        assert r.op("scan", be(base), 100) == [(be(base | n), v8(n)) for n in range(1, SLOTS, 2)] + \
            [(be(base | 200), v8(200))]


def test_values_of_other_sizes_are_refused_in_one_line_by_raw_slots():
    with rig(DOLPHIN, options=RAW) as r:
        with pytest.raises(Exception, match="raw 8 B"):
            r.op("insert", be(1), b"x" * 9)
        with pytest.raises(Exception, match="all-zero"):
            r.op("insert", be(1), bytes(8))
    with rig(DOLPHIN, options={"value_bytes": 100}) as r:
        with pytest.raises(Exception, match="does not fit the leaves' value slots of 100 B"):
            r.op("insert", be(1), b"x" * 101)


@pytest.mark.parametrize("profile", ["cx5-100g", "cx6-200g"])
def test_concurrent_large_updates_of_one_key_leave_one_whole_value(profile):
    """The paper's argument for values over a line: concurrent WRITEs of one slot settle on one
    writer's value. Per-line versions let readers see it whole or read again."""
    with rig(DOLPHIN, compute_threads=4, coroutines=2, profile=profile) as r:
        k = be(0x77)
        assert r.op("insert", k, b"0" * 1000) is True
        vals = [bytes([65 + i]) * 1000 for i in range(8)]

        def body(cl, co, i):
            return (yield from cl.update(co, k, vals[i]))

        assert r.each(body) == [True] * 8
        assert r.op("get", k) in vals


@pytest.mark.parametrize("point", ["dolphin.idu.entered", "dolphin.update.found", "dolphin.update.written",
                                   "dolphin.smo.new_leaf_written",
                                   "dolphin.smo.old_leaf_shrunk"])
def test_crashed_clients_leave_a_linearizable_history(point):
    """A client stopped for good at each protocol step: its operation never returns and the history
    of the rest stays linearizable (a crash inside an SMO leaves its leaf locked, so operations on
    that leaf wait: they stay open, never wrong)."""
    from workloads.stress import StressWorkload
    d = rack_dict(LOAD, run(0.3), threads=2, coroutines=4, records=32, system={"name": "dolphin"})
    d["workload"]["valuesize"] = 32
    rack = ColocatedRack(scenario_from_dict(d, source="dolphin-faults.toml"), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    failpoints.arm(point, "crash", after=5, times=2)
    rack.run()
    res = check(rack.history_ops)
    assert res.verdict == "ok", res.explain()


def test_a_client_stopped_between_an_inserts_key_and_value_is_reported_not_waited_for_forever():
    with rig(DOLPHIN, compute_threads=2, options=RAW) as r:
        a, b = r.clients
        assert r.op("insert", be(4), v8(4)) is True            # the prefix's leaf
        failpoints.arm("dolphin.insert.key_set", "crash")
        with pytest.raises(BaseException):
            r.op("insert", be(5), v8(5))
        assert r.op("get", be(5)) is None                       # not in: its value was never written
        with pytest.raises(Exception, match="has not written its value for 1000 µs: its client stopped"):
            r.run(b.update(r.cos[1][0], be(5), v8(6)))


@pytest.mark.parametrize("value_bytes", [8, 64])
def test_a_bulk_load_builds_what_inserts_find(value_bytes):
    import random
    rnd = random.Random(5)
    dense = rnd.sample(range(1, 1 << 12), 1500)                       # ~3 prefixes of 256, some split
    sparse = [rnd.getrandbits(64) for _ in range(500)]                 # one key per prefix
    keys = sorted(set(dense + sparse + [(0x42 << 56) | b for b in range(200)]))
    val = (lambda n: v8(n)) if value_bytes == 8 else (lambda n: bytes([n % 251 + 1]) * 40)
    with rig(DOLPHIN, options={"value_bytes": value_bytes, "cache_bytes": 1 << 20}) as r:
        DOLPHIN.bulk_load(r.fabric, r.layout, ((be(k), val(k)) for k in keys))
        assert all(r.op("get", be(k)) == val(k) for k in keys[::7])
        assert r.op("scan", be(keys[100]), 50) == [(be(k), val(k)) for k in keys[100:150]]
        extra = [k + 1 for k in keys[:300] if k + 1 not in set(keys)]
        for k in extra:                                                # inserts into bulk-loaded leaves
            assert r.op("insert", be(k), val(k)) is True
        assert all(r.op("get", be(k)) == val(k) for k in extra + keys[::11])
        nodes, _ = dump_tree(r.fabric, r.layout["memory_nodes"], r.layout["root"])
        assert any(n.header.depth == 7 for n in nodes)


@pytest.mark.parametrize("profile,leaf_writes,torn", [("cx6-200g", "ordered", True), ("cx6-200g", "any-order", False),
                                                      ("cx5-100g", "ordered", False)])
def test_leaf_rewrites_need_ascending_lines_unless_written_in_three_steps(profile, leaf_writes, torn):
    """The paper rewrites a leaf in one WRITE between its front and rear versions, which a reader
    can trust only if the lines land in ascending order. On cx6-200g (descending) a get racing a
    compaction that moves its key then finds the key's old slot already emptied: "not found" for a
    key that is there. Written rear, body, front (the default), it never does.

    The torn window is the tens of ns a leaf's WRITE takes to land, so the getters must sample it
    densely whatever a GET's CPU costs: 15 getters on 8 cores (a GET's READ rate is bound by its
    thread's core), 24 compactions, and waits between GETs that vary from one GET to the next, so
    their phases against the compaction drift. Measured on cx6-200g ordered: torn reads in 2-8 of
    the 24 rounds with index-cache searches priced at 750, 1500 and 3000 ns or by size; with 4 x 4
    getters, 12 rounds and fixed waits, 1 round of 12 at 1500 ns and none with the size-priced
    search."""
    rounds = 24
    with rig(DOLPHIN, compute_threads=8, coroutines=2, profile=profile,
             options={"value_bytes": 8, "leaf_writes": leaf_writes, "local_lock": False}) as r:
        for rnd in range(rounds):
            base = (0x33 + rnd) << 56
            for n in range(64):
                assert r.op("insert", be(base | n), v8(n)) is True
            assert r.op("insert", be(base | 0xFF), v8(0xFF)) is True     # the last slot
            for n in range(64):
                assert r.op("delete", be(base | n)) is True              # 64 tombstones before it
        done, misses, now = [], [], [0]

        def body(cl, co, i):
            if i == 0:
                for rnd in range(rounds):                                 # each insert compacts a leaf
                    now[0] = rnd
                    yield 3000
                    assert (yield from cl.insert(co, be(((0x33 + rnd) << 56) | 0x80), v8(1)))
                done.append(True)
                return
            k = 0
            while not done:
                got = yield from cl.get(co, be(((0x33 + now[0]) << 56) | 0xFF))
                if got != v8(0xFF):
                    misses.append(got)
                k += 1
                yield (7 * i + 37 * k) % 211 + 1        # a phase that drifts against the compactions

        r.each(body)
        assert r.clients[0].statistics().compactions == rounds
        assert bool(misses) == torn, misses[:3]


def test_the_local_lock_table_shares_reads_and_combines_writes_of_a_hot_key():
    with rig(DOLPHIN, compute_threads=4, coroutines=4, options=RAW) as r:
        k = be(0x42)
        assert r.op("insert", k, v8(0)) is True
        vals = [v8(i + 1) for i in range(16)]

        def upd(cl, co, i):
            return (yield from cl.update(co, k, vals[i]))

        assert r.each(upd) == [True] * 16
        assert r.op("get", k) in vals

        def get(cl, co, i):
            return (yield from cl.get(co, k))

        assert len(set(r.each(get))) == 1
        st = [c.statistics() for c in r.clients]
        assert sum(s.write_handover for s in st) > 0 and sum(s.read_handover for s in st) > 0
    with rig(DOLPHIN, compute_threads=4, coroutines=4, options={**RAW, "local_lock": False}) as r:
        assert r.op("insert", be(0x42), v8(0)) is True
        assert r.each(lambda cl, co, i: cl.update(co, be(0x42), v8(i + 1))) == [True] * 16
        assert all(c.statistics().write_handover == 0 for c in r.clients)


def test_alloc_align_gives_nodes_whole_256_byte_slots_and_leaves_their_size():
    """As Dolphin's code: ART nodes (here the special node, a NODE_16 of 144 B) start at 256-byte
    boundaries, leaves (1088 B) are allocated unaligned; the tree answers the same."""
    keys = [(0xAB << 56) | (0x42 << 8) | b for b in range(256)]
    used = {}
    for align in (64, 256):
        with rig(DOLPHIN, options={**RAW, "alloc_align": align}) as r:
            for i, k in enumerate(keys):
                assert r.op("insert", be(k), v8(i)) is True
            assert all(r.op("get", be(k)) == v8(i) for i, k in enumerate(keys))
            st = r.clients[0].statistics()
            assert st.special_nodes == 1
            assert r.clients[0].tree.units_for(NODE_16) == (4 if align == 256 else 3)
            used[align] = sum(c.statistics().memory_bytes for c in r.clients)
    assert used[256] - used[64] == 256 - 192                  # the one special node; leaves unchanged
    with pytest.raises(ValueError, match="alloc_align = 96 is not a multiple of 64"):
        with rig(DOLPHIN, options={**RAW, "alloc_align": 96}):
            pass
