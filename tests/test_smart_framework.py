"""SMART's techniques as switches of the coroutine verbs (shm/smart.py, shm/coro.py), co-located
and deterministic: work-request throttling (fixed and adaptive, Algorithm 1), backoff_cas with an
adaptive limit, coroutine throttling, doorbell sharers that leave, and all switches off giving the
virtual times recorded before the switches existed."""

from __future__ import annotations

import numpy as np
import pytest

from shm.sim.env import Environment
from shm.coro import NodeRdma
from shm.fabric import gaddr
from shm.profile import load_profile
from shm.smart import ConflictController, SmartConfig, WrTuner
from shm.verbs import VerbsHost
from tests.test_coro import new_fabric as coro_fabric

MN = 1
MEM = 16 << 20


def new_fabric(prefix, mem=MEM):
    """test_coro's rig on the cx6-200g profile (SMART's testbed)."""
    return coro_fabric(prefix, profile=load_profile("cx6-200g"), compute_mem=32 << 20, mem=mem)


@pytest.fixture
def fab(prefix):
    with new_fabric(prefix) as f:
        yield f


def node_of(fab, smart=None, policy="per_thread_doorbell", seed=1):
    env = Environment(seed=seed)
    return env, NodeRdma(VerbsHost(fab, env), "c0", policy=policy, buffer_bytes=16 << 10, smart=smart)


def reads_closed_loop(prefix, *, threads, depth, smart=None, warm=15_000, window=40_000):
    """SMART's bench tool (§3.1) on a fresh fabric: each thread posts ``depth`` 8 B READs to
    random lines, one doorbell ring each, waits for all, repeats. Returns (Mops in the window,
    the threads' SmartStats)."""
    with new_fabric(prefix) as fab:
        return _reads_closed_loop(fab, threads, depth, smart, warm, window)


def _reads_closed_loop(fab, threads, depth, smart, warm, window):
    env, node = node_of(fab, smart)
    words = MEM // 64
    end = warm + window
    done = []                            # work requests completed by the start and end of the window
    env.schedule(warm, lambda: done.append(node.host.statistics().completed))
    env.schedule(end, lambda: done.append(node.host.statistics().completed))

    def client(co, rng):
        while env.now < end:
            for _ in range(depth):
                co.read(gaddr(MN, int(rng.integers(words)) * 64), 8)
                co.post()
            yield co.sync()

    for t in range(threads):
        env.process(client(node.thread().coroutine(), np.random.default_rng(t)))
    env.run(until=end + 50_000)
    return (done[1] - done[0]) / window * 1e3, [t.smart_statistics() for t in node.threads]


# -- configuration --------------------------------------------------------------------------------

def test_config_is_off_by_default_and_validated(fab):
    assert not SmartConfig().enabled
    env, node = node_of(fab, {})
    assert node.smart is None
    st = node.thread().smart_statistics()
    assert (st.throttle, st.c_max_wr, st.t_max_ns, st.c_max_ops) == ("off", None, None, None)
    cfg = SmartConfig.from_dict({"all": True, "delta_ns": 100_000, "candidates": [4, 8, "unlimited"]})
    assert (cfg.throttle, cfg.backoff, cfg.coro_throttle, cfg.candidates) == ("adaptive", True, True, (4, 8, None))
    with pytest.raises(ValueError, match="unknown smart key"):
        SmartConfig.from_dict({"trottle": "fixed"})
    with pytest.raises(ValueError, match="c_max"):
        SmartConfig(throttle="fixed")
    with pytest.raises(ValueError, match="throttle"):
        SmartConfig(throttle="sometimes")


# -- work-request throttling ------------------------------------------------------------------------

def test_fixed_throttle_caps_outstanding_wrs_and_sync_waits_for_all(fab):
    env, node = node_of(fab, {"throttle": "fixed", "c_max": 4})
    thr = node.thread()
    co = thr.coroutine()
    base = fab.allocate("m0", 64 * 40)
    for i in range(40):
        fab.memory[MN].host64[(base + 64 * i) // 8] = 1000 + i
    seen = []

    def watch():                        # samples the thread's outstanding WRs every 50 ns
        while env.now < 100_000:
            seen.append(thr._wr_out)
            yield 50

    def body():
        hs = []
        for i in range(12):             # twelve posts of one WR each
            hs.append(co.read(gaddr(MN, base + 64 * i), 8))
            co.post()
        hs.append(co.read(gaddr(MN, base + 64 * 12), 8))
        big = [co.read(gaddr(MN, base + 64 * (13 + i)), 8) for i in range(20)]   # one post > C_max
        hs += big
        yield co.sync()
        return [h.value for h in hs]

    env.process(watch())
    p = env.process(body())
    env.run()
    assert p.value == [1000 + i for i in range(33)]
    st = thr.smart_statistics()
    assert max(seen) == 4 and thr._wr_out_peak == 4
    assert st.c_max_wr == 4 and st.credits == 4 and st.outstanding_wr == 0 and st.queued_wr == 0
    assert st.posts_waited >= 9


def test_a_deferred_post_is_rung_by_the_completion_that_frees_credits(prefix):
    def two_reads(smart):
        with new_fabric(prefix) as fab:
            env, node = node_of(fab, smart)
            co = node.thread().coroutine()

            def body():
                a = co.read(gaddr(MN, 0), 8)
                co.post()
                b = co.read(gaddr(MN, 64), 8)
                co.post()
                yield co.sync()
                return a.ok and b.ok

            p = env.process(body())
            env.run()
            assert p.value
            return env.now

    free, capped = two_reads(None), two_reads({"throttle": "fixed", "c_max": 1})
    one = two_reads({"throttle": "fixed", "c_max": 2})
    assert one == free                       # within the cap nothing changes
    assert capped > free + 1500              # the second READ waited for a whole round trip


def test_wqe_cache_collapse_and_throttling_removes_it(prefix):
    """SMART Fig. 4: 96 threads x 32 outstanding READs thrash the WQE cache; capping each
    thread at 8 (fixed) or letting Algorithm 1 pick the cap (adaptive, Δ scaled to 20 µs, one
    tuner for the node so that a sample counts enough completions)
    restores the rate of 96 x 8."""
    d8, _ = reads_closed_loop(prefix, threads=96, depth=8)
    d32, _ = reads_closed_loop(prefix, threads=96, depth=32)
    fixed, _ = reads_closed_loop(prefix, threads=96, depth=32, smart={"throttle": "fixed", "c_max": 8})
    # Δ = 20 µs: several loaded round trips (3072 WRs in flight at 60 Mops is 50 µs), so that a
    # sample sees its candidate's steady state; the window starts 70 µs into the stable phase,
    # once the backlog built while sampling "unlimited" has drained.
    adaptive, stats = reads_closed_loop(prefix, threads=96, depth=32, warm=190_000, window=60_000,
                                        smart={"throttle": "adaptive", "delta_ns": 20_000, "hold": 10,
                                               "tuner_scope": "node"})
    assert d32 < 0.7 * d8                    # the collapse
    assert fixed > 0.97 * d8 and adaptive > 0.95 * d8
    st = stats[0]
    assert st.c_max_wr is not None and st.c_max_wr <= 12   # not "unlimited": that one thrashes
    assert st.tuner_samples >= 6
    rates = {c: r for _, c, r in st.tuner_history[:6]}
    assert rates[None] < rates[st.c_max_wr]


def test_tuner_picks_the_best_candidate_and_resamples():
    best = 8
    rate = {4: 1, 6: 2, 8: 5, 10: 3, 12: 2, None: 1}    # WRs per ns under each cap
    tuner = WrTuner((4, 6, 8, 10, 12, None), delta_ns=1000, hold=3)
    now = 0
    changed, cap = tuner.tick(now, 0)
    assert changed and cap == 4
    applied = [cap]
    for _ in range(6 * 10 + 3 * 10 + 1):        # ticks every 100 ns through one epoch and a bit
        now += 100
        changed, new = tuner.tick(now, rate[cap] * 100)
        if changed:
            applied.append(new)
            cap = new
    assert applied[:7] == [4, 6, 8, 10, 12, None, best]
    assert applied[7] == 4 and tuner.epochs == 1        # stable for 3 x Δ, then resampling
    assert tuner.samples == 6


# -- conflict avoidance ------------------------------------------------------------------------------

def test_backoff_cas_waits_only_on_failure(prefix):
    t0_ns = round(4096 / 2.4)                       # cx6-200g: 2.4 GHz

    def one(smart, expected):
        with new_fabric(prefix) as fab:
            env, node = node_of(fab, smart)
            co = node.thread().coroutine()
            fab.memory[MN].host64[0] = 5

            def body():
                return (yield from co.backoff_cas(gaddr(MN, 0), expected, 5))

            p = env.process(body())
            env.run()
            return p.value, env.now, node.threads[0].smart_statistics()

    (ok, old), t_ok, _ = one(None, 5)
    assert ok and old == 5
    (ok, old), t_fail_off, st_off = one(None, 4)
    assert not ok and old == 5 and t_fail_off == t_ok         # off: a plain CAS
    assert (st_off.backoff_cas, st_off.retries, st_off.backoffs) == (1, 1, 0)
    (ok, _), t_ok_on, _ = one({"backoff": True}, 5)
    assert ok and t_ok_on == t_ok                              # success: no wait
    (ok, _), t_fail_on, st = one({"backoff": True}, 4)
    assert not ok and t0_ns <= t_fail_on - t_ok < 2 * t0_ns    # t0 + Rand(t0)
    assert st.backoffs == 1 and st.backoff_ns == t_fail_on - t_ok and st.t_max_ns == round(4096 / 2.4)   # adapted: starts at t0


def test_backoff_doubles_up_to_t_max_and_resets_on_success():
    cfg = SmartConfig(backoff=True, t_max_cycles=4096 * 4)
    ctl = ConflictController(cfg)
    assert [ctl.backoff_cycles(i, 0.0) for i in range(5)] == [4096, 8192, 16384, 16384, 16384]
    assert ctl.backoff_cycles(0, 0.5) == 4096 + 2048
    full = ConflictController(SmartConfig(backoff=True, jitter="full", dyn_limit=False))
    assert full.backoff_cycles(2, 0.5) == 8192


def test_retry_rate_moves_t_max_between_t0_and_t_m():
    cfg = SmartConfig(backoff=True, t_max_cycles=4096, window_ns=1000)
    ctl = ConflictController(cfg)
    for gamma, want in ((0.6, 8192), (0.9, 16384), (0.3, 16384), (0.05, 8192), (0.0, 4096), (0.0, 4096)):
        ctl.adapt(gamma)
        assert ctl.t_max == want
    for _ in range(20):
        ctl.adapt(1.0)
    assert ctl.t_max == 4096 << 10
    # through record() and op_done(): γ = retries / (retries + operations), as SMART's artifact;
    # the window closes at the first retry after window_ns
    ctl2 = ConflictController(SmartConfig(backoff=True, window_ns=1000))
    assert ctl2.t_max == 4096                                  # adapted: starts at t0
    ctl2.op_done(0)
    assert not any(ctl2.record(t, ok) for t, ok in ((100, False), (300, False), (600, True), (900, False)))
    ctl2.op_done(950)
    assert not ctl2.record(1200, True)                         # a success never closes a window
    assert ctl2.record(1300, False) and ctl2.gamma == 4 / 6 and ctl2.t_max == 8192
    ctl2.op_done(1400)
    ctl2.op_done(1500)
    for t in range(1600, 2300, 100):
        ctl2.op_done(t)
    assert ctl2.record(2400, False) and ctl2.gamma == 1 / 10 and ctl2.t_max == 8192   # dead band
    fixed = ConflictController(SmartConfig(backoff=True, dyn_limit=False, t_max_cycles=8192))
    fixed.adapt(1.0)
    assert fixed.t_max == 8192
    assert ConflictController(SmartConfig(backoff=True, dyn_limit=False)).t_max == 4096 << 10   # fixed: t_M


def test_coroutine_throttling_moves_c_max_before_t_max():
    cfg = SmartConfig(backoff=True, coro_throttle=True, t_max_cycles=4096)
    ctl = ConflictController(cfg, c_upper=8)
    steps = []
    for gamma in (0.9, 0.9, 0.9, 0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0):
        ctl.adapt(gamma)
        steps.append((ctl.c_max, ctl.t_max))
    assert steps == [(4, 4096), (2, 4096), (1, 4096), (1, 8192), (1, 16384),
                     (2, 16384), (4, 16384), (8, 16384), (8, 8192), (8, 4096), (8, 4096)]


def test_coro_credits_fix_c_max_start_and_bound_as_the_artifact():
    # SMART's artifact starts every thread at 64 credits whatever its coroutines: with 8
    # coroutines c_max binds only after three halvings, and t_max moves only at 64 or at 1
    cfg = SmartConfig(backoff=True, coro_throttle=True, t_max_cycles=4096, coro_credits=64)
    ctl = ConflictController(cfg, c_upper=8)
    ctl.set_upper(8)                               # a coroutine was added: the bound stays
    assert (ctl.c_upper, ctl.c_max) == (64, 64)
    for _ in range(7):
        ctl.adapt(0.9)
    assert (ctl.c_max, ctl.t_max) == (1, 8192)
    for _ in range(7):
        ctl.adapt(0.0)
    assert (ctl.c_max, ctl.t_max) == (64, 4096)
    with pytest.raises(ValueError, match="coro_credits"):
        SmartConfig(coro_throttle=True, coro_credits=0)


def test_restart_returns_to_the_starting_limits():
    ctl = ConflictController(SmartConfig(backoff=True, coro_throttle=True), c_upper=8)
    for _ in range(5):
        ctl.adapt(0.9)
    assert (ctl.c_max, ctl.t_max) == (1, 4 * 4096)
    ctl.restart()
    assert (ctl.c_max, ctl.t_max, ctl.gamma, ctl.windows) == (8, 4096, None, 5)


def test_node_restart_admits_waiting_operations(fab):
    env, node = node_of(fab, {"coro_throttle": True})
    thr = node.thread()
    cos = [thr.coroutine() for _ in range(4)]
    thr._conflict.c_max = 1
    started = []

    def op(co, i):
        yield from thr.op_begin(co)
        started.append((i, env.now))
        yield 1_000
        thr.op_end()

    for i, co in enumerate(cos):
        env.process(op(co, i))
    env.schedule(10, node.restart_conflict_avoidance)
    env.run()
    assert started[0] == (0, 0) and sorted(t for _, t in started[1:]) == [10, 10, 10]
    assert thr.smart_statistics().c_max_ops == 4


def test_t_max_grows_under_contention_on_one_word(fab):
    """Eight coroutines increment one word with backoff_cas: the retry rate is high, t_max
    climbs from t0; every increment lands exactly once."""
    smart = {"backoff": True, "t_max_cycles": 4096, "window_ns": 20_000}
    env, node = node_of(fab, smart)
    word = gaddr(MN, fab.allocate("m0", 64))
    per = 25

    def incr(co):
        for _ in range(per):
            cur = 0
            while True:
                ok, old = yield from co.backoff_cas(word, cur, cur + 1)
                if ok:
                    break
                cur = old

    threads = [node.thread() for _ in range(4)]
    for thr in threads:
        for _ in range(2):
            env.process(incr(thr.coroutine()))
    env.run()
    assert int(fab.memory[MN].host64[(word & ((1 << 48) - 1)) // 8]) == 8 * per
    st = [t.smart_statistics() for t in threads]
    assert sum(s.retries for s in st) > 0 and all(s.backoff_cas == 2 * per + s.retries for s in st)
    assert max(s.t_max_ns for s in st) > round(4096 / 2.4)
    assert all(s.windows >= 1 for s in st)


def test_node_scope_shares_one_retry_rate_controller(fab):
    """retry_scope = "node": every thread of the node counts into one controller, so t_max and
    c_max are the same everywhere; increments on one contended word still land exactly once."""
    smart = {"backoff": True, "coro_throttle": True, "window_ns": 5_000, "retry_scope": "node"}
    env, node = node_of(fab, smart)
    word = gaddr(MN, fab.allocate("m0", 64))
    threads = [node.thread() for _ in range(3)]

    def incr(thr, co):
        for _ in range(10):
            cur = 0
            while True:
                yield from thr.op_begin(co)
                ok, old = yield from co.backoff_cas(word, cur, cur + 1)
                thr.op_end()
                if ok:
                    break
                cur = old

    for thr in threads:
        for _ in range(4):
            env.process(incr(thr, thr.coroutine()))
    env.run()
    assert int(fab.memory[MN].host64[(word & ((1 << 48) - 1)) // 8]) == 3 * 4 * 10
    assert len({id(t._conflict) for t in threads}) == 1 and threads[0]._conflict.c_upper == 4
    st = [t.smart_statistics() for t in threads]
    assert len({(s.t_max_ns, s.c_max_ops, s.windows) for s in st}) == 1 and st[0].windows >= 1
    with pytest.raises(ValueError, match="retry_scope"):
        SmartConfig(retry_scope="rack")


def test_coroutine_throttling_limits_concurrent_operations(fab):
    env, node = node_of(fab, {"coro_throttle": True})
    thr = node.thread()
    cos = [thr.coroutine() for _ in range(8)]
    thr._conflict.c_max = 3
    running, peak, done = [0], [0], [0]

    def op(co):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        co.read(gaddr(MN, 0), 8)
        yield co.sync()
        running[0] -= 1
        return 1

    def client(co):
        for _ in range(5):
            r = yield from thr.op(op(co), co)
            done[0] += r

    for co in cos:
        env.process(client(co))
    env.run()
    assert done[0] == 40 and peak[0] == 3
    st = thr.smart_statistics()
    assert st.c_max_ops == 3 and st.ops_running == 0 and st.ops_waiting == 0

    env2, node2 = node_of(fab, None)           # off: op_begin never waits
    thr2 = node2.thread()
    running[0] = peak[0] = done[0] = 0

    def client2(co):
        for _ in range(5):
            r = yield from thr2.op(op(co), co)
            done[0] += r

    for _ in range(8):
        env2.process(client2(thr2.coroutine()))
    env2.run()
    assert done[0] == 40 and peak[0] == 8


# -- doorbell sharers ------------------------------------------------------------------------------

def test_idle_thread_leaves_its_doorbell(fab):
    """per_thread_qp: threads 4 and 16 share medium-latency doorbell 0 of the context. Once
    thread 16 is idle, thread 4's doorbell hold is one sharer shorter (lock_per_sharer_ns)."""
    env, node = node_of(fab, policy="per_thread_qp")
    threads = [node.thread() for _ in range(17)]
    for t in threads:
        t.qp(MN)                               # QPs in thread order: doorbells round-robin
    cos = [t.coroutine() for t in threads]
    a, b = cos[4], cos[16]
    lat = []

    def post(co):
        t = env.now
        co.read(gaddr(MN, 0), 8)
        yield co.sync()
        lat.append(env.now - t)

    def body():
        yield from post(a)
        yield from post(b)
        yield 20_000
        yield from post(a)                     # two sharers
        sharers = dict(threads[4].doorbell_sharers())
        threads[16].idle()
        yield 20_000
        yield from post(a)                     # one sharer
        alone = dict(threads[4].doorbell_sharers())
        threads[16].resume()
        yield from post(b)                     # b posts again: a sharer again
        return sharers, alone, dict(threads[4].doorbell_sharers())

    p = env.process(body())
    env.run()
    shared, alone, back = p.value
    assert threads[4].qp(MN).doorbell == threads[16].qp(MN).doorbell
    assert list(shared.values()) == [2] and list(alone.values()) == [1] and list(back.values()) == [2]
    assert lat[2] - lat[3] == fab.profile.doorbell.lock_per_sharer_ns
    threads[16].idle()
    threads[16].idle()                         # idempotent
    assert list(threads[4].doorbell_sharers().values()) == [1]


# -- all switches off: identical to before -------------------------------------------------------------

def mixed_run(prefix, smart, policy):
    """Reads, writes, FAA and contended CAS from 20 threads x 2 coroutines on a fresh fabric (with
    per_thread_qp, threads 4-7 share doorbells with 16-19); a
    digest of virtual time."""
    with new_fabric(prefix) as fab:
        return _mixed_run(fab, smart, policy)


def _mixed_run(fab, smart, policy):
    env, node = node_of(fab, smart, policy=policy)
    lat = []
    word = gaddr(MN, 1 << 20)

    def client(co, rng):
        for i in range(30):
            t = env.now
            k = int(rng.integers(4))
            a = gaddr(MN, int(rng.integers(4096)) * 64)
            if k == 0:
                co.read(a, 64)
                co.read(a + 4096, 8)
            elif k == 1:
                co.write(a, b"x" * 32)
            elif k == 2:
                co.faa(a, 1)
            else:
                old = co.read(word, 8)
                yield co.sync()
                ok, _ = yield from co.backoff_cas(word, old.value, old.value + 1)
            yield co.sync()
            lat.append(env.now - t)

    k = 0
    for _ in range(20):
        thr = node.thread()
        for _ in range(2):
            env.process(client(thr.coroutine(), np.random.default_rng(k)))
            k += 1
    env.run()
    return env.now, sum(lat), max(lat), len(lat)


# Recorded with the coroutine verbs before the SMART switches existed (backoff_cas replaced by a
# plain cas + sync there): (end ns, sum of latencies ns, max latency ns, operations). Re-recorded
# when PCIe payload got its own rate (pcie.payload_gbps), when RC QPs began to complete in order
# (shm/nic.py), when lock_per_sharer_ns was refitted (170 ns) and when effects began to follow RC
# order per QP (docs/fabric.md, "Ordering rules"), and in issue 40 when coroutine switches began
# to cost CPU (profile software.coro_switch_cycles: two coroutines a thread here) and the atomic
# slots became 1,024 per node: model changes, not a switch's.
RECORDED = {
    "per_thread_doorbell": (136895, 4667211, 9972, 1200),
    "per_thread_qp": (138759, 4728273, 10342, 1200),
}


@pytest.mark.parametrize("policy", sorted(RECORDED))
def test_all_switches_off_give_the_recorded_virtual_times(prefix, policy):
    off = SmartConfig(throttle="off", backoff=False, coro_throttle=False)
    got = {repr(s): mixed_run(prefix, s, policy) for s in (None, {}, off)}
    assert len(set(got.values())) == 1, got
    assert next(iter(got.values())) == RECORDED[policy]
