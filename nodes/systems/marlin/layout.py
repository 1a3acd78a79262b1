"""Marlin's leaf format and data items (docs/marlin.md), on Sherman's 1 KB nodes.

Nodes are Sherman's (nodes/systems/sherman/layout.py): 16 lines of 64 B, the node version ``nv``
on every line, the header in line 0, internal nodes unchanged. A Marlin leaf keeps one entry per
line (lines 1..15) like Sherman's, but an entry holds a key and a *pointer* to an out-of-place
data item instead of the value, and the last 8 bytes of the node are the leaf's Spear lock
(nodes/systems/lib/spear.py)::

    leaf line i = 1..15                         line 15 also
    +0  nv     u32  (= the header's nv)         +56 lock   i64  Spear lock word (FAA only)
    +4  hint   u8   1: the key below is written
    +5  pad    3 B
    +8  key    8 B  (valid when hint = 1)
    +16 item   u64  0 empty, 1 tombstone, else  units:8 | node:8 | offset:48
    +24 unused

    data item (64-byte units, immutable once published)
    +0  key    8 B
    +8  length u32
    +12 check  u32  checksum32 of key and value (a reader tells a whole item of this key)
    +16 value

Why the entry is bound before its key is written: an insert claims an empty entry with one CAS of
its ``item`` word (0 -> the new item), then WRITEs ``hint`` and ``key``. A CAS covers 8 bytes, the
key and the pointer are 16, and writing the key first would let two inserters racing for one
entry leave the loser's key beside the winner's item. Between the CAS and the key's WRITE the
entry is *pending* (item set, hint 0): its key is in its item, which a client that needs it READs.
Within a leaf between two splits an entry is bound to one key for good (empty -> item -> tombstone
-> item ..., never empty again), so a key's hint, once written, never changes, and anyone who
learnt it may write it (the same bytes).

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

LEAF_SLOTS = LINES - 1
LOCK_OFFSET = NODE_BYTES - 8             # the Spear word: line 15, +56
HINT = 4                                 # offsets within an entry line
KEY = 8
ITEM = 16

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


def leaf_image(nv: int, low: int, high: int | None, sibling: int, entries) -> bytearray:
    """A whole leaf: ``entries`` are (key bytes, item word), hints written, lock word 0 (an SMO
    writes only ``[0, LOCK_OFFSET)`` of it)."""
    if len(entries) > LEAF_SLOTS:
        raise ValueError(f"a leaf holds {LEAF_SLOTS} entries, got {len(entries)}")
    img = bytearray(NODE_BYTES)
    stamp_lines(img, nv)
    HEADER.pack_into(img, 0, nv & NV_MASK, 0, HIGH_INF if high is None else 0, len(entries),
                     low.to_bytes(8, "big"), (high or 0).to_bytes(8, "big"), sibling, 0)
    for i, (key, word) in enumerate(entries, 1):
        base = i * LINE
        img[base + HINT] = 1
        img[base + KEY:base + KEY + 8] = key
        struct.pack_into("<Q", img, base + ITEM, word)
    return img


def hint_bytes(key: bytes) -> bytes:
    """What a binder WRITEs at ``line + HINT`` once its CAS won: hint = 1, pad, key."""
    return b"\x01\x00\x00\x00" + key


def leaf_entries(buf, off: int):
    """Every bound entry of a leaf snapshot: (line, hint, key bytes, item word)."""
    out = []
    for i in range(1, LINES):
        base = off + i * LINE
        word = struct.unpack_from("<Q", buf, base + ITEM)[0]
        if word != EMPTY:
            out.append((i, buf[base + HINT], bytes(buf[base + KEY:base + KEY + 8]), word))
    return out


@njit(cache=True)
def leaf_probe(buf64, w0, key, home):
    """One pass over a leaf snapshot: -1 if torn (line versions differ), else
    ``found | free << 8 | pending << 16``: the line (1..15) whose written key is ``key`` (raw
    bytes as int64), the first empty line in the probe order that starts at line ``home`` + 1
    and wraps, and a bit per pending line (bound, key not yet written; bit i-1 for line i)."""
    nv = buf64[w0] & 0xFFFFFFFF
    found = 0
    pending = 0
    for i in range(1, 16):
        w = buf64[w0 + 8 * i]
        if (w & 0xFFFFFFFF) != nv:
            return -1
        item = buf64[w0 + 8 * i + 2]
        if item != 0:
            if (w >> 32) & 0xFF:
                if found == 0 and buf64[w0 + 8 * i + 1] == key:
                    found = i
            else:
                pending |= 1 << (i - 1)
    free = 0
    for j in range(15):
        i = (home + j) % 15 + 1
        if buf64[w0 + 8 * i + 2] == 0:
            free = i
            break
    return found | (free << 8) | (pending << 16)


def home_line(k: int) -> int:
    """Where a key's probe for an empty entry starts (0..14): spread keys over the lines so that
    inserters of different keys into one leaf rarely race for the same entry."""
    return ((k * 0x9E3779B97F4A7C15) >> 32) % LEAF_SLOTS
