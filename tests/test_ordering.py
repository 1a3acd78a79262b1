"""Ordering rules of one RC queue pair (docs/fabric.md, "Ordering rules"), one test per rule.

Co-located fabrics (one Environment, deterministic). A *watcher* is a plain process that looks at
the memory node's bytes every nanosecond of virtual time: it sees effects land the way a CPU on
the memory node would. An *observer* is a coroutine on another thread (another QP) that reads
through the NIC, as a client of a disaggregated system would.
"""

from __future__ import annotations

import numpy as np
import pytest

from shm.coro import NodeRdma
from shm.fabric import gaddr
from shm.verbs import (
    IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, VerbsHost,
)
from shm.sim.env import Environment
from tests.test_coro import MN, mem_word, new_fabric, run, setup
from tests.test_verbs import atomic, build_rack, new_fabric as new_verbs_fabric, rdma, run_process, set_word, wait_cqes, word

SLOT = 1064                       # a Sherman-sized leaf write-back


@pytest.fixture
def fab(prefix):
    with new_fabric(prefix, mem=4 << 20) as f:
        yield f


@pytest.fixture
def rack(prefix):
    fab = new_verbs_fabric(prefix)
    try:
        yield build_rack(fab, Environment(seed=1))
    finally:
        fab.close()


def load(env, node, fab, threads=32, nbytes=512, posts=60):
    """``threads`` threads each WRITE ``nbytes`` at a time to m0, ``posts`` times: a memory node's
    PCIe and the links under heavy load."""
    for k in range(threads):
        co = node.thread().coroutine()
        dst = gaddr(MN, fab.allocate("m0", nbytes))
        blob = bytes([k]) * nbytes

        def body(co=co, dst=dst, blob=blob):
            for _ in range(posts):
                co.write(dst, blob)
                co.write(dst, blob)
                yield co.sync()

        env.process(body())


def watch(env, check, until):
    """A process calling ``check()`` every ns of virtual time up to ``until``, or until ``check``
    returns True."""
    def body():
        while env.now < until:
            if check():
                return
            yield 1
    env.process(body())


# -- rule 1: WRITEs (and SENDs) of one QP are placed in posting order ---------------------------------

def test_data_then_unlock_in_one_post_never_unlocks_first(fab):
    """Sherman's write-back-and-unlock in one doorbell, 40 times: a 1,064 B WRITE of the slot,
    then an 8 B WRITE of the lock word (its round number), while 32 threads WRITE 512 B blocks to
    the same memory node. The watcher must never see a round's lock word before its slot."""
    env, node = setup(fab)
    load(env, node, fab)
    slot = fab.allocate("m0", SLOT)
    lock = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    host = fab.memory[MN].host
    bad = []

    def writer():
        yield 500                                   # in the thick of the load
        for k in range(1, 41):
            co.write(gaddr(MN, slot), bytes([k]) * SLOT)
            co.write(gaddr(MN, lock), k)
            yield co.sync()
            yield 37

    def check():
        k = mem_word(fab, lock)
        if k and (host[slot] < k or host[slot + SLOT - 1] < k):   # lines land in either order
            bad.append(env.now)
        return k == 40

    watch(env, check, 100_000)
    run(env, writer())
    assert mem_word(fab, lock) == 40
    assert not bad, f"{len(bad)} ns with a round's lock word before its slot, first at {bad[0]} ns"


def test_many_writes_of_one_post_land_as_a_prefix(fab):
    """WRITE i sets word i (big and small WRITEs mixed): at every instant the words set are a prefix."""
    env, node = setup(fab)
    load(env, node, fab, threads=8)
    n = 24
    base = fab.allocate("m0", 1024 * n)
    co = node.thread().coroutine()
    mem = fab.memory[MN].host64
    sizes = [1024 if i % 3 == 0 else 8 for i in range(n)]      # 9 KiB of payload: fits the thread's buffer
    offs = [base + 1024 * i for i in range(n)]

    def writer():
        yield 1500
        for i in range(n):
            co.write(gaddr(MN, offs[i]), np.full(sizes[i] // 8, i + 1, np.uint64))
        yield co.sync()

    def check():
        landed = [int(mem[(offs[i] + sizes[i] - 8) // 8]) == i + 1 for i in range(n)]
        assert landed == sorted(landed, reverse=True), f"at {env.now} ns: {landed}"

    watch(env, check, 40_000)
    run(env, writer())
    assert all(int(mem[o // 8]) == i + 1 for i, o in enumerate(offs))


def test_writes_of_separate_posts_on_one_qp_land_in_posting_order(fab):
    """A small WRITE posted right after a big one, in a post of its own, on the same QP."""
    env, node = setup(fab)
    load(env, node, fab)
    big = fab.allocate("m0", 8192)
    flag = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    host = fab.memory[MN].host

    def writer():
        yield 2000
        co.write(gaddr(MN, big), b"\x42" * 8192)
        co.post()
        yield 1
        co.write(gaddr(MN, flag), 1)
        yield co.sync()

    def check():
        if mem_word(fab, flag) == 1:
            assert host[big + 8191] == 0x42 and host[big] == 0x42, f"flag at {env.now} ns before the 8 KiB WRITE"
            return True

    watch(env, check, 60_000)
    run(env, writer())


def test_writes_to_one_word_in_one_post_apply_in_posting_order(fab):
    """Equal landing times are applied in posting order: the word only moves forward."""
    env, node = setup(fab)
    w = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    seen = []

    def writer():
        for i in range(1, 33):
            co.write(gaddr(MN, w), i)
        yield co.sync()

    watch(env, lambda: seen.append(mem_word(fab, w)), 20_000)
    run(env, writer())
    assert mem_word(fab, w) == 32
    assert seen == sorted(seen)


# -- rule 2: a READ or atomic sees the earlier WRITEs of its QP ----------------------------------------

def test_read_and_cas_after_write_in_one_post_see_it(fab):
    env, node = setup(fab)
    load(env, node, fab)
    blk = fab.allocate("m0", 8192)
    w = fab.allocate("m0", 8)
    co = node.thread().coroutine()

    def body():
        yield 2000
        co.write(gaddr(MN, blk), b"\x5a" * 8192)
        co.write(gaddr(MN, w), 7)
        r = co.read(gaddr(MN, blk + 8192 - 64), 64)
        c = co.cas(gaddr(MN, w), 7, 8)
        yield co.sync()
        return r.data.tobytes(), c.value

    data, old = run(env, body())
    assert data == b"\x5a" * 64
    assert old == 7 and mem_word(fab, w) == 8


def test_read_after_an_atomic_of_its_qp_sees_it(fab):
    """A READ posted after an atomic samples memory no earlier than the atomic's effect, even when
    the atomic waits behind 32 others on a hot address (the observer's [READ flag, READ data]
    below relies on READs keeping their posting order the same way)."""
    env, node = setup(fab)
    hot = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    others = [node.thread().coroutine() for _ in range(8)]

    def hammer(c):
        for _ in range(4):
            c.faa(gaddr(MN, hot), 1)
        yield c.sync()

    def body():
        for c in others:
            env.process(hammer(c))
        yield 10
        a = co.faa(gaddr(MN, hot), 1)
        b = co.read(gaddr(MN, hot), 8)
        yield co.sync()
        return a.value, b.value

    old, seen = run(env, body())
    assert seen >= old + 1, (old, seen)


# -- the protocol: data, then unlock, observed through the NIC ------------------------------------------

def _data_then_flag(env, node, fab, rounds, observers, size=SLOT):
    data = fab.allocate("m0", size)
    flag = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    bad = []
    looks = [0]

    def writer():
        for k in range(1, rounds + 1):
            co.write(gaddr(MN, data), bytes([k]) * size)
            co.write(gaddr(MN, flag), k)
            yield co.sync()

    def observer(o):
        last = 0
        while last < rounds:
            f = o.read(gaddr(MN, flag), 8)
            d = o.read(gaddr(MN, data), size)
            yield o.sync()
            k = f.value
            looks[0] += 1
            if int(d.data.min()) < k:
                bad.append((env.now, k, int(d.data.min())))
            last = k

    host = fab.memory[MN].host
    early = []                                  # ns at which m0 holds a round's flag, not its data

    def check():
        k = mem_word(fab, flag)
        if k and (host[data] < k or host[data + size - 1] < k):
            early.append(env.now)
        return k == rounds

    for _ in range(observers):
        env.process(observer(node.thread().coroutine()))
    watch(env, check, 300_000)
    run(env, writer())
    env.run()
    return bad, looks[0], early


def test_observer_never_sees_the_flag_before_the_data_under_load(fab):
    """A writer posts [WRITE 8 KiB of data = k, WRITE flag = k] for k = 1..40; six coroutines of
    other threads post [READ flag, READ data] in a loop, while 32 threads WRITE 512 B blocks to
    the same memory node: no observer may read flag k with data older than k. (Before the
    ordering rules, 16 of 191 looks did.)"""
    env, node = setup(fab)
    load(env, node, fab)
    bad, looks, early = _data_then_flag(env, node, fab, rounds=40, observers=6, size=8192)
    assert looks > 100
    assert not early, early[:5]
    assert not bad, bad[:5]


# -- rule 3: FENCE waits for the QP's earlier READs and atomics -----------------------------------------

def _read_then_write(fab, fence):
    env, node = setup(fab)
    region = fab.allocate("m0", 8192)
    fab.memory[MN].host[region:region + 8192] = 1
    co = node.thread().coroutine()
    seen = {}

    def body():
        r = co.read(gaddr(MN, region), 8192)
        if fence:
            co.fence()
        co.write(gaddr(MN, region), b"\x02" * 8)
        yield co.sync()
        return r.data[:8].tobytes()

    def check():
        if "landed" not in seen and fab.memory[MN].host[region] == 2:
            seen["landed"] = env.now

    watch(env, check, 20_000)
    got = run(env, body())
    return got, seen["landed"], node.threads[0]


def test_fence_holds_a_write_until_the_earlier_read_completed(fab):
    got, landed, _ = _read_then_write(fab, fence=True)
    assert got == b"\x01" * 8                       # the READ saw the old bytes
    got2, landed2, _ = _read_then_write(fab, fence=False)
    # unfenced, the WRITE may pass the READ (RC allows it); fenced it lands after the READ's
    # 8 KiB came back, a round trip later
    assert landed > landed2 + 1000


def test_fence_after_cas_orders_the_write_behind_the_lock(fab):
    """CAS a lock, fence, WRITE the guarded word: the WRITE lands after the CAS completed."""
    env, node = setup(fab)
    lock = fab.allocate("m0", 8)
    val = fab.allocate("m0", 8)
    co = node.thread().coroutine()
    seen = {}

    def body():
        c = co.cas(gaddr(MN, lock), 0, 1)
        co.fence()
        co.write(gaddr(MN, val), 5)
        co.post()
        t0 = env.now
        yield co.sync()
        return c.value, t0

    def check():
        if "cas" not in seen and mem_word(fab, lock) == 1:
            seen["cas"] = env.now
        if "write" not in seen and mem_word(fab, val) == 5:
            seen["write"] = env.now

    watch(env, check, 20_000)
    old, _ = run(env, body())
    assert old == 0
    assert seen["write"] > seen["cas"] + 1000      # a CAS response's trip back, then the WRITE's trip out


# -- the same rules through pyverbs ----------------------------------------------------------------------

def test_pyverbs_write_then_flag_and_send_fence(rack):
    r = rack
    r.lmr.write(b"\x33" * 8192)
    set_word(r.lmr, 1, 16384)
    flag_off = 32768
    seen = {}

    def check():
        if "flag" not in seen and word(r.rmr, flag_off) == 1:
            seen["flag"] = r.env.now
            seen["data_then"] = r.rmr.read(1, 8191)

    watch(r.env, check, 20_000)
    wrs = [rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8192, r.rmr.addr, r.rmr.rkey, wr_id=1),
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 16384, 8, r.rmr.addr + flag_off, r.rmr.rkey, wr_id=2)]

    def body():
        r.qp.post_send(wrs)
        return (yield from wait_cqes(r.env, r.cq, 2))

    run_process(r.env, body())
    assert seen["data_then"] == b"\x33"

    # IBV_SEND_FENCE: a WRITE after a CAS waits for the CAS to complete
    set_word(r.rmr, 0, 40960)
    wrs = [atomic(IBV_WR_ATOMIC_CMP_AND_SWP, r.lmr, 24576, r.rmr.addr + 40960, r.rmr.rkey, 0, 9, wr_id=3),
           rdma(IBV_WR_RDMA_WRITE, r.lmr, 16384, 8, r.rmr.addr + 40968, r.rmr.rkey, wr_id=4,
                flags=IBV_SEND_SIGNALED | IBV_SEND_FENCE)]
    times = {}

    def check2():
        for key, off, v in (("cas", 40960, 9), ("write", 40968, 1)):
            if key not in times and word(r.rmr, off) == v:
                times[key] = r.env.now

    watch(r.env, check2, r.env.now + 20_000)

    def actor2():
        r.qp.post_send(wrs)
        return (yield from wait_cqes(r.env, r.cq, 2))

    got = run_process(r.env, actor2())
    cas_done = got[0][0]
    assert times["write"] >= cas_done - 200 and times["write"] > times["cas"] + 1000


@pytest.mark.parametrize("profile", ["cx6-200g", "cx5-100g", "bf3"])
@pytest.mark.parametrize("size", [1024, 2064])
def test_every_line_of_a_multi_line_write_is_seen_by_the_verbs_posted_after_it(profile, size, prefix):
    """A CAS and a READ posted after a multi-line WRITE, in the same post, see all of it whichever
    line lands last (the first on a NIC that places lines in descending order, the last on one that
    ascends): their effects come no earlier than the WRITE's last line, also at the same ns."""
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile
    with Fabric.create(load_profile(profile), [NodeSpec("cn0"), NodeSpec("mn0", "memory", 1 << 20)],
                       prefix=prefix) as f:
        f.expose(1)
        env = Environment(seed=1)
        co = NodeRdma(VerbsHost(f, env), "cn0").thread().coroutine()
        base = gaddr(1, f.allocate(1, size + 64))
        for off in (0, size // 2 // 8 * 8, size - 8):
            def body():
                co.write(base, bytes([off % 200 + 1]) * size)
                c = co.cas(base + off, int.from_bytes(bytes([off % 200 + 1]) * 8, "little"), 7)
                r = co.read(base + off, 8)
                yield co.sync()
                return c.value, r.value
            old, seen = run(env, body())
            assert old == int.from_bytes(bytes([off % 200 + 1]) * 8, "little"), (profile, size, off)
            assert seen == 7, (profile, size, off)
