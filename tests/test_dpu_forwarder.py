"""The DPU forwarder (nodes/services/dpu_forwarder.py, PD3's Transfer Engine) on a tiny co-located
rig: host0, its DPU dpu0 (sharing host0's NIC) and a memory node mn0, profile bf3."""

from __future__ import annotations

import pytest

from cluster.experiments.bench_verbs import FabricRig
from nodes.services.dpu_forwarder import (
    FWD_OK, OP_GET, OP_PUT, ST_BAD_OP, ST_OK, ForwarderStats, VALUE_BYTES, wire,
)
from shm.dma import DMA_BAD_ADDRESS
from shm.dmaring import DmaRing
from shm.fabric import NodeSpec
from shm.profile import load_profile

P = load_profile("bf3")


def _rig():
    return FabricRig(P, [NodeSpec("host0", "compute", 8 << 20), NodeSpec("dpu0", "dpu", 4 << 20, nic_of="host0"),
                         NodeSpec("mn0", "memory", 8 << 20)])


class Tally:
    """A host thread's CPU, counted but not delaying anyone (the ring's host operations call cpu(ns))."""

    def __init__(self):
        self.ns = 0

    def cpu(self, ns):
        self.ns += ns


def _run(rig, pl, requests, until, thread=None, drain_every=100):
    """Feed ``requests`` ((tag, op, key, value) ...) as fast as the ring takes them; collect responses."""
    env = rig.env
    got = []

    def feeder():
        i = 0
        while i < len(requests) and env.now < until:
            while i < len(requests) and pl.client.submit(*requests[i], thread=thread):
                i += 1
            yield 50

    def drain():                      # on a little past the end: the last DMA writes land after it
        while env.now < until + 5_000:
            while (r := pl.client.take(thread)) is not None:
                got.append(r)
            yield drain_every

    env.process(feeder())
    env.process(drain())
    procs = pl.processes(until)
    env.run(until=until + 10_000)
    return got, procs


def test_records_go_through_and_come_back_with_their_contents():
    with _rig() as rig:
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=64, max_batch=16,
                  slots=4, server_cores=2, table_slots=256)
        puts = [(k, OP_PUT, 1000 + k, f"value-{k}".encode()) for k in range(100)]
        got, _ = _run(rig, pl, puts, 100_000)
        assert sorted(r.tag for r in got) == list(range(100))
        assert all(r.status == ST_OK and r.value.rstrip(b"\0") == f"value-{r.tag}".encode() and r.key == 1000 + r.tag
                   for r in got)
        # the table holds what was put; a later run of GETs reads it back through the same path
        table = pl.extra["table"].buf
        k = 7
        assert table[((1000 + k) % 256) * VALUE_BYTES:][:7].tobytes() == b"value-7"
        gets = [(500 + k, OP_GET, 1000 + k) for k in range(0, 100, 3)] + [(999, 9, 1)]
        got, _ = _run(rig, pl, gets, rig.env.now + 100_000)
        by_tag = {r.tag: r for r in got}
        assert set(by_tag) == {500 + k for k in range(0, 100, 3)} | {999}
        for k in range(0, 100, 3):
            assert by_tag[500 + k].value.rstrip(b"\0") == f"value-{k}".encode()
        assert by_tag[999].status == ST_BAD_OP
        s = pl.forwarder.statistics()
        assert isinstance(s, ForwarderStats) and s.status == FWD_OK
        assert s.records == s.responses == 100 + len(gets)
        assert pl.server.statistics().records == s.records


def test_batches_grow_under_load_and_stay_within_max_batch():
    with _rig() as rig:
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=256, max_batch=32,
                  slots=4, server_cores=2)
        reqs = [(k, OP_PUT, k, b"x") for k in range(2000)]
        got, _ = _run(rig, pl, reqs, 60_000)
        s = pl.forwarder.statistics()
        assert len(got) == s.responses > 500
        assert s.mean_batch > 8          # a full ring: each DMA poll takes many records at once
        assert s.mean_batch <= 32
        assert s.dma_bytes > 0 and s.rdma_bytes == 64 * s.records


def test_no_host_cpu_on_the_transfer_path():
    with _rig() as rig:
        host_thread = Tally()
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=128, max_batch=16,
                  slots=4, server_cores=2)
        got, procs = _run(rig, pl, [(k, OP_PUT, k, b"y") for k in range(300)], 60_000, thread=host_thread)
        assert len(got) == 300
        host = rig.fabric.node_index("host0")
        # no verbs on the host: every QP is the DPU's or the memory node's
        assert all(node != host for node, _ in rig.host.qps)
        # the forwarder's process charged exactly its Arm core's work; the servers theirs
        fwd_proc, srv_procs = procs[0], procs[1:]
        assert fwd_proc.statistics().charged_ns == pl.forwarder.statistics().busy_ns > 0
        assert sum(p.statistics().charged_ns for p in srv_procs) == pl.server.statistics().busy_ns > 0
        # the host thread paid only for its own pushes and takes (local CAS and line reads)
        cpu = P.cpu
        per_push = cpu.local_cas_ns + cpu.local_read_ns_per_line
        assert 300 * per_push <= host_thread.ns < 300 * (2 * per_push + 4 * cpu.local_cas_ns) + 10_000


def test_a_ring_outside_the_engines_host_is_an_error_status_not_a_crash():
    with _rig() as rig:
        bad = DmaRing.layout(rig.fabric, "mn0", 64, 64)       # the DPU's engine reaches host0 only
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=64, max_batch=16,
                  slots=2, server_cores=1, req_ring=bad)
        procs = pl.processes(20_000)
        rig.env.run(until=30_000)
        assert pl.forwarder.statistics().status == DMA_BAD_ADDRESS
        assert "reaches only the host memory" in pl.forwarder.error
        assert not procs[0].is_alive and procs[0].value == DMA_BAD_ADDRESS


def test_wire_refuses_a_profile_without_a_dpu_and_a_batch_larger_than_the_response_ring():
    with _rig() as rig:
        with pytest.raises(ValueError, match="response ring's capacity"):
            wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=16, max_batch=32)
    prof = load_profile("cx6-200g")
    with FabricRig(prof, [NodeSpec("host0"), NodeSpec("dpu0", "dpu", 1 << 20, nic_of="host0"),
                          NodeSpec("mn0", "memory")]) as rig:
        with pytest.raises(ValueError, match=r"no \[dpu\] table"):
            wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0")


def test_a_full_response_ring_holds_responses_back_until_the_host_takes_some():
    with _rig() as rig:
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=32, max_batch=16,
                  slots=4, server_cores=2)
        got, _ = _run(rig, pl, [(k, OP_PUT, k, b"z") for k in range(200)], 150_000, drain_every=5_000)
        assert sorted(r.tag for r in got) == list(range(200))
        assert pl.resp_ring.statistics().refused > 0      # the forwarder found it full and waited
        assert pl.forwarder.statistics().status == FWD_OK
