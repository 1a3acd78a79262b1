"""Sherman's node format: 1 KB nodes of 16 cache lines, a node version on every line.

Every node (leaf or internal) is ``NODE_BYTES`` = 1024 bytes = 16 lines of 64 bytes, and every
line starts with the node's 32-bit version ``nv`` (little-endian). A whole-node write (a split, an
internal-node insert) stamps ``nv + 1`` on all 16 lines; a READ is consistent iff all 16 lines
carry the same ``nv`` (the fabric copies each 64-byte line atomically, in any order, so a READ
racing a whole-node write sees a mix and retries). A leaf entry is exactly one line, so an
entry write (insert into a free line, update, delete) is atomic by itself and keeps ``nv``: it
bumps only the entry's own 8-bit version ``ev``. That is Sherman's two-level version (node-level
``nv`` + entry-level ``ev``) in the per-cache-line form SMART-BT/Sherman+ use, correct whatever
order the NIC writes the lines in (the stamping and the check are the systems library's
``stamp_lines`` / ``lines_consistent``, nodes/systems/lib/record.py)::

    line 0 (header)                         line i = 1..15, leaf: one entry per line
    +0  nv        u32                       +0  nv        u32  (= the header's nv)
    +4  level     u8   (0 = leaf)           +4  ev        u8   entry version
    +5  flags     u8   (bit 0: high = +inf) +5  vlen      u8   0..48 inline, 255 out of line
    +6  count     u16  (internal: #keys)    +6  eflags    u8   (bit 0: used)
    +8  low       8 B  key, inclusive       +8  key       8 B
    +16 high      8 B  key, exclusive       +16 value     48 B inline, or
    +24 sibling   u64  gaddr (0: none)          [block gaddr u64 | length u32]
    +32 leftmost  u64  (internal) child
    +40 reserved                            line i = 1..15, internal: 3 (key, child) pairs
                                            +0 nv u32 | +4 pad | +8 k0 c0 | +24 k1 c1 | +40 k2 c2

Keys are 8 bytes, ordered as bytes (big-endian integers, ``int.from_bytes(key, "big")``), stored
raw. Leaf entries are *unsorted* within a leaf (Sherman's leaf layout: an insert writes one free
line, never shifts entries); leaves are ordered by their fences and chained by sibling pointers,
and scans sort each leaf's entries. Internal nodes keep their keys sorted (45 keys, 46 children).
Values up to ``INLINE_VALUE`` = 48 bytes live in the entry; longer ones (up to ``MAX_VALUE``) in
an immutable out-of-line block (``[key 8 B | length u32 | pad 4 B | value]``, 64-byte units)
written before the entry that points to it.
"""

from __future__ import annotations

import struct

import numpy as np
from numba import njit

from nodes.systems.lib.record import lines_consistent, stamp_lines

LINE = 64
LINES = 16
NODE_BYTES = LINE * LINES
NODE_UNITS = NODE_BYTES // LINE           # 64-byte units (ChunkAllocator's unit)
LEAF_SLOTS = LINES - 1                    # entries per leaf (lines 1..15)
INTERNAL_KEYS = 3 * (LINES - 1)           # 45 keys, 46 children
KEY_BYTES = 8
INLINE_VALUE = 48
OUT_OF_LINE = 255
MAX_VALUE = 16 << 10                      # out-of-line block limit (a READ into the thread buffer)
BLOCK_HEADER = 16

HIGH_INF = 1
USED = 1
NV_MASK = 0xFFFFFFFF

# the root word: level in the top 8 bits, then node:8 | offset:48 (node <= 255)
ROOT_LEVEL_SHIFT = 56
MAX_NODE = 255

HEADER = struct.Struct("<IBBH8s8sQQ")      # nv, level, flags, count, low, high, sibling, leftmost
LINE_HEAD = struct.Struct("<IBBBx8s")      # nv, ev, vlen, eflags, key
REF = struct.Struct("<QI")                 # out-of-line block: gaddr, length

_U64 = (1 << 64) - 1


class KeySizeError(ValueError):
    """Sherman keys are exactly 8 bytes."""


class ValueTooLarge(ValueError):
    """A value longer than MAX_VALUE."""


def key_int(key: bytes) -> int:
    """A key as the big-endian integer that orders keys as bytes (raises KeySizeError)."""
    if len(key) != KEY_BYTES:
        raise KeySizeError(f"Sherman keys are exactly {KEY_BYTES} bytes (the rack's 8-byte ids); got "
                           f"{len(key)} bytes: {bytes(key[:16])!r}")
    return int.from_bytes(key, "big")


def key_signed_le(key: bytes) -> int:
    """The key's raw bytes as a signed little-endian int64 (what the jitted probe compares)."""
    return int.from_bytes(key, "little", signed=True)


def pack_root(addr: int, level: int) -> int:
    from shm.fabric import gaddr_node, gaddr_offset
    return (level << ROOT_LEVEL_SHIFT) | (gaddr_node(addr) << 48) | gaddr_offset(addr)


def unpack_root(word: int) -> tuple[int, int]:
    """(node gaddr, level) of a root word."""
    from shm.fabric import gaddr
    return gaddr((word >> 48) & 0xFF, word & ((1 << 48) - 1)), word >> ROOT_LEVEL_SHIFT


# -- node images (bytes written by whole-node WRITEs) ---------------------------------------------

def _header(img: bytearray, nv: int, level: int, low: int, high: int | None, sibling: int, count: int = 0,
            leftmost: int = 0) -> None:
    HEADER.pack_into(img, 0, nv & NV_MASK, level, HIGH_INF if high is None else 0, count,
                     low.to_bytes(8, "big"), (high or 0).to_bytes(8, "big"), sibling, leftmost)


def leaf_image(nv: int, low: int, high: int | None, sibling: int, entries) -> bytearray:
    """A leaf: ``entries`` are (ev, vlen, key bytes, 48-byte value field) in line order."""
    if len(entries) > LEAF_SLOTS:
        raise ValueError(f"a leaf holds {LEAF_SLOTS} entries, got {len(entries)}")
    img = bytearray(NODE_BYTES)
    stamp_lines(img, nv)
    _header(img, nv, 0, low, high, sibling, len(entries))
    for i, (ev, vlen, key, field) in enumerate(entries, 1):
        LINE_HEAD.pack_into(img, i * LINE, nv & NV_MASK, ev & 0xFF, vlen, USED, key)
        img[i * LINE + 16:i * LINE + 16 + len(field)] = field
    return img


def internal_image(nv: int, level: int, low: int, high: int | None, sibling: int, leftmost: int, keys,
                   children) -> bytearray:
    """An internal node: sorted ``keys`` (ints), ``children[i]`` the child for keys >= keys[i]."""
    if len(keys) > INTERNAL_KEYS or len(keys) != len(children):
        raise ValueError(f"an internal node holds {INTERNAL_KEYS} keys; got {len(keys)} keys, {len(children)} children")
    img = bytearray(NODE_BYTES)
    stamp_lines(img, nv)
    _header(img, nv, level, low, high, sibling, len(keys), leftmost)
    for e, (k, c) in enumerate(zip(keys, children)):
        off = (1 + e // 3) * LINE + 8 + 16 * (e % 3)
        img[off:off + 8] = k.to_bytes(8, "big")
        struct.pack_into("<Q", img, off + 8, c)
    return img


def entry_line(nv: int, ev: int, key: bytes, vlen: int, field: bytes, used: bool = True) -> bytearray:
    line = bytearray(LINE)
    LINE_HEAD.pack_into(line, 0, nv & NV_MASK, ev & 0xFF, vlen, USED if used else 0, key)
    line[16:16 + len(field)] = field
    return line


def value_field(value: bytes, block: int = 0) -> tuple[int, bytes]:
    """(vlen byte, 48-byte field) for an inline value, or for a block reference."""
    if block:
        return OUT_OF_LINE, REF.pack(block, len(value))
    return len(value), value


def block_image(key: bytes, value: bytes) -> bytes:
    return key + struct.pack("<I4x", len(value)) + value


def block_units(value_len: int) -> int:
    return (BLOCK_HEADER + value_len + LINE - 1) // LINE


# -- parsing snapshots ------------------------------------------------------------------------------

class Header:
    """The header line of a node snapshot."""

    __slots__ = ("nv", "level", "low", "high", "sibling", "count", "leftmost")

    def __init__(self, buf, off: int):
        nv, level, flags, count, low, high, sibling, leftmost = HEADER.unpack_from(buf, off)
        self.nv = nv
        self.level = level
        self.low = int.from_bytes(low, "big")
        self.high = None if flags & HIGH_INF else int.from_bytes(high, "big")
        self.sibling = sibling
        self.count = count
        self.leftmost = leftmost


def leaf_entries(buf, off: int):
    """Every used entry of a leaf snapshot: (line, key int, ev, vlen, key bytes, field bytes)."""
    out = []
    for i in range(1, LINES):
        base = off + i * LINE
        nv, ev, vlen, eflags, key = LINE_HEAD.unpack_from(buf, base)
        if eflags & USED:
            out.append((i, int.from_bytes(key, "big"), ev, vlen, key,
                        bytes(buf[base + 16:base + 16 + (12 if vlen == OUT_OF_LINE else vlen)])))
    return out


def internal_entries(buf, off: int, count: int):
    """(keys, children) of an internal snapshot (count pairs)."""
    keys, children = [], []
    for e in range(min(count, INTERNAL_KEYS)):
        o = off + (1 + e // 3) * LINE + 8 + 16 * (e % 3)
        keys.append(int.from_bytes(buf[o:o + 8], "big"))
        children.append(struct.unpack_from("<Q", buf, o + 8)[0])
    return keys, children


# -- the jitted leaf probe (the version check is lines_consistent, nodes/systems/lib/record.py) -----

TORN = -1


@njit(cache=True)
def leaf_probe(buf64, w0, key):
    """One pass over a leaf snapshot: -1 if torn (line versions differ), else
    ``found | free << 8`` with the line (1..15) holding ``key`` (raw bytes as int64) and the first
    free line (0: none)."""
    nv = buf64[w0] & 0xFFFFFFFF
    found = 0
    free = 0
    for i in range(1, 16):
        w = buf64[w0 + 8 * i]
        if (w & 0xFFFFFFFF) != nv:
            return -1
        if (w >> 48) & 1:
            if found == 0 and buf64[w0 + 8 * i + 1] == key:
                found = i
        elif free == 0:
            free = i
    return found | (free << 8)


def as_int64(buf: np.ndarray) -> np.ndarray:
    return buf[: buf.shape[0] // 8 * 8].view(np.int64)
