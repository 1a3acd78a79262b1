"""SMART-BT (nodes/systems/smart_bt/): Sherman semantics, speculative hits after warm-up read
64 B per get instead of a 1 KB leaf, and stale cache entries (split, delete, line reused, key
re-inserted) are detected by the line validation and answered correctly."""

from __future__ import annotations

import contextlib
import random

from cluster.correctness.conformance import rig
from shm.sim.env import Environment
from nodes.systems.sherman.layout import LINE, NODE_BYTES
from nodes.systems.smart_bt import SmartBTStats, SmartBTSystem, SpecCache
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec
from shm.profile import load_profile
from shm.segment import new_prefix
from shm.verbs import VerbsHost
from workloads.keys import key_bytes


def _k(i):
    return key_bytes(i, 8)


def _v(i, ver=1, size=16):
    return (b"%d:%d:" % (i, ver)).ljust(size, b"x")


@contextlib.contextmanager
def two_nodes(options=None):
    """Two compute nodes (each its own speculative cache), one client each, two memory nodes."""
    opts = SmartBTSystem.check_options(dict(options or {}), "test")
    specs = [NodeSpec("cn0", "compute", 32 << 20), NodeSpec("cn1", "compute", 32 << 20),
             NodeSpec("mn0", "memory", 64 << 20), NodeSpec("mn1", "memory", 64 << 20)]
    fabric = Fabric.create(load_profile("cx6-200g"), specs, prefix=new_prefix())
    try:
        layout = SmartBTSystem.setup(fabric, [2, 3], opts, 10_000)
        env = Environment(seed=3)
        host = VerbsHost(fabric, env)
        pairs = []
        for name in ("cn0", "cn1"):
            t = NodeRdma(host, name).thread()
            pairs.append((SmartBTSystem.client(fabric, layout, t, opts), t.coroutine()))
        yield env, pairs
    finally:
        fabric.close()


def run(env, gen):
    p = env.process(gen)
    env.run()
    assert not p.is_alive
    return p.value


def test_registered_with_smart_defaults_and_options():
    from nodes.systems import get_system
    assert get_system("smart-bt") is SmartBTSystem
    assert SmartBTSystem.smart_defaults["all"] is True
    names = [o.name for o in SmartBTSystem.options]
    assert "spec_cache" in names and "cache_nodes" in names


def test_semantics_with_splits_and_scans():
    ids = list(range(1500))
    random.Random(2).shuffle(ids)
    with rig(SmartBTSystem) as r:
        def body():
            c, co = r.client, r.co
            for i in ids:
                assert (yield from c.insert(co, _k(i), _v(i)))
            for i in ids[:100]:
                assert not (yield from c.insert(co, _k(i), _v(i, 2)))
            for i in ids[::3]:
                assert (yield from c.update(co, _k(i), _v(i, 3, 40 + i % 100)))   # some out of line
            for i in ids[1::7]:
                assert (yield from c.delete(co, _k(i)))
            assert not (yield from c.update(co, _k(99_999), b"x"))
            gone = set(ids[1::7])
            updated = set(ids[::3])
            for _ in range(2):                           # second pass: from the speculative cache
                for i in ids:
                    want = None if i in gone else _v(i, 3, 40 + i % 100) if i in updated else _v(i)
                    assert (yield from c.get(co, _k(i))) == want, i
            pairs = yield from c.scan(co, _k(0), 50)
            assert [p[0] for p in pairs] == sorted(p[0] for p in pairs) and len(pairs) == 50
        r.run(body())
        s = r.client.statistics()
        assert isinstance(s, SmartBTStats) and s.leaf_splits > 50 and s.spec_hits > 1000


def test_speculative_hits_read_a_line_instead_of_a_leaf():
    n = 800

    def measure(options):
        with rig(SmartBTSystem, options=options) as r:
            c, co = r.client, r.co

            def load():
                for i in range(n):
                    yield from c.insert(co, _k(i), _v(i))
                for i in range(n):                       # warm-up: every key's line is cached
                    assert (yield from c.get(co, _k(i))) == _v(i)
            r.run(load())
            before, verbs0, t0 = c.statistics(), r.threads[0].statistics().verbs, r.env.now

            def reads():
                for i in range(n):
                    assert (yield from c.get(co, _k(i))) == _v(i)
            r.run(reads())
            after = c.statistics()
            return (after.read_bytes - before.read_bytes, after.spec_hits - before.spec_hits,
                    r.threads[0].statistics().verbs - verbs0, r.env.now - t0)

    spec_bytes, hits, spec_verbs, _ = measure({})
    leaf_bytes, no_hits, leaf_verbs, _ = measure({"spec_cache": 0})
    assert hits == n and no_hits == 0
    assert spec_bytes == n * LINE                        # one 64-byte READ per get
    assert leaf_bytes >= n * NODE_BYTES                  # Sherman: the 1 KB leaf (+ cache misses)
    assert spec_verbs == n <= leaf_verbs


def test_stale_entries_after_split_delete_and_reinsert_are_detected():
    with two_nodes() as (env, ((a, ca), (b, cb))):
        def body():
            for i in range(10):                          # one leaf, not full
                assert (yield from b.insert(cb, _k(i * 10), _v(i)))
            for i in range(10):
                assert (yield from a.get(ca, _k(i * 10))) == _v(i)     # a caches the lines
            s0 = a.statistics()
            assert s0.spec_fills == 10
            # delete by the other node: a's entry is stale (line no longer used)
            assert (yield from b.delete(cb, _k(30)))
            assert (yield from a.get(ca, _k(30))) is None
            # the freed line is reused by another key: key mismatch
            assert (yield from a.get(ca, _k(40))) == _v(4)            # re-cache a neighbour
            assert (yield from b.insert(cb, _k(35), b"other"))
            assert (yield from a.get(ca, _k(35))) == b"other"
            # re-insert of the deleted key (elsewhere in the leaf): found by the fallback
            assert (yield from b.insert(cb, _k(30), b"back"))
            assert (yield from a.get(ca, _k(30))) == b"back"
            # updates by the other node are seen through the cached line (content, not ev)
            assert (yield from b.update(cb, _k(50), b"new"))
            assert (yield from a.get(ca, _k(50))) == b"new"
            s1 = a.statistics()
            # fill the leaf and split it several times: every cached line of it is stale (nv)
            for i in range(100, 160):
                assert (yield from b.insert(cb, _k(i), _v(i)))
            assert b.statistics().leaf_splits >= 3
            inv = a.statistics().spec_invalidations
            for i in range(10):
                want = {30: b"back", 50: b"new"}.get(i * 10, _v(i))
                assert (yield from a.get(ca, _k(i * 10))) == want
            s2 = a.statistics()
            assert s2.spec_invalidations - inv >= 5          # moved or re-versioned by the splits
            for i in range(10):                              # refreshed: hits again
                yield from a.get(ca, _k(i * 10))
            s3 = a.statistics()
            assert s3.spec_hits - s2.spec_hits == 10
            return s0, s1
        s0, s1 = run(env, body())
        assert s1.spec_invalidations - s0.spec_invalidations >= 1
        assert s1.spec_hits - s0.spec_hits >= 1


def test_writes_fill_the_cache_and_deletes_drop_it():
    with rig(SmartBTSystem) as r:
        c, co = r.client, r.co

        def body():
            assert (yield from c.insert(co, _k(1), _v(1)))
            assert (yield from c.get(co, _k(1))) == _v(1)
            assert c.statistics().spec_hits == 1
            assert (yield from c.delete(co, _k(1)))
            assert (yield from c.get(co, _k(1))) is None
            s = c.statistics()
            assert s.spec_misses == 1 and s.spec_invalidations == 0
        r.run(body())


def test_spec_cache_is_direct_mapped():
    sc = SpecCache(1)                       # one slot: every key maps to it, a fill overwrites
    assert sc.put(b"a" * 8, 64, 1) == 0 and sc.get(b"a" * 8) == (64, 1)
    assert sc.put(b"a" * 8, 128, 2) == 0 and sc.get(b"a" * 8) == (128, 2)    # same key: no eviction
    assert sc.put(b"b" * 8, 192, 1) == 1 and sc.get(b"a" * 8) is None and sc.get(b"b" * 8) == (192, 1)
    sc.drop(b"a" * 8)                       # a key not in its slot: the slot's owner stays
    assert sc.get(b"b" * 8) == (192, 1)
    sc.drop(b"b" * 8)
    assert sc.get(b"b" * 8) is None
    assert SpecCache(0).put(b"a" * 8, 64, 1) == 0 and SpecCache(0).get(b"a" * 8) is None


def test_spec_cache_spreads_sequential_keys():
    sc = SpecCache(1000)
    keys = [i.to_bytes(8, "little") for i in range(1000)]
    evicted = sum(sc.put(k, 64 * i, 1) for i, k in enumerate(keys))
    # random placement keeps ~1 - 1/e of 1000 keys in 1000 slots; a modulo of sequential keys would keep all
    assert 550 < len(sc.slots) < 720 and evicted == 1000 - len(sc.slots)
