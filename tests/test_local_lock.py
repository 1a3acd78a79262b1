"""The local lock table (nodes/systems/lib/local_lock.py): read delegation only hands a GET the
result of a read that started after it, write combining writes the last value handed over and
answers the carried writers once that write is done, a missing key sends the carried writers
back, and a leader that stops hands the lead on. Virtual time only (no fabric)."""

from __future__ import annotations

from shm.sim.env import Environment
from nodes.systems.lib.local_lock import LocalLockTable
from shm.failpoints import ClientCrash


class Store:
    """A remote key with a value: a read takes 1000 ns and samples the value at 500 ns; a write
    takes 1000 ns and lands at 500 ns."""

    def __init__(self, env, value=b"v0"):
        self.env, self.value, self.reads, self.writes = env, value, 0, []

    def read(self):
        self.reads += 1
        yield 500
        got = self.value
        yield 500
        return got

    def write(self, take, present=True):
        v = take()
        yield 500
        if not present:
            yield 500
            return False
        self.value = v
        self.writes.append(v)
        yield 500
        return True


def stopped(gen):
    """Generator: ``gen``'s result, or "stopped" if a crash failpoint stopped it."""
    try:
        return (yield from gen)
    except ClientCrash:
        return "stopped"


def spawn(env, at, gen_fn, out, name):
    def run():
        yield at
        got = yield from gen_fn()
        out[name] = (env.now, got)
    return env.process(run())


def test_a_get_arriving_during_a_read_waits_for_the_next_read_and_shares_it():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}
    spawn(env, 0, lambda: t.read("k", s.read), out, "a")
    for i, at in enumerate((100, 200, 300)):
        spawn(env, at, lambda: t.read("k", s.read), out, f"b{i}")
    env.process((lambda: (yield 600) or setattr(s, "value", b"v1"))())   # the value changes after a sampled
    env.run()
    assert out["a"] == (1000, b"v0")
    # b0 leads the second read (1000..2000, sampled at 1500: after the change), b1 and b2 take its result
    assert out["b0"] == (2000, b"v1") and out["b1"] == (2000, b"v1") and out["b2"] == (2000, b"v1")
    assert s.reads == 2 and t.read_handover == 2 and t.read_leads == 2


def test_gets_of_other_keys_do_not_wait():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}
    spawn(env, 0, lambda: t.read("k", s.read), out, "a")
    spawn(env, 100, lambda: t.read("j", s.read), out, "b")
    env.run()
    assert out["a"][0] == 1000 and out["b"][0] == 1100 and t.read_handover == 0


def test_updates_arriving_during_a_write_are_combined_into_the_next_write_with_the_last_value():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}
    spawn(env, 0, lambda: t.write("k", b"a", s.write), out, "a")
    spawn(env, 100, lambda: t.write("k", b"b", s.write), out, "b")
    spawn(env, 200, lambda: t.write("k", b"c", s.write), out, "c")
    env.run()
    # a writes its own value (taken at 0); b leads the next write with c's value, c is carried
    assert s.writes == [b"a", b"c"]
    assert out["a"] == (1000, True) and out["b"] == (2000, True) and out["c"] == (2000, True)
    assert t.write_handover == 1 and t.write_leads == 2 and not t.busy("k")


def test_a_value_handed_over_before_the_take_is_carried_by_that_write():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}

    def slow(take):
        yield 300                                  # the leader walks before it takes the value
        return (yield from s.write(take))

    spawn(env, 0, lambda: t.write("k", b"a", slow), out, "a")
    spawn(env, 100, lambda: t.write("k", b"b", slow), out, "b")
    env.run()
    assert s.writes == [b"b"] and out["b"] == (1300, True) and t.write_handover == 1


def test_carried_writers_retry_when_the_leader_finds_the_key_missing():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}
    present = iter([False, True])

    def write(take):
        return (yield from s.write(take, next(present)))

    def late(take):
        yield 100
        return (yield from write(take))

    spawn(env, 0, lambda: t.write("k", b"a", late), out, "a")
    spawn(env, 50, lambda: t.write("k", b"b", write), out, "b")   # carried by a's take at 100
    env.run()
    assert out["a"] == (1100, False)              # the key was missing for a
    assert out["b"] == (2100, True) and s.writes == [b"b"] and t.write_retries == 1 and t.write_handover == 0


def test_a_read_leader_that_stops_hands_the_lead_on():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}

    def crash():
        yield 200
        raise ClientCrash("failpoint test")

    spawn(env, 0, lambda: stopped(t.read("k", crash)), out, "a")
    spawn(env, 100, lambda: t.read("k", s.read), out, "b")
    spawn(env, 150, lambda: t.read("k", s.read), out, "c")
    env.run()
    assert out["a"] == (200, "stopped")
    assert out["b"] == (1200, b"v0") and out["c"] == (1200, b"v0") and t.read_handover == 1


def test_a_write_leader_that_stops_stops_its_carried_writers_and_the_next_one_leads():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}

    def crash(take):
        take()
        yield 500
        raise ClientCrash("failpoint test")

    spawn(env, 0, lambda: stopped(t.write("k", b"a", lambda take: (yield 10) or (yield from crash(take)))), out, "a")
    spawn(env, 0, lambda: stopped(t.write("k", b"b", s.write)), out, "b")    # queued before a's take: carried
    spawn(env, 600, lambda: t.write("k", b"c", s.write), out, "c")
    env.run()
    assert out["a"] == (510, "stopped") and out["b"] == (510, "stopped")
    assert out["c"] == (1600, True) and s.writes == [b"c"]


def test_with_stamps_a_get_takes_a_value_read_by_a_read_posted_after_it_arrived():
    env = Environment(seed=1)
    t, s, out = LocalLockTable(env), Store(env), {}

    def walk_then_read(mark):
        yield 100                                  # walk: READs that do not produce the value
        yield 400
        stamp = mark()                             # the leaf READ: posted at 500, samples at 1000
        got = yield from s.read()
        return got, stamp

    def absent(mark):
        mark()
        yield 1000
        return None, 0                             # "absent": never taken early

    spawn(env, 0, lambda: t.read("k", walk_then_read, marks=True), out, "a")
    spawn(env, 200, lambda: t.read("k", walk_then_read, marks=True), out, "b")   # before the leaf READ
    spawn(env, 700, lambda: t.read("k", walk_then_read, marks=True), out, "c")   # after it
    spawn(env, 3000, lambda: t.read("j", absent, marks=True), out, "d")
    spawn(env, 3100, lambda: t.read("j", absent, marks=True), out, "e")
    env.run()
    assert out["a"] == (1500, b"v0") and out["b"] == (1500, b"v0")
    assert out["c"] == (3000, b"v0")               # led its own read after a's
    assert out["d"] == (4000, None) and out["e"] == (5000, None)
    assert t.read_handover == 1 and s.reads == 2
