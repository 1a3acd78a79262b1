"""dpa-store on a co-located rack: bulk load, the write path end to end, bad packets, resends.

The conformance suite (tests/test_conformance.py) runs on dpa-store like on every system; these
tests reach inside: the traversers' and patchers' statistics, the tree's depth, raw datagrams.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from cluster.correctness.check import with_rack_tables
from nodes.systems import get_system
from nodes.systems.api import SystemGaveUp
from shm.sim.env import ProcessError
from nodes.systems.dpastore import wire as W

SYSTEM = get_system("dpa-store")


@contextlib.contextmanager
def store(options=None, *, threads=2, coroutines=4, capacity=5_000, dpa=None, profile_overrides=None):
    """A co-located rack of dpa-store: (env, [(client, [coroutines])], directory, state)."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from shm.sim.env import Environment
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    d = with_rack_tables(SYSTEM, {
        "rack": {"name": "dpastore-test", "profile": "bf3", "seed": 1},
        **({"profile_overrides": dict(profile_overrides)} if profile_overrides else {}),
        "compute": {"count": 1, "threads": threads, "coroutines": coroutines, "memory": "32MiB"},
        "memory": {"count": 1, "memory": "16MiB"},
        "system": {"name": "dpa-store", **(options or {})},
        "workload": {"preset": "c", "recordcount": capacity}})
    if dpa:
        d["dpa"].update(dpa)
    compiled = compile_scenario(scenario_from_dict(d, source="dpastore test"))
    compiled.system = SYSTEM
    with RackState.create(compiled, processes=False) as state:
        env = Environment(seed=1)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        contexts = actor_contexts(state, env, host, udp=udp)
        start_actors(SYSTEM, contexts)
        node = NodeRdma(host, "cl0")
        node.udp = udp
        clients = []
        for _ in range(threads):
            th = node.thread()
            clients.append((SYSTEM.client(state.fabric, state.layout, th, compiled.options),
                            [th.coroutine() for _ in range(coroutines)]))
        yield env, clients, contexts[0].directory, state


def run(env, gen):
    p = env.process(gen)
    env.run()
    assert not p.is_alive, "the operation never finished"
    return p.value


def k(i: int) -> bytes:
    return int(i).to_bytes(8, "big")


def test_bulk_load_then_every_key_and_ranges():
    keys = np.unique(np.random.default_rng(3).integers(1, 2**63, 6000, dtype=np.uint64))
    with store(capacity=len(keys)) as (env, clients, directory, state):
        SYSTEM.bulk_load(state.fabric, state.layout, ((k(x), b"v%d" % x) for x in keys.tolist()))
        cl, cos = clients[0]
        sample = keys[::37].tolist()

        def reads():
            bad = []
            for x in sample:
                if (yield from cl.get(cos[0], k(x))) != b"v%d" % x:
                    bad.append(x)
            missing = yield from cl.get(cos[0], k(int(keys[5]) + 1))
            scan = yield from cl.scan(cos[0], k(int(keys[100]) + 1), 150)       # crosses leaves, > 64 pairs
            return bad, missing, scan

        bad, missing, scan = run(env, reads())
        assert bad == [] and missing is None
        assert [int.from_bytes(a, "big") for a, _ in scan] == keys[101:251].tolist()
        travs, _ = directory["dpastore.dpa"]
        st = [t.statistics() for t in travs]
        nodes = sum(s.inner_nodes for s in st)
        assert nodes >= len(sample)                         # depth >= 2: a root over inner nodes or leaves
        assert 3.0 <= sum(s.inner_lines for s in st) / nodes <= 5.0   # the paper's ~4.5 lines per inner node


def test_inserts_patch_split_and_reclaim_without_losing_a_key():
    """Enough inserts from 8 coroutines to fill buffers many times: merges, parent rebuilds and
    root changes happen, replaced blocks are freed after the epochs, and every key reads back."""
    n = 1500
    with store(threads=2, coroutines=4) as (env, clients, directory, state):
        cos = [(cl, co) for cl, cs in clients for co in cs]

        def writer(j):
            cl, co = cos[j]
            for i in range(j, n, len(cos)):
                assert (yield from cl.insert(co, k(i * 7919 % 100_003), b"x%d" % i)) is True
            for i in range(j, n, 3 * len(cos)):             # updates through the same buffers
                assert (yield from cl.update(co, k(i * 7919 % 100_003), b"y%d" % i)) is True

        procs = [env.process(writer(j)) for j in range(len(cos))]
        env.run()
        assert all(not p.is_alive for p in procs)
        expect = {i * 7919 % 100_003: (b"y%d" if i % (3 * len(cos)) < len(cos) else b"x%d") % i for i in range(n)}
        cl, co = cos[0]

        def check():
            bad = []
            for x, v in expect.items():
                if (yield from cl.get(co, k(x))) != v:
                    bad.append(x)
            return bad

        assert run(env, check()) == []
        stats = directory["dpastore.host"].statistics()
        assert stats.merges > 50 and stats.root_changes >= 1 and stats.update_only >= 1
        assert stats.freed_blocks > 0 and stats.stale == 0
        _, stitchers = directory["dpastore.dpa"]
        assert sum(s.statistics().fences for s in stitchers) >= len(stitchers)


def test_malformed_request_gets_an_error_and_the_thread_keeps_serving():
    with store() as (env, clients, directory, state):
        cl, cos = clients[0]
        net = cl.net
        sock, queue = cl.endpoint(cos[0])
        server = state.layout["server"]
        replies = []

        def raw():
            for data in (b"\x01\x02", W.REQ.pack(77, 0, 0, 9, 1, 0, 0, 0, 0, 0),
                         W.REQ.pack(W.OP_INSERT, 0, 0, 10, 1, 0, 0, 0, 0, 5) + b"ab",
                         W.REQ.pack(W.OP_RANGE, 0, 0, 11, 1, 0, 0, 0, 0, 0)):
                sock.send(server, W.BASE_PORT, data)
                ev = queue.wait(1_000_000)
                yield ev
                replies.append(queue.poll())
            return (yield from cl.insert(cos[0], k(1), b"fine"))

        assert run(env, raw()) is True
        status = [W.REP.unpack_from(r.data)[1] for r in replies]
        assert status == [W.ST_ERROR] * 4
        text = [r.data[W.REP.size:].decode() for r in replies]
        assert "shorter" in text[0] and "unknown operation 77" in text[1] and "does not match" in text[2]
        assert "RANGE of 0" in text[3]
        travs, _ = directory["dpastore.dpa"]
        assert sum(t.statistics().errors for t in travs) == 4
        del net


def test_a_resent_insert_is_answered_not_executed_twice():
    with store() as (env, clients, directory, state):
        cl, cos = clients[0]
        sock, queue = cl.endpoint(cos[0])
        server = state.layout["server"]
        port = W.BASE_PORT + W.port_hash(42) % state.layout["traversers"]
        req = W.encode_request(W.OP_INSERT, 7, 42, value=b"once")
        got = []

        def twice():
            for _ in range(2):
                sock.send(server, port, req)
                ev = queue.wait(1_000_000)
                yield ev
                got.append(queue.poll())
            return (yield from cl.get(cos[0], k(42)))

        assert run(env, twice()) == b"once"
        assert [W.REP.unpack_from(r.data)[1] for r in got] == [W.ST_OK, W.ST_OK]
        travs, _ = directory["dpastore.dpa"]
        assert sum(t.statistics().duplicates for t in travs) == 1


def test_prefetching_makes_gets_faster_in_virtual_time():
    took = {}
    keys = list(range(1, 3000, 3))
    for prefetch in (True, False):
        with store({"prefetch": prefetch, "hot_cache": False}, capacity=len(keys)) as (env, clients, _, state):
            SYSTEM.bulk_load(state.fabric, state.layout, ((k(x), b"v") for x in keys))
            cl, cos = clients[0]

            def reads():
                t0 = env.now
                for x in keys[::10]:
                    assert (yield from cl.get(cos[0], k(x))) == b"v"
                return env.now - t0

            took[prefetch] = run(env, reads())
    assert took[True] < took[False]


def test_bad_configuration_and_input_are_one_line():
    with pytest.raises(SystemGaveUp, match="need 12 DPA threads"):
        with store({"traversers": 8}, dpa={"threads": 10}):
            pass
    with store({"value_max": 8}) as (env, clients, directory, state):
        cl, cos = clients[0]
        for op, match in ((cl.insert(cos[0], k(1), b"123456789"), "exceeds system.value_max = 8"),
                          (cl.get(cos[0], b"short"), "exactly 8 bytes")):
            with pytest.raises(ProcessError) as e:
                run(env, op)
            assert isinstance(e.value.__cause__, SystemGaveUp) and match in str(e.value.__cause__)
        with pytest.raises(SystemGaveUp, match="does not fit system.value_max = 8"):
            SYSTEM.bulk_load(state.fabric, state.layout, [(k(1), b"a")])
        SYSTEM.bulk_load(state.fabric, state.layout, [(k(1), b"8 bytes!")])
        with pytest.raises(SystemGaveUp, match="needs the empty store"):
            SYSTEM.bulk_load(state.fabric, state.layout, [(k(2), b"8 bytes!")])


def test_larger_error_bounds_read_more_lines_and_answer_the_same():
    keys = np.unique(np.random.default_rng(5).integers(1, 2**63, 4000, dtype=np.uint64)).tolist()
    lines = {}
    for eps in ((8, 4), (32, 16)):
        with store({"leaf_eps": eps[0], "inner_eps": eps[1], "hot_cache": False}, capacity=len(keys)) as (
                env, clients, directory, state):
            SYSTEM.bulk_load(state.fabric, state.layout, ((k(x), b"v%d" % x) for x in keys))
            cl, cos = clients[0]

            def reads():
                bad = []
                for x in keys[::25]:
                    if (yield from cl.get(cos[0], k(x))) != b"v%d" % x:
                        bad.append(x)
                return bad

            assert run(env, reads()) == []
            travs, _ = directory["dpastore.dpa"]
            st = [t.statistics() for t in travs]
            lines[eps] = sum(s.inner_lines for s in st) / sum(s.inner_nodes for s in st)
    assert lines[32, 16] > lines[8, 4]
