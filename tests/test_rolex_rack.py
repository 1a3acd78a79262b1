"""ROLEX on the rack (nodes/systems/rolex): bulk load, synonym chains, scans, a concurrent history,
bad keys and values. The conformance suite runs on ``rolex`` with its default options from
tests/test_conformance.py (every registered system); here it runs again on a denser layout."""

from __future__ import annotations

import random

import pytest

from cluster.correctness.checker import Op, check
from cluster.correctness.conformance import CHECKS, ConformanceFailure, rig
from nodes.systems import get_system, system_names
from nodes.systems.api import SystemGaveUp
from nodes.systems.rolex import RolexStats, RolexSystem
from workloads.keys import decode_value, value_bytes

DENSE = {"leaf_headroom": 1.0}


def _key(i: int) -> bytes:
    """Key bytes whose big-endian order (ROLEX's) is the order of ``i``."""
    return i.to_bytes(8, "big")


def _kid(key: bytes) -> int:
    """The id a history names a key by: its bytes read little-endian, as int64
    (``workloads.keys.key_bytes``, which the checker's scan order assumes)."""
    k = int.from_bytes(key, "little")
    return k - (1 << 64) if k >= 1 << 63 else k


def _val(i: int, version: int, size: int = 24) -> bytes:
    return value_bytes(i, version, size)


def _stats(r) -> RolexStats:
    total = None
    for cl in r.clients:
        s = cl.statistics()
        total = s if total is None else RolexStats(*(a + b for a, b in zip(total, s)))
    return total


def test_rolex_is_a_built_in_with_scans():
    assert "rolex" in system_names()
    assert get_system("rolex") is RolexSystem and RolexSystem.supports_scan


@pytest.mark.parametrize("name", list(CHECKS))
def test_conformance_on_a_dense_layout(name):
    CHECKS[name](RolexSystem, DENSE)


@pytest.mark.parametrize("name", list(CHECKS))
def test_conformance_with_chime_s_small_leaves(name):
    """16-key leaves and eps 16 (CHIME's ROLEX configuration): splits and chains come 4x sooner."""
    CHECKS[name](RolexSystem, {**DENSE, "span": 16, "eps": 16})


def _bulk(r, ids, size=24):
    RolexSystem.bulk_load(r.fabric, r.layout, [(_key(i), _val(i, 0, size)) for i in ids])


def test_bulk_load_then_get_every_key():
    rng = random.Random(5)
    ids = rng.sample(range(1 << 62), 3000)
    with rig(RolexSystem, capacity=8000) as r:
        sizes = {i: 8 + i % 90 for i in ids}
        RolexSystem.bulk_load(r.fabric, r.layout, [(_key(i), _val(i, 0, sizes[i])) for i in ids])

        def body():
            bad = []
            for i in ids:
                got = yield from r.client.get(r.co, _key(i))
                if got != _val(i, 0, sizes[i]):
                    bad.append(i)
            for i in rng.sample(range(1 << 62), 200):
                if i not in sizes and (yield from r.client.get(r.co, _key(i))) is not None:
                    bad.append(i)
            return bad

        assert r.run(body()) == []
        s = r.client.statistics()
        assert s.cache_refreshes == 1 and s.cache_bytes > 0
        assert s.gets <= s.candidate_leaves <= 3 * s.gets          # eps 32, full leaves: 1 to 3 candidates
        assert s.synonym_hops == 0                                  # nothing inserted: no chains


def test_bulk_load_refuses_a_loaded_index_a_duplicate_and_a_bad_key_in_one_line():
    with rig(RolexSystem) as r:
        with pytest.raises(SystemGaveUp, match="twice") as e:
            RolexSystem.bulk_load(r.fabric, r.layout, [(_key(1), _val(1, 0)), (_key(1), _val(1, 1))])
        with pytest.raises(SystemGaveUp, match="exactly 8 bytes") as e:
            RolexSystem.bulk_load(r.fabric, r.layout, [(b"abc", _val(1, 0))])
        assert "\n" not in e.value.one_line()
        assert r.op("insert", _key(7), _val(7, 1)) is True
        with pytest.raises(SystemGaveUp, match="empty index"):
            _bulk(r, [1, 2])


def test_a_bad_key_size_is_one_clear_line():
    with rig(RolexSystem) as r:
        for op, args in (("get", (b"short",)), ("insert", (b"0123456789", _val(1, 1))), ("scan", (b"", 3))):
            with pytest.raises(ConformanceFailure) as e:
                r.op(op, *args)
            msg = str(e.value)
            assert "SystemGaveUp" in msg and "ROLEX keys are exactly 8 bytes" in msg and "\n" not in msg


def test_scans_and_gets_across_synonym_chains():
    """Full leaves (fill 64): inserts between the loaded keys split them into synonym chains;
    scans and gets read through the chains; deletes that empty synonym leaves unlink them."""
    loaded = [10 * i for i in range(256)]
    with rig(RolexSystem, capacity=4000) as r:
        _bulk(r, loaded)
        live = {_key(i): _val(i, 0) for i in loaded}
        for i in range(5, 2560, 10):
            assert r.op("insert", _key(i), _val(i, 1)) is True
            live[_key(i)] = _val(i, 1)
        for i in range(3, 700, 10):                                  # a stretch with long chains
            assert r.op("insert", _key(i), _val(i, 2)) is True
            live[_key(i)] = _val(i, 2)
        s = r.client.statistics()
        assert s.synonym_leaves >= 8
        order = sorted(live)
        for start in (0, 3, 4, 5, 600, 1234, 2555, 2600, (1 << 64) - 1):
            for count in (1, 7, 100, 2000):
                want = [(k, live[k]) for k in order if k >= _key(start)][:count]
                got = [(bytes(k), bytes(v)) for k, v in r.op("scan", _key(start), count)]
                assert got == want, (start, count)
        assert r.client.statistics().synonym_hops > s.synonym_hops
        for k, v in live.items():
            assert r.op("get", k) == v
        for i in range(0, 700):                                      # empties whole synonym leaves
            if _key(i) in live:
                assert r.op("delete", _key(i)) is True
                del live[_key(i)]
        assert r.client.statistics().unlinked_leaves > 0
        order = sorted(live)
        assert [bytes(k) for k, _ in r.op("scan", _key(0), 50)] == order[:50]
        for i in range(0, 700, 7):
            assert r.op("insert", _key(i), _val(i, 3)) is True
            live[_key(i)] = _val(i, 3)
        order = sorted(live)
        assert [(bytes(k), bytes(v)) for k, v in r.op("scan", _key(0), 300)] == [(k, live[k]) for k in order[:300]]


def test_concurrent_history_over_synonym_chains_is_linearizable():
    """4 threads x 4 coroutines on 512 keys of 4 full leaves: gets, inserts, updates, deletes and
    scans racing through splits, chain walks and unlinks; the history is linearizable and every
    scan is ordered."""
    loaded = [2 * i for i in range(256)]
    space = list(range(512))
    ops: list[Op] = []
    bad_scans = []
    with rig(RolexSystem, compute_threads=4, coroutines=4, capacity=4000, seed=11) as r:
        _bulk(r, loaded)
        initial = {_kid(_key(i)): 0 for i in loaded}
        env = r.env

        def body(cl, co, c):
            rng = random.Random(c)
            for n in range(70):
                i = rng.choice(space)
                k = _key(i)
                version = 1 + c * 1000 + n
                kind = rng.choice(("get", "get", "insert", "insert", "update", "delete", "delete", "scan"))
                call = env.now
                if kind == "scan":
                    count = rng.randrange(1, 40)
                    got = yield from cl.scan(co, k, count)
                    keys = [bytes(kk) for kk, _ in got]
                    if keys != sorted(set(keys)) or (keys and keys[0] < k) or len(keys) > count:
                        bad_scans.append((i, count, keys))
                    result = tuple((_kid(bytes(kk)), decode_value(bytes(v))[1]) for kk, v in got)
                    ops.append(Op(c, "scan", _kid(k), count, True, call, env.now, result))
                elif kind == "get":
                    got = yield from cl.get(co, k)
                    ops.append(Op(c, "get", _kid(k), None if got is None else decode_value(got)[1], True, call,
                                  env.now))
                elif kind == "delete":
                    ok = yield from cl.delete(co, k)
                    ops.append(Op(c, "delete", _kid(k), None, ok, call, env.now))
                else:
                    ok = yield from getattr(cl, kind)(co, k, _val(i, version, 16 + version % 40))
                    ops.append(Op(c, kind, _kid(k), version, ok, call, env.now))

        r.each(body)
        s = _stats(r)
    assert not bad_scans, bad_scans[:3]
    assert s.synonym_leaves > 0 and s.synonym_hops > 0 and s.lock_retries > 0
    res = check(ops, initial=initial, time_limit_s=30)
    assert res.verdict == "ok", res.explain()


def test_inline_values_are_eight_bytes_exactly():
    with rig(RolexSystem, options={"values": "inline"}) as r:
        RolexSystem.bulk_load(r.fabric, r.layout, [(_key(i), (i * 3).to_bytes(8, "little")) for i in range(500)])
        assert r.op("get", _key(17)) == (51).to_bytes(8, "little")
        assert r.op("update", _key(17), b"\xff" * 8) is True
        assert r.op("get", _key(17)) == b"\xff" * 8
        assert r.op("scan", _key(498), 5) == [(_key(498), (1494).to_bytes(8, "little")),
                                             (_key(499), (1497).to_bytes(8, "little"))]
        with pytest.raises(ConformanceFailure, match="8-byte values") as e:
            r.op("insert", _key(1000), b"sixteen bytes!!!")
        assert "\n" not in str(e.value)
        assert r.client.statistics().blocks_written == 0


def test_footprint_is_what_setup_carves_at_most():
    opts = RolexSystem.check_options({"values": "inline"}, "test")
    with rig(RolexSystem, options=opts, capacity=50_000) as r:
        assert 0 < RolexSystem.footprint(opts, 50_000, 8, 8) <= r.layout["setup_bytes"]


def _readers_against_shifting_writers(options: dict) -> tuple[int, int]:
    """12 coroutines GET the 40 loaded keys of one leaf while 4 insert and delete the keys between
    them (every write-back shifts the leaf's keys): (wrong gets, torn snapshots caught)."""
    with rig(RolexSystem, compute_threads=4, coroutines=4, capacity=4000, seed=3, options=options) as r:
        _bulk(r, [2 * i for i in range(40)])

        def body(cl, co, c):
            rng = random.Random(c)
            bad = 0
            for _ in range(400):
                if c % 4 == 1:
                    i = 2 * rng.randrange(40) + 1
                    if not (yield from cl.insert(co, _key(i), _val(i, 1))):
                        yield from cl.delete(co, _key(i))
                else:
                    i = 2 * rng.randrange(40)
                    bad += (yield from cl.get(co, _key(i))) != _val(i, 0)
            return bad

        bad = sum(r.each(body))
        return bad, _stats(r).torn_reads


def test_torn_leaf_snapshots_are_caught_by_the_checksum():
    """A 1 KiB leaf READ racing a write-back mixes lines of both: the checksum in the meta word
    catches it (torn_reads > 0, every get right); the deliberate fault that skips the check
    returns wrong answers under the same interleavings."""
    bad, torn = _readers_against_shifting_writers({})
    assert bad == 0 and torn > 0
    bad, _ = _readers_against_shifting_writers({"fault": "skip-checksum"})
    assert bad > 0
