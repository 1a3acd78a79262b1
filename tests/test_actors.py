"""Server actors on any role (nodes/actors.py, issue 22 items 0 and 6): a toy system whose
memory-node actors count and echo two-sided requests (RC SEND/RECV) on the memory node's modelled
cores, a compute-node actor, the spec's refusals, and RACE's results unchanged by the hook."""

from __future__ import annotations

import pytest

from cluster.rack import ColocatedRack, RackError
from cluster.scenario import scenario_from_dict
from cluster.spec import SpecError
from nodes.systems.race import RaceSystem
from shm.fabric import IBV_ACCESS_LOCAL_WRITE
from shm.verbs import CQ, MR, PD, QP, IBV_WC_SUCCESS, QPInitAttr, RecvWR, SendWR, SGE
from tests.test_rack import LOAD, rack_dict, run

SLOT = 64
SLOTS = 32
REQUESTS = 20                       # per (compute node, memory node) pair


def _echo_server(ctx):
    """Memory node: one RC QP per compute node, published in the rack's directory; one actor per
    core takes requests from the shared receive CQ: charge the RPC handler's CPU, copy the payload into a reply slot and
    SEND it back on the QP it came in on."""
    v = ctx.verbs()
    pd = PD(v)
    rcq, scq = CQ(v), CQ(v)
    mr = MR(pd, 2 * SLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE)       # receive slots, then reply slots
    qps = {}
    for c, n in enumerate(ctx.fabric.nodes):
        if n.role == "compute":
            qp = QP(pd, QPInitAttr(scq=scq, rcq=rcq))
            ctx.directory[("echo", ctx.index, c)] = qp
            qps[qp.qp_num] = qp
    stats = EchoRace.served.setdefault(ctx.name, {"requests": 0, "cores": ctx.cores})

    replies = [0]
    # RECVs posted at time 0 (the clients connect their QPs before any actor runs)
    slot = 0
    for qp in qps.values():
        for _ in range(4):
            qp.post_recv(RecvWR(wr_id=slot, sg=[SGE(mr.addr + slot * SLOT, SLOT, mr.lkey)]))
            slot += 1

    def serve():
        while True:
            yield rcq.wait()
            n, wcs = rcq.poll(1)          # one request at a time: the other actors take the rest
            if not n:
                continue
            wc = wcs[0]
            assert wc.status == IBV_WC_SUCCESS
            ctx.cpu(ctx.profile.cpu.rpc_handler_ns)
            stats["requests"] += 1
            qp = qps[wc.qp_num]
            r = SLOTS + replies[0] % SLOTS
            replies[0] += 1
            mr.buf[r * SLOT:r * SLOT + wc.byte_len] = mr.buf[wc.wr_id * SLOT:wc.wr_id * SLOT + wc.byte_len]
            qp.post_recv(RecvWR(wr_id=wc.wr_id, sg=[SGE(mr.addr + wc.wr_id * SLOT, SLOT, mr.lkey)]))
            qp.post_send([SendWR(wr_id=r, sg=[SGE(mr.addr + r * SLOT, wc.byte_len, mr.lkey)])])
            scq.poll(64)                   # retire the replies' completions
    return [serve() for _ in range(ctx.cores.n)]   # one server actor per modelled core


def _echo_client(ctx):
    """Compute node: one actor per memory node sends REQUESTS requests, one at a time, and checks
    each reply is its request."""
    v = ctx.verbs()
    pd = PD(v)
    actors = []
    for m, n in enumerate(ctx.fabric.nodes):
        if n.role != "memory":
            continue
        rcq, scq = CQ(v), CQ(v)
        qp = QP(pd, QPInitAttr(scq=scq, rcq=rcq))
        peer = ctx.directory[("echo", m, ctx.index)]
        qp.connect(peer)
        peer.connect(qp)
        mr = MR(pd, 2 * SLOT, IBV_ACCESS_LOCAL_WRITE)
        actors.append(_ask(ctx, n.name, qp, rcq, scq, mr))
    return actors


def _ask(ctx, server, qp, rcq, scq, mr):
    env = ctx.env
    got = EchoRace.replies.setdefault((ctx.name, server), [])
    for i in range(REQUESTS):
        req = f"{ctx.name}->{server} #{i}".encode()
        mr.write(req)
        qp.post_recv(RecvWR(wr_id=i, sg=[SGE(mr.addr + SLOT, SLOT, mr.lkey)]))
        t0 = env.now
        qp.post_send([SendWR(wr_id=i, sg=[SGE(mr.addr, len(req), mr.lkey)])])
        yield rcq.wait()
        _, wcs = rcq.poll(1)
        scq.poll(4)
        assert wcs[0].status == IBV_WC_SUCCESS and wcs[0].byte_len == len(req)
        got.append((mr.read(len(req), SLOT) == req, env.now - t0))


class EchoRace(RaceSystem):
    """RACE for the KV steps, plus an echo service: memory-node servers, compute-node askers."""

    name = "echo-race-test"
    servers = {"memory": _echo_server, "compute": _echo_client}
    served: dict = {}
    replies: dict = {}


def _ticker(ctx):
    def tick():
        for _ in range(10):
            ctx.cpu(500)
            yield 1000
            TickRace.ticks[ctx.name] = TickRace.ticks.get(ctx.name, 0) + 1
    return [tick()]


class TickRace(RaceSystem):
    """A compute-node server actor only (memory nodes stay passive)."""

    name = "tick-race-test"
    servers = {"compute": _ticker}
    ticks: dict = {}


class NoActorsRace(RaceSystem):
    """Declares the hook, starts no actor: RACE's figures must not move."""

    name = "no-actors-race-test"
    servers = {"compute": lambda ctx: []}


def _scenario(system, cores=None, **kw):
    d = rack_dict(LOAD, run(0.1), **kw)
    d["system"] = {"name": system}
    if cores is not None:
        d["memory"]["cores"] = cores
    return scenario_from_dict(d, source="test.toml")


def test_memory_node_actor_counts_and_echoes_two_sided_requests():
    EchoRace.served.clear()
    EchoRace.replies.clear()
    rack = ColocatedRack(_scenario("tests.test_actors:EchoRace", cores=2, compute=2))
    res = rack.run()
    assert res.steps[-1].ops > 0                          # the KV steps still ran
    assert sorted(EchoRace.served) == ["mn0", "mn1"]
    assert len(EchoRace.replies) == 4                     # 2 compute x 2 memory nodes
    prof = rack.compiled.spec.profile
    for (cn, mn), got in EchoRace.replies.items():
        assert len(got) == REQUESTS and all(ok for ok, _ in got)
        # a round trip crosses the link twice and runs the handler once
        assert min(t for _, t in got) >= 2 * prof.link.one_way_ns + prof.cpu.rpc_handler_ns
    for mn, s in EchoRace.served.items():
        assert s["requests"] == 2 * REQUESTS
        assert s["cores"].n == 2
        assert s["cores"].busy_ns == 2 * REQUESTS * prof.cpu.rpc_handler_ns


def test_memory_node_cpu_is_charged_on_its_cores():
    """The handler's cost is in every round trip, and one core serialises two askers where two
    cores serve them side by side."""
    def latencies(handler_ns, cores):
        EchoRace.served.clear()
        EchoRace.replies.clear()
        d = rack_dict(LOAD, run(0.1), compute=2)
        d["system"] = {"name": "tests.test_actors:EchoRace"}
        d["memory"]["cores"] = cores
        d["profile_overrides"] = {"cpu.rpc_handler_ns": handler_ns}
        ColocatedRack(scenario_from_dict(d, source="test.toml")).run()
        return [t for got in EchoRace.replies.values() for _, t in got]
    cheap, one, two = latencies(100, 1), latencies(20_000, 1), latencies(20_000, 2)
    assert max(cheap) < 20_000 <= min(one) and min(two) >= 20_000
    assert max(one) >= 2 * 20_000 > max(two)        # on one core an asker waits for the other's request


def test_compute_node_server_actor_runs_beside_the_clients():
    TickRace.ticks.clear()
    rack = ColocatedRack(_scenario("tests.test_actors:TickRace", compute=2))
    rack.run()
    assert TickRace.ticks == {"cn0": 10, "cn1": 10}
    assert [c.role for c in rack.actor_contexts] == ["compute", "compute"]
    assert all(c.cores.busy_ns == 10 * 500 for c in rack.actor_contexts)


def test_the_hook_without_actors_leaves_race_results_identical():
    def figures(system):
        res = ColocatedRack(_scenario(system)).run()
        return [(s.index, s.vstart_ns, s.vend_ns, s.ops, s.failures, s.kinds, s.nodes) for s in res.steps]
    assert figures("tests.test_actors:NoActorsRace") == figures("race")


def test_spec_refuses_negative_cores_in_one_line():
    with pytest.raises(SpecError) as e:
        _scenario("race", cores=-1)
    msg = str(e.value)
    assert "memory.cores" in msg and "\n" not in msg


def test_spec_refuses_memory_actors_without_cores():
    for cores in (None, 0):
        with pytest.raises(SpecError) as e:
            _scenario("tests.test_actors:EchoRace", cores=cores)
        msg = str(e.value)
        assert "memory.cores = 0" in msg and "EchoRace" in msg and "\n" not in msg


def test_memory_cores_without_actors_keep_race_running():
    res = ColocatedRack(_scenario("race", cores=4)).run()
    assert res.steps[-1].ops > 0
