"""FlexKV's manager and its reassignment protocol (§3.4, Algorithms 1 and 2).

The manager is an actor on the first compute node (as in the paper's testbed). Every ``interval``
(the paper's Δ, scaled: see docs/flexkv.md) it

1. READs every compute node's per-partition access counters and operation counters (one-sided, in
   the nodes' exposed memory) and takes the differences since the last interval: the partitions'
   hotness and the rack's throughput and read fraction;
2. feeds the throughput to the knob (Algorithm 2, ``RatioTuner``) for the ratio of the next interval,
   and restarts the knob when the read:write mix shifted by 10 points;
3. ranks the partitions (Algorithm 1, ``HotnessRanker``) and, when the rank displacement exceeds a
   quarter of a random reshuffle's, reassigns owners so each node gets one partition per rank;
4. if the map (owner per offloaded partition, ``ON_MEMORY`` for the rest) changed, runs the
   **atomic reassignment**: WRITE the new map into every node's staging map; RPC ``PAUSE`` to every
   node, then again to those whose operations on moved partitions have not drained, until every
   one has (a drained node drops what it caches of the moved partitions);
   RPC ``RESUME`` to every node: its proxy loads the subtables it gained from the memory nodes
   (READs), drops those it lost, copies staging to active and lets operations go on.

Why PAUSE is polled rather than held: a pause that waited for draining inside the handler would
hold a proxy thread while the operations it waits for may need that proxy (with one proxy thread,
a deadlock). Why RESUME may reach nodes one after another: a node that resumed early sends a
request to a proxy that has not loaded the partition yet; that proxy answers ``NOT_OWNER`` (its
active map is still the old one) and the client retries.

Each round's duration and every knob and ranking event go to ``NodeState.events`` on the first
compute node (its clients publish them in their statistics: the Fig. 18 markers).
"""

from __future__ import annotations

import struct

import numpy as np

from shm.fabric import gaddr
from shm.rpc import RpcError, rpc

from .algorithms import HotnessRanker, RatioTuner, assign, offloaded, workload_shifted
from .layout import MAP_DTYPE, ON_MEMORY
from .node import STAT_WORDS, _align, state_of
from .proxy import M_PAUSE, M_RESUME, _cpu

#: subtable bytes a proxy READs per verb when it loads a partition (its verbs buffer is 64 KiB)
LOAD_PIECE = 16 << 10
LOAD_BATCH = 48 << 10
#: how often the manager asks a node again whether its moved partitions have drained
DRAIN_POLL_NS = 2_000
COUNT = struct.Struct("<Q")


# -- the two phases on a compute node ------------------------------------------------------------

def handle_pause(ctx, req):
    """Pause the partitions whose entry changes; reply how many operations on them are still in
    flight here (0: drained, and what the cache holds of them is dropped)."""
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    # a death the manager's map accounts for must be acted on here first: a node that noticed it
    # only after the round would send the partitions the round handed out to the memory nodes
    st.check_membership()
    moved = st.staging != st.active
    _cpu(ctx, req, ctx.profile.cpu.local_read_ns_per_line * max(1, st.partitions // 32))
    st.paused |= moved
    left = int(st.inflight[moved].sum())
    if left == 0 and not st.cleared_for_round:
        # after the drain: an operation that was under way may have cached what it read. Only the
        # moved partitions' entries go: the paper clears the whole cache, which costs nothing at
        # its Δ = 1 s but refills for a large share of a scaled Δ (docs/flexkv.md)
        st.cache.clear_partitions(moved)
        st.pending_reads.clear()
        st.cleared_for_round = True
    return COUNT.pack(left)
    yield  # pragma: no cover


def handle_resume(ctx, req):
    """Load the subtables this node's proxy gains, drop those it loses, staging -> active, go on."""
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    st.check_membership()
    me = ctx.index
    new = st.staging.copy()
    gained = np.flatnonzero((new == me) & (st.active != me))
    lost = np.flatnonzero((st.active == me) & (new != me))
    d = st.layout
    nbytes = d["subtable_bytes"]
    entries = d["directory_entries"]
    co = req.co
    # the gained subtables in READs of at most LOAD_PIECE, LOAD_BATCH bytes of them per round trip
    pieces = []
    for p in gained.tolist():
        node, base = (entries[p] >> 40) & 0xFF, entries[p] & ((1 << 40) - 1)
        st.local[p] = np.empty(nbytes // 8, np.uint64)
        pieces += [(p, node, base, start, min(LOAD_PIECE, nbytes - start)) for start in range(0, nbytes, LOAD_PIECE)]
    while pieces:
        batch, size = [], 0
        while pieces and size + pieces[0][4] <= LOAD_BATCH:
            batch.append(pieces.pop(0))
            size += batch[-1][4]
        hds = [(p, start, n, co.read(gaddr(node, base + start), n)) for p, node, base, start, n in batch]
        yield co.sync()
        for p, start, n, hd in hds:
            st.local[p][start // 8:(start + n) // 8] = hd.data.view(np.uint64)
        _cpu(ctx, req, ctx.profile.cpu.local_read_ns_per_line * (size // 64))       # copying them into the index
        st.loaded_bytes += size
    if len(lost):
        lost_set = set(lost.tolist())
        for p in lost_set:
            st.local.pop(p, None)
        for k in [k for k, m in st.meta.items() if m[3] in lost_set]:
            del st.meta[k]
    st.active[:] = new
    st.rebudget()
    st.rounds += 1
    st.cleared_for_round = False
    st.resume()
    return COUNT.pack(len(gained))


# -- the manager actor ---------------------------------------------------------------------------

class Marker(tuple):
    """(virtual ns, kind, ratio, value): kind is "reassign" (value = round ns), "ratio" (a knob
    event, value = throughput in ops/s or None), "rank" (value = displacement / bound)."""


def manager(ctx):
    """The manager actor on the first compute node (see the module docstring)."""
    from shm.coro import NodeRdma
    layout = ctx.layout
    opts = layout["options"]
    st = state_of(ctx.fabric, layout, ctx.index, ctx.env)
    env = ctx.env
    P = layout["partitions"]
    cns = layout["cn_nodes"]
    C = len(cns)
    names = layout["cn_names"]
    off = layout["cn_region"]
    c_bytes = 4 * P
    s_off = off + _align(4 * P)
    t_off = s_off + _align(2 * P)
    interval = opts["interval_us"] * 1000
    co = NodeRdma(ctx.host, ctx.index, buffer_bytes=max(64 << 10, 2 * C * (c_bytes + 64))).thread().coroutine()
    ranker = HotnessRanker(P, C)
    tuner = RatioTuner(step=opts["knob_step"], start=0.0) if opts["knob"] else None
    ratio = tuner.ratio if tuner else opts["offload_ratio"]
    # without Algorithm 1: a static owner per partition (round-robin), lists in partition order
    owner = np.arange(P) % C
    ranks = np.arange(P) // C
    current = np.full(P, ON_MEMORY, MAP_DTYPE)
    last: dict = {}                      # compute node -> (its counters, its stats) at the last read
    read_fraction = None
    events = st.events
    cn_ordinal = layout["cn_ordinal"]
    known_failed = 0
    known_deaths = st.deaths.copy()
    timeout = opts["rpc_timeout_us"] * 1000
    stopped = ctx.stopped
    since = [env.now]                    # when the current throughput sample began
    window = np.zeros(P, np.int64)       # accesses per partition since Algorithm 1 last ranked
    ranked = False

    def read_counters(nodes):
        """Generator: READ the nodes' counters; (hotness, stats delta) since the previous read."""
        hs = [(co.read(gaddr(cn, off), c_bytes), co.read(gaddr(cn, t_off), 8 * STAT_WORDS)) for cn in nodes]
        yield co.sync()
        hot = np.zeros(P, np.int64)
        dst = np.zeros(STAT_WORDS, np.int64)
        for cn, (hc, ht) in zip(nodes, hs):
            counts = hc.data.view(np.uint32).astype(np.int64)
            stats = ht.data.view(np.uint64).astype(np.int64)
            before = last.get(cn)
            if before is None or stats[0] < before[1][0]:
                before = (np.zeros(P, np.int64), np.zeros(STAT_WORDS, np.int64))   # new, or restarted
            hot += counts - before[0]
            dst += stats - before[1]
            last[cn] = (counts, stats)
        ctx.cpu(ctx.profile.cpu.local_read_ns_per_line * (len(hs) * c_bytes // 64 + 1) + 20 * P)
        return hot, dst

    while True:
        yield interval
        if stopped is not None and stopped.triggered:
            return
        failed = int(st.membership[0])
        alive = [cn for i, cn in enumerate(cns) if not failed >> i & 1]
        if failed != known_failed or not np.array_equal(st.deaths, known_deaths):
            # a compute node died or came back: its partitions go to the memory nodes (the
            # survivors already did so on their own) or it gets its share back (a round it joins)
            known_failed = failed
            known_deaths = st.deaths.copy()
            current = None
        hotness, delta = yield from read_counters(alive)
        if delta[0] <= 0 and current is not None:
            # the rack is idle: park until this node runs an operation again (a manager that kept
            # polling would keep a co-located rack, which runs until nothing is left to do, alive)
            st.wake = env.event()
            yield st.wake
            yield from read_counters(alive)          # the next sample starts now, not before the idle time
            continue
        now = env.now
        # the operations since the last read over the time since then (a round may have made the
        # period longer than the interval)
        throughput = float(delta[0]) * 1e9 / max(1, now - since[0])
        since[0] = now
        window += hotness
        if tuner is not None:
            for ev in tuner.sample(throughput):
                events.append(Marker((now, ev.kind, ev.ratio, ev.throughput)))
            if delta[0] > 0:
                rf = float(delta[1]) / float(delta[0])
                if read_fraction is not None and tuner.settled and workload_shifted(read_fraction, rf):
                    for ev in tuner.restart():
                        events.append(Marker((now, ev.kind, ev.ratio, None)))
                if tuner.settled or read_fraction is None:
                    read_fraction = rf
            ratio = tuner.ratio
        # Algorithm 1 on a window holding as many accesses per partition as the paper's Δ did
        # (rank_samples): with fewer, counting noise alone moves cold partitions across ranks
        if opts["rank_hotness"] and window.sum() > 0 and (not ranked or window.sum() >= opts["rank_samples"] * P):
            hotness, window = window, np.zeros(P, np.int64)
            ranked = True
            res = ranker.observe(hotness)
            if res.reassign:
                owner = assign(res.ranks, hotness, C, owner)
                ranks = res.ranks
                events.append(Marker((now, "rank", ratio, res.displacement / max(res.bound, 1e-9))))
                if tuner is not None and tuner.settled:
                    for ev in tuner.restart():
                        events.append(Marker((now, ev.kind, ev.ratio, None)))
                    ratio = tuner.ratio
        off_mask = offloaded(owner, ranks, C, ratio)
        owners = np.asarray(cns, np.int64)[owner]
        dead = np.array([bool(failed >> cn_ordinal[int(o)] & 1) for o in owners], bool) if failed else False
        new = np.where(off_mask & ~dead, owners, ON_MEMORY).astype(MAP_DTYPE)
        if current is not None and np.array_equal(new, current):
            continue
        t0 = env.now
        for cn in alive:
            co.write(gaddr(cn, s_off), new.tobytes())
        yield co.sync()
        gone = set()
        # every node pauses before the manager waits for any to drain: an operation in flight on a
        # moved partition may be losing CAS races to other nodes' operations on the same hot key,
        # and it only wins once those nodes stop starting new ones
        draining = list(alive)
        while draining:
            still = []
            for cn in draining:
                try:
                    left, = COUNT.unpack((yield from rpc(ctx, names[cn_ordinal[cn]], b"", method=M_PAUSE,
                                                         timeout_ns=timeout, retries=opts["rpc_retries"])))
                except RpcError:
                    gone.add(cn)             # died during the round: the next round leaves it out
                    continue
                if left:
                    still.append(cn)
            draining = still
            if draining:
                yield DRAIN_POLL_NS
        for cn in alive:
            if cn in gone:
                continue
            try:
                yield from rpc(ctx, names[cn_ordinal[cn]], b"", method=M_RESUME,
                               timeout_ns=max(timeout, 50 * interval // 100), retries=opts["rpc_retries"])
            except RpcError:
                gone.add(cn)
        current = new if not gone else None
        events.append(Marker((env.now, "reassign", ratio, env.now - t0)))
        # the knob's next sample covers the new map only: the round's own time and operations are out
        yield from read_counters(alive)
        since[0] = env.now
