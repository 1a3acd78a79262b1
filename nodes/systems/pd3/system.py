"""``pd3``: PD3 on a rack -- clients, the host's application, its BlueField-3 DPU and a memory server.

Roles (docs/pd3.md has the sequence diagram):

* **clients** (``cl0``..: active clients) send request packets to ``cn0`` on :data:`PORT`. A client
  thread's coroutines share one packet: the first to ask opens it and sends it once the thread's
  other coroutines have had their turn at this instant (at most :data:`BATCH` requests, the Host
  View's batch), so a packet carries up to 8 keys as PD3's clients batch them (§5.2).
* the NIC of ``cn0`` steers the packet to the host's RX queue and **mirrors** a copy to ``dpu0``.
* **the DPU** (``dpu0``, 4 Arm cores as PD3 §8.1): a parser core (DPDK RX, the application's
  parser), two Host View shard cores (the batched cuckoo lookup priced by
  :mod:`.dpu_costs`, the Prefetcher's Tables 1 and 2), one Transfer Engine core
  (:mod:`.transfer`).
* **the host** (``cn0``): ``app_threads`` application threads, one core each, serving the packets
  of the application ``app`` names: the hash map (:mod:`.hashmap`; with 4 KB values, the page
  server) or the Garnet-like store (:mod:`.garnet`: RESP2, a hybrid log, one request per thread);
  with ``mode = "redy"`` one I/O thread more per application thread.
* **the memory server** (``mn0``, ``[memory] cores`` >= 1): executes batches on the records and
  keeps the key map for prefetches.

Options choose the application (``app``), the miss path (``mode``), the local cache, the Loading
Zone, the application's own work per request (``work_us``) and the sizes.
"""

from __future__ import annotations

import gc
from collections import deque
from typing import NamedTuple

import numpy as np

from nodes.actors import Cores
from nodes.systems.api import Option, System, SystemGaveUp
from shm.dmaring import DmaRing
from shm.fabric import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, gaddr
from shm.steering import SteerRule
from shm.verbs import CQ, IBV_QPT_RC, MR, PD, QP, QPInitAttr

from . import garnet
from . import hashmap as hm
from .garnet import HybridLogHost, Stages
from .client_base import HostAppClient
from .parsers import PORT, RespRequestParser
from .loading_zone import copy_ns
from .transfer import (
    INLINE, REQ_READ, REQ_WRITE, RECORD_BYTES, DmaFront, MemoryApi, MemoryServer, RedyFront,
    TransferEngine, dpu_costs, host_costs,
)

#: the artifact's hash-map server sleeps in select() with this timeout between turns of a connection's
#: loop (net_hashmap.cpp, ClientConnectionThread: ``select_timeout.tv_usec = 100``): what a Redy read
#: that lands while its thread has no request to read waits before the thread sees it
SELECT_TIMEOUT_NS = 100_000
BATCH = 8                       # keys per client packet (the Host View's batch: 64 B of keys)
SRV_QPN = (1 << 40) + 0x50443300        # lane k: QP SRV_QPN + k on both sides (no exchange needed)
MAX_BATCH = 128                 # records per Transfer Engine batch
#: data bytes one batch slot carries: the PD3 artifact's RDMA buffer per slot, 32 KiB (its Redy client
#: and memory server use the same; research brief §1b). Records of 8 B values fill MAX_BATCH long before
#: it; 4 KB pages make batches of 7, so a miss waits for 7 page copies on the server, not 128
BATCH_BYTES = 32 * 1024
SLOTS = 8


class Pd3Client(HostAppClient):
    """A client thread's handle: ops of its coroutines go out together in one packet."""

    def __init__(self, layout, thread, options):
        # a reply port per leading coroutine, so the replies of a thread's packets in flight never mix
        super().__init__(layout, thread, options)
        self.open = None                 # the packet being filled: its ops (op, key, value, event), sizes
        self.room = self.net.max_payload  # request and reply must each fit one datagram
        self.rid = 0
        self.packets = self.requests = 0
        # None: each coroutine's packets are a flow of their own, spread over the host's RX queues by
        # their hash (RSS); an int: every packet of this client thread goes to that application
        # thread's queue, as one TCP connection does to the thread the artifact's hash map serves it on
        # (net_hashmap.cpp: a thread per client connection; the latency client, cluster/experiments/pd3.py)
        self.connection: int | None = None

    def _op(self, co, op, key: bytes, value: bytes = b""):
        if len(value) > self.value_max:
            raise SystemGaveUp(f"pd3: a {len(value)} B value exceeds system.value_max = {self.value_max}")
        env = self.thread.env
        ev = env.event()
        need = (hm.OP_STRUCT.size + len(value), hm.RESULT_STRUCT.size + (self.value_max if op == hm.GET else 0))
        self.requests += 1
        pkt = self.open
        if pkt is None or len(pkt["ops"]) >= BATCH or pkt["req"] + need[0] > self.room \
                or pkt["rep"] + need[1] > self.room:
            # a new packet, led by this coroutine: it waits for the thread's other coroutines of this
            # instant to join (as far as the datagram's payload allows), then sends it
            pkt = self.open = {"ops": [], "req": hm.PACKET_STRUCT.size, "rep": hm.PACKET_STRUCT.size}
            pkt["ops"].append((op, hm.key64(key), value, ev))
            pkt["req"] += need[0]
            pkt["rep"] += need[1]
            yield env.timeout(0)
            if self.open is pkt:
                self.open = None
            yield from self._send(co, pkt["ops"])
        else:
            pkt["ops"].append((op, hm.key64(key), value, ev))
            pkt["req"] += need[0]
            pkt["rep"] += need[1]
        if not ev.triggered:
            yield ev
        if not ev.ok:
            raise ev.value
        return ev.value

    def _send(self, co, batch):
        from shm.udp import call
        sock, queue = self.endpoint(co)
        self.rid = (self.rid + 1) & 0xFFFFFFFF
        rid = self.rid
        self.packets += 1
        data = hm.encode_request(rid, [(op, k, v) for op, k, v, _e in batch])
        # the flow's RX queue on the host: a hash of the flow, as RSS (a multiplicative one of the
        # client's node and port, so a thread's coroutines spread over the host's queues)
        if self.connection is None:
            port = PORT + ((self.thread.owner.node * 40503 + sock.port) * 2654435761 >> 16) % self.app_threads
        else:
            port = PORT + self.connection % self.app_threads
        reply = yield from call(sock, self.server, port, data, queue, timeout_ns=self.timeout_ns,
                                resends=3, match=lambda dg: int.from_bytes(dg.data[:4], "little") == rid,
                                thread=self.thread)
        if reply is None:
            err = SystemGaveUp(f"pd3: no reply from {self.server} after 4 attempts of {self.timeout_ns / 1000:g} us")
            for *_x, ev in batch:
                ev.fail(err)
            return
        _rid, results = hm.decode_reply(reply.data)
        for (_op, _k, _v, ev), res in zip(batch, results):
            ev.succeed(res)

    def get(self, co, key):
        st, value = yield from self._op(co, hm.GET, key)
        return value if st == hm.S_OK else None

    def insert(self, co, key, value):
        st, _ = yield from self._op(co, hm.INSERT, key, value)
        return st == hm.S_OK

    def update(self, co, key, value):
        st, _ = yield from self._op(co, hm.UPDATE, key, value)
        return st == hm.S_OK

    def delete(self, co, key):
        st, _ = yield from self._op(co, hm.DELETE, key)
        return st == hm.S_OK


# --- the host: application threads ------------------------------------------------------------------------

class AppThread:
    """One application thread on its own core: an ``RdmaThread`` (its core, its verbs) and the
    miss path of the mode."""

    def __init__(self, app, rdma_thread, index: int):
        self.app, self.rt, self.index = app, rdma_thread, index
        self.co = rdma_thread.coroutine()
        self.pco = rdma_thread.coroutine()          # Leap's prefetch READs, never waited for together
        self.wco = rdma_thread.coroutine()          # write-backs in the background (the Garnet log's spills)
        self.env = rdma_thread.env
        self.busy_ns = 0
        self.zone_hits = 0                           # items this thread took from its Loading Zone
        self.front = None                            # Redy: this thread's I/O-thread front
        self.queue = self.sock = self.zone = None    # its RX queue, its socket, its Loading Zone
        self.leap = None
        self.leap_reads: dict = {}                   # slot -> (handle, key) of a prefetch READ

    def cpu(self, ns: int) -> None:
        if ns > 0:
            self.busy_ns += ns
            self.rt.cpu(ns)

    def acquire(self):
        """Wait until this thread's core is free: a coroutine of a busy thread runs (and looks at
        shared state, the Loading Zone) only when the core gets to it, not when its event fired."""
        wait = self.rt.cpu_free - self.env.now
        if wait > 0:
            yield self.env.timeout(int(wait))


class HostStats(NamedTuple):
    """The host application's counters (``HostApp.statistics``): what its threads did and what
    they spent. ``app_busy_ns`` and ``io_busy_ns`` are modelled core time (application threads;
    Redy's I/O threads), ``host_cores`` the cores the mode occupies."""
    app: str
    mode: str
    host_cores: int
    app_busy_ns: int
    io_busy_ns: int
    packets: int
    requests: int
    hits: int               # served from the local cache or log
    zone_hits: int          # taken from a Loading Zone (PD3)
    misses: int             # fetched by the mode's miss path
    leap_hits: int
    writebacks: int
    resent: int             # resent request packets answered from the kept reply
    malformed: int          # request packets that did not decode (hash map: dropped; RESP: an error reply)
    stages: object          # Garnet: a garnet.StageStats (Fig. 19), else None


class HostApp:
    """The host side of the system in ``cn0``'s process: the application, its threads, their paths."""

    def __init__(self, ctx, lay: dict):
        from shm.coro import NodeRdma
        o = ctx.options
        self.ctx, self.lay, self.env = ctx, lay, ctx.env
        self.mode = o["mode"]
        self.pipeline = int(o["pipeline"])
        cpu = ctx.profile.cpu
        self.cpu = cpu
        self.app = o["app"]
        self.value_max = lay["value_max"]
        store = HybridLogHost if self.app == "garnet" else hm.HashMapHost
        self.map = store(cache_items=lay["cache_items"], slot_bytes=lay["slot_bytes"], region=lay["records"],
                         mode=self.mode, cpu=cpu)
        self.stages = Stages()
        self.work_ns = round(float(o.get("work_us", 0.0)) * 1000)
        # decode, dispatch, encode: the hash map's own work beside the probe (priced by lines)
        self.request_ns = round(ctx.profile.software.request_cycles / cpu.ghz) + self.work_ns
        self.mem = lay["mem"]
        rdma = NodeRdma(ctx.host, ctx.index)
        self.threads = [AppThread(self, rdma.thread(), i) for i in range(lay["threads"])]
        fab = ctx.fabric
        self.api = None
        self.zone = None
        if self.mode in ("pd3", "pd3-noprefetch"):
            self.api = MemoryApi(ctx.env, fab, ctx.index, DmaRing.attach(fab, ctx.index, lay["req_ring"]),
                                 DmaRing.attach(fab, ctx.index, lay["resp_ring"]), lay["bufs"], lay["buf_bytes"],
                                 lay["ids"])
        self.zones = []
        if self.mode == "pd3":
            from .loading_zone import LoadingZone
            self.zones = [LoadingZone.attach(fab, ctx.index, base) for base in lay["zones"]]
            self.zone = self.zones[0]               # "PD3 prefetches" (each thread has its own)
            for t, z in zip(self.threads, self.zones):
                t.zone = z
        self.io = []
        self.io_cores = 0
        if self.mode == "redy":
            self._redy(ctx, lay)
        if self.mode == "leap":
            from .leap import Leap
            for t in self.threads:
                t.leap = Leap(cache_items=lay["leap_cache"])
        queues = {q.id: q for q in ctx.queues}
        for i, t in enumerate(self.threads):
            # each thread serves its own RX queue (the NIC spreads flows over them, RSS-like) and
            # sends on its own UD QP, as each thread of a server has its own queues
            t.queue = queues[f"{ctx.name}.a{i}"]
            t.sock = ctx.udp.socket(ctx.index, PORT + i)

    def _redy(self, ctx, lay):
        pd = PD(ctx.verbs())
        w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
        # Redy's I/O threads get the host's cores the application threads leave: the host CPU has
        # [coherence] ccds x cores_per_ccd of them (EPYC 9254: 24, PD3 §8.1); past that, I/O threads
        # share cores (round robin), as an oversubscribed host would run them
        c = ctx.profile.coherence
        total = c.ccds * c.cores_per_ccd if c is not None else 2 * len(self.threads)
        n_io = max(1, min(len(self.threads), total - len(self.threads)))
        io_cores = [Cores(ctx.env, 1, self.cpu.ghz) for _ in range(n_io)]
        self.io_cores = n_io
        for i, t in enumerate(self.threads):
            front = RedyFront(ctx.env, self.cpu.local_cas_ns)
            cq = CQ(ctx.verbs(), 4 * SLOTS + 16)
            qp = QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq), qp_num=SRV_QPN + 1 + i)
            qp.connect((lay["mem"], SRV_QPN + 1 + i))
            base = lay["redy_bufs"] + i * 2 * lay["lane_bytes"]
            te = TransferEngine(ctx.env, io_cores[i % n_io], front, qp=qp, cq=cq,
                                unified=MR(pd, lay["lane_bytes"], offset=base),
                                resp_space=MR(pd, lay["lane_bytes"], w, offset=base + lay["lane_bytes"]),
                                remote_req=(gaddr(lay["mem"], lay["lanes"][1 + i][0]), ctx.fabric.exposed_key(lay["mem"])),
                                costs=host_costs(self.cpu), max_batch=lay["max_batch"], slots=SLOTS,
                                slot_bytes=lay["slot_area"], name=f"redy-io{i}")
            te.post_receives()
            t.front = front
            self.io.append(te)

    def statistics(self) -> HostStats:
        n = self.map.n
        return HostStats(self.app, self.mode, len(self.threads) + self.io_cores,
                         sum(t.busy_ns for t in self.threads), sum(te.busy_ns for te in self.io),
                         n["packets"], n["requests"], n["hits"], n["zone_hits"], n["misses"], n["leap_hits"],
                         n["writebacks"], n["resent"], n["malformed"],
                         self.stages.statistics() if self.app == "garnet" else None)

    def actors(self) -> list:
        # an application thread keeps ``pipeline`` requests packets in progress (its coroutines,
        # sharing its core): a miss waits without holding up the next packet; sync RDMA and Leap
        # block the thread on each READ (one at a time, by design)
        # Garnet allows one request active on a thread (PD3 §8.2), whatever the miss path
        depth = 1 if self.mode in ("sync", "leap") or self.app == "garnet" else self.pipeline
        gens = [self.serve(t) for t in self.threads for _ in range(depth)]
        gens += [te.run(self.ctx.stopped) for te in self.io]
        return gens

    # -- serving ----------------------------------------------------------------------------
    def serve(self, t: AppThread):
        q = t.queue
        while True:
            if not len(q):
                yield q.wait()
                continue
            yield from t.acquire()
            dg = q.poll()
            if dg is None:
                continue
            if self.app == "garnet":
                yield from garnet.serve(self, t, dg)
            else:
                yield from self.packet(t, dg)

    def packet(self, t: AppThread, dg):
        m = self.map
        m.n["packets"] += 1
        who = (dg.src_node, dg.src_port)
        try:
            rid, ops = hm.decode_request(dg.data)
        except ValueError:
            # a malformed packet: counted and dropped (the client resends or gives up), the thread
            # keeps serving; with no request id there is nobody to answer
            m.n["malformed"] += 1
            return
        kept = m.replies.get(who)
        if kept is not None and kept[0] == rid:
            m.n["resent"] += 1
            if kept[1] is not None:
                t.sock.send(dg.src_node, dg.src_port, kept[1], thread=t.rt)
            return
        m.replies[who] = (rid, None)
        t.cpu(self.request_ns * len(ops))
        results = [None] * len(ops)
        misses = []
        evicted = []
        for i, (op, key, value) in enumerate(ops):
            m.n["requests"] += 1
            t.cpu(m.probe_ns())
            while key in m.fetching:                       # another thread is bringing it in
                yield m.fetching[key]
            if op == hm.GET:
                if key not in m.live:
                    results[i] = (hm.S_MISSING, b"")
                elif m.touch(key):
                    m.n["hits"] += 1
                    if self.zone is not None:              # any prefetch of it so far is of no use
                        m.floor[key] = max(m.floor.get(key, 0), (self.api.seen + 1) & 0xFFFFFFFF)
                    v = m.cache[key]
                    results[i] = (hm.S_OK, v) if v is not None else (hm.S_MISSING, b"")
                elif key in m.flushing:
                    m.n["hits"] += 1
                    results[i] = (hm.S_OK, m.flushing[key])
                else:
                    misses.append(i)
            elif op == hm.INSERT:
                if key in m.live:
                    results[i] = (hm.S_EXISTS, b"")
                else:
                    m.live.add(key)
                    m.new_slot(key)
                    evicted += m.write(key, value)
                    results[i] = (hm.S_OK, b"")
            elif op == hm.UPDATE:
                if key not in m.live:
                    results[i] = (hm.S_MISSING, b"")
                else:
                    evicted += m.write(key, value)
                    results[i] = (hm.S_OK, b"")
            else:                                          # DELETE: a tombstone, written back in time
                if key not in m.live:
                    results[i] = (hm.S_MISSING, b"")
                else:
                    m.live.discard(key)
                    evicted += m.write(key, None)
                    results[i] = (hm.S_OK, b"")
        if m.dropped:
            yield from self.announce(t)                    # at once: the DPU must not trust a stale view
        if misses:
            got = yield from self.fetch(t, [ops[i][1] for i in misses])
            for i, v in zip(misses, got):
                results[i] = (hm.S_OK, v) if v is not None else (hm.S_MISSING, b"")
        if evicted:
            yield from self.write_back(t, evicted)
        yield from self.announce(t)
        # the reply carries each value: a value longer than the line the probe read is copied
        # into the packet from the cache, streamed (a 4 KB page: ~0.4 us; an 8 B value: nothing)
        t.cpu(sum(copy_ns(self.ctx.profile, len(r[1]), first="cached") - copy_ns(self.ctx.profile, 1, first="cached")
                  for r in results if r is not None and len(r[1]) > 64))
        reply = hm.encode_reply(rid, results)
        m.replies[who] = (rid, reply)
        t.sock.send(dg.src_node, dg.src_port, reply, thread=t.rt)

    # -- the miss path ------------------------------------------------------------------------
    def fetch(self, t: AppThread, keys):
        """The values of ``keys`` (live, not cached), by the mode's path; each installed."""
        m = self.map
        out = [None] * len(keys)
        while True:                                        # another thread is bringing one in: its
            busy = next((k for k in keys if k in m.fetching), None)    # result will be in the cache
            if busy is None:                               # (checked again after every wait, and no
                break                                      # wait between this and taking ours below)
            yield m.fetching[busy]
        known = {}                                         # keys cached or flushing by now
        evs = {}
        for key in keys:
            if key in known or key in evs:                 # a duplicate in this packet
                continue
            if key in m.cache:
                known[key] = m.cache[key]
            elif key in m.flushing:
                known[key] = m.flushing[key]
            elif key not in m.live:
                known[key] = None
            else:
                evs[key] = m.fetching[key] = self.env.event()
        gens = {k: m.gen.get(k, 0) for k in evs}
        got: dict = {}
        need = []
        if self.zone is not None:                          # PD3: CheckAndReturn before the miss path
            yield from t.acquire()
            for key in evs:
                data = t.zone.check_and_return(t, key, floor=m.floor, pending=m.reading)
                if data is not None and len(data) >= hm.REC_HEADER and hm.RECORD_STRUCT.unpack_from(data)[0] == key:
                    got[key] = data
                    m.n["zone_hits"] += 1
                    t.zone_hits += 1
                else:
                    need.append(key)
        else:
            need = list(evs)
        m.n["misses"] += len(need)
        if need:
            fetched = yield from self.read_records(t, need)
            got.update(fetched)
            yield from t.acquire()
        evicted = []
        for key, ev in evs.items():
            data = got.get(key)
            value = None
            if data is not None:
                k2, ln, live = hm.RECORD_STRUCT.unpack_from(data)
                value = bytes(data[hm.REC_HEADER:hm.REC_HEADER + ln]) if live else None
            if m.gen.get(key, 0) == gens[key] and key not in m.cache and key not in m.flushing:
                evicted += m.install(key, value, dirty=False)
            got[key] = value
            del m.fetching[key]
            ev.succeed()
        for j, key in enumerate(keys):
            out[j] = known[key] if key in known else got.get(key)
        if m.dropped:
            yield from self.announce(t)
        if evicted:
            yield from self.write_back(t, evicted)
        return out

    def announce(self, t: AppThread):
        """PD3: tell the DPU which clean records left the cache (batched notices, not answered)."""
        m = self.map
        keys = [k for k in m.dropped if k not in m.cache and k not in m.flushing]
        m.dropped.clear()
        if keys:
            yield from self.api.evicted(t, keys)

    def read_records(self, t: AppThread, keys):
        m = self.map
        size = {k: hm.REC_HEADER + m.slot_bytes - hm.REC_HEADER for k in keys}
        out = {}
        if self.mode in ("sync", "leap"):
            for key in keys:
                s = m.slot[key]
                if t.leap is not None:
                    acc = t.leap.access(s)
                    h = t.leap_reads.pop(s, None)
                    if acc.hit and h is not None and h[1] == key and m.gen.get(key, 0) == h[2]:
                        if h[0].status == -1:
                            yield t.pco.sync()
                        t.cpu(copy_ns(self.ctx.profile, size[key]))
                        out[key] = h[0].data.tobytes()
                        m.n["leap_hits"] += 1
                        self._leap_prefetch(t, acc.prefetch)
                        continue
                    self._leap_prefetch(t, acc.prefetch)
                h = t.co.read(gaddr(self.mem, m.addr(key)), size[key])
                yield t.co.sync()
                t.cpu(copy_ns(self.ctx.profile, size[key]))      # the record the READ just wrote
                out[key] = h.data.tobytes()
            return out
        if self.mode == "redy":
            rids = []
            for key in keys:
                rid = self._rid(t)
                t.front.submit(_req(REQ_READ, rid, m.addr(key), size[key], key), None)
                rids.append((rid, key))
            t.cpu(self.cpu.local_cas_ns * len(keys))
            res = yield from self._redy_wait(t, [r for r, _k in rids], turns=self.app == "hashmap")
            for (rid, key), c in zip(rids, res):
                out[key] = c.data
            return out
        rids = []
        if self.zone is not None:
            m.reading.update(keys)                         # a prefetch of these arriving now is too late
        for key in keys:
            rid = yield from self.api.post(t, REQ_READ, m.addr(key), size[key], key)
            rids.append(rid)
        res = yield from self.api.wait(t, rids)
        for key, c in zip(keys, res):
            out[key] = c.data
            if self.zone is not None:                      # and so is one fetched in this batch or before
                m.floor[key] = max(m.floor.get(key, 0), (c.seq + 1) & 0xFFFFFFFF)
                m.reading.discard(key)
        return out

    def _leap_prefetch(self, t: AppThread, slots) -> None:
        m = self.map
        for s in slots:
            key = m.slot_key(s)
            if key is None or s in t.leap_reads:
                continue
            h = t.pco.read(gaddr(self.mem, m.region + s * m.slot_bytes), m.slot_bytes)
            t.leap_reads[s] = (h, key, m.gen.get(key, 0))
        if slots:
            t.pco.post()

    def _rid(self, t: AppThread) -> int:
        t.next_rid = (getattr(t, "next_rid", 0) + 1) & 0xFFFF
        return t.next_rid

    def _redy_wait(self, t: AppThread, rids, *, turns: bool = False):
        """The completions of ``rids`` from the thread's Redy I/O thread. ``turns``: the hash map's
        reads, as the artifact's server takes them (``net_hashmap.cpp``, ``ClientConnectionThread``):
        a connection's thread moves finished remote reads into its send buffer only at the top of
        its loop, and between turns it sleeps in ``select()`` until a request arrives or its
        :data:`SELECT_TIMEOUT_NS` pass; the completions landing do not wake it. A thread with
        requests waiting turns at once (its socket is readable)."""
        f = t.front
        while not all(r in f.results for r in rids):
            if turns and not len(t.queue):
                yield t.queue.wait(SELECT_TIMEOUT_NS)
                continue
            if f.arrived.triggered:
                f.arrived = self.env.event()
                continue
            yield f.arrived
        out = [f.results.pop(r) for r in rids]
        t.cpu(sum(copy_ns(self.ctx.profile, max(1, len(c.data))) for c in out))    # a write's: its completion line
        return out

    def write_back(self, t: AppThread, evicted, *, background: bool = False):
        """Write dirty records back; each stays *flushing* until acknowledged, then gets its fence.
        ``background``: run beside the thread's requests (its own coroutine for the sync paths)."""
        m = self.map
        m.n["writebacks"] += len(evicted)
        recs = [(k, v, hm.encode_record(k, v)) for k, v in evicted]
        if self.mode in ("sync", "leap"):
            co = t.wco if background else t.co
            for k, v, rec in recs:
                co.write(gaddr(self.mem, m.addr(k)), rec)
            yield co.sync()
            seqs = [0] * len(recs)
        elif self.mode == "redy":
            rids = []
            for k, v, rec in recs:
                rid = self._rid(t)
                t.front.submit(_req(REQ_WRITE, rid, m.addr(k), len(rec), k, rec), rec if len(rec) > INLINE else None)
                rids.append(rid)
            t.cpu(self.cpu.local_cas_ns * len(recs))
            res = yield from self._redy_wait(t, rids)
            seqs = [c.seq for c in res]
        else:
            rids = []
            for k, v, rec in recs:
                rid = yield from self.api.post(t, REQ_WRITE, m.addr(k), len(rec), k, rec)
                rids.append(rid)
            res = yield from self.api.wait(t, rids)
            seqs = [c.seq for c in res]
        for (k, v, _rec), seq in zip(recs, seqs):
            if m.flushing.get(k, object()) is v:
                del m.flushing[k]
            if self.zone is not None:
                m.floor[k] = max(m.floor.get(k, 0), seq & 0xFFFFFFFF)


def _req(op, rid, addr, size, key, data=b""):
    from .transfer import encode_request
    return encode_request(op, rid, addr, size, key, data if len(data) <= INLINE else b"", 0)


# --- the DPU: parser, Host View shards, Transfer Engine ----------------------------------------------------

#: packets one RX poll of the parser takes at most: DPDK's customary burst (rte_eth_rx_burst with
#: MAX_PKT_BURST 32 in its sample applications)
RX_BURST = 32


class DpuSide:
    """The DPU's actors in its process: the parser core, the Host View shard cores, the TE core."""

    def __init__(self, ctx, lay: dict):
        from .dpu_costs import price_lookup
        from .host_view import HostView, Lookup
        from .loading_zone import LoadingZone
        from .prefetcher import Prefetcher
        o = ctx.options
        self.ctx, self.env = ctx, ctx.env
        dpu = ctx.profile.dpu
        self.dpu = dpu
        self.prefetching = o["mode"] == "pd3"
        self.parse_cores = Cores(ctx.env, 1, dpu.ghz)
        # the parser core's work (PD3's parser is a DPDK program on one Arm core): per packet (a DPDK
        # RX burst's share, the mirror's mbuf, the flow check) and per key parsed; profile assumptions
        self.parse_packet_cycles, self.parse_key_cycles = dpu.parse_packet_cycles, dpu.parse_key_cycles
        self.shard_cores = [Cores(ctx.env, 1, dpu.ghz) for _ in range(2)]
        self.host_view = HostView(lay["hv_buckets"], 2)
        # Table 1: keys the host reads from remote memory are added (the artifact's config leaves that
        # to the application; the hash map caches what it reads, so it is reflected here)
        # (the Garnet-like store does not keep what it reads remotely: garnet.py)
        self.prefetcher = Prefetcher(self.host_view, add_on_client_write=True,
                                     add_on_remote_read=o["app"] != "garnet")
        self.parser = RespRequestParser() if o["app"] == "garnet" else hm.PacketParser()
        self.price, self.mode = price_lookup, Lookup.DELAYED
        fab = ctx.fabric
        pd = PD(ctx.verbs())
        cq = CQ(ctx.verbs(), 4 * SLOTS + 16)
        qp = QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq), qp_num=SRV_QPN)
        qp.connect((lay["mem"], SRV_QPN))
        w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
        host = lay["host"]
        front = DmaFront(ctx.dma, DmaRing.attach(fab, host, lay["req_ring"]), DmaRing.attach(fab, host, lay["resp_ring"]),
                         host, lay["bufs"], lay["buf_bytes"])
        zones = [LoadingZone.attach(fab, host, base) for base in lay["zones"]] if self.prefetching else []
        self.te = TransferEngine(ctx.env, Cores(ctx.env, 1, dpu.ghz), front, qp=qp, cq=cq,
                                 unified=MR(pd, lay["lane_bytes"], offset=lay["unified"]),
                                 resp_space=MR(pd, lay["lane_bytes"], w, offset=lay["resp_space"]),
                                 remote_req=(gaddr(lay["mem"], lay["lanes"][0][0]), fab.exposed_key(lay["mem"])),
                                 costs=dpu_costs(dpu), max_batch=lay["max_batch"], slots=SLOTS, slot_bytes=lay["slot_area"],
                                 prefetcher=self.prefetcher if self.prefetching else None, zones=zones,
                                 engine=ctx.dma)
        self.te.post_receives()
        app = ctx.directory.get("pd3.host")
        if app is not None and app.api is not None:     # co-located: the host library rings the TE
            front.doorbell(ctx.env)
            app.api.front = front
            front.landed = app.api.landed
        self.rx = next(q for q in ctx.queues if q.id == f"{ctx.name}.rx")
        self.shard_q = [deque() for _ in range(2)]
        self.shard_wake = [ctx.env.event() for _ in range(2)]
        self.parse_busy = 0

    def actors(self) -> list:
        out = [self.te.run(self.ctx.stopped)]
        if self.prefetching:
            out += [self.parse()] + [self.shard(i) for i in range(2)]
        return out

    def parse(self):
        """The parser core: each mirrored packet's keys, in order, to the Host View shard of each."""
        cyc = self.parse_cores.cycles_ns
        while True:
            if not len(self.rx):
                yield self.rx.wait()
                continue
            # a DPDK RX burst: one poll for what the ring holds (up to RX_BURST packets)
            for dg in self.rx.poll_burst(RX_BURST):
                keys_ops = self.parser.parse(dg.data)
                self.parse_cores.charge(cyc(self.parse_packet_cycles + self.parse_key_cycles * len(keys_ops)))
                if not keys_ops:
                    continue
                # a packet's keys go to the shard of each; the packet's RX queue (its port, as the NIC
                # steered it) names the thread, hence the zone
                zone = dg.dst_port - PORT
                part = [[], []]
                route = self.host_view.route([k for k, _op in keys_ops])
                for (k, op), s in zip(keys_ops, route):
                    part[int(s)].append((k, op))
                for s in (0, 1):
                    if part[s]:
                        self.shard_q[s].append((part[s], zone, 0))     # (keys and ops, zone, keys looked up)
                        if not self.shard_wake[s].triggered:
                            self.shard_wake[s].succeed()
                yield self.env.timeout(0)

    def shard(self, s: int):
        """A Host View shard core: the batched lookup (priced), the Prefetcher's rules, keys to the TE."""
        q = self.shard_q[s]
        cores = self.shard_cores[s]
        shard = self.host_view.shards[s]
        while True:
            if not q:
                if self.shard_wake[s].triggered:
                    self.shard_wake[s] = self.env.event()
                yield self.shard_wake[s]
                continue
            # one lookup batch of BATCH keys taken off the shard's queue (the artifact's find_batched
            # takes 8 keys, not whole packets): a packet's keys may span two batches, and its
            # prefetch decisions are taken once all of them were looked up. A backlog fills batches
            work, reads = [], []
            while q and len(reads) < BATCH:
                batch, zone, done = q[0]
                keys = [k for k, op in batch if op != hm.P_WRITE]
                take = keys[done:done + BATCH - len(reads)]
                reads += take
                if done + len(take) >= len(keys):
                    q.popleft()
                    work.append((batch, zone))
                else:
                    q[0] = (batch, zone, done + len(take))
            if reads:
                found, cost = shard.find_batched(reads, self.mode)
                cores.charge(round(self.price(cost, len(reads), int(found.sum()), self.mode, self.dpu).total_ns))
            for batch, zone in work:
                keys = self.prefetcher.on_client_request(batch)
                if keys:
                    self.te.prefetch(keys, zone)
            yield self.env.timeout(0)


# --- the memory server --------------------------------------------------------------------------------------

def memory_server(ctx):
    lay = ctx.layout
    if ctx.index != lay["mem"]:
        return []
    from .parsers import KeyDirectory
    pd = PD(ctx.verbs())
    region = MR(pd, lay["records_bytes"], offset=lay["records"])
    srv = MemoryServer(ctx.env, ctx.cores, region=region, cpu_profile=ctx.profile.cpu,
                       record_cycles=ctx.profile.software.server_record_cycles,
                       copy_gbps=ctx.profile.software.core_stream_gbps,
                       directory=KeyDirectory() if ctx.options["mode"] == "pd3" else None, parse=hm.record_key)
    w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    for k, (req, staging, peer) in enumerate(lay["lanes"]):
        if peer is None:
            continue
        cq = CQ(ctx.verbs(), 4 * SLOTS + 16)
        qp = QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq), qp_num=SRV_QPN + k)
        qp.connect((peer[0], SRV_QPN + k))
        srv.add_lane(qp, cq, MR(pd, lay["lane_bytes"], w, offset=req), MR(pd, lay["lane_bytes"], offset=staging),
                     (gaddr(peer[0], peer[1]), ctx.fabric.exposed_key(peer[0])), slots=SLOTS,
                     slot_bytes=lay["slot_area"], max_batch=lay["max_batch"])
    ctx.directory["pd3.server"] = srv
    return srv.runs()


def host_server(ctx):
    lay = ctx.layout
    if ctx.index != lay["host"]:
        return []
    app = HostApp(ctx, lay)
    ctx.directory["pd3.host"] = app
    return app.actors()


def dpu_server(ctx):
    lay = ctx.layout
    if ctx.index != lay["dpu"] or ctx.options["mode"] not in ("pd3", "pd3-noprefetch"):
        return []
    side = DpuSide(ctx, lay)
    ctx.directory["pd3.dpu"] = side
    return side.actors()


class Pd3System(System):
    name = "pd3"
    description = ("PD3: a hash map (or a Garnet-like RESP store) on a host whose records live on a memory "
                   "server; the BlueField-3 DPU "
                   "sees mirrored requests, predicts misses with its Host View and prefetches into the "
                   "host's Loading Zone (modes: the baselines sync RDMA, Leap, Redy, and all-local)")
    paper = "Sankhe, Zhang, Chonee, Lim, Hu, Li, Zhang: PD3: Prefetching Data with DPUs for Disaggregated Memory"
    roles = ("compute", "memory", "client", "dpu")
    client_role = "client"
    options = (
        Option("mode", "pd3", "the miss path", choices=hm.MODES),
        Option("app", "hashmap", "the host application: the hash map (its packets; with 4 KB values, the page "
               "server) or the Garnet-like store (RESP2, a hybrid log, one request per thread)",
               choices=("hashmap", "garnet")),
        Option("cache_fraction", 0.0625, "local cache, as a fraction of the records (PD3: 1 GB local of 16 GB)",
               minimum=0.0, maximum=1.0),
        Option("value_max", 1000, "largest value in bytes (4096: the page server's pages)", minimum=8, maximum=65536),
        Option("zone_kib", 1024, "each application thread's Loading Zone, in KiB", minimum=1, maximum=1 << 20),
        Option("app_threads", 8, "the host's application threads (a core each)", minimum=1, maximum=64),
        Option("pipeline", 8, "packets an application thread has in progress at once (its coroutines); "
               "sync and leap block on each miss, so 1 for them", minimum=1, maximum=64),
        Option("work_us", 0.0, "the application's own work per request beyond the modelled data path, in "
               "host-core us, done before it looks for the record (the page server's page handling; 0 for "
               "the hash map)", minimum=0.0, maximum=1e4),
        Option("timeout_us", 500.0, "a client's wait for a reply before it resends (virtual us)",
               minimum=1.0, maximum=1e6),
    )
    servers = {"memory": memory_server, "compute": host_server, "dpu": dpu_server}
    rack_tables = {"rack": {"profile": "bf3"}, "dpu": {"hosts": ["cn0"], "cores": 4},
                   "memory": {"cores": 1}, "client": {"count": 1}}

    @classmethod
    def steering(cls, spec):
        if not spec.dpu.hosts:
            return []
        host = spec.dpu.hosts[0]
        threads = int(spec.system.options.get("app_threads", 8))
        return [SteerRule(PORT, host, port_hi=PORT + threads - 1, mirror="dpu0", spread="port", node=host)]

    @classmethod
    def rx_queues(cls, spec, node):
        """The host has an RX queue per application thread (``cn0.a0``..), port ``PORT + i`` to
        queue ``i``; other nodes keep their default."""
        if not spec.dpu.hosts or node != spec.dpu.hosts[0]:
            return None
        return [f"{node}.a{i}" for i in range(int(spec.system.options.get("app_threads", 8)))]

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        return 0

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        names = [n.name for n in fabric.nodes]
        if "dpu0" not in names:
            raise SystemGaveUp("pd3 needs a DPU on the host: give the rack dpu.hosts = [\"cn0\"] and rack.profile = \"bf3\"")
        idx = fabric.node_index
        host, dpu, mem = idx("cn0"), idx("dpu0"), idx(memory_nodes[0] if memory_nodes else "mn0")
        threads = int(options["app_threads"])
        value_max = int(options["value_max"])
        slot_bytes = -(-(hm.REC_HEADER + value_max) // 8) * 8
        slots = int(capacity * 1.25) + 64
        records = fabric.allocate(mem, slots * slot_bytes, align=64)
        cache_items = max(16, int(capacity * options["cache_fraction"])) if options["mode"] != "local" else slots
        # a batch slot: the records, then up to max_batch records' data
        max_batch = max(1, min(MAX_BATCH, BATCH_BYTES // (slot_bytes + 8)))
        slot_area = max_batch * RECORD_BYTES + max_batch * (slot_bytes + 8)
        lane_bytes = SLOTS * slot_area
        fabric.expose(dpu)
        fabric.expose(host)
        lanes = []
        mode = options["mode"]
        unified = resp_space = None
        if mode in ("pd3", "pd3-noprefetch"):
            unified = fabric.allocate(dpu, lane_bytes, align=64)
            resp_space = fabric.allocate(dpu, lane_bytes, align=64)
            lanes.append((fabric.allocate(mem, lane_bytes, align=64), fabric.allocate(mem, lane_bytes, align=64),
                          (dpu, resp_space)))
        else:
            lanes.append((0, 0, None))
        redy_bufs = None
        if mode == "redy":
            redy_bufs = fabric.allocate(host, threads * 2 * lane_bytes, align=64)
            for i in range(threads):
                lanes.append((fabric.allocate(mem, lane_bytes, align=64), fabric.allocate(mem, lane_bytes, align=64),
                              (host, redy_bufs + i * 2 * lane_bytes + lane_bytes)))
        ids = 1024
        from .loading_zone import LoadingZone
        lay = {
            "host": host, "dpu": dpu, "mem": mem, "host_name": "cn0", "threads": threads,
            "value_max": value_max, "slot_bytes": slot_bytes, "records": records, "records_bytes": slots * slot_bytes,
            "cache_items": cache_items, "slot_area": slot_area, "max_batch": max_batch, "lane_bytes": lane_bytes, "lanes": lanes,
            "unified": unified, "resp_space": resp_space, "redy_bufs": redy_bufs, "ids": ids,
            "req_ring": DmaRing.layout(fabric, host, 1024, RECORD_BYTES).base,
            "resp_ring": DmaRing.layout(fabric, host, 1024, RECORD_BYTES).base,
            "bufs": fabric.allocate(host, ids * slot_bytes, align=64), "buf_bytes": slot_bytes,
            "zones": [LoadingZone.layout(fabric, host, int(options["zone_kib"]) << 10).base for _ in range(threads)]
            if mode == "pd3" else [],
            "hv_buckets": 1 << max(4, (max(16, cache_items) * 2 // 4 // 2).bit_length()),
            "leap_cache": max(64, cache_items // 16),
        }
        return lay

    @classmethod
    def client(cls, fabric, layout, thread, options):
        if options["app"] == "garnet":
            return garnet.GarnetClient(layout, thread, options)
        return Pd3Client(layout, thread, options)


def preload(directory: dict, fabric, keys, value: bytes, *, rng, hottest_first: bool = False) -> None:
    """Set up a loaded hash map at virtual time 0, as if ``keys`` (u64) had been inserted and written
    back long ago: records in the memory node, the host's pinned metadata, the server's key map, a
    cache of a random ``cache_items`` of them (clean), and the Host View knowing those. For the
    experiments (a load through the clients takes as long as the run); one process (co-located).
    ``hottest_first``: ``keys`` are in order of popularity (a Zipfian run) and the cache starts
    with the most popular, as a warm LRU would hold them.

    Each step takes the whole key set at once (slots, records, key map, cache, Host View), with the
    state a key-by-key load (``new_slot``, ``encode_record``, ``apply``, ``load_cached``,
    ``insert``) leaves: 10^5..10^6 keys per experiment point, where a Python call per key and step
    took longer than the point's run."""
    app = directory["pd3.host"]
    m = app.map
    mem = fabric.memory[app.mem].host
    srv = directory.get("pd3.server")
    words = np.asarray(keys, dtype=np.uint64) if isinstance(keys, np.ndarray) else \
        np.array(list(keys), dtype=np.uint64)
    ints = words.tolist()
    # The steps build ~10^6 objects that live as long as the rack (a KeyLocation per key, the maps'
    # tables) and none of them garbage: the cyclic collector, run every few hundred allocations,
    # would go over them again and again while they are built (about two thirds of the preload's
    # time). Paused meanwhile; no cycle is made, so it has nothing to miss.
    collecting = gc.isenabled()
    gc.disable()
    try:
        m.live.update(ints)
        slots = np.array(m.new_slots(ints), dtype=np.int64)
        hm.write_records(mem, m.region, m.slot_bytes, slots, words, value)
        if srv is not None and srv.directory is not None:
            srv.directory.apply_writes(words, 0, m.region + slots * m.slot_bytes, hm.REC_HEADER + len(value))
        n = min(m.cache_items, len(ints))
        if hottest_first:           # a skewed load: ``keys`` by popularity; a warm LRU holds the hottest
            cached = words[:n]
        else:
            cached = words[rng.choice(len(ints), n, replace=False)] if n < len(ints) else words
        m.load_cached_records(cached.tolist(), value)
    finally:
        if collecting:
            gc.enable()
    dpu = directory.get("pd3.dpu")
    if dpu is not None:
        dpu.host_view.insert_all(cached)
