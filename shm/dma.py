"""The DMA engine between a DPU or DPA and its host's memory.

A DPU (ARM cores) or a DPA thread reads and writes its host's memory through a DMA engine, not
through RDMA: no doorbell, no network, one PCIe-class hop priced by the profile's ``[dma]`` section
(latency per access, bandwidth of the engine). The engine is a calendar resource of the device's
node, so DPA threads that DMA at once queue for it. Effects land at the modelled time like verbs:
the copy happens when the data crosses, the event fires when the engine reports completion.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shm import nic
from shm.fabric import REGION_HOST, copy_lines, format_gaddr, gaddr_node, gaddr_offset, gaddr_region, read_lines
from shm.deferred import before_write
from shm.landing import pending_writes_of

_FS_PER_NS = 1_000_000


class DmaError(RuntimeError):
    """A DMA outside the host's memory or the engine's local buffer."""


class DmaStats(NamedTuple):
    reads: int
    writes: int
    bytes: int


class DmaEngine:
    """DMA from node ``device`` (a DPU/DPA node) into node ``host``'s memory."""

    def __init__(self, verbs_host, device, host):
        self.fabric = verbs_host.fabric
        self.env = verbs_host.env
        self.device = self.fabric.node_index(device)
        self.host = self.fabric.node_index(host)
        prof = self.fabric.profile.dma
        self._lat_ps = prof.latency_ns * 1000
        self._fs_per_b = int(round(8_000_000.0 / prof.gbps))
        self.env.limit_lookahead(prof.latency_ns // 2)   # nic.model_dma: an effect >= half the latency away
        self._desc = self.fabric.descriptors[self.device]
        self.reads = self.writes = self.nbytes = 0

    def statistics(self) -> DmaStats:
        return DmaStats(self.reads, self.writes, self.nbytes)

    def _check(self, addr: int, length: int) -> int:
        if gaddr_node(addr) != self.host or gaddr_region(addr) != REGION_HOST:
            raise DmaError(f"DMA to {format_gaddr(addr)}: the engine of node {self.device} reaches only the host "
                           f"memory of node {self.host}")
        off = gaddr_offset(addr)
        size = self.fabric.memory[self.host].host.shape[0]
        if length <= 0 or off + length > size:
            raise DmaError(f"DMA of {length} B at {format_gaddr(addr)} is outside the host memory ({size} B)")
        return off

    def read(self, addr: int, into: np.ndarray, length: int):
        """Copy ``length`` host bytes at global address ``addr`` into ``into`` (a uint8 array of the
        device); returns an event that fires on completion."""
        off = self._check(addr, length)
        if into.shape[0] < length:
            raise DmaError(f"DMA read of {length} B into a buffer of {into.shape[0]} B")
        eff, done = nic.model_dma(self.fabric.table, self._lat_ps, self._fs_per_b, self._desc, self.env.now, length)
        mem = self.fabric.memory[self.host]
        self.env.schedule(int(eff), lambda: read_lines(into, 0, mem.host, off, length, mem.host_locks))
        self.env.effect_at(int(eff), False)
        self.reads += 1
        self.nbytes += length
        return self.env.timeout(int(done) - self.env.now)

    def write(self, addr: int, data) -> object:
        """Copy ``data`` (bytes or uint8 array) to host memory at ``addr``; event on completion."""
        payload = np.array(np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data,
                           dtype=np.uint8)  # the device's buffer may change after posting: take a copy
        length = payload.shape[0]
        off = self._check(addr, length)
        eff, done = nic.model_dma(self.fabric.table, self._lat_ps, self._fs_per_b, self._desc, self.env.now, length)
        mem = self.fabric.memory[self.host]
        def land():
            before_write(self.fabric, self.host)
            copy_lines(mem.host, off, payload, 0, length, mem.host_locks, False)
        self.env.schedule(int(eff), land)
        self.env.effect_at(int(eff))
        pending_writes_of(self.fabric).add(self.host, int(eff), int(eff))   # READs landing meanwhile see it
        self.writes += 1
        self.nbytes += length
        return self.env.timeout(int(done) - self.env.now)
