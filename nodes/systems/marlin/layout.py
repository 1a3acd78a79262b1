"""Marlin's leaf format and data items (docs/marlin.md), on Sherman's 1 KB nodes.

Nodes are Sherman's (nodes/systems/sherman/layout.py): 16 lines of 64 B, the node version ``nv``
on every line, the header in line 0, internal nodes unchanged. A Marlin leaf packs three entries
into each of lines 1..15 (45 entries, "dozens" of item pointers per leaf as Dolphin's paper says
of Marlin's leaves, where a per-line leaf held 15): an entry is a key and a *pointer* to an
out-of-place data item instead of the value, and the last 8 bytes of the node are the leaf's
Spear lock (nodes/systems/lib/spear.py)::

    leaf line i = 1..15                         entry e = 3 (i - 1) + j + 1, j = 0..2
    +0  nv     u32  (= the header's nv)
    +4  hint   u8 x 3: hint[j] = 1 once entry j's key is written
    +7  pad
    +8  + 16 j  key   8 B  (valid when hint[j] = 1)
    +16 + 16 j  item  u64  0 empty, 1 tombstone, else  units:8 | node:8 | offset:48
    +56 unused; line 15: the Spear lock word (i64, FAA only)

    data item (64-byte units, immutable once published)
    +0  key    8 B
    +8  length u32
    +12 check  u32  checksum32 of key and value (a reader tells a whole item of this key)
    +16 value

Why 16-byte entries and the hints apart: an entry's item word is the target of CASes, so it must
be 8-byte aligned, and an entry must not cross a line (a line lands, and is read, at one instant;
its ``nv`` tells a READ that met a split's WRITE). Sherman's packed entry (18 B with its own
versions) is neither.

Why the entry is bound before its key is written: an insert claims an empty entry with one CAS of
its ``item`` word (0 -> the new item), then WRITEs the key and, after it, the hint (two WRITEs in
one doorbell, landing in posting order in one line: whoever sees the hint sees the key; one WRITE
from the hint to the key would cover the line's other entries). A CAS covers 8 bytes, the key and
the pointer are 16, and writing the key first would let two inserters racing for one entry leave
the loser's key beside the winner's item. Between the CAS and the hint's WRITE the entry is
*pending* (item set, hint 0): its key is in its item, which a client that needs it READs. Within a
leaf between two splits an entry is bound to one key for good (empty -> item -> tombstone -> item
..., never empty again), so a key's hint, once written, never changes, and anyone who learnt it
may write it (the same bytes).

The lock word is the last 8 bytes of line 15, which no entry uses: an SMO writes the node's
bytes ``[0, LOCK_OFFSET)`` only, so its WRITE never covers the word other clients FAA.
"""

from __future__ import annotations

import struct

from numba import njit

from nodes.systems.lib.record import checksum, stamp_lines
from nodes.systems.sherman.layout import (
    HEADER, HIGH_INF, LINE, LINES, NODE_BYTES, NV_MASK,
)

PER_LINE = 3                             # entries in each of lines 1..15
LEAF_SLOTS = (LINES - 1) * PER_LINE      # 45
LOCK_OFFSET = NODE_BYTES - 8             # the Spear word: line 15, +56
HINT = 4                                 # offsets within a line: the hints (one byte per entry),
KEY = 8                                  # entry j's key at KEY + ENTRY_BYTES * j,
ITEM = 16                                # and its item word at ITEM + ENTRY_BYTES * j
ENTRY_BYTES = 16

EMPTY = 0
TOMBSTONE = 1
ITEM_HEADER = 16
UNITS_SHIFT = 56
NODE_SHIFT = 48
MAX_UNITS = 255                          # the pointer's 8-bit size field
MAX_VALUE = MAX_UNITS * LINE - ITEM_HEADER
_OFFSET_MASK = (1 << 48) - 1

ITEM_HEAD = struct.Struct("<8sII")       # key, length, checksum


def item_units(value_len: int) -> int:
    return (ITEM_HEADER + value_len + LINE - 1) // LINE


def item_word(units: int, node: int, offset: int) -> int:
    """The entry's pointer to an item of ``units`` 64-byte units at (memory node, offset)."""
    return (units << UNITS_SHIFT) | (node << NODE_SHIFT) | offset


def item_parts(word: int) -> tuple[int, int, int]:
    """(node, offset, units) of an item pointer."""
    return (word >> NODE_SHIFT) & 0xFF, word & _OFFSET_MASK, word >> UNITS_SHIFT


def item_image(key: bytes, value: bytes) -> bytes:
    return ITEM_HEAD.pack(key, len(value), checksum(key, value)) + value


def entry_place(e: int) -> tuple[int, int]:
    """(line, j) of entry ``e`` (1..LEAF_SLOTS): entries fill lines 1..15 three at a time."""
    return 1 + (e - 1) // PER_LINE, (e - 1) % PER_LINE


def key_offset(e: int) -> int:
    """Byte offset of entry ``e``'s key in its leaf."""
    line, j = entry_place(e)
    return line * LINE + KEY + ENTRY_BYTES * j


def item_offset(e: int) -> int:
    """Byte offset of entry ``e``'s item word in its leaf (8-byte aligned: entries are CASed there)."""
    return key_offset(e) + 8


def hint_offset(e: int) -> int:
    """Byte offset of entry ``e``'s hint in its leaf."""
    line, j = entry_place(e)
    return line * LINE + HINT + j


def leaf_image(nv: int, low: int, high: int | None, sibling: int, entries) -> bytearray:
    """A whole leaf: ``entries`` are (key bytes, item word) in entry order, hints written, lock
    word 0 (an SMO writes only ``[0, LOCK_OFFSET)`` of it)."""
    if len(entries) > LEAF_SLOTS:
        raise ValueError(f"a leaf holds {LEAF_SLOTS} entries, got {len(entries)}")
    img = bytearray(NODE_BYTES)
    stamp_lines(img, nv)
    HEADER.pack_into(img, 0, nv & NV_MASK, 0, HIGH_INF if high is None else 0, len(entries),
                     low.to_bytes(8, "big"), (high or 0).to_bytes(8, "big"), sibling, 0)
    for e, (key, word) in enumerate(entries, 1):
        k = key_offset(e)
        img[hint_offset(e)] = 1
        img[k:k + 8] = key
        struct.pack_into("<Q", img, k + 8, word)
    return img


HINT_SET = b"\x01"                       # what a binder WRITEs at hint_offset once its key landed


def leaf_entries(buf, off: int):
    """Every bound entry of a leaf snapshot: (entry, hint, key bytes, item word)."""
    out = []
    for e in range(1, LEAF_SLOTS + 1):
        k = off + key_offset(e)
        word = struct.unpack_from("<Q", buf, k + 8)[0]
        if word != EMPTY:
            out.append((e, buf[off + hint_offset(e)], bytes(buf[k:k + 8]), word))
    return out


@njit(cache=True)
def leaf_probe(buf64, w0, key, home):
    """One pass over a leaf snapshot (``buf64`` from word ``w0``): -1 if torn (line versions
    differ), else ``found | free << 8 | pending << 16``: the entry (1..45) whose written key is
    ``key`` (raw bytes as int64), the first empty entry in the probe order that starts at entry
    ``home`` + 1 and wraps, and a bit per pending entry (bound, key not yet written; bit e-1 for
    entry e). Word ``8 i`` of line i holds its nv (low half) and hints (bytes 4..6); entry j's key
    and item are the line's words 1 + 2 j and 2 + 2 j."""
    nv = buf64[w0] & 0xFFFFFFFF
    found = 0
    pending = 0
    for i in range(1, LINES):
        w = buf64[w0 + 8 * i]
        if (w & 0xFFFFFFFF) != nv:
            return -1
        for j in range(PER_LINE):
            if buf64[w0 + 8 * i + 2 + 2 * j] != 0:
                e = PER_LINE * (i - 1) + j + 1
                if (w >> (32 + 8 * j)) & 0xFF:
                    if found == 0 and buf64[w0 + 8 * i + 1 + 2 * j] == key:
                        found = e
                else:
                    pending |= 1 << (e - 1)
    free = 0
    for n in range(LEAF_SLOTS):
        e = (home + n) % LEAF_SLOTS + 1
        i = 1 + (e - 1) // PER_LINE
        if buf64[w0 + 8 * i + 2 + 2 * ((e - 1) % PER_LINE)] == 0:
            free = e
            break
    return found | (free << 8) | (pending << 16)


def home_entry(k: int) -> int:
    """Where a key's probe for an empty entry starts (0..44): spread keys over the entries so that
    inserters of different keys into one leaf rarely race for the same one."""
    return ((k * 0x9E3779B97F4A7C15) >> 32) % LEAF_SLOTS
