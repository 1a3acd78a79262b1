"""RACE's remote layout: bucket, slot, header, directory-entry and KV-block encodings, and the
table geometry that :meth:`RaceSystem.setup` derives from a capacity.

Everything here is plain integer arithmetic (or numba-jitted byte work), importable on its own by
the systems that build on RACE (SMART-HT, FUSEE, Aceso, FlexKV). See docs/race.md for diagrams.

Slot word (8 bytes, little-endian in memory)::

    63      56 55      48 47      40 39                                  1   0
    +---------+----------+----------+-------------------------------------+---+
    |   fp    |  units   |   node   |   KV block offset (64-B aligned)    | T |
    +---------+----------+----------+-------------------------------------+---+

* ``fp``: 8-bit fingerprint of the key; ``units``: KV block length in 64-byte units (1..255);
* ``node``: the fabric node index of the memory node holding the block (0..255);
* offset: 40 bits of byte offset in that node's host memory (1 TiB per memory node). Blocks are
  64-byte aligned, so the low 6 bits are free: bit 0 (``T``) marks a *tentative* slot, published
  by an insert that has not yet checked for concurrent duplicates (see docs/race.md);
* the all-zero word is the empty slot (offset 0 is never handed out by ``Fabric.allocate``).

Bucket header (first word of every bucket): ``local_depth:8 | suffix:56``, the local depth and
the hash suffix of the subtable the bucket belongs to; a client whose cached directory entry
disagrees knows its cache is stale.

Directory (on the first memory node): word 0 = global depth, word 1 = groups per subtable, then
``2**global_depth`` entries ``local_depth:8 | 0:8 | node:8 | offset:40``.

KV block: an 8-byte header ``key_len:u16 | value_len:u16 | checksum:u32`` then the key and the
value, padded to 64-byte units. The checksum is the systems library's ``checksum32`` (of the key
and the value, seeded by their lengths; nodes/systems/lib/record.py).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from numba import njit
import numpy as np

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.record import checksum32
from shm.fabric import gaddr

# --- buckets --------------------------------------------------------------------------------
SLOTS_PER_BUCKET = 7          # header + 7 slots = 64 B: one cache line, read atomically by RDMA
WORD = 8
BUCKET_BYTES = WORD * (1 + SLOTS_PER_BUCKET)
GROUP_BUCKETS = 3             # [main 0 | overflow | main 1]
GROUP_BYTES = GROUP_BUCKETS * BUCKET_BYTES
COMBINED_BYTES = 2 * BUCKET_BYTES   # a main bucket with the overflow bucket next to it
SLOTS_PER_GROUP = GROUP_BUCKETS * SLOTS_PER_BUCKET
COMBINED_SLOTS = 2 * SLOTS_PER_BUCKET

# --- slot word ------------------------------------------------------------------------------
FP_SHIFT = 56
UNITS_SHIFT = 48
NODE_SHIFT = 40
OFFSET_BITS = 40
OFFSET_MASK = (1 << OFFSET_BITS) - 1
TENTATIVE = 1                 # bit 0 of the (64-B aligned) offset
UNIT = 64
MAX_UNITS = 255
MAX_NODE = 255
MAX_OFFSET = OFFSET_MASK & ~(UNIT - 1)
BLOCK_ADDR = OFFSET_MASK & ~TENTATIVE     # a slot word's block offset, without the tentative bit
MASK64 = (1 << 64) - 1

# --- KV block -------------------------------------------------------------------------------
BLOCK_HEADER = 8
MAX_BLOCK_BYTES = MAX_UNITS * UNIT            # 16320
MAX_ITEM_BYTES = MAX_BLOCK_BYTES - BLOCK_HEADER
_HDR = struct.Struct("<HHI")

# --- directory ------------------------------------------------------------------------------
DIR_HEADER_WORDS = 2
MAX_GLOBAL_DEPTH = 16         # the hash's suffix field (see hashing.py)
MAX_GROUPS_PER_SUBTABLE = 1 << 19   # 2**20 main buckets: the width of a bucket hash field


class LayoutError(ValueError):
    """The rack cannot hold a RACE table with this encoding (too many nodes, too much memory...)."""


def pack_slot(fp: int, units: int, node: int, offset: int, tentative: bool = False) -> int:
    """A slot word; ValueError naming the field that does not fit the compact encoding."""
    if not 0 <= fp <= 0xFF:
        raise ValueError(f"slot: fingerprint {fp} does not fit 8 bits")
    if not 1 <= units <= MAX_UNITS:
        raise ValueError(f"slot: KV block of {units} x {UNIT} B units; the length field holds 1..{MAX_UNITS}")
    if not 0 <= node <= MAX_NODE:
        raise ValueError(f"slot: memory node {node} does not fit 8 bits (0..{MAX_NODE})")
    if not 0 < offset <= MAX_OFFSET or offset % UNIT:
        raise ValueError(f"slot: block offset {offset:#x} must be a nonzero multiple of {UNIT} below 2**{OFFSET_BITS}")
    return slot_word(fp, units, node, offset) | (TENTATIVE if tentative else 0)


# The accessors below are the one declaration of the slot word's fields; the client's per-slot
# paths call them (one call each, no checks: the words come from the table or from slot_word).
def slot_word(fp: int, units: int, node: int, offset: int) -> int:
    """The committed slot word of fields known to fit (:func:`pack_slot` checks them first)."""
    return (fp << FP_SHIFT) | (units << UNITS_SHIFT) | (node << NODE_SHIFT) | offset


def slot_location(w: int) -> tuple[int, int, int]:
    """(node, offset, units) of the KV block a slot word points to: what a READ of it and the
    allocator need."""
    return (w >> NODE_SHIFT) & 0xFF, w & BLOCK_ADDR, (w >> UNITS_SHIFT) & 0xFF


def slot_units(w: int) -> int:
    """The KV block's length in units; 0 in a non-empty word is a deleted slot (FlexKV's
    tombstone), never a block."""
    return (w >> UNITS_SHIFT) & 0xFF


def slot_committed(w: int) -> int:
    """The committed form of a (tentative) slot word."""
    return w & ~TENTATIVE


def slot_block(w: int) -> int:
    """The fabric global address of the KV block a slot points to."""
    return gaddr((w >> NODE_SHIFT) & 0xFF, w & BLOCK_ADDR)


def slot_block_bytes(w: int) -> int:
    return ((w >> UNITS_SHIFT) & 0xFF) * UNIT


# --- bucket header --------------------------------------------------------------------------
def pack_header(local_depth: int, suffix: int) -> int:
    return (local_depth & 0xFF) | (suffix << 8)


# --- directory entry ------------------------------------------------------------------------
def pack_dir_entry(local_depth: int, node: int, offset: int) -> int:
    if not 0 <= node <= MAX_NODE or not 0 <= offset <= OFFSET_MASK:
        raise LayoutError(f"directory entry: node {node} / offset {offset:#x} exceed the 8+40-bit encoding")
    return (local_depth << 56) | (node << NODE_SHIFT) | offset


def unpack_dir_entry(e: int) -> tuple[int, int, int]:
    """(local_depth, node, offset)."""
    return e >> 56, (e >> NODE_SHIFT) & 0xFF, e & OFFSET_MASK


def block_units(key_len: int, value_len: int) -> int:
    """64-byte units of the KV block of a key and value of these sizes."""
    return (BLOCK_HEADER + key_len + value_len + UNIT - 1) // UNIT


class ItemTooLarge(SystemGaveUp, ValueError):
    """A key and value that do not fit one KV block (see :data:`MAX_ITEM_BYTES`)."""


def check_item(key: bytes, value: bytes) -> int:
    """The block units of (key, value); ItemTooLarge if it does not fit a slot's length field."""
    n = BLOCK_HEADER + len(key) + len(value)
    if n > MAX_BLOCK_BYTES:
        raise ItemTooLarge(f"RACE item too large: key {len(key)} B + value {len(value)} B + {BLOCK_HEADER} B "
                           f"header = {n} B > {MAX_BLOCK_BYTES} B (the slot's 8-bit length field counts "
                           f"at most {MAX_UNITS} units of {UNIT} B)")
    return (n + UNIT - 1) // UNIT


def encode_block(key: bytes, value: bytes) -> bytes:
    """The bytes of a KV block (unpadded: the WRITE sends only these)."""
    cs = int(checksum32(key, 0, len(key), value, 0, len(value)))
    return _HDR.pack(len(key), len(value), cs) + key + value


@njit(cache=True)
def check_block(buf, off, nbytes, key):
    """Match a KV block read into ``buf[off:off+nbytes]`` against ``key``: the value length if the
    key matches and the checksum holds, -1 if it holds another key, -2 if it is torn/corrupt."""
    if nbytes < 8:
        return -2
    klen = np.int64(buf[off]) | (np.int64(buf[off + 1]) << 8)
    vlen = np.int64(buf[off + 2]) | (np.int64(buf[off + 3]) << 8)
    if 8 + klen + vlen > nbytes:
        return -2
    n = len(key)
    match = klen == n
    if match:
        for i in range(n):
            if buf[off + 8 + i] != key[i]:
                match = False
                break
    cs = np.uint64(buf[off + 4]) | (np.uint64(buf[off + 5]) << np.uint64(8)) | \
        (np.uint64(buf[off + 6]) << np.uint64(16)) | (np.uint64(buf[off + 7]) << np.uint64(24))
    if not match:
        return -1
    if checksum32(buf, off + 8, klen, buf, off + 8 + klen, vlen) != cs:
        return -2
    return vlen


def decode_block(data) -> tuple[bytes, bytes] | None:
    """(key, value) of a KV block's bytes, or None if it is torn/corrupt (tests, tools)."""
    data = bytes(data)
    if len(data) < BLOCK_HEADER:
        return None
    klen, vlen, cs = _HDR.unpack_from(data)
    if BLOCK_HEADER + klen + vlen > len(data):
        return None
    key = data[8:8 + klen]
    value = data[8 + klen:8 + klen + vlen]
    if int(checksum32(key, 0, klen, value, 0, vlen)) != cs:
        return None
    return key, value


# --- geometry -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """The shape of a pre-sized table: ``2**global_depth`` subtables of ``groups`` 3-bucket groups."""

    global_depth: int
    groups: int               # per subtable

    @property
    def subtables(self) -> int:
        return 1 << self.global_depth

    @property
    def main_buckets(self) -> int:
        return 2 * self.groups

    @property
    def subtable_bytes(self) -> int:
        return self.groups * GROUP_BYTES

    @property
    def slots(self) -> int:
        return self.subtables * self.groups * SLOTS_PER_GROUP

    @property
    def directory_bytes(self) -> int:
        return WORD * (DIR_HEADER_WORDS + self.subtables)

    @classmethod
    def for_capacity(cls, capacity: int, load_factor: float, memory_nodes: int) -> "Geometry":
        """Enough slots for ``capacity`` keys at ``load_factor``, at least one subtable per memory
        node, and no subtable beyond the hash's bucket field."""
        if capacity < 1:
            raise ValueError(f"RACE: capacity must be >= 1, got {capacity}")
        if not 0 < load_factor <= 1:
            raise ValueError(f"RACE: load_factor must be in (0, 1], got {load_factor}")
        slots = math.ceil(capacity / load_factor)
        groups_total = max(1, -(-slots // SLOTS_PER_GROUP))
        need = max(memory_nodes, -(-groups_total // MAX_GROUPS_PER_SUBTABLE))
        depth = max(0, (need - 1).bit_length())
        if depth > MAX_GLOBAL_DEPTH:
            raise LayoutError(f"RACE: {capacity} keys at load factor {load_factor} need {need} subtables, "
                              f"more than the 2**{MAX_GLOBAL_DEPTH} the directory holds")
        groups = max(1, -(-groups_total // (1 << depth)))
        return cls(depth, groups)
