"""ROLEX's remote layout on the memory nodes: leaf regions, the leaf table, group locks, the model table.

Every memory node ``m`` (the j-th of M) holds one copy of each array below, for its share of the
leaves. Leaves are numbered globally and striped: leaf ``n`` lives on memory node ``n % M`` as its
*local* leaf ``n // M``, so the two or three candidate leaves of a GET go to different memory
nodes, in parallel. A synonym leaf is taken from the region of its primary leaf's node, so a whole
leaf group (a primary leaf and its synonym chain) sits on one node and one queue pair, which is
what lets a lock CAS and the READs after it be ordered (docs/fabric.md, "Ordering rules")::

    leaf region   +0   counter  u64   local leaves handed out (FAA target: a synonym leaf is FAA(+1))
                  +8   model    u64   (first memory node only) gaddr of the model table, 0: none
                  +16 + i*1024        local leaf i: keys[64] u64 ascending, empty = UINT64_MAX at
                                      the end, then vals[64] u64 (ROLEX's Leaf<64, u64, u64>)
    leaf table    +i*8  meta u64      checksum:32 (of the leaf's 1024 bytes) | synonym:32 (global
                                      leaf number + 1 of the next leaf in the chain, 0: none)
    lock array    +i*8  lock u64      0: free, else the holder's tag; only the primary's is used;
                                      RETIRED_LOCK | epoch: the group was re-laid by a retrain
    count array   +i*8  count u64     synonym leaves a model (or an untrained leaf group) allocated
                                      since it was trained: only its first primary leaf's word is used
                                      (FAA target; ROLEX's synonym-table counter, leaf_table.hpp)

Those offsets are for the default *span* of 64 keys a leaf (ROLEX's ``Leaf<64, u64, u64>``); the
option ``span`` sets another (CHIME, SOSP'24, ran ROLEX with 16-key leaves): a leaf is then
``span x 16`` bytes at ``16 + i x span x 16``, keys[span] then vals[span], and everything below
holds with "1 KiB" read as that size.

What is ROLEX's and what is added here:

* the leaf, its offset ``16 + n * 1024`` and the counter in the first header word are ROLEX's
  (``rolex/leaf.hpp``, ``remote_memory.hpp``); the leaf table holding each leaf's synonym pointer
  is ROLEX's ``leaf_table.hpp``, with a checksum where ROLEX packs a lock and a region number;
* **the checksum** is an addition: a 1 KiB leaf READ lands line by line and may mix two
  write-backs, and the leaf has no spare byte for a per-line version, so a reader READs the
  leaf's meta word (one 8-byte word, atomic) in the same batch and keeps the snapshot only if the
  checksum matches (``nodes/systems/lib/record.checksum32``); the synonym pointer travels in the
  same word, so the chain a reader follows is the one of the image it validated;
* **the lock array** is an addition: ROLEX's public code leaves the remote lock a "fixme". A word
  per leaf group, taken by CAS and released by CAS, never WRITTEN (a word that is CASed is only
  changed by atomics: docs/fabric.md, "Atomicity"), kept apart from the meta words the lock
  holder WRITEs;
* **the model table** (on the first memory node, found through header word 1) is what the bulk
  load (or the last retrain) trained: the models of the learned cache, each primary *slot*'s
  *fence* (the first key it was loaded with) and, once a retrain has re-laid leaves, each slot's
  leaf number (ROLEX's per-model leaf table of leaf numbers; before any retrain slot ``s`` is leaf
  ``s`` and the map is left out, so a bulk-loaded table is the bytes it always was). A table is
  written whole into fresh memory and then published by one 8-byte store of header word 1, and is
  never changed or reused: a compute node READs it, keeps it (its learned cache) and READs the
  next one when an operation meets a retired leaf (below). The fences are an addition that makes
  a key's leaf group a fixed function of the key until the next retrain of its model: ROLEX picks
  the last candidate whose *current* first key is <= the key, which changes under concurrent
  inserts and deletes of the neighbouring leaves, so two writers could place keys out of order;
  with fences every operation on a key locks the same group;
* **retired leaves** (an addition, the model epoch every operation checks): a retrain (retrain.py)
  re-lays a model's leaf groups into new leaves and then marks every leaf it replaced: its meta
  word becomes ``epoch:32 | 0xFFFFFFFF`` (no synonym pointer is ever 0xFFFFFFFF) and its group's
  lock ``RETIRED_LOCK | epoch``, where ``epoch`` is the new table's. Every operation READs its
  home leaf's meta word (and a writer CASes the lock) anyway, so a client whose learned cache is
  older than the leaves it reaches learns it there, READs the model table again and starts over;
  retired leaves are never reused, so what a reader READs of one is never another leaf's.

Values: ``values = "out-of-line"`` (the default) stores in ``vals[i]`` a *value word*
``length:16 | node:8 | offset:40`` naming an immutable block holding the value bytes (64-byte
units, reused through epochs: nodes/systems/lib/reclaim.py); ``"inline"`` stores the 8-byte value
itself, ROLEX's u64 values, and refuses any other size.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from nodes.systems.dpastore.pla import Segment
from nodes.systems.lib.record import checksum32
from shm.fabric import gaddr

from .core import EMPTY_KEY, KEY_BYTES, LEAF_BYTES, REGION_HEADER_BYTES, SLOTS, leaf_bytes

WORD = 8
META_BYTES = LOCK_BYTES = COUNT_BYTES = WORD
NO_SYNONYM = -1
#: A retired leaf's meta word has this synonym field (and the new table's epoch as its checksum).
RETIRED_SYNONYM = 0xFFFFFFFF
#: A retired leaf group's lock word: this bit and the new table's epoch (a holder's tag is small).
RETIRED_LOCK = 1 << 63
MAX_NODE = 255                         # a value word holds 8 bits of node number
VALUE_OFFSET_BITS = 40
MAX_VALUE = (1 << 14)                  # 16 KiB: one READ into the thread's buffer
EMPTY = np.uint64(EMPTY_KEY)

#: The model table: a header line, then one 32-byte record per model, then one fence per primary
#: slot, then (``mapped``) one u32 leaf number per slot.
TABLE_HEADER = struct.Struct("<QQQQQQQ")       # format, models, primary slots, eps, fill, epoch, mapped
TABLE_FORMAT = 1
TABLE_HEADER_BYTES = 64
MODEL = struct.Struct("<QIIIiB7x")             # first key, first leaf, size (keys), slope, intercept, shift
MODEL_BYTES = MODEL.size                       # 32


class Remote:
    """Where everything is, from the layout dict (picklable, the same in every process)."""

    __slots__ = ("nodes", "regions", "tables", "locks", "counts", "leaves_per_node", "span", "leaf_bytes")

    def __init__(self, layout: dict):
        self.nodes = tuple(layout["memory_nodes"])
        self.regions = tuple(layout["regions"])
        self.tables = tuple(layout["tables"])
        self.locks = tuple(layout["locks"])
        self.counts = tuple(layout["counts"])
        self.leaves_per_node = int(layout["leaves_per_node"])
        self.span = int(layout["span"])                 # keys per leaf (ROLEX's code: 64)
        self.leaf_bytes = leaf_bytes(self.span)

    def node_of(self, leaf: int) -> int:
        """Index (into ``nodes``) of the memory node holding global leaf ``leaf``."""
        return leaf % len(self.nodes)

    def leaf_addr(self, leaf: int) -> int:
        j, i = leaf % len(self.nodes), leaf // len(self.nodes)
        return gaddr(self.nodes[j], self.regions[j] + REGION_HEADER_BYTES + i * self.leaf_bytes)

    def meta_addr(self, leaf: int) -> int:
        j, i = leaf % len(self.nodes), leaf // len(self.nodes)
        return gaddr(self.nodes[j], self.tables[j] + i * META_BYTES)

    def lock_addr(self, leaf: int) -> int:
        j, i = leaf % len(self.nodes), leaf // len(self.nodes)
        return gaddr(self.nodes[j], self.locks[j] + i * LOCK_BYTES)

    def count_addr(self, leaf: int) -> int:
        """The synonym-leaf count of the model (or untrained group) whose first primary is ``leaf``."""
        j, i = leaf % len(self.nodes), leaf // len(self.nodes)
        return gaddr(self.nodes[j], self.counts[j] + i * COUNT_BYTES)

    def counter_addr(self, j: int) -> int:
        """The FAA word of memory node ``nodes[j]``'s leaf region."""
        return gaddr(self.nodes[j], self.regions[j])

    def model_word(self) -> int:
        """Header word 1 of the first region: the model table's gaddr."""
        return gaddr(self.nodes[0], self.regions[0] + WORD)

    def global_leaf(self, j: int, local: int) -> int:
        return local * len(self.nodes) + j


def key_int(key, bound: bool = False) -> int:
    """An 8-byte key as the big-endian integer that orders keys as bytes; ValueError otherwise
    (``bound``: a scan's start, which may be UINT64_MAX)."""
    if len(key) != KEY_BYTES:
        raise ValueError(f"ROLEX keys are exactly {KEY_BYTES} bytes (a big-endian u64, as Sherman's); got "
                         f"{len(key)} bytes: {bytes(key[:16])!r}")
    k = int.from_bytes(key, "big")
    if k == EMPTY_KEY and not bound:
        raise ValueError("ROLEX cannot store the key ff ff ff ff ff ff ff ff: UINT64_MAX marks an empty slot")
    return k


# -- leaves and their meta words ---------------------------------------------------------------------

def leaf_checksum(raw: np.ndarray, off: int = 0, nbytes: int = LEAF_BYTES) -> int:
    """Checksum of the leaf of ``nbytes`` at ``raw[off:]`` (a uint8 array: a leaf image or a READ buffer)."""
    return int(checksum32(raw, off, nbytes, raw, 0, 0))


def pack_meta(checksum: int, synonym: int) -> int:
    return (checksum << 32) | (synonym + 1)


def unpack_meta(word: int) -> tuple[int, int]:
    """(checksum, synonym leaf or NO_SYNONYM)."""
    return word >> 32, (word & 0xFFFFFFFF) - 1


def retired_meta(epoch: int) -> int:
    """The meta word a retrain leaves in a leaf it replaced: the new table's epoch, no pointer."""
    return ((epoch & 0xFFFFFFFF) << 32) | RETIRED_SYNONYM


def retired_epoch(word: int) -> int | None:
    """The epoch a retired meta word names, or None for a live leaf's."""
    return word >> 32 if word & 0xFFFFFFFF == RETIRED_SYNONYM else None


def leaf_image(keys, vals, span: int = SLOTS) -> np.ndarray:
    """The image (2 x ``span`` u64 words) of a leaf holding ``keys`` (ascending ints) and ``vals``."""
    img = np.zeros(2 * span, dtype=np.uint64)
    img[:span] = EMPTY
    n = len(keys)
    img[:n] = np.asarray(keys, dtype=np.uint64)
    img[span:span + n] = np.asarray(vals, dtype=np.uint64)
    return img


def image_meta(img: np.ndarray, synonym: int) -> int:
    """The meta word of a leaf image (any span: the checksum covers the whole image)."""
    return pack_meta(leaf_checksum(img.view(np.uint8), 0, img.nbytes), synonym)


def used(keys: np.ndarray) -> int:
    """Slots in use of a leaf's keys (the empty ones are all at the end)."""
    return int(np.searchsorted(keys, EMPTY, side="left"))


# -- value words ------------------------------------------------------------------------------------

def value_word(length: int, node: int, offset: int) -> int:
    return (length << 48) | (node << VALUE_OFFSET_BITS) | offset


def unpack_value_word(word: int) -> tuple[int, int, int]:
    """(length, node, offset) of an out-of-line value."""
    return word >> 48, (word >> VALUE_OFFSET_BITS) & 0xFF, word & ((1 << VALUE_OFFSET_BITS) - 1)


def value_units(length: int) -> int:
    """64-byte units of a value block (at least one, so every block has an address of its own)."""
    return max(1, -(-length // 64))


# -- the model table --------------------------------------------------------------------------------

class TableData(NamedTuple):
    """A parsed model table."""
    segs: list              # pla.Segment per model
    bases: list             # each model's first slot
    fences: list            # per slot: the smallest key its leaf group takes
    leaves: list | None     # per slot: its primary leaf's number (None: slot s is leaf s)
    eps: int
    fill: int
    epoch: int


def table_bytes(models: int, primaries: int, mapped: bool = False) -> int:
    return TABLE_HEADER_BYTES + models * MODEL_BYTES + primaries * WORD + (primaries * 4 if mapped else 0)


def table_image(segments, bases, fences, eps: int, fill: int, epoch: int = 0, leaves=None) -> bytes:
    """The model table's bytes: ``segments`` (pla.Segment) with their first slot ``bases``, the
    fence of every primary slot and (``leaves``, unless slot s is leaf s) every slot's leaf."""
    mapped = leaves is not None
    out = bytearray(table_bytes(len(segments), len(fences), mapped))
    TABLE_HEADER.pack_into(out, 0, TABLE_FORMAT, len(segments), len(fences), eps, fill, epoch, int(mapped))
    for i, (s, b) in enumerate(zip(segments, bases)):
        MODEL.pack_into(out, TABLE_HEADER_BYTES + i * MODEL_BYTES, s.first_key, b, s.size, s.slope,
                        s.intercept, s.shift)
    f0 = TABLE_HEADER_BYTES + len(segments) * MODEL_BYTES
    f1 = f0 + len(fences) * WORD
    out[f0:f1] = np.asarray(fences, dtype=np.uint64).tobytes()
    if mapped:
        out[f1:] = np.asarray(leaves, dtype=np.uint32).tobytes()
    return bytes(out)


def table_head(data) -> tuple[int, int, bool, int]:
    """(models, primary slots, mapped, epoch) of a table's first 64 bytes."""
    fmt, models, primaries, _eps, _fill, epoch, mapped = TABLE_HEADER.unpack_from(data, 0)
    if fmt != TABLE_FORMAT:
        raise ValueError(f"not a ROLEX model table (format {fmt})")
    return int(models), int(primaries), bool(mapped), int(epoch)


def parse_table(data) -> TableData:
    """The segments, bases, fences, leaves, eps, fill and epoch of a model table's bytes."""
    models, primaries, mapped, epoch = table_head(data)
    _f, _m, _p, eps, fill, _e, _mp = TABLE_HEADER.unpack_from(data, 0)
    segs, bases = [], []
    for i in range(models):
        first, base, size, slope, intercept, shift = MODEL.unpack_from(data, TABLE_HEADER_BYTES + i * MODEL_BYTES)
        segs.append(Segment(first, 0, size, slope, shift, intercept))
        bases.append(base)
    f0 = TABLE_HEADER_BYTES + models * MODEL_BYTES
    f1 = f0 + primaries * WORD
    fences = np.frombuffer(bytes(data[f0:f1]), dtype=np.uint64).tolist()
    leaves = np.frombuffer(bytes(data[f1:f1 + primaries * 4]), dtype=np.uint32).tolist() if mapped else None
    return TableData(segs, bases, fences, leaves, int(eps), int(fill), epoch)
