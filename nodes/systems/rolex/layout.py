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
    lock array    +i*8  lock u64      0: free, else the holder's tag; only the primary's is used

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
  load trained: the models of the learned cache and each primary leaf's *fence* (the first key it
  was loaded with). Compute nodes READ it once and keep it (their learned cache). The fences are
  an addition that makes a key's leaf group a fixed function of the key until the next retrain:
  ROLEX picks the last candidate whose *current* first key is <= the key, which changes under
  concurrent inserts and deletes of the neighbouring leaves, so two writers could place keys out
  of order; with fences every operation on a key locks the same group.

Values: ``values = "out-of-line"`` (the default) stores in ``vals[i]`` a *value word*
``length:16 | node:8 | offset:40`` naming an immutable block holding the value bytes (64-byte
units, reused through epochs: nodes/systems/lib/reclaim.py); ``"inline"`` stores the 8-byte value
itself, ROLEX's u64 values, and refuses any other size.
"""

from __future__ import annotations

import struct

import numpy as np

from nodes.systems.dpastore.pla import Segment
from nodes.systems.lib.record import checksum32
from shm.fabric import gaddr

from .core import EMPTY_KEY, KEY_BYTES, LEAF_BYTES, REGION_HEADER_BYTES, SLOTS, leaf_bytes

WORD = 8
META_BYTES = LOCK_BYTES = WORD
NO_SYNONYM = -1
MAX_NODE = 255                         # a value word holds 8 bits of node number
VALUE_OFFSET_BITS = 40
MAX_VALUE = (1 << 14)                  # 16 KiB: one READ into the thread's buffer
EMPTY = np.uint64(EMPTY_KEY)

#: The model table: a header line, then one 32-byte record per model, then one fence per primary.
TABLE_HEADER = struct.Struct("<QQQQQ")         # format, models, primary leaves, eps, fill
TABLE_FORMAT = 1
TABLE_HEADER_BYTES = 64
MODEL = struct.Struct("<QIIIiB7x")             # first key, first leaf, size (keys), slope, intercept, shift
MODEL_BYTES = MODEL.size                       # 32


class Remote:
    """Where everything is, from the layout dict (picklable, the same in every process)."""

    __slots__ = ("nodes", "regions", "tables", "locks", "leaves_per_node", "span", "leaf_bytes")

    def __init__(self, layout: dict):
        self.nodes = tuple(layout["memory_nodes"])
        self.regions = tuple(layout["regions"])
        self.tables = tuple(layout["tables"])
        self.locks = tuple(layout["locks"])
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

def table_bytes(models: int, primaries: int) -> int:
    return TABLE_HEADER_BYTES + models * MODEL_BYTES + primaries * WORD


def table_image(segments, bases, fences, eps: int, fill: int) -> bytes:
    """The model table's bytes: ``segments`` (pla.Segment) with their first leaf ``bases``, and
    the fence of every primary leaf."""
    out = bytearray(table_bytes(len(segments), len(fences)))
    TABLE_HEADER.pack_into(out, 0, TABLE_FORMAT, len(segments), len(fences), eps, fill)
    for i, (s, b) in enumerate(zip(segments, bases)):
        MODEL.pack_into(out, TABLE_HEADER_BYTES + i * MODEL_BYTES, s.first_key, b, s.size, s.slope,
                        s.intercept, s.shift)
    f0 = TABLE_HEADER_BYTES + len(segments) * MODEL_BYTES
    out[f0:] = np.asarray(fences, dtype=np.uint64).tobytes()
    return bytes(out)


def parse_table(data) -> tuple[list, list, list, int, int]:
    """(segments, first leaf per model, fences, eps, fill) of a model table's bytes."""
    fmt, models, primaries, eps, fill = TABLE_HEADER.unpack_from(data, 0)
    if fmt != TABLE_FORMAT:
        raise ValueError(f"not a ROLEX model table (format {fmt})")
    segs, bases = [], []
    for i in range(models):
        first, base, size, slope, intercept, shift = MODEL.unpack_from(data, TABLE_HEADER_BYTES + i * MODEL_BYTES)
        segs.append(Segment(first, 0, size, slope, shift, intercept))
        bases.append(base)
    f0 = TABLE_HEADER_BYTES + models * MODEL_BYTES
    fences = np.frombuffer(bytes(data[f0:f0 + primaries * WORD]), dtype=np.uint64).tolist()
    return segs, bases, fences, int(eps), int(fill)
