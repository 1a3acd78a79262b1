"""SMART-style coroutine verbs (shm/coro.py), co-located mode: results after ``yield co.sync()``,
errors, shared cores, QP policies and their throughput, CAS contention."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from shm.sim.env import Environment
from shm import nic
from shm.coro import POLICIES, NodeRdma, RemoteAccessError
from shm.fabric import REGION_DEVICE, Fabric, NodeSpec, format_gaddr, gaddr
from shm.verbs import VerbsHost
from tests.test_verbs import rack_profile

U64 = (1 << 64) - 1
MEM = 1 << 20
CN, MN = 0, 1          # node indices: compute c0, memory m0


@contextmanager
def new_fabric(prefix=None, *, profile=None, compute_mem: int = 16 << 20, mem: int = MEM):
    """A compute node c0 and an exposed memory node m0; closed on exit."""
    f = Fabric.create(profile or rack_profile(), [NodeSpec("c0", "compute", compute_mem),
                                                  NodeSpec("m0", "memory", mem)], prefix=prefix)
    try:
        f.expose("m0")
        yield f
    finally:
        f.close()


@contextmanager
def two_memory_nodes(prefix=None):
    """A compute node c0 and two exposed memory nodes m0 and m1; closed on exit."""
    f = Fabric.create(rack_profile(), [NodeSpec("c0", "compute", 16 << 20), NodeSpec("m0", "memory", MEM),
                                       NodeSpec("m1", "memory", MEM)], prefix=prefix)
    try:
        f.expose("m0")
        f.expose("m1")
        yield f
    finally:
        f.close()


@pytest.fixture
def fab(prefix):
    with new_fabric(prefix) as f:
        yield f


def setup(fab, policy="per_thread_doorbell", seed=1, **kw):
    env = Environment(seed=seed)
    host = VerbsHost(fab, env)
    return env, NodeRdma(host, "c0", policy=policy, buffer_bytes=kw.pop("buffer_bytes", 16 << 10), **kw)


def run(env, gen):
    p = env.process(gen)
    env.run()
    assert not p.is_alive
    return p.value


def mem_word(fab, off):
    return int(fab.memory[MN].host64[off // 8])


# -- results ------------------------------------------------------------------------------------

def test_read_write_cas_faa_results_after_sync(fab):
    env, node = setup(fab)
    co = node.thread().coroutine()
    base = fab.allocate("m0", 256)
    a = gaddr(MN, base)

    def body():
        w1 = co.write(a, b"0123456789abcdef")
        w2 = co.write(a + 64, 0x1122334455667788)
        assert w1.status == -1                     # nothing lands before the post
        yield co.sync()
        assert w1.ok and w2.ok
        r = co.read(a, 16)
        r2 = co.read(a + 64, 8)
        yield co.sync()
        got = (r.data.tobytes(), r2.value)
        c_ok = co.cas(a + 128, 0, 7)
        f = co.faa(a + 136, 5)
        yield co.sync()
        c_fail = co.cas(a + 128, 0, 9)
        f2 = co.faa(a + 136, -1)                   # negative delta wraps like the hardware
        yield co.sync()
        return got, c_ok.value, f.value, c_fail.value, f2.value

    got, c_ok, f, c_fail, f2 = run(env, body())
    assert got == (b"0123456789abcdef", 0x1122334455667788)
    assert fab.memory[MN].host[base:base + 16].tobytes() == b"0123456789abcdef"
    assert (c_ok, c_fail) == (0, 7) and mem_word(fab, base + 128) == 7
    assert (f, f2) == (0, 5) and mem_word(fab, base + 136) == 4


def test_masked_atomics_through_coroutines(fab):
    env, node = setup(fab)
    co = node.thread().coroutine()
    off = fab.allocate("m0", 16)
    fab.memory[MN].host64[off // 8] = 0xAAAA_0000_0000_0001
    fab.memory[MN].host64[off // 8 + 1] = (1 << 32) | 0xFFFF_FFFF

    def body():
        c = co.masked_cas(gaddr(MN, off), 0x1, 0xBEEF << 16, 0xFFFF, 0xFFFF << 16)
        f = co.masked_faa(gaddr(MN, off + 8), (1 << 32) | 1, (1 << 63) | (1 << 31))
        yield co.sync()
        return c.value, f.value

    c, f = run(env, body())
    assert c == 0xAAAA_0000_0000_0001 and mem_word(fab, off) == 0xAAAA_0000_BEEF_0001
    assert f == (1 << 32) | 0xFFFF_FFFF and mem_word(fab, off + 8) == 2 << 32


def test_many_verbs_in_one_batch_and_device_memory(fab):
    env, node = setup(fab)
    co = node.thread().coroutine()
    off = fab.allocate("m0", 64)
    doff = fab.allocate("m0", 64, region=REGION_DEVICE)

    def body():
        hs = [co.faa(gaddr(MN, off), 1) for _ in range(20)]
        d = co.cas(gaddr(MN, doff, REGION_DEVICE), 0, 99)
        yield co.sync()
        return sorted(h.value for h in hs), d.value

    olds, d = run(env, body())
    assert olds == list(range(20)) and mem_word(fab, off) == 20
    assert d == 0 and int(fab.memory[MN].device64[doff // 8]) == 99
    assert node.threads[0].statistics() == (1, 21, 0, node.threads[0].cpu_free)   # posts, verbs, errors
    st = node.host.statistics()
    assert (st.posted, st.completed, st.errors) == (21, 21, 0)   # the host counts coroutine verbs too


# -- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["out_of_range", "misaligned"])
def test_failing_verb_makes_sync_raise_naming_the_address(fab, kind):
    env, node = setup(fab)
    co = node.thread().coroutine()
    off = fab.allocate("m0", 64)
    bad = gaddr(MN, MEM + 64) if kind == "out_of_range" else gaddr(MN, off + 4)
    status = "IBV_WC_REM_ACCESS_ERR" if kind == "out_of_range" else "IBV_WC_REM_INV_REQ_ERR"

    def body():
        good = co.faa(gaddr(MN, off), 1)
        h = co.faa(bad, 1) if kind == "misaligned" else co.read(bad, 8)
        try:
            yield co.sync()
        except RemoteAccessError as e:
            err = str(e)
        else:
            err = None
        assert good.ok and not h.ok
        # the coroutine carries on: the error was reported once
        again = co.faa(gaddr(MN, off), 1)
        yield co.sync()
        return err, again.value

    err, again = run(env, body())
    assert err is not None and format_gaddr(bad) in err and status in err
    assert again == 1 and mem_word(fab, off) == 2
    assert mem_word(fab, off) == 2 and int(fab.memory[MN].host64[off // 8 + 1]) == 0   # nothing torn
    assert node.threads[0].statistics().errors == 1
    assert node.host.statistics()[:3] == (3, 3, 1)      # posted, completed, errors


def test_sync_with_nothing_queued_returns_at_once(fab):
    env, node = setup(fab)
    co = node.thread().coroutine()

    def body():
        t = env.now
        yield co.sync()
        return env.now - t

    assert run(env, body()) == 0


# -- cores and doorbells ------------------------------------------------------------------------

def _post_end_times(same_thread):
    with new_fabric() as fab:
        return _post_end_times_on(fab, same_thread)


def _post_end_times_on(fab, same_thread):
    env, node = setup(fab)
    t1 = node.thread()
    t2 = t1 if same_thread else node.thread()
    off = fab.allocate("m0", 64)
    ends = {}

    def body(name, co):
        co.read(gaddr(MN, off), 8)
        co.post()
        yield 0                                    # pay the CPU time of the post
        ends[name] = env.now
        yield co.sync()

    env.process(body("a", t1.coroutine()))
    env.process(body("b", t2.coroutine()))
    env.run()
    return ends


def test_coroutines_of_one_thread_share_its_core():
    prof = rack_profile()
    one_post = prof.cpu.post_ns + prof.cpu.wqe_ns + prof.doorbell.lock_ns
    ends = _post_end_times(same_thread=True)
    assert ends == {"a": one_post, "b": 2 * one_post}          # the second waits for the core
    ends = _post_end_times(same_thread=False)
    assert ends == {"a": one_post, "b": one_post}              # two threads post in parallel


def _resume_after_read(idlers: int, spin: bool) -> int:
    """When a READ's coroutine resumes, on a fresh fabric, with ``idlers`` other coroutines of its
    thread idling (spinning or sleeping) through the whole round trip."""
    with new_fabric() as fab:
        return _resume_after_read_on(fab, idlers, spin)


def _resume_after_read_on(fab, idlers: int, spin: bool) -> int:
    env, node = setup(fab)
    t = node.thread()
    off = fab.allocate("m0", 64)
    reader, others = t.coroutine(), [t.coroutine() for _ in range(idlers)]
    out = {}

    def idle(co):
        yield from (t.spin_idle(1_000_000) if spin else iter((1_000_000,)))

    def read(co):
        co.read(gaddr(MN, off), 8)
        yield co.sync()
        out["resumed"] = env.now

    for co in others:
        env.process(idle(co))
    env.process(read(reader))
    env.run()
    return out["resumed"]


def test_a_completion_waits_for_a_round_of_the_threads_spinning_idlers():
    base = _resume_after_read(1, spin=False)
    assert _resume_after_read(3, spin=False) == base      # sleeping idlers leave the run queue
    prof = rack_profile()
    turn = (prof.software.coro_switch_cycles + prof.software.clock_read_cycles) / prof.cpu.ghz
    poller = prof.cpu.poll_ns + 2 * prof.software.coro_switch_cycles / prof.cpu.ghz
    late = _resume_after_read(3, spin=True) - base
    # the poller's next turn (a point of one round), then behind the three spinners once more
    assert 3 * turn - 1 <= late < 3 * turn + (3 * turn + poller) + 1
    assert _resume_after_read(3, spin=True) == base + late   # the thread's own stream: deterministic


def _read_behind_hot_cases(same_thread):
    """20 CASes on one word from a coroutine, then an 8 B READ of another word from a coroutine
    of the same thread (same QP) or of another thread; returns (CASes done, READ done)."""
    with new_fabric() as fab:
        env, node = setup(fab)
        t1 = node.thread()
        t2 = t1 if same_thread else node.thread()
        hot, cold = gaddr(MN, fab.allocate("m0", 64)), gaddr(MN, fab.allocate("m0", 64))
        done = {}

        def caser(co):
            for i in range(20):
                co.cas(hot, i, i + 1)
            yield co.sync()
            done["cas"] = env.now

        def reader(co):
            yield 1
            co.read(cold, 8)
            yield co.sync()
            done["read"] = env.now

        env.process(caser(t1.coroutine()))
        env.process(reader(t2.coroutine()))
        env.run()
        assert mem_word(fab, hot - gaddr(MN, 0)) == 20
        return done["cas"], done["read"]


def test_a_send_queue_completes_in_posting_order():
    # same-address atomics queue at the responder (atomic_slot_ns each); the READ behind them on
    # the same QP completes no earlier than the last of them, on another QP it does not wait
    cas_done, read_done = _read_behind_hot_cases(same_thread=True)
    assert read_done >= cas_done
    cas_done, read_done = _read_behind_hot_cases(same_thread=False)
    assert read_done < cas_done - 10 * rack_profile().nic.atomic_slot_ns


def test_coroutines_count_once_among_doorbell_sharers(fab):
    env, node = setup(fab, policy="per_thread_doorbell")
    off = fab.allocate("m0", 64)
    thr = node.thread()

    def body(co):
        for _ in range(3):
            co.read(gaddr(MN, off), 8)
            yield co.sync()

    for _ in range(8):
        env.process(body(thr.coroutine()))
    env.run()
    qp = thr.qp(MN)
    desc = fab.descriptors[CN]
    assert nic.doorbell_users(fab.table, desc, qp.doorbell, 0) == nic.SHARER_UNIT


def test_a_thread_on_two_doorbells_counts_half_on_each(prefix):
    # a thread with QPs to two memory nodes spins on one doorbell lock at a time: it counts 1/2
    # among the sharers of each; leaving one doorbell (idle) moves nothing else of other threads
    with two_memory_nodes(prefix) as f:
        # two threads per QP: t2 posts through t1's QPs, so through its doorbells too
        env, node = setup(f, policy="multiplexed_qp", threads_per_qp=2)
        a0, a1 = gaddr(1, f.allocate("m0", 64)), gaddr(2, f.allocate("m1", 64))
        t1, t2 = node.thread(), node.thread()

        def body(co, addrs):
            for a in addrs:
                co.read(a, 8)
                yield co.sync()

        env.process(body(t1.coroutine(), (a0, a1)))
        env.run()
        assert sorted(t1.doorbell_sharers().values()) == [0.5, 0.5]
        shared = t1.qp(1).doorbell
        assert t2.qp(1) is t1.qp(1) and t1.qp(1).doorbell != t1.qp(2).doorbell
        env.process(body(t2.coroutine(), (a0,)))      # t2 uses the first doorbell only
        env.run()
        assert t1.doorbell_sharers()[shared] == 1.5
        t2.idle()
        assert t1.doorbell_sharers()[shared] == 0.5
        t1.idle()
        assert sorted(t1.doorbell_sharers().values()) == [0.0, 0.0]


def test_connecting_by_memory_node_gives_the_low_latency_doorbells_to_the_first_nodes_qps(prefix):
    # SMART's and FORD's ResourceManager connect memory node by memory node, a QP per thread:
    # threads 0-3's QPs to the first node take the 4 low-latency doorbells, every QP to the
    # second node a shared one. Made on first post, thread 0 takes one on each node it posts to.
    with two_memory_nodes(prefix) as f:
        n_ll = rack_profile().doorbell.low_latency
        env, node = setup(f, policy="per_thread_qp")
        threads = [node.thread() for _ in range(6)]
        node.connect(["m0", "m1"])
        db_first = threads[0].qp(1).ctx.db_first
        low = set(range(db_first, db_first + n_ll))
        assert [t.qp(1).doorbell in low for t in threads] == [True] * n_ll + [False] * 2
        assert not any(t.qp(2).doorbell in low for t in threads)
        # nothing was posted: no thread shares a doorbell yet
        assert all(v == 0 for v in threads[0].doorbell_sharers().values())

        env, lazy = setup(f, policy="per_thread_qp")
        t0, t1 = lazy.thread(), lazy.thread()
        a0, a1 = gaddr(1, f.allocate("m0", 64)), gaddr(2, f.allocate("m1", 64))

        def body(co):
            co.read(a0, 8)
            co.read(a1, 8)
            yield co.sync()

        run(env, body(t0.coroutine()))
        first = t0.qp(1).ctx.db_first
        assert {t0.qp(1).doorbell, t0.qp(2).doorbell} == {first, first + 1}


# -- policies -----------------------------------------------------------------------------------

def test_unknown_policy_and_bad_pool_are_refused(fab):
    env = Environment()
    host = VerbsHost(fab, env)
    with pytest.raises(ValueError, match="policy"):
        NodeRdma(host, "c0", policy="one_qp_per_coroutine")
    with pytest.raises(ValueError, match="qp_pool"):
        NodeRdma(host, "c0", policy="multiplexed_qp", qp_pool=0)


def test_threads_per_qp_shares_each_qp_among_consecutive_threads(fab):
    env, node = setup(fab, policy="multiplexed_qp", threads_per_qp=2)
    threads = [node.thread() for _ in range(5)]
    ids = [id(t.qp(MN)) for t in threads]
    assert ids[0] == ids[1] and ids[2] == ids[3] and len({ids[0], ids[2], ids[4]}) == 3
    with pytest.raises(ValueError, match="threads_per_qp"):
        NodeRdma(VerbsHost(fab, Environment()), "c0", policy="multiplexed_qp", threads_per_qp=0)


def test_threads_sharing_a_qp_take_turns_on_its_lock():
    # two threads post at once: on their own QPs each pays the doorbell alone; through one QP the
    # second waits for the first's hold plus qp_lock_ns (the QP's lines move between cores)
    prof = rack_profile()
    build, db = prof.cpu.post_ns + prof.cpu.wqe_ns, prof.doorbell
    shared_hold = db.lock_ns + db.lock_per_sharer_ns + db.qp_lock_ns
    for q, second in ((None, build + db.lock_ns), (2, build + 2 * shared_hold)):
        with new_fabric() as fab:
            env, node = setup(fab, policy="multiplexed_qp" if q else "per_thread_qp", threads_per_qp=q)
            off = fab.allocate("m0", 64)
            t1, t2 = node.thread(), node.thread()
            ends = {}

            def body(name, co):
                co.read(gaddr(MN, off), 8)
                co.post()
                yield 0
                ends[name] = env.now
                yield co.sync()

            def warm(co):                       # both threads have posted once: the QP is shared
                co.read(gaddr(MN, off), 8)
                yield co.sync()

            for t in (t1, t2):
                env.process(warm(t.coroutine()))
            env.run()
            start = env.now
            env.process(body("a", t1.coroutine()))
            env.process(body("b", t2.coroutine()))
            env.run()
            assert (t1.qp(MN) is t2.qp(MN)) == (q is not None)
            assert max(ends.values()) - start == second, (q, ends, start)


@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_builds_and_works(fab, policy):
    env, node = setup(fab, policy=policy, qp_pool=2)
    threads = [node.thread() for _ in range(6)]
    off = fab.allocate("m0", 8)

    def body(co):
        h = co.faa(gaddr(MN, off), 1)
        yield co.sync()
        return h.value

    procs = [env.process(body(t.coroutine())) for t in threads]
    env.run()
    assert sorted(p.value for p in procs) == list(range(6)) and mem_word(fab, off) == 6
    qps = [t.qp(MN) for t in threads]
    assert all(q.remote == (MN, 0) and q.node == CN for q in qps)
    ids = [id(q) for q in qps]
    dbs = [q.doorbell for q in qps]
    prof = fab.profile.doorbell
    if policy == "shared_qp":
        assert len(set(ids)) == 1
    elif policy == "multiplexed_qp":
        assert ids[0::2] == [ids[0]] * 3 and ids[1::2] == [ids[1]] * 3 and ids[0] != ids[1]
    elif policy == "per_thread_qp":
        assert len(set(ids)) == 6 and len({id(q.ctx) for q in qps}) == 1
        ll = prof.low_latency
        assert len(set(dbs[:ll])) == ll            # the first QPs get the low-latency doorbells
    else:
        assert len(set(ids)) == 6 and len(set(dbs)) == 6 and len({id(q.ctx) for q in qps}) == 6


def _throughput(policy, threads=32, depth=8, window_ns=60_000):
    with new_fabric() as fab:                      # fresh NIC calendars for every policy
        return _throughput_on(fab, policy, threads, depth, window_ns)


def _throughput_on(fab, policy, threads, depth, window_ns):
    env, node = setup(fab, policy=policy, seed=4, buffer_bytes=4096)
    base = fab.allocate("m0", 64 << 10)
    done = [0]

    def loop(co):
        rng = env.rng
        while True:
            co.read(gaddr(MN, base + 8 * rng.randrange(8192)), 8)
            yield co.sync()
            done[0] += 1

    for _ in range(threads):
        t = node.thread()
        for _ in range(depth):
            env.process(loop(t.coroutine()))
    env.run(until=window_ns)
    return done[0]


def test_policy_throughput_orders_like_smart_fig3():
    ops = {p: _throughput(p) for p in POLICIES}
    assert ops["per_thread_doorbell"] >= ops["per_thread_qp"] > ops["multiplexed_qp"] > ops["shared_qp"] > 0, ops


# -- contention ---------------------------------------------------------------------------------

def _cas_counter(fab, seed, threads=4, depth=4, incs=6):
    env, node = setup(fab, seed=seed, policy="per_thread_qp")
    off = fab.allocate("m0", 8)
    a = gaddr(MN, off)
    attempts = [0]

    def incrementer(co):
        expected = 0
        done = 0
        while done < incs:
            h = co.cas(a, expected, expected + 1)
            yield co.sync()
            attempts[0] += 1
            if h.value == expected:
                done += 1
                expected += 1
            else:
                expected = h.value                 # lost the race: retry from what we saw
                yield env.rng.randrange(50, 500)   # random back-off

    for _ in range(threads):
        t = node.thread()
        for _ in range(depth):
            env.process(incrementer(t.coroutine()))
    env.run()
    return mem_word(fab, off), attempts[0], env.now


def test_cas_contention_loses_no_update_and_is_deterministic(prefix):
    results = []
    for _ in range(2):
        with new_fabric(prefix) as f:
            results.append(_cas_counter(f, seed=11))
    (final, attempts, end), again = results
    assert final == 4 * 4 * 6
    assert attempts > final                        # there was contention
    assert again == results[0]                     # same seed, same virtual history


def test_a_handles_value_is_its_uint64_view_wherever_it_sits():
    """``Handle.value`` reads the word in place: the same integer as the uint64 view of its 8
    bytes, the same error when fewer than 8 are left, and a strided buffer read as its slice."""
    import numpy as np

    from shm.coro import Handle
    rng = np.random.default_rng(5)
    buf = rng.integers(0, 256, 4096, dtype=np.uint8)
    for off in list(rng.integers(0, 4096 - 8, 300)) + [0, 4088]:
        off = int(off)
        assert Handle(buf, off, 8).value == int(buf[off:off + 8].view(np.uint64)[0])
    with pytest.raises(ValueError):
        Handle(buf, 4090, 8).value            # 6 bytes left: no word there
    strided = buf[::2]
    assert Handle(strided, 10, 8).value == int.from_bytes(strided[10:18].tobytes(), "little")
