"""PD3's preload, key set by key set: each bulk path leaves exactly the state its per-key path leaves.

An experiment point loads 10^5..10^6 keys before its run (``nodes.systems.pd3.system.preload``), so
every step of it takes the whole key set at once: the keys' hash (``key64_words``), the slots
(``HashMapHost.new_slots``), the records (``write_records``), the server's key map
(``KeyDirectory.apply_writes``), the cache (``load_cached_records``, the hash map's and the Garnet
log's) and the Host View (``insert_all``). The reproduction's numbers must not move, so each is
compared here with the per-key calls it stands for on small random inputs (duplicates included):
the same memory bytes, maps, counters, cache order and Host View tables; and the whole preload
with the key-by-key one it replaced.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nodes.systems.lib.hashing import hash64, hash64_words
from nodes.systems.pd3 import hashmap as hm
from nodes.systems.pd3.garnet import HybridLogHost
from nodes.systems.pd3.host_view import FULL, CuckooSet, HostView
from nodes.systems.pd3.parsers import RESERVED_KEY, WRITE, KeyDirectory
from nodes.systems.pd3.system import preload
from shm.profile import load_profile

CPU = load_profile("bf3").cpu


def random_words(rng, n: int) -> np.ndarray:
    """Random u64 keys with the edge words and some repeats among them."""
    w = rng.integers(0, 1 << 64, size=n, dtype=np.uint64, endpoint=False)
    w[:3] = (0, 1, (1 << 64) - 2)
    r = n // 8
    w[n - r:] = rng.choice(w[:n - r], r)
    return w


def make_map(store=hm.HashMapHost, items=64, region=64, slot_bytes=32):
    return store(cache_items=items, slot_bytes=slot_bytes, region=region, mode="pd3", cpu=CPU)


def map_state(m) -> dict:
    """Everything a preload sets on the host's map, ordered containers as lists."""
    out = {"slot": list(m.slot.items()), "owner": list(m.owner.items()), "live": sorted(m.live),
           "next_slot": m.next_slot, "free_slots": list(m.free_slots), "cache": list(m.cache.items()),
           "dirty": sorted(m.dirty), "dropped": list(m.dropped), "flushing": dict(m.flushing), "n": dict(m.n)}
    if isinstance(m, HybridLogHost):
        out.update(log=list(m.log), seq_of=list(m.seq_of.items()), tail=m.tail)
    return out


# -- the keys' hash -------------------------------------------------------------------------------------

def test_hash64_words_is_hash64_of_each_words_little_endian_bytes():
    w = random_words(np.random.default_rng(1), 2000)
    out = np.empty_like(w)
    hash64_words(w, out)
    assert out.tolist() == [hash64(int(x).to_bytes(8, "little")) for x in w]


def test_key64_words_is_key64_of_each_id():
    ids = random_words(np.random.default_rng(2), 2000)
    assert hm.key64_words(ids).tolist() == [hm.key64(int(x).to_bytes(8, "little")) for x in ids]
    assert hm.key64_words(ids.astype(np.int64) & 0x7FFF).tolist() == \
        [hm.key64(int(x & 0x7FFF).to_bytes(8, "little")) for x in ids.astype(np.int64)]


def test_key64_words_folds_the_all_ones_hash_as_key64(monkeypatch):
    monkeypatch.setattr(hm, "hash64", lambda key: hm.NO_KEY)
    monkeypatch.setattr(hm, "hash64_words", lambda words, out: out.fill(hm.NO_KEY))
    ids = np.arange(4, dtype=np.uint64)
    assert hm.key64_words(ids).tolist() == [hm.key64(int(i).to_bytes(8, "little")) for i in ids] == \
        [hm.NO_KEY - 1] * 4


# -- slots, records, the server's key map --------------------------------------------------------------------

@pytest.mark.parametrize("setup", ["distinct", "fresh", "mapped", "freed"])
def test_new_slots_are_new_slot_key_by_key(setup):
    rng = np.random.default_rng(3)
    keys = random_words(rng, 500).tolist()
    if setup == "distinct":                    # a preload's: no repeats, an empty map
        keys = list(dict.fromkeys(keys))
    a, b = make_map(), make_map()
    for m in (a, b):
        if setup in ("mapped", "freed"):       # some keys of the batch already have slots
            for k in keys[100:140] + [7, 8, 9]:
                m.new_slot(k)
        if setup == "freed":                   # and freed slots wait on the stack
            m.free_slots += [2, 40, 11]
    assert a.new_slots(keys) == [b.new_slot(k) for k in keys]
    assert map_state(a) == map_state(b)


@pytest.mark.parametrize("run", [False, True])
@pytest.mark.parametrize("value", [b"v" * 8, b"", bytes(range(20))])
def test_write_records_gives_the_bytes_of_encode_record_per_slot(value, run):
    rng = np.random.default_rng(4)
    region, slot_bytes = 40, -(-(hm.REC_HEADER + len(value) + 5) // 8) * 8
    keys = random_words(rng, 300)
    m = make_map(region=region, slot_bytes=slot_bytes)
    slots = np.array(m.new_slots(keys.tolist()), dtype=np.int64)
    if run:                                    # distinct keys: slots 0, 1, 2, ... (written as a slice)
        keys, slots = np.unique(keys), np.arange(np.unique(keys).size)
    noise = rng.integers(0, 256, size=region + (slots.max() + 2) * slot_bytes, dtype=np.uint8)
    bulk, per_key = noise.copy(), noise.copy()       # bytes around the records must stay as they were
    hm.write_records(bulk, region, slot_bytes, slots, keys, value)
    for k, s in zip(keys.tolist(), slots.tolist()):
        rec = hm.encode_record(k, value)
        o = region + s * slot_bytes
        per_key[o:o + len(rec)] = np.frombuffer(rec, np.uint8)
    assert bulk.tobytes() == per_key.tobytes()


def test_write_records_refuses_what_the_memory_or_a_slot_cannot_hold():
    mem = np.zeros(256, np.uint8)
    with pytest.raises(ValueError, match="does not fit"):
        hm.write_records(mem, 0, 16, np.array([0]), np.array([1], np.uint64), b"v" * 8)
    with pytest.raises(ValueError, match="outside"):
        hm.write_records(mem, 0, 32, np.array([8]), np.array([1], np.uint64), b"v" * 8)


def directory_state(d: KeyDirectory, keys) -> tuple:
    """The statistics, then where every key is (looked up: the same lookups on both)."""
    st = d.statistics()
    locs = [d.lookup(k) for k in keys]
    return st, locs, [type(loc) for loc in locs], [type(x) for loc in locs if loc for x in loc]


def test_apply_writes_is_apply_key_by_key():
    rng = np.random.default_rng(5)
    keys = random_words(rng, 400)
    offsets = rng.integers(0, 1 << 40, size=keys.size, dtype=np.uint64)
    probe = keys.tolist() + [12345]

    def mapped() -> KeyDirectory:              # a map with entries already: some keys move
        d = KeyDirectory()
        d.apply([(int(k), WRITE) for k in keys[:50]], 0, 8, 24)
        return d

    per_key = mapped()
    for k, o in zip(keys.tolist(), offsets.tolist()):
        per_key.apply([(k, WRITE)], 3, o, 24)
    want = directory_state(per_key, probe)
    # uint64 arrays, and plain lists and int64 arrays (checked the same)
    for ks, offs in ((keys, offsets), (keys.tolist(), offsets.astype(np.int64))):
        bulk = mapped()
        bulk.apply_writes(ks, 3, offs, 24)
        assert directory_state(bulk, probe) == want


@pytest.mark.parametrize("keys, offsets", [
    (np.array([1, RESERVED_KEY], np.uint64), np.array([0, 8])),
    (np.array([1, -2]), np.array([0, 8])),
    ([1, True], [0, 8]),
    ([1, 2.0], [0, 8]),
    (np.array([1, 2], np.uint64), np.array([0, -8])),
    (np.array([1, 2], np.uint64), np.array([0])),
])
def test_apply_writes_refuses_what_apply_refuses_and_applies_nothing(keys, offsets):
    d = KeyDirectory()
    with pytest.raises(ValueError):
        d.apply_writes(keys, 0, offsets, 24)
    assert len(d) == 0 and d.statistics().writes == 0


# -- the cache ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("store", [hm.HashMapHost, HybridLogHost])
@pytest.mark.parametrize("items", [1000, 150, 40])
def test_load_cached_records_is_load_cached_key_by_key(store, items):
    rng = np.random.default_rng(6)
    keys = random_words(rng, 200).tolist()
    a, b = make_map(store, items), make_map(store, items)
    for m in (a, b):                           # a log with records in it already
        for k in keys[:30:3]:
            m.load_cached(k, b"old")
    a.load_cached_records(keys, b"v")
    for k in keys:
        b.load_cached(k, b"v")
    assert map_state(a) == map_state(b)


# -- the Host View ------------------------------------------------------------------------------------------

def cuckoo_state(s: CuckooSet) -> tuple:
    return s.table.tobytes(), s.statistics()


def test_cuckoo_insert_all_is_insert_key_by_key_up_to_full():
    rng = np.random.default_rng(7)
    keys = random_words(rng, 300)              # 300 keys, repeats among them, into 64 slots: walks and FULL
    a, b = CuckooSet(16, seed=3, max_depth=8), CuckooSet(16, seed=3, max_depth=8)
    status = a.insert_all(keys)
    assert status.tolist() == [int(b.insert(k)) for k in keys.tolist()]
    assert (status == FULL).any() and a.statistics().displacements > 0
    assert cuckoo_state(a) == cuckoo_state(b)
    more = random_words(rng, 40)               # the walk's random state moved on alike
    a.remove(int(keys[0]))
    b.remove(int(keys[0]))
    assert a.insert_all(more).tolist() == [int(b.insert(k)) for k in more.tolist()]
    assert cuckoo_state(a) == cuckoo_state(b)


def test_host_view_insert_all_is_insert_key_by_key():
    rng = np.random.default_rng(8)
    keys = random_words(rng, 600)
    a, b = HostView(64, 2, seed=5, max_depth=16), HostView(64, 2, seed=5, max_depth=16)
    assert a.insert_all(keys).tolist() == [int(b.insert(k)) for k in keys.tolist()]
    assert [cuckoo_state(s) for s in a.shards] == [cuckoo_state(s) for s in b.shards]
    assert a.statistics() == b.statistics() and a.statistics().inserts > 0
    with pytest.raises(ValueError, match="empty-slot marker"):
        a.insert_all(np.array([1, (1 << 64) - 1], np.uint64))


# -- the whole preload --------------------------------------------------------------------------------------

def preload_key_by_key(directory: dict, fabric, keys, value: bytes, *, rng, hottest_first: bool = False):
    """The preload as it was, one key at a time: the reference the bulk one must match."""
    app = directory["pd3.host"]
    m = app.map
    mem = fabric.memory[app.mem].host
    srv = directory.get("pd3.server")
    keys = list(keys)
    for k in keys:
        m.live.add(k)
        s = m.new_slot(k)
        rec = hm.encode_record(k, value)
        o = m.region + s * m.slot_bytes
        mem[o:o + len(rec)] = np.frombuffer(rec, np.uint8)
        if srv is not None and srv.directory is not None:
            srv.directory.apply([(k, 1)], 0, o, len(rec))
    n = min(m.cache_items, len(keys))
    if hottest_first:
        cached = keys[:n]
    else:
        cached = [keys[i] for i in rng.choice(len(keys), n, replace=False)] if n < len(keys) else keys
    for k in cached:
        m.load_cached(k, value)
    dpu = directory.get("pd3.dpu")
    if dpu is not None:
        for k in cached:
            dpu.host_view.insert(k)


def rack(store, items: int, mem_bytes: int, seed: int, *, server=True, dpu=True):
    """What preload touches of a co-located rack: the host's map, the memory node's bytes, the
    server's key map, the DPU's Host View."""
    app = SimpleNamespace(map=make_map(store, items, region=128, slot_bytes=24), mem=1)
    fabric = SimpleNamespace(memory={1: SimpleNamespace(host=np.random.default_rng(seed).integers(
        0, 256, size=mem_bytes, dtype=np.uint8))})
    directory = {"pd3.host": app}
    if server:
        directory["pd3.server"] = SimpleNamespace(directory=KeyDirectory())
    if dpu:
        directory["pd3.dpu"] = SimpleNamespace(host_view=HostView(32, 2, seed=seed))
    return directory, fabric


@pytest.mark.parametrize("store", [hm.HashMapHost, HybridLogHost])
@pytest.mark.parametrize("hottest_first", [False, True])
@pytest.mark.parametrize("items, server, dpu", [(60, True, True), (5000, True, True), (60, False, False)])
@pytest.mark.parametrize("repeats", [False, True])
def test_preload_leaves_the_state_of_the_key_by_key_preload(store, hottest_first, items, server, dpu, repeats):
    ids = np.random.default_rng(9).permutation(700).astype(np.uint64) + np.uint64(1)
    keys = hm.key64_words(ids)
    if repeats:                                # repeated keys: their slots and records are the first's
        keys[-5:] = keys[:5]
    states = []
    for load, arg in ((preload, keys), (preload_key_by_key, keys.tolist())):
        directory, fabric = rack(store, items, 128 + 800 * 24, seed=10, server=server, dpu=dpu)
        load(directory, fabric, arg, b"v" * 8, rng=np.random.default_rng(11), hottest_first=hottest_first)
        st = [map_state(directory["pd3.host"].map), fabric.memory[1].host.tobytes()]
        if server:
            st.append(directory_state(directory["pd3.server"].directory, keys.tolist()))
        if dpu:
            hv = directory["pd3.dpu"].host_view
            st.append(([cuckoo_state(s) for s in hv.shards], hv.statistics()))
        states.append(st)
    assert states[0] == states[1]
