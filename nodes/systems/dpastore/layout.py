"""DPA-Store's tree in memory: the bytes of inner nodes, leaves and insert buffers, and who owns what.

:mod:`.pla` and :mod:`.patch` are the index as Python objects; on the rack the tree is bytes in
two memories, and this module is their format (the traversers, patchers and stitchers all read
and write through it):

* **DPA memory** (``dpa0``'s segment, a region ``System.setup`` carves): a control block (the
  root pointer, the stitchers' fence words, one epoch line per traverser), then inner nodes and
  leaves. Traversers only read it, apart from the insert buffers; stitchers write it.
* **Host memory** (``cn0``'s segment): a control block (allocation cursors, the words stitchers
  report reclamation in), the DMA rings (patch requests up, stitches down), a **mirror** of the
  DPA region at a fixed distance (``mirror(off)``: the host's replica of every node, what a COPY
  stitch copies from and what a patcher descends), and the heap of leaves' key and value arrays.

The host allocates in both memories (the paper: "host pre-computed DPA addresses; no allocation
on the DPA"), so the cursors live in host memory; a bulk load, which may run in another process
before any patcher, bumps the same cursors.

Inner node (as :class:`.pla.InnerNode`; offsets from the node)::

    line 0   word 0: kind 1 (4 bits) | segments n (4 bits) | size of segment i (8 bits each, i < 7)
             words 1..7: the segments' first keys
    line 1   7 models of 9 bytes: slope u32, shift u8, intercept i32 (:class:`.pla.Segment`)
    then per segment: its pivots (size_i keys, whole lines), then its child pointers (as many)

Leaf (DPA memory)::

    line 0   kind 2 | count << 8;  low;  model first key;  slope | shift << 32;  intercept;
             keys gaddr;  values gaddr;  0
    line 1   insert buffer counters: reserved, published
    lines    16 keys (2 lines), then 16 value slots of SLOT bytes

``low`` is the leaf's pivot in its parent: every key routed to the leaf is >= low, and a patch
keeps it for the first of the leaves that replace it, so pivots never move and the leftmost
pivot of every level is 0 (a key below every loaded key still has a leaf). The model is fitted
from the leaf's first key; a key between ``low`` and it predicts below 0 and is clamped.

**Value slots.** With ``value_max = 8`` (the paper's configuration, the reproduction's) a value is
the paper's bare 8-byte word: an insert buffer is 5 lines, a host value array 1 KiB, and the two
reserved words ``EMPTY`` and ``TOMBSTONE`` are the buffer slot's commit mark (a value equal to one
of them cannot be stored). With a larger ``value_max`` a value is a slot: a length word (the commit
mark), then ``value_max`` bytes rounded up to words, so that any value up to ``value_max`` is
stored (the conformance suite writes 16 B to 1000 B).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from . import pla
from .pla import LINE_BYTES, SEGMENTS_PER_NODE, Segment

KIND_INNER, KIND_LEAF = 1, 2
BUFFER_SLOTS = 16
EMPTY = (1 << 64) - 1           # length word of a buffer slot not written yet
TOMBSTONE = (1 << 64) - 2       # length word of a DELETE

_MODEL = struct.Struct("<IBi")  # 9 bytes: slope mantissa, shift, intercept (Q15.16)

# --- DPA control block --------------------------------------------------------------------------
CTL_ROOT = 0                    # word: DPA offset of the root node
CTL_DEPTH = 1                   # word: levels including the leaves
CTL_ARRIVED = 8                 # word (line 1): stitchers arrived at fences, cumulative
CTL_RELEASED = 9                # word: the last fence stitcher 0 released
EPOCH_BASE = 128                # one line per traverser: word 0 requests begun, word 1 finished
MAX_TRAVERSERS = 189
CACHE_BASE = EPOCH_BASE + MAX_TRAVERSERS * LINE_BYTES
CACHE_BYTES = 24 * LINE_BYTES   # a traverser's hot-entry cache buckets (:mod:`.hotcache`)


def cache_offset(traverser: int) -> int:
    return CACHE_BASE + traverser * CACHE_BYTES


def dpa_control_bytes(traversers: int) -> int:
    """The control block: root, fences, epoch lines, then the traversers' cache buckets."""
    return cache_offset(traversers)

# --- host control block -------------------------------------------------------------------------
HCTL_DPA_CURSOR = 0             # next free DPA offset (bump)
HCTL_HOST_CURSOR = 1            # next free host-heap offset (bump)
HCTL_RECLAIMED = 8              # word 8 + 8 s: the last retire token stitcher s found safe
MAX_STITCHERS = 16
HOST_CONTROL_BYTES = (HCTL_RECLAIMED + 8 * MAX_STITCHERS) * 8


def slot_bytes(value_max: int) -> int:
    """A value slot: the bare word for 8-byte values, else a length word and ``value_max`` bytes
    in whole words."""
    return 8 if value_max == 8 else 8 + -(-value_max // 8) * 8


def lines(nbytes: int) -> int:
    return -(-nbytes // LINE_BYTES)


def round_line(nbytes: int) -> int:
    return lines(nbytes) * LINE_BYTES


class LeafGeometry(NamedTuple):
    """Offsets within a leaf, for a value slot size."""

    slot: int                   # bytes of one value slot
    counters: int               # reserved, published (line 1)
    keys: int                   # the 16 buffered keys
    values: int                 # the 16 buffered value slots
    dpa_bytes: int              # the whole leaf in DPA memory (whole lines)
    host_values_bytes: int      # the leaf's host value array (LEAF_CAPACITY slots)

    @classmethod
    def of(cls, value_max: int) -> "LeafGeometry":
        slot = slot_bytes(value_max)
        counters = LINE_BYTES
        keys = counters + LINE_BYTES
        values = keys + BUFFER_SLOTS * 8
        return cls(slot, counters, keys, values, round_line(values + BUFFER_SLOTS * slot),
                   round_line(pla.LEAF_CAPACITY * slot))

    @property
    def inline(self) -> bool:
        """Values are bare 8-byte words (the paper's), not length-prefixed slots."""
        return self.slot == 8

    def encode(self, value: bytes) -> bytes:
        """A value's slot bytes; the first word is the commit mark, written last."""
        if self.inline:
            return bytes(value)
        return struct.pack("<Q", len(value)) + bytes(value) + bytes(self.slot - 8 - len(value))

    def decode(self, raw) -> bytes:
        """The value in a slot's bytes (host array or buffer), not EMPTY nor TOMBSTONE."""
        raw = bytes(raw)
        if self.inline:
            return raw[:8]
        n = int.from_bytes(raw[:8], "little")
        return raw[8:8 + n]

    @property
    def buffer_bytes(self) -> int:
        """Counters, keys and value slots: what a GET prefetches and a patch request carries."""
        return self.dpa_bytes - self.counters


HOST_KEYS_BYTES = pla.LEAF_CAPACITY * 8


# --- inner nodes ---------------------------------------------------------------------------------

def inner_bytes(sizes) -> int:
    return pla.NODE_HEADER_LINES * LINE_BYTES + sum(2 * pla.lines_of(n) * LINE_BYTES for n in sizes)


def segment_offsets(sizes) -> list:
    """(pivots offset, children offset) of each segment within its node."""
    out, o = [], pla.NODE_HEADER_LINES * LINE_BYTES
    for n in sizes:
        span = pla.lines_of(n) * LINE_BYTES
        out.append((o, o + span))
        o += 2 * span
    return out


def encode_inner(segments, pivots, children) -> bytes:
    """An inner node's bytes: ``segments`` (pla.Segment), per segment its pivots and child offsets."""
    sizes = [len(p) for p in pivots]
    if not 1 <= len(sizes) <= SEGMENTS_PER_NODE or any(not 1 <= n <= pla.SEGMENT_CAPACITY for n in sizes):
        raise ValueError(f"an inner node holds 1..7 segments of 1..128 pivots, got {sizes}")
    buf = bytearray(inner_bytes(sizes))
    head = KIND_INNER | len(sizes) << 4
    for i, n in enumerate(sizes):
        head |= (n & 0xFF) << (8 + 8 * i)           # 128 is stored as 128: a byte holds it
    words = [head] + [s.first_key for s in segments] + [0] * (SEGMENTS_PER_NODE - len(segments))
    struct.pack_into("<8Q", buf, 0, *words)
    for i, s in enumerate(segments):
        _MODEL.pack_into(buf, LINE_BYTES + 9 * i, s.slope, s.shift, s.intercept)
    for (po, co), p, c in zip(segment_offsets(sizes), pivots, children):
        buf[po:po + 8 * len(p)] = np.asarray(p, dtype="<u8").tobytes()
        buf[co:co + 8 * len(c)] = np.asarray(c, dtype="<u8").tobytes()
    return bytes(buf)


class InnerHeader(NamedTuple):
    sizes: tuple
    first_keys: tuple


def read_header(mem: np.ndarray, off: int) -> InnerHeader:
    """Line 0 of an inner node (``mem``: the memory's bytes)."""
    words = struct.unpack_from("<8Q", mem, off)
    head = words[0]
    if head & 0xF != KIND_INNER:
        raise ValueError(f"no inner node at offset {off} (kind {head & 0xF})")
    n = head >> 4 & 0xF
    sizes = tuple((head >> (8 + 8 * i)) & 0xFF for i in range(n))
    return InnerHeader(sizes, words[1:1 + n])


def read_model(mem: np.ndarray, off: int, i: int, first_key: int, size: int) -> Segment:
    slope, shift, intercept = _MODEL.unpack_from(mem, off + LINE_BYTES + 9 * i)
    return Segment(first_key, 0, size, slope, shift, intercept)


def read_words(mem: np.ndarray, off: int, n: int) -> list:
    return list(struct.unpack_from(f"<{n}Q", mem, off)) if n else []


# --- leaves ---------------------------------------------------------------------------------------

class LeafMeta(NamedTuple):
    count: int
    low: int
    model: Segment
    keys_addr: int              # gaddr of the host key array
    values_addr: int            # gaddr of the host value array


def encode_leaf(geo: LeafGeometry, low: int, model: Segment, count: int, keys_addr: int, values_addr: int) -> bytes:
    """A leaf's DPA bytes with an empty insert buffer."""
    buf = bytearray(geo.dpa_bytes)
    struct.pack_into("<QQQQqQQQ", buf, 0, KIND_LEAF | count << 8, low, model.first_key,
                     model.slope | model.shift << 32, model.intercept, keys_addr, values_addr, 0)
    for s in range(BUFFER_SLOTS):
        struct.pack_into("<Q", buf, geo.values + s * geo.slot, EMPTY)
    return bytes(buf)


def read_leaf(mem: np.ndarray, off: int) -> LeafMeta:
    head, low, first, sl, icpt, ka, va, _ = struct.unpack_from("<QQQQqQQQ", mem, off)
    if head & 0xF != KIND_LEAF:
        raise ValueError(f"no leaf at offset {off} (kind {head & 0xF})")
    count = head >> 8
    return LeafMeta(count, low, Segment(first, 0, count, sl & 0xFFFFFFFF, sl >> 32, icpt), ka, va)


def kind_at(mem: np.ndarray, off: int) -> int:
    return struct.unpack_from("<Q", mem, off)[0] & 0xF


def leaf_model(keys, eps: int = pla.LEAF_EPS) -> Segment:
    """The model of a leaf's keys: one PLA segment with the leaf eps (a leaf is one segment)."""
    if len(keys) == 0:
        return Segment(0, 0, 0, 0, 0, 0)
    segs = pla.segment(np.asarray(keys, dtype=np.uint64), eps)
    if len(segs) != 1:
        raise ValueError(f"leaf keys need {len(segs)} segments: a leaf is one")
    return segs[0]


def buffer_entries(raw: bytes, geo: LeafGeometry) -> list:
    """(key, value bytes or None for a delete) of the written slots of an insert buffer's bytes
    (``raw`` from the counters line on), oldest first."""
    reserved = min(struct.unpack_from("<Q", raw, 0)[0], BUFFER_SLOTS)
    out = []
    for s in range(reserved):
        n = struct.unpack_from("<Q", raw, geo.values - geo.counters + s * geo.slot)[0]
        if n == EMPTY:
            continue
        key = struct.unpack_from("<Q", raw, geo.keys - geo.counters + 8 * s)[0]
        if n == TOMBSTONE:
            out.append((key, None))
        else:
            o = geo.values - geo.counters + s * geo.slot
            out.append((key, geo.decode(raw[o:o + geo.slot])))
    return out


# --- the host's allocator ---------------------------------------------------------------------------

class Heap:
    """Bump allocation from a cursor word in host memory, plus free lists by size (of this process).

    Only the patchers (one process) and a bulk load (before them) allocate, so the cursor needs no
    atomics; blocks are freed by the patchers once the stitchers report them safe."""

    def __init__(self, words: np.ndarray, cursor_word: int, base: int, limit: int, what: str):
        self.words, self.cursor_word, self.base, self.limit, self.what = words, cursor_word, base, limit, what
        self.free: dict = {}

    def alloc(self, nbytes: int) -> int:
        nbytes = round_line(nbytes)
        spare = self.free.get(nbytes)
        if spare:
            return spare.pop()
        at = int(self.words[self.cursor_word]) or self.base
        if at + nbytes > self.limit:
            from nodes.systems.api import SystemGaveUp
            raise SystemGaveUp(f"dpa-store: {self.what} is full ({self.limit - self.base:,} B): raise "
                               f"{'dpa.memory' if 'DPA' in self.what else 'compute.memory'} of the rack")
        self.words[self.cursor_word] = at + nbytes
        return at

    def release(self, off: int, nbytes: int) -> None:
        self.free.setdefault(round_line(nbytes), []).append(off)

    def used(self) -> int:
        return (int(self.words[self.cursor_word]) or self.base) - self.base - sum(
            size * len(v) for size, v in self.free.items())


def predict_clamped(model: Segment, key: int) -> int:
    """The model's position for ``key`` clamped to the leaf (a key below the model's first key,
    possible between ``low`` and it, predicts 0)."""
    if model.size == 0:
        return 0
    p = pla.predict(model, key) if key >= model.first_key else 0
    return min(max(p, 0), model.size - 1)


def window(model: Segment, key: int, eps: int) -> tuple:
    p = predict_clamped(model, key)
    return max(p - eps, 0), min(p + eps, max(model.size - 1, 0))

