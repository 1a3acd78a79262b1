"""``nic.atomic_write_race``: remote atomics atomic only against other atomics (shm/atomic_race.py).

Co-located, deterministic. A WRITE that lands on a word inside a CAS's read-modify-write window
(``nic.atomic_slot_ns`` after it) is lost with the knob on and kept with it off; atomics among
themselves never lose anything; a failed CAS writes nothing back.
"""

from __future__ import annotations

import pytest

from shm.atomic_race import atomic_race_of
from shm.fabric import gaddr
from shm.profile import with_overrides
from tests.test_coro import MN, mem_word, new_fabric, run, setup
from tests.test_verbs import rack_profile


def profile(race: bool):
    return with_overrides(rack_profile(), {"nic.atomic_write_race": race})


def cas_then_write(fab, delays, expected=0):
    """For each delay, a fresh word holding 0: one thread CASes it ``expected`` -> 1 at t, another
    WRITEs 5 to it at t + delay (the CAS goes later for a negative delay). Returns the final words."""
    env, node = setup(fab)
    a, b = node.thread().coroutine(), node.thread().coroutine()
    words = []

    def one(off, delay):
        def cas():
            yield max(0, -delay)
            a.cas(gaddr(MN, off), expected, 1)
            yield a.sync()

        def write():
            yield max(0, delay)
            b.write(gaddr(MN, off), 5)
            yield b.sync()

        p, q = env.process(cas()), env.process(write())
        yield p
        yield q

    def driver():
        for d in delays:
            off = fab.allocate("m0", 64)
            words.append(off)
            yield 2000
            yield env.process(one(off, d))
        yield 2000                       # the last write-back

    run(env, driver())
    return [mem_word(fab, off) for off in words]


DELAYS = range(-600, 1200, 20)


def test_a_write_inside_a_cas_window_is_lost_only_with_the_knob(prefix):
    with new_fabric(prefix, profile=profile(False)) as fab:
        assert set(cas_then_write(fab, DELAYS)) == {5}, "without the knob a CAS never undoes a WRITE"
    with new_fabric(prefix, profile=profile(True)) as fab:
        final = cas_then_write(fab, DELAYS)
        lost = final.count(1)
        assert 0 < lost < len(final), "some WRITEs land inside the CAS's window, the others outside"
        assert atomic_race_of(fab).writes_lost == lost
        # the window is one read-modify-write long: about atomic_slot_ns of delays
        assert lost * 20 == pytest.approx(fab.profile.nic.atomic_slot_ns, abs=60)


def test_a_failed_cas_writes_nothing_back(prefix):
    with new_fabric(prefix, profile=profile(True)) as fab:
        assert set(cas_then_write(fab, DELAYS, expected=7)) == {5}
        assert atomic_race_of(fab).writes_lost == 0


def test_atomics_among_themselves_lose_nothing(prefix):
    """32 threads FAA one word at once: every add counts with the knob on."""
    with new_fabric(prefix, profile=profile(True)) as fab:
        env, node = setup(fab)
        off = fab.allocate("m0", 8)
        cos = [node.thread().coroutine() for _ in range(32)]

        def adder(co):
            for _ in range(4):
                co.faa(gaddr(MN, off), 1)
                yield co.sync()

        def driver():
            procs = [env.process(adder(co)) for co in cos]
            for p in procs:
                yield p
            yield 2000

        run(env, driver())
        assert mem_word(fab, off) == 128 and atomic_race_of(fab).writes_lost == 0
