"""A compute node's FlexKV state, shared by its client threads and its proxy threads.

Everything a FlexKV compute node holds lives in one :class:`NodeState` per node process:

* the **partition map** in use (``active``: owner per partition, ``ON_MEMORY`` for the one-sided
  path) and, in the node's memory exposed to one-sided verbs, the **staging map** the manager
  WRITEs before a reassignment, the **access counters** clients bump per partition (the manager
  READs them: Algorithm 1's hotness) and the node's operation counters (the manager's throughput
  samples for Algorithm 2);
* the **local index** of the partitions its proxy owns: a copy of each one's RACE subtable
  (``local[p]``, uint64 words, the same geometry as the memory node's), changed only by the
  proxy's LOCAL_CAS (its commit point);
* the proxy's **per-key metadata** (``meta``: sharer bitmap, write and read counters, §3.3) and
  its **key and slot locks** (a write RPC for a key or slot already being written fails at once,
  like a failed CAS);
* the node's **cache** (cache.py) and the read counts its cache hits owe the proxies
  (``pending_reads``: piggybacked on the next RPC for the key, §3.3);
* the **pause gate** of a reassignment: clients entering an operation on a paused partition wait
  for the resume; ``inflight`` counts the operations under way per partition so a pause can wait
  for them to drain.

One object per (rack, node): the registry is keyed by the layout's ``nonce``, so a process that
inherited the state of an earlier rack (the supervisor forks after a warm-up rack) never reuses it.
"""

from __future__ import annotations

import numpy as np

from nodes.systems.race.bucket import MAX_MATCHES

from .cache import NodeCache
from .layout import MAP_DTYPE, ON_MEMORY

#: modelled bytes of one per-key metadata entry (sharers:32 | writes:16 | reads:16, §3.3)
META_BYTES = 8
#: words of the node's operation counters in its exposed region: ops, reads, writes
STAT_WORDS = 4


#: words of the membership view in the region: failed compute nodes (a bitmap by ordinal), joining,
#: then a u16 death count per compute node (a node killed and restarted before a survivor looked
#: has its bit clear again, but its count tells the survivor its proxy's state is gone)
MEMBER_WORDS = 2 + 8


def region_bytes(partitions: int) -> int:
    """Bytes of a compute node's exposed FlexKV region: counters (u32), staging map (i16), stats
    (u64), membership (u64)."""
    return _align(4 * partitions) + _align(2 * partitions) + 8 * STAT_WORDS + 8 * MEMBER_WORDS


def region_views(mem, off: int, partitions: int):
    """(counters, staging, stats, membership) numpy views of a region at ``off`` in ``mem``."""
    P = partitions
    s_off = off + _align(4 * P)
    t_off = s_off + _align(2 * P)
    m_off = t_off + 8 * STAT_WORDS
    return (mem[off:off + 4 * P].view(np.uint32), mem[s_off:s_off + 2 * P].view(MAP_DTYPE),
            mem[t_off:m_off].view(np.uint64), mem[m_off:m_off + 8 * MEMBER_WORDS].view(np.uint64))


def _align(n: int) -> int:
    return (n + 63) & ~63


class NodeState:
    def __init__(self, fabric, layout: dict, node: int, env):
        self.fabric = fabric
        self.layout = layout
        self.node = node
        self.env = env
        P = layout["partitions"]
        self.partitions = P
        self.counters, self.staging, self.stats, self.membership = region_views(
            fabric.memory[node].host, layout["cn_region"], P)
        self.active = np.full(P, ON_MEMORY, MAP_DTYPE)
        # the failed compute nodes this node has acted on (cleared its cache, redirected their
        # partitions to the memory nodes); the rack's owner writes the membership words
        self.deaths = self.membership[2:].view(np.uint16)
        # the counters as last acted on, as bytes: every operation compares them (a bytes compare,
        # ~50 ns; np.array_equal of the arrays ~1.3 µs)
        self._deaths_seen = self.deaths.tobytes()
        self.failovers = 0
        self.local: dict[int, np.ndarray] = {}
        self.meta: dict[bytes, list] = {}
        self.key_locks: set = set()
        #: the proxy's writes under way that replace a key's pair (UPDATE, DELETE): key -> [the event
        #: its commit fires (made by the first UPDATE that waits for it), committed?] (proxy.handle_write)
        self.writing: dict[bytes, list] = {}
        self.overwrite = layout["options"].get("overwrite_on_conflict", True)
        self.slot_locks: set = set()
        self.proxy_threads = 1            # set when the proxy starts (system.start_node)
        self.lock_free_at = 0             # the proxy threads' shared lock (proxy._shared)
        self.ordinal = layout["cn_ordinal"][node]          # this node's bit in sharer lists
        opts = layout["options"]
        self.memory_bytes = opts["cn_memory_bytes"]
        self.cache = NodeCache(self.memory_bytes, opts["lease_us"] * 1000)
        self.pending_reads: dict[bytes, int] = {}
        self.paused = np.zeros(P, bool)
        self.inflight = np.zeros(P, np.int64)
        self._resumed = None
        if self.membership[1]:
            # a restarted node: it does not know the map in use; everything waits for the
            # manager's next round (PAUSE, RESUME) to hand it over
            self.paused[:] = True
        self.rounds = 0                   # reassignments this node went through
        self.loaded_bytes = 0             # subtable bytes its proxy READ from the memory nodes
        self.cleared_for_round = False    # the pause of the current reassignment cleared the cache
        self.events: list = []            # the manager's events (first compute node only)
        self.wake = None                  # the idle manager waits on it: fired by the next operation here
        # the proxy's settings and counters
        self.kv_cache = opts["kv_cache"]
        self.lease_ns = opts["lease_us"] * 1000
        self.drift = opts["drift"]
        self.rpc_timeout_ns = opts["rpc_timeout_us"] * 1000
        self.rpc_retries = opts["rpc_retries"]
        self.scan_out = np.zeros(2 * MAX_MATCHES, np.uint64)
        self.busy = self.mismatches = self.commits = self.invalidations_sent = self.dead_sharers = 0
        self.overwritten = 0              # UPDATEs answered OVERWRITTEN (proxy.handle_write)
        self.reads_served = 0
        self.executors: dict = {}         # FlexKV-OP: the proxy threads' clients, by thread

    # -- the pause gate --------------------------------------------------------------------------
    def enter(self, p: int):
        """Generator: wait while partition ``p`` is paused, then count an operation in flight."""
        while self.paused[p]:
            if self._resumed is None:
                self._resumed = self.env.event()
            yield self._resumed
        self.inflight[p] += 1

    def check_membership(self) -> None:
        """A compute node died since this node last looked: drop the cache (its sharer lists died
        with its proxy, so nothing would invalidate what is cached of its keys) and serve its
        partitions one-sidedly from the memory nodes, whose copy holds every write it committed
        (FlexKV §3.6). Called at the start of every operation: a local read of one word."""
        seen = self.deaths.tobytes()          # one read of the words the rack's owner writes
        if seen == self._deaths_seen:
            return
        died = np.flatnonzero(np.frombuffer(seen, np.uint16) != np.frombuffer(self._deaths_seen, np.uint16))
        self._deaths_seen = seen
        cns = self.layout["cn_nodes"]
        for ordinal in died.tolist():
            # dead, or dead and already back (then it answers NOT_OWNER until the manager's round)
            self.active[self.active == cns[ordinal]] = ON_MEMORY
        self.cache.clear()
        self.pending_reads.clear()
        self.failovers += 1
        self.events.append((self.env.now, "failover", None, int(sum(1 << o for o in died.tolist()))))

    def owner_failed(self, owner: int) -> bool:
        """Is compute node ``owner`` (a fabric index) marked failed by the membership?"""
        return bool(int(self.membership[0]) >> self.layout["cn_ordinal"][owner] & 1)

    def leave(self, p: int) -> None:
        self.inflight[p] -= 1

    def resume(self) -> None:
        self.paused[:] = False
        ev, self._resumed = self._resumed, None
        if ev is not None:
            ev.succeed()

    # -- memory split --------------------------------------------------------------------------
    def index_bytes(self) -> int:
        """Bytes of the local index: the loaded subtables and the metadata entries."""
        return len(self.local) * self.layout["subtable_bytes"] + META_BYTES * len(self.meta)

    def rebudget(self) -> None:
        """The cache gets what the local index leaves of the node's memory (the unified split)."""
        self.cache.set_budget(max(0, self.memory_bytes - self.index_bytes()))

    # -- counters the manager reads --------------------------------------------------------------
    def count(self, p: int, write: bool) -> None:
        if self.wake is not None:
            ev, self.wake = self.wake, None
            ev.succeed()
        self.counters[p] += 1
        st = self.stats
        st[0] += 1
        st[2 if write else 1] += 1


_STATES: dict = {}


def state_of(fabric, layout: dict, node: int, env) -> NodeState:
    key = (layout["nonce"], node)
    st = _STATES.get(key)
    if st is None or st.env is not env:
        st = _STATES[key] = NodeState(fabric, layout, node, env)
    return st


def states() -> dict:
    """Every NodeState of this process, by (nonce, node) (tests read them)."""
    return _STATES
