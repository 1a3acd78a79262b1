"""FUSEE's remote formats on top of RACE's: the embedded log tail of a KV block, the delete log's
tombstone word, the *replicating* bit of a freshly inserted slot, where a slot's backup copies are,
and the replica map of the KV chunks (see docs/fusee.md for diagrams).

FUSEE (Shen et al., FAST'23; public code dmemsys/FUSEE) keeps RACE's slot word
(``src/hashtable.h``: ``fp:8 | kv_len:8 | server_id:8 | pointer:40``) and RACE's bucket, so the
slot, bucket, header and directory encodings are RACE's (:mod:`nodes.systems.race.layout`); this
module declares only what FUSEE adds.

**KV block** = RACE's block (``key_len:u16 | value_len:u16 | checksum:u32``, key, value) followed
by the **log tail** in the block's last ``LOG_BYTES`` (FUSEE ``src/kv_utils.h``: ``KVLogTail
{next_addr 6 B, prev_addr 6 B, old_value u64, crc u8, op u8}``, here four words)::

    tail + 0   next   : u64   the client's next log entry (0: FUSEE links it from its allocator;
                              dmrack's allocator reuses any freed block, so it stays 0)
    tail + 8   prev   : u64   the client's previous log entry (node:8 | offset:40, 0 = none)
    tail + 16  old    : u64   the slot word this operation replaced, written by the log commit
    tail + 24  meta   : u64   op:8 | state:8 | crc:8 | 0

The tail sits at the end of the block's last unit, so anyone holding only the slot word (which
counts units) can READ it. ``state``: ``IN_FLIGHT`` as written with the block, ``COMMITTED`` once
SNAPSHOT decided for it (FUSEE's ``kv_log_commit``: ``old_value`` written, ``crc = 0xFF``), ``DONE``
for a loser's block (FUSEE writes ``KV_OP_FINISH`` into the loser's ``op``). ``crc`` is an 8-bit
check of (old, op, state) so a torn commit is recognisable.

**Tombstone** (a delete's SNAPSHOT target in the backups): ``fp:8 | 0:8 | node:8 | offset:40`` of
the delete's log block. FUSEE CASes a delete's slots to 0; two deletes then propose the same word,
and a late delete could take a backup another round has since filled (docs/fusee.md, "Where it
differs"). ``units = 0`` never occurs in a live slot and RACE's lookups skip it.

**Replicating bit** (bit 1 of the slot offset, free in RACE's 64-B aligned offsets): a primary slot
word ``C | R`` is an insert that committed (readers see it) and is writing its backups; writers
of the key wait for the plain word ``C``.
"""

from __future__ import annotations

import struct

from nodes.systems.race.layout import (
    BLOCK_HEADER, FP_SHIFT, MAX_UNITS, NODE_SHIFT, OFFSET_MASK, TENTATIVE, UNIT, UNITS_SHIFT, ItemTooLarge,
)

LOG_BYTES = 32               # next, prev, old, meta
REPLICATING = 2              # bit 1 of a primary slot word: committed, backups not yet written
WORD_FLAGS = TENTATIVE | REPLICATING
BLOCK_OFFSET = OFFSET_MASK & ~(UNIT - 1)      # a slot word's block offset, without any flag bit

# KVLogOp of FUSEE src/kv_utils.h (KV_OP_INSERT = 1, UPDATE, DELETE, FINISH)
OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 3
IN_FLIGHT, COMMITTED, DONE = 0, 1, 2
_META = struct.Struct("<QQQQ")

#: FUSEE's MAX_REP_NUM (src/kv_utils.h) is 10; dmrack caps replicas at the memory nodes of the rack
MAX_REPLICAS = 10


def block_units(key_len: int, value_len: int) -> int:
    """64-byte units of a KV block with its log tail (a delete's log block: ``value_len = 0``)."""
    n = BLOCK_HEADER + key_len + value_len
    n = (n + 7) // 8 * 8 + LOG_BYTES
    return (n + UNIT - 1) // UNIT


def check_units(key: bytes, value: bytes) -> int:
    units = block_units(len(key), len(value))
    if units > MAX_UNITS:
        raise ItemTooLarge(f"FUSEE item too large: key {len(key)} B + value {len(value)} B + {BLOCK_HEADER} B header "
                           f"+ {LOG_BYTES} B log = more than {MAX_UNITS} units of {UNIT} B (the slot's 8-bit length)")
    return units


def crc8(old: int, op: int, state: int) -> int:
    """The tail's check byte: the bytes of (old, op, state) folded (never 0 for a commit)."""
    x = old ^ (op << 56) ^ (state << 48)
    x ^= x >> 32
    x ^= x >> 16
    x ^= x >> 8
    return (x & 0xFF) | 0x80 if state else x & 0x7F


def meta_word(op: int, state: int, old: int) -> int:
    return op | (state << 8) | (crc8(old, op, state) << 16)


def encode_tail(prev: int, op: int) -> bytes:
    """The tail as written with the block: in flight, no old value yet."""
    return _META.pack(0, prev, 0, meta_word(op, IN_FLIGHT, 0))


def commit_bytes(old: int, op: int, state: int = COMMITTED) -> bytes:
    """The 16 bytes the log commit WRITEs at ``tail + 16``: old value and meta."""
    return struct.pack("<QQ", old, meta_word(op, state, old))


def decode_tail(data) -> tuple[int, int, int, int, int]:
    """(next, prev, old, op, state) of a tail's 32 bytes; state -1 if its check byte is wrong."""
    nxt, prev, old, meta = _META.unpack(bytes(data[:LOG_BYTES]))
    op, state, crc = meta & 0xFF, (meta >> 8) & 0xFF, (meta >> 16) & 0xFF
    if crc != crc8(old, op, state):
        state = -1
    return nxt, prev, old, op, state


def tail_offset(units: int) -> int:
    """Byte offset of the log tail inside a block of ``units`` units."""
    return units * UNIT - LOG_BYTES


# --- slot words --------------------------------------------------------------------------------
def tombstone(fp: int, node: int, offset: int) -> int:
    """The word a delete proposes to the backups: names its log block, holds no key."""
    return (fp << FP_SHIFT) | (node << NODE_SHIFT) | offset


def is_tombstone(w: int) -> bool:
    return w != 0 and not (w >> UNITS_SHIFT) & 0xFF


def word_node(w: int) -> int:
    return (w >> NODE_SHIFT) & 0xFF


def word_offset(w: int) -> int:
    return w & BLOCK_OFFSET


def word_units(w: int) -> int:
    return (w >> UNITS_SHIFT) & 0xFF


def compact(node: int, offset: int) -> int:
    """A log pointer (prev/next): ``node:8 | offset:40``, as the slot's address fields."""
    return (node << NODE_SHIFT) | offset
