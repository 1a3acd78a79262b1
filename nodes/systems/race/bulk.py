"""RACE's bulk load: keys placed as inserts would place them, in compiled batches.

A load step with ``bulk = true`` (docs/rack.md) hands the keys to :meth:`RaceSystem.bulk_load`,
which calls :func:`bulk_load` here. Per key it does what an insert does, without the verbs:
hash the key, find its two combined buckets through the directory (:func:`bucket.probe`,
compiled), pick the free slot :func:`bucket.scan` picks (the combined bucket with more free
slots, its main bucket first), refuse a key already there (same fingerprint, same key bytes in
the block), write the KV block and then the committed slot word.

Why compiled: the papers' tables hold 100 M keys; per key in Python (hash, probe, scan, block,
slot: a dozen numpy and numba calls) that is 13 µs a key, 22 minutes. :func:`_place` does a batch
of keys in one numba call. Its Python source is the reference: ``_place.py_func`` runs the same
code interpreted, and ``tests/test_race.py`` checks both leave the same bytes in memory.

Memory: keys stream in (the compute node hands a generator); a batch of :data:`BATCH` keys is
flattened into two byte arrays at a time, and KV blocks come from regions taken per memory node
with ``fabric.allocate`` as batches need them.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
from numba import njit

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.hashing import hash64
from nodes.systems.lib.record import checksum32

from .bucket import MAX_MATCHES, probe_nb, scan, slot_offset_nb
from .layout import (
    BLOCK_HEADER, BUCKET_BYTES, GROUP_BYTES, NODE_SHIFT, OFFSET_MASK, UNIT, UNITS_SHIFT, WORD,
    check_item, unpack_dir_entry,
)

BATCH = 65_536                  # keys flattened and placed per call
PLACED, DUPLICATE, FULL = -1, 0, 1


@njit(cache=True)
def _place(h64s, h8s, pos_of, keys, koff, vals, voff, j0, mn, dnode, dbase, dld, mask, n_main, cursor, buf, out):
    """Place keys ``keys[koff[i]:koff[i+1]]`` with values ``vals[voff[i]:voff[i+1]]``, i = 0..n-1;
    the block of key i goes to memory node ``mn[(j0 + i) % len(mn)]`` at ``cursor`` of that
    position (advanced). ``h64s`` / ``h8s``: each memory node's host memory as words / bytes, at
    ``pos_of[fabric node]``. Returns -1, or ``2 * i + DUPLICATE`` / ``2 * i + FULL`` for the first
    key i it could not place (the keys before it are placed)."""
    half = 2 * BUCKET_BYTES // WORD
    nm = mn.shape[0]
    for i in range(koff.shape[0] - 1):
        key = keys[koff[i]:koff[i + 1]]
        klen = koff[i + 1] - koff[i]
        vlen = voff[i + 1] - voff[i]
        h = hash64(key)
        e = np.int64(h & np.uint64(mask))
        host64 = h64s[pos_of[dnode[e]]]
        # as an int64 (probe's fields are bits 16..55; numba mixes uint64 and int64 into floats)
        off_a, off_b, flags = probe_nb(np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF)), dbase[e], n_main)
        for k in range(half):
            buf[k] = host64[off_a // WORD + k]
            buf[half + k] = host64[off_b // WORD + k]
        ld = dld[e]
        header = (ld & 0xFF) | ((e & ((1 << ld) - 1)) << 8)
        r = scan(buf, 0, half, flags, np.int64(h >> np.uint64(56)), header, out)
        if r < 0:
            return 2 * i + FULL
        for k in range(r & 63):                    # same fingerprint: the same key already there?
            w = out[2 * k + 1]
            blk = h8s[pos_of[np.int64((w >> np.uint64(NODE_SHIFT)) & np.uint64(0xFF))]]
            b = np.int64(w & np.uint64(OFFSET_MASK & ~1))
            if np.int64(blk[b]) | (np.int64(blk[b + 1]) << 8) == klen:
                same = True
                for t in range(klen):
                    if blk[b + BLOCK_HEADER + t] != key[t]:
                        same = False
                        break
                if same:
                    return 2 * i + DUPLICATE
        free = (r >> 6) - 1
        if free < 0:
            return 2 * i + FULL
        # the KV block: header (key_len u16, value_len u16, checksum u32), key, value
        p = (j0 + i) % nm
        m = mn[p]
        host8 = h8s[pos_of[m]]
        b = cursor[p]
        units = (BLOCK_HEADER + klen + vlen + UNIT - 1) // UNIT
        cursor[p] = b + units * UNIT
        cs = checksum32(key, 0, klen, vals, voff[i], vlen)
        host8[b] = klen & 0xFF
        host8[b + 1] = klen >> 8
        host8[b + 2] = vlen & 0xFF
        host8[b + 3] = vlen >> 8
        for t in range(4):
            host8[b + 4 + t] = np.uint8((cs >> np.uint64(8 * t)) & np.uint64(0xFF))
        for t in range(klen):
            host8[b + BLOCK_HEADER + t] = key[t]
        for t in range(vlen):
            host8[b + BLOCK_HEADER + klen + t] = vals[voff[i] + t]
        # then the committed slot word
        host64[slot_offset_nb(free, off_a, off_b) // WORD] = ((h >> np.uint64(56)) << np.uint64(56)) | (np.uint64(units) << np.uint64(UNITS_SHIFT)) \
            | (np.uint64(m) << np.uint64(NODE_SHIFT)) | np.uint64(b)
    return PLACED


def bulk_load(fabric, layout: dict, pairs, *, compiled: bool = True, allocate=None) -> int:
    """Place the (key bytes, value bytes) of ``pairs`` (any iterable, consumed once) into the empty
    table of ``layout``; returns how many. ``compiled=False`` runs :func:`_place`'s Python source
    (the reference the tests compare with); ``allocate(node, nbytes) -> offset`` takes the blocks'
    regions (default ``fabric.allocate``; a replicated layout's takes mirrors with them)."""
    place = _place if compiled else _place.py_func
    allocate = allocate or fabric.allocate
    mns = [int(m) for m in layout["memory_nodes"]]
    entries = layout["directory_entries"]
    sub_words = layout["groups_per_subtable"] * GROUP_BYTES // WORD
    dir_arrays = [np.array(col, np.int64) for col in zip(*(unpack_dir_entry(e) for e in entries))]
    dld, dnode, dbase = dir_arrays
    for node, base in set(zip(dnode.tolist(), dbase.tolist())):
        buckets = fabric.memory[node].host64[base // WORD:base // WORD + sub_words].reshape(-1, BUCKET_BYTES // WORD)
        if buckets[:, 1:].any():
            raise SystemGaveUp("RACE: a bulk load needs the empty table setup made; this one holds keys")
    pos_of = np.full(len(fabric.nodes), -1, np.int64)
    for k, m in enumerate(mns):
        pos_of[m] = k
    # tuples, not numba.typed.List: a homogeneous tuple is indexed at run time without compiling
    # typed-list code at every start (that costs ~200 MB of compiler memory)
    h64s = tuple(fabric.memory[m].host64 for m in mns)
    h8s = tuple(fabric.memory[m].host for m in mns)
    mn = np.array(mns, np.int64)
    cursor = np.zeros(len(mns), np.int64)       # where _place writes each memory node's next block
    buf = np.zeros(4 * BUCKET_BYTES // WORD, np.uint64)
    out = np.zeros(2 * MAX_MATCHES, np.uint64)
    mask = (1 << layout["global_depth"]) - 1
    n_main = 2 * layout["groups_per_subtable"]
    it = iter(pairs)
    done = 0
    while True:
        batch = [(bytes(k), bytes(v)) for k, v in islice(it, BATCH)]
        if not batch:
            return done
        units = np.array([check_item(k, v) for k, v in batch], np.int64)
        need = np.bincount((done + np.arange(len(batch))) % len(mns), weights=units * UNIT, minlength=len(mns))
        for p, n in enumerate(need.astype(np.int64).tolist()):
            # a region of just this batch's blocks per memory node: a region of a fixed size
            # (it was 4 MiB) refused memory nodes that inserts fill, and left its rest unused
            if n:
                try:
                    cursor[p] = allocate(mns[p], n)
                except MemoryError as e:
                    raise SystemGaveUp(f"RACE: the KV blocks of a bulk load do not fit the memory nodes: {e}") from None
        keys = np.frombuffer(b"".join(k for k, _ in batch), np.uint8)
        vals = np.frombuffer(b"".join(v for _, v in batch) or b"\0", np.uint8)
        koff = np.zeros(len(batch) + 1, np.int64)
        voff = np.zeros(len(batch) + 1, np.int64)
        np.cumsum([len(k) for k, _ in batch], out=koff[1:])
        np.cumsum([len(v) for _, v in batch], out=voff[1:])
        r = place(h64s, h8s, pos_of, keys, koff, vals, voff, done, mn, dnode, dbase, dld, mask, n_main, cursor,
                  buf, out)
        if r != PLACED:
            key = batch[r // 2][0]
            if r % 2 == DUPLICATE:
                raise SystemGaveUp(f"RACE: bulk load of key {key[:32]!r} twice")
            raise SystemGaveUp(f"RACE table full during a bulk load: both combined buckets of key {key[:32]!r} "
                               f"have no free slot ({layout['slots']} slots sized for capacity "
                               f"{layout['capacity']} at load_factor {layout['load_factor']})")
        done += len(batch)
