"""``dmrack bench devices`` (cluster/experiments/devices.py): each part on a tiny configuration, in
virtual time (exact), measured through the device models and checked against what they define."""

from __future__ import annotations

import pytest

from cluster.experiments import devices
from cluster.experiments.registry import find
from shm.profile import load_profile

P = load_profile("bf3")


def test_a_pings_core_time_follows_the_profiles_dpa_packet_cycles():
    # the packet path is the profile's knob (an assumption `dmrack sensitivity` varies), not a constant
    from shm.profile import overridden
    with overridden({"bf3": {"dpa.packet_cycles": 2 * P.dpa.packet_cycles}}):
        one = devices.udp_ping(1, client_nodes=2, warmup=5_000, window=10_000)
    ping_ns = round(2 * P.dpa.packet_cycles / P.dpa.ghz)
    assert one["mops"] > 0
    assert one["core_util"] == pytest.approx(one["mops"] * ping_ns / 1e3, rel=0.05)
    shipped = devices.udp_ping(1, client_nodes=2, warmup=5_000, window=10_000)
    # per ping, the core is held half as long with the shipped cycles
    assert shipped["core_util"] / shipped["mops"] == pytest.approx(one["core_util"] / one["mops"] / 2, rel=0.05)


def test_dpa_load_costs_are_memory_ns_on_a_miss_and_each_level_on_a_hit():
    c = devices.dpa_load_costs()
    # the model's path for a miss is memory_ns alone (no lookup cost added per level)
    assert c == {"miss": P.dpa.memory_ns, "L1 hit": P.dpa.l1_ns, "L2 hit": P.dpa.l2_ns, "L3 hit": P.dpa.l3_ns}


def test_dma_read_is_latency_plus_bytes_over_the_read_bandwidth():
    ns = devices.dma_read_ns(64)
    assert ns == pytest.approx(P.dma.latency_ns + 64 * 8 / P.dma.read_gbps, abs=2)
    small = devices.dma_read_gbps(64, 16)
    large = devices.dma_read_gbps(65536, 16)
    assert small < large <= P.dma.read_gbps * 1.001      # large reads approach the engine's link rate
    assert large > 0.8 * P.dma.read_gbps


def test_host_copy_runs_at_the_profile_rate_however_the_threads_share_it():
    for threads in (1, 4):
        assert devices.host_copy_mb_per_s(4_000_000, threads) == pytest.approx(P.dpa.host_copy_mb_per_s, rel=0.01)


def test_udp_ping_grows_with_threads_and_stops_at_the_nic_receive_bound():
    one = devices.udp_ping(1, client_nodes=2, warmup=5_000, window=10_000)
    four = devices.udp_ping(4, client_nodes=2, warmup=5_000, window=10_000)
    assert one["mops"] > 0 and one["drops"] == 0
    assert four["mops"] > 3 * one["mops"]
    # a DPA thread's core holds it for dpa.packet_cycles per ping, no longer
    ping_ns = round(P.dpa.packet_cycles / P.dpa.ghz)
    assert four["core_util"] == pytest.approx(four["mops"] / 4 * ping_ns / 1e3, rel=0.05)
    many = devices.udp_ping(64, client_nodes=4, warmup=10_000, window=10_000)
    bound = P.nic.responder_units * 1e3 / P.nic.resp_recv_ns
    assert many["mops"] == pytest.approx(bound, rel=0.02)


def test_transfer_engine_moves_records_with_no_host_qp():
    te = devices.transfer_engine(warmup=10_000, window=60_000, max_batch=64, slots=4, ring=512)
    assert te["status"] == 0 and te["host_qps"] == 0
    assert te["mean_batch"] > 32                       # a full ring: batches of many records
    assert te["mops"] > 1 and 0 < te["dpu_util"] <= 1 and 0 < te["server_util"] <= 1


def test_host_to_dpu_is_the_sequential_loop_of_poll_dma_and_headers():
    """PD3 Fig. A.1a's path: a batch takes the poll post, the DMA read (latency, then the bytes at
    the engine's read bandwidth), the free write's post and a header read per record."""
    n = 64
    a = devices.transfer_to_dpu(warmup=10_000, window=100_000, max_batch=n, ring=512)
    assert a["mean_batch"] == n
    d, dma = P.dpu, P.dma
    wire_ns = n * devices.RECORD_BYTES * 8 / dma.read_gbps
    batch_ns = d.poll_ns + d.post_ns + dma.latency_ns + wire_ns + d.post_ns + n * d.record_ns
    assert a["mops"] == pytest.approx(n * 1e3 / batch_ns, rel=0.05)
    assert a["dpu_util"] == pytest.approx((2 * d.post_ns + d.poll_ns + n * d.record_ns) / batch_ns, rel=0.05)


def test_host_issued_writes_cost_the_host_cpu_of_each_post():
    h = devices.host_rdma_writes(4, depth=8, warmup=10_000, window=40_000)
    assert h["mops"] > 0 and 0 < h["host_cores_busy"] <= 4
    per_write = h["host_cores_busy"] * 1e3 / h["mops"]
    assert per_write >= P.cpu.post_ns + P.cpu.wqe_ns  # one post and one WQE per WRITE, at least


def test_registered_with_its_parts():
    exp = find("bench", "devices")
    assert exp.parts == ("dpa-memory", "dma", "host-copy", "udp-ping", "dpu-forwarder")


def test_cli_quick_only_exits_0(capsys):
    from cluster.cli import main
    assert main(["bench", "devices", "--quick", "--only", "dpa-memory,dma", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "465" in out and "910" in out
