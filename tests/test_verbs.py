"""pyverbs-style verbs on the emulated fabric (shm/verbs.py), co-located mode.

One Environment runs every node, so runs are deterministic: the same inputs give the same
virtual times. A ``rack`` is a compute node ``c0`` and a memory node ``m0``, each with a context,
a PD, a 64 KiB MR and a CQ, and a pair of connected RC QPs.
"""

from __future__ import annotations

import errno
import multiprocessing
import time
import traceback
from types import SimpleNamespace

import numpy as np
import pytest

from shm.deferred import DEFER_MIN
from shm.sim.env import Environment
from shm.fabric import REGION_DEVICE, Fabric, NodeSpec, gaddr
from shm.profile_schema import (
    CpuProfile, DmaProfile, DoorbellProfile, LinkProfile, NicProfile, PcieProfile, Profile, QpProfile,
    SyncProfile, WqeCacheProfile,
)
from shm.verbs import (
    AH, CQ, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_QPT_UD, IBV_SEND_SIGNALED, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_REM_INV_REQ_ERR, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND, MR, PD, QP, Context, PyverbsRDMAError, QPCap,
    QPInitAttr, RecvWR, SendWR, SGE, VerbsHost,
)
from shm.verbs import IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_SEND

ACCESS_ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC
U64 = (1 << 64) - 1
MR_BYTES = 64 << 10


# -- profile and rack ---------------------------------------------------------------------------

def rack_profile() -> Profile:
    """The ConnectX-6 200G profile; a hand-built copy of it while shm/profile.py does not exist."""
    try:
        from shm.profile import load_profile
    except ImportError:
        return hand_profile()
    return load_profile("cx6-200g")


def hand_profile() -> Profile:
    return Profile(
        name="cx6-200g-test", description="hand-built test profile",
        sync=SyncProfile(window_ns=500),
        link=LinkProfile(gbps=200.0, one_way_ns=600, header_bytes=60, mtu_bytes=4096),
        nic=NicProfile(requester_units=16, responder_units=16, req_read_ns=100, req_write_ns=100,
                       req_atomic_ns=300, req_send_ns=100, resp_read_ns=100, resp_write_ns=100,
                       resp_atomic_ns=300, resp_recv_ns=150, atomic_units=4, atomic_unit_ns=100,
                       atomic_slots=256, atomic_slot_ns=370, device_memory_bytes=262144,
                       device_memory_ns=100, ordered_multiline_writes=True, atomic_write_race=False),
        pcie=PcieProfile(latency_ns=300, gbps=82.0, bytes_per_wr=93, resp_bytes_per_wr=40, mmio_ns=100),
        doorbell=DoorbellProfile(low_latency=4, medium_latency=12, lock_ns=100, lock_per_sharer_ns=220),
        wqe_cache=WqeCacheProfile(capacity=1024, miss_bytes=87, miss_ns=200),
        qp=QpProfile(max_send_wr=1024, max_recv_wr=1024, max_rd_atomic=16, max_inline=220),
        cpu=CpuProfile(ghz=2.4, post_ns=100, wqe_ns=20, poll_ns=30, local_cas_ns=20,
                       local_read_ns_per_line=10, rpc_handler_ns=200),
        dma=DmaProfile(latency_ns=900, gbps=100.0),
    )


def new_fabric(prefix=None, memory_bytes=1 << 20) -> Fabric:
    return Fabric.create(rack_profile(), [NodeSpec("c0", "compute", memory_bytes),
                                          NodeSpec("m0", "memory", memory_bytes)], prefix=prefix)


def build_rack(fab: Fabric, env: Environment, **qp_cap) -> SimpleNamespace:
    host = VerbsHost(fab, env)
    ctx, mctx = Context(host, "c0"), Context(host, "m0")
    pd, mpd = PD(ctx), PD(mctx)
    cq, mcq = CQ(ctx), CQ(mctx)
    qp = QP(pd, QPInitAttr(scq=cq, cap=QPCap(**qp_cap)))
    mqp = QP(mpd, QPInitAttr(scq=mcq))
    qp.connect(mqp)
    mqp.connect(qp)
    return SimpleNamespace(fab=fab, env=env, host=host, ctx=ctx, mctx=mctx, pd=pd, mpd=mpd, cq=cq, mcq=mcq,
                           qp=qp, mqp=mqp, lmr=MR(pd, MR_BYTES, ACCESS_ALL), rmr=MR(mpd, MR_BYTES, ACCESS_ALL))


@pytest.fixture
def env():
    return Environment(seed=1)


@pytest.fixture
def rack(env, prefix):
    fab = new_fabric(prefix)
    try:
        yield build_rack(fab, env)
    finally:
        fab.close()


# -- helpers ------------------------------------------------------------------------------------

def run_process(env, gen):
    """Run ``gen`` as a process (and everything else) to the end; return its value."""
    p = env.process(gen)
    env.run()
    assert not p.is_alive
    return p.value


def wait_cqes(env, cq, n):
    """Process body: poll ``cq`` until ``n`` completions; returns [(virtual time seen, WC)]."""
    got = []
    while len(got) < n:
        k, wcs = cq.poll(n - len(got))
        got += [(env.now, wc) for wc in wcs]
        if len(got) < n:
            yield cq.wait()
    return got


def post_wait(r, wrs, n=None, qp=None, cq=None):
    """Post ``wrs`` at t=now from a process and wait for ``n`` CQEs (default: one per WR);
    returns (post time, [(time, WC)])."""
    qp = qp or r.qp
    cq = cq or r.cq
    wrs = [wrs] if isinstance(wrs, SendWR) else wrs
    n = len(wrs) if n is None else n

    def body():
        t0 = r.env.now
        qp.post_send(wrs)
        got = yield from wait_cqes(r.env, cq, n)
        return t0, got

    return run_process(r.env, body())


def rdma(op, lmr, loff, length, raddr, rkey, wr_id=1, flags=IBV_SEND_SIGNALED, lkey=None):
    wr = SendWR(wr_id=wr_id, opcode=op, sg=[SGE(lmr.addr + loff, length, lmr.lkey if lkey is None else lkey)],
                send_flags=flags)
    wr.set_wr_rdma(rkey, raddr)
    return wr


def atomic(op, lmr, loff, raddr, rkey, compare_add, swap=0, cmask=0, smask=0, wr_id=1, length=8):
    wr = SendWR(wr_id=wr_id, opcode=op, sg=[SGE(lmr.addr + loff, length, lmr.lkey)])
    if op in (IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD):
        wr.set_wr_masked_atomic(rkey, raddr, compare_add, swap, cmask, smask)
    else:
        wr.set_wr_atomic(rkey, raddr, compare_add, swap)
    return wr


def word(mr, off=0) -> int:
    return int.from_bytes(mr.read(8, off), "little")


def set_word(mr, value, off=0):
    mr.write((value & U64).to_bytes(8, "little"), 8, off)


def only_wc(got):
    assert len(got) == 1, got
    return got[0][1]


# -- data lands right ---------------------------------------------------------------------------

def test_write_then_read_back(rack):
    r = rack
    payload = bytes(range(256)) * 3
    r.lmr.write(payload)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, len(payload), r.rmr.addr + 128, r.rmr.rkey, 11))[1])
    assert (wc.status, wc.opcode, wc.wr_id, wc.byte_len, wc.qp_num) == (
        IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 11, len(payload), r.qp.qp_num)
    assert r.rmr.read(len(payload), 128) == payload
    assert r.rmr.read(128) == bytes(128)                      # nothing before it
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 4096, len(payload), r.rmr.addr + 128, r.rmr.rkey, 12))[1])
    assert (wc.status, wc.opcode, wc.wr_id) == (IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 12)
    assert r.lmr.read(len(payload), 4096) == payload


def test_cas_swaps_only_on_match_and_returns_old(rack):
    r = rack
    set_word(r.rmr, 5, 64)
    wc = only_wc(post_wait(r, atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 0, r.rmr.addr + 64, r.rmr.rkey, 5, 9))[1])
    assert (wc.status, wc.opcode) == (IBV_WC_SUCCESS, IBV_WC_COMP_SWAP)
    assert word(r.lmr, 0) == 5 and word(r.rmr, 64) == 9
    post_wait(r, atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 8, r.rmr.addr + 64, r.rmr.rkey, 5, 1))
    assert word(r.lmr, 8) == 9 and word(r.rmr, 64) == 9        # mismatch: untouched
    post_wait(r, atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 16, r.rmr.addr + 64, r.rmr.rkey, 9, U64))
    assert word(r.lmr, 16) == 9 and word(r.rmr, 64) == U64     # full 64-bit operands
    assert word(r.rmr, 56) == 0 and word(r.rmr, 72) == 0       # neighbours untouched


def test_faa_adds_wraps_and_returns_old(rack):
    r = rack
    set_word(r.rmr, 10)
    wc = only_wc(post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey, 7))[1])
    assert (wc.status, wc.opcode) == (IBV_WC_SUCCESS, IBV_WC_FETCH_ADD)
    assert word(r.lmr) == 10 and word(r.rmr) == 17
    post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey, U64))   # -1
    assert word(r.lmr) == 17 and word(r.rmr) == 16
    set_word(r.rmr, U64)
    post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey, 2))
    assert word(r.lmr) == U64 and word(r.rmr) == 1


def test_many_atomics_in_one_post(rack):
    r = rack
    wrs = [atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 8 * i, r.rmr.addr, r.rmr.rkey, 1, wr_id=i) for i in range(50)]
    _, got = post_wait(r, wrs)
    assert all(wc.status == IBV_WC_SUCCESS for _, wc in got)
    assert word(r.rmr) == 50
    assert sorted(word(r.lmr, 8 * i) for i in range(50)) == list(range(50))   # each saw a distinct old value


def test_masked_cas(rack):
    r = rack
    v = 0x1122334455667788
    set_word(r.rmr, v)
    # compare the low 16 bits, swap bits 16..31
    post_wait(r, atomic(IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, r.lmr, 0, r.rmr.addr, r.rmr.rkey,
                        0xFFFF_7788, 0xABCD_0000, cmask=0xFFFF, smask=0xFFFF_0000))
    assert word(r.lmr) == v
    assert word(r.rmr) == 0x11223344ABCD7788
    # a mismatch under the mask changes nothing
    post_wait(r, atomic(IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, r.lmr, 8, r.rmr.addr, r.rmr.rkey,
                        0x7789, 0, cmask=0xFFFF, smask=U64))
    assert word(r.lmr, 8) == 0x11223344ABCD7788 and word(r.rmr) == 0x11223344ABCD7788


def test_masked_faa_adds_fields_without_carry(rack):
    r = rack
    set_word(r.rmr, (1 << 32) | 0xFFFF_FFFF)          # two 32-bit fields: hi=1, lo=0xFFFFFFFF
    boundaries = (1 << 63) | (1 << 31)
    post_wait(r, atomic(IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey,
                        (1 << 32) | 1, cmask=boundaries))
    assert word(r.lmr) == (1 << 32) | 0xFFFF_FFFF
    assert word(r.rmr) == 2 << 32                     # lo wrapped to 0 without carrying into hi


def test_device_memory_mr_works_for_atomics_and_is_faster(rack):
    r = rack
    dmr = MR(r.mpd, 64, ACCESS_ALL, region=REGION_DEVICE)
    assert dmr.addr == gaddr(1, dmr.offset, REGION_DEVICE)
    t0, got = post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, dmr.addr + 8, dmr.rkey, 3))
    dev_latency = got[0][0] - t0
    assert only_wc(got).status == IBV_WC_SUCCESS
    post_wait(r, atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 8, dmr.addr + 8, dmr.rkey, 3, 42))
    assert word(r.lmr, 8) == 3 and word(dmr, 8) == 42
    assert r.fab.memory[1].device64[(dmr.offset + 8) // 8] == 42
    assert word(r.rmr, 8) == 0                        # host memory at the same offset untouched
    t0, got = post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr + 8, r.rmr.rkey, 3))
    assert dev_latency < got[0][0] - t0               # no PCIe trip at the responder
    # a device-memory key does not open host memory (and vice versa)
    _, got = post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, gaddr(1, dmr.offset + 8), dmr.rkey, 1))
    assert only_wc(got).status == IBV_WC_REM_ACCESS_ERR


# -- timing -------------------------------------------------------------------------------------

def test_completion_comes_after_the_effect(rack):
    r = rack
    r.lmr.write(b"\x5a" * 8)
    seen = {}

    def watcher():
        while word(r.rmr) == 0:
            yield 5
        seen["effect"] = r.env.now

    r.env.process(watcher())
    t0, got = post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey))
    assert t0 < seen["effect"] <= got[0][0]


def test_send_queue_completes_in_posting_order(rack):
    r = rack
    wrs = [rdma(IBV_WR_RDMA_READ, r.lmr, 0, 16384, r.rmr.addr, r.rmr.rkey, wr_id=1),
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 32768, r.rmr.rkey, wr_id=2),
           atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 32768, r.rmr.addr + 40960, r.rmr.rkey, 1, wr_id=3),
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 32776, r.rmr.rkey, wr_id=4)]

    def body():
        r.qp.post_send(wrs[:3])
        yield 10
        r.qp.post_send(wrs[3])                     # a quick WRITE right behind a slow FAA
        got = yield from wait_cqes(r.env, r.cq, 4)
        return got

    got = run_process(r.env, body())
    assert [wc.wr_id for _, wc in got] == [1, 2, 3, 4]
    assert all(wc.status == IBV_WC_SUCCESS for _, wc in got)


def _depth1_read_times():
    env = Environment(seed=7)
    fab = new_fabric()
    try:
        r = build_rack(fab, env)
        times = []
        for i in range(5):
            t0, got = post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 0, 64, r.rmr.addr + 64 * i, r.rmr.rkey))
            times.append((t0, got[0][0]))
        return times
    finally:
        fab.close()


def test_depth1_read_latency_is_in_range_and_deterministic():
    a = _depth1_read_times()
    assert all(1_000 < t1 - t0 < 5_000 for t0, t1 in a)
    assert a[1][0] > a[0][1] - 1                     # depth 1: one after the other
    assert _depth1_read_times() == a


# -- bad input ----------------------------------------------------------------------------------

def _fill(mr, byte=0xEE):
    mr.write(bytes([byte]) * mr.length)


def test_wrong_rkey_is_a_remote_access_error_and_touches_nothing(rack):
    r = rack
    _fill(r.rmr)
    r.lmr.write(b"\x01" * 64)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 64, r.rmr.addr, r.rmr.rkey ^ 1))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert r.rmr.read(r.rmr.length) == b"\xee" * r.rmr.length


def test_wrong_rkey_atomic_touches_nothing(rack):
    r = rack
    set_word(r.rmr, 5)
    set_word(r.lmr, 77)
    wc = only_wc(post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey ^ 0x80, 1))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert word(r.rmr) == 5 and word(r.lmr) == 77


def test_out_of_bounds_write_is_refused_whole(rack):
    r = rack
    _fill(r.rmr)
    mem = r.fab.memory[1].host
    end = r.rmr.offset + r.rmr.length
    after = mem[end:end + 64].tobytes()
    r.lmr.write(b"\x01" * 16)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 16, r.rmr.addr + r.rmr.length - 8, r.rmr.rkey))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert r.rmr.read(r.rmr.length) == b"\xee" * r.rmr.length   # not even the part inside the MR
    assert mem[end:end + 64].tobytes() == after


def test_out_of_bounds_read_leaves_local_buffer_alone(rack):
    r = rack
    _fill(r.lmr, 0x33)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 0, 64, r.rmr.addr + r.rmr.length, r.rmr.rkey))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert r.lmr.read(64) == b"\x33" * 64


def test_address_on_another_node_is_refused(rack):
    r = rack
    _fill(r.lmr, 0x44)
    # the QP is connected to m0; a remote address on c0 with c0's key must not land
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.lmr.addr + 1024, r.lmr.rkey))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert r.lmr.read(r.lmr.length) == b"\x44" * r.lmr.length


def fresh_qp(r):
    """Another RC QP of c0 connected to m0 (an errored QP stays errored)."""
    qp = QP(r.pd, QPInitAttr(scq=r.cq))
    qp.connect(r.mqp)
    return qp


def test_missing_remote_rights_are_refused(rack):
    r = rack
    ro = MR(r.mpd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
    ro.write(b"\x07" * 64)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, ro.addr, ro.rkey))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR and ro.read(64) == b"\x07" * 64
    wc = only_wc(post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, ro.addr, ro.rkey, 1), qp=fresh_qp(r))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR and ro.read(64) == b"\x07" * 64
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 0, 8, ro.addr, ro.rkey), qp=fresh_qp(r))[1])
    assert wc.status == IBV_WC_SUCCESS and r.lmr.read(8) == b"\x07" * 8


@pytest.mark.parametrize("op", [IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP])
def test_misaligned_atomic_is_refused(rack, op):
    r = rack
    set_word(r.rmr, 0, 0)
    set_word(r.rmr, 0, 8)
    wc = only_wc(post_wait(r, atomic(op, r.lmr, 0, r.rmr.addr + 4, r.rmr.rkey, 0, 1))[1])
    assert wc.status == IBV_WC_REM_INV_REQ_ERR
    assert r.rmr.read(16) == bytes(16)


def test_atomic_with_wrong_length_is_refused(rack):
    r = rack
    wc = only_wc(post_wait(r, atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 0, r.rmr.addr, r.rmr.rkey, 1, length=4))[1])
    assert wc.status != IBV_WC_SUCCESS
    assert word(r.rmr) == 0


def test_read_into_bad_lkey_is_a_local_protection_error(rack):
    r = rack
    _fill(r.rmr, 0x21)
    _fill(r.lmr, 0x55)
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 0, 64, r.rmr.addr, r.rmr.rkey, lkey=r.lmr.lkey ^ 1))[1])
    assert wc.status == IBV_WC_LOC_PROT_ERR
    assert r.lmr.read(64) == b"\x55" * 64


def test_read_into_read_only_local_mr_is_a_local_protection_error(rack):
    r = rack
    ro = MR(r.pd, 64, 0)      # no LOCAL_WRITE: the NIC may not write into it
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_READ, ro, 0, 8, r.rmr.addr, r.rmr.rkey))[1])
    assert wc.status == IBV_WC_LOC_PROT_ERR


def test_error_moves_qp_to_error_state_and_flushes_later_wrs(rack):
    r = rack
    wc = only_wc(post_wait(r, rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey ^ 1))[1])
    assert wc.status == IBV_WC_REM_ACCESS_ERR
    assert r.qp.state == QP.ERR
    r.lmr.write(b"\x09" * 8)
    wrs = [rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey, wr_id=20),
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8, r.rmr.rkey, wr_id=21, flags=0),   # unsignaled
           atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 8, r.rmr.addr, r.rmr.rkey, 1, wr_id=22)]
    _, got = post_wait(r, wrs)        # flushed WRs complete even when unsignaled
    assert [(wc.wr_id, wc.status) for _, wc in got] == [(i, IBV_WC_WR_FLUSH_ERR) for i in (20, 21, 22)]
    assert r.rmr.read(16) == bytes(16)
    st = r.host.statistics()
    assert st.errors == 4 and st.completed == 4 and st.posted == 4


def test_failing_wr_flushes_the_wrs_posted_after_it_in_the_same_list(rack):
    r = rack
    set_word(r.rmr, 40, 24)
    r.lmr.write(b"\x09" * 8)
    wrs = [rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey, wr_id=1),            # fine
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey ^ 1, wr_id=2),        # fails
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8, r.rmr.rkey, wr_id=3),
           atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, r.lmr, 16, r.rmr.addr + 24, r.rmr.rkey, 1, wr_id=4)]
    _, got = post_wait(r, wrs)
    assert sorted((wc.wr_id, wc.status) for _, wc in got) == [
        (1, IBV_WC_SUCCESS), (2, IBV_WC_REM_ACCESS_ERR), (3, IBV_WC_WR_FLUSH_ERR), (4, IBV_WC_WR_FLUSH_ERR)]
    assert r.rmr.read(8) == b"\x09" * 8               # the WR before the error landed
    assert r.rmr.read(8, 8) == bytes(8) and word(r.rmr, 24) == 40   # those after it did not
    assert r.qp.state == QP.ERR


def test_post_before_connect_is_refused(rack):
    r = rack
    qp = QP(r.pd, QPInitAttr(scq=r.cq))
    with pytest.raises(PyverbsRDMAError) as ei:
        qp.post_send(rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey))
    assert ei.value.error_code == errno.EINVAL


def test_posting_past_max_send_wr_raises_enomem_and_posts_nothing(env, prefix):
    fab = new_fabric(prefix)
    try:
        r = build_rack(fab, env, max_send_wr=4)
        r.lmr.write(b"\x01" * 64)
        caught = []

        def body():
            r.qp.post_send([rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8 * i, r.rmr.rkey, i) for i in range(3)])
            with pytest.raises(PyverbsRDMAError) as ei:
                r.qp.post_send([rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8 * i, r.rmr.rkey, i)
                                for i in range(3, 5)])
            caught.append(ei.value.error_code)
            assert r.host.statistics().posted == 3
            r.qp.post_send(rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8 * 5, r.rmr.rkey, 5))   # the 4th fits
            got = yield from wait_cqes(r.env, r.cq, 4)
            # polled: the queue has room again
            r.qp.post_send(rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8 * 6, r.rmr.rkey, 6))
            got += yield from wait_cqes(r.env, r.cq, 1)
            return got

        got = run_process(env, body())
        assert caught == [errno.ENOMEM]
        assert [wc.wr_id for _, wc in got] == [0, 1, 2, 5, 6]
        assert [word(r.rmr, 8 * i) != 0 for i in range(7)] == [True, True, True, False, False, True, True]
        assert r.host.statistics().posted == 5
    finally:
        fab.close()


def test_unsignaled_wrs_produce_no_cqe(rack):
    r = rack
    r.lmr.write(b"\x02" * 8)
    wrs = [rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 8 * i, r.rmr.rkey, wr_id=i, flags=0) for i in range(3)]
    wrs.append(rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr + 24, r.rmr.rkey, wr_id=3))
    _, got = post_wait(r, wrs, n=1)
    assert [wc.wr_id for _, wc in got] == [3]
    assert len(r.cq) == 0
    assert r.rmr.read(32) == b"\x02" * 32          # all four landed
    assert r.host.statistics().completed == 4


def test_sq_sig_all_signals_every_wr(rack):
    r = rack
    qp = QP(r.pd, QPInitAttr(scq=r.cq, sq_sig_all=True))
    qp.connect(r.mqp)
    wrs = [rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey, wr_id=i, flags=0) for i in range(3)]
    _, got = post_wait(r, wrs, qp=qp)
    assert sorted(wc.wr_id for _, wc in got) == [0, 1, 2]


# -- two-sided ----------------------------------------------------------------------------------

def _send(r, length, wr_id=5, qp=None, ah=None, remote_qpn=0):
    wr = SendWR(wr_id=wr_id, opcode=IBV_WR_SEND, sg=[SGE(r.lmr.addr, length, r.lmr.lkey)])
    if ah is not None:
        wr.set_wr_ud(ah, remote_qpn)
    return wr


def test_rc_send_recv(rack):
    r = rack
    payload = b"ping" * 25
    r.lmr.write(payload)
    r.mqp.post_recv(RecvWR(wr_id=9, sg=[SGE(r.rmr.addr + 64, 256, r.rmr.lkey)]))
    wc = only_wc(post_wait(r, _send(r, len(payload)))[1])
    assert (wc.status, wc.opcode) == (IBV_WC_SUCCESS, IBV_WC_SEND)
    n, wcs = r.mcq.poll()
    assert n == 1
    rwc = wcs[0]
    assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len, rwc.qp_num, rwc.src_qp) == (
        9, IBV_WC_SUCCESS, IBV_WC_RECV, len(payload), r.mqp.qp_num, r.qp.qp_num)
    assert r.rmr.read(len(payload), 64) == payload
    assert r.host.statistics().sends_delivered == 1


def test_rc_send_before_post_recv_is_delivered_when_recv_is_posted(rack):
    r = rack
    r.lmr.write(b"early bird")
    post_wait(r, _send(r, 10))
    assert len(r.mcq) == 0
    r.mqp.post_recv(RecvWR(wr_id=3, sg=[SGE(r.rmr.addr, 64, r.rmr.lkey)]))
    n, wcs = r.mcq.poll()
    assert n == 1 and wcs[0].wr_id == 3 and wcs[0].byte_len == 10 and wcs[0].src_qp == r.qp.qp_num
    assert r.rmr.read(10) == b"early bird"


def test_recv_buffer_too_small_is_a_length_error(rack):
    r = rack
    r.mqp.post_recv(RecvWR(wr_id=3, sg=[SGE(r.rmr.addr, 16, r.rmr.lkey)]))
    _fill(r.rmr, 0)
    r.lmr.write(b"x" * 64)
    post_wait(r, _send(r, 64))
    n, wcs = r.mcq.poll()
    assert n == 1 and wcs[0].status == IBV_WC_LOC_LEN_ERR
    assert r.rmr.read(64) == bytes(64)


def test_ud_send_without_recv_is_dropped_and_with_recv_is_delivered(rack):
    r = rack
    cud = QP(r.pd, QPInitAttr(qp_type=IBV_QPT_UD, scq=r.cq))
    mud = QP(r.mpd, QPInitAttr(qp_type=IBV_QPT_UD, scq=r.mcq))
    ah = AH(r.pd, "m0")
    r.lmr.write(b"datagram")
    wc = only_wc(post_wait(r, _send(r, 8, ah=ah, remote_qpn=mud.qp_num), qp=cud)[1])
    assert wc.status == IBV_WC_SUCCESS            # UD completes once sent, delivered or not
    st = r.host.statistics()
    assert st.ud_dropped == 1 and st.sends_delivered == 0 and len(r.mcq) == 0
    mud.post_recv(RecvWR(wr_id=4, sg=[SGE(r.rmr.addr, 64, r.rmr.lkey)]))
    assert len(r.mcq) == 0                        # a dropped datagram is not retried
    post_wait(r, _send(r, 8, ah=ah, remote_qpn=mud.qp_num), qp=cud)
    n, wcs = r.mcq.poll()
    assert n == 1
    assert (wcs[0].wr_id, wcs[0].byte_len, wcs[0].src_qp, wcs[0].src_node, wcs[0].qp_num) == (
        4, 8, cud.qp_num, 0, mud.qp_num)
    assert r.rmr.read(8) == b"datagram"
    assert r.host.statistics().sends_delivered == 1
    # to a QP number that does not exist: dropped too
    post_wait(r, _send(r, 8, ah=ah, remote_qpn=mud.qp_num + 1000), qp=cud)
    assert r.host.statistics().ud_dropped == 2


def test_ud_qp_refuses_one_sided_verbs(rack):
    r = rack
    cud = QP(r.pd, QPInitAttr(qp_type=IBV_QPT_UD, scq=r.cq))
    wr = rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey)
    wr.set_wr_ud(AH(r.pd, "m0"), 1)
    with pytest.raises(PyverbsRDMAError) as ei:
        cud.post_send(wr)
    assert ei.value.error_code == errno.EINVAL


# -- multi-line WRITE atomicity per line (two processes) -----------------------------------------

FORK = multiprocessing.get_context("fork")
TORN_BYTES = 16 << 10


def _writer(desc, target_addr, rkey, stop, q):
    try:
        fab = Fabric.attach(desc)
        try:
            env = Environment(seed=2)
            host = VerbsHost(fab, env)
            ctx = Context(host, "c0")
            pd = PD(ctx)
            cq = CQ(ctx)
            qp = QP(pd, QPInitAttr(scq=cq))
            qp.connect((1, 0))
            lmr = MR(pd, TORN_BYTES)
            n = 0

            def body():
                nonlocal n
                while not stop.is_set() and n < 100_000:
                    lmr.buf[:] = n % 251 + 1       # every byte of this write the same value
                    qp.post_send(rdma(IBV_WR_RDMA_WRITE, lmr, 0, TORN_BYTES, target_addr, rkey))
                    got = yield from wait_cqes(env, cq, 1)
                    assert got[0][1].status == IBV_WC_SUCCESS
                    n += 1

            run_process(env, body())
        finally:
            fab.close()
        q.put(("ok", n))
    except BaseException:
        q.put(("err", traceback.format_exc()))


def test_multiline_write_is_never_torn_within_a_line(rack):
    r = rack
    stop = FORK.Event()
    q = FORK.Queue()
    child = FORK.Process(target=_writer, args=(r.fab.describe(), r.rmr.addr, r.rmr.rkey, stop, q))
    try:
        child.start()
        # 0.8 s of reads from the writer's first landed write: a child that compiles its kernels
        # (a fresh numba cache) or waits on a busy machine can take longer than that to start
        # (CI once read only zeros for the whole window)
        give_up = time.monotonic() + 60
        deadline = None
        reads = mixed = 0
        values = set()
        while deadline is None or time.monotonic() < deadline or reads < 20:
            if deadline is None and (len(values) > 1 or time.monotonic() > give_up):
                deadline = time.monotonic() + 0.8
            _, got = post_wait(r, rdma(IBV_WR_RDMA_READ, r.lmr, 0, TORN_BYTES, r.rmr.addr, r.rmr.rkey))
            assert got[0][1].status == IBV_WC_SUCCESS
            lines = r.lmr.buf[:TORN_BYTES].reshape(-1, 64)
            torn = np.flatnonzero((lines != lines[:, :1]).any(axis=1))
            assert torn.size == 0, f"lines {torn[:8].tolist()} torn in read {reads}"
            reads += 1
            mixed += int((lines[:, 0] != lines[0, 0]).any())   # lines of different writes: allowed
            values.update(np.unique(lines[:, 0]).tolist())
        stop.set()
        status, value = q.get(timeout=20)
        assert status == "ok", value
        assert value > 0
        child.join(10)
        assert child.exitcode == 0
        assert len(values) > 2                     # the reads really overlapped a moving target
    finally:
        stop.set()
        if child.is_alive():
            child.terminate()
        child.join()
        # The writer's and the reader's virtual clocks are two unsynchronised Environments, so
        # their stamps spread by whole seconds and the NIC calendars alias by construction: this
        # test is about tearing in memory, not timing, so the fabric closes without the check
        # that makes aliasing an error everywhere else (closing twice is harmless).
        r.fab.close(check=False)


# -- doorbells ----------------------------------------------------------------------------------

def test_qps_bind_to_low_latency_doorbells_then_round_robin(rack):
    r = rack
    prof = r.fab.profile.doorbell
    ctx = Context(r.host, "c0")
    pd, cq = PD(ctx), CQ(ctx)
    n_ll, n_med = prof.low_latency, prof.medium_latency
    assert (n_ll, n_med) == (4, 12)
    qps = [QP(pd, QPInitAttr(scq=cq)) for _ in range(n_ll + 2 * n_med + 3)]
    rel = [q.doorbell - ctx.db_first for q in qps]
    assert rel[:n_ll] == list(range(n_ll))
    medium = list(range(n_ll, n_ll + n_med))
    assert rel[n_ll:] == (medium * 3)[:len(rel) - n_ll]
    # another context gets doorbells of its own
    ctx2 = Context(r.host, "c0")
    assert ctx2.db_first >= ctx.db_first + n_ll + n_med
    assert QP(PD(ctx2), QPInitAttr(scq=CQ(ctx2))).doorbell == ctx2.db_first


def _post_cpu_times(n_threads, shared_doorbell, posts=10):
    """Each of ``n_threads`` processes posts ``posts`` WRITEs (depth 1) through its own QP; returns
    every post's CPU time (from the call to when the doorbell is rung)."""
    env = Environment(seed=3)
    fab = new_fabric()
    try:
        r = build_rack(fab, env)
        ctx = Context(r.host, "c0", low_latency=0, doorbells=1 if shared_doorbell else n_threads)
        pd = PD(ctx)
        times = []

        def thread(qp, cq):
            for i in range(posts):
                yield 0                            # pay for the previous poll first
                t0 = env.now
                qp.post_send(rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey))
                yield 0                            # pay the CPU time of the post
                times.append(env.now - t0)
                yield from wait_cqes(env, cq, 1)

        for _ in range(n_threads):
            cq = CQ(ctx)
            qp = QP(pd, QPInitAttr(scq=cq))
            qp.connect(r.mqp)
            env.process(thread(qp, cq))
        env.run()
        assert len(times) == n_threads * posts
        return times
    finally:
        fab.close()


def test_sharing_a_doorbell_makes_posts_slower():
    prof = rack_profile()
    alone = _post_cpu_times(1, True)
    assert set(alone) == {prof.cpu.post_ns + prof.cpu.wqe_ns + prof.doorbell.lock_ns}
    own = _post_cpu_times(8, False)                # 8 threads, 8 doorbells: no sharing
    assert set(own) == set(alone)
    shared4 = _post_cpu_times(4, True)
    shared8 = _post_cpu_times(8, True)
    # once all 8 have posted, each post holds the lock for lock_ns + 7 x lock_per_sharer_ns
    assert np.median(shared8) >= prof.doorbell.lock_ns + 7 * prof.doorbell.lock_per_sharer_ns
    assert np.mean(alone) < np.mean(shared4) < np.mean(shared8)


def test_cq_wait_for_several_completions_wakes_once_all_are_there(rack):
    """``CQ.wait(n)`` fires when the n-th completion arrives, not at the first; a bad n is one line."""
    wrs = [SendWR(wr_id=i, opcode=IBV_WR_RDMA_READ, sg=[SGE(rack.lmr.addr + 64 * i, 8, rack.lmr.lkey)])
           for i in range(4)]
    for i, wr in enumerate(wrs):
        wr.set_wr_rdma(rack.rmr.rkey, rack.rmr.addr + 64 * i)

    def body(need):
        t0 = rack.env.now
        rack.qp.post_send(wrs)
        yield rack.cq.wait(need)
        woke = rack.env.now - t0
        n, _ = rack.cq.poll(need)
        while n < 4:                       # the rest of the batch, for the next round
            yield rack.cq.wait()
            n += rack.cq.poll(4 - n)[0]
        return woke

    first, all_four = run_process(rack.env, body(1)), run_process(rack.env, body(4))
    assert 0 < first < all_four             # the 4th completion comes after the 1st
    with pytest.raises(Exception, match="min_entries"):
        rack.cq.wait(0)


def test_cq_waiters_fire_when_their_counts_are_reached_through_polls_and_overrun():
    """A CQ's waits against a plain model of them: waiters of several sizes, partial polls,
    completions past its size; each wait fires at the push that gives it its count (in the order
    they waited), and a push beyond ``cqe`` unpolled completions is refused."""
    import random

    from shm.verbs import CQ, WC, PyverbsRDMAError

    rng = random.Random(7)
    env = Environment()
    ctx = SimpleNamespace(env=env, fabric=SimpleNamespace(profile=SimpleNamespace(cpu=SimpleNamespace(poll_ns=0))),
                          host=SimpleNamespace(qps={}), node=0)
    cq = CQ(ctx, cqe=6)
    unpolled, waiting, fired, n = 0, [], [], 0     # the model: unpolled count, (id, need) waiting
    events, overruns = {}, 0
    for step in range(3000):
        op = rng.random()
        if op < 0.45:
            wc = WC(n, 0, IBV_WC_RECV, 8, 1, 0, 0, 0, 0)
            if unpolled >= 6:
                with pytest.raises(PyverbsRDMAError, match="overrun"):
                    cq._push(wc)
                overruns += 1
                continue
            cq._push(wc)
            n += 1
            unpolled += 1
            now = [w for w in waiting if unpolled >= w[1]]
            waiting = [w for w in waiting if unpolled < w[1]]
            fired += [w[0] for w in now]
        elif op < 0.75:
            k = rng.randint(1, 4)
            got, wcs = cq.poll(k)
            assert got == min(k, unpolled) == len(wcs)
            unpolled -= got
        else:
            need = rng.randint(1, 5)
            ev = events[step] = cq.wait(need)
            if unpolled >= need:
                fired.append(step)
            else:
                waiting.append((step, need))
        assert len(cq) == unpolled
        assert sorted(s for s, ev in events.items() if ev.triggered) == sorted(fired)
    assert overruns > 50 and len(fired) > 300      # both paths taken, many times


# -- a work request is copied at post ------------------------------------------------------------

def test_a_work_request_changed_after_post_send_does_not_change_what_was_posted(rack):
    """ibverbs copies a work request into its WQE at post: a program may change or reuse its SendWR
    and SGE at once. A WRITE, a CAS and a batch of deferred one-line READs, each changed right after
    ``post_send`` (before its effect): each lands and completes as posted (before the fix, the WRITE
    landed at the changed address with the changed payload and both completions said wr_id 2)."""
    r = rack
    r.lmr.write(b"A" * 8, 8, 0)
    r.lmr.write(b"B" * 8, 8, 64)
    set_word(r.rmr, 5, 1024)
    for i in range(4):
        r.rmr.write(bytes([0x10 + i]) * 8, 8, 2048 + 64 * i)
    write = rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, r.rmr.addr, r.rmr.rkey, 1)
    cas = atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 128, r.rmr.addr + 1024, r.rmr.rkey, 5, 9, wr_id=3)
    reads = [rdma(IBV_WR_RDMA_READ, r.lmr, 4096 + 64 * i, 8, r.rmr.addr + 2048 + 64 * i, r.rmr.rkey, 10 + i)
             for i in range(4)]
    assert len(reads) >= DEFER_MIN                 # the deferred path (shm/deferred.py)

    def body():
        r.qp.post_send(write)
        write.wr_id = 2                            # the same SendWR, reused at once for another WRITE
        write.set_wr_rdma(r.rmr.rkey, r.rmr.addr + 512)
        write.sg[0].addr = r.lmr.addr + 64
        r.qp.post_send(write)
        r.qp.post_send(cas)
        cas.set_wr_atomic(r.rmr.rkey, r.rmr.addr + 1024, 7, 1)     # a CAS that would fail
        r.qp.post_send(reads)
        for i, wr in enumerate(reads):
            wr.wr_id = 99
            wr.set_wr_rdma(r.rmr.rkey, r.rmr.addr)                 # elsewhere
            wr.sg[0].addr = r.lmr.addr + 8192 + 64 * i
        return (yield from wait_cqes(r.env, r.cq, 7))

    got = run_process(r.env, body())
    assert [wc.wr_id for _, wc in got] == [1, 2, 3, 10, 11, 12, 13]
    assert all(wc.status == IBV_WC_SUCCESS for _, wc in got)
    assert r.rmr.read(8, 0) == b"A" * 8 and r.rmr.read(8, 512) == b"B" * 8
    assert word(r.rmr, 1024) == 9 and word(r.lmr, 128) == 5        # the CAS as posted: swapped
    for i in range(4):
        assert r.lmr.read(8, 4096 + 64 * i) == bytes([0x10 + i]) * 8
        assert r.lmr.read(8, 8192 + 64 * i) == bytes(8)


def test_a_receive_request_changed_after_post_recv_receives_as_posted(rack):
    """A RecvWR is copied at post_recv too: one changed right after posting (its id and its
    buffer) still receives into the buffer it was posted with and completes with its posted id."""
    r = rack
    r.lmr.write(b"hello, w", 8, 0)
    rsge = SGE(r.rmr.addr + 256, 64, r.rmr.lkey)
    rwr = RecvWR(wr_id=7, num_sge=1, sg=[rsge])
    r.mqp.post_recv(rwr)
    rwr.wr_id = 8
    rsge.addr = r.rmr.addr + 1024                  # the same SGE object, changed after posting
    send = SendWR(wr_id=1, opcode=IBV_WR_SEND, sg=[SGE(r.lmr.addr, 8, r.lmr.lkey)])
    post_wait(r, send)

    def recv():
        return (yield from wait_cqes(r.env, r.mcq, 1))

    wc = only_wc(run_process(r.env, recv()))
    assert (wc.status, wc.opcode, wc.wr_id, wc.byte_len) == (IBV_WC_SUCCESS, IBV_WC_RECV, 7, 8)
    assert r.rmr.read(8, 256) == b"hello, w" and r.rmr.read(8, 1024) == bytes(8)
