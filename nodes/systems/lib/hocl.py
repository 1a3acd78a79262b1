"""HOCL: Sherman's hierarchical on-chip lock, for any design that locks remote objects.

Why a library module: a design that updates a remote object in place under a lock (a B+-tree
node, a bucket, a record) needs a lock that does not melt under contention, and the spinning
CASes of a naive remote lock are what melts. HOCL (Sherman, SIGMOD'22) has two tiers per object:

* **remote**: a 16-bit lock in the memory node's NIC device memory (``REGION_DEVICE``; four locks
  per 8-byte word). Objects hash to lock slots (:func:`slot_of`), so a few objects share a lock
  (the table is small: device memory is 256 KiB), which is harmless as long as a client holds
  one lock at a time. Taken with a masked CAS on the 16-bit field (0 -> the compute node's tag);
  released with a masked CAS back to 0 posted in the same doorbell batch as the object's
  write-back (command combination: the WRITE lands first, see docs/sherman.md);
* **local**: a per-compute-node table (:class:`LocalLocks`, shared by the node's threads) where
  the threads of one node queue for a remote lock, so at most one of them spins on it. A
  releasing holder with local waiters *hands the lock over* (the remote lock stays taken, the
  next waiter skips the remote CAS) up to ``max_handover`` times in a row, then releases it
  remotely so other compute nodes get a turn.

Offered here: :func:`setup_lock_tables` (``System.setup``: one zeroed table per memory node),
:func:`slot_of` / :func:`lock_address` (where an object's lock is), :class:`LocalLocks` (the
node's local table; share one per compute node, e.g. with ``nodes.systems.sherman.cache.shared``)
and :class:`HoclClient`, a mixin that gives a client ``lock_of``, ``acquire``, ``remote_acquire``
and ``release`` (Sherman's client is one; SMART-BT overrides ``remote_acquire``).
"""

from __future__ import annotations

from collections import deque

from nodes.systems.api import SystemError_
from shm.fabric import OFFSET_BITS, REGION_BITS, REGION_DEVICE, gaddr

FIELD_BITS = 16
FIELD_MASK = (1 << FIELD_BITS) - 1
FIELDS_PER_WORD = 4
RETRY_LIMIT = 100_000         # remote CAS attempts before a lock is declared stuck (SystemError_)
_HASH = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1
_NODE_SHIFT = REGION_BITS + OFFSET_BITS
_OFFSET_MASK = (1 << OFFSET_BITS) - 1


def slot_of(offset: int, slots: int) -> int:
    """The lock slot of the object at byte ``offset`` of its memory node."""
    return ((((offset >> 6) * _HASH) & _U64) >> 20) % slots


def lock_address(node: int, base: int, offset: int, slots: int) -> tuple[int, int]:
    """(gaddr of the 8-byte lock word, bit shift of the 16-bit field) of an object's lock."""
    s = slot_of(offset, slots)
    return gaddr(node, base + (s // FIELDS_PER_WORD) * 8, REGION_DEVICE), (s % FIELDS_PER_WORD) * FIELD_BITS


def lock_table_slots(slots: int) -> int:
    """``slots`` rounded up to whole lock words."""
    return (slots + FIELDS_PER_WORD - 1) // FIELDS_PER_WORD * FIELDS_PER_WORD


def setup_lock_tables(fabric, memory_nodes: list[int], slots: int) -> dict:
    """Carve a zeroed table of ``slots`` 16-bit locks (rounded up to whole words) out of the NIC
    device memory of every memory node (fabric indices); returns ``{node: offset}`` for the layout.
    MemoryError if a node's device memory is too small (``System.setup`` turns it into one line)."""
    lock_bytes = lock_table_slots(slots) * FIELD_BITS // 8
    locks = {}
    for m in memory_nodes:
        off = fabric.allocate(m, lock_bytes, region=REGION_DEVICE, align=64)
        fabric.memory[m].device[off:off + lock_bytes] = 0
        locks[m] = off
    return locks


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


class HoclClient:
    """Mixin: HOCL for a client. The client sets, before locking anything:

    * ``locks``: the compute node's :class:`LocalLocks` (one per node and lock table);
    * ``_lock_base``: ``{memory node: table offset}`` (:func:`setup_lock_tables`), ``lock_slots``;
    * ``tag``: this compute node's nonzero 16-bit holder tag, e.g. ``node % FIELD_MASK + 1``;
    * ``max_handover``; ``env``; ``_rng`` (a ``random.Random``) and ``_backoff_ns`` (the back-off
      after the third failed remote CAS, drawn from ``[b, 2b)``);
    * counters ``local_lock_waits``, ``handovers``, ``remote_lock_retries``; ``NAME`` (errors).
    """

    def lock_of(self, addr: int) -> tuple[int, int]:
        """The lock (word gaddr, shift) of the object at global address ``addr``."""
        node = addr >> _NODE_SHIFT
        return lock_address(node, self._lock_base[node], addr & _OFFSET_MASK, self.lock_slots)

    def acquire(self, co, lock):
        """Generator: take the lock ``lock`` = (word gaddr, shift): locally first (queue behind this
        node's holder, maybe receive it handed over), then remotely with a masked CAS. Verbs
        already queued on ``co`` go out with the first CAS."""
        held = self.locks.held
        ll = held.get(lock)
        if ll is not None:
            self.local_lock_waits += 1
            ev = self.env.event()
            ll.waiters.append(ev)
            co.post()
            handed = yield ev
            if handed:
                self.handovers += 1
                return
        else:
            held[lock] = LocalLock()
        yield from self.remote_acquire(co, lock)

    def remote_acquire(self, co, lock):
        """Generator: HOCL's remote tier: masked CAS on the lock's 16-bit field in NIC memory,
        with Sherman's own back-off after the first few failures."""
        word, shift = lock
        mask = FIELD_MASK << shift
        mine = self.tag << shift
        for attempt in range(RETRY_LIMIT):
            h = co.masked_cas(word, 0, mine, mask, mask)
            yield co.sync()
            if h.value & mask == 0:
                return
            self.remote_lock_retries += 1
            if attempt >= 2:
                yield self._rng.randrange(self._backoff_ns, 2 * self._backoff_ns)
        raise SystemError_(f"{self.NAME}: lock {word:#x}>>{shift} not acquired after {RETRY_LIMIT} tries")

    def release(self, co, lock):
        """Generator: release ``lock`` after the write-back verbs already queued on ``co``: hand it
        to the next local waiter (after the write-back completed), or post the unlock masked CAS in
        the same doorbell batch as the write-back."""
        ll = self.locks.held[lock]
        if ll.waiters and ll.handovers < self.max_handover:
            yield co.sync()
            ll.handovers += 1
            ll.waiters.popleft().succeed(True)
            return
        word, shift = lock
        mask = FIELD_MASK << shift
        co.masked_cas(word, self.tag << shift, 0, mask, mask)
        yield co.sync()
        if ll.waiters:
            ll.handovers = 0
            ll.waiters.popleft().succeed(False)
        else:
            del self.locks.held[lock]
