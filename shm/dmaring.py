"""DMA-written rings: a producer/consumer ring in a host's modelled memory, one end on a device.

A DPU or DPA talks to its host through rings in host memory that its DMA engine writes or reads
(PD3's request/response rings and Loading Zone, DPA-Store's patch and stitch queues). This module
is that ring, in one concept used in two directions:

* **device -> host** (``device_push`` / ``host_take``): the device DMA-writes records and the head
  word; host threads take records from local memory, several at once, each record with one local
  CAS on its state word (PD3's ``CheckAndReturn``), and free it.
* **host -> device** (``host_push`` / ``device_poll``): host threads write records into local
  memory (claiming a sequence number with one CAS on the head word); the device DMA-reads a window
  of records, keeps the ready ones in order, and DMA-writes their state words back to EMPTY and the
  tail word.

It is *not* :mod:`shm.ring` (a transport between emulator processes that costs nothing in virtual
time): this ring lives in the modelled memory of a node (``fabric.memory[host].host``), every device
access is a priced DMA (:class:`shm.dma.DmaEngine`) landing at its modelled time, and host accesses
are local loads, stores and CAS that the caller's thread is charged for (``[cpu] local_cas_ns``,
``local_read_ns_per_line``).

Layout (``base`` is 64-byte aligned; all words little-endian uint64)::

    base+0    line 0: MAGIC, capacity, record_bytes, 0...      (written once by layout())
    base+64   line 1: head   next sequence number a producer publishes
    base+128  line 2: tail   oldest sequence number not yet freed (all below it are free)
    base+192  line 3: cursor host consumers' shared hint: the next sequence to try to take
    base+256  record 0 | record 1 | ... | record capacity-1       (record_bytes each)

    record (record_bytes, a multiple of 8, >= 16):
        payload (record_bytes - 8 B, zero-padded) | state word (last 8 B)
    state word = seq << 2 | st, st in EMPTY 0, READY 1, TAKEN 2

Slot ``i`` starts as ``EMPTY(i)``: it waits for sequence number ``i``. Sequence ``c`` goes to slot
``c % capacity``; the producer writes it only when the slot reads ``EMPTY(c)``, i.e. when
``c - capacity`` has been taken and freed, so nothing is ever overwritten; a producer that finds no
room gets ``RING_FULL`` (device) or ``False`` (host). Because the state carries the sequence
number, a stale cursor or a slot from the previous lap is never mistaken for a fresh record (no ABA).

Why the state word is *last*: a device write lands line by line in ascending address order (PCIe
posted writes), so a record's state word becomes READY only after its payload is in memory; a
host thread that sees ``READY(c)`` and takes it reads a whole payload. The device reads a record as
two scatter-gather elements, state word first, then payload: what it sees READY was written before.
State, head and tail words are single aligned 8-byte DMA elements, which the engine moves atomically.

Ordering of frees (device -> host): takers free their slots in any order; after freeing, a taker
advances ``tail`` over every consecutive freed slot with CAS (anyone can help), so ``tail`` only
passes a slot once it is free. The device learns ``tail`` by DMA-reading it (``device_refresh``);
its view only lags, so it refuses early but never overwrites.

One device end per ring: the device's cursor (``head`` it publishes next, the ``tail`` it last
saw, the next sequence it polls) lives in the :class:`DmaRing` object of the device's process.
Host ends may be any number of threads in any processes (:meth:`DmaRing.attach`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shm.atomics import cas, load_acquire, store_release
from shm.dma import DmaCompletion
from shm.fabric import REGION_HOST, copy_lines, gaddr, read_lines

MAGIC = 0x444D41524E47_0001      # "DMARNG", version 1
HEADER_BYTES = 256
W_MAGIC, W_CAPACITY, W_RECORD = 0, 1, 2
W_HEAD, W_TAIL, W_CURSOR = 8, 16, 24       # word indices from base: lines 1, 2, 3

EMPTY, READY, TAKEN = 0, 1, 2

# statuses of ring completions besides the engine's (shm.dma.DMA_OK, DMA_BAD_*)
RING_FULL = 16          # device_push: no room as far as the device knows (device_refresh, retry)
RING_BUSY = 17          # device_poll: a poll of this ring is still in flight
RING_BAD_RECORD = 18    # device_push: a record longer than payload_bytes, or no records


def _word(seq: int, st: int) -> int:
    return (seq << 2) | st


class RingStats(NamedTuple):
    pushed: int      # records published by this object's producer end(s)
    taken: int       # records taken by this object's consumer end(s)
    refused: int     # pushes refused because the ring was full


class HostRing:
    """What every ring in a host's memory shares with this one (:class:`DmaRing`, and PD3's
    Loading Zone, ``nodes.systems.pd3.loading_zone``): a header at ``base`` whose line 1 holds the
    producer's Head (word :data:`W_HEAD`) and line 2 the consumer's Tail (:data:`W_TAIL`), each
    alone on its cache line; the host reads them with a load-acquire, a device addresses them by
    their global address. One declaration of those words and their accessors for both rings."""

    def __init__(self, fabric, host, base: int):
        self.fabric = fabric
        self.host = fabric.node_index(host)
        self.base = base
        self._mem = fabric.memory[self.host]
        self._w0 = base >> 3

    def gaddr_of(self, word: int) -> int:
        """Global address of header word ``word`` (W_HEAD, W_TAIL, ...)."""
        return gaddr(self.host, self.base + 8 * word)

    def head(self) -> int:
        return int(load_acquire(self._mem.host64, self._w0 + W_HEAD))

    def tail(self) -> int:
        return int(load_acquire(self._mem.host64, self._w0 + W_TAIL))


class DmaRing(HostRing):
    """A ring of ``capacity`` records of ``record_bytes`` at offset ``base`` of node ``host``'s memory."""

    def __init__(self, fabric, host, base: int, capacity: int, record_bytes: int):
        if base % 64:
            raise ValueError(f"a DMA ring's base must be 64-byte aligned, got {base}")
        if capacity < 1:
            raise ValueError(f"a DMA ring needs capacity >= 1, got {capacity}")
        if record_bytes < 16 or record_bytes % 8:
            raise ValueError(f"record_bytes must be a multiple of 8 and >= 16, got {record_bytes}")
        super().__init__(fabric, host, base)
        self.capacity = capacity
        self.record_bytes = record_bytes
        self.payload_bytes = record_bytes - 8
        mem = self._mem
        if base + self.bytes_needed(capacity, record_bytes) > mem.host.shape[0]:
            raise ValueError(f"a DMA ring of {self.bytes_needed(capacity, record_bytes)} B at {base} does not "
                             f"fit node {self.host}'s memory ({mem.host.shape[0]} B)")
        # the device end (one per ring, in the device's process)
        self._dev_head = 0       # next sequence the device publishes
        self._dev_tail = 0       # the tail it last read
        self._dev_next = 0       # next sequence it polls (host -> device)
        self._polling = False
        self.pushed = self.taken = self.refused = 0

    # -- creation ---------------------------------------------------------------------------
    @staticmethod
    def bytes_needed(capacity: int, record_bytes: int) -> int:
        return HEADER_BYTES + capacity * record_bytes

    @classmethod
    def layout(cls, fabric, host, capacity: int, record_bytes: int = 64) -> "DmaRing":
        """Allocate and initialise a ring in node ``host``'s memory (every slot EMPTY of its first
        lap, head = tail = cursor = 0); setup time, before any end uses it."""
        base = fabric.allocate(host, cls.bytes_needed(capacity, record_bytes), region=REGION_HOST, align=64)
        ring = cls(fabric, host, base, capacity, record_bytes)
        m64 = ring._mem.host64
        w0 = ring._w0
        m64[w0:w0 + HEADER_BYTES // 8] = 0
        m64[w0 + W_MAGIC], m64[w0 + W_CAPACITY], m64[w0 + W_RECORD] = MAGIC, capacity, record_bytes
        for i in range(capacity):
            m64[ring._state_word(i)] = _word(i, EMPTY)
        return ring

    @classmethod
    def attach(cls, fabric, host, base: int) -> "DmaRing":
        """The ring laid out at ``base`` of ``host`` (e.g. by another process)."""
        i = fabric.node_index(host)
        m64 = fabric.memory[i].host64
        if int(m64[(base >> 3) + W_MAGIC]) != MAGIC:
            raise ValueError(f"no DMA ring at offset {base} of node {i}")
        return cls(fabric, host, base, int(m64[(base >> 3) + W_CAPACITY]), int(m64[(base >> 3) + W_RECORD]))

    # -- addresses --------------------------------------------------------------------------
    def _slot_off(self, seq: int) -> int:
        return self.base + HEADER_BYTES + (seq % self.capacity) * self.record_bytes

    def _state_word(self, seq: int) -> int:
        return (self._slot_off(seq) + self.record_bytes - 8) >> 3

    # -- host side: local memory ------------------------------------------------------------
    def depth(self) -> int:
        """Records published and not yet freed, as host memory shows them now."""
        return self.head() - self.tail()

    def _charge(self, thread, cas_ops: int, lines: int) -> None:
        if thread is not None:
            cpu = self.fabric.profile.cpu
            thread.cpu(cas_ops * cpu.local_cas_ns + lines * cpu.local_read_ns_per_line)

    def host_take(self, thread=None) -> bytes | None:
        """Take the oldest ready record (device -> host): its payload, or None if the ring is empty.
        Several threads may take at once; each record goes to exactly one (one CAS on its state
        word). ``thread`` (anything with ``cpu(ns)``, e.g. an RdmaThread) is charged the local
        reads and CAS."""
        m64 = self._mem.host64
        cur = self._w0 + W_CURSOR
        cas_ops = 0
        lines = 1
        while True:
            c = int(load_acquire(m64, cur))
            sw = self._state_word(c)
            w = int(load_acquire(m64, sw))
            seq, st = w >> 2, w & 3
            if seq < c or (seq == c and st == EMPTY):
                self._charge(thread, cas_ops, lines)
                return None                                   # not published yet: empty
            if seq == c and st == READY:
                cas_ops += 1
                if int(cas(m64, sw, w, _word(c, TAKEN))) != w:
                    continue                                  # another thread took it
                cas(m64, cur, c, c + 1)                       # move the hint on (anyone may)
                off = self._slot_off(c)
                out = np.empty(self.payload_bytes, np.uint8)
                read_lines(out, 0, self._mem.host, off, self.payload_bytes, self._mem.host_locks)
                lines += (self.payload_bytes + 63) // 64
                # free: EMPTY of the next lap (a plain store: only the taker writes the word now)
                store_release(m64, sw, _word(c + self.capacity, EMPTY))
                cas_ops += self._advance_tail()
                self.taken += 1
                self._charge(thread, cas_ops, lines)
                return out.tobytes()
            cas_ops += 1
            cas(m64, cur, c, c + 1)                           # taken or freed already: the hint is stale

    def _advance_tail(self) -> int:
        """Move ``tail`` over every consecutive freed slot; returns the CAS count."""
        m64 = self._mem.host64
        tw = self._w0 + W_TAIL
        n = 0
        while True:
            t = int(load_acquire(m64, tw))
            if int(load_acquire(m64, self._state_word(t))) != _word(t + self.capacity, EMPTY):
                return n
            n += 1
            cas(m64, tw, t, t + 1)

    def host_push(self, record: bytes, thread=None) -> bool:
        """Publish one record (host -> device): False if the ring is full (the device has not freed
        the slot yet) -- nothing is overwritten. Several threads may push at once (one CAS on head)."""
        if len(record) > self.payload_bytes:
            raise ValueError(f"a record of {len(record)} B does not fit {self.payload_bytes} B of payload")
        m64 = self._mem.host64
        hw = self._w0 + W_HEAD
        cas_ops = 0
        while True:
            h = int(load_acquire(m64, hw))
            if int(load_acquire(m64, self._state_word(h))) != _word(h, EMPTY):
                self.refused += 1
                self._charge(thread, cas_ops, 1)
                return False
            cas_ops += 1
            if int(cas(m64, hw, h, h + 1)) == h:
                break
        buf = np.zeros(self.record_bytes, np.uint8)
        buf[:len(record)] = np.frombuffer(bytes(record), np.uint8)
        buf[-8:] = np.frombuffer(_word(h, READY).to_bytes(8, "little"), np.uint8)
        # payload then state word, ascending, each line under its seqlock
        copy_lines(self._mem.host, self._slot_off(h), buf, 0, self.record_bytes, self._mem.host_locks, False)
        self.pushed += 1
        self._charge(thread, cas_ops, (self.record_bytes + 63) // 64)
        return True

    # -- device side: DMA -------------------------------------------------------------------
    def _refuse(self, engine, status: int, error: str) -> DmaCompletion:
        c = DmaCompletion(engine.env, status, error)
        c.records = []
        c.succeed(c)
        return c

    def device_push(self, engine, records) -> DmaCompletion:
        """DMA-write ``records`` (payloads of at most ``payload_bytes``) and the new head as one
        scatter-gather descriptor. Returns its completion; status ``RING_FULL`` (nothing written)
        if they do not all fit in the room the device knows of (see :meth:`device_refresh`)."""
        n = len(records)
        if n == 0 or any(len(r) > self.payload_bytes for r in records):
            return self._refuse(engine, RING_BAD_RECORD, f"{n} records, payload at most {self.payload_bytes} B")
        h = self._dev_head
        if h + n - self._dev_tail > self.capacity:
            self.refused += 1
            return self._refuse(engine, RING_FULL, f"ring full: head {h}, tail seen {self._dev_tail}, "
                                                    f"{n} more, capacity {self.capacity}")
        rb = self.record_bytes
        buf = np.zeros(n * rb + 8, np.uint8)
        elements = []
        run_start = 0
        for k, r in enumerate(records):
            o = k * rb
            buf[o:o + len(r)] = np.frombuffer(bytes(r), np.uint8)
            buf[o + rb - 8:o + rb] = np.frombuffer(_word(h + k, READY).to_bytes(8, "little"), np.uint8)
            if k == n - 1 or (h + k + 1) % self.capacity == 0:      # end of a contiguous run
                elements.append((gaddr(self.host, self._slot_off(h + run_start)), run_start * rb,
                                 (k + 1 - run_start) * rb))
                run_start = k + 1
        buf[n * rb:] = np.frombuffer((h + n).to_bytes(8, "little"), np.uint8)
        elements.append((self.gaddr_of(W_HEAD), n * rb, 8))
        c = engine.write_sg(elements, buf)
        if c.succeeded:
            self._dev_head = h + n
            self.pushed += n
        return c

    def device_refresh(self, engine) -> DmaCompletion:
        """DMA-read the tail word; when the completion fires the device knows the room freed so far."""
        buf = np.zeros(8, np.uint8)
        c = engine.read_sg([(self.gaddr_of(W_TAIL), 0, 8)], buf)
        if c.succeeded:
            def seen(_ev):
                t = int.from_bytes(buf.tobytes(), "little")
                if t > self._dev_tail:
                    self._dev_tail = t
            c.callbacks.append(seen)
        return c

    def device_poll(self, engine, max_records: int | None = None) -> DmaCompletion:
        """DMA-read up to ``max_records`` slots from the device's cursor (one descriptor, each slot
        state word first, then payload). The completion's ``records`` (set when it fires) are the
        payloads of the consecutive READY records, in order; their slots are freed by one
        DMA write of their state words and the tail, posted at that time. Status ``RING_BUSY`` if
        a poll of this ring is still in flight."""
        if self._polling:
            return self._refuse(engine, RING_BUSY, "a poll of this ring is in flight")
        k = self.capacity if max_records is None else max(1, min(max_records, self.capacity))
        rb = self.record_bytes
        start = self._dev_next
        buf = np.zeros(k * rb, np.uint8)
        elements = []
        for j in range(k):
            off = self._slot_off(start + j)
            elements.append((gaddr(self.host, off + rb - 8), j * rb, 8))            # state word first
            elements.append((gaddr(self.host, off), j * rb + 8, self.payload_bytes))
        c = engine.read_sg(elements, buf)
        c.records = []
        if not c.succeeded:
            return c
        self._polling = True

        def parse(_ev):
            self._polling = False
            got = []
            for j in range(k):
                w = int.from_bytes(buf[j * rb:j * rb + 8].tobytes(), "little")
                if w != _word(start + j, READY):
                    break
                got.append(buf[j * rb + 8:(j + 1) * rb].tobytes())
            c.records = got
            if not got:
                return
            n = len(got)
            self._dev_next = start + n
            self.taken += n
            rel = np.zeros(8 * (n + 1), np.uint8)
            els = []
            for j in range(n):
                rel[8 * j:8 * j + 8] = np.frombuffer(_word(start + j + self.capacity, EMPTY).to_bytes(8, "little"),
                                                     np.uint8)
                els.append((gaddr(self.host, self._slot_off(start + j) + rb - 8), 8 * j, 8))
            rel[8 * n:] = np.frombuffer((start + n).to_bytes(8, "little"), np.uint8)
            els.append((self.gaddr_of(W_TAIL), 8 * n, 8))
            engine.write_sg(els, rel)     # frees the slots when it lands; nobody needs to wait for it

        c.callbacks.append(parse)
        return c

    def statistics(self) -> RingStats:
        return RingStats(self.pushed, self.taken, self.refused)
