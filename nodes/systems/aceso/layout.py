"""Aceso's remote formats on top of RACE's: the versioned slot word, the KV record and its
trailer, the block / sub-block geometry and where a data block's parity lives.

**Slot word.** Aceso's public code (dmemsys/Aceso ``src/Hashtable.h``) has 16-byte slots: an
atomic word ``fp:8 | version:8 | server_id:8 | offset:40`` that clients CAS, and a meta word
``epoch:56 | kv_len:8`` that no client ever changes (``Client::_fill_slot`` copies the epoch, with
a TODO to bump it, and sets ``kv_len = 1``: one sub-block). RACE's 8-byte word already carries the
length (``units``) and leaves the low bits of a 64-byte-aligned offset free; Aceso's KV records
sit in sub-blocks of at least 256 bytes (``SUBBLOCK_ALIGN``), so bits 1..7 of the offset are
always 0 and hold the slot **version** (7 bits instead of Aceso's 8; bit 0 stays RACE's tentative
bit)::

    63      56 55      48 47      40 39                          8 7          1   0
    +---------+----------+----------+-----------------------------+------------+---+
    |   fp    |  units   |   node   | record offset (256-B units) |  version   | T |
    +---------+----------+----------+-----------------------------+------------+---+

So RACE's buckets (64-byte lines of 7 slots), its ``probe``/``scan`` and its insert protocol work
unchanged, and one 8-byte CAS on the only index copy commits a write, as in Aceso. Why not the
16-byte slot: RACE's bucket is one cache line (its header check and slot scan rely on a READ of a
bucket being atomic); a 128-byte bucket of 16-byte slots is two lines, and its meta word holds
nothing the 8-byte word cannot (the epoch is never bumped; the length is ``units``).

**KV record.** RACE's checksummed block (``key_len u16 | value_len u16 | checksum32 | key |
value``, so ``check_block`` matches and validates it) followed by a 16-byte **trailer** with what
Aceso's ``KVLogHeader`` adds: the record's full 64-bit version (``version:8 | epoch:56`` in Aceso)
and the slot it was written for, ``op:8 | node:8 | slot offset:48`` (Aceso: ``slot_sid:16 |
slot_offset:48`` and a separate op byte). A write that lost its CAS marks its record's version
``INVALID_VERSION`` (Aceso's ``invalidVersion``), so a recovery replaying records would skip it.

**Blocks.** A client takes a *block* (``block_bytes``) from a memory node by RPC and fills it with
*sub-blocks* (``subblock_bytes``, Aceso's ``subblockSize`` = 1 KiB), one record each (several when
a record is larger); every record WRITE and READ moves whole sub-blocks, as the code's do
(``_fill_write_kv_ror``, ``_fill_read_kv_ror``: ``size = subblockSize``). A delete's log record is
written at its own size (the code: header + key + tail).

**Parity placement** (Aceso's slab map, ``Client::_init_slab_map``, generalised): a memory node
hands out its data blocks round-robin over ``k`` *slabs*; the block in slab ``s`` of node ``d`` has
its parity for *line* ``j`` on node ``(d - 1 - s) mod n`` (line 0) and ``(d + 1 + s) mod n`` (line
1). Line 0 of parity node ``q`` thus covers slab ``s`` of node ``q + 1 + s`` for ``s < k``: ``k``
data blocks on ``k`` distinct nodes, none of them ``q``: one XOR stripe (the code's ``codeK = 3``,
``codeP = 1`` per line, two lines: ``parityNum = 2``).
"""

from __future__ import annotations

import struct

from nodes.systems.api import SystemGaveUp
from nodes.systems.race.layout import (
    BLOCK_HEADER, MAX_UNITS, NODE_SHIFT, OFFSET_MASK, TENTATIVE, UNIT, UNITS_SHIFT, encode_block, slot_word,
)

#: Records start on this alignment (sub-blocks are multiples of it), which frees bits 1..7 of the
#: slot's offset for the version.
SUBBLOCK_ALIGN = 256
VERSION_SHIFT = 1
VERSION_BITS = 7
VERSION_MASK = ((1 << VERSION_BITS) - 1) << VERSION_SHIFT
RECORD_ADDR = OFFSET_MASK & ~(SUBBLOCK_ALIGN - 1)
#: Aceso's ``define::invalidVersion``: the version of a record whose CAS failed.
INVALID_VERSION = (1 << 64) - 1

# record ops (Aceso's KVLogOp)
OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 3
TRAILER = struct.Struct("<QQ")        # version, op:8 | node:8 | slot offset:48
TRAILER_BYTES = TRAILER.size
RECORD_OVERHEAD = BLOCK_HEADER + TRAILER_BYTES


def versioned_word(fp: int, units: int, node: int, offset: int, version: int) -> int:
    """A committed slot word pointing to the record at ``offset`` (a multiple of SUBBLOCK_ALIGN)
    with the low bits of ``version``."""
    return slot_word(fp, units, node, offset) | ((version << VERSION_SHIFT) & VERSION_MASK)


def slot_version(w: int) -> int:
    return (w & VERSION_MASK) >> VERSION_SHIFT


def record_location(w: int) -> tuple[int, int, int]:
    """(node, offset, units) of the record a slot word points to (version and T bits masked)."""
    return (w >> NODE_SHIFT) & 0xFF, w & RECORD_ADDR, (w >> UNITS_SHIFT) & 0xFF


def is_record_word(w: int, fp: int) -> bool:
    """``w`` names a committed record with fingerprint ``fp`` (not empty, not tentative)."""
    return w != 0 and not w & TENTATIVE and (w >> 56) == fp and (w >> UNITS_SHIFT) & 0xFF != 0


def record_subblocks(key_len: int, value_len: int, subblock: int) -> int:
    """Sub-blocks a record of this key and value takes."""
    return -(-(RECORD_OVERHEAD + key_len + value_len) // subblock)


def check_record(key: bytes, value: bytes, subblock: int) -> int:
    """The sub-blocks of (key, value); a SystemGaveUp naming the limit if its units do not fit
    the slot's 8-bit length field."""
    n = record_subblocks(len(key), len(value), subblock)
    if n * subblock // UNIT > MAX_UNITS:
        raise SystemGaveUp(f"Aceso item too large: key {len(key)} B + value {len(value)} B + {RECORD_OVERHEAD} B "
                           f"of header and trailer need {n} sub-blocks of {subblock} B, more than the slot's "
                           f"length field counts ({MAX_UNITS} x {UNIT} B)")
    return n


def encode_record(key: bytes, value: bytes, version: int, op: int, slot_node: int, slot_offset: int) -> bytes:
    """RACE's block (header, key, value) then the trailer (version, op | slot)."""
    return encode_block(key, value) + TRAILER.pack(version, (op << 56) | (slot_node << 48) | slot_offset)


def trailer_offset(key_len: int, value_len: int) -> int:
    return BLOCK_HEADER + key_len + value_len


def decode_trailer(buf, off: int) -> tuple[int, int, int, int]:
    """(version, op, slot node, slot offset) of the trailer at ``buf[off:]``."""
    version, where = TRAILER.unpack_from(buf, off)
    return version, where >> 56, (where >> 48) & 0xFF, where & ((1 << 48) - 1)


# --- erasure code ---------------------------------------------------------------------------------
MAX_LINES = 2           # Aceso's code has two parity lines (replicaNum - 1)


def parity_positions(d: int, s: int, n: int, lines: int) -> list[int]:
    """Positions (in the memory-node list) of the parity blocks of a data block on position ``d``
    in slab ``s``, one per line."""
    out = [(d - 1 - s) % n, (d + 1 + s) % n]
    return out[:lines]


def code_fits(n: int, k: int, lines: int) -> str | None:
    """None if ``k`` data blocks per stripe and ``lines`` parity lines place over ``n`` memory
    nodes (each stripe on k + 1 distinct nodes, a block's parities on distinct nodes other than
    its own); else why not, in words."""
    if lines == 0:
        return None
    if k < 1:
        return "code_k must be at least 1"
    if k + 1 > n:
        return (f"a stripe of code_k = {k} data blocks and its parity needs {k + 1} distinct memory nodes, "
                f"the rack has {n}")
    for s in range(k):
        ps = parity_positions(0, s, n, lines)
        if 0 in ps or len(set(ps)) != len(ps):
            return (f"with {n} memory nodes, code_k = {k} and parity = {lines} place two blocks of slab {s} "
                    f"on one node (Aceso's slab map needs (2 s + 2) mod n != 0 for every slab s < code_k)")
    return None


def auto_code(n: int) -> tuple[int, int]:
    """(k, lines) Aceso's code would use on ``n`` memory nodes: two XOR parity lines over ``n - 2``
    data slabs (``Server::_init_slab_map``: ``slab_num - 2``; 5 nodes: k = 3, the code's codeK),
    the largest k that places when ``n - 2`` does not; one line (a mirror) on 2 nodes; no code on 1."""
    if n <= 1:
        return 1, 0
    if n == 2:
        return 1, 1
    for k in range(n - 2, 0, -1):
        if code_fits(n, k, 2) is None:
            return k, 2
    return 1, 1
