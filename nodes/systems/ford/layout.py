"""FORD's byte formats on the memory nodes: the record (``DataItem``), the bucket (``HashNode``),
the undo-log entry, and where a key's bucket is.

Record, at a 64-byte-aligned offset (minghust/ford core/memstore/data_item.h:15-26, SMART dtx/memstore.h:24-33)::

    0 table_id u64 | 8 value_size u64 | 16 key u64 | 24 remote_offset u64 | 32 version u64 |
    40 lock u64 | 48 value[M] | 48+M valid u8 | 49+M user_insert u8 | padding to 8 B

``remote_offset`` is the record's own offset in its node's memory (so it differs between the
primary and a backup); ``version`` is the CAS-free word validation re-READs
(``GetRemoteVersionAddr`` = +32) and ``lock`` the CAS target (``GetRemoteLockAddr`` = +40), 0 clean,
``LOCKED`` = 1, ``INVISIBLE`` = bit 63 while a commit is in flight (core/base/common.h:39-41). With
SmallBank's M = 8 a record is 64 B (SMART's ``CONFIG_ITEM_SIZE``).

Bucket: 22 records then an 8-byte ``next`` (core/memstore/hash_store.h:21,54-58): 1,416 B with
64-B records. Here a bucket is padded to whole 64-byte lines (1,472 B), so that every 64-B record
sits in one line: dmrack lands a WRITE line by line and samples a READ line by line
(docs/fabric.md), so a record straddling two lines could be read torn, which FORD's contiguous
1,416-B buckets allow on real hardware too (hazard 3 of the brief); the padding costs 56 B a
bucket and no verb. ``next`` is the node offset of an overflow bucket (0: none); overflow buckets
come from a reserve after the main buckets, used only by the loader (FORD: the last 25 % of the
hash region, server.cc:29).

Undo-log entry (core/dtx/dtx.cc:179-210): ``tx_id u64, t_id u32`` then the before-image of each
read-write record, the whole record as read. Here the header is 16 B so images stay 8-byte
aligned (FORD packs it to 12), and its last 4 B count the images: recovery (``FordSystem.recover``)
reads a slice entry after entry and needs to know where one ends (FORD has no recovery code).
"""

from __future__ import annotations

import struct

from nodes.systems.lib.hashing import hash64

SLOTS_PER_BUCKET = 22                # hash_store.h:21 (ITEM_NUM_PER_NODE)
LINE = 64
TABLE_ID_OFF, VALUE_SIZE_OFF, KEY_OFF, REMOTE_OFF_OFF, VERSION_OFF, LOCK_OFF, VALUE_OFF = 0, 8, 16, 24, 32, 40, 48
HEADER = struct.Struct("<QQQQQQ")    # table_id, value_size, key, remote_offset, version, lock
LOCKED = 1                           # common.h:39 STATE_LOCKED (no owner id)
INVISIBLE = 1 << 63                  # common.h:41 STATE_INVISIBLE
#: The commit's INVISIBLE lock words also carry the committing transaction's id in bits 1-62
#: (:func:`owner_bits`): the readers test only ``lock != 0`` and bit 63, so nothing else changes,
#: and recovery knows whose undo-log entry an INVISIBLE record belongs to (several entries may
#: hold the same before-image: an attempt that logged and then failed validation). FORD's lock
#: word is 1 or bit 63 alone; it has no recovery.
OWNER_MASK = (1 << 62) - 1


def owner_bits(txn_id: int) -> int:
    return (txn_id & OWNER_MASK) << 1


def owner_of(lock: int) -> int:
    """The transaction id a commit's lock word carries (0: none)."""
    return (int(lock) >> 1) & OWNER_MASK


LOG_HEADER = struct.Struct("<QII")   # tx_id, t_id, the number of before-images (FORD: 4 B of padding)
#: before-images one undo-log entry may hold (what recovery accepts when it parses a slice)
MAX_LOG_IMAGES = 64
#: overflow buckets reserved per table, as a fraction of its main buckets (FORD server.cc:29: the
#: last 25 % of the hash region)
RESERVE_FRACTION = 0.25


def item_bytes(value_bytes: int) -> int:
    """A record's size: header, value, valid and user_insert bytes, rounded to 8 (data_item.h)."""
    return (VALUE_OFF + value_bytes + 2 + 7) & ~7


def bucket_bytes(value_bytes: int) -> int:
    """22 records and ``next``, padded to whole lines (see the module docstring)."""
    raw = SLOTS_PER_BUCKET * item_bytes(value_bytes) + 8
    return (raw + LINE - 1) & ~(LINE - 1)


def next_off(value_bytes: int) -> int:
    return SLOTS_PER_BUCKET * item_bytes(value_bytes)


def bucket_of(key: int, buckets: int) -> int:
    """FORD: ``MurmurHash64A(key, 0xdeadbeef) % bucket_num`` (hash_store.h:109-111); here the
    rack's one key hash (nodes/systems/lib/hashing.py) of the key's 8 little-endian bytes."""
    return int(hash64(int(key).to_bytes(8, "little"))) % buckets


def encode_item(table_id: int, key: int, remote_offset: int, version: int, lock: int, value: bytes,
                value_bytes: int, valid: bool = True, user_insert: bool = False) -> bytes:
    size = item_bytes(value_bytes)
    v = bytes(value)
    if len(v) > value_bytes:
        raise ValueError(f"value of {len(v)} B exceeds the table's {value_bytes} B")
    body = HEADER.pack(table_id, value_bytes, key, remote_offset, version, lock) + v.ljust(value_bytes, b"\0") + \
        bytes((1 if valid else 0, 1 if user_insert else 0))
    return body.ljust(size, b"\0")


class Record:
    """A decoded record."""

    __slots__ = ("table_id", "key", "remote_offset", "version", "lock", "value", "valid", "user_insert")

    def __init__(self, buf, value_bytes: int):
        b = bytes(buf)
        self.table_id, _, self.key, self.remote_offset, self.version, self.lock = HEADER.unpack_from(b, 0)
        self.value = b[VALUE_OFF:VALUE_OFF + value_bytes]
        self.valid = b[VALUE_OFF + value_bytes] == 1
        self.user_insert = b[VALUE_OFF + value_bytes + 1] == 1


def decode_item(buf, value_bytes: int) -> Record:
    return Record(buf, value_bytes)
