"""PD3's memory API and its Transfer Engine, with variable-size data and prefetches; Redy's I/O thread.

The host library of PD3 (§6.1) gives application threads ``Read``/``Write`` of remote regions and
``Poll`` for their completions; requests go into one lockless host request ring that all threads
share, responses come back in a host response ring, and no host core moves data: one Arm core of
the DPU, the *Transfer Engine* (TE), does it all. This module is that path, end to end:

* **records.** A ring record is 64 B (:mod:`shm.dmaring`: 56 B of payload and a state word). A
  request's payload: ``op u8 | 0 | id u16 | size u32 | addr u64 | key u64 | buf u64 | inline 24 B``
  (PD3 packs the header into 12 B; here the fields are aligned and the key the app already knows
  rides along, so the TE can keep the Host View current without parsing the data). Data up to
  :data:`INLINE` bytes travels in the record; larger write data is read, and larger read data
  written, by DMA at the host buffer ``buf`` the thread names (PD3 carries write data right after
  the header; a separate buffer keeps ring slots fixed-size). A response: ``op | status | id |
  size | seq u64 | key u64 | inline 32 B``; ``seq`` names the TE batch that carried the request,
  which the host uses as a fence (below).
* **the TE loop** (:class:`TransferEngine`, PD3's steps): ① one DMA poll of the host request ring
  (and one scatter-gather DMA read of the large write data it names); the write keys leave the
  Host View (Table 2's flush row, *after* ① and before any prefetch is appended); queued prefetch
  keys are appended as ``PREFETCH`` records; ② response space is reserved; ③ the batch (records,
  then write data) goes to the memory server as one RDMA WRITE plus a zero-length SEND whose
  immediate data names the slot (the emulator has no WRITE_WITH_IMM; RC order makes the SEND land
  after the WRITE, as WRITE_WITH_IMM would). ④ When the server's responses land in the response
  space: large read data and the response records go to the host by DMA, prefetched items into
  the Loading Zone (stamped with the batch ``seq``), and the Prefetcher is told which prefetches
  returned (Table 1's prefetch row, before the DMA write).
* **the memory server** (:class:`MemoryServer`): one core executing each batch in order -- READ
  copies from its region, WRITE copies into it and runs the application's parser over the written
  data to keep the key -> address map (:class:`~.parsers.KeyDirectory`), PREFETCH answers from that
  map -- then RDMA-WRITEs records and data back, plus a SEND. Batches of one TE are executed in
  the order sent (one QP, one core), and within a batch the host's requests precede the appended
  prefetches, so a prefetch never overtakes a write-back sent before it: that, with the flush row
  of Table 2, is PD3's read-after-write rule.
* **Redy** (:class:`RedyFront`): the same engine with a host front instead of DMA rings. Each
  application thread has an I/O thread on a host core of its own (Redy's default, which doubles
  host core use); the app thread hands requests over an SPSC queue (a local store and CAS), the
  I/O thread batches them, RDMA-WRITEs from host memory, and hands results back. Same server.

**The fence.** A prefetched item read from remote memory before the host's last write-back of that
key landed is older than the host's data. Every write-back's response carries its batch ``seq``;
the host keeps the key's fence at that ``seq`` and asks the Loading Zone only for items fetched in
that batch or later (``LoadingZone.check_and_return(..., fresh_from=fence)``). PD3's paper relies on
Table 2 alone, which stops new prefetches but not an older item still unconsumed in the zone; the
fence closes that hole (the test that fails without it is in tests/test_pd3_system.py).

Costs: the TE's and the parser's work is charged to their Arm cores with the ``[dpu]`` constants
(``poll_ns``, ``post_ns``, ``record_ns``) as :mod:`nodes.services.dpu_forwarder`; the server's
with ``cpu.rpc_handler_ns`` per batch and ``software.server_record_cycles`` per record plus its copy at
``software.core_stream_gbps`` (an assumption; only pages make it matter); host threads pay the rings' local loads and CAS (:mod:`shm.dmaring`).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import NamedTuple

import numpy as np

from nodes.actors import Cores
from shm.sim.env import any_of
from nodes.services.dpu_forwarder import BatchActor, batch_imm, batch_of_imm
from shm.dmaring import RING_FULL, DmaRing
from shm.fabric import gaddr
from shm.verbs import (
    IBV_SEND_SIGNALED, IBV_WC_RECV, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE, IBV_WR_SEND, MR, SGE, RecvWR, SendWR,
    wc_status_str,
)

from .loading_zone import copy_ns

RECORD_BYTES = 64
INLINE = 24                     # request data bytes carried in the record
RESP_INLINE = 32                # response data bytes carried in the record
REQ_READ, REQ_WRITE, REQ_PREFETCH = 1, 2, 3
ST_OK, ST_MISSING, ST_BAD = 0, 1, 2
NO_KEY = (1 << 64) - 1
_REQ = struct.Struct("<BBHIQQQ")        # op, 0, id, size, addr, key, buf (32 B) + inline
_RESP = struct.Struct("<BBHIQQ")        # op, status, id, size, seq, key (24 B) + inline
#: after the rack's plan is over, a busy-polling Transfer Engine (a rack of processes) stops once
#: the host has sent nothing for this long: requests of clients still waiting get served first
STOP_GRACE_NS = 2_000_000
#: state words one clean of the Loading Zone reads at most (one DMA read of 2 KB)
CLEAN_ITEMS = 256


class Completion(NamedTuple):
    op: int
    status: int
    id: int
    size: int
    seq: int
    key: int
    data: bytes


OP_EVICT = 4                    # a notice of clean records the host dropped: n u8 | 0 | keys (up to 6)
EVICT_KEYS = 6
_EVICT = struct.Struct("<BBHI")


def encode_evict(keys) -> bytes:
    keys = list(keys)
    if not 0 < len(keys) <= EVICT_KEYS:
        raise ValueError(f"an eviction notice carries 1..{EVICT_KEYS} keys, got {len(keys)}")
    return _EVICT.pack(OP_EVICT, len(keys), 0, 0) + struct.pack(f"<{len(keys)}Q", *keys).ljust(48, b"\0")


def decode_evict(payload: bytes) -> list[int]:
    _op, n, _z, _w = _EVICT.unpack_from(payload)
    return list(struct.unpack_from(f"<{min(n, EVICT_KEYS)}Q", payload, 8))


def encode_request(op: int, rid: int, addr: int, size: int, key: int = NO_KEY, data: bytes = b"",
                   buf: int = 0) -> bytes:
    inline = data if len(data) <= INLINE else b""
    return _REQ.pack(op, 0, rid, size, addr, key, buf) + inline.ljust(INLINE, b"\0")


def decode_response(payload: bytes) -> Completion:
    op, st, rid, size, seq, key = _RESP.unpack_from(payload)
    return Completion(op, st, rid, size, seq, key, bytes(payload[_RESP.size:_RESP.size + min(size, RESP_INLINE)]))


class TransferStats(NamedTuple):
    batches: int
    requests: int           # host requests forwarded
    prefetches: int         # prefetch records appended
    delivered: int          # prefetched items written to the Loading Zone
    dropped: int            # ... dropped (zone full)
    missing: int            # prefetches the memory server had no item for
    busy_ns: int
    status: int


class ServerStats(NamedTuple):
    batches: int
    records: int
    busy_ns: int
    status: int


# --- the memory server -------------------------------------------------------------------------------

class MemoryServer(BatchActor):
    """One core executing batches on ``region`` (a local MR over the records), one lane per TE or
    I/O thread. ``directory``: the key map (None: no prefetches served); ``parse(data) -> key`` the
    application's parser over written data (the key of the record written, or None).
    ``record_cycles``: the work per record besides the copy -- find the record's header,
    bounds-check, look up or update the key map, write the response header -- of a batched,
    software-prefetched loop (PD3's server executes whole batches; its record lines are prefetched
    together, so their DRAM latency overlaps rather than adds): the profile's
    ``software.server_record_cycles``. ``copy_gbps``: its core's copy rate for record data (the
    profile's ``software.core_stream_gbps``)."""

    def __init__(self, env, cores: Cores, *, region: MR, cpu_profile, record_cycles: int, copy_gbps: float,
                 directory=None, parse=None):
        super().__init__(env, cores)
        self.region, self.cpu = region, cpu_profile
        self.directory, self.parse = directory, parse
        self.lanes: list[dict] = []
        self.batches = self.records = 0
        self.record_ns = cores.cycles_ns(record_cycles)
        self.copy_gbps = copy_gbps

    def add_lane(self, qp, cq, requests: MR, staging: MR, remote_resp: tuple[int, int], *, slots: int,
                 slot_bytes: int, max_batch: int) -> None:
        self.lanes.append(dict(qp=qp, cq=cq, requests=requests, staging=staging, remote=remote_resp,
                               slots=slots, slot_bytes=slot_bytes, max_batch=max_batch))
        note = MR(qp.pd, 64)
        sge = SGE(note.addr, 8, note.lkey)
        qp.post_recv([RecvWR(i, 1, [sge]) for i in range(slots)])
        self.lanes[-1]["sge"] = sge

    def statistics(self) -> ServerStats:
        return ServerStats(self.batches, self.records, self.busy_ns, self.status)

    def runs(self) -> list:
        return [self.run(k) for k in range(len(self.lanes))]

    def run(self, lane: int):
        env = self.env
        L = self.lanes[lane]
        qp, cq = L["qp"], L["cq"]
        while not self.status:
            if not len(cq):
                yield cq.wait()
                continue
            _, wcs = self._topped(0, cq.poll, 4)
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    return self.fail(32, f"work completion {wc.wr_id}: {wc_status_str(wc.status)}")
                if wc.opcode != IBV_WC_RECV:
                    continue
                slot, n = batch_of_imm(wc.imm_data)
                work, out_bytes = self._execute(L, slot, n)
                yield from self.charge_cpu(self.cpu.rpc_handler_ns + work)
                base = slot * L["slot_bytes"]
                write = SendWR(slot, IBV_WR_RDMA_WRITE, 1, [SGE(L["staging"].addr + base, out_bytes, L["staging"].lkey)], 0)
                write.set_wr_rdma(L["remote"][1], L["remote"][0] + base)
                note = SendWR(slot, IBV_WR_SEND, 0, [], IBV_SEND_SIGNALED, imm_data=batch_imm(slot, n))
                self._topped(0, qp.post_send, [write, note])
                qp.post_recv(RecvWR(slot, 1, [L["sge"]]))
                self.batches += 1
                self.records += n

    def _execute(self, L: dict, slot: int, n: int) -> tuple[int, int]:
        """Run ``n`` records of ``slot``; the responses go to the staging slot (records, then a data
        area). Returns (CPU ns, bytes of the response block)."""
        base = slot * L["slot_bytes"]
        req, out = L["requests"].buf, L["staging"].buf
        mem = self.region.buf
        lo = self.region.offset            # requests name offsets in the node's memory
        limit = lo + self.region.length
        data_in = base + n * RECORD_BYTES                   # write data follows the records
        data_out = data_in
        end_out = base + L["slot_bytes"]
        ns = 0
        copied = 0
        for j in range(n):
            o = base + j * RECORD_BYTES
            op, _z, rid, size, addr, key, buf = _REQ.unpack_from(req, o)
            seq = int.from_bytes(req[o + 56:o + 64].tobytes(), "little")   # the TE's batch seq, in the pad
            status, data = ST_OK, b""
            if op == REQ_READ:
                if addr < lo or addr + size > limit:
                    status = ST_BAD
                else:
                    data = mem[addr - lo:addr - lo + size].tobytes()
            elif op == REQ_WRITE:
                if size <= INLINE:
                    src = req[o + 32:o + 32 + size]
                else:
                    src = req[data_in:data_in + size]
                    data_in += -(-size // 8) * 8
                if addr < lo or addr + size > limit:
                    status = ST_BAD
                else:
                    mem[addr - lo:addr - lo + size] = src
                    if self.directory is not None and self.parse is not None:
                        k = self.parse(src.tobytes())
                        if k is not None:
                            self.directory.apply([(k, 1)], 0, addr, size)
            elif op == REQ_PREFETCH:
                loc = self.directory.lookup(key) if self.directory is not None else None
                if loc is None:
                    status = ST_MISSING
                else:
                    size = loc.size
                    data = mem[loc.offset - lo:loc.offset - lo + size].tobytes()
            else:
                status = ST_BAD
            ns += self.record_ns
            if data:
                copied += len(data)
            size_out = len(data) if data else 0
            rec = _RESP.pack(op, status, rid, size_out if op != REQ_WRITE else size, seq, key)
            out[o:o + _RESP.size] = np.frombuffer(rec, np.uint8)
            out[o + _RESP.size:o + RECORD_BYTES] = 0
            if data and size_out <= RESP_INLINE and op == REQ_READ:
                out[o + _RESP.size:o + _RESP.size + size_out] = np.frombuffer(data, np.uint8)
            elif data:
                if data_out + size_out > end_out:
                    out[o:o + _RESP.size] = np.frombuffer(_RESP.pack(op, ST_BAD, rid, 0, seq, key), np.uint8)
                    continue
                out[data_out:data_out + size_out] = np.frombuffer(data, np.uint8)
                data_out += -(-size_out // 8) * 8
        ns += int(copied / self.copy_gbps * 8)
        return ns, data_out - base


# --- the Transfer Engine -----------------------------------------------------------------------------

class TransferEngine(BatchActor):
    """The engine loop over a *front* (where requests come from and responses go: the host rings
    by DMA for PD3's TE, an SPSC queue for Redy's I/O thread), one RC QP to the memory server, and,
    for PD3, the prefetch queue, the Prefetcher and the Loading Zone."""

    def __init__(self, env, cores: Cores, front, *, qp, cq, unified: MR, resp_space: MR,
                 remote_req: tuple[int, int], costs, max_batch: int, slots: int, slot_bytes: int,
                 prefetcher=None, zones=None, engine=None, name: str = "te"):
        super().__init__(env, cores)
        self.front, self.qp, self.cq = front, qp, cq
        self.unified, self.resp_space, self.remote_req = unified, resp_space, remote_req
        self.costs = costs                 # post_ns, poll_ns, record_ns (the core's own table)
        self.max_batch, self.slots, self.slot_bytes = max_batch, slots, slot_bytes
        self.prefetcher, self.zones, self.engine = prefetcher, list(zones or ()), engine
        self.queue: deque = deque()        # (key, zone) of prefetches waiting for the next batch
        self.wake = env.event()            # fired when a prefetch key is queued
        self._free = deque(range(slots))
        self._last_busy = 0                # when a poll last found work (see STOP_GRACE_NS)
        self._stop_hooked = False
        self._clean_again: set = set()     # zones to clean again
        self._cleaning_evs: dict = {}      # zone -> its clean in flight
        self._seq = 0
        self._recv_sge = None
        self.batches = self.requests = self.prefetches = self.delivered = self.dropped = self.missing = 0
        self.name = name

    # the producers' side: the DPU's Host View shards queue keys here
    def prefetch(self, keys, zone: int = 0) -> None:
        """Queue prefetches of ``keys`` for Loading Zone ``zone`` (the application thread whose RX
        queue the packet went to: the DPU sees the same flow steering the NIC applied)."""
        if keys:
            self.queue.extend((k, zone) for k in keys)
            if not self.wake.triggered:
                self.wake.succeed()

    def post_receives(self) -> None:
        note = MR(self.qp.pd, 64)
        self._recv_sge = SGE(note.addr, 8, note.lkey)
        self.qp.post_recv([RecvWR(i, 1, [self._recv_sge]) for i in range(self.slots)])

    def statistics(self) -> TransferStats:
        return TransferStats(self.batches, self.requests, self.prefetches, self.delivered, self.dropped,
                             self.missing, self.busy_ns, self.status)

    def run(self, stop=None):
        """The loop until ``stop`` (a rack's ``ctx.stopped``) has fired and nothing is in flight."""
        env = self.env
        while not self.status:
            did = False
            if self._free:
                reqs = yield from self.front.take(self, self.max_batch)     # None: still polling
                if self.status:
                    return self.status
                if reqs is not None:
                    if reqs or self.queue:
                        yield from self._send(reqs)
                    # a poll landed: the next one is posted at once (the TE busy-polls), unless it
                    # found nothing and the TE parks (co-located: a bell wakes it) or the rack has
                    # stopped and the host has been quiet for STOP_GRACE_NS (requests still in flight
                    # at the plan's end are served: their clients are waiting)
                    idle = not reqs and self.front.idle()
                    if not idle:
                        self._last_busy = env.now
                    quiet = stop is not None and stop.triggered and env.now - self._last_busy >= STOP_GRACE_NS
                    did = not idle or not (getattr(self.front, "bell", None) is not None or quiet)
            if len(self.cq):
                did = True
                yield from self._responses()
            todo = [z for z in self._clean_again if not self.zones[z].clean_in_flight]
            if todo:
                # the device cleans a Loading Zone whenever a clean of it finished with progress or
                # new items came, so its Head follows the consumers (a clean that found nothing to
                # reclaim waits for the next produce: nothing else can change what it would find).
                # The zones' state-word reads go as one scatter-gather list: one post
                yield from self.charge_cpu(self.costs.post_ns)
            for z in todo:
                zone = self.zones[z]
                self._clean_again.discard(z)
                c = zone.clean(self.engine, CLEAN_ITEMS)
                self._cleaning_evs[z] = c
                c.callbacks.append(lambda ev, z=z: self._cleaned(ev, z))
            if did:
                continue
            if self.wake.triggered:
                self.wake = env.event()
            if stop is not None and stop.triggered and len(self._free) == self.slots and not self.queue \
                    and self.front.idle() and getattr(self.front, "bell", None) is None \
                    and env.now - self._last_busy >= STOP_GRACE_NS:
                return self.status               # a rack of processes: the plan is over, nothing came
            # what can give the loop work: a completion (always: it frees a slot); with a free slot,
            # a queued prefetch, the host ring (a poll landing, or the bell), the rack stopping; a
            # clean landing. Events already fired are left out (they would wake the loop at once)
            waits = [self.cq.wait()]
            if self._free:
                waits += [ev for ev in [self.wake] + self.front.waits() if not ev.processed]
            waits += [c for c in self._cleaning_evs.values() if not c.processed]
            if stop is not None and not stop.triggered and not self._stop_hooked:
                self._stop_hooked = True          # once: stop wakes the loop through self.wake
                stop.callbacks.append(lambda _ev: self.wake.triggered or self.wake.succeed())
            yield any_of(env, waits)
        return self.status

    def _send(self, reqs):
        """One batch: host requests (with their large write data), then prefetches; one RDMA WRITE
        of records then data, and a SEND naming the slot."""
        c = self.costs
        evicts = [r for r in reqs if r[0][0] == OP_EVICT]
        if evicts:                                  # host-only notices: nothing goes to the server
            reqs = [r for r in reqs if r[0][0] != OP_EVICT]
        flushes = [key for payload, _d in reqs for key in [_REQ.unpack_from(payload)[5]]
                   if payload[0] == REQ_WRITE and key != NO_KEY]
        flushes += [k for payload, _d in evicts for k in decode_evict(payload)]
        if flushes and self.prefetcher is not None:
            self.prefetcher.on_flush(flushes)       # Table 2: after ①, before any prefetch is appended
        if self.prefetcher is not None:
            reads = [key for payload, _d in reqs for key in [_REQ.unpack_from(payload)[5]]
                     if payload[0] == REQ_READ and key != NO_KEY]
            if reads:
                self.prefetcher.on_host_read(reads)
        room = self.max_batch - len(reqs)
        pf = []
        while self.queue and len(pf) < room:
            key, zone = self.queue.popleft()
            # a prefetch the host overtook (it read the key itself meanwhile) goes no further: the
            # in-flight bookkeeping (PD3 §5.2) ends here rather than after a useless server copy
            if self.prefetcher is None or not self.prefetcher.cancel_stale(key):
                pf.append((key, zone))
        n = len(reqs) + len(pf)
        if n == 0:
            return
        yield from self.charge_cpu(c.post_ns + c.record_ns * n)
        slot = self._free.popleft()
        self._seq += 1
        base = slot * self.slot_bytes
        buf = self.unified.buf
        seqb = np.frombuffer(self._seq.to_bytes(8, "little"), np.uint8)
        data = base + n * RECORD_BYTES
        for j, (payload, wdata) in enumerate(reqs):
            o = base + j * RECORD_BYTES
            buf[o:o + 56] = np.frombuffer(payload, np.uint8)
            buf[o + 56:o + 64] = seqb
            if wdata is not None:
                if data + len(wdata) > base + self.slot_bytes:
                    raise ValueError(f"a batch's write data exceeds the {self.slot_bytes} B batch slot")
                buf[data:data + len(wdata)] = np.frombuffer(wdata, np.uint8)
                data += -(-len(wdata) // 8) * 8
        for j, (key, zone) in enumerate(pf):
            o = base + (len(reqs) + j) * RECORD_BYTES
            buf[o:o + 56] = np.frombuffer(encode_request(REQ_PREFETCH, zone, 0, 0, key), np.uint8)
            buf[o + 56:o + 64] = seqb
        nbytes = data - base
        write = SendWR(slot, IBV_WR_RDMA_WRITE, 1, [SGE(self.unified.addr + base, nbytes, self.unified.lkey)], 0)
        write.set_wr_rdma(self.remote_req[1], self.remote_req[0] + base)
        note = SendWR(slot, IBV_WR_SEND, 0, [], IBV_SEND_SIGNALED, imm_data=batch_imm(slot, n))
        self._topped(c.post_ns, self.qp.post_send, [write, note])
        self.batches += 1
        self.requests += len(reqs)
        self.prefetches += len(pf)

    def _responses(self):
        c = self.costs
        _got, wcs = self._topped(c.poll_ns, self.cq.poll, 2 * self.slots)
        for wc in wcs:
            if wc.status != IBV_WC_SUCCESS:
                self.fail(32, f"work completion {wc.wr_id}: {wc_status_str(wc.status)}")
                return
            if wc.opcode != IBV_WC_RECV:
                continue
            slot, n = batch_of_imm(wc.imm_data)
            self.qp.post_recv(RecvWR(slot, 1, [self._recv_sge]))
            base = slot * self.slot_bytes
            buf = self.resp_space.buf
            data = base + n * RECORD_BYTES
            host, items = [], {}
            for j in range(n):
                o = base + j * RECORD_BYTES
                op, st, rid, size, seq, key = _RESP.unpack_from(buf, o)
                if op == REQ_PREFETCH:
                    got = None
                    if st == ST_OK:
                        got = buf[data:data + size].tobytes()
                        data += -(-size // 8) * 8
                    else:
                        self.missing += 1
                    if self.prefetcher is None or self.prefetcher.on_prefetch_response(key, got is not None):
                        if got is not None:
                            items.setdefault(rid, []).append((key, got, seq))   # rid: the zone
                    continue
                big = None
                if op == REQ_READ and st == ST_OK and size > RESP_INLINE:
                    big = buf[data:data + size].tobytes()
                    data += -(-size // 8) * 8
                host.append((buf[o:o + 56].tobytes(), big))
            if host and self.prefetcher is not None:
                self.prefetcher.on_remote_read_response(
                    [k for p, _b in host for k in [_RESP.unpack_from(p)[5]] if p[0] == REQ_READ and k != NO_KEY])
            if items:
                # every zone's items (and Tail) in one scatter-gather list: one post
                yield from self.charge_cpu(self.costs.post_ns)
            for z, zitems in items.items():
                yield from self._produce(z, zitems)
            if host:
                yield from self.front.deliver(self, host)
                if self.status:
                    return
            self._free.append(slot)

    def _produce(self, z: int, items):
        """④ for prefetched items: one DMA write into Loading Zone ``z`` (then its Tail); a full
        zone drops them (counted) and retires its oldest items for the next ones."""
        from .loading_zone import ZONE_FULL
        zone = self.zones[z]
        done = zone.produce(self.engine, items, clean=False)
        if done.status not in (0, ZONE_FULL):
            self.fail(done.status, done.error)
            return
        self.delivered += len(done.written)
        self.dropped += len(done.dropped)
        self._clean_again.add(z)
        if done.dropped and not zone.clean_in_flight:
            yield from self.charge_cpu(self.costs.post_ns)
            self._clean_again.discard(z)
            c = zone.expire(self.engine, max(CLEAN_ITEMS, len(done.dropped)))
            self._cleaning_evs[z] = c
            c.callbacks.append(lambda ev, z=z: self._cleaned(ev, z))

    def _cleaned(self, ev, z: int) -> None:
        if getattr(ev, "cleaned", 0):
            self._clean_again.add(z)


# --- fronts --------------------------------------------------------------------------------------------

class DmaFront:
    """PD3: the host request and response rings, reached by the DPU's DMA engine. Large data
    lives in the host buffer of its request id: ``bufs + id x buf_bytes`` of the host's memory."""

    def __init__(self, engine, req_ring: DmaRing, resp_ring: DmaRing, host: int, bufs: int, buf_bytes: int):
        self.engine, self.req_ring, self.resp_ring, self.host = engine, req_ring, resp_ring, host
        self.bufs, self.buf_bytes = bufs, buf_bytes
        self._poll = None
        self._empty = False          # the last poll found nothing
        self.polls = self.empty_polls = 0
        # co-located (host threads in this process): after a poll that found nothing the TE parks
        # until a host push rings this bell, instead of polling in virtual time for ever; a rack of
        # processes has no bell and polls until the rack stops (see :meth:`doorbell`)
        self.bell = None
        self._rung = False
        self.landed = None           # co-located: called when responses are in the host's ring

    def doorbell(self, env) -> None:
        """Park between empty polls; :meth:`ring` (the host library, after a push) wakes the TE,
        which then posts its poll at once. What it leaves out: the up-to-one-poll delay before a
        busy-polling TE would have looked, and the cost of the empty polls themselves."""
        self.bell = env.event()

    def ring(self) -> None:
        if self.bell is not None:
            self._rung = True
            if not self.bell.triggered:
                self.bell.succeed()

    def _buf(self, rid: int) -> int:
        return gaddr(self.host, self.bufs + rid * self.buf_bytes)

    def idle(self) -> bool:
        return self._empty and self._poll is None

    def parked(self) -> bool:
        return self.bell is not None and self._empty and self._poll is None and not self._rung

    def waits(self) -> list:
        """What can wake the TE for its next poll: the poll in flight, or (co-located) the bell.
        A bell that has fired is replaced, already fired again if the host rang since the last poll
        was posted: a ring that came while an empty poll was in flight is still owed a poll, and the
        TE's loop leaves out events that were processed before it waits."""
        if self._poll is not None:
            return [] if self._poll.processed else [self._poll]
        if self.bell is not None:
            if self.bell.triggered:
                self.bell = self.bell.env.event()
                if self._rung:
                    self.bell.succeed()
            return [self.bell]
        return []

    def take(self, te: TransferEngine, max_n: int):
        """Step ①: a DMA poll of the request ring is kept in flight; when it lands, its records
        (with their large write data, one more scatter-gather DMA read) are the batch. None while
        the poll is in flight."""
        c = te.costs
        if self._poll is None:
            if self.parked() and not te.queue:
                return None
            self._rung = False
            yield from te.charge_cpu(c.poll_ns + c.post_ns)
            self._poll = self.req_ring.device_poll(self.engine, max_n)
            self.polls += 1
            if not self._poll.succeeded:
                te.fail(self._poll.status, self._poll.error)
            return None
        if not self._poll.processed:
            return None
        recs, self._poll = self._poll.records, None
        self._empty = not recs
        self.empty_polls += not recs
        out, big = [], []
        for r in recs:
            op, _z, rid, size, _addr, _key, _buf = _REQ.unpack_from(r)
            if op == REQ_WRITE and size > INLINE:
                big.append((len(out), rid, size))
            out.append([r, None])
        if big:
            tmp = np.zeros(sum(-(-s // 8) * 8 for _i, _r, s in big), np.uint8)
            els, o = [], 0
            for _i, rid, size in big:
                els.append((self._buf(rid), o, size))
                o += -(-size // 8) * 8
            yield from te.charge_cpu(c.post_ns)
            rd = self.engine.read_sg(els, tmp)
            if not rd.succeeded:
                te.fail(rd.status, rd.error)
                return []
            yield rd
            o = 0
            for i, _rid, size in big:
                out[i][1] = tmp[o:o + size].tobytes()
                o += -(-size // 8) * 8
        return [tuple(x) for x in out]

    def deliver(self, te: TransferEngine, host):
        c = te.costs
        big = [(p, b) for p, b in host if b is not None]
        if big:
            els, o = [], 0
            data = b"".join(b.ljust(-(-len(b) // 8) * 8, b"\0") for _p, b in big)
            for p, b in big:
                els.append((self._buf(_RESP.unpack_from(p)[2]), o, len(b)))
                o += -(-len(b) // 8) * 8
            yield from te.charge_cpu(c.post_ns)
            wr = self.engine.write_sg(els, np.frombuffer(data, np.uint8))
            if not wr.succeeded:
                te.fail(wr.status, wr.error)
                return
            yield wr                 # the data is in host memory before its response record
        payloads = [p for p, _b in host]
        while payloads:
            yield from te.charge_cpu(c.post_ns)
            done = self.resp_ring.device_push(self.engine, payloads)
            if done.status == RING_FULL:              # learn what the host freed, push again
                if (yield from te.refresh_ring(self.resp_ring, self.engine, c.post_ns)):
                    continue
                return
            if not done.succeeded:
                te.fail(done.status, done.error)
            elif self.landed is not None:
                done.callbacks.append(lambda _ev: self.landed())
            return


class RedyFront:
    """Redy's I/O thread front: requests come from its application thread over an SPSC queue in
    host memory and go back the same way; the engine runs on a host core (``TransferEngine`` with
    the host's ``[cpu]`` costs). ``handoff_ns``: one side's store + CAS of a queue slot."""

    def __init__(self, env, handoff_ns: int):
        self.env = env
        self.handoff_ns = handoff_ns
        self.inbox: deque = deque()            # (payload, write data) from the app thread
        self.results: dict = {}                # request id -> Completion
        self.arrived = env.event()             # the app thread's wake-up
        self.wake = env.event()                # the I/O thread's wake-up

    # the application thread's end
    def submit(self, payload: bytes, wdata) -> None:
        self.inbox.append((payload, wdata))
        if not self.wake.triggered:
            self.wake.succeed()

    # the I/O thread's end
    def idle(self) -> bool:
        return not self.inbox

    def waits(self) -> list:
        if self.wake.triggered:
            self.wake = self.env.event()
            if self.inbox:
                self.wake.succeed()
        return [self.wake]

    def take(self, te: TransferEngine, max_n: int):
        if not self.inbox:
            return None
        out = [self.inbox.popleft() for _ in range(min(max_n, len(self.inbox)))]
        yield from te.charge_cpu(te.costs.poll_ns + self.handoff_ns * len(out))
        return out

    def deliver(self, te: TransferEngine, host):
        yield from te.charge_cpu(self.handoff_ns * len(host))
        for payload, big in host:
            c = decode_response(payload)
            if big is not None:
                c = c._replace(data=big)
            self.results[c.id] = c
        if not self.arrived.triggered:
            self.arrived.succeed()


class EngineCosts(NamedTuple):
    post_ns: int
    poll_ns: int
    record_ns: int


def host_costs(cpu) -> EngineCosts:
    """A host core running the engine loop (Redy's I/O thread): the host's own post and poll costs;
    per record the DPU's figure rescaled to the host clock is not known, so the same 10 cycles."""
    return EngineCosts(cpu.post_ns + cpu.wqe_ns, cpu.poll_ns, max(1, round(10 / cpu.ghz)))


def dpu_costs(dpu) -> EngineCosts:
    return EngineCosts(dpu.post_ns, dpu.poll_ns, dpu.record_ns)


# --- the host library ------------------------------------------------------------------------------------

class MemoryApi:
    """The host's memory API over the DMA rings (PD3): ``read``/``write`` post a request and return
    its id; :meth:`wait` polls the response ring until every id asked for is complete. Shared by
    the application threads of a host (one process). Ids are at most ``ids`` in flight (PD3's 14
    bits allow 16 K); each has a host buffer of ``buf_bytes`` for data larger than a record."""

    POLL_GAP_NS = 200         # a waiting thread re-polls the response ring this often (it spins)

    def __init__(self, env, fabric, host: int, req_ring: DmaRing, resp_ring: DmaRing, bufs: int, buf_bytes: int,
                 ids: int):
        self.env, self.fabric, self.host = env, fabric, host
        self.req_ring, self.resp_ring = req_ring, resp_ring
        self.bufs, self.buf_bytes = bufs, buf_bytes
        self.free = deque(range(1, ids))
        self.results: dict = {}
        self.mem = fabric.memory[host].host
        self.pushed = self.full = 0
        self.seen = 0                # the newest TE batch a response came back from
        self.front = None            # co-located: the TE's DmaFront, rung after each push
        self.arrived = env.event()   # co-located: fired when responses land (:meth:`landed`)

    def _id(self):
        while not self.free:
            yield self.env.timeout(self.POLL_GAP_NS)
        return self.free.popleft()

    def post(self, thread, op: int, addr: int, size: int, key: int = NO_KEY, data: bytes = b""):
        """Post one request; returns its id."""
        if size > self.buf_bytes:
            raise ValueError(f"a request of {size} B exceeds the memory API's {self.buf_bytes} B buffers")
        rid = yield from self._id()
        if op == REQ_WRITE and len(data) > INLINE:
            o = self.bufs + rid * self.buf_bytes
            self.mem[o:o + len(data)] = np.frombuffer(data, np.uint8)
            thread.cpu(copy_ns(self.fabric.profile, len(data), first="cached"))
        rec = encode_request(op, rid, addr, size, key, data if op == REQ_WRITE else b"", 0)
        while not self.req_ring.host_push(rec, thread):
            self.full += 1
            yield self.env.timeout(self.POLL_GAP_NS)
        self.pushed += 1
        if self.front is not None:
            self.front.ring()
        return rid

    def evicted(self, thread, keys):
        """Tell the DPU that clean records of ``keys`` left the host's cache: notices of up to
        :data:`EVICT_KEYS` keys each, taken off the ring by the Transfer Engine (Table 2's flush
        row) and answered by nobody."""
        keys = list(keys)
        for i in range(0, len(keys), EVICT_KEYS):
            while not self.req_ring.host_push(encode_evict(keys[i:i + EVICT_KEYS]), thread):
                self.full += 1
                yield self.env.timeout(self.POLL_GAP_NS)
            self.pushed += 1
        if self.front is not None:
            self.front.ring()

    def poll(self, thread) -> None:
        while True:
            p = self.resp_ring.host_take(thread)
            if p is None:
                return
            c = decode_response(p)
            self.seen = max(self.seen, c.seq & 0xFFFFFFFF)
            if c.op == REQ_READ and c.status == ST_OK and c.size > RESP_INLINE:
                o = self.bufs + c.id * self.buf_bytes
                c = c._replace(data=self.mem[o:o + c.size].tobytes())
                thread.cpu(copy_ns(self.fabric.profile, c.size))
            self.results[c.id] = c

    def landed(self) -> None:
        """The TE's response DMA has landed (co-located: the host's next poll would find it)."""
        ev, self.arrived = self.arrived, self.env.event()
        if not ev.triggered:
            ev.succeed()

    def wait(self, thread, rids):
        """Poll until every id in ``rids`` is complete: their completions, in order (ids freed).
        Co-located, a waiter sleeps until responses land (an application thread with other work
        polls between its requests, not per waiting request); in a rack of processes it re-polls
        every :data:`POLL_GAP_NS`."""
        while True:
            self.poll(thread)
            if all(r in self.results for r in rids):
                out = [self.results.pop(r) for r in rids]
                self.free.extend(rids)
                return out
            yield self.arrived if self.front is not None else self.env.timeout(self.POLL_GAP_NS)
