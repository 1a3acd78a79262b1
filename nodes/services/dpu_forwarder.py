"""The DPU forwarder: PD3's Transfer Engine as actors on the virtual-time environment.

What it models (PD3 §6.1, Appendix A, Fig. A.1). Host threads put small requests (64 B records)
into a request ring in host memory and get their responses from a response ring in host memory;
no host core does any network work. One Arm core of the DPU (the *Transfer Engine*) does it all:

1. it DMA-reads every ready request of the host request ring in one scatter-gather read into its
   *unified buffer* (DPU memory) -- :meth:`shm.dmaring.DmaRing.device_poll`;
2. it RDMA-WRITEs the whole batch, as one work request, into a batch slot of the memory server's
   request ring, followed on the same RC QP by a zero-length SEND whose immediate data names the
   slot and the record count (the emulator's verbs have no WRITE_WITH_IMM; RC ordering makes the
   SEND arrive after the WRITE has landed, which is what WRITE_WITH_IMM gives);
3. the memory server's CPU (:class:`MemoryServer`) wakes on that completion, executes the records
   on a table in its memory, and RDMA-WRITEs the responses into the same slot of a *response
   space* in DPU memory, again followed by a zero-length SEND with the slot and count;
4. the Transfer Engine DMA-writes those responses into the host response ring in one
   scatter-gather write (:meth:`shm.dmaring.DmaRing.device_push`), which frees the slot.

Zero-copy, as PD3: the DPU core only reads headers and issues DMA and RDMA commands. The model's
Python copy of the DMA'd payloads into the unified buffer's MR is bookkeeping standing for the DMA
landing there, and costs no virtual time.

Why it is built like this (the design, Trio style: explicit objects in, generators out):

* **Explicit objects, no node context.** :class:`DpuForwarder` and :class:`MemoryServer` take the
  environment, a :class:`nodes.actors.Cores`, the DMA engine, the rings, QPs, CQs and MRs; their
  :meth:`run` is a generator to start as a process. A rack's DPU role can build these from its
  ``NodeContext`` later; :func:`wire` builds them for a co-located rig (the bench and the tests).
  Nothing here starts processes behind the caller's back.
* **One actor per core.** The Transfer Engine is one generator charging one Arm core: every cost
  is a charge on that core, so its busy time is exactly the work, and when it binds, it binds
  because of those charges. The memory server runs one actor per core, each with its own QP and
  CQ (a *lane*): a shared QP would bring in the QP-lock cost of host threads taking turns
  (``doorbell.qp_lock_ns``), which a run-to-completion server with a QP per core does not pay.
  Batch slot ``s`` goes to lane ``s % lanes``.
* **Credits, no overrun.** The memory server's request ring and the DPU's response space have
  ``slots`` batch slots of ``max_batch`` records each. The forwarder polls the host ring only
  while a slot is free, and frees a slot when its responses have been handed to the host ring's
  DMA write. So at most ``slots`` batches are in flight and nothing is ever overwritten.
* **Waiting on events, not spinning in virtual time.** The real Transfer Engine busy-polls; here
  the actor posts its ring poll (a DMA read, ~1 us) and then waits for whichever comes first:
  that completion, a completion on its CQ, or the end of the run. The cost of one loop of a
  busy-polling core is charged per poll that finds something or per DMA poll posted, not per
  idle spin (an idle spin does no work the model could price).

Costs (docs/devices.md, "The DPU forwarder", has their sources):

* DPU core (``[dpu]``): ``poll_ns`` per ring poll and per CQ poll, ``post_ns`` per DMA or RDMA
  post (the ring poll's DMA read, the free write the ring posts after it, the RDMA WRITE + SEND,
  the response ring's DMA write, a tail refresh when the host ring is full), ``record_ns`` per
  request record (read its header to reserve response space, PD3 step 2). Responses cost no
  per-record work: the server wrote them as one block, and one DMA write forwards it (step 4). The verbs layer charges its own post and poll costs (``[cpu]``, the host's clock);
  the forwarder tops each up to the ``[dpu]`` figure, so a post costs ``max(dpu.post_ns, what the
  verbs model charged)`` -- never both.
* Memory server CPU (``[cpu]``): ``rpc_handler_ns`` per batch (wake up, take the completion, find
  the batch), plus ``local_read_ns_per_line`` per record: executing a record touches one line of
  the table in local DRAM (a 32 B value in one 64 B line); the request and response buffers are
  read and written sequentially and taken as prefetched. Its verbs posts are priced by the verbs
  model with ``[cpu]`` as they are (a host-class CPU).
* Host: nothing on the transfer path. :class:`HostClient` pushes and takes records with the
  ring's host operations, charged to the thread the caller passes (``thread.cpu(ns)``).

Records. A ring record is 64 B: 56 B of payload and the ring's state word. A request's payload is
``tag (8 B) | op (8 B) | key (8 B) | value (32 B)``; a response's is ``tag | status | key | value``.
On the wire and in the batch slots each record takes 64 B (the payload and 8 B of padding where
the state word was), so a batch of ``n`` is one ``64 n``-byte RDMA WRITE.

Errors are statuses, not crashes: a DMA with a bad address (a ring not in the engine's host's
memory) or a work completion in error ends the actor with ``status``/``error`` set, as a real
Transfer Engine would report and stop; nothing of another node is touched.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from nodes.actors import Cores
from shm.sim.env import any_of
from shm.dma import DmaEngine
from shm.dmaring import RING_FULL, DmaRing
from shm.fabric import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, gaddr
from shm.verbs import (
    CQ, IBV_QPT_RC, IBV_SEND_SIGNALED, IBV_WC_RECV, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE, IBV_WR_SEND, MR, PD, QP,
    SGE, Context, QPInitAttr, RecvWR, SendWR, wc_status_str,
)

RECORD_BYTES = 64            # a ring record, and a record on the wire / in a batch slot
PAYLOAD_BYTES = RECORD_BYTES - 8
VALUE_BYTES = 32
OP_GET, OP_PUT = 0, 1
ST_OK, ST_BAD_OP = 0, 1
FWD_OK = 0
FWD_WC_ERROR = 32            # a work completion in error (the DMA statuses of shm.dma are the others)


class Response(NamedTuple):
    tag: int
    status: int
    key: int
    value: bytes


def encode_request(tag: int, op: int, key: int, value: bytes = b"") -> bytes:
    """The 56-byte payload of one request record."""
    if len(value) > VALUE_BYTES:
        raise ValueError(f"a value of {len(value)} B does not fit {VALUE_BYTES} B")
    return (tag.to_bytes(8, "little") + op.to_bytes(8, "little") + key.to_bytes(8, "little")
            + bytes(value).ljust(VALUE_BYTES, b"\0"))


def decode_response(payload: bytes) -> Response:
    return Response(int.from_bytes(payload[0:8], "little"), int.from_bytes(payload[8:16], "little"),
                    int.from_bytes(payload[16:24], "little"), bytes(payload[24:24 + VALUE_BYTES]))


# --- statistics --------------------------------------------------------------------------------------

class ForwarderStats(NamedTuple):
    batches: int          # request batches forwarded to the memory server
    records: int          # request records forwarded
    mean_batch: float     # records / batches
    responses: int        # responses DMA-written into the host response ring
    polls: int            # DMA polls of the host request ring
    empty_polls: int      # polls that found nothing ready
    dma_bytes: int        # bytes the forwarder's DMA engine moved (both directions)
    rdma_bytes: int       # bytes RDMA-written to the memory server
    busy_ns: int          # the Arm core's work (charges on it, verbs costs included)
    status: int           # FWD_OK, a DMA status (shm.dma) or FWD_WC_ERROR


class ServerStats(NamedTuple):
    batches: int
    records: int
    mean_batch: float
    busy_ns: int          # CPU work of all the server's cores (charges, verbs costs included)
    status: int


# --- shared plumbing -----------------------------------------------------------------------------------

class BatchActor:
    """An actor serving batches over verbs (this module's forwarder and server, PD3's Transfer
    Engine and memory server: nodes/systems/pd3/transfer.py). CPU accounting shared by them: charges go on ``cores``; a verbs
    call's own charge (the ``[cpu]`` constants) is topped up to a target."""

    def __init__(self, env, cores: Cores):
        self.env = env
        self.cores = cores
        self.busy_ns = 0
        self.status = FWD_OK
        self.error = ""

    def charge_cpu(self, ns: int):
        """Charge ``ns`` to the core and let the time pass (a DMA posted next starts after it)."""
        if ns > 0:
            self.cores.charge(ns)
            self.busy_ns += ns
        yield 0

    def _topped(self, target: int, fn, *args):
        """Call ``fn`` (a verbs call that charges the actor itself) and charge the rest of
        ``target`` ns, if the verbs model charged less."""
        proc = self.env.active_process
        before = proc.statistics().charged_ns
        out = fn(*args)
        spent = proc.statistics().charged_ns - before
        if target > spent:
            self.cores.charge(target - spent)
        self.busy_ns += max(spent, target)
        return out

    def post_receives(self, notify: MR) -> None:
        """Post ``slots`` receives per QP for the other side's notifications (zero-length SENDs
        naming a batch slot; setup time)."""
        self._recv_sge = SGE(notify.addr, 8, notify.lkey)
        for qp in self.qps:
            qp.post_recv([RecvWR(i, 1, [self._recv_sge]) for i in range(self.slots)])

    def fail(self, status: int, error: str):
        """Record that this actor failed (``status``, ``error``: what its stats report); returns ``status``."""
        self.status, self.error = status, error
        return status

    def refresh_ring(self, ring, engine, post_ns: int):
        """Generator, after a device push found the host ring ``ring`` full: post (``post_ns`` of
        this core) the DMA read of what the host freed and wait for it. True once known (push
        again), False if the read failed (this actor failed)."""
        yield from self.charge_cpu(post_ns)
        r = ring.device_refresh(engine)
        if not r.succeeded:
            self.fail(r.status, r.error)
            return False
        yield r
        return True


def batch_imm(slot: int, n: int) -> int:
    """The immediate of a batch's notification: its ring slot and its record count (< 65,536)."""
    return (slot << 16) | n


def batch_of_imm(imm: int) -> tuple[int, int]:
    """``(slot, count)`` of a notification's immediate (:func:`batch_imm`)."""
    return imm >> 16, imm & 0xFFFF


# --- the Transfer Engine (DPU side) ------------------------------------------------------------------------

class DpuForwarder(BatchActor):
    """PD3's Transfer Engine on one Arm core. ``cores``: the core(s) it charges (one, as PD3);
    ``engine``: the DPU's DMA engine to the host; ``req_ring``/``resp_ring``: the host rings;
    ``qps``: one RC QP per memory-server lane, all completing on ``cq``; ``unified``: the MR of
    the unified buffer (``slots x max_batch`` records); ``resp_space``: the MR the memory server
    writes responses into (same shape, remote write); ``remote_req``: ``(addr, rkey)`` of the
    memory server's request ring (same shape)."""

    def __init__(self, env, cores: Cores, engine: DmaEngine, req_ring: DmaRing, resp_ring: DmaRing, *, qps, cq,
                 unified: MR, resp_space: MR, remote_req: tuple[int, int], dpu_profile, max_batch: int = 128,
                 slots: int = 8, record_ns: int | None = None):
        super().__init__(env, cores)
        if max_batch < 1 or max_batch > 0xFFFF:
            raise ValueError(f"max_batch must be in 1..65535, got {max_batch}")
        if unified.length < slots * max_batch * RECORD_BYTES or resp_space.length < slots * max_batch * RECORD_BYTES:
            raise ValueError(f"the unified buffer and the response space need {slots} x {max_batch} x "
                             f"{RECORD_BYTES} B")
        if max_batch > resp_ring.capacity:
            raise ValueError(f"max_batch {max_batch} exceeds the response ring's capacity {resp_ring.capacity}: "
                             f"a full batch of responses could never be pushed")
        self.engine, self.req_ring, self.resp_ring = engine, req_ring, resp_ring
        self.qps, self.cq = list(qps), cq
        self.unified, self.resp_space = unified, resp_space
        self.remote_req = remote_req
        self.p = dpu_profile
        # per request record; ``record_ns`` overrides the profile's (a sensitivity run only)
        self.record_ns = dpu_profile.record_ns if record_ns is None else record_ns
        self.max_batch, self.slots = max_batch, slots
        self.slot_bytes = max_batch * RECORD_BYTES
        self._free = deque(range(slots))
        self._qp_of = {qp.qp_num: qp for qp in self.qps}
        self._pending: deque = deque()       # (slot, payloads) waiting for room in the host response ring
        self._recv_sge = None
        self.batches = self.records = self.responses = self.polls = self.empty_polls = self.rdma_bytes = 0
        self._dma0 = engine.statistics().bytes

    def statistics(self) -> ForwarderStats:
        return ForwarderStats(self.batches, self.records, self.records / self.batches if self.batches else 0.0,
                              self.responses, self.polls, self.empty_polls,
                              self.engine.statistics().bytes - self._dma0, self.rdma_bytes, self.busy_ns, self.status)

    def run(self, until: int | None = None, stop=None):
        """The Transfer Engine's loop until virtual time ``until``, or, with the event ``stop`` (a
        rack's ``ctx.stopped``), until it has fired *and* the engine is idle: a poll of the host
        ring found nothing, no batch is at the server and no response waits for the host. Requests
        still in the ring when the plan ends are served, so no client waits for ever."""
        env = self.env
        poll = None
        end = stop if stop is not None else env.timeout(max(0, until - env.now))  # one event for every wait
        until = until if until is not None else float("inf")
        while env.now < until and (stop is not None or not end.processed):
            did = False
            recs = None
            if poll is not None and poll.processed:
                recs, poll = poll.records, None
                did = True
                if not recs:
                    self.empty_polls += 1
                    if end.processed and len(self._free) == self.slots and not self._pending and not len(self.cq):
                        return self.status          # stopped and drained
            if recs:
                yield from self._forward(recs)
                if self.status:
                    return self.status
            # PD3's loop runs its steps in order: the next poll of the host ring is posted once this
            # batch is on its way (step 1 again), not overlapped with the work on it; while the DMA
            # read is in flight the core hands responses to the host (below)
            if poll is None and self._free:
                yield from self.charge_cpu(self.p.poll_ns + self.p.post_ns)      # poll the ring: one DMA read
                poll = self.req_ring.device_poll(self.engine, self.max_batch)
                if not poll.succeeded:
                    return self.fail(poll.status, poll.error)
                self.polls += 1
            if len(self.cq) or self._pending:
                did = True
                yield from self._responses()
                if self.status:
                    return self.status
            if not did:
                waits = [self.cq.wait()] + ([] if end.processed else [end])
                if poll is not None:
                    waits.append(poll)
                yield any_of(env, waits)
        return self.status

    def _forward(self, recs):
        """One batch: read its headers, RDMA-WRITE it to a free slot of the server's ring + SEND."""
        n = len(recs)
        # the free write device_poll posted for these slots, and each record's header
        yield from self.charge_cpu(self.p.post_ns + self.record_ns * n)
        slot = self._free.popleft()
        base = slot * self.slot_bytes
        buf = self.unified.buf
        for j, r in enumerate(recs):     # the DMA landed here (zero-copy on the card): no time
            o = base + j * RECORD_BYTES
            buf[o:o + PAYLOAD_BYTES] = np.frombuffer(r, np.uint8)
            buf[o + PAYLOAD_BYTES:o + RECORD_BYTES] = 0
        nbytes = n * RECORD_BYTES
        write = SendWR(slot, IBV_WR_RDMA_WRITE, 1, [SGE(self.unified.addr + base, nbytes, self.unified.lkey)], 0)
        addr, rkey = self.remote_req
        write.set_wr_rdma(rkey, addr + base)
        note = SendWR(slot, IBV_WR_SEND, 0, [], IBV_SEND_SIGNALED, imm_data=batch_imm(slot, n))
        self._topped(self.p.post_ns, self.qps[slot % len(self.qps)].post_send, [write, note])
        self.batches += 1
        self.records += n
        self.rdma_bytes += nbytes

    def _responses(self):
        """Poll the CQ once; hand every batch of responses to the host response ring."""
        got, wcs = self._topped(self.p.poll_ns, self.cq.poll, 2 * self.slots)
        for wc in wcs:
            if wc.status != IBV_WC_SUCCESS:
                self.fail(FWD_WC_ERROR, f"work completion {wc.wr_id} on QP {wc.qp_num}: {wc_status_str(wc.status)}")
                return
            if wc.opcode != IBV_WC_RECV:
                continue                              # our SEND completed: nothing to do
            slot, n = batch_of_imm(wc.imm_data)
            base = slot * self.slot_bytes
            buf = self.resp_space.buf
            self._pending.append((slot, [buf[base + j * RECORD_BYTES:base + j * RECORD_BYTES + PAYLOAD_BYTES].tobytes()
                                         for j in range(n)]))
            self._qp_of[wc.qp_num].post_recv(RecvWR(slot, 1, [self._recv_sge]))
        while self._pending:
            slot, payloads = self._pending[0]
            # one DMA write of the whole response block: no per-record work (PD3 step 4)
            yield from self.charge_cpu(self.p.post_ns)
            c = self.resp_ring.device_push(self.engine, payloads)
            if c.status == RING_FULL:                 # learn what the host freed, retry on the next loop
                yield from self.refresh_ring(self.resp_ring, self.engine, self.p.post_ns)
                return
            if not c.succeeded:
                self.fail(c.status, c.error)
                return
            self._pending.popleft()
            self._free.append(slot)                   # the push copied the payloads: the slot is free
            self.responses += len(payloads)


# --- the memory server ----------------------------------------------------------------------------------------

class MemoryServer(BatchActor):
    """The memory node's CPU executing batches: one :meth:`run` actor per lane (core), each with
    its own QP and CQ; ``cores`` is shared by the lanes. ``requests``: the request ring's MR
    (``slots x max_batch`` records, remote write); ``staging``: a local MR of the same shape for
    responses; ``table``: the table the records address (``VALUE_BYTES`` per key);
    ``remote_resp``: ``(addr, rkey)`` of the DPU's response space."""

    def __init__(self, env, cores: Cores, *, qps, cqs, requests: MR, staging: MR, table: MR,
                 remote_resp: tuple[int, int], cpu_profile, max_batch: int = 128, slots: int = 8):
        super().__init__(env, cores)
        self.qps, self.cqs = list(qps), list(cqs)
        self.requests, self.staging, self.table = requests, staging, table
        self.remote_resp = remote_resp
        self.cpu = cpu_profile
        self.max_batch, self.slots = max_batch, slots
        self.slot_bytes = max_batch * RECORD_BYTES
        self.table_slots = table.length // VALUE_BYTES
        self.batches = self.records = 0
        self._recv_sge = None

    def statistics(self) -> ServerStats:
        return ServerStats(self.batches, self.records, self.records / self.batches if self.batches else 0.0,
                           self.busy_ns, self.status)

    def runs(self, until: int | None = None) -> list:
        """One generator per lane: start each as a process (until ``until``; None: for ever)."""
        return [self.run(lane, until) for lane in range(len(self.qps))]

    def run(self, lane: int, until: int | None = None):
        """Lane ``lane`` until virtual time ``until``; without it for ever, parked on its CQ between
        batches (a parked actor costs nothing and ends no run early: a batch a draining forwarder
        sends after the plan's end is still served)."""
        env = self.env
        qp, cq = self.qps[lane], self.cqs[lane]
        end = env.timeout(max(0, until - env.now)) if until is not None else env.event()
        until = until if until is not None else float("inf")
        while env.now < until and not self.status:
            if not len(cq):
                yield any_of(env, [cq.wait(), end])
                continue
            _, wcs = self._topped(0, cq.poll, 4)
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    return self.fail(FWD_WC_ERROR, f"work completion {wc.wr_id} on QP {wc.qp_num}: "
                                                    f"{wc_status_str(wc.status)}")
                if wc.opcode != IBV_WC_RECV:
                    continue
                slot, n = batch_of_imm(wc.imm_data)
                yield from self.charge_cpu(self.cpu.rpc_handler_ns + self.cpu.local_read_ns_per_line * n)
                self._execute(slot, n)
                base = slot * self.slot_bytes
                write = SendWR(slot, IBV_WR_RDMA_WRITE, 1,
                               [SGE(self.staging.addr + base, n * RECORD_BYTES, self.staging.lkey)], 0)
                addr, rkey = self.remote_resp
                write.set_wr_rdma(rkey, addr + base)
                note = SendWR(slot, IBV_WR_SEND, 0, [], IBV_SEND_SIGNALED, imm_data=batch_imm(slot, n))
                self._topped(0, qp.post_send, [write, note])
                qp.post_recv(RecvWR(slot, 1, [self._recv_sge]))
                self.batches += 1
                self.records += n
        return self.status

    def _execute(self, slot: int, n: int) -> None:
        base = slot * self.slot_bytes
        req, out, table = self.requests.buf, self.staging.buf, self.table.buf
        for j in range(n):
            o = base + j * RECORD_BYTES
            tag = req[o:o + 8]
            op = int.from_bytes(req[o + 8:o + 16].tobytes(), "little")
            key = int.from_bytes(req[o + 16:o + 24].tobytes(), "little")
            t = (key % self.table_slots) * VALUE_BYTES
            out[o:o + 8] = tag
            out[o + 16:o + 24] = req[o + 16:o + 24]
            if op == OP_PUT:
                table[t:t + VALUE_BYTES] = req[o + 24:o + 24 + VALUE_BYTES]
                out[o + 24:o + 24 + VALUE_BYTES] = req[o + 24:o + 24 + VALUE_BYTES]
                status = ST_OK
            elif op == OP_GET:
                out[o + 24:o + 24 + VALUE_BYTES] = table[t:t + VALUE_BYTES]
                status = ST_OK
            else:
                out[o + 24:o + 24 + VALUE_BYTES] = 0
                status = ST_BAD_OP
            out[o + 8:o + 16] = np.frombuffer(status.to_bytes(8, "little"), np.uint8)
            out[o + 24 + VALUE_BYTES:o + RECORD_BYTES] = 0


# --- host side ----------------------------------------------------------------------------------------------

class HostClient:
    """A host thread's end of the two rings: ``submit`` pushes one request record (False if the
    ring is full), ``take`` takes one response (None if there is none). ``thread`` is anything
    with ``cpu(ns)`` (an ``RdmaThread``), charged the ring's local loads and CAS; None: no charge."""

    def __init__(self, req_ring: DmaRing, resp_ring: DmaRing):
        self.req_ring, self.resp_ring = req_ring, resp_ring

    def submit(self, tag: int, op: int, key: int, value: bytes = b"", thread=None) -> bool:
        return self.req_ring.host_push(encode_request(tag, op, key, value), thread)

    def take(self, thread=None) -> Response | None:
        p = self.resp_ring.host_take(thread)
        return None if p is None else decode_response(p)


# --- wiring for a co-located rig --------------------------------------------------------------------------------

@dataclass
class Pipeline:
    """Everything :func:`wire` built: start ``processes(until)`` on the environment."""

    env: object
    forwarder: DpuForwarder
    server: MemoryServer
    client: HostClient
    engine: DmaEngine
    req_ring: DmaRing
    resp_ring: DmaRing
    extra: dict = field(default_factory=dict)

    def processes(self, until: int) -> list:
        env = self.env
        out = [env.process(self.forwarder.run(until), name="dpu.transfer-engine")]
        out += [env.process(g, name=f"mn.server.{i}") for i, g in enumerate(self.server.runs(until))]
        return out


def wire(verbs_host, *, host_node, dpu_node, mem_node, ring_capacity: int = 1024, max_batch: int = 128,
         slots: int = 8, server_cores: int = 4, table_slots: int = 4096, dpu_cores: int = 1,
         req_ring: DmaRing | None = None, resp_ring: DmaRing | None = None,
         record_ns: int | None = None) -> Pipeline:
    """Build the forwarder path between ``host_node``, its DPU ``dpu_node`` and ``mem_node`` in
    one process (setup time, virtual time 0): the two host rings (unless given), the DPU's DMA
    engine, unified buffer and response space, the memory server's request ring, staging buffer
    and table, one RC QP pair per server core. Needs the profile's ``[dpu]`` table."""
    fabric, env = verbs_host.fabric, verbs_host.env
    prof = fabric.profile
    if prof.dpu is None:
        raise ValueError(f"profile {prof.name!r} has no [dpu] table: no Arm cores to run the forwarder on")
    req_ring = req_ring or DmaRing.layout(fabric, host_node, ring_capacity, RECORD_BYTES)
    resp_ring = resp_ring or DmaRing.layout(fabric, host_node, ring_capacity, RECORD_BYTES)
    engine = DmaEngine(verbs_host, dpu_node, host_node)
    shape = slots * max_batch * RECORD_BYTES
    remote_w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    dctx, mctx = Context(verbs_host, dpu_node), Context(verbs_host, mem_node)
    dpd, mpd = PD(dctx), PD(mctx)
    unified, resp_space, dnote = MR(dpd, shape), MR(dpd, shape, remote_w), MR(dpd, 64)
    requests, staging, mnote = MR(mpd, shape, remote_w), MR(mpd, shape), MR(mpd, 64)
    table = MR(mpd, table_slots * VALUE_BYTES)
    dcq = CQ(dctx, 4 * slots * server_cores + 64)
    dqps, mqps, mcqs = [], [], []
    for _ in range(server_cores):
        mcq = CQ(mctx, 4 * slots + 16)
        dqp = QP(dpd, QPInitAttr(qp_type=IBV_QPT_RC, scq=dcq, rcq=dcq))
        mqp = QP(mpd, QPInitAttr(qp_type=IBV_QPT_RC, scq=mcq, rcq=mcq))
        dqp.connect(mqp)
        mqp.connect(dqp)
        dqps.append(dqp)
        mqps.append(mqp)
        mcqs.append(mcq)
    fwd = DpuForwarder(env, Cores(env, dpu_cores, prof.dpu.ghz), engine, req_ring, resp_ring, qps=dqps, cq=dcq,
                       unified=unified, resp_space=resp_space, remote_req=(requests.addr, requests.rkey),
                       dpu_profile=prof.dpu, max_batch=max_batch, slots=slots, record_ns=record_ns)
    srv = MemoryServer(env, Cores(env, server_cores, prof.cpu.ghz), qps=mqps, cqs=mcqs, requests=requests,
                       staging=staging, table=table, remote_resp=(resp_space.addr, resp_space.rkey),
                       cpu_profile=prof.cpu, max_batch=max_batch, slots=slots)
    fwd.post_receives(dnote)
    srv.post_receives(mnote)
    return Pipeline(env, fwd, srv, HostClient(req_ring, resp_ring), engine, req_ring, resp_ring,
                    {"table": table, "unified": unified, "resp_space": resp_space, "requests": requests})


# --- wiring in a rack (one side per process) ------------------------------------------------------------------

#: the well-known QP numbers of the forwarder's lanes: lane k is QP ``FWD_QPN + k`` on the DPU node
#: and on the memory node, so each side connects to the other without an exchange between processes
FWD_QPN = (1 << 40) + 0x46570000


def rack_layout(fabric, *, host, dpu, mem, ring_capacity: int = 1024, max_batch: int = 128, slots: int = 8,
                lanes: int = 4, table_slots: int = 4096) -> dict:
    """Set-up time (``System.setup``, before any node process): the two host rings in ``host``'s
    memory, the unified buffer and response space in ``dpu``'s, the request ring, staging buffer
    and table in ``mem``'s; both device and memory node exposed for RDMA. Returns the plain-data
    layout every side builds its objects from (:func:`dpu_side`, :func:`server_side`, :func:`host_side`)."""
    if max_batch > ring_capacity:
        raise ValueError(f"max_batch {max_batch} exceeds the ring capacity {ring_capacity}")
    shape = slots * max_batch * RECORD_BYTES
    for node in (dpu, mem):
        fabric.expose(node)
    idx = fabric.node_index
    return {
        "host": idx(host), "dpu": idx(dpu), "mem": idx(mem), "max_batch": max_batch, "slots": slots,
        "lanes": lanes, "shape": shape,
        "req_ring": DmaRing.layout(fabric, host, ring_capacity, RECORD_BYTES).base,
        "resp_ring": DmaRing.layout(fabric, host, ring_capacity, RECORD_BYTES).base,
        "unified": fabric.allocate(dpu, shape, align=64), "resp_space": fabric.allocate(dpu, shape, align=64),
        "requests": fabric.allocate(mem, shape, align=64), "staging": fabric.allocate(mem, shape, align=64),
        "table": fabric.allocate(mem, table_slots * VALUE_BYTES, align=64), "table_bytes": table_slots * VALUE_BYTES,
    }


def host_side(fabric, lay: dict) -> HostClient:
    """The host's end: the two rings, attached where :func:`rack_layout` put them."""
    return HostClient(DmaRing.attach(fabric, lay["host"], lay["req_ring"]),
                      DmaRing.attach(fabric, lay["host"], lay["resp_ring"]))


def _lane_qps(pd, node_lanes: int, cq_of):
    return [QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq_of(k), rcq=cq_of(k)), qp_num=FWD_QPN + k)
            for k in range(node_lanes)]


def dpu_side(ctx, lay: dict) -> DpuForwarder:
    """The Transfer Engine on a DPU node (a ``nodes.actors.NodeContext`` of role ``dpu``): its DMA
    engine, the host rings, its buffers and one RC QP per lane connected to the memory node's."""
    fabric = ctx.fabric
    remote_w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    pd = PD(ctx.verbs())
    cq = CQ(ctx.verbs(), 4 * lay["slots"] * lay["lanes"] + 64)
    qps = _lane_qps(pd, lay["lanes"], lambda _k: cq)
    for k, qp in enumerate(qps):
        qp.connect((lay["mem"], FWD_QPN + k))
    client = host_side(fabric, lay)
    unified = MR(pd, lay["shape"], offset=lay["unified"])
    resp_space = MR(pd, lay["shape"], remote_w, offset=lay["resp_space"])
    fwd = DpuForwarder(ctx.env, ctx.cores, ctx.dma, client.req_ring, client.resp_ring, qps=qps, cq=cq,
                       unified=unified, resp_space=resp_space,
                       remote_req=(gaddr(lay["mem"], lay["requests"]), fabric.exposed_key(lay["mem"])),
                       dpu_profile=ctx.profile.dpu, max_batch=lay["max_batch"], slots=lay["slots"])
    fwd.post_receives(MR(pd, 64))
    return fwd


def server_side(ctx, lay: dict) -> MemoryServer:
    """The memory server on a memory node with cores (role ``memory``): a lane (QP, CQ, actor) per
    lane of the layout, on the node's cores."""
    fabric = ctx.fabric
    pd = PD(ctx.verbs())
    cqs = [CQ(ctx.verbs(), 4 * lay["slots"] + 16) for _ in range(lay["lanes"])]
    qps = _lane_qps(pd, lay["lanes"], cqs.__getitem__)
    for k, qp in enumerate(qps):
        qp.connect((lay["dpu"], FWD_QPN + k))
    remote_w = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    srv = MemoryServer(ctx.env, ctx.cores, qps=qps, cqs=cqs,
                       requests=MR(pd, lay["shape"], remote_w, offset=lay["requests"]),
                       staging=MR(pd, lay["shape"], offset=lay["staging"]),
                       table=MR(pd, lay["table_bytes"], offset=lay["table"]),
                       remote_resp=(gaddr(lay["dpu"], lay["resp_space"]), fabric.exposed_key(lay["dpu"])),
                       cpu_profile=ctx.profile.cpu, max_batch=lay["max_batch"], slots=lay["slots"])
    srv.post_receives(MR(pd, 64))
    return srv
