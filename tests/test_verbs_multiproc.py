"""Verbs across OS processes: the test owns the fabric and a clock table; forked children attach
both, each runs its own Environment laxly synchronised with ClockSync, and they act on shared
node memories (one-sided verbs) or talk to each other (SEND/RECV through the sync layer's inboxes).
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

import pytest

from shm.sim.env import Environment
from shm.sim.sync import ClockSync, ClockTable
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec, gaddr
from shm.verbs import (
    CQ, IBV_ACCESS_LOCAL_WRITE, IBV_WC_RECV, IBV_WC_SUCCESS, IBV_WR_SEND, MR, PD, QP, Context, QPInitAttr, RecvWR,
    SendWR, SGE, VerbsHost,
)
from tests.test_verbs import rack_profile

CTX = mp.get_context("fork")
TIMEOUT_S = 20
N_PROCS = 2
MEM_NODE = 2                                  # c0 (process 0), c1 (process 1), m0 (passive memory)
PROC_OF_NODE = {0: 0, 1: 1, MEM_NODE: 0}
PAYLOAD_WORDS = 8                             # a cross-process SEND message is 8 words


@pytest.fixture
def fabric(prefix):
    fab = Fabric.create(rack_profile(), [NodeSpec("c0", "compute", 4 << 20), NodeSpec("c1", "compute", 4 << 20),
                                         NodeSpec("m0", "memory", 1 << 20)], prefix=prefix)
    try:
        fab.expose("m0")
        yield fab
    finally:
        fab.close()


@pytest.fixture
def table(prefix):
    t = ClockTable.create(N_PROCS, prefix=prefix, inbox_capacity=256, payload_words=PAYLOAD_WORDS)
    try:
        yield t
    finally:
        t.close()


def _child(q, fn, fab_desc, tbl_names, i, args):
    try:
        fab = Fabric.attach(fab_desc)
        try:
            tbl = ClockTable.attach(tbl_names)
            try:
                env = Environment(seed=100 + i, sync=ClockSync(tbl, i, fab.profile.sync.window_ns))
                host = VerbsHost(fab, env, proc_of_node=PROC_OF_NODE, my_proc=i)
                q.put((i, "ok", fn(fab, env, host, i, *args)))
            finally:
                tbl.close()
        finally:
            fab.close()
    except BaseException:
        q.put((i, "err", traceback.format_exc()))


def run_nodes(fabric, table, fn, *args):
    """Run ``fn(fab, env, host, i, *args)`` in one forked process per clock-table slot."""
    q = CTX.Queue()
    procs = [CTX.Process(target=_child, args=(q, fn, fabric.describe(), table.names(), i, args))
             for i in range(N_PROCS)]
    try:
        for p in procs:
            p.start()
        results = {}
        for _ in procs:
            i, status, value = q.get(timeout=TIMEOUT_S)
            if status != "ok":
                table.set_stop()                  # do not leave the other one waiting for us
                pytest.fail(f"process {i} failed:\n{value}")
            results[i] = value
        for p in procs:
            p.join(TIMEOUT_S)
            assert p.exitcode == 0
        return [results[i] for i in range(N_PROCS)]
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()


# -- one-sided atomics on a shared word ----------------------------------------------------------

def _faa_node(fab, env, host, i, word_off, threads, depth, incs):
    node = NodeRdma(host, i, policy="per_thread_doorbell", buffer_bytes=4096)
    olds = []
    a = gaddr(MEM_NODE, word_off)

    def loop(co):
        for _ in range(incs):
            h = co.faa(a, 1)
            yield co.sync()
            olds.append(h.value)

    for _ in range(threads):
        t = node.thread()
        for _ in range(depth):
            env.process(loop(t.coroutine()))
    env.run()
    return olds, env.now


def test_faa_from_two_processes_on_one_remote_word(fabric, table):
    off = fabric.allocate("m0", 64)
    threads, depth, incs = 4, 4, 25
    (olds0, end0), (olds1, end1) = run_nodes(fabric, table, _faa_node, off, threads, depth, incs)
    total = N_PROCS * threads * depth * incs
    assert int(fabric.memory[MEM_NODE].host64[off // 8]) == total
    # every FAA saw a distinct old value: no update was lost or applied twice
    assert sorted(olds0 + olds1) == list(range(total))
    assert len(olds0) == len(olds1) == total // N_PROCS
    assert end0 > 0 and end1 > 0
    assert int(fabric.memory[MEM_NODE].host64[off // 8 + 1]) == 0   # neighbour untouched


# -- ordering: data, then flag, observed from another process ---------------------------------------

def _data_flag_node(fab, env, host, i, data_off, flag_off, load_off, rounds, size):
    """Process 0 WRITEs [data = k, flag = k] in one post, k = 1..rounds, beside 16 threads WRITEing
    512 B blocks to m0; process 1's coroutines READ [flag, data] in one post until flag = rounds."""
    node = NodeRdma(host, i, policy="per_thread_doorbell", buffer_bytes=64 << 10)
    data, flag = gaddr(MEM_NODE, data_off), gaddr(MEM_NODE, flag_off)
    bad, looks = [], [0]

    def writer(co):
        for k in range(1, rounds + 1):
            co.write(data, bytes([k]) * size)
            co.write(flag, k)
            yield co.sync()

    def loader(co, dst):
        for _ in range(40):
            co.write(dst, b"\x01" * 512)
            co.write(dst, b"\x01" * 512)
            yield co.sync()

    def observer(co):
        k = 0
        while k < rounds:
            f = co.read(flag, 8)
            d = co.read(data, size)
            yield co.sync()
            k = f.value
            looks[0] += 1
            if int(d.data.min()) < k:
                bad.append((env.now, k, int(d.data.min())))

    if i == 0:
        env.process(writer(node.thread().coroutine()))
        for j in range(16):
            env.process(loader(node.thread().coroutine(), gaddr(MEM_NODE, load_off + 512 * j)))
    else:
        for _ in range(4):
            env.process(observer(node.thread().coroutine()))
    env.run()
    return bad, looks[0]


def test_data_then_flag_across_processes(fabric, table):
    """The RC order of one QP's WRITEs (docs/fabric.md, "Ordering rules") seen from another
    process: an observer never READs a round's flag with older data."""
    size = 8192
    data_off, flag_off, load_off = fabric.allocate("m0", size), fabric.allocate("m0", 8), fabric.allocate("m0", 16 * 512)
    (bad0, _), (bad1, looks) = run_nodes(fabric, table, _data_flag_node, data_off, flag_off, load_off, 30, size)
    assert looks >= 4 and not bad1, bad1[:5]
    assert int(fabric.memory[MEM_NODE].host64[flag_off // 8]) == 30


# -- two-sided: a SEND crosses processes ---------------------------------------------------------

def _send_recv_node(fab, env, host, i, n_msgs):
    ctx = Context(host, i)
    pd = PD(ctx)
    cq = CQ(ctx)
    mr = MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
    qp = QP(pd, QPInitAttr(scq=cq))
    assert qp.qp_num == (i << 20) + 1         # each process numbers its QPs in its own range
    peer = 1 - i
    qp.connect((peer, (peer << 20) + 1))
    got = []

    def receiver():
        qp.post_recv([RecvWR(wr_id=k, sg=[SGE(mr.addr + 64 * k, 64, mr.lkey)]) for k in range(n_msgs)])
        while len(got) < n_msgs:
            n, wcs = cq.poll(n_msgs)
            got.extend((env.now, wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.src_qp, mr.read(wc.byte_len, 64 * wc.wr_id))
                       for wc in wcs)
            if len(got) < n_msgs:
                yield cq.wait()

    def sender():
        for k in range(n_msgs):
            msg = f"message {k} from {i}".encode()
            mr.write(msg, offset=64 * k)
            qp.post_send(SendWR(wr_id=k, opcode=IBV_WR_SEND, sg=[SGE(mr.addr + 64 * k, len(msg), mr.lkey)]))
            n = 0
            while n == 0:
                n, wcs = cq.poll()
                if n == 0:
                    yield cq.wait()
            assert wcs[0].status == IBV_WC_SUCCESS
            got.append((env.now, k))

    env.process(sender() if i == 0 else receiver())
    env.run()
    return got, host.statistics()


def test_send_crosses_processes(fabric, table):
    n = 5
    (sent, _), (received, stats1) = run_nodes(fabric, table, _send_recv_node, n)
    assert [k for _, k in sent] == list(range(n))
    assert [r[1:6] for r in received] == [(k, IBV_WC_SUCCESS, IBV_WC_RECV, len(f"message {k} from 0"), 1)
                                          for k in range(n)]
    assert [r[6] for r in received] == [f"message {k} from 0".encode() for k in range(n)]
    assert stats1.sends_delivered == n
    # a message arrives no earlier than one wire latency after it was posted (first post at t=0)
    assert all(r[0] >= fabric.profile.link.one_way_ns for r in received)
    assert [r[0] for r in received] == sorted(r[0] for r in received)
