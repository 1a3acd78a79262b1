"""Aceso (nodes/systems/aceso, docs/aceso.md): verbs per operation, the address cache, the lost-CAS
update, parity by XOR of delta blocks, differential checkpoints, the bulk load, bad options, and
crashes at Aceso's failpoints leaving a linearizable history."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

from cluster.correctness.checker import check
from cluster.correctness.conformance import rig
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from nodes.systems import get_system
from nodes.systems.aceso import AcesoSystem, memory_node_stats
from nodes.systems.aceso.cache import AddrCache
from nodes.systems.aceso.layout import (
    INVALID_VERSION, auto_code, code_fits, decode_trailer, encode_record, record_location, slot_version,
    trailer_offset, versioned_word,
)
from nodes.systems.aceso.server import _STATES, index_words, replica_words
from shm import failpoints
from shm.coro import VerbBatch


def _k(i: int) -> bytes:
    return b"k%07d" % i


@contextlib.contextmanager
def _verbs():
    """(verb, bytes) of every verb posted, and the ``sync`` rounds."""
    log = []
    read, write, cas, sync = VerbBatch.read, VerbBatch.write, VerbBatch.cas, VerbBatch.sync
    with mock.patch.object(VerbBatch, "read", lambda co, a, n: log.append(("READ", n)) or read(co, a, n)), \
            mock.patch.object(VerbBatch, "write", lambda co, a, d: log.append(("WRITE", len(d))) or write(co, a, d)), \
            mock.patch.object(VerbBatch, "cas", lambda co, *a: log.append(("CAS", 8)) or cas(co, *a)), \
            mock.patch.object(VerbBatch, "sync", lambda co: log.append(("sync", 0)) or sync(co)):
        yield log


def _ops(log):
    return [v for v in log if v[0] != "sync"], sum(1 for v in log if v[0] == "sync")


def _state(r, pos):
    return _STATES[(r.layout["nonce"], r.layout["memory_nodes"][pos])]


def test_registered_and_layout_encodings():
    assert get_system("aceso") is AcesoSystem
    w = versioned_word(0xAB, 16, 3, 0x12300, 0x55)
    assert slot_version(w) == 0x55 and record_location(w) == (3, 0x12300, 16) and w >> 56 == 0xAB
    rec = encode_record(b"key", b"value", 7, 2, 1, 0x4008)
    assert decode_trailer(rec, trailer_offset(3, 5)) == (7, 2, 1, 0x4008)
    # Aceso's rule: two XOR lines over n - 2 data slabs (5 nodes: codeK = 3), a mirror on 2, none on 1
    assert auto_code(5) == (3, 2) and auto_code(3) == (1, 2) and auto_code(2) == (1, 1) and auto_code(1) == (1, 0)
    assert auto_code(4) == (1, 2) and code_fits(4, 2, 2) is not None      # (2 s + 2) mod 4 == 0 for s = 1


def test_bad_options_and_racks_are_one_line():
    with pytest.raises(ValueError, match="subblock_bytes = 300 is not a multiple of 256"):
        AcesoSystem.check_options({"subblock_bytes": 300}, "t.toml: system")
    with pytest.raises(ValueError, match="block_bytes = 5000 must be a multiple"):
        AcesoSystem.check_options({"block_bytes": 5000}, "t.toml: system")
    with pytest.raises(ValueError, match="unknown option"):
        AcesoSystem.check_options({"chunk_bytes": 1}, "t.toml: system")

    def spec(n):
        return SimpleNamespace(memory=SimpleNamespace(count=n), profile=SimpleNamespace(udp=object()),
                               profile_name="cx3-56g")
    opts = AcesoSystem.check_options({}, "x")
    for n in (1, 2, 3, 5):
        AcesoSystem.check_rack(opts, spec(n))                    # auto fits every rack
    for given, n, match in (({"parity": 2}, 2, "parity = 2 needs 3 memory nodes"),
                            ({"ckpt_replicas": 2}, 2, "ckpt_replicas = 2 needs 3 memory nodes"),
                            ({"code_k": 3, "parity": 1}, 3, "needs 4 distinct memory nodes"),
                            ({"code_k": 2, "parity": 2}, 4, "slab 1 on one node")):
        with pytest.raises(ValueError, match=match) as e:
            AcesoSystem.check_rack(AcesoSystem.check_options(given, "x"), spec(n))
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"datagram path \(\[udp\]\)"):
        AcesoSystem.check_rack(opts, SimpleNamespace(memory=SimpleNamespace(count=2),
                                                     profile=SimpleNamespace(udp=None), profile_name="p"))


def test_verbs_per_operation_with_the_cache():
    """docs/aceso.md's table, 3 memory nodes (two parity lines: a record goes to 3 places), 8-byte
    keys and values (one 1 KiB sub-block). Checkpoints off: their actors' WRITEs would be counted."""
    with rig(AcesoSystem, memory_nodes=3, options={"ckpt_interval_us": 0}) as r:
        assert r.layout["parity"] == 2 and r.layout["code_k"] == 1
        assert r.op("insert", _k(1), b"v1") is True                # caches the slot it committed
        with _verbs() as log:
            assert r.op("get", _k(1)) == b"v1"
        assert _ops(log) == ([("READ", 8), ("READ", 1024)], 1)     # cache hit: slot + record, one round
        with _verbs() as log:
            assert r.op("update", _k(1), b"v2") is True
        assert _ops(log) == ([("READ", 8), ("READ", 1024)] + [("WRITE", 1024)] * 3 + [("CAS", 8)], 3)
        s0 = r.client.statistics()
        # another node's update moved the slot on: this node's entry names the old record
        entry = r.client.cache.lookup(_k(1))
        new = entry.word
        assert r.op("update", _k(1), b"v3") is True
        entry.word = new
        with _verbs() as log:
            assert r.op("get", _k(1)) == b"v3"
        assert _ops(log) == ([("READ", 8), ("READ", 1024), ("READ", 1024)], 2)
        s = r.client.statistics()
        assert s.cache_moved == s0.cache_moved + 1 and s.bucket_searches == s0.bucket_searches
        # the entry has missed once in few accesses (above missRateThreash = 0.1): a hit now READs
        # the slot alone, then the record it names
        e = r.client.cache.lookup(_k(1))
        assert e.miss == 1 and not r.client.cache.read_kv(e)
        with _verbs() as log:
            assert r.op("delete", _k(1)) is True
        log_record = 8 + 8 + 16                                    # header, key, trailer
        assert _ops(log) == ([("READ", 8), ("READ", 1024)] + [("WRITE", log_record)] * 3 + [("CAS", 8)], 4)
        assert r.client.statistics().cache_kv_skipped == 1
        with _verbs() as log:                                       # not cached: RACE's bucket READs
            assert r.op("get", _k(1)) is None
        ops, rounds = _ops(log)
        assert rounds == 1 and all(v == ("READ", 128) for v in ops) and 1 <= len(ops) <= 2


def test_without_a_cache_every_lookup_reads_the_buckets():
    with rig(AcesoSystem, memory_nodes=1, options={"cache_bytes": 0}) as r:
        assert r.layout["parity"] == 0 and r.layout["ckpt_replicas"] == 0    # one node: no code, no copies
        assert r.op("insert", _k(1), b"a") is True
        with _verbs() as log:
            assert r.op("update", _k(1), b"b") is True
        ops, rounds = _ops(log)
        assert rounds == 4 and ops[-2:] == [("WRITE", 1024), ("CAS", 8)] and ("READ", 1024) in ops   # buckets | record | WRITE | CAS
        assert r.op("get", _k(1)) == b"b"
        s = r.client.statistics()
        assert s.cache_hits == s.cache_absent == 0 and s.bucket_searches == 2 and s.cache_bytes == 0


def test_address_cache_budget_and_miss_rate_threshold():
    c = AddrCache(3 * 122, 0.1)                                     # Aceso's entry of an 8-byte key
    for i in range(4):
        c.update(_k(i), 100 + i, 1)
    assert c.lookup(_k(0)) is None and c.evictions == 1 and c.bytes == 3 * 122    # FIFO within the budget
    e = c.lookup(_k(3))
    assert c.read_kv(e)
    e.acc, e.miss = 10, 2                                           # 20 % misses > 10 %: slot only
    assert not c.read_kv(e)


@pytest.mark.parametrize("overwrite", [True, False])
def test_an_update_that_loses_its_cas_is_overwritten_or_retried(overwrite):
    """Eight coroutines update one key at once: all return True; with overwrite_on_conflict (Aceso)
    the losers invalidate their records and are done, without it they retry until their CAS wins."""
    with rig(AcesoSystem, coroutines=8, options={"overwrite_on_conflict": overwrite}) as r:
        assert r.op("insert", _k(1), b"v0") is True
        assert r.each(lambda cl, co, i: cl.update(co, _k(1), b"v%d" % (i + 1))) == [True] * 8
        s = r.client.statistics()
        if overwrite:
            assert s.updates_overwritten > 0 and s.records_invalidated == s.updates_overwritten
            assert s.cas_retries == 0
        else:
            assert s.updates_overwritten == 0 and s.cas_retries > 0
        value = r.op("get", _k(1))
        assert value in {b"v%d" % i for i in range(1, 9)}
        # a loser's record carries the invalid version in its trailer (in its data block)
        if overwrite:
            st = _state(r, 0), _state(r, 1)
            host = [r.fabric.memory[m].host for m in r.layout["memory_nodes"]]
            found = 0
            for pos, s_ in enumerate(st):
                for off in s_.data_blocks:
                    for sub in range(0, r.layout["block_bytes"], 1024):
                        rec = host[pos][off + sub:off + sub + 64].tobytes()
                        if rec[:2] == b"\x08\x00" and decode_trailer(rec, trailer_offset(8, 2))[0] == INVALID_VERSION:
                            found += 1
            assert found == s.records_invalidated


def test_parity_is_the_xor_of_the_sealed_data_blocks_of_its_stripe():
    """5 memory nodes: Aceso's code (k = 3 data blocks per stripe, two XOR lines). Small blocks so
    that many seal; after the rack drains, every parity block is the XOR of its sealed members."""
    with rig(AcesoSystem, memory_nodes=5, compute_threads=2, coroutines=2, memory_bytes=16 << 20,
             options={"block_bytes": 4096, "ckpt_interval_us": 0}) as r:
        lay = r.layout
        assert (lay["code_k"], lay["parity"]) == (3, 2)
        for i in range(120):
            assert r.op("insert", _k(i), b"x" * (i % 40)) is True
        n, k = 5, 3
        host = [r.fabric.memory[m].host for m in lay["memory_nodes"]]
        st = [_state(r, p) for p in range(n)]
        seals = sum(len(s.sealed) for s in st)
        assert seals >= 20 and sum(memory_node_stats(r.fabric, lay, p).xors for p in range(n)) == 2 * seals
        checked = 0
        for q in range(n):
            for (line, row), poff in st[q].parity.items():
                want = np.zeros(4096, np.uint8)
                for s in range(k):
                    d = (q + 1 + s) % n if line == 0 else (q - 1 - s) % n
                    c = row * k + s
                    if c < len(st[d].data_blocks) and st[d].data_blocks[c] in st[d].sealed:
                        off = st[d].data_blocks[c]
                        want ^= host[d][off:off + 4096]
                        checked += 1
                assert np.array_equal(host[q][poff:poff + 4096], want), (q, line, row)
        assert checked == 2 * seals
        for i in range(120):
            assert r.op("get", _k(i)) == b"x" * (i % 40)


def test_checkpoints_copy_each_index_to_the_next_memory_nodes():
    """After writes and a drain, each memory node's checkpoint copies equal the indexes they copy;
    the work is charged to the memory nodes' cores."""
    with rig(AcesoSystem, memory_nodes=3, coroutines=4, options={"ckpt_interval_us": 20}) as r:
        lay = r.layout
        assert lay["ckpt_replicas"] == 2
        r.each(lambda cl, co, i: _writes(cl, co, i))
        for holder in range(3):
            for rank in range(2):
                sender = (holder - 1 - rank) % 3
                assert np.array_equal(replica_words(r.fabric, lay, holder, rank), index_words(r.fabric, lay, sender))
        stats = [memory_node_stats(r.fabric, lay, p) for p in range(3)]
        assert all(s.checkpoints > 0 and s.ckpt_received > 0 and s.ckpt_cpu_ns > 0 for s in stats)
        assert sum(s.ckpt_changed_words for s in stats) > 0
        mn = r.client.statistics()
        assert mn.mn_checkpoints == sum(s.checkpoints for s in stats)


def _writes(cl, co, i):
    for j in range(30):
        yield from cl.insert(co, _k(100 * i + j), b"v")
        yield from cl.update(co, _k(100 * i + j), b"w%d" % j)


def test_bulk_load_answers_as_inserts_do():
    with rig(AcesoSystem, memory_nodes=2) as r:
        pairs = [(_k(i), b"value-%d" % i * (1 + i % 9)) for i in range(500)]
        assert AcesoSystem.bulk_load(r.fabric, r.layout, iter(pairs)) == 500
        for key, value in pairs[::7]:
            assert r.op("get", key) == value
        assert r.op("insert", _k(3), b"again") is False
        assert r.op("update", _k(3), b"new") is True and r.op("get", _k(3)) == b"new"
        assert r.op("delete", _k(4)) is True and r.op("get", _k(4)) is None
    with rig(AcesoSystem, memory_nodes=2) as r:
        with pytest.raises(Exception, match="twice"):
            AcesoSystem.bulk_load(r.fabric, r.layout, [(_k(1), b"a"), (_k(1), b"b")])


def _rack(memory: int = 2):
    d = {"rack": {"name": "aceso-faults", "profile": "cx3-56g", "seed": 3},
         "compute": {"count": 1, "threads": 2, "coroutines": 4, "memory": "16MiB"},
         "memory": {"count": memory, "memory": "64MiB", "cores": 4},
         "system": {"name": "aceso"},
         "workload": {"preset": "a", "recordcount": 32, "valuesize": 32},
         "step": [{"action": "load", "bulk": False}, {"action": "run", "duration_ms": 0.6}]}
    return scenario_from_dict(d, source="aceso-faults.toml")


@pytest.fixture
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


@pytest.mark.parametrize("point", ["aceso.update.written", "aceso.update.committed", "aceso.delete.logged",
                                   "race.insert.published"])
def test_crashed_clients_leave_a_linearizable_history(point, _disarm):
    """Crash five clients at one of Aceso's crash points: their operations never return, the rest
    carries on (an update or delete left half-way leaves a record no slot names; a crash after the
    CAS leaves a committed write whose cache entry and seal never happen), and the history, the
    crashed operations "may or may not have happened", is linearizable."""
    from workloads.stress import StressWorkload
    rack = ColocatedRack(_rack(), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    failpoints.arm(point, "crash", after=5, times=5)
    rack.run()
    assert rack.nodes[0].crashed == 5
    ops = rack.history_ops
    assert sum(1 for o in ops if o.ret is None) == 5
    res = check(ops)
    assert res.verdict == "ok", res.explain()
