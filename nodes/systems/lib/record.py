"""Versioned and checksummed records, and how to tell a torn read from a good one.

Why a library module: one-sided READs race with WRITEs. The fabric copies each 64-byte line
atomically but a multi-line READ may see some lines before a concurrent WRITE and some after
(docs/fabric.md), so every design that READs more than one line needs a way to detect a *torn*
snapshot and retry, and a way to tell versions apart. Two techniques, both in use in dmrack:

* a **checksum** over the record (RACE's KV blocks, ``race/layout.py``): the writer stores a 32-bit
  checksum of the contents; a reader recomputes it. Blocks are written once (out of place), so a
  mismatch means the READ raced a reuse or a write in progress. :func:`checksum32` is that
  checksum (FNV-1a over two byte ranges, seeded by both lengths, MurmurHash3 finaliser),
  byte-for-byte RACE's;
* a **version on every line** (Sherman's nodes, ``sherman/layout.py``): a whole-object write
  stamps ``version + 1`` on the first word of every 64-byte line; a READ is consistent iff all
  lines carry the same version. :func:`stamp_lines` and :func:`lines_consistent` (jitted) are
  that, for any number of lines.

For a new design, :class:`RecordFormat` packages the first technique with a version: a
fixed-size record ``version:u32 | length:u32 | checksum:u32 | reserved:u32 | payload``, the
checksum covering the version and the payload. ``encode`` builds the bytes to WRITE, ``decode``
returns ``(version, payload)``, or None for a torn or corrupt record; a record never written (all
zero) decodes as version 0 with an empty payload. :func:`check_record` is the jitted check for a
client's hot path (a record READ into the thread buffer).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
from numba import njit

LINE = 64
RECORD_HEADER = 16
_HDR = struct.Struct("<IIII")
_VERSION = struct.Struct("<I")
MAX_VERSION = 0xFFFFFFFF
TORN = -1
EMPTY = -2


@njit(cache=True)
def checksum32(a, a_off, a_len, b, b_off, b_len):
    """32-bit checksum of a[a_off:a_off+a_len] ++ b[b_off:b_off+b_len], seeded by both lengths
    (FNV-1a, then MurmurHash3's finaliser). RACE's KV-block checksum."""
    h = np.uint64(0xCBF29CE484222325) ^ (np.uint64(a_len) << np.uint64(16)) ^ np.uint64(b_len)
    p = np.uint64(0x100000001B3)
    for i in range(a_len):
        h = (h ^ np.uint64(a[a_off + i])) * p
    for i in range(b_len):
        h = (h ^ np.uint64(b[b_off + i])) * p
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    return h & np.uint64(0xFFFFFFFF)


def checksum(a: bytes, b: bytes = b"") -> int:
    """:func:`checksum32` of two whole byte strings, as a Python int."""
    return int(checksum32(a, 0, len(a), b, 0, len(b)))


# -- per-line versions ------------------------------------------------------------------------------

def stamp_lines(img: bytearray, version: int, line: int = LINE) -> None:
    """Write ``version`` (u32, little-endian) at the start of every ``line``-byte line of ``img``."""
    for off in range(0, len(img), line):
        struct.pack_into("<I", img, off, version & MAX_VERSION)


@njit(cache=True)
def lines_consistent(buf64, w0, lines):
    """All ``lines`` 64-byte lines of the snapshot starting at int64 word ``w0`` of ``buf64``
    carry the first line's u32 version (the snapshot is not torn)."""
    nv = buf64[w0] & 0xFFFFFFFF
    for i in range(1, lines):
        if (buf64[w0 + 8 * i] & 0xFFFFFFFF) != nv:
            return False
    return True


# -- checksummed, versioned records -----------------------------------------------------------------

class Decoded(NamedTuple):
    version: int
    payload: bytes


@njit(cache=True)
def check_record(buf, off, size):
    """Check the record of ``size`` bytes at ``buf[off:]`` (a uint8 array): its payload length,
    ``EMPTY`` (-2) if it was never written (all-zero header), ``TORN`` (-1) if the checksum or the
    length does not hold."""
    version = np.int64(0)
    length = np.int64(0)
    cs = np.uint64(0)
    for i in range(4):
        version |= np.int64(buf[off + i]) << np.int64(8 * i)
        length |= np.int64(buf[off + 4 + i]) << np.int64(8 * i)
        cs |= np.uint64(buf[off + 8 + i]) << np.uint64(8 * i)
    if version == 0 and length == 0 and cs == 0:
        return EMPTY
    if length > size - 16:
        return TORN
    if checksum32(buf, off, 4, buf, off + 16, length) != cs:
        return TORN
    return length


class RecordFormat:
    """Fixed-size records of ``size`` bytes (a multiple of 64 is one or more whole lines):
    ``version:u32 | length:u32 | checksum:u32 | reserved:u32 | payload``, zero-padded."""

    __slots__ = ("size", "capacity")

    def __init__(self, size: int):
        if size <= RECORD_HEADER:
            raise ValueError(f"a record needs more than its {RECORD_HEADER}-byte header; got size {size}")
        self.size = int(size)
        self.capacity = self.size - RECORD_HEADER        # payload bytes a record holds

    def encode(self, version: int, payload: bytes) -> bytes:
        """The ``size`` bytes of a record (version 1..2**32-1); ValueError if the payload does not fit."""
        if not 1 <= version <= MAX_VERSION:
            raise ValueError(f"record version {version} is not in 1..{MAX_VERSION}")
        payload = bytes(payload)
        if len(payload) > self.capacity:
            raise ValueError(f"record payload of {len(payload)} B does not fit a {self.size} B record "
                             f"({self.capacity} B after the header)")
        v = _VERSION.pack(version)
        head = _HDR.pack(version, len(payload), checksum(v, payload), 0)
        return head + payload + bytes(self.capacity - len(payload))

    def decode(self, data) -> Decoded | None:
        """``(version, payload)`` of a record's bytes; version 0 and no payload for a record never
        written; None if it is torn or corrupt."""
        data = bytes(data[:self.size])
        if len(data) < RECORD_HEADER:
            return None
        version, length, cs, _ = _HDR.unpack_from(data)
        if version == 0 and length == 0 and cs == 0:
            return Decoded(0, b"")
        if length > self.capacity:
            return None
        payload = data[RECORD_HEADER:RECORD_HEADER + length]
        if checksum(data[:4], payload) != cs:
            return None
        return Decoded(version, payload)

    @staticmethod
    def version_of(data, off: int = 0) -> int:
        """The version field of a record (unchecked: for a CAS on the first word, say)."""
        return _VERSION.unpack_from(data, off)[0]
