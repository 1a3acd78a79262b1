"""HOCL: Sherman's hierarchical on-chip lock.

Two tiers per tree node:

* **remote**: a 16-bit lock in the memory node's NIC device memory (``REGION_DEVICE``; four locks
  per 8-byte word). Tree nodes hash to lock slots (``slot_of``), so a few nodes share a lock (the
  table is small: device memory is 256 KiB), which is harmless because a client holds one lock
  at a time. Taken with a masked CAS on the 16-bit field (0 -> the compute node's tag); released
  with a masked CAS back to 0 posted in the same doorbell batch as the node's write-back
  (command combination: the WRITE lands first, see docs/sherman.md);
* **local**: a per-compute-node table (:class:`LocalLocks`, shared by the node's threads) where
  the threads of one node queue for a remote lock, so at most one of them spins on it. A
  releasing holder with local waiters *hands the lock over* (the remote lock stays taken, the
  next waiter skips the remote CAS) up to ``max_handover`` times in a row, then releases it
  remotely so other compute nodes get a turn.
"""

from __future__ import annotations

from collections import deque

from shm.fabric import REGION_DEVICE, gaddr

FIELD_BITS = 16
FIELD_MASK = (1 << FIELD_BITS) - 1
FIELDS_PER_WORD = 4
_HASH = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1


def slot_of(offset: int, slots: int) -> int:
    """The lock slot of the tree node at byte ``offset`` of its memory node."""
    return ((((offset >> 6) * _HASH) & _U64) >> 20) % slots


def lock_address(node: int, base: int, offset: int, slots: int) -> tuple[int, int]:
    """(gaddr of the 8-byte lock word, bit shift of the 16-bit field) of a tree node's lock."""
    s = slot_of(offset, slots)
    return gaddr(node, base + (s // FIELDS_PER_WORD) * 8, REGION_DEVICE), (s % FIELDS_PER_WORD) * FIELD_BITS


class LocalLock:
    __slots__ = ("waiters", "handovers")

    def __init__(self):
        self.waiters: deque = deque()
        self.handovers = 0


class LocalLocks:
    """The compute node's local lock table: (lock word, shift) -> :class:`LocalLock` while held."""

    __slots__ = ("held", "__weakref__")

    def __init__(self):
        self.held: dict = {}
