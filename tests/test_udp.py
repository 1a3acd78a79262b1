"""The datagram path (shm/udp.py): pricing as a UD SEND, MTU, RX depth and drops, steering, mirror,
request/response with timeouts and resends. Co-located: one Environment runs every node."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest

from shm.sim.env import Environment
from shm.fabric import Fabric, NodeSpec
from shm.profile import ProfileError, load_profile, with_overrides
from shm.udp import (
    IP_UDP_HEADER_BYTES, UDP_OK, UDP_TOO_BIG, SteerRule, UdpError, UdpNet, UdpStats, call,
)
from shm.verbs import (
    AH, CQ, IBV_ACCESS_LOCAL_WRITE, IBV_QPT_UD, MR, PD, QP, Context, QPInitAttr, RecvWR, SendWR, SGE, VerbsHost,
)

MEM = 1 << 20


@contextmanager
def new_fabric(prefix, profile=None):
    """A client c0, a host h0 and a DPU-like node d0."""
    f = Fabric.create(profile or load_profile("cx6-200g"),
                      [NodeSpec("c0", "compute", MEM), NodeSpec("h0", "compute", MEM),
                       NodeSpec("d0", "compute", MEM)], prefix=prefix)
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def fab(prefix):
    with new_fabric(prefix) as f:
        yield f


def new_net(fab, seed=1):
    env = Environment(seed=seed)
    return env, UdpNet(VerbsHost(fab, env))


def test_shipped_profiles_have_an_ethernet_mtu_and_a_default_depth():
    for name in ("bf3", "cx3-56g", "cx5-100g", "cx6-200g"):
        p = load_profile(name)
        assert p.udp.mtu_bytes == 1500 and p.udp.rx_depth == 1024


def test_bad_udp_keys_are_one_line_errors():
    p = load_profile("cx6-200g")
    with pytest.raises(ProfileError) as e:
        with_overrides(p, {"udp.rx_depth": 0})
    assert str(e.value).count("\n") == 0 and "'udp.rx_depth' must be >= 1, got 0" in str(e.value)
    with pytest.raises(ProfileError) as e:
        with_overrides(p, {"udp.mtu_bytes": 40})
    assert "'udp.mtu_bytes'" in str(e.value)


def test_a_profile_without_udp_is_refused_in_one_line(prefix):
    with new_fabric(prefix, dataclasses.replace(load_profile("cx6-200g"), udp=None)) as f:
        with pytest.raises(UdpError, match=r"^profile 'cx6-200g' has no \[udp\] table"):
            UdpNet(VerbsHost(f, Environment()))


def test_datagram_arrives_at_the_ud_send_effect_time(fab, prefix):
    """The datagram lands when a UD SEND of payload + 28 B would, on an identical fresh fabric."""
    env, net = new_net(fab)
    q = net.add_queue("h0", "h0.rx0")
    net.set_rules("h0", [SteerRule(port=7000, target="h0.rx0")])
    sock = net.socket("c0", 5000)
    got = []

    def client():
        yield 1000
        assert sock.send("h0", 7000, b"x" * 100) == UDP_OK
        yield 0
        assert 1000 < env.now < 1000 + fab.profile.link.one_way_ns   # the post's CPU, not the arrival

    def server():
        ev = q.wait()
        yield ev
        got.append((env.now, q.poll()))

    env.process(client())
    env.process(server())
    env.run()
    (t, dg), = got
    assert dg.data == b"x" * 100 and dg.sent_ns == 1000 and dg.arrived_ns == t and dg.queue == "h0.rx0"
    assert (dg.src_node, dg.src_port, dg.dst_node, dg.dst_port) == (0, 5000, 1, 7000)

    # the reference: a verbs UD SEND of the same bytes on a fresh fabric, same start
    with new_fabric(prefix + "r") as f2:
        env2 = Environment(seed=1)
        host = VerbsHost(f2, env2)
        ctx, hctx = Context(host, "c0"), Context(host, "h0")
        cq, hcq = CQ(ctx), CQ(hctx)
        qp = QP(PD(ctx), QPInitAttr(qp_type=IBV_QPT_UD, scq=cq))
        hqp = QP(PD(hctx), QPInitAttr(qp_type=IBV_QPT_UD, scq=hcq))
        n = 100 + IP_UDP_HEADER_BYTES
        mr = MR(PD(ctx), 4096, IBV_ACCESS_LOCAL_WRITE)
        hmr = MR(PD(hctx), 4096, IBV_ACCESS_LOCAL_WRITE)
        hqp.post_recv(RecvWR(sg=[SGE(hmr.addr, 4096, hmr.lkey)]))
        seen = []

        def sender():
            yield 1000
            wr = SendWR(sg=[SGE(mr.addr, n, mr.lkey)])
            wr.set_wr_ud(AH(PD(ctx), "h0"), hqp.qp_num)
            qp.post_send(wr)

        def receiver():
            yield hcq.wait()
            seen.append(env2.now)

        env2.process(sender())
        env2.process(receiver())
        env2.run()
    assert seen == [t]
    assert t > 1000 + fab.profile.link.one_way_ns


def test_larger_than_the_mtu_is_an_error_status_and_nothing_is_sent(fab):
    env, net = new_net(fab)
    net.add_queue("h0", "q")
    net.set_rules("h0", [SteerRule(port=1, target="q")])
    sock = net.socket("c0", 1)
    limit = 1500 - IP_UDP_HEADER_BYTES
    assert sock.send("h0", 1, b"a" * (limit + 1)) == UDP_TOO_BIG
    assert sock.send("h0", 1, b"a" * limit) == UDP_OK
    env.run()
    s = net.statistics()
    assert (s.sent, s.received, s.too_big) == (1, 1, 1)
    assert len(net.queues["q"].poll().data) == limit


def test_a_full_queue_drops_counts_and_never_blocks_the_sender(fab):
    env, net = new_net(fab)
    q = net.add_queue("h0", "small", depth=4)
    net.set_rules("h0", [SteerRule(port=9, target="small")])
    sock = net.socket("c0", 1)
    times = []

    def client():
        for i in range(10):
            assert sock.send("h0", 9, bytes([i])) == UDP_OK
            times.append(env.now)
            yield 10
    env.process(client())
    env.run()
    assert times[-1] < 10 * 10 + 10 * 1000      # each send costs CPU only, never a wait for room
    s = net.statistics()
    assert (s.sent, s.received, s.dropped) == (10, 4, 6)
    assert q.statistics() == (4, 6, 4, 4)
    assert [q.poll().data for _ in range(4)] == [b"\x00", b"\x01", b"\x02", b"\x03"]  # the first four, in order
    assert q.poll() is None


def test_steering_by_port_and_range_and_flow_hash(fab):
    env, net = new_net(fab)
    for qid in ("a", "b", "r0", "r1", "r2", "r3"):
        net.add_queue("h0", qid)
    net.set_rules("h0", [SteerRule(port=100, target="a"),
                         SteerRule(port=200, port_hi=299, target="b"),
                         SteerRule(port=1000, port_hi=1999, target=("r0", "r1", "r2", "r3"))])
    socks = [net.socket("c0", 40000 + i) for i in range(32)]
    socks[0].send("h0", 100, b"to a")
    socks[0].send("h0", 250, b"to b")
    socks[0].send("h0", 300, b"nobody")        # no rule: unsteered
    for s in socks:
        s.send("h0", 1500, b"flow")
        s.send("h0", 1500, b"flow again")       # one flow always lands in the same queue
    env.run()
    assert net.queues["a"].poll().data == b"to a" and net.queues["b"].poll().data == b"to b"
    assert net.statistics().unsteered == 1
    spread = [len(net.queues[f"r{i}"]) for i in range(4)]
    assert sum(spread) == 64 and all(n > 0 and n % 2 == 0 for n in spread)
    where = {}
    for i in range(4):
        q = net.queues[f"r{i}"]
        while len(q):
            where.setdefault(q.poll().src_port, set()).add(i)
    assert len(where) == 32 and all(len(qs) == 1 for qs in where.values())


def test_mirror_delivers_to_both_the_copy_later(fab):
    env, net = new_net(fab)
    host_q = net.add_queue("h0", "host")
    dpu_q = net.add_queue("d0", "dpu")
    net.set_rules("h0", [SteerRule(port=4791, target="host", mirror="dpu")])
    net.socket("c0", 1).send("h0", 4791, b"req")
    env.run()
    orig, copy = host_q.poll(), dpu_q.poll()
    assert orig.data == copy.data == b"req" and not orig.mirrored and copy.mirrored
    assert copy.arrived_ns > orig.arrived_ns     # a second responder pass and PCIe write
    s = net.statistics()
    assert (s.sent, s.received, s.mirrored) == (1, 2, 1)
    net.socket("c0", 2).send("h0", 4791, b"direct", queue="host")   # straight to a queue: no rule, no mirror
    env.run()
    assert host_q.poll().data == b"direct" and dpu_q.poll() is None and net.statistics().mirrored == 1


def test_unknown_target_is_one_line_naming_it(fab):
    env, net = new_net(fab)
    net.add_queue("h0", "host")
    for rules, bad in (([SteerRule(port=1, target="nope")], "nope"),
                       ([SteerRule(port=1, target="host", mirror="dpu")], "dpu"),
                       ([SteerRule(port=1, target=("host", "ghost"))], "ghost")):
        with pytest.raises(UdpError) as e:
            net.set_rules("h0", rules)
        assert str(e.value) == f"steering rule 0 of node 'h0': unknown target queue {bad!r}"
    with pytest.raises(UdpError, match="0 <= port <= port_hi <= 65535"):
        net.set_rules("h0", [SteerRule(port=10, port_hi=5, target="host")])
    assert net.rules.get(1) is None               # nothing half-applied
    with pytest.raises(UdpError, match="unknown target queue 'x'"):
        net.socket("c0", 1).send("h0", 0, b"", queue="x")
    with pytest.raises(UdpError, match="^UDP port must be an integer 0..65535, got 70000$"):
        net.socket("c0", 1).send("h0", 70000, b"")
    with pytest.raises(UdpError, match="^queue 'host' is on node 'h0', not 'd0'$"):
        net.socket("c0", 1).send("d0", 0, b"", queue="host")


def test_call_times_out_resends_and_succeeds_after_a_drop(fab):
    """The server's queue holds one datagram; a burst fills it so the first request is dropped;
    the client times out, resends, and gets its answer. Counted."""
    env, net = new_net(fab)
    srv_q = net.add_queue("h0", "srv", depth=1)
    reply_q = net.add_queue("c0", "reply")
    net.set_rules("h0", [SteerRule(port=80, target="srv")])
    net.set_rules("c0", [SteerRule(port=5000, target="reply")])
    srv_sock = net.socket("h0", 80)
    client_sock = net.socket("c0", 5000)
    noise = net.socket("d0", 1)
    result = []

    def server():
        yield 20_000                     # busy at first: the queue fills
        while True:
            ev = srv_q.wait(200_000)
            yield ev
            if not ev.value:
                return
            dg = srv_q.poll()
            if dg.data.startswith(b"req"):
                srv_sock.send(dg.src_node, dg.src_port, b"resp:" + dg.data)

    def client():
        noise.send("h0", 80, b"noise")   # takes the only slot before the request arrives
        yield 100
        reply = yield from call(client_sock, "h0", 80, b"req1", reply_q, timeout_ns=30_000, resends=3,
                                match=lambda d: d.data == b"resp:req1")
        result.append((env.now, reply))

    env.process(server())
    env.process(client())
    env.run()
    (t, reply), = result
    assert reply is not None and reply.data == b"resp:req1"
    s = net.statistics()
    assert isinstance(s, UdpStats) and (s.timeouts, s.resends) == (1, 1)
    assert s.dropped == 1 and 30_000 < t < 60_000
    with pytest.raises(AttributeError):
        s.sent = 0                        # an immutable record


def test_call_gives_up_after_its_resends(fab):
    env, net = new_net(fab)
    reply_q = net.add_queue("c0", "reply")
    sock = net.socket("c0", 5000)
    out = []

    def client():
        out.append((yield from call(sock, "h0", 80, b"ping", reply_q, timeout_ns=5_000, resends=2)))
        out.append(env.now)
    env.process(client())
    env.run()
    assert out[0] is None and 15_000 <= out[1] < 16_000
    s = net.statistics()
    assert (s.sent, s.unsteered, s.timeouts, s.resends) == (3, 3, 3, 2)


def test_wait_times_out_in_virtual_time(fab):
    env, net = new_net(fab)
    q = net.add_queue("h0", "q")
    seen = []

    def waiter():
        ev = q.wait(7_000)
        yield ev
        seen.append((env.now, ev.value))
    env.process(waiter())
    env.run()
    assert seen == [(7_000, False)]


def test_the_docs_example_runs(fab, capsys):
    """docs/udp.md's example, as written there."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "udp.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    env = Environment(seed=1)
    exec(code, {"UdpNet": UdpNet, "VerbsHost": VerbsHost, "SteerRule": SteerRule, "call": call,
                "fabric": fab, "env": env})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "b'pong'"
    assert out[1].startswith("UdpStats(sent=2, received=3,") and "mirrored=1" in out[1]


def test_coroutines_of_one_thread_share_its_core_when_sending(fab):
    """Two coroutines of one shm.coro thread send at t=0: the second post's CPU starts after the
    first's, as their verbs would; with no thread each process is its own core."""
    from shm.coro import NodeRdma

    def arrivals(use_thread):
        env = Environment(seed=1)
        host = VerbsHost(fab, env)
        net = UdpNet(host)
        q = net.add_queue("h0", f"q{use_thread}")
        net.set_rules("h0", [SteerRule(port=1, target=f"q{use_thread}")])
        thr = NodeRdma(host, "c0", buffer_bytes=4096).thread() if use_thread else None
        socks = [net.socket("c0", 10 + i) for i in range(2)]
        charged = []

        def coro(sock):
            sock.send("h0", 1, b"hi", thread=thr)
            yield 0
            charged.append(env.now)
        for s in socks:
            env.process(coro(s))
        env.run()
        return charged

    alone, shared = arrivals(False), arrivals(True)
    assert alone[0] == alone[1]               # two cores: both posts done at the same time
    assert shared[1] > shared[0] == alone[0]  # one core: the second waits for the first


def test_a_socket_can_have_a_context_of_its_own_on_its_node(fab):
    env, net = new_net(fab)
    ctx = Context(net.host, "d0", low_latency=0, doorbells=4)
    socks = [net.socket("d0", 100 + i, context=ctx) for i in range(4)]
    assert all(s.qp.ctx is ctx for s in socks)
    assert len({s.qp.doorbell for s in socks}) == 4          # one doorbell each, none shared
    shared = net.socket("d0", 200)
    assert shared.qp.ctx is not ctx
    with pytest.raises(UdpError) as e:
        net.socket("c0", 300, context=ctx)
    assert str(e.value).count("\n") == 0 and "'d0'" in str(e.value)


def test_reply_ports_give_each_coroutine_its_own_port_and_refuse_too_many():
    from types import SimpleNamespace
    from shm.udp import ReplyPorts, UdpError
    made = []
    net = SimpleNamespace(socket=lambda node, port: ("sock", node, port),
                          bind=lambda node, port: made.append(port) or ("queue", node, port))
    thread = SimpleNamespace(index=2, owner=SimpleNamespace(node=5))
    ports = ReplyPorts(net, thread, 1000, 4)
    a, b = object(), object()
    assert ports(a) == (("sock", 5, 1008), ("queue", 5, 1008))
    assert ports(b)[0][2] == 1009 and ports(a)[0][2] == 1008 and len(ports) == 2 and made == [1008, 1009]
    more = [object() for _ in range(3)]          # kept alive: ports are keyed by id(co)
    ports(more[0]), ports(more[1])
    with pytest.raises(UdpError, match="more than 4 coroutines"):
        ports(more[2])
