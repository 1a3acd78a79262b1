"""Co-located tests of the event core (shm/sim/env.py), SimPy style."""
import numpy as np
import pytest

from shm.sim.env import (INF, Environment, Event, Interrupt, ProcessError,
                               all_of, any_of)


@pytest.fixture
def env():
    return Environment(seed=1)


def test_timeouts_run_in_time_order(env):
    log = []

    def p(env, name, delay):
        yield env.timeout(delay)
        log.append((env.now, name))

    env.process(p(env, "c", 30))
    env.process(p(env, "a", 10))
    env.process(p(env, "b", 20))
    env.run()
    assert log == [(10, "a"), (20, "b"), (30, "c")]


def test_ties_run_in_scheduling_order(env):
    log = []

    def p(env, name):
        yield 5
        log.append(name)
        yield env.timeout(5)
        log.append(name)

    for name in "xyz":
        env.process(p(env, name))
    env.run()
    assert log == list("xyzxyz")
    assert env.now == 10


def test_yield_int_is_a_delay(env):
    times = []

    def p(env):
        for d in (0, 3, 7, np.int64(10)):
            yield d
            times.append(env.now)

    env.process(p(env))
    env.run()
    assert times == [0, 3, 10, 20]


def test_timeout_value_and_negative_delay(env):
    def p(env):
        v = yield env.timeout(4, value="hi")
        return v

    proc = env.process(p(env))
    env.run()
    assert proc.value == "hi"
    with pytest.raises(ValueError):
        env.timeout(-1)


def test_charge_debt_delays_next_resume(env):
    times = []

    def p(env):
        env.charge(100)
        yield 30                       # debt 100 > delay 30 -> resume at 100
        times.append(env.now)
        env.charge(5)
        yield 30                       # delay 30 > debt 5 -> resume at 130
        times.append(env.now)
        env.charge(50)
        yield env.timeout(20)          # event at 150 but debt until 180
        times.append(env.now)
        ev = env.event().succeed("done")
        yield env.timeout(0)
        env.charge(7)
        v = yield ev                   # already processed: resume at now + debt
        times.append((env.now, v))

    env.process(p(env))
    env.run()
    assert times == [100, 130, 180, (187, "done")]
    assert env.statistics().processes_alive == 0


def test_charge_outside_process_is_an_error(env):
    with pytest.raises(RuntimeError):
        env.charge(10)


def test_event_succeed_and_fail(env):
    ev_ok, ev_bad = env.event(), env.event()
    got = []

    def waiter(env):
        v = yield ev_ok
        got.append((env.now, v))
        try:
            yield ev_bad
        except KeyError as e:
            got.append((env.now, "caught", e.args[0]))

    def trigger(env):
        yield 10
        ev_ok.succeed(42)
        yield 5
        ev_bad.fail(KeyError("boom"))

    env.process(waiter(env))
    env.process(trigger(env))
    env.run()
    assert got == [(10, 42), (15, "caught", "boom")]
    with pytest.raises(RuntimeError):
        ev_ok.succeed()


def test_succeed_at_fires_in_the_future(env):
    ev = env.event()
    ev.succeed_at(500, "completion")

    def p(env):
        v = yield ev
        return env.now, v

    proc = env.process(p(env))
    env.run()
    assert proc.value == (500, "completion")


def test_process_return_value_and_waiting_on_a_process(env):
    def child(env):
        yield 7
        return "child-result"

    def parent(env):
        c = env.process(child(env), name="child")
        r = yield c
        return env.now, r

    par = env.process(parent(env))
    env.run()
    assert par.value == (7, "child-result")
    assert not par.is_alive


def test_waiting_on_a_finished_process_resumes_at_once(env):
    def child(env):
        yield 1
        return 9

    def parent(env, c):
        yield 50
        v = yield c
        return env.now, v

    c = env.process(child(env))
    par = env.process(parent(env, c))
    env.run()
    assert par.value == (50, 9)


def test_all_of_and_any_of(env):
    def p(env):
        t1, t2 = env.timeout(10, "a"), env.timeout(20, "b")
        vals = yield all_of(env, [t1, t2])
        at_all = env.now
        t3, t4 = env.timeout(5, "c"), env.timeout(50, "d")
        first = yield any_of(env, [t3, t4])
        return vals, at_all, env.now, first == {t3: "c"}, (yield all_of(env, []))

    proc = env.process(p(env))
    env.run()
    assert proc.value == (["a", "b"], 20, 25, True, [])


def test_all_of_fails_when_one_fails(env):
    bad = env.event()

    def p(env):
        with pytest.raises(ValueError):
            yield all_of(env, [env.timeout(10), bad])
        return env.now

    def q(env):
        yield 3
        bad.fail(ValueError("x"))

    proc = env.process(p(env))
    env.process(q(env))
    env.run()
    assert proc.value == 3


def test_exception_propagates_with_process_name(env):
    def bad(env):
        yield 5
        raise ValueError("kaput")

    env.process(bad(env), name="worker-7")
    with pytest.raises(ProcessError, match="worker-7.*kaput") as info:
        env.run()
    assert isinstance(info.value.__cause__, ValueError)
    assert env.now == 5


def test_child_exception_is_thrown_into_waiting_parent(env):
    def child(env):
        yield 1
        raise KeyError("inner")

    def parent(env):
        try:
            yield env.process(child(env), name="kid")
        except KeyError:
            return "handled"

    par = env.process(parent(env))
    env.run()
    assert par.value == "handled"


def test_yielding_garbage_is_a_type_error(env):
    def p(env):
        yield "soon"

    env.process(p(env), name="confused")
    with pytest.raises(ProcessError, match="confused") as info:
        env.run()
    assert isinstance(info.value.__cause__, TypeError)
    assert "soon" in str(info.value.__cause__)


def test_negative_int_delay_is_an_error(env):
    def p(env):
        yield -4

    env.process(p(env), name="neg")
    with pytest.raises(ProcessError, match="neg"):
        env.run()


def test_failed_event_nobody_waits_for_is_not_lost(env):
    env.event().fail(OSError("lost?"))
    with pytest.raises(OSError):
        env.run()


def test_schedule_callbacks(env):
    log = []
    env.schedule(20, log.append, "b")
    env.schedule(10, lambda: log.append("a"))
    env.schedule(20, lambda x, y: log.append(x + y), "c", "d")
    env.run()
    assert log == ["a", "b", "cd"]

    def p(env):
        yield 100
        env.schedule(50, log.append, env.now)   # in the past: clamped to now

    env.process(p(env))
    env.run()
    assert log[-1] == 120 and env.now == 120


def test_run_until_time(env):
    log = []

    def p(env):
        while True:
            yield 10
            log.append(env.now)

    env.process(p(env))
    env.run(until=35)
    assert log == [10, 20, 30] and env.now == 35
    env.run(until=50)                   # events at t == until run
    assert log == [10, 20, 30, 40, 50] and env.now == 50
    with pytest.raises(ValueError):
        env.run(until=10)


def test_run_until_event(env):
    done = env.event()
    log = []

    def p(env):
        yield 100
        done.succeed("ok")
        yield 1
        log.append("too far")

    env.process(p(env))
    env.run(until=done)
    assert env.now == 100 and done.processed and done.value == "ok" and log == []
    env.run()
    assert log == ["too far"]


def test_step_and_peek(env):
    env.timeout(3)
    env.timeout(1)
    assert env.peek() == 1
    env.step()
    assert env.now == 1 and env.peek() == 3
    env.step()
    assert env.peek() == INF
    with pytest.raises(RuntimeError):
        env.step()


def test_interrupt(env):
    log = []

    def sleeper(env):
        try:
            yield 1000
        except Interrupt as i:
            log.append((env.now, i.cause))
        yield 5                      # the stale wake-up at 1000 must not resume us
        log.append(env.now)
        try:
            yield env.event()
        except Interrupt:
            log.append(("again", env.now))

    def boss(env, s):
        yield 10
        s.interrupt("wake up")
        yield 10
        s.interrupt()

    s = env.process(sleeper(env))
    env.process(boss(env, s))
    env.run()
    assert log == [(10, "wake up"), 15, ("again", 20)]


def test_active_process_and_statistics(env):
    seen = []

    def p(env):
        seen.append(env.active_process)
        yield 1

    proc = env.process(p(env), name="me")
    env.run()
    assert seen == [proc] and env.active_process is None
    st = env.statistics()
    assert st.now == 1 and st.processes_alive == 0 and st.events >= 2 and st.queued == 0
    assert proc.statistics().name == "me"
    with pytest.raises(AttributeError):
        st.now = 3                          # immutable record


def _trace(seed):
    env = Environment(seed=seed)
    log = []

    def p(env, i):
        for _ in range(20):
            yield env.rng.randrange(1, 50)
            log.append((env.now, i, env.rng.random()))

    for i in range(5):
        env.process(p(env, i))
    env.run()
    return log


def test_determinism_same_seed_same_trace():
    assert _trace(7) == _trace(7)
    assert _trace(7) != _trace(8)


def test_send_without_sync_is_an_error(env):
    with pytest.raises(RuntimeError):
        env.send(1, 10, (1,))
