"""HOCL: Sherman's hierarchical on-chip lock, for any design that locks remote objects.

Why a library module: a design that updates a remote object in place under a lock (a B+-tree
node, a bucket, a record) needs a lock that does not melt under contention, and the spinning
CASes of a naive remote lock are what melts. HOCL (Sherman, SIGMOD'22) has two tiers per object:

* **remote**: a 16-bit lock in the memory node's NIC device memory (``REGION_DEVICE``; four locks
  per 8-byte word). Objects hash to lock slots (:func:`slot_of`), so a few objects share a lock
  (the table is small: device memory is 256 KiB), which is harmless as long as a client holds
  one lock at a time. Taken with a masked CAS on the 16-bit field (0 -> the compute node's tag),
  retried at once when it finds the lock taken (Sherman's ``try_lock_addr`` has no back-off);
  released with a 2-byte WRITE of 0 (an unlock needs no atomic: only the holder writes a taken
  lock; Sherman's ``write_page_and_unlock`` and ``unlock_addr`` WRITE it too), posted in the
  same doorbell batch as the object's write-back (command combination: the WRITE lands first,
  see docs/sherman.md);
* **local**: a per-compute-node table (:class:`LocalLocks`, shared by the node's threads) where
  the threads of one node queue for a remote lock, so at most one of them spins on it. A
  releasing holder with local waiters *hands the lock over* (the remote lock stays taken, the
  next waiter skips the remote CAS) up to ``max_handover`` times in a row, then releases it
  remotely so other compute nodes get a turn.

Each part can be switched off for an ablation (Sherman's Fig. on the contribution of each
technique; ``dmrack reproduce sherman``): the table in host memory instead of device memory
(``setup_lock_tables(region=REGION_HOST)``), no local tier (``hierarchical = False``: every
coroutine CASes the remote lock itself), no command combination (``combine = False``: the unlock
goes out once the write-back has completed, one more round trip inside the critical section).

Offered here: :func:`setup_lock_tables` (``System.setup``: one zeroed table per memory node),
:func:`slot_of` / :func:`lock_address` (where an object's lock is), :class:`LocalLocks` (the
node's local table; share one per compute node, e.g. with ``nodes.systems.sherman.cache.shared``)
and :class:`HoclClient`, a mixin that gives a client ``lock_of``, ``acquire``, ``remote_acquire``
and ``release`` (Sherman's client is one; SMART-BT overrides ``remote_acquire``).
"""

from __future__ import annotations

from collections import deque

from shm.messages import SystemGaveUp
from shm.fabric import NODE_SHIFT, OFFSET_MASK, REGION_DEVICE, gaddr

FIELD_BITS = 16
FIELD_MASK = (1 << FIELD_BITS) - 1
FIELDS_PER_WORD = 4
RETRY_LIMIT = 100_000         # remote CAS attempts before a lock is declared stuck (SystemGaveUp)
_HASH = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1
_UNLOCKED = bytes(FIELD_BITS // 8)


def slot_of(offset: int, slots: int) -> int:
    """The lock slot of the object at byte ``offset`` of its memory node."""
    return ((((offset >> 6) * _HASH) & _U64) >> 20) % slots


def lock_address(node: int, base: int, offset: int, slots: int, region: int = REGION_DEVICE) -> tuple[int, int]:
    """(gaddr of the 8-byte lock word, bit shift of the 16-bit field) of an object's lock."""
    s = slot_of(offset, slots)
    return gaddr(node, base + (s // FIELDS_PER_WORD) * 8, region), (s % FIELDS_PER_WORD) * FIELD_BITS


def lock_table_slots(slots: int) -> int:
    """``slots`` rounded up to whole lock words."""
    return (slots + FIELDS_PER_WORD - 1) // FIELDS_PER_WORD * FIELDS_PER_WORD


def setup_lock_tables(fabric, memory_nodes: list[int], slots: int, region: int = REGION_DEVICE) -> dict:
    """Carve a zeroed table of ``slots`` 16-bit locks (rounded up to whole words) out of the NIC
    device memory (or, for an ablation, the host memory) of every memory node (fabric indices);
    returns ``{node: offset}`` for the layout. MemoryError if a node's memory is too small
    (``System.setup`` turns it into one line)."""
    lock_bytes = lock_table_slots(slots) * FIELD_BITS // 8
    locks = {}
    for m in memory_nodes:
        off = fabric.allocate(m, lock_bytes, region=region, align=64)
        mem = fabric.memory[m]
        (mem.device if region == REGION_DEVICE else mem.host)[off:off + lock_bytes] = 0
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
    * ``max_handover``; ``env``;
    * counters ``local_lock_waits``, ``handovers``, ``remote_lock_retries``; ``NAME`` (errors).

    and may change the defaults below (Sherman's options do, for its ablation).
    """

    lock_region = REGION_DEVICE   # where setup_lock_tables put the tables (REGION_HOST: an ablation)
    hierarchical = True           # the local tier: queue in LocalLocks, hand over
    combine = True                # the unlock WRITE goes in the write-back's doorbell

    def lock_of(self, addr: int) -> tuple[int, int]:
        """The lock (word gaddr, shift) of the object at global address ``addr``."""
        node = addr >> NODE_SHIFT
        return lock_address(node, self._lock_base[node], addr & OFFSET_MASK, self.lock_slots, self.lock_region)

    def acquire(self, co, lock):
        """Generator: take the lock ``lock`` = (word gaddr, shift): locally first (queue behind this
        node's holder, maybe receive it handed over), then remotely with a masked CAS. Verbs
        already queued on ``co`` go out with the first CAS."""
        if not self.hierarchical:
            yield from self.remote_acquire(co, lock)
            return
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
        """Generator: HOCL's remote tier: masked CAS on the lock's 16-bit field, retried as soon
        as the failed one returns (as Sherman's ``try_lock_addr``: a failed CAS costs its round
        trip and an atomic slot at the NIC, nothing more)."""
        word, shift = lock
        mask = FIELD_MASK << shift
        mine = self.tag << shift
        for _ in range(RETRY_LIMIT):
            h = co.masked_cas(word, 0, mine, mask, mask)
            yield co.sync()
            if h.value & mask == 0:
                return
            self.remote_lock_retries += 1
        raise SystemGaveUp(f"{self.NAME}: lock {word:#x}>>{shift} not acquired after {RETRY_LIMIT} tries")

    def release(self, co, lock):
        """Generator: release ``lock`` after the write-back verbs already queued on ``co``: hand it
        to the next local waiter (after the write-back completed), or release it remotely
        (:meth:`remote_release`: the unlock WRITE in the write-back's doorbell batch)."""
        if not self.hierarchical:
            yield from self.remote_release(co, lock)
            return
        ll = self.locks.held[lock]
        if ll.waiters and ll.handovers < self.max_handover:
            yield co.sync()
            ll.handovers += 1
            ll.waiters.popleft().succeed(True)
            return
        yield from self.remote_release(co, lock)
        if ll.waiters:
            ll.handovers = 0
            ll.waiters.popleft().succeed(False)
        else:
            del self.locks.held[lock]

    def remote_release(self, co, lock):
        """Generator: WRITE 0 to the lock's 16-bit field, in the write-back's doorbell (or, without
        command combination, once the write-back has completed), and wait for both."""
        if not self.combine:
            yield co.sync()
        word, shift = lock
        co.write(word + shift // 8, _UNLOCKED)
        yield co.sync()
