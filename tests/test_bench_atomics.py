"""``dmrack bench verbs --only atomics``: the contention model's own numbers (virtual time, so exact).

Same-address CAS in host memory saturates at one atomic per ``nic.atomic_slot_ns`` (the PCIe
read-modify-write the NIC holds the address for) however many clients there are, unless the
NIC-wide atomic rate (``atomic_units`` per ``atomic_unit_ns``) is lower; in NIC device
memory the address is held for ``nic.device_memory_ns`` only (shorter, so same-address CAS runs
several times faster); one client gets one CAS per round trip.
"""

from __future__ import annotations

import pytest

from cluster.experiments.bench_verbs import Rig, _atomic_clients
from shm.fabric import REGION_DEVICE, REGION_HOST, gaddr
from shm.profile import load_profile


def same_address(pname: str, clients: int, region: int) -> float:
    with Rig(load_profile(pname), 4, 1, mem_bytes=1 << 20) as rig:
        a = gaddr(rig.mns[0], rig.fabric.allocate(rig.mns[0], 8, region=region), region)
        return _atomic_clients(rig, clients=clients, op="cas", address=lambda rng: a, warmup=20_000,
                               window=40_000)


@pytest.mark.parametrize("pname", ["cx3-56g", "cx5-100g"])
def test_same_address_cas_saturates_at_one_per_slot_time(pname):
    nic = load_profile(pname).nic
    bound = min(1e3 / nic.atomic_slot_ns, nic.atomic_units * 1e3 / nic.atomic_unit_ns)
    assert same_address(pname, 32, REGION_HOST) == pytest.approx(bound, rel=0.02)
    assert same_address(pname, 1, REGION_HOST) < 0.5 * bound              # one per round trip


def test_device_memory_cas_outruns_host_memory_under_contention():
    assert same_address("cx5-100g", 64, REGION_DEVICE) > 2 * same_address("cx5-100g", 64, REGION_HOST)


def test_spinning_on_a_lock_fills_its_address_slot_with_failed_cas():
    """One lock, 8 clients spinning: every failed CAS holds the lock word's address slot as a
    successful one does, so acquisitions x (1 + failed CASes per acquisition) is the same-address
    CAS rate; the holder's READ and WRITE + unlock set the acquisition rate."""
    from cluster.experiments.bench_verbs import _lock_clients
    nic = load_profile("cx5-100g").nic
    with Rig(load_profile("cx5-100g"), 4, 1, mem_bytes=1 << 20) as rig:
        mops, fails, starved, _ = _lock_clients(rig, clients=8, region=REGION_HOST, warmup=20_000,
                                               window=400_000)
    assert mops * (1 + fails) == pytest.approx(1e3 / nic.atomic_slot_ns, rel=0.05)
    # which clients win is a matter of phase (a releaser's next CAS follows its unlock closely), so
    # some may starve in a deterministic rack: not asserted (docs/contention.md, the locks table)
    assert 0.1 < mops < 0.5 and 0 <= starved < 8


def test_atomics_queued_on_a_hot_address_hold_processing_units_other_requests_need():
    """A CAS holds its responder unit while it waits for its address (Kalia et al. ATC'16 §3.4):
    64 clients CASing one host-memory word leave random READs to the same NIC a fraction of
    their rate alone; on NIC device memory the address is held for an SRAM access, so the units
    wait far less and the READs suffer several times less (FORGE, OSDI'26 §2.2: on-chip memory
    cuts the interference 2.4-3.0x); a few CAS clients cannot fill the units either."""
    from cluster.experiments.bench_verbs import _reads_beside_hot_cas

    def reads(casers, region=REGION_HOST):
        with Rig(load_profile("cx5-100g"), 4, 1, mem_bytes=64 << 20) as rig:
            return _reads_beside_hot_cas(rig, readers=64, casers=casers, region=region, warmup=20_000,
                                         window=40_000)

    alone = reads(0)
    host = reads(64)
    assert host < alone / 3
    assert 2 * host < reads(64, REGION_DEVICE) < alone
    assert reads(4) > 0.9 * alone


def batched(pname: str, op: str, clients: int = 3, **nic) -> float:
    """rlib db_bench's shape (cluster.experiments.bench_verbs.RLIB): ``clients`` CNs x 12 threads
    (a QP each) x 5 batches of 10. ``nic``: profile keys of the nic section to override."""
    from cluster.experiments.bench_verbs import rlib_batched
    from shm.profile import with_overrides
    return rlib_batched(with_overrides(load_profile(pname), {f"nic.{k}": v for k, v in nic.items()}), op, clients,
                        20_000, 40_000)


@pytest.mark.parametrize("unit_ns", [None, 21])
def test_random_address_atomics_run_at_the_nic_wide_atomic_rate(unit_ns):
    """Random-address CAS, enough in flight: the NIC-wide pipeline binds (cx6-200g: one pipeline
    of ``atomic_unit_ns``, shipped or rlib's 21 ns), far above the same-address rate, below READ."""
    extra = {"atomic_unit_ns": unit_ns} if unit_ns else {}
    nic = load_profile("cx6-200g").nic
    ns = unit_ns or nic.atomic_unit_ns
    cas = batched("cx6-200g", "cas", **extra)
    assert cas == pytest.approx(nic.atomic_units * 1e3 / ns, rel=0.03)
    assert 3 * 1e3 / nic.atomic_slot_ns < cas < batched("cx6-200g", "read", **extra)


def test_random_atomics_hold_their_unit_only_while_they_wait_for_their_address():
    """With ``atomic_holds_unit`` (cx5-100g) an atomic keeps its responder unit while it waits for
    its address, not through its own read-modify-write: random-address atomics never wait, so 36
    QPs reach the NIC-wide pipeline's rate (rlib: 48 M/s), above the 16 units / (unit time +
    pipeline + address hold) they would stop at if units were held through the RMW."""
    nic = load_profile("cx5-100g").nic
    assert nic.atomic_holds_unit
    through_rmw = nic.responder_units * 1e3 / (nic.resp_atomic_ns + nic.atomic_unit_ns + nic.atomic_slot_ns)
    pipeline = nic.atomic_units * 1e3 / nic.atomic_unit_ns
    assert through_rmw < pipeline
    assert batched("cx5-100g", "faa") == pytest.approx(pipeline, rel=0.02)


def test_a_qp_runs_its_atomics_one_after_the_other():
    """``atomics_in_qp_order`` (cx5-100g): one QP's atomics run one at a time, each a pipeline slot
    and a read-modify-write, so one client's 12 QPs get at most 12 / (pipeline + hold) however many
    each keeps in flight (rlib: 25 M CAS/s from one client, 44 from two, 48 from three); with
    atomics pipelined within a QP, one client alone reaches the NIC-wide rate."""
    nic = load_profile("cx5-100g").nic
    assert nic.atomics_in_qp_order
    per_qp = 1e3 / (nic.atomic_unit_ns + nic.atomic_slot_ns)
    one = batched("cx5-100g", "cas", clients=1)
    assert 0.9 * 12 * per_qp < one <= 1.01 * 12 * per_qp
    pipeline = nic.atomic_units * 1e3 / nic.atomic_unit_ns
    assert batched("cx5-100g", "cas", clients=2) > 0.9 * pipeline > one
    assert batched("cx5-100g", "cas", clients=1, atomics_in_qp_order=False) == pytest.approx(pipeline, rel=0.05)


def test_rlib_read_loops_are_bound_by_the_posting_cpu():
    """rlib's or_bench and db_bench loops (50 READs per loop, one signaled) keep each QP far below
    its 16 outstanding READs' rate, so a thread's rate is its posting CPU: one post of n READs costs
    post + n x wqe + the doorbell lock (what cx5-100g's post_ns and wqe_ns are derived from)."""
    from cluster.experiments.bench_verbs import rlib_read
    prof = load_profile("cx5-100g")
    cpu, lock = prof.cpu, prof.doorbell.lock_ns
    got = {r.x.split(":")[0]: r.emulated for r in rlib_read(True, lambda *a: None)}
    assert got["outstanding"] == pytest.approx(1e3 / (cpu.post_ns + cpu.wqe_ns + lock), rel=0.03)
    assert got["doorbell batching"] == pytest.approx(10e3 / (cpu.post_ns + 10 * cpu.wqe_ns + lock), rel=0.05)
    assert got["basic"] < got["coroutines"] < got["outstanding"] < got["doorbell batching"]
