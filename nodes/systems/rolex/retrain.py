"""ROLEX's retraining at run time, on the first memory node's CPU (``RolexSystem.servers["memory"]``).

ROLEX (FAST'23) decouples retraining from data modification: compute nodes insert with one-sided
verbs, a full leaf spills into synonym leaves, and "the model retraining is ... asynchronously
executed in memory nodes by using dedicated computing resources" (the paper's abstract). Its
public code (iotlpf/ROLEX) gives every model a synonym table of ``kSynonymMax`` = 128 entries, the
first of them its counter (starting at 1), and refuses a synonym leaf once the counter reaches
``kSynonymMax - 1`` ("Synonym table is full, need retraining", ``rolex/leaf_table.hpp``), so a model
holds 126 synonym leaves; the code does not contain the retraining itself. Here:

* **Trigger**: every model (and every primary leaf no model owns, in an index that ``setup`` left
  empty) has a count word at its first primary leaf (``layout.Remote.count_addr``). A split FAAs it
  in the round that takes the synonym leaf; the client whose FAA brings it to the option
  ``retrain_synonyms`` (default 126: what ROLEX's table holds, below), and to each further multiple,
  sends this node one datagram (a UD SEND to port :data:`RETRAIN_PORT`, no reply: the client does
  not wait, and a request lost to a full receive ring is asked again at the next multiple). Loads
  without inserts never split, so they never retrain.
* **Where**: a retrainer actor on the first memory node (the one holding the model table), on
  that node's ``[memory] cores``: it takes requests from its receive queue (``cpu.poll_ns`` each)
  and retrains one unit at a time; leaves on the other memory nodes are
  READ and WRITTEN with the retrainer's own one-sided verbs (a queue pair per memory node), its own
  node's leaves by its CPU. Lock words are changed by CAS through the NIC, also on its own node
  (docs/fabric.md, "Atomicity": a word CASed remotely is changed only by remote atomics).
* **Steps** of one retrain of a unit (a model's primary slots, or one untrained slot):

  1. CAS every group lock of the unit (0 -> :data:`RETRAIN_TAG`), again for those taken, until all
     are held: writers of the unit wait from here on, readers do not;
  2. READ every leaf of every group (primaries, then their synonym chains level by level);
  3. merge the groups' keys (a chain's keys are sorted across its leaves, groups in slot order)
     and train them: the PLA models and leaves of ``core.RolexIndex``, ``fill`` keys a leaf;
  4. take the new leaves from the memory nodes' counters (FAA, as a synonym leaf is taken),
     striped over the nodes from the unit's first one, and WRITE them and their meta words;
  5. write the new model table (the unit's slots replaced, every other slot and model kept; its
     epoch one more) into fresh memory of this node;
  6. retire every replaced leaf (its meta word, ``layout.retired_meta``) and group lock
     (``RETIRED_LOCK | epoch``, by CAS from :data:`RETRAIN_TAG`), and wait for those to land;
  7. publish the table: one 8-byte store of the header word clients READ it through.

  Step 6 before 7: until the table is published no client can reach the new leaves, so a reader
  that validated an old leaf read what is current (nothing was written to the unit since step 1),
  and from step 6 on any operation that reaches an old leaf or lock learns the new epoch, READs
  the new table (waiting for step 7 if need be) and starts over (client.py, ``Stale``).
* **Costs** on this node's cores (``ctx.cpu``), the profile's ``[software]`` prices, all
  assumptions there: ``patch_ns`` per retrain (take the request, find the unit, build the table)
  and ``patch_ns_per_key`` per key merged and PLA-segmented (DPA-Store's host patcher does the same
  merge and PLA per key); ``core_stream_gbps`` for the bytes this CPU copies (its own node's leaves
  READ and WRITTEN, the tables READ and written). Remote leaves, meta words, counters and locks
  move by verbs through the fabric's NIC model, the request datagram as every UD SEND (``shm/udp.py``).
* **Not modelled**: reuse of replaced leaves and tables (never reused, as ROLEX does not reuse
  synonym leaves: a long run needs ``leaf_headroom``); a failed retrain (a region or the node's
  memory full) leaves the unit as it was, counted in ``failed``.

Counters of the retrainer are words in the first memory node's memory (``layout["retrain_stats"]``):
:func:`retrain_stats` reads them, in any process; :func:`chain_lengths` reads the synonym chains of
the current table from memory (host-side inspection for tests and measurements).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import NamedTuple

import numpy as np

from shm.coro import NodeRdma
from shm.fabric import gaddr, gaddr_offset

from shm.messages import SystemGaveUp

from .core import EMPTY_KEY, REGION_HEADER_BYTES, RolexIndex
from .layout import (
    NO_SYNONYM, RETIRED_LOCK, WORD, Remote, image_meta, parse_table, retired_meta, table_bytes,
    table_head, table_image, unpack_meta,
)

#: The retrainer's UDP port on the first memory node (one request a datagram: retrain the unit
#: of a first leaf); clients send from :data:`REQUEST_PORT`.
RETRAIN_PORT = 7491
REQUEST_PORT = 7492
#: A request: the requester's table epoch, the first primary leaf of the model to retrain.
REQUEST = struct.Struct("<QQ")
#: The retrainer's lock tag: no client's (those are small), not a retired lock.
RETRAIN_TAG = 1 << 62
#: The retrainer's verbs buffer (a registered region of its node's memory, as a client thread's);
#: remote leaves are READ in rounds of at most half of it.
VERBS_BUFFER = 256 << 10
#: Rounds of lock CASes before a retrain gives up (a lock held that long: a dead client).
LOCK_ROUNDS = 100_000


class RetrainStats(NamedTuple):
    requests: int           # retrain requests received
    retrains: int           # retrains published
    dropped: int            # requests for a unit already retrained or already queued
    failed: int             # retrains given up (a region or the node's memory full)
    keys: int               # keys re-laid
    leaves_read: int        # leaves READ (primaries and synonym leaves of the units)
    synonyms_merged: int    # synonym leaves among them (the chains the retrains removed)
    leaves_written: int     # new primary leaves written
    lock_rounds: int        # rounds of lock CASes that found a group taken
    cpu_ns: int             # CPU the retrains charged this node's cores
    busy_ns: int            # virtual time from a retrain's first lock to its table's publication
    table_bytes: int        # bytes of the model tables published
    epoch: int              # the current table's epoch
    longest_chain: int      # the longest synonym chain a retrain merged


STATS_WORDS = 16


def stats_words(fabric, layout: dict) -> np.ndarray:
    m = layout["memory_nodes"][0]
    off = layout["retrain_stats"] // 8
    return fabric.memory[m].host64[off:off + STATS_WORDS]


def retrain_stats(fabric, layout: dict) -> RetrainStats:
    """The retrainer's counters (any process that maps the first memory node)."""
    w = stats_words(fabric, layout)
    return RetrainStats(*(int(x) for x in w[:len(RetrainStats._fields)]))


def current_table(fabric, layout: dict):
    """(offset, TableData, bytes) of the published model table, read from the first memory node."""
    remote = Remote(layout)
    mem = fabric.memory[remote.nodes[0]]
    off = gaddr_offset(int(mem.host64[(remote.regions[0] + WORD) // 8]))
    models, primaries, mapped, _epoch = table_head(bytes(mem.host[off:off + 64]))
    size = table_bytes(models, primaries, mapped)
    return off, parse_table(bytes(mem.host[off:off + size])), size


def chain_lengths(fabric, layout: dict) -> list[int]:
    """Synonym leaves linked after each primary slot of the current table (a host-side walk)."""
    remote = Remote(layout)
    _off, t, _size = current_table(fabric, layout)
    M = len(remote.nodes)
    out = []
    for s in range(len(t.fences)):
        leaf = s if t.leaves is None else t.leaves[s]
        n = 0
        while True:
            j, i = leaf % M, leaf // M
            word = int(fabric.memory[remote.nodes[j]].host64[(remote.tables[j] + i * WORD) // 8])
            _cs, nxt = unpack_meta(word)
            if nxt == NO_SYNONYM:
                break
            n, leaf = n + 1, nxt
        out.append(n)
    return out


class _Retrainer:
    """The retrainer's state on the first memory node (in the process that runs it)."""

    def __init__(self, ctx):
        lay = ctx.layout
        self.ctx = ctx
        self.layout = lay
        self.remote = Remote(lay)
        self.M = len(self.remote.nodes)
        self.span = self.remote.span
        self.lb = self.remote.leaf_bytes
        self.eps, self.fill = int(lay["eps"]), int(lay["fill"])
        self.unlocked = ctx.options.get("fault", "none") == "retrain-unlocked"
        self.h64 = ctx.memory.host64
        self.host = ctx.memory.host
        self.stats = stats_words(ctx.fabric, lay)
        self.queue: deque = deque()
        self.queued: set = set()
        self.wake = None
        sw = ctx.profile.software
        self.stream_ns_per_byte = 8 / sw.core_stream_gbps
        self.fixed_ns = int(sw.patch_ns)
        self.key_ns = float(sw.patch_ns_per_key)
        try:
            self.co = NodeRdma(ctx.host, ctx.index, buffer_bytes=VERBS_BUFFER).thread().coroutine()
        except MemoryError as e:
            raise SystemGaveUp(f"ROLEX: the retrainer's {VERBS_BUFFER >> 10} KiB verbs buffer does not fit memory "
                               f"node {ctx.name}: {e}") from None

    def count(self, field: str, n: int = 1) -> None:
        self.stats[RetrainStats._fields.index(field)] += n

    def stream(self, nbytes: int) -> int:
        return int(nbytes * self.stream_ns_per_byte)

    def local(self, leaf: int) -> bool:
        return leaf % self.M == 0

    def leaf_words(self, leaf: int) -> int:
        """Word index of a local leaf in this node's memory."""
        i = leaf // self.M
        return (self.remote.regions[0] + REGION_HEADER_BYTES + i * self.lb) // 8

    def meta_word(self, leaf: int) -> int:
        return (self.remote.tables[0] + (leaf // self.M) * WORD) // 8


def _actor(ctx, st: _Retrainer, rx):
    """The retrainer: take the requests the receive queue ``rx`` holds (each unit once), then
    retrain the oldest; park on the queue when there is nothing to do."""
    while True:
        dg = rx.poll() if len(rx) else None           # one cpu.poll_ns
        if dg is not None:
            if len(dg.data) >= REQUEST.size:
                _epoch, leaf = REQUEST.unpack_from(dg.data)
                st.count("requests")
                if leaf in st.queued:
                    st.count("dropped")
                else:
                    st.queue.append(leaf)
                    st.queued.add(leaf)
            continue
        if not st.queue:
            yield rx.wait()
            continue
        leaf = st.queue.popleft()
        yield from _retrain(ctx, st, leaf)
        st.queued.discard(leaf)


def _read_leaves(st: _Retrainer, leaves: list):
    """Generator: {leaf: (2 x span words, synonym)} of ``leaves``: this node's by its CPU (the
    bytes returned for the caller to charge), the others' READ with their meta words."""
    out, local_bytes = {}, 0
    remote = [g for g in leaves if not st.local(g)]
    for g in leaves:
        if st.local(g):
            w = st.leaf_words(g)
            out[g] = (st.h64[w:w + 2 * st.span].copy(), unpack_meta(int(st.h64[st.meta_word(g)]))[1])
            local_bytes += st.lb + WORD
    per_round = max(1, (VERBS_BUFFER // 2) // (st.lb + 64))
    co, r = st.co, st.remote
    for i in range(0, len(remote), per_round):
        part = remote[i:i + per_round]
        hs = [(g, co.read(r.leaf_addr(g), st.lb), co.read(r.meta_addr(g), WORD)) for g in part]
        yield co.sync()
        for g, hl, hm in hs:
            out[g] = (hl.data.view(np.uint64).copy(), unpack_meta(hm.value)[1])
    return out, local_bytes


def _retrain(ctx, st: _Retrainer, first_leaf: int):
    """Generator: one retrain of the unit whose first primary is ``first_leaf`` (module docstring)."""
    co, r, M, span = st.co, st.remote, st.M, st.span
    t0 = ctx.env.now
    cpu = st.fixed_ns
    _off, t, tbytes = current_table(ctx.fabric, st.layout)
    cpu += st.stream(tbytes)
    leaves = list(range(len(t.fences))) if t.leaves is None else list(t.leaves)
    try:
        a = leaves.index(first_leaf)
    except ValueError:
        st.count("dropped")                  # retrained already: the leaf is no slot's any more
        return
    ends = {b: b + -(-s.size // t.fill) for s, b in zip(t.segs, t.bases)}
    inside = [b for b in t.bases if b < a < ends[b]]
    if inside:
        st.count("dropped")                  # not a unit's first slot (cannot happen for a live request)
        return
    b = ends.get(a, a + 1)
    old = leaves[a:b]

    # 1. every group lock of the unit (fault=retrain-unlocked, the deliberate bug: none, so a
    # writer may change a leaf after this retrain READ it and before it is retired: lost writes)
    pending = [] if st.unlocked else list(old)
    held = [] if st.unlocked else old
    for _round in range(LOCK_ROUNDS):
        if not pending:
            break
        hs = [(g, co.cas(r.lock_addr(g), 0, RETRAIN_TAG)) for g in pending]
        yield co.sync()
        pending = [g for g, h in hs if h.value != 0]
        if not pending:
            break
        st.count("lock_rounds")
    else:
        yield from _unlock(st, [g for g in old if g not in pending])
        st.count("failed")
        return

    # 2. every leaf of every group, chains level by level
    chain = {g: [g] for g in old}
    images: dict = {}
    level, owner = list(old), {g: g for g in old}
    local_bytes = 0
    while level:
        got, nb = yield from _read_leaves(st, level)
        local_bytes += nb
        images.update(got)
        nxt = []
        for g in level:
            syn = got[g][1]
            if syn != NO_SYNONYM:
                owner[syn] = owner[g]
                chain[owner[g]].append(syn)
                nxt.append(syn)
        level = nxt
    cpu += st.stream(local_bytes)

    # 3. merge and train
    ks, vs = [], []
    for g in old:
        for leaf in chain[g]:
            words = images[leaf][0]
            keys = words[:span]
            n = int(np.searchsorted(keys, np.uint64(EMPTY_KEY), side="left"))
            ks.append(keys[:n])
            vs.append(words[span:span + n])
    keys = np.concatenate(ks) if ks else np.zeros(0, np.uint64)
    vals = np.concatenate(vs) if vs else np.zeros(0, np.uint64)
    if keys.size > 1 and not (keys[1:] > keys[:-1]).all():
        raise RuntimeError(f"ROLEX retrain: the keys of the unit at leaf {first_leaf} are not in order")
    cpu += int(st.key_ns * keys.size)
    if keys.size:
        index = RolexIndex(keys, vals, eps=st.eps, fill=st.fill, span=span)
        P = index.primary_leaves
        rows_k, rows_v = index.leaf_keys[:P], index.leaf_values[:P]
        segs = index.segments
        bases = [a + x for x in index.first_leaves]
    else:
        P = 1
        rows_k = np.full((1, span), np.uint64(EMPTY_KEY), np.uint64)
        rows_v = np.zeros((1, span), np.uint64)
        segs, bases = [], []

    # 4. new leaves, striped from the unit's first node
    start = old[0] % M
    node_of = [(start + j) % M for j in range(P)]
    need = [node_of.count(j) for j in range(M)]
    hs = {j: co.faa(r.counter_addr(j), need[j]) for j in range(M) if need[j]}
    yield co.sync()
    base = {j: h.value for j, h in hs.items()}
    if any(base[j] + need[j] > r.leaves_per_node for j in base):
        yield from _unlock(st, held)
        st.count("failed")
        return
    taken = dict.fromkeys(base, 0)
    new = []
    for j in node_of:
        new.append(r.global_leaf(j, base[j] + taken[j]))
        taken[j] += 1
    written = 0
    for s, leaf in enumerate(new):
        img = np.concatenate([rows_k[s], rows_v[s]])        # a core leaf row: keys (EMPTY after), values
        meta = image_meta(img, NO_SYNONYM)
        if st.local(leaf):
            w = st.leaf_words(leaf)
            st.h64[w:w + 2 * span] = img
            st.h64[st.meta_word(leaf)] = meta
            written += st.lb + WORD
        else:
            co.write(r.leaf_addr(leaf), img.view(np.uint8))
            co.write(r.meta_addr(leaf), meta)
    yield co.sync()
    cpu += st.stream(written)

    # 5. the new table, into fresh memory of this node
    shift = P - (b - a)
    old_models = [(s_, b_) for s_, b_ in zip(t.segs, t.bases) if b_ != a]
    models = ([(s_, b_) for s_, b_ in old_models if b_ < a] + list(zip(segs, bases))
              + [(s_, b_ + shift) for s_, b_ in old_models if b_ > a])
    fences = (t.fences[:a] + [t.fences[a]] + [int(rows_k[s][0]) for s in range(1, P)] + t.fences[b:])
    image = table_image([m_[0] for m_ in models], [m_[1] for m_ in models], fences, t.eps, t.fill,
                        t.epoch + 1, leaves[:a] + new + leaves[b:])
    try:
        off = ctx.allocate(len(image))
    except MemoryError:
        yield from _unlock(st, held)
        st.count("failed")
        return
    cpu += st.stream(len(image))
    ctx.cpu(cpu)
    yield 0                                  # the CPU work above is done before anything is retired
    st.host[off:off + len(image)] = np.frombuffer(image, np.uint8)
    epoch = t.epoch + 1

    # 6. retire what was replaced, then 7. publish
    gone = [leaf for g in old for leaf in chain[g]]
    for leaf in gone:
        if st.local(leaf):
            st.h64[st.meta_word(leaf)] = retired_meta(epoch)
        else:
            co.write(r.meta_addr(leaf), retired_meta(epoch))
    pending = list(old)
    while pending:                           # from RETRAIN_TAG at once (from 0 under the fault)
        hs = [(g, co.cas(r.lock_addr(g), 0 if st.unlocked else RETRAIN_TAG, RETIRED_LOCK | epoch)) for g in pending]
        yield co.sync()
        pending = [g for g, h in hs if h.value != (0 if st.unlocked else RETRAIN_TAG)]
    st.h64[(r.regions[0] + WORD) // 8] = gaddr(r.nodes[0], off)

    st.count("retrains")
    st.count("keys", int(keys.size))
    st.count("leaves_read", len(gone))
    st.count("synonyms_merged", len(gone) - len(old))
    st.count("leaves_written", P)
    st.count("cpu_ns", cpu)
    st.count("busy_ns", ctx.env.now - t0)
    st.count("table_bytes", len(image))
    st.stats[RetrainStats._fields.index("epoch")] = epoch
    longest = max(len(c) - 1 for c in chain.values())
    i = RetrainStats._fields.index("longest_chain")
    st.stats[i] = max(int(st.stats[i]), longest)


def _unlock(st: _Retrainer, held: list):
    """Generator: give back group locks the retrainer took (a retrain that did not happen)."""
    for g in held:
        st.co.cas(st.remote.lock_addr(g), RETRAIN_TAG, 0)
    if held:
        yield st.co.sync()


def memory_server(ctx):
    """``RolexSystem.servers["memory"]``: on the first memory node, with retraining on, the
    retrainer and its receive queue (port :data:`RETRAIN_PORT`); nothing elsewhere."""
    lay = ctx.layout
    if not lay.get("retrain_synonyms") or ctx.index != lay["memory_nodes"][0]:
        return []
    if ctx.udp is None:
        raise SystemGaveUp("ROLEX: retraining needs the datagram path to the memory node (a profile with [udp]); "
                           "set retrain_synonyms = 0 to run without it")
    return [_actor(ctx, _Retrainer(ctx), ctx.udp.bind(ctx.index, RETRAIN_PORT))]
