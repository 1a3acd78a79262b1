"""The DMA engine between a DPU or DPA and its host's memory.

A DPU (ARM cores) or a DPA thread reads and writes its host's memory through a DMA engine, not
through RDMA: no doorbell, no network, one PCIe-class hop priced by the profile's ``[dma]`` section
(latency per access, bandwidth of the engine). The engine is a calendar resource of the device's
node, so DPA threads that DMA at once queue for it. Effects land at the modelled time like verbs:
the copy happens when the data crosses, the event fires when the engine reports completion.

What an engine models (docs/dma-rings.md has the costs and their sources):

* **One calendar per direction.** Writes (device -> host) book ``[dma] gbps`` on the node's
  ``dma`` calendar, reads (host -> device) ``[dma] read_gbps`` on ``dma_rd``: PCIe is full duplex,
  so a read and a write overlap while two writes queue. Before directions were split, a read
  queued behind writes of the same engine; a workload that only reads or only writes times as before.
* **Scatter-gather.** ``read_sg`` / ``write_sg`` take one descriptor of several
  ``(host address, local offset, length)`` elements, priced as one DMA (one latency) carrying the
  sum of the bytes; the elements land in list order at the descriptor's effect time.
* **Completions.** Every post returns a :class:`DmaCompletion`, an env event that fires when the
  engine reports completion (``yield`` it); its ``status`` says whether the DMA was done.
* **Outstanding limit.** At most ``[dma] max_outstanding`` DMAs of one engine are in flight;
  a further post is not refused but starts when the oldest in-flight DMA completes (the engine's
  descriptor ring has that many slots; posting past it waits, as a DOCA/PCIe tag limit would).
* **Aligned words.** An element of 8 bytes at an 8-byte-aligned address is read or written as one
  atomic word (one PCIe TLP), so a host CAS on a state word DMA-written by the device, or a
  device's read of a head/tail word a host thread CASes, never sees a torn value. Longer elements
  land line by line in ascending address order, each 64-byte line under its seqlock.
* **Bad addresses.** ``read_sg``/``write_sg`` return a completion with status ``DMA_BAD_ADDRESS``
  (nothing is copied, no time is booked, the event fires at once); ``read``/``write`` raise
  :class:`DmaError` in the caller, as before. Either way only the caller sees it: no other node's
  memory is touched.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import NamedTuple

import numpy as np

from shm.sim.env import Event
from shm import nic
from shm.atomics import load_acquire, store_release
from shm.fabric import REGION_HOST, copy_lines, format_gaddr, gaddr_node, gaddr_offset, gaddr_region, read_lines
from shm.deferred import before_write
from shm.landing import pending_writes_of

_FS_PER_NS = 1_000_000

DMA_OK = 0
DMA_BAD_ADDRESS = 1     # an element outside the host memory, or a host it cannot reach
DMA_BAD_BUFFER = 2      # an element outside the device's local buffer


class DmaError(RuntimeError):
    """A DMA outside the host's memory or the engine's local buffer."""


class DmaStats(NamedTuple):
    reads: int
    writes: int
    bytes: int


class DmaCompletion(Event):
    """The completion of one posted DMA: an env event (``yield`` it) that fires at ``done_ns`` with
    itself as its value. ``status`` is ``DMA_OK`` or an error (``error`` then says why; the event
    fires at once and nothing was copied)."""

    def __init__(self, env, status: int = DMA_OK, error: str = "", effect_ns: int = -1, done_ns: int = -1,
                 nbytes: int = 0):
        super().__init__(env)
        self.status = status
        self.error = error
        self.effect_ns = effect_ns
        self.done_ns = done_ns
        self.nbytes = nbytes

    @property
    def succeeded(self) -> bool:
        """The DMA was done (``Event.ok`` only says the event did not fail, which it never does)."""
        return self.status == DMA_OK


class DmaEngine:
    """DMA from node ``device`` (a DPU/DPA node) into node ``host``'s memory.

    One engine object lives in the device's process; the calendars it books are the device node's
    (``dma`` for writes, ``dma_rd`` for reads), so every engine object of that node shares them."""

    def __init__(self, verbs_host, device, host):
        self.fabric = verbs_host.fabric
        self.env = verbs_host.env
        self.device = self.fabric.node_index(device)
        self.host = self.fabric.node_index(host)
        prof = self.fabric.profile.dma
        self._lat_ps = prof.latency_ns * 1000
        self._fs_per_b = int(round(8_000_000.0 / prof.gbps))
        self._fs_per_b_rd = int(round(8_000_000.0 / prof.read_gbps))
        self.max_outstanding = prof.max_outstanding
        self._slots: list[int] = []      # when each taken outstanding slot frees (ns), a heap
        self._done: list[int] = []       # completion times (ns) of the DMAs posted, a heap (in_flight)
        self.env.limit_lookahead(prof.latency_ns // 2)   # nic.model_dma: an effect >= half the latency away
        self._desc = self.fabric.descriptors[self.device]
        self.reads = self.writes = self.nbytes = 0
        self.waited = 0          # posts that waited for an outstanding slot
        self.errors = 0          # posts refused with an error status

    def statistics(self) -> DmaStats:
        return DmaStats(self.reads, self.writes, self.nbytes)

    def in_flight(self) -> int:
        """DMAs of this engine posted and not yet complete at ``env.now``."""
        now = self.env.now
        done = self._done
        while done and done[0] <= now:
            heappop(done)
        return len(done)

    # -- checks ------------------------------------------------------------------------------
    def _bad(self, addr: int, length: int) -> str:
        if gaddr_node(addr) != self.host or gaddr_region(addr) != REGION_HOST:
            return (f"DMA to {format_gaddr(addr)}: the engine of node {self.device} reaches only the host "
                    f"memory of node {self.host}")
        off = gaddr_offset(addr)
        size = self.fabric.memory[self.host].host.shape[0]
        if length <= 0 or off + length > size:
            return f"DMA of {length} B at {format_gaddr(addr)} is outside the host memory ({size} B)"
        return ""

    def _check(self, addr: int, length: int) -> int:
        err = self._bad(addr, length)
        if err:
            raise DmaError(err)
        return gaddr_offset(addr)

    def _check_sg(self, elements, buf_len: int) -> tuple[int, str, list]:
        """(status, error, [(host offset, local offset, length)]) of a scatter-gather list."""
        out = []
        if not elements:
            return DMA_BAD_ADDRESS, "an empty scatter-gather list", out
        for addr, loc, length in elements:
            addr, loc, length = int(addr), int(loc), int(length)
            err = self._bad(addr, length)
            if err:
                return DMA_BAD_ADDRESS, err, out
            if loc < 0 or loc + length > buf_len:
                return DMA_BAD_BUFFER, (f"DMA element of {length} B at local offset {loc} is outside the "
                                        f"device buffer ({buf_len} B)"), out
            out.append((gaddr_offset(addr), loc, length))
        return DMA_OK, "", out

    def _refuse(self, status: int, error: str) -> DmaCompletion:
        self.errors += 1
        c = DmaCompletion(self.env, status, error)
        c.succeed(c)
        return c

    # -- timing ------------------------------------------------------------------------------
    def _start(self) -> int:
        """When a DMA posted now starts: now, or when the oldest in-flight DMA completes if the
        engine already has ``max_outstanding`` in flight (that DMA's slot is then taken)."""
        now = self.env.now
        fl = self._slots
        while fl and fl[0] <= now:
            heappop(fl)
        dn = self._done
        while dn and dn[0] <= now:
            heappop(dn)
        if len(fl) < self.max_outstanding:
            return now
        self.waited += 1
        return heappop(fl)

    def _model(self, nbytes: int, write: bool) -> tuple[int, int]:
        start = self._start()
        eff, done = nic.model_dma(self.fabric.table, self._lat_ps, self._fs_per_b if write else self._fs_per_b_rd,
                                  self._desc, start, nbytes, nic.D_DMA if write else nic.D_DMA_RD)
        heappush(self._slots, int(done))
        heappush(self._done, int(done))
        return int(eff), int(done)

    def _complete(self, eff: int, done: int, nbytes: int) -> DmaCompletion:
        c = DmaCompletion(self.env, DMA_OK, "", eff, done, nbytes)
        c.succeed_at(done, c)
        return c

    # -- reads (host -> device) --------------------------------------------------------------
    def read(self, addr: int, into: np.ndarray, length: int) -> DmaCompletion:
        """Copy ``length`` host bytes at global address ``addr`` into ``into`` (a uint8 array of the
        device); returns the completion (an event). A bad address raises :class:`DmaError`."""
        self._check(addr, length)
        if into.shape[0] < length:
            raise DmaError(f"DMA read of {length} B into a buffer of {into.shape[0]} B")
        return self._read(into, [(gaddr_offset(addr), 0, length)], length)

    def read_sg(self, elements, into: np.ndarray) -> DmaCompletion:
        """One DMA descriptor gathering host bytes into the device buffer ``into``: ``elements`` is a
        list of ``(host gaddr, local offset, length)``, copied in list order at the effect time.
        Priced as one DMA of the summed length. A bad element: a completion with an error status."""
        status, err, els = self._check_sg(elements, into.shape[0])
        if status != DMA_OK:
            return self._refuse(status, err)
        return self._read(into, els, sum(e[2] for e in els))

    def _read(self, into, els, total) -> DmaCompletion:
        eff, done = self._model(total, False)
        mem = self.fabric.memory[self.host]
        def land():
            for off, loc, length in els:
                if length == 8 and off & 7 == 0:   # one aligned word: read atomically (one PCIe TLP)
                    into[loc:loc + 8] = np.frombuffer(int(load_acquire(mem.host64, off >> 3)).to_bytes(8, "little"),
                                                      np.uint8)
                else:
                    read_lines(into, loc, mem.host, off, length, mem.host_locks)
        self.env.schedule(eff, land)
        self.env.effect_at(eff, False)
        self.reads += 1
        self.nbytes += total
        return self._complete(eff, done, total)

    # -- writes (device -> host) -------------------------------------------------------------
    def write(self, addr: int, data) -> DmaCompletion:
        """Copy ``data`` (bytes or uint8 array) to host memory at ``addr``; returns the completion
        (an event). A bad address raises :class:`DmaError`."""
        payload = _copy_of(data)  # the device's buffer may change after posting: take a copy
        length = payload.shape[0]
        self._check(addr, length)
        return self._write(payload, [(gaddr_offset(addr), 0, length)], length)

    def write_sg(self, elements, data) -> DmaCompletion:
        """One DMA descriptor scattering bytes of the device buffer ``data`` into host memory:
        ``elements`` is a list of ``(host gaddr, local offset, length)``; they land in list order at
        the effect time (a later element is never visible before an earlier one, as PCIe posted
        writes). Priced as one DMA of the summed length. A bad element: an error status."""
        payload = _copy_of(data)
        status, err, els = self._check_sg(elements, payload.shape[0])
        if status != DMA_OK:
            return self._refuse(status, err)
        return self._write(payload, els, sum(e[2] for e in els))

    def _write(self, payload, els, total) -> DmaCompletion:
        eff, done = self._model(total, True)
        mem = self.fabric.memory[self.host]
        def land():
            before_write(self.fabric, self.host)
            for off, loc, length in els:
                if length == 8 and off & 7 == 0:   # one aligned word: stored atomically (host CAS sees old or new)
                    store_release(mem.host64, off >> 3, int.from_bytes(payload[loc:loc + 8].tobytes(), "little"))
                else:
                    copy_lines(mem.host, off, payload, loc, length, mem.host_locks, False)
        self.env.schedule(eff, land)
        self.env.effect_at(eff)
        # READs landing meanwhile see it (the span of the bytes it writes)
        pending_writes_of(self.fabric).add(self.host, eff, eff, min((e[0] for e in els), default=0),
                                                  max((e[0] + e[2] for e in els), default=0))
        self.writes += 1
        self.nbytes += total
        return self._complete(eff, done, total)


def _copy_of(data) -> np.ndarray:
    return np.array(np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data,
                    dtype=np.uint8)
