"""dpa-store's protection against hot traverser threads (DPA-Store §3.1.3; issue 47, part 1).

A client that sees a traverser answer late (its requests time out and are sent again: the
thread's RX ring overflowed) moves a growing share of that traverser's GETs to an alternative
traverser, without the hot-cache hints; writes always go to the key's owner. Everything here is
virtual time on co-located racks with tiny RX rings, so that a handful of coroutines overflow
one thread.
"""

from __future__ import annotations

import pytest

from cluster.correctness.checker import check
from cluster.scenario import with_rack_tables
from nodes.systems import get_system
from nodes.systems.dpastore import wire as W
from nodes.systems.dpastore.hotswitch import HotSwitch, SwitchSettings
from tests.test_dpastore_rack import store as rack_store

SYSTEM = get_system("dpa-store")
SWITCH = {"hot_switch": True, "timeout_us": 30.0, "resends": 50}


def store(options=None, *, threads=2, coroutines=8, rx_depth=3, traversers=4):
    """A co-located dpa-store with ``rx_depth``-datagram RX rings: (env, [(client, [coroutines])],
    directory, state)."""
    return rack_store({"traversers": traversers, "stitchers": 2, **(options or {})}, threads=threads,
                      coroutines=coroutines, capacity=2000, profile_overrides={"udp.rx_depth": rx_depth})


def k(i: int) -> bytes:
    return int(i).to_bytes(8, "big")


def v(x: int) -> bytes:
    """A key's loaded value: 8 bytes, so the hot-entry cache holds it."""
    return b"v%07d" % x


def owner(key: int, traversers: int = 4) -> int:
    return W.port_hash(key) % traversers


def loaded(state, keys):
    SYSTEM.bulk_load(state.fabric, state.layout, ((k(x), v(x)) for x in keys))


def hammer(env, clients, keys, rounds, *, write_every=0):
    """Every coroutine GETs ``keys`` in turn ``rounds`` times (an UPDATE instead every
    ``write_every``-th operation); returns the wrong values read."""
    bad = []

    def loop(cl, co, j):
        for r in range(rounds):
            x = keys[(r + j) % len(keys)]
            if write_every and (r + j) % write_every == 0:
                assert (yield from cl.update(co, k(x), v(x))) is True
            elif (yield from cl.get(co, k(x))) != v(x):
                bad.append(x)

    procs = [env.process(loop(cl, co, j)) for j, (cl, co) in enumerate((cl, co) for cl, cs in clients for co in cs)]
    env.run()
    assert all(not p.is_alive for p in procs)
    return bad


def totals(clients, directory):
    cs = [cl.statistics() for cl, _ in clients]
    travs, _ = directory["dpastore.dpa"]
    return ({f: sum(getattr(c, f) for c in cs) for f in W.DpaStoreStats._fields},
            [t.statistics() for t in travs])


# -- the switch's logic -------------------------------------------------------------------------

def settings(**kw):
    base = {"hot_threshold": 0.25, "hot_window": 4, "hot_step": 0.25, "hot_rehash": "key+client"}
    return SwitchSettings.of({**base, **kw})


def test_the_share_rises_a_step_per_window_above_the_threshold_and_never_below():
    sw = HotSwitch(8, settings(), hold_ns=1000)
    for i in range(8):                                  # 1 late in 4 = the threshold: not above it
        assert sw.record(3, i % 4 == 0, now=i) == 0
    assert sw.share[3] == 0 and all(sw.target(3, key) == 3 for key in range(100))
    assert [sw.record(3, True, now=10) for _ in range(4)] == [0, 0, 0, 1]
    assert sw.share[3] == 0.25
    for _ in range(12):                                 # three more late windows: capped at 1 - step
        sw.record(3, True, now=20)
    assert sw.share[3] == 0.75
    moved = [sw.target(3, key) for key in range(400)]
    assert sum(t != 3 for t in moved) == 300            # exactly the share, by the accumulator
    assert 3 not in {sw.alternative(3, key, salt) for key in range(400) for salt in (0, 1, 2)}
    assert len({t for t in moved if t != 3}) == 7       # a second hash spreads the keys


def test_the_share_falls_a_step_per_hold_of_replies_in_time():
    sw = HotSwitch(4, settings(), hold_ns=1000)
    for _ in range(8):
        sw.record(1, True, now=0)
    assert sw.share[1] == 0.5
    assert sw.record(1, False, now=999) == 0            # not calm for a whole hold yet
    assert sw.record(1, False, now=1000) == -1 and sw.share[1] == 0.25
    assert sw.record(1, False, now=1500) == 0
    assert sw.record(1, True, now=1900) == 0            # a late reply restarts the hold
    assert sw.record(1, False, now=2500) == 0
    assert sw.record(1, False, now=2900) == -1 and sw.share[1] == 0
    assert all(sw.target(1, key) == 1 for key in range(50))


def test_key_or_key_and_client_alternatives():
    per_client = HotSwitch(64, settings(), 1)
    per_key = HotSwitch(64, settings(hot_rehash="key"), 1)
    key = 0x1234_5678_9ABC
    assert len({per_key.alternative(5, key, salt) for salt in range(32)}) == 1
    assert len({per_client.alternative(5, key, salt) for salt in range(32)}) > 16


def test_no_move_onto_a_traverser_the_client_sees_hot():
    sw = HotSwitch(2, settings(), 1)
    for t in (0, 1):
        for _ in range(4):
            sw.record(t, True, now=0)
    assert all(sw.target(0, key) == 0 for key in range(20))     # the only alternative is hot too


# -- on the rack -------------------------------------------------------------------------------------

def test_an_overflowing_thread_has_its_gets_moved_without_cache_hints_and_only_above_the_threshold():
    hot = [x for x in range(1, 400) if owner(x) == 2][:3]      # three keys of one traverser
    moved = {}
    for threshold in (0.05, 0.99):
        with store({**SWITCH, "hot_threshold": threshold}) as (env, clients, directory, state):
            loaded(state, range(1, 400))
            assert hammer(env, clients, hot, 60) == []
            c, travs = totals(clients, directory)
            assert c["late_replies"] > 10 and c["resends"] >= c["late_replies"]   # the thread overflowed
            moved[threshold] = c["gets_moved"]
            others = [t for i, t in enumerate(travs) if i != 2]
            # every GET of another thread came from the switch, without hints: no cache touched
            assert sum(t.gets for t in others) == sum(t.bypasses for t in others) == c["gets_moved"]
            assert sum(t.cache_hits for t in others) == 0 and travs[2].bypasses == 0
            if threshold < 0.5:
                assert c["switch_raised"] > 0
            else:                                       # late share never above 99 %: nothing moves
                assert c["switch_raised"] == 0 and c["gets_moved"] == 0
    assert moved[0.05] > 100


def test_no_overflow_no_move_and_writes_never_move():
    hot = [x for x in range(1, 400) if owner(x) == 1][:3]
    # deep rings and a timeout beyond the queue's wait: nothing late, nothing moves
    with store({**SWITCH, "timeout_us": 500.0}, rx_depth=64) as (env, clients, directory, state):
        loaded(state, range(1, 400))
        assert hammer(env, clients, hot, 40) == []
        c, _ = totals(clients, directory)
        assert c["late_replies"] == 0 and c["gets_moved"] == 0
    with store(SWITCH) as (env, clients, directory, state):
        loaded(state, range(1, 400))
        assert hammer(env, clients, hot, 80, write_every=3) == []
        c, travs = totals(clients, directory)
        assert c["gets_moved"] > 50
        assert travs[1].writes > 300 and sum(t.writes for i, t in enumerate(travs) if i != 1) == 0


def test_a_moved_get_reads_the_newest_value_from_the_shared_leaf_buffer_and_tree():
    """Owner-cached old value, then UPDATEs at the owner (into the leaf's insert buffer, then a
    patch): a GET moved to another thread reads the newest value every time."""
    key = next(x for x in range(1, 400) if owner(x) == 0)
    # a long timeout: the share set below is held (lowered only after a timeout of calm replies)
    with store({**SWITCH, "timeout_us": 100_000.0}, threads=1, coroutines=1, rx_depth=64) as (
            env, clients, directory, state):
        loaded(state, range(1, 400))
        cl, (co,) = clients[0]
        travs, _ = directory["dpastore.dpa"]
        sw = cl.switch

        def reads(expect, n):
            got = []
            for _ in range(n):
                got.append((yield from cl.get(co, k(key))))
            assert got == [expect] * n
            return got

        def go():
            yield from reads(v(key), 40)                  # at the owner: admitted to its cache
            assert travs[0].statistics().cache_hits > 0
            sw.share[0] = sw.top                                  # the switch has moved 7/8 of them
            for i in range(40):                                   # fills and patches the buffer
                assert (yield from cl.update(co, k(key), b"new%05d" % i)) is True
                yield from reads(b"new%05d" % i, 8)
            assert (yield from cl.delete(co, k(key))) is True
            yield from reads(None, 8)

        p = env.process(go())
        env.run()
        assert not p.is_alive
        c, travs = totals(clients, directory)
        alt = cl.switch.alternative(0, key, cl.salt)
        assert c["gets_moved"] > 250 and travs[alt].bypasses == c["gets_moved"]
        assert directory["dpastore.host"].statistics().update_only + directory["dpastore.host"].statistics().merges >= 2


def test_a_skewed_stress_with_the_switch_on_is_linearizable():
    """Gets, inserts, updates and deletes on a zipfian handful of keys from 16 coroutines, rings of
    3: the hot thread overflows, GETs move, and the history the rack records is linearizable."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    from workloads.stress import StressWorkload
    d = with_rack_tables(SYSTEM, {
        "rack": {"name": "dpastore-hot-stress", "profile": "bf3", "seed": 5},
        "profile_overrides": {"udp.rx_depth": 3},
        "compute": {"count": 1, "threads": 2, "coroutines": 8, "memory": "32MiB"},
        "memory": {"count": 1, "memory": "16MiB"},
        "system": {"name": "dpa-store", "traversers": 4, "stitchers": 2, **SWITCH, "hot_threshold": 0.02,
                   "hot_window": 4},
        "workload": {"preset": "a", "recordcount": 24, "keysize": 8, "valuesize": 32},
        "step": [{"action": "load", "bulk": False}, {"action": "run", "duration_ms": 0.6}]})
    rack = ColocatedRack(scenario_from_dict(d, source="hot-stress.toml"), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(
        keys=24, mix={"get": 0.7, "insert": 0.1, "update": 0.15, "delete": 0.05}, distribution="zipfian",
        value_size=32)
    res = rack.run()
    ops = rack.history_ops
    assert res.steps[-1].ops > 500 and sum(1 for o in ops if o.kind != "get") > 100
    moved = sum(n.system_counters().get("gets_moved", 0) for n in rack.nodes)
    assert moved > 20
    verdict = check(ops)
    assert verdict.verdict == "ok", verdict.explain()


# -- options -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("option, value, says", [
    ("hot_threshold", 1.5, "hot_threshold = 1.5 is above the maximum 0.99"),
    ("hot_threshold", -0.1, "hot_threshold = -0.1 is below the minimum 0"),
    ("hot_window", 0, "hot_window = 0 is below the minimum 1"),
    ("hot_window", 2.5, "hot_window must be an integer"),
    ("hot_step", 0.0, "hot_step = 0.0 is below the minimum 0.01"),
    ("hot_step", 0.75, "hot_step = 0.75 is above the maximum 0.5"),
    ("hot_rehash", "port", "hot_rehash = 'port' is not one of key+client, key"),
    ("hot_switch", "yes", "hot_switch must be true or false"),
])
def test_bad_switch_options_are_one_line(option, value, says):
    with pytest.raises(ValueError) as e:
        SYSTEM.check_options({option: value}, "rack.toml")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_switch_needs_two_traversers():
    from cluster.scenario import scenario_from_dict
    d = with_rack_tables(SYSTEM, {"rack": {"name": "t", "profile": "bf3"},
                                  "compute": {"count": 1, "threads": 1, "coroutines": 1, "memory": "32MiB"},
                                  "memory": {"count": 1, "memory": "16MiB"},
                                  "system": {"name": "dpa-store", "traversers": 1, "hot_switch": True},
                                  "workload": {"preset": "c", "recordcount": 10}})
    with pytest.raises(ValueError) as e:
        scenario_from_dict(d, source="rack.toml")
    assert "hot_switch = true needs traversers >= 2" in str(e.value) and "\n" not in str(e.value)
