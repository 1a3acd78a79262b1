"""Clover's byte formats: the version pointer, the version block, the metadata server's messages.

Why a module of its own: the client, the metadata server and the bulk load must agree on every
bit, and the pointer is what makes Clover's reuse of old versions safe, so it is declared once.

**The pointer** (one 8-byte word, what a chain's ``next`` word, the client's address cache and the
metadata server's table hold)::

    gen:16 | units:8 | node:8 | unit_offset:32

* ``gen``: the block's generation, bumped every time the block is reused for a new version. A
  reader that follows a pointer checks that the block it READ carries the same ``gen`` (pDPM's
  ``MITSUME_GET_PTR_ENTRY_VERSION`` / ``MITSUME_GET_PTR_NEXT_VERSION`` in the pointer,
  WukLab/pDPM ``clover/mitsume_parameter.h``, 8 bits each there and wrapping at 254
  (``MITSUME_GC_WRAPUP_VERSION``); 16 bits here, wrapping from 65535 to 1, so a stale pointer is
  taken for a live one only if its block was reused a multiple of 65535 times meanwhile);
* ``units``: the block's size in 64-byte lines, so a reader READs the whole block in one verb
  (pDPM derives it from the block's slab, ``mitsume_con_alloc_lh_to_size``);
* ``node``: the memory node's fabric index plus one (0 is never a node: a word whose node field
  is 0 is not a link), ``unit_offset``: the byte offset / 64 (256 GiB per memory node).

A block's **next** word is either a link (a pointer to the next version's primary copy) or
``EMPTY(gen)``: the block's own generation alone (node field 0). A writer appends a version with
CAS(next, EMPTY(tail gen), link): a CAS on a block reused since the writer found it compares
against another generation and fails (pDPM's CAS guess is the same: ``mitsume_struct_set_pointer(
0, 0, ENTRY_VERSION(query.ptr), 0, 0)`` in ``mitsume_tool_write``).

**The version block** (every replica the same bytes, except that only the primary's ``next`` is
CASed; a backup's is written once the version has a successor, pDPM's per-replica ``nextptr``
"mesh")::

    line 0:  next u64 | gen:16 seq:48 u64 | kind:8 klen:16 vlen:32 replicas:8 u64 | checksum u64 |
             backup pointers 4 x u64 (replicas 2..r; 0 when unused)
    line 1+: key bytes, value bytes

``seq`` is the version's place in its key's chain (the first version is 1), which orders the
metadata server's updates of its table; ``kind`` is a value or a tombstone (a delete appends
one); the checksum (``nodes.systems.lib.record.checksum32``) covers every byte but ``next`` and
itself, so a READ that met a reuse of the block halfway is caught (pDPM disables its CRC in user
space, ``MITSUME_DISABLE_CRC``; the generation check alone would miss a torn reuse here).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.lib.record import checksum
from shm.fabric import gaddr

LINE = 64
UNIT = 64
WORD = 8
HEADER_BYTES = LINE                  # line 0 of a block
MAX_BACKUPS = 4                      # backup pointers that fit line 0 beside the four header words
MAX_REPLICAS = 1 + MAX_BACKUPS
MAX_UNITS = 255                      # the pointer's 8-bit units field
MAX_ITEM_BYTES = MAX_UNITS * UNIT - HEADER_BYTES   # key + value of the largest block
GEN_MAX = 0xFFFF
SEQ_MASK = (1 << 48) - 1
MAX_NODE = 254                       # fabric indexes 0..253 (the field holds index + 1)
MAX_UNIT_OFFSET = (1 << 32) - 1

KIND_VALUE = 1
KIND_TOMBSTONE = 2

_HDR = struct.Struct("<QQQQ")        # next, gen|seq, kind|klen|vlen|replicas, checksum
_BACKUPS = struct.Struct("<4Q")


class LayoutError(ValueError):
    """A key or value that no block can hold, a node or offset a pointer cannot encode."""


def pack_ptr(gen: int, units: int, node: int, offset: int) -> int:
    """The pointer word of the block of ``units`` lines at byte ``offset`` of fabric node ``node``."""
    if not 0 <= node < MAX_NODE:
        raise LayoutError(f"Clover: fabric node {node} does not fit the pointer's 8-bit node field")
    if offset % UNIT or offset // UNIT > MAX_UNIT_OFFSET:
        raise LayoutError(f"Clover: offset {offset:#x} is not a 64-byte unit below 256 GiB")
    return (gen & GEN_MAX) << 48 | (units & 0xFF) << 40 | (node + 1) << 32 | offset // UNIT


def ptr_gen(p: int) -> int:
    return p >> 48


def ptr_units(p: int) -> int:
    return (p >> 40) & 0xFF


def ptr_node(p: int) -> int:
    """The fabric index of the pointed block's node (-1: not a link)."""
    return ((p >> 32) & 0xFF) - 1


def ptr_offset(p: int) -> int:
    return (p & MAX_UNIT_OFFSET) * UNIT


def is_link(word: int) -> bool:
    return (word >> 32) & 0xFF != 0


def empty_next(gen: int) -> int:
    """The ``next`` word of a tail block of generation ``gen``."""
    return (gen & GEN_MAX) << 48


def ptr_gaddr(p: int) -> int:
    """The global address (``shm.fabric.gaddr``) of the pointed block."""
    return gaddr(ptr_node(p), ptr_offset(p))


def next_gen(gen: int) -> int:
    """The generation a reused block gets (1..65535, never 0: a zeroed word is no valid ``next``)."""
    return gen % GEN_MAX + 1


def block_units(key_len: int, value_len: int) -> int:
    return (HEADER_BYTES + key_len + value_len + UNIT - 1) // UNIT


class Version(NamedTuple):
    """One decoded block (its primary copy)."""

    next: int
    gen: int
    seq: int
    kind: int
    key: bytes
    value: bytes
    backups: tuple            # pointers of the backup copies (same gen and units)


def encode_block(gen: int, seq: int, kind: int, key: bytes, value: bytes, backups: tuple) -> bytes:
    """The bytes of a new version's block (``next`` = EMPTY(gen)), the same for every replica."""
    if len(key) + len(value) > MAX_ITEM_BYTES:
        raise LayoutError(f"Clover: a {len(key)} B key and {len(value)} B value exceed the largest block "
                          f"({MAX_ITEM_BYTES} B of key and value)")
    if len(backups) > MAX_BACKUPS:
        raise LayoutError(f"Clover: {len(backups) + 1} replicas exceed the {MAX_REPLICAS} a header holds")
    word1 = (gen & GEN_MAX) << 48 | (seq & SEQ_MASK)
    word2 = kind | len(key) << 8 | len(value) << 24 | (len(backups) + 1) << 56
    tail = _BACKUPS.pack(*(tuple(backups) + (0,) * (MAX_BACKUPS - len(backups))))
    body = key + value
    csum = checksum(struct.pack("<QQ", word1, word2) + tail, body)
    pad = (-(HEADER_BYTES + len(body))) % UNIT
    return _HDR.pack(empty_next(gen), word1, word2, csum) + tail + body + bytes(pad)


def decode_block(data, key: bytes | None = None) -> Version | None:
    """The version in ``data`` (a READ of the whole block), or None if it is torn, corrupt, or (with
    ``key``) another key's. The caller compares ``gen`` with its pointer's."""
    buf = bytes(data)
    if len(buf) < HEADER_BYTES:
        return None
    nxt, word1, word2, csum = _HDR.unpack_from(buf, 0)
    kind = word2 & 0xFF
    klen = (word2 >> 8) & 0xFFFF
    vlen = (word2 >> 24) & 0xFFFFFFFF
    replicas = word2 >> 56
    if kind not in (KIND_VALUE, KIND_TOMBSTONE) or not 1 <= replicas <= MAX_REPLICAS \
            or HEADER_BYTES + klen + vlen > len(buf):
        return None
    body = buf[HEADER_BYTES:HEADER_BYTES + klen + vlen]
    if checksum(buf[8:24] + buf[32:64], body) != csum:
        return None
    k = body[:klen]
    if key is not None and k != key:
        return None
    backups = _BACKUPS.unpack_from(buf, 32)[:replicas - 1]
    return Version(nxt, word1 >> 48, word1 & SEQ_MASK, kind, k, body[klen:], backups)


# -- the metadata server's messages (two-sided RPC, one datagram each: shm/rpc.py) ----------------

M_QUERY = 1        # key -> (pointer, seq) of the latest version the server knows, or nothing
M_CREATE = 2       # (pointer, key) of a first version -> created, or exists + (pointer, seq)
M_GC = 3           # [(new pointer, new seq, key)] -> the server's table moved past the old versions
M_ALLOC = 4        # (node, bytes) -> offset of a fresh chunk on that memory node

PTR_SEQ = struct.Struct("<QQ")
CREATED, EXISTS = 0, 1
CREATE_REPLY = struct.Struct("<BQQ")
GC_ENTRY = struct.Struct("<QQH")     # new pointer, new seq, key length; the key follows
ALLOC_REQ = struct.Struct("<HQ")
ALLOC_REPLY = struct.Struct("<Q")
NO_MEMORY = (1 << 64) - 1
