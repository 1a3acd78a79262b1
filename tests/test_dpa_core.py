"""DPA cores in virtual time (nodes/devices/dpa_core.py), SimPy style: threads interleave on stalls,
doorbells jump the queue, utilisation, limits."""
import dataclasses

import pytest

from nodes.devices.dpa_core import Dpa, DpaCoreStats, DpaError
from shm.sim.env import Environment
from shm.profile import load_profile

BF3 = load_profile("bf3")


@pytest.fixture
def env():
    return Environment(seed=1)


@pytest.fixture
def dpa(env):
    return Dpa(env, BF3)


def test_two_threads_interleave_on_stalls(env, dpa):
    log = []

    def worker(th, name):
        for _ in range(2):
            yield th.compute(100)
            log.append((env.now, name))
            yield th.stall(300)                 # off the core: the other thread runs

    a, b = dpa.thread(core=0), dpa.thread(core=0)
    env.process(worker(a, "a")); env.process(worker(b, "b"))
    env.run()
    assert log == [(100, "a"), (200, "b"), (500, "a"), (600, "b")]
    assert dpa.cores[0].statistics().switches == 3


def test_a_core_runs_one_thread_at_a_time_other_cores_in_parallel(env, dpa):
    done = []

    def worker(th):
        yield th.compute(100)
        done.append((env.now, th.core.index))

    for core in (0, 0, 1):
        env.process(worker(dpa.thread(core=core)))
    env.run()
    assert done == [(100, 0), (100, 1), (200, 0)]


def test_doorbell_jumps_the_queue(env, dpa):
    log = []

    def worker(th, name, start, doorbell):
        yield start
        yield th.compute(100, doorbell=doorbell)
        log.append(name)

    ths = [dpa.thread(core=2) for _ in range(4)]
    for th, (name, start, db) in zip(ths, [("run", 0, False), ("x", 1, False), ("y", 2, False), ("pkt", 3, True)]):
        env.process(worker(th, name, start, db))
    env.run()
    assert log == ["run", "pkt", "x", "y"]      # the running burst is not preempted
    s = dpa.cores[2].statistics()
    assert (s.bursts, s.doorbell_bursts) == (4, 1)
    assert s.ready_wait_ns == (100 - 3) + (200 - 1) + (300 - 2)


def test_utilisation_in_statistics(env, dpa):
    def worker(th):
        for _ in range(3):
            yield th.compute(200)
            yield th.stall(800)

    th = dpa.thread(core=5)
    env.process(worker(th))
    env.run(until=2000)
    s = dpa.cores[5].statistics()
    assert isinstance(s, DpaCoreStats)
    assert (s.now, s.busy_ns, s.utilisation) == (2000, 400, 0.2)
    env.run()
    assert th.statistics().compute_ns == 600 and th.statistics().stall_ns == 2400


def test_load_misses_stall_l1_hits_compute(env, dpa):
    mem_ns, l1_ns = BF3.dpa.memory_ns, BF3.dpa.l1_ns
    log = []

    def reader(th):
        yield th.load(0, 8)                     # DPA memory: a stall
        log.append(env.now)
        yield th.load(0, 8)                     # L1: on the core
        log.append(env.now)

    def busy(th):
        yield th.compute(1000)

    a, b = dpa.thread(core=0), dpa.thread(core=0)
    env.process(reader(a)); env.process(busy(b))
    env.run()
    assert log == [mem_ns, 1000 + l1_ns]        # the miss overlapped b's burst; the hit waited for the core
    assert a.statistics().loads == 2


def test_dma_is_a_stall_of_the_dma_latency(env, dpa):
    def worker(th):
        yield th.dma()

    env.process(worker(dpa.thread()))
    env.run()
    assert env.now == BF3.dma.latency_ns == 910


def test_thread_limits_name_the_key(env):
    dpa = Dpa(env, BF3)
    for _ in range(16):
        dpa.thread(core=0)
    with pytest.raises(DpaError, match="'dpa.threads_per_core' is 16") as ei:
        dpa.thread(core=0)
    assert "\n" not in str(ei.value)
    while len(dpa.threads) < 189:
        dpa.thread()
    assert max(len(c.threads) for c in dpa.cores) == 16
    with pytest.raises(DpaError, match="'dpa.usable_threads' is 189"):
        dpa.thread()
    with pytest.raises(DpaError, match="'dpa.cores' is 16"):
        Dpa(env, BF3).thread(core=16)
    with pytest.raises(DpaError, match=r"no \[dpa\] table"):
        Dpa(env, load_profile("cx6-200g"))


def test_threads_spread_over_cores_by_default(env):
    dpa = Dpa(env, dataclasses.replace(BF3, dpa=dataclasses.replace(BF3.dpa, cores=2, usable_threads=4)))
    assert [dpa.thread().core.index for _ in range(4)] == [0, 1, 0, 1]


def test_the_example_of_docs_devices_runs():
    """docs/devices.md's example, run as written (its comment gives the end time)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "devices.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope = {"Environment": Environment, "Dpa": Dpa, "load_profile": load_profile, "print": lambda *a: None}
    exec(code, scope)
    assert scope["env"].now == 1727
    assert round(scope["dpa"].cores[0].statistics().utilisation, 2) == 0.32
