"""SMART-ART's leaf: one per KV pair, its bytes, checksum and status word (docs/smart_art.md).

The internal nodes are the systems library's ART (:mod:`nodes.systems.lib.art`); the leaf is
SMART-ART's own and declared here once, for the client (:mod:`.client`) and the bulk load
(:mod:`.system`).

**Leaf** (dmemsys/SMART ``include/Node.h``: rev_ptr, valid byte, checksum, key, value, lock byte;
the exact offsets are ours). Leaves are whole 64-byte units, written whole before a CAS links them:

=======  =========  ==================================================================
offset   field      meaning
=======  =========  ==================================================================
0        rev_ptr    u64: the parent entry's address for a replacement or bulk-loaded leaf; 0
                    for an inserted one (nothing reads it: leaves are never reused, :mod:`.client`)
8        status     u64: 0 live; 1 live with ``w_lock`` held (an in-place update); otherwise
                    *dead*: bit 1 set and the rest the global address of the leaf that replaced
                    it (0: deleted). SMART's valid byte and lock bit, in one word
16       checksum   u64: ``hash64`` (FNV-1a + MurmurHash3 fmix64, lib/hashing.py; not a CRC) of
                    bytes 24 .. 40 + vlen
24       key        8 bytes (compared as given, big-endian order)
32       vlen       u32
36       units      u32: the leaf's size in 64-byte units (fixed at allocation)
40       value      vlen bytes, up to ``units * 64 - 40``
=======  =========  ==================================================================
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.alloc import UNIT
from nodes.systems.lib.hashing import hash64

KEY_BYTES = 8
REV_PTR, STATUS, CHECKSUM, KEY, VLEN, UNITS, VALUE = 0, 8, 16, 24, 32, 36, 40
LIVE, LOCKED, DEAD = 0, 1, 2
MAX_LEAF_BYTES = 256 * UNIT
MAX_VALUE = MAX_LEAF_BYTES - VALUE
#: a whole leaf head as READ: rev_ptr, status, checksum, key, vlen, units
LEAF_HEAD = struct.Struct("<QQQ8sII")
_BODY = struct.Struct("<Q8sII")           # checksum, key, vlen, units (the in-place WRITE starts here)


class KeySizeError(SystemGaveUp):
    """SMART-ART indexes 8-byte keys only."""


class ValueTooLarge(SystemGaveUp):
    pass


def leaf_units(vlen: int) -> int:
    return (VALUE + vlen + UNIT - 1) // UNIT


def checksum(key: bytes, vlen: int, units: int, value: bytes) -> int:
    return int(hash64(np.frombuffer(key + struct.pack("<II", vlen, units) + value, np.uint8)))


def leaf_body(key: bytes, value: bytes, units: int) -> bytes:
    """Bytes 16 .. 40 + vlen: what an in-place update WRITEs."""
    vlen = len(value)
    return _BODY.pack(checksum(key, vlen, units, value), key, vlen, units) + value


def leaf_image(key: bytes, value: bytes, units: int, rev_ptr: int = 0) -> bytes:
    raw = struct.pack("<QQ", rev_ptr, LIVE) + leaf_body(key, value, units)
    return raw.ljust(units * UNIT, b"\0")


def dead(successor: int) -> int:
    """The status of a leaf replaced by the leaf at ``successor`` (0: deleted)."""
    return successor | DEAD


def successor_of(status: int) -> int:
    return status & ~(UNIT - 1)


class Leaf(NamedTuple):
    addr: int
    status: int
    key: bytes
    value: bytes
    units: int
    stamp: int = 0             # the local lock table's stamp of the READ it came from (0: none)

    @property
    def capacity(self) -> int:
        return self.units * UNIT - VALUE
