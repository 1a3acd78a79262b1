"""The compute-node cache of FlexKV (§2.2.2, §3.3): one per compute node, shared by its threads.

Per key it holds either an **address** (the key's slot: partition, slot number, the slot word,
which names the KV pair) or a **KV pair** (the same and the value), never both, in one FIFO
within a byte budget (FlexKV evicts in insertion order: no per-hit bookkeeping on the read path).
The budget is what the node's memory leaves after its local index (``set_budget``), so raising the
index-offload ratio shrinks the cache, as in the paper's unified split.

Why a generation per key: a client that asked a proxy for a key, was told "cache the pair" and
read the value, must not install it if an invalidation of that key reached this node while its
request was out (the proxy invalidates sharers before it commits a write, §3.3 "block in-flight
RPCs of that key from caching a stale pair"). ``token(key)`` is taken before the RPC and
``put(..., token=)`` refuses to install when the key was invalidated since. Tokens come from one
counter per node, so a key that was never invalidated costs nothing to track.

Address leases (§3.5): an entry is valid for ``lease_ns`` after it was installed or renewed; an
older one is a miss (the KV pair it names may have been reused since).

Sizes are modelled, not measured: an address entry costs ``ADDR_BYTES`` plus the key, a pair
entry ``PAIR_OVERHEAD`` plus key and value (the paper's 64 MB holds ~5 % of 10 M 128-byte pairs).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

ADDR = 1
PAIR = 2
#: modelled bytes of an address entry beyond the key (slot address, slot word, FIFO and hash links)
ADDR_BYTES = 32
#: ... and of a pair entry beyond key and value
PAIR_OVERHEAD = 40


class Entry(NamedTuple):
    kind: int            # ADDR or PAIR
    partition: int
    slot: int            # slot number in the partition's subtable (word index)
    word: int            # the slot word when cached (names the KV pair)
    value: bytes | None  # PAIR only
    since_ns: int        # installed or last renewed (the lease)
    size: int


class CacheStats(NamedTuple):
    entries: int
    bytes: int
    budget: int
    pair_hits: int
    addr_hits: int
    misses: int
    installs: int
    refused: int          # installs refused: the key was invalidated while the request was out
    evictions: int
    invalidations: int
    clears: int
    expired: int          # entries past their lease, dropped on lookup


class NodeCache:
    """FIFO cache of addresses and KV pairs within a byte budget (see the module docstring)."""

    def __init__(self, budget: int, lease_ns: int):
        self.budget = max(0, int(budget))
        self.lease_ns = int(lease_ns)
        self._d: OrderedDict = OrderedDict()
        self.bytes = 0
        self._clock = 0
        self._invalidated: dict = {}          # key -> token at its last invalidation
        self._cleared = 0                     # token at the last clear (every key invalidated)
        self._part_cleared: dict = {}         # partition -> token at its last clear_partitions
        self.pair_hits = self.addr_hits = self.misses = self.installs = self.refused = 0
        self.evictions = self.invalidations = self.clears = self.expired = 0

    def statistics(self) -> CacheStats:
        return CacheStats(len(self._d), self.bytes, self.budget, self.pair_hits, self.addr_hits, self.misses,
                          self.installs, self.refused, self.evictions, self.invalidations, self.clears, self.expired)

    def lookup(self, key: bytes, now: int) -> Entry | None:
        e = self._d.get(key)
        if e is None:
            self.misses += 1
            return None
        if now - e.since_ns > self.lease_ns:
            self._drop(key)
            self.expired += 1
            self.misses += 1
            return None
        if e.kind == PAIR:
            self.pair_hits += 1
        else:
            self.addr_hits += 1
        return e

    def token(self) -> int:
        """Taken before asking a proxy; :meth:`put` refuses if the key was invalidated since."""
        return self._clock

    def put(self, key: bytes, kind: int, partition: int, slot: int, word: int, value: bytes | None, now: int,
            token: int | None = None) -> bool:
        if token is not None and (self._cleared > token or self._invalidated.get(key, -1) > token
                                  or self._part_cleared.get(partition, -1) > token):
            self.refused += 1
            return False
        size = len(key) + (ADDR_BYTES if kind == ADDR else PAIR_OVERHEAD + len(value))
        if size > self.budget:
            self._drop(key)
            return False
        if key in self._d:
            self._drop(key)
        d = self._d
        while self.bytes + size > self.budget:
            _k, old = d.popitem(last=False)
            self.bytes -= old.size
            self.evictions += 1
        d[key] = Entry(kind, partition, slot, word, value if kind == PAIR else None, now, size)
        self.bytes += size
        self.installs += 1
        return True

    def renew(self, key: bytes, now: int) -> None:
        """A successful operation through a cached address renews its lease."""
        e = self._d.get(key)
        if e is not None:
            self._d[key] = e._replace(since_ns=now)

    def invalidate(self, key: bytes) -> None:
        """Drop ``key`` and refuse installs of requests that were out before now."""
        self._clock += 1
        self._invalidated[key] = self._clock
        if len(self._invalidated) > 4096:
            # forget old invalidations: refusing every install older than the oldest forgotten is safe
            self._cleared = max(self._cleared, self._clock)
            self._invalidated.clear()
        self.invalidations += 1
        self._drop(key)

    def discard(self, key: bytes) -> None:
        """Drop ``key`` (its cached address turned out stale); no invalidation semantics."""
        self._drop(key)

    def clear(self) -> None:
        """Drop everything (a reassignment, a compute-node failure)."""
        self._clock += 1
        self._cleared = self._clock
        self._invalidated.clear()
        self._part_cleared.clear()
        self._d.clear()
        self.bytes = 0
        self.clears += 1

    def clear_partitions(self, moved) -> None:
        """Drop the entries of the partitions in ``moved`` (a bool per partition) and refuse the
        installs of their requests that were out: a reassignment hands those partitions to owners
        whose sharer lists know nothing of this node's copies. The other partitions keep their
        owners and sharer lists, so their entries stay coherent (docs/flexkv.md, "Differences")."""
        self._clock += 1
        for p in moved.nonzero()[0].tolist():
            self._part_cleared[p] = self._clock
        d = self._d
        for key in [k for k, e in d.items() if moved[e.partition]]:
            self.bytes -= d.pop(key).size
        self.clears += 1

    def set_budget(self, budget: int) -> None:
        self.budget = max(0, int(budget))
        d = self._d
        while self.bytes > self.budget and d:
            _k, old = d.popitem(last=False)
            self.bytes -= old.size
            self.evictions += 1

    def _drop(self, key: bytes) -> None:
        e = self._d.pop(key, None)
        if e is not None:
            self.bytes -= e.size
