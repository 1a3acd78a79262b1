"""Key and value bytes of YCSB records in dmrack.

YCSB names a record ``"user" + fnvhash64(keynum)`` and fills its fields with random bytes.
dmrack's systems store binary keys and fixed-size values, so:

* a key is the 8 little-endian bytes of the key id (the hashed record number, see
  ``CoreWorkload.load_keys``), zero-padded to ``keysize`` bytes; with the workload property
  ``keyorder = big`` the 8 bytes are big-endian, so that byte order is numeric order. Keys shorter than 8 bytes could
  not hold every id, so ``keysize`` below 8 is refused when the workload is validated.
* a value is deterministic, not random: its 16-byte head is the key id and a version number
  (both little-endian u64), repeated to fill the value. A checker can therefore tell which key
  and which write a value came from, and because every 16-byte chunk repeats the head, a torn
  value (two writes mixed by a racy system) is visible anywhere in it, not only in the first
  bytes. Repetition is a C-level bytes multiply, so building a value costs well under a
  microsecond.
"""

from __future__ import annotations

import struct

__all__ = ["key_bytes", "key_packer", "value_bytes", "decode_value", "KEY_ORDERS"]

_MASK64 = (1 << 64) - 1
_pack_key = struct.Struct("<Q").pack
_pack_key_be = struct.Struct(">Q").pack
KEY_ORDERS = ("little", "big")
_pack_head = struct.Struct("<QQ").pack
_unpack_head = struct.Struct("<QQ").unpack_from
_PADS: dict[int, bytes] = {}


def key_bytes(key_id: int, key_size: int = 8, order: str = "little") -> bytes:
    """The key of record ``key_id``: its 8 little-endian bytes (``order="big"``: big-endian, so
    that byte order is numeric order; the workload property ``keyorder``), zero-padded to
    ``key_size``."""
    pack = _pack_key if order == "little" else _pack_key_be
    if order != "little" and order != "big":
        raise ValueError(f"key byte order must be one of {', '.join(KEY_ORDERS)}, got {order!r}")
    if key_size == 8:
        return pack(key_id & _MASK64)
    if key_size < 8:
        raise ValueError(f"key_size must be >= 8 bytes to hold a key id, got {key_size}")
    pad = _PADS.get(key_size)
    if pad is None:
        pad = _PADS[key_size] = bytes(key_size - 8)
    return pack(key_id & _MASK64) + pad


def key_packer(key_size: int = 8, order: str = "little"):
    """``key_bytes`` with the size and order fixed: ``f(key_id) -> bytes`` (the compute nodes' hot path)."""
    if order not in KEY_ORDERS:
        raise ValueError(f"key byte order must be one of {', '.join(KEY_ORDERS)}, got {order!r}")
    if key_size < 8:
        raise ValueError(f"key_size must be >= 8 bytes to hold a key id, got {key_size}")
    pack = _pack_key if order == "little" else _pack_key_be
    if key_size == 8:
        return lambda key_id: pack(key_id & _MASK64)
    pad = bytes(key_size - 8)
    return lambda key_id: pack(key_id & _MASK64) + pad


def value_bytes(key_id: int, version: int, value_size: int) -> bytes:
    """A ``value_size``-byte value naming its key and version (head repeated; truncated when
    the value is shorter than 16 bytes)."""
    head = _pack_head(key_id & _MASK64, version & _MASK64)
    if value_size <= 16:
        if value_size < 0:
            raise ValueError(f"value_size must be >= 0, got {value_size}")
        return head[:value_size]
    reps, tail = divmod(value_size, 16)
    return head * reps + head[:tail]


def decode_value(data: bytes | bytearray | memoryview, key_id: int | None = None) -> tuple[int, int] | None:
    """``(key_id, version)`` of a value made by ``value_bytes``, or None when ``data`` is not one
    (wrong key when ``key_id`` is given, a torn or foreign value, or shorter than 16 bytes)."""
    data = bytes(data)
    if len(data) < 16:
        return None
    kid, version = _unpack_head(data, 0)
    if key_id is not None and kid != key_id & _MASK64:
        return None
    if data != value_bytes(kid, version, len(data)):
        return None
    return kid, version
