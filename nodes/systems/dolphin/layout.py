"""Dolphin's leaf: a B+-tree-like node of 65 entries with separate key and value arrays.

Why two arrays (the paper, §III-A): key slots stay 8-byte aligned for the insert's CAS whatever
the value size, and an update READs the leaf without its values (the key array tells the slot).
Why 65 entries and these offsets: Dolphin's code (``kLeafPageSize = 1088``, docs/dolphin.md).

Keys are 8 bytes compared big-endian (numeric order = byte order). A key slot holds the key's
little-endian word XORed with :data:`KEY_MASK`, because two slot words are reserved: 0 (an empty
slot: CASed to a key by an insert; Dolphin's code reserves key 0 for it) and all ones (a
*tombstone*: the slot of a deleted key, never reused until a structure modification rewrites the
leaf, so an update or insert that read the old key can never write into a slot that holds another
key now). The mask moves the two keys that cannot be stored from 0 and 2^64-1, which workloads
use (YCSB's key number 0), to two arbitrary 64-bit patterns, refused with a clear error.

Two value formats, chosen by the system option ``value_bytes``:

* ``value_bytes = 8`` (*raw*, the paper's evaluation): each value slot is the 8-byte value itself,
  and the leaf is exactly the 1088 bytes of Dolphin's code. An all-zero value is refused: a slot
  that a fresh insert has CASed a key into but not yet written reads as zero, and a reader takes
  that as "the insert has not happened yet".
* any other ``value_bytes`` (*lines*): each value slot is whole 64-byte lines, every line starting
  with the same 16-bit version (Dolphin's per-cache-line versions for values over one line: a
  reader that finds two versions in one slot read it torn and reads again), the first line also
  holding the value's length and its key (a reader finds the key's own value, never a slot
  another insert is filling). Line 0: ``version u16 | length u16 | pad 4 | key 8 | data 48``;
  line n > 0: ``version u16 | data 62``. The value array starts on a line.

Leaf (offsets for the raw format; the line format gives a leaf fewer slots when they are large,
at most 65 and at least 4 within 8 KiB, and moves ``values``, ``lock`` and the rear version):

=====  ===============  ====  ===================================================================
off    field            size
=====  ===============  ====  ===================================================================
0      rev_ptr          8     address of the parent entry (cache validation hint)
8      front_version    1     = rear_version when the leaf was read whole (not torn by an SMO)
9      valid            1     1 (a leaf is never freed)
10     node_id          4     a leaf's number (debugging)
14     last_index       2     slots in use at the last SMO
16     min              8     lowest key the leaf holds (big-endian bytes)
24     max              8     highest key the leaf holds (inclusive; see docs/dolphin.md)
32     keys[65]         520   key words, 0 = empty, all ones = tombstone
552    values[65]       520   8 B each (raw)
1072   lock             8     Spear: FAA only, never covered by an SMO's WRITE
1080   rear_version     1
=====  ===============  ====  ===================================================================
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.api import SystemGaveUp

LINE = 64
SLOTS = 65
KEY_BYTES = 8
EMPTY = 0
TOMBSTONE = (1 << 64) - 1
HEADER_BYTES = 32
KEYS_OFF = 32
FRONT_OFF = 8
VALID_OFF = 9
MIN_OFF = 16
MAX_OFF = 24
RAW_VALUE = 8
LINE0_DATA = 48                      # data bytes in a value slot's first line
LINEN_DATA = 62                      # ... in each further line
MAX_VALUE_BYTES = 1 << 16            # the line format's u16 length
#: The line format keeps a leaf within this many bytes by giving it fewer slots (at least
#: MIN_SLOTS): the paper's leaf is 1 KB, and 65 slots of 1 KB values would make every SMO move 70 KB.
#: Also a bound of the emulator: a thread's coroutines share one 256 KiB ring buffer for the data
#: of their verbs in flight (shm/coro.py), and 8 coroutines each READing and WRITing a leaf must fit.
LINE_LEAF_BUDGET = 8 << 10
MIN_SLOTS = 4

_U64 = (1 << 64) - 1
_KEY = struct.Struct("<Q")
KEY_MASK = 0x9E3779B97F4A7C15        # 2^64 / golden ratio: any constant far from 0 and all ones


def key_word(key: bytes) -> int:
    """The slot word of ``key`` (see the module docstring)."""
    return _KEY.unpack(key)[0] ^ KEY_MASK


def word_key(word: int) -> bytes:
    return _KEY.pack(word ^ KEY_MASK)


def key_num(key: bytes) -> int:
    """The key as the number that orders keys (big-endian)."""
    return int.from_bytes(key, "big")


def num_key(num: int) -> bytes:
    return num.to_bytes(8, "big")


def lines_for(value_bytes: int) -> int:
    """Lines of a value slot in the line format holding values up to ``value_bytes``."""
    extra = max(0, value_bytes - LINE0_DATA)
    return 1 + -(-extra // LINEN_DATA)


class LeafFormat(NamedTuple):
    """Where a leaf's fields are for one ``value_bytes``."""

    value_bytes: int
    raw: bool
    slots: int               # entries of a leaf: 65 (raw), fewer for large line-format slots
    slot_bytes: int          # one value slot
    values_off: int
    lock_off: int
    rear_off: int
    size: int                # bytes of the whole leaf
    units: int               # 64-byte allocation units

    @classmethod
    def of(cls, value_bytes: int) -> "LeafFormat":
        raw = value_bytes == RAW_VALUE
        if raw:
            slots, slot = SLOTS, RAW_VALUE
            values = KEYS_OFF + slots * KEY_BYTES                           # 552, as in Dolphin's code
        else:
            slot = lines_for(value_bytes) * LINE
            slots = max(MIN_SLOTS, min(SLOTS, LINE_LEAF_BUDGET // slot))
            values = -(-(KEYS_OFF + slots * KEY_BYTES) // LINE) * LINE      # slots start on a line
        lock = values + slots * slot
        rear = lock + 8
        size = rear + 8
        return cls(value_bytes, raw, slots, slot, values, lock, rear, size, -(-size // LINE))

    def slot_off(self, i: int) -> int:
        return self.values_off + i * self.slot_bytes

    @property
    def keys_end(self) -> int:
        return KEYS_OFF + self.slots * KEY_BYTES

    # -- values ----------------------------------------------------------------------------------
    def check_value(self, value: bytes, owner: str = "dolphin") -> None:
        if self.raw:
            if len(value) != RAW_VALUE:
                raise SystemGaveUp(f"{owner}: value slots are raw 8 B (system option value_bytes = 8) and hold "
                                   f"exactly 8 B; got a {len(value)} B value")
            if value == bytes(RAW_VALUE):
                raise SystemGaveUp(f"{owner}: raw 8 B value slots reserve the all-zero value (an insert in "
                                   f"flight); use value_bytes > 8 to store it")
        elif len(value) > self.value_bytes:
            raise SystemGaveUp(f"{owner}: a {len(value)} B value does not fit the leaves' value slots of "
                               f"{self.value_bytes} B (system option value_bytes)")

    def encode_slot(self, key: bytes, value: bytes, version: int) -> bytes:
        """The bytes of a value slot holding ``value`` for ``key``, versioned ``version`` (1..65535)."""
        if self.raw:
            return bytes(value)
        out = bytearray(self.slot_bytes)
        ver = struct.pack("<H", version)
        out[0:2] = ver
        out[2:4] = struct.pack("<H", len(value))
        out[8:16] = key
        out[16:16 + min(len(value), LINE0_DATA)] = value[:LINE0_DATA]
        pos, line = LINE0_DATA, 1
        while pos < len(value):
            base = line * LINE
            out[base:base + 2] = ver
            chunk = value[pos:pos + LINEN_DATA]
            out[base + 2:base + 2 + len(chunk)] = chunk
            pos += LINEN_DATA
            line += 1
        while line * LINE < self.slot_bytes:         # versions on the unused lines too: one version per slot
            out[line * LINE:line * LINE + 2] = ver
            line += 1
        return bytes(out)

    def slot_written(self, raw, key: bytes) -> bool:
        """Whether a slot's first bytes show ``key``'s value written (not an insert still in flight)."""
        if self.raw:
            return bytes(raw[:RAW_VALUE]) != bytes(RAW_VALUE)
        return bytes(raw[0:2]) != b"\0\0" and bytes(raw[8:16]) == key

    def decode_slot(self, raw, key: bytes):
        """``(value, ok)`` from a slot's bytes: ok False if the slot is torn (two versions), holds
        another key or is not written yet (an insert in flight), value None then."""
        if self.raw:
            v = bytes(raw[:RAW_VALUE])
            return (None, False) if v == bytes(RAW_VALUE) else (v, True)
        ver = bytes(raw[0:2])
        if ver == b"\0\0" or bytes(raw[8:16]) != key:
            return None, False
        for line in range(1, self.slot_bytes // LINE):
            if bytes(raw[line * LINE:line * LINE + 2]) != ver:
                return None, False
        n = struct.unpack_from("<H", raw, 2)[0]
        out = bytearray(raw[16:16 + min(n, LINE0_DATA)])
        pos, line = LINE0_DATA, 1
        while pos < n:
            take = min(LINEN_DATA, n - pos)
            out += bytes(raw[line * LINE + 2:line * LINE + 2 + take])
            pos += take
            line += 1
        return bytes(out), True


# a leaf's header and key words as one struct (per slot count): rev_ptr, front (FRONT_OFF), valid
# (VALID_OFF), node id and last index (10, 14), min and max (MIN_OFF, MAX_OFF: big-endian keys), the keys
# (KEYS_OFF); tests/test_dolphin_layout.py holds it to the offsets
_HEAD_AND_KEYS: dict[int, struct.Struct] = {}


class LeafImage:
    """A leaf as READ (whole, or header and keys only): its header fields and key words."""

    __slots__ = ("addr", "rev_ptr", "front", "rear", "valid", "node_id", "last_index", "min", "max", "keys", "raw",
                 "fmt")

    def __init__(self, fmt: LeafFormat, addr: int, raw, rear: int):
        self.fmt = fmt
        self.addr = addr
        self.raw = raw
        head = _HEAD_AND_KEYS.get(fmt.slots)
        if head is None:
            head = _HEAD_AND_KEYS[fmt.slots] = struct.Struct(f"<QBBIH8s8s{fmt.slots}Q")
        try:
            v = head.unpack_from(raw)              # the header and the key words in one call, in place
        except (BufferError, TypeError, ValueError):   # a buffer struct cannot read in place (not contiguous)
            v = head.unpack_from(bytes(raw[:fmt.keys_end]))
        self.rev_ptr, self.front, self.valid, self.node_id, self.last_index = v[:5]
        self.min = int.from_bytes(v[5], "big")
        self.max = int.from_bytes(v[6], "big")
        self.keys = list(v[7:])
        self.rear = rear

    @property
    def consistent(self) -> bool:
        return self.front == self.rear and self.valid == 1

    def covers(self, k: int) -> bool:
        return self.min <= k <= self.max

    def slot(self, i: int) -> bytes:
        """The bytes of value slot ``i`` (an image READ whole)."""
        off = self.fmt.slot_off(i)
        return self.raw[off:off + self.fmt.slot_bytes]

    def find(self, kw: int) -> int:
        """The slot holding key word ``kw``, or -1."""
        try:
            return self.keys.index(kw)
        except ValueError:
            return -1

    def first_empty(self, start: int = 0) -> int:
        keys = self.keys
        for i in range(start, len(keys)):
            if keys[i] == EMPTY:
                return i
        return -1

    def live(self) -> list[tuple[int, int]]:
        """``(slot, key word)`` of every live key."""
        return [(i, w) for i, w in enumerate(self.keys) if w not in (EMPTY, TOMBSTONE)]


def leaf_bytes(fmt: LeafFormat, *, rev_ptr: int, version: int, node_id: int, lo: int, hi: int,
               entries: list[tuple[bytes, bytes]]) -> bytes:
    """A leaf's bytes up to its lock word (what an SMO WRITEs; the rear version is separate):
    ``entries`` (key, value slot bytes) fill slots 0.. in order."""
    out = bytearray(fmt.lock_off)
    struct.pack_into("<QBBIH", out, 0, rev_ptr, version & 0xFF, 1, node_id & 0xFFFFFFFF, len(entries))
    out[MIN_OFF:MIN_OFF + 8] = num_key(lo)
    out[MAX_OFF:MAX_OFF + 8] = num_key(hi)
    for i, (key, slot) in enumerate(entries):
        out[KEYS_OFF + 8 * i:KEYS_OFF + 8 * i + 8] = _KEY.pack(key_word(key))
        off = fmt.slot_off(i)
        out[off:off + len(slot)] = slot
    return bytes(out)


def rear_bytes(version: int) -> bytes:
    return bytes([version & 0xFF]) + bytes(7)
