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
ENTRY_LINE = struct.Struct("<IBBBx8s48s")  # a leaf entry line whole: LINE_HEAD, then the value field
INTERNAL_LINE = struct.Struct("<8x8sQ8sQ8sQ8x")  # an internal line: nv and pad, three (key, child), pad
PAIR = struct.Struct("<8sQ")               # one (key, child) pair of an internal node

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
    nv &= NV_MASK
    pack = ENTRY_LINE.pack_into
    at = LINE
    for ev, vlen, key, field in entries:
        if len(field) > INLINE_VALUE:
            raise ValueError(f"a leaf entry's value field holds {INLINE_VALUE} bytes, got {len(field)}")
        pack(img, at, nv, ev & 0xFF, vlen, USED, key, field)     # a short field: zeros after it
        at += LINE
    return img


def internal_image(nv: int, level: int, low: int, high: int | None, sibling: int, leftmost: int, keys,
                   children) -> bytearray:
    """An internal node: sorted ``keys`` (ints), ``children[i]`` the child for keys >= keys[i]."""
    if len(keys) > INTERNAL_KEYS or len(keys) != len(children):
        raise ValueError(f"an internal node holds {INTERNAL_KEYS} keys; got {len(keys)} keys, {len(children)} children")
    img = bytearray(NODE_BYTES)
    stamp_lines(img, nv)
    _header(img, nv, level, low, high, sibling, len(keys), leftmost)
    pack = PAIR.pack_into
    off = LINE + 8                     # pairs at +8, +24, +40 of lines 1..15
    for k, c in zip(keys, children):
        pack(img, off, k.to_bytes(8, "big"), c)
        off += 32 if off % LINE == 40 else 16
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
    i = 0
    # the 15 entry lines copied once and unpacked whole (one struct call a line)
    for nv, ev, vlen, eflags, key, field in ENTRY_LINE.iter_unpack(bytes(buf[off + LINE:off + NODE_BYTES])):
        i += 1
        if eflags & USED:
            out.append((i, int.from_bytes(key, "big"), ev, vlen, key, field[:12 if vlen == OUT_OF_LINE else vlen]))
    return out


def internal_entries(buf, off: int, count: int):
    """(keys, children) of an internal snapshot (count pairs)."""
    keys, children = [], []
    n = min(count, INTERNAL_KEYS)
    if n <= 0:
        return keys, children
    # the lines that hold the pairs, copied once; each line's three pairs in one struct call
    for k0, c0, k1, c1, k2, c2 in INTERNAL_LINE.iter_unpack(bytes(buf[off + LINE:off + LINE * (1 + (n + 2) // 3)])):
        keys += (int.from_bytes(k0, "big"), int.from_bytes(k1, "big"), int.from_bytes(k2, "big"))
        children += (c0, c1, c2)
    if len(keys) > n:                  # the last line's unused pairs
        del keys[n:], children[n:]
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


# -- the packed leaf: Sherman's own layout (thustorage/Sherman include/Tree.h, ``LeafPage``) -------
#
# Sherman's code packs a 1 KB leaf with ``kLeafCardinality`` = (1024 - 35 header - 2 versions - 8
# crc/lock word) / 18 = 54 entries of 18 bytes: ``f_version:4 | key 8 B | value 8 B | r_version:4``
# (``LeafEntry``, packed), the page's ``front_version`` before the header and ``rear_version``
# after the entries. A whole-page write (a split) bumps the front and rear versions; an entry
# write (``leaf_page_store``) bumps the entry's f/r versions and WRITEs ``sizeof(LeafEntry)`` = 18
# bytes. A reader checks front == rear and f == r. Here, in the same bytes::
#
#   +0    nv (front version) u32     +32 + 18 (s - 1), entry s = 1..54:
#   +4    level u8 (0)                 +0  f   u8  version:4 (low) | code:4 (high)
#   +5    flags u8                     +1  key 8 B
#   +6    count u16                    +9  value 8 B, or an out-of-line block word
#   +8    low, +16 high, +24 sibling   +17 r   u8  = f (written last of the entry)
#   +1020 rear nv u32 (= front)
#
# ``code``: 0 free, 1..9 an inline value of code - 1 bytes (Sherman's values are 8 B), 15 a value
# in an out-of-line block whose word is ``node:8 | units:14 | offset / 64 : 42`` (the block's
# units, so a get READs the block in one go). Soundness of front/rear: the model lands a
# multi-line WRITE's lines in one sweep (ascending, or descending on NICs without
# ``nic.ordered_multiline_writes``) and a READ samples its lines in one ascending sweep
# (docs/fabric.md "Ordering rules"); two monotone sweeps cross at most once, so a READ that
# overlaps a whole-leaf WRITE has its first and last lines on different sides and front != rear.
# SMART's authors (ASPLOS'24 §6.2.3) point out that hardware does not promise a monotone sweep,
# which is why their Sherman+ stamps a version on every line: ``leaf_layout = "per-line"``.

PACKED_HEADER = 32
PACKED_ENTRY = 18
PACKED_REAR = NODE_BYTES - 4
PACKED_SLOTS = (PACKED_REAR - PACKED_HEADER) // PACKED_ENTRY    # 54, Sherman's kLeafCardinality
PACKED_INLINE = 8                                              # Sherman's Value (uint64_t)
PACKED_OUT = 15
PACKED_SLOT = struct.Struct("<B8s8sB")                         # f, key, value field, r
_BLOCK_UNITS_BITS = 14
_BLOCK_OFF_BITS = 42


def packed_block_word(block: int, value_len: int) -> int:
    """The 8-byte value field of an entry whose value is in the out-of-line block at ``block``."""
    from shm.fabric import gaddr_node, gaddr_offset
    off = gaddr_offset(block)
    if off % LINE:
        raise ValueError(f"an out-of-line block must start on a 64-byte line, got offset {off:#x}")
    return ((gaddr_node(block) << (_BLOCK_UNITS_BITS + _BLOCK_OFF_BITS)) | (block_units(value_len) << _BLOCK_OFF_BITS)
            | (off // LINE))


def packed_block_ref(word: int) -> tuple[int, int]:
    """(block gaddr, bytes to READ) of an out-of-line block word."""
    from shm.fabric import gaddr
    node = word >> (_BLOCK_UNITS_BITS + _BLOCK_OFF_BITS)
    units = (word >> _BLOCK_OFF_BITS) & ((1 << _BLOCK_UNITS_BITS) - 1)
    return gaddr(node, (word & ((1 << _BLOCK_OFF_BITS) - 1)) * LINE), units * LINE


def packed_entry(ev: int, key: bytes, vlen: int, field: bytes, used: bool = True) -> bytes:
    """The 18 bytes of a packed entry (``vlen`` 0..8 inline, OUT_OF_LINE: ``field`` is the block word)."""
    code = 0 if not used else (PACKED_OUT if vlen == OUT_OF_LINE else vlen + 1)
    fr = (ev & 0xF) | (code << 4)
    if len(key) != KEY_BYTES or len(field) > PACKED_INLINE:
        raise ValueError(f"a packed entry takes an {KEY_BYTES}-byte key and at most {PACKED_INLINE} bytes of value "
                         f"field, got {len(key)} and {len(field)}")
    return PACKED_SLOT.pack(fr, bytes(key), bytes(field), fr)       # a short field: zeros after it


def packed_leaf_image(nv: int, low: int, high: int | None, sibling: int, entries) -> bytearray:
    """A packed leaf: ``entries`` (ev, vlen, key bytes, value field) in slot order."""
    if len(entries) > PACKED_SLOTS:
        raise ValueError(f"a packed leaf holds {PACKED_SLOTS} entries, got {len(entries)}")
    img = bytearray(NODE_BYTES)
    HEADER.pack_into(img, 0, nv & NV_MASK, 0, HIGH_INF if high is None else 0, len(entries),
                     low.to_bytes(8, "big"), (high or 0).to_bytes(8, "big"), sibling, 0)
    img[PACKED_HEADER:PACKED_HEADER + 8] = bytes(8)        # HEADER's leftmost word is entry space here
    body = b"".join([packed_entry(ev, key, vlen, field) for ev, vlen, key, field in entries])
    img[PACKED_HEADER:PACKED_HEADER + len(body)] = body
    struct.pack_into("<I", img, PACKED_REAR, nv & NV_MASK)
    return img


@njit(cache=True)
def packed_leaf_probe(buf, off, key):
    """One pass over a packed leaf snapshot (``buf`` uint8): -1 if torn (front != rear, or an
    entry's f != r), else ``found | free << 8`` with the slot (1..54) holding ``key`` (the key's
    raw bytes as a little-endian int64, :func:`key_signed_le`: a Python int the dispatcher types
    int64 without a numpy scalar made per probe) and the first free slot (0: none)."""
    for j in range(4):
        if buf[off + j] != buf[off + 1020 + j]:
            return -1
    found = 0
    free = 0
    for s in range(54):
        e = off + 32 + 18 * s
        f = buf[e]
        if f != buf[e + 17]:
            return -1
        if (f >> 4) == 0:
            if free == 0:
                free = s + 1
        elif found == 0:
            k = np.int64(0)                # the entry's key bytes, as key_signed_le reads them
            for j in range(8):
                k |= np.int64(buf[e + 1 + j]) << np.int64(8 * j)
            if k == key:
                found = s + 1
    return found | (free << 8)


@njit(cache=True)
def packed_leaf_consistent(buf, off):
    """Front == rear and f == r for every entry of a packed leaf snapshot."""
    for j in range(4):
        if buf[off + j] != buf[off + 1020 + j]:
            return False
    for s in range(54):
        e = off + 32 + 18 * s
        if buf[e] != buf[e + 17]:
            return False
    return True


# -- the two leaf formats, behind one interface the client uses -----------------------------------

class PerLineLeaf:
    """One entry per 64-byte line, the node version on every line (SMART's Sherman+)."""

    name = "per-line"
    slots = LEAF_SLOTS
    inline = INLINE_VALUE
    entry_bytes = LINE

    @staticmethod
    def entry_offset(slot: int) -> int:
        return slot * LINE

    @staticmethod
    def probe(buf, b64, off: int, key: bytes) -> int:
        return leaf_probe(b64, off >> 3, key_signed_le(key))

    @staticmethod
    def consistent(buf, b64, off: int) -> bool:
        return lines_consistent(b64, off >> 3, LINES)

    @staticmethod
    def image(nv, low, high, sibling, entries) -> bytearray:
        return leaf_image(nv, low, high, sibling, entries)

    @staticmethod
    def entries(buf, off: int):
        return leaf_entries(buf, off)

    @staticmethod
    def entry(nv: int, ev: int, key: bytes, vlen: int, field: bytes, used: bool = True) -> bytes:
        return bytes(entry_line(nv, ev, key, vlen, field, used))

    @staticmethod
    def version(mv, off: int, slot: int) -> int:
        return mv[off + slot * LINE + 4]

    @staticmethod
    def value_field(value: bytes, block: int = 0) -> tuple[int, bytes]:
        return value_field(value, block)

    @staticmethod
    def value_at(mv, off: int, slot: int):
        """The inline value (bytes), or (block gaddr, bytes to READ, value length) of slot's entry."""
        base = off + slot * LINE
        vlen = mv[base + 5]
        if vlen != OUT_OF_LINE:
            return bytes(mv[base + 16:base + 16 + vlen])
        block, length = REF.unpack_from(mv, base + 16)
        return block, BLOCK_HEADER + length, length

    @staticmethod
    def ref_of(vlen: int, field: bytes):
        """(block, bytes to READ, value length) of a parsed entry's out-of-line field."""
        block, length = REF.unpack_from(field, 0)
        return block, BLOCK_HEADER + length, length


class PackedLeaf:
    """Sherman's own leaf: 54 packed 18-byte entries, front/rear node versions, f/r entry versions."""

    name = "packed"
    slots = PACKED_SLOTS
    inline = PACKED_INLINE
    entry_bytes = PACKED_ENTRY

    @staticmethod
    def entry_offset(slot: int) -> int:
        return PACKED_HEADER + (slot - 1) * PACKED_ENTRY

    @staticmethod
    def probe(buf, b64, off: int, key: bytes) -> int:
        return packed_leaf_probe(buf, off, key_signed_le(key))

    @staticmethod
    def consistent(buf, b64, off: int) -> bool:
        return packed_leaf_consistent(buf, off)

    @staticmethod
    def image(nv, low, high, sibling, entries) -> bytearray:
        return packed_leaf_image(nv, low, high, sibling, entries)

    @staticmethod
    def entries(buf, off: int):
        """Every used entry: (slot, key int, ev, vlen, key bytes, value field bytes), as leaf_entries."""
        out = []
        s = 0
        start = off + PACKED_HEADER
        # the 54 entries copied once and unpacked whole (one struct call an entry)
        for f, key, field, _ in PACKED_SLOT.iter_unpack(bytes(buf[start:start + PACKED_SLOTS * PACKED_ENTRY])):
            s += 1
            code = f >> 4
            if code:
                if code == PACKED_OUT:
                    out.append((s, int.from_bytes(key, "big"), f & 0xF, OUT_OF_LINE, key, field))
                else:
                    out.append((s, int.from_bytes(key, "big"), f & 0xF, code - 1, key, field[:code - 1]))
        return out

    @staticmethod
    def entry(nv: int, ev: int, key: bytes, vlen: int, field: bytes, used: bool = True) -> bytes:
        return packed_entry(ev, key, vlen, field, used)

    @staticmethod
    def version(mv, off: int, slot: int) -> int:
        return int(mv[off + PACKED_HEADER + (slot - 1) * PACKED_ENTRY]) & 0xF

    @staticmethod
    def value_field(value: bytes, block: int = 0) -> tuple[int, bytes]:
        if block:
            return OUT_OF_LINE, packed_block_word(block, len(value)).to_bytes(8, "little")
        return len(value), value

    @staticmethod
    def value_at(mv, off: int, slot: int):
        e = off + PACKED_HEADER + (slot - 1) * PACKED_ENTRY
        code = int(mv[e]) >> 4
        if code != PACKED_OUT:
            return bytes(mv[e + 9:e + 9 + code - 1])
        block, nbytes = packed_block_ref(int.from_bytes(mv[e + 9:e + 17], "little"))
        return block, nbytes, None

    @staticmethod
    def ref_of(vlen: int, field: bytes):
        block, nbytes = packed_block_ref(int.from_bytes(field, "little"))
        return block, nbytes, None


LEAF_LAYOUTS = {PackedLeaf.name: PackedLeaf, PerLineLeaf.name: PerLineLeaf}


def leaf_format(name: str):
    """The leaf format class of a ``leaf_layout`` option value."""
    return LEAF_LAYOUTS[name]


def node_is_leaf(buf, off: int) -> bool:
    """The level byte of a node snapshot's header (line 0, landed whole) says leaf."""
    return buf[off + 4] == 0
