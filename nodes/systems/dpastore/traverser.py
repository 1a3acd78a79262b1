"""DPA-Store's traverser threads: a request from the NIC, a walk of the learned index, DMA to the host.

One actor per DPA hardware thread (the paper: 176 of them on 11 cores). The NIC steers each
UDP port to one thread's RX queue, and clients pick the port by a hash of the key, so every
operation on a key runs on one thread, one request at a time: a write's "does the key exist"
check and its append to the insert buffer cannot interleave with another write of that key.
Different keys of one leaf meet in its insert buffer from different threads; the buffer's two
counters (reserve, then publish) let them write without a lock (:mod:`.patch`).

What a GET costs (each line is priced by the DPA cache model, :mod:`nodes.devices.dpa_memory`,
each DMA by the DMA engine, :mod:`shm.dma`; CPU work in cycles at ``dpa.ghz`` on the thread's
core, which other threads use while this one waits; the cycle counts are the profile's ``[dpa]``
assumptions ``packet_cycles``, ``search_cycles``, ``model_cycles``, ``scan_cycles_per_key``,
``buffer_check_cycles``, ``write_cycles``, ``probe_cycles``):

1. the packet: ``packet_cycles`` as a doorbell burst (parse, and later build and post the reply);
2. the hot-entry cache when the client sent hints: the Bloom filter sits in the thread-context
   line (free); a "maybe" reads one bucket line (:mod:`.hotcache`);
3. per inner node: line 0 (metadata, first keys); a binary search over the first keys while the
   models line is prefetched; the model while the pivot window's lines are prefetched; the scan;
   the child pointer's line -- 4 or 5 lines, the paper's ~4.5;
4. the leaf: its metadata line; then, overlapped, the insert buffer's lines (prefetch), the model
   and the DMA of the key window (one DMA of at most 3 lines); an early exit if the buffer holds
   the key; else the window's scan and one DMA of the value slot.

``prefetch = false`` (the paper's measured +19 %) loads the same lines on demand instead: the
models line after the binary search, the pivot lines one after another, the buffer after the
model, the key window's DMA after the buffer's scan.

With ``index = "btree"`` (:mod:`.inner`) step 3 is a binary search over a 2 KB node, one
dependent line load per key line probed, then the child pointer's line; and step 4 has no model:
the buffer is prefetched with the first probe's key line, then every further key line probed is
its own dependent DMA, then the value's (:meth:`Traverser._btree_leaf_lookup`).

Writes run steps 1, 3 and 4 (a write must know whether the key exists: INSERT of a present key
and UPDATE/DELETE of a missing one fail), then reserve a buffer slot (FAA), store the key and the
value slot, and publish (FAA). The writer whose publish fills the buffer DMA-pushes the patch
request (the buffer's bytes) to the host's patch ring. A full buffer waits for its patch: the
request is put aside and retried after the thread's other requests (the paper's re-enqueue).

RANGE descends to the start key, merges the leaf's buffered writes at or above it with the
leaf's keys (one DMA of the keys from the start position to the leaf's end, one of the values
taken), and re-descends from the leaf's fence (the next pivot) until it has the pairs asked for
or 64 of them, the most one response carries.

**Epochs.** Each thread counts requests begun and finished in its own line of the control block;
stitchers read those counters to know when every thread has moved past a retired node.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import deque
from typing import NamedTuple

import numpy as np

from . import layout as L
from . import wire as W
from .inner import format_of
from .pla import KEYS_PER_LINE, LEAF_EPS, LINE_BYTES

RETRY_NS = 2_000               # a thread with only put-aside writes checks their buffers this often


class TraverserStats(NamedTuple):
    requests: int
    gets: int
    writes: int
    ranges: int
    errors: int                # malformed requests answered with an error
    duplicates: int            # resends answered from the last reply
    deferred: int              # writes put aside on a full insert buffer
    buffer_hits: int           # GETs answered from an insert buffer
    cache_hits: int
    bypasses: int              # GETs without cache hints at a thread with a cache (moved by a client)
    patches: int               # patch requests pushed
    inner_lines: int           # DPA-memory lines of inner nodes read by walks (GETs, writes, RANGEs)
    inner_nodes: int
    leaf_searches: int         # leaf lookups (GETs, writes) that searched the host key array
    leaf_key_lines: int        # host key lines those searches DMA'd


class Traverser:
    """One DPA thread serving its RX queue (see the module docstring)."""

    def __init__(self, ctx, th, index: int, queue, sock, lay: dict, patch_ring, cache=None):
        self.ctx, self.th, self.index, self.queue, self.sock = ctx, th, index, queue, sock
        self.env = ctx.env
        self.mem = ctx.memory.host                      # DPA memory bytes
        self.words = ctx.memory.host64
        self.geo = L.LeafGeometry.of(lay["value_max"])
        self.value_max = lay["value_max"]
        self.root_word = lay["dpa_region"] // 8 + L.CTL_ROOT
        self.epoch = (lay["dpa_region"] + L.EPOCH_BASE + index * LINE_BYTES) // 8
        self.dma = ctx.dma
        self.patch_ring = patch_ring
        self.prefetch = bool(lay["prefetch"])
        self.fmt = format_of(lay)                       # the inner-node format (:mod:`.inner`)
        self.leaf_eps = lay.get("leaf_eps", LEAF_EPS)
        if self.fmt.name == "btree":
            self._leaf_lookup = self._btree_leaf_lookup
        self.cache = cache
        self.mtu = ctx.udp.max_payload
        dpa = ctx.profile.dpa
        ghz = dpa.ghz
        self.ns = {name: round(c / ghz) for name, c in (("packet", dpa.packet_cycles), ("search", dpa.search_cycles),
                                                        ("model", dpa.model_cycles),
                                                        ("buffer", dpa.buffer_check_cycles),
                                                        ("write", dpa.write_cycles), ("probe", dpa.probe_cycles))}
        self.scan_ns = dpa.scan_cycles_per_key / ghz
        self.last: dict = {}                            # client port -> (request id, reply or None)
        self.deferred: deque = deque()
        self.on_patch = None                            # co-located: wakes the host's patchers
        self.n = dict(requests=0, gets=0, writes=0, ranges=0, errors=0, duplicates=0, deferred=0,
                      buffer_hits=0, cache_hits=0, bypasses=0, patches=0, inner_lines=0, inner_nodes=0,
                      leaf_searches=0, leaf_key_lines=0)

    def statistics(self) -> TraverserStats:
        return TraverserStats(**self.n)

    # --- the loop -------------------------------------------------------------------------------

    def run(self):
        th, queue = self.th, self.queue
        next_retry = 0
        while True:
            if self.deferred and (self.env.now >= next_retry or not len(queue)):
                if self.env.now < next_retry:
                    yield th.stall(next_retry - self.env.now)
                yield from self._retry()
                next_retry = self.env.now + RETRY_NS
                continue
            dg = queue.poll()
            if dg is None:
                ev = queue.wait()
                yield ev
                continue
            yield th.compute(self.ns["packet"], doorbell=True)
            yield from self._request(dg)

    def _request(self, dg):
        self.n["requests"] += 1
        who = (dg.src_node, dg.src_port)
        try:
            req = W.parse_request(dg.data, self.value_max)
        except W.Malformed as e:
            self.n["errors"] += 1
            rid = W.request_id(dg.data)
            op = dg.data[0] if dg.data else 0
            self.sock.send(dg.src_node, dg.src_port, W.REP.pack(op, W.ST_ERROR, 0, rid) + str(e).encode()[:200])
            return
        seen = self.last.get(who)
        if seen is not None and seen[0] == req.rid:
            self.n["duplicates"] += 1
            if seen[1] is not None:                     # answered: answer again; else still put aside
                self.sock.send(dg.src_node, dg.src_port, seen[1])
            return
        yield from self._execute(who, req)

    def _retry(self):
        for _ in range(len(self.deferred)):
            who, req = self.deferred.popleft()
            yield from self._execute(who, req)

    def _execute(self, who, req: W.Request):
        words, e = self.words, self.epoch
        words[e] += 1                                   # begun: no node seen from here on is reclaimed
        try:
            if req.op == W.OP_GET:
                reply = yield from self._get(req)
            elif req.op == W.OP_RANGE:
                reply = yield from self._range(req)
            else:
                reply = yield from self._write(req)
        finally:
            words[e + 1] += 1
        if reply is None:                               # a full insert buffer: retry later
            self.n["deferred"] += 1
            self.last[who] = (req.rid, None)
            self.deferred.append((who, req))
            return
        self.last[who] = (req.rid, reply)
        self.sock.send(who[0], who[1], reply)

    # --- the walk ---------------------------------------------------------------------------------

    def overlap(self, fetch_ns: int, compute_ns: int):
        """Compute while lines (or a DMA) are on their way: the later of the two."""
        yield self.th.compute(compute_ns)
        if fetch_ns > compute_ns:
            yield self.th.stall(fetch_ns - compute_ns)

    def _descend(self, key: int, want_fence: bool = False):
        """The leaf for ``key`` (its DPA offset) and the fence above it (next pivot, or None): one
        step of the inner-node format per level (:meth:`.inner.InnerFormat.step`)."""
        mem, fmt = self.mem, self.fmt
        node = int(self.words[self.root_word])
        fence = None
        lines = 0
        nodes = 0
        while fmt.is_inner(mem, fmt.address(node), node):
            node, f, n = yield from fmt.step(self, node, key, want_fence)
            if f is not None:
                fence = f
            lines += n
            nodes += 1
        self.n["inner_lines"] += lines
        self.n["inner_nodes"] += nodes
        return node, fence

    def _buffer(self, leaf: int) -> list:
        g = self.geo
        raw = bytes(self.mem[leaf + g.counters:leaf + g.dpa_bytes])
        return L.buffer_entries(raw, g)

    def _buffered(self, leaf: int, key: int):
        """A lookup's early exit: (found, value, "buffer") for the newest buffered write of ``key``
        in the leaf's insert buffer (already fetched), or None."""
        yield self.th.compute(self.ns["buffer"])
        newest = None
        for k, v in self._buffer(leaf):
            if k == key:
                newest = (v,)
        if newest is None:
            return None
        self.n["buffer_hits"] += 1
        return newest[0] is not None, newest[0], "buffer"

    def _dma_read(self, addr: int, n: int) -> np.ndarray:
        buf = np.empty(n, np.uint8)
        c = self.dma.read(addr, buf, n)
        return buf, c

    def _leaf_lookup(self, leaf: int, key: int):
        """(found, value bytes or None, where): the newest write of ``key`` in the leaf's buffer,
        else its entry in the host arrays. ``where`` is "buffer" or "leaf"."""
        th, g = self.th, self.geo
        memory = th.dpa.memory
        yield th.load(leaf, LINE_BYTES)                             # metadata: model, host addresses
        meta = L.read_leaf(self.mem, leaf)
        lo, hi = L.window(meta.model, key, self.leaf_eps)
        win = None
        if meta.count:
            first = lo // KEYS_PER_LINE * LINE_BYTES
            nbytes = (hi // KEYS_PER_LINE + 1) * LINE_BYTES - first
        if self.prefetch:
            pf = memory.prefetch(th.id, leaf + g.counters, g.buffer_bytes)
            if meta.count:
                win, dma = self._dma_read(meta.keys_addr + first, nbytes)
                pf = max(pf, dma.done_ns - self.env.now)
            yield from self.overlap(pf, self.ns["model"])
        else:
            yield th.compute(self.ns["model"])
            yield th.load(leaf + g.counters, g.buffer_bytes, overlap=True)
        hit = yield from self._buffered(leaf, key)
        if hit is not None:
            return hit
        if not meta.count:
            return False, None, "leaf"
        if win is None:
            win, dma = self._dma_read(meta.keys_addr + first, nbytes)
            yield dma
        self.n["leaf_searches"] += 1
        self.n["leaf_key_lines"] += nbytes // LINE_BYTES
        keys = np.frombuffer(win.tobytes(), "<u8")
        rel = lo - lo // KEYS_PER_LINE * KEYS_PER_LINE
        sub = keys[rel:rel + hi - lo + 1].tolist()
        yield th.compute(round(len(sub) * self.scan_ns))
        i = bisect_right(sub, key) - 1
        if i < 0 or sub[i] != key:
            return False, None, "leaf"
        pos = lo + i
        slot, dma = self._dma_read(meta.values_addr + pos * g.slot, g.slot)
        yield dma
        return True, g.decode(slot.tobytes()), "leaf"

    def _btree_leaf_lookup(self, leaf: int, key: int):
        """:meth:`_leaf_lookup` of the B+-tree (``index = "btree"``): no model; the metadata line,
        the insert buffer (prefetched with the first probe's key line, as the learned leaf
        prefetches its window), then an upper-bound binary search over the host key array in
        which every key line not yet read is one dependent DMA, then the value's DMA."""
        th, g = self.th, self.geo
        memory = th.dpa.memory
        probe = self.ns["probe"]
        yield th.load(leaf, LINE_BYTES)                             # metadata: count, host addresses
        meta = L.read_leaf(self.mem, leaf)
        n = meta.count
        got: dict = {}                                              # key line -> its 8 keys
        first = (n // 2) // KEYS_PER_LINE                           # the first probe's line
        if self.prefetch:
            pf = memory.prefetch(th.id, leaf + g.counters, g.buffer_bytes)
            if n:
                win, dma = self._dma_read(meta.keys_addr + first * LINE_BYTES, LINE_BYTES)
                got[first] = win
                pf = max(pf, dma.done_ns - self.env.now)
            yield from self.overlap(pf, probe)
        else:
            yield th.compute(probe)
            yield th.load(leaf + g.counters, g.buffer_bytes, overlap=True)
        hit = yield from self._buffered(leaf, key)
        if hit is not None:
            return hit
        if not n:
            return False, None, "leaf"
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            line = mid // KEYS_PER_LINE
            if line not in got:                                     # the next probe depends on it
                win, dma = self._dma_read(meta.keys_addr + line * LINE_BYTES, LINE_BYTES)
                yield dma
                got[line] = win
            yield th.compute(probe)
            o = (mid - line * KEYS_PER_LINE) * 8
            if key < int.from_bytes(got[line][o:o + 8].tobytes(), "little"):
                hi = mid
            else:
                lo = mid + 1
        self.n["leaf_searches"] += 1
        self.n["leaf_key_lines"] += len(got)
        pos = lo - 1
        if pos < 0:
            return False, None, "leaf"
        line = pos // KEYS_PER_LINE                                 # probed: lo only moves past a probe
        o = (pos - line * KEYS_PER_LINE) * 8
        if int.from_bytes(got[line][o:o + 8].tobytes(), "little") != key:
            return False, None, "leaf"
        slot, dma = self._dma_read(meta.values_addr + pos * g.slot, g.slot)
        yield dma
        return True, g.decode(slot.tobytes()), "leaf"

    # --- operations ---------------------------------------------------------------------------------

    def _get(self, req: W.Request):
        self.n["gets"] += 1
        if self.cache is not None and req.hints is None:
            self.n["bypasses"] += 1                     # neither read nor filled: another owner's key
        if self.cache is not None and req.hints is not None:
            hit = yield from self.cache.probe(self.th, req.hints, req.key)
            if hit is not None:
                self.n["cache_hits"] += 1
                return W.REP.pack(W.OP_GET, W.ST_OK, 0, req.rid) + hit
        leaf, _ = yield from self._descend(req.key)
        found, value, where = yield from self._leaf_lookup(leaf, req.key)
        if not found:
            return W.REP.pack(W.OP_GET, W.ST_MISSING, 0, req.rid)
        if self.cache is not None and req.hints is not None:
            yield from self.cache.admit(self.th, req.hints, req.key, value)
        return W.REP.pack(W.OP_GET, W.ST_OK, 0, req.rid) + value

    def _write(self, req: W.Request):
        self.n["writes"] += 1
        th, g, words = self.th, self.geo, self.words
        leaf, _ = yield from self._descend(req.key)
        found, _, _ = yield from self._leaf_lookup(leaf, req.key)
        if req.op == W.OP_INSERT and found:
            return W.REP.pack(req.op, W.ST_EXISTS, 0, req.rid)
        if req.op in (W.OP_UPDATE, W.OP_DELETE) and not found:
            return W.REP.pack(req.op, W.ST_MISSING, 0, req.rid)
        cw = (leaf + g.counters) // 8
        yield th.load(leaf + g.counters, 8, write=True)            # reserve: FAA
        slot = int(words[cw])
        words[cw] = slot + 1
        if slot >= L.BUFFER_SLOTS:                                  # full, a patch is pending
            return None
        if self.cache is not None and req.hints is not None:
            yield from self.cache.invalidate(self.th, req.hints, req.key)
        words[(leaf + g.keys) // 8 + slot] = req.key
        so = leaf + g.values + slot * g.slot
        data = b"" if req.op == W.OP_DELETE else g.encode(req.value)
        if len(data) > 8:
            self.mem[so + 8:so + len(data)] = np.frombuffer(data[8:], np.uint8)
        yield th.compute(self.ns["write"])
        yield th.load(so, g.slot, write=True)                       # key, then the value slot
        # the slot's first word last: it is the commit mark readers test
        words[so // 8] = L.TOMBSTONE if req.op == W.OP_DELETE else int.from_bytes(data[:8], "little")
        yield th.load(leaf + g.counters + 8, 8, write=True)        # publish: FAA
        published = int(words[cw + 1]) + 1
        words[cw + 1] = published
        if published == L.BUFFER_SLOTS:
            yield from self._push_patch(leaf)
        return W.REP.pack(req.op, W.ST_OK, 0, req.rid)

    def _push_patch(self, leaf: int):
        """The buffer is complete: one patch request, the leaf and the buffer's bytes, DMA-pushed."""
        g = self.geo
        record = struct.pack("<Q", leaf) + bytes(self.mem[leaf + g.counters:leaf + g.dpa_bytes])
        while True:
            c = self.patch_ring.device_push(self.dma, [record])
            if c.succeeded:
                self.n["patches"] += 1
                if self.on_patch is not None:
                    c.callbacks.append(lambda _ev: self.on_patch())     # once the record has landed
                return
            yield self.patch_ring.device_refresh(self.dma)          # full: learn the host's progress
            yield self.th.stall(RETRY_NS)

    def _range_search_ns(self, count: int) -> int:
        """The compute of a RANGE's start search in a leaf's key array (already DMA'd whole): the
        learned index's window scan, or the B+-tree's binary search."""
        if self.fmt.name == "btree":
            return self.ns["probe"] * max(count, 1).bit_length()
        return round(self.leaf_eps * 2 * self.scan_ns)

    def _range(self, req: W.Request):
        self.n["ranges"] += 1
        th, g = self.th, self.geo
        want = min(req.count, W.RANGE_MAX)
        out: list = []
        key = req.key
        exhausted = False
        while len(out) < want:
            leaf, fence = yield from self._descend(key, want_fence=True)
            yield th.load(leaf, LINE_BYTES)
            meta = L.read_leaf(self.mem, leaf)
            yield th.load(leaf + g.counters, g.buffer_bytes, overlap=True)
            merged = {}
            for k, v in self._buffer(leaf):
                if k >= key:
                    merged[k] = v
            yield th.compute(self.ns["buffer"])
            start = 0
            if meta.count:
                kb, dma = self._dma_read(meta.keys_addr, meta.count * 8)
                yield dma
                keys = np.frombuffer(kb.tobytes(), "<u8").tolist()
                start = bisect_right(keys, key - 1) if key else 0
                yield th.compute(self._range_search_ns(meta.count))
                need = want - len(out) + sum(1 for v in merged.values() if v is None)
                stop = min(meta.count, start + need)
                if stop > start:
                    vb, dma = self._dma_read(meta.values_addr + start * g.slot, (stop - start) * g.slot)
                    yield dma
                    raw = vb.tobytes()
                    for i, k in enumerate(keys[start:stop]):
                        if k not in merged:
                            merged[k] = g.decode(raw[i * g.slot:(i + 1) * g.slot])
                    # keys past ``stop`` are beyond what is needed, unless deletes ate into it
                    limit = keys[stop] if stop < meta.count else fence
                else:
                    limit = keys[start] if start < meta.count else fence
            else:
                limit = fence
            for k in sorted(merged):
                if limit is not None and k >= limit:
                    break
                if merged[k] is not None:
                    out.append((k, merged[k]))
                    if len(out) == want:
                        break
            if len(out) >= want:
                break
            if limit is not None and limit != fence:
                key = limit                                         # more of this leaf
            elif fence is None:
                exhausted = True
                break
            else:
                key = fence
        nxt = None
        if len(out) < req.count and not exhausted and out and out[-1][0] < (1 << 64) - 1:
            nxt = out[-1][0] + 1
        reply, _ = W.range_reply(W.OP_RANGE, req.rid, out, nxt, self.mtu)
        return reply


class PricedCache:
    """A traverser's hot-entry cache (:mod:`.hotcache`) in DPA memory, its lines priced by the
    cache model. It holds 8-byte values (the paper's): a value of another size is not admitted,
    and its GETs walk the tree."""

    def __init__(self, lay: dict, index: int, memory_words: np.ndarray, seed: int):
        from .hotcache import BUCKETS, HotCache
        base = lay["dpa_region"] + L.cache_offset(index)
        words = L.CACHE_BYTES // 8
        table = memory_words[base // 8:base // 8 + words].reshape(BUCKETS, words // BUCKETS)
        self.cache = HotCache(seed=seed, base=base, table=table)

    @staticmethod
    def _hints(hints):
        from .hotcache import CacheHints
        return CacheHints(tuple(hints[0]), hints[1])

    def _price(self, th, hints, lines: int, write: bool = False):
        if lines:
            yield th.load(self.cache.bucket_addr(hints), LINE_BYTES, write=write)
        if lines > 1:                   # a Bloom rebuild reads every bucket line
            yield th.load(self.cache.base, L.CACHE_BYTES, overlap=True)

    def probe(self, th, hints, key: int):
        h = self._hints(hints)
        p = self.cache.lookup(h, key)
        yield from self._price(th, h, p.lines)
        return p.value.to_bytes(8, "little") if p.hit else None

    def admit(self, th, hints, key: int, value: bytes):
        from .hotcache import MAX_VALUE
        if len(value) != 8:
            return
        word = int.from_bytes(value, "little")
        if word > MAX_VALUE:
            return
        h = self._hints(hints)
        yield from self._price(th, h, self.cache.admit(h, key, word), write=True)

    def invalidate(self, th, hints, key: int):
        h = self._hints(hints)
        yield from self._price(th, h, self.cache.invalidate(h, key), write=True)
