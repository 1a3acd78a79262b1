"""Two-sided RPC over datagrams (shm/rpc.py, issue 24 item 1) and compute-node memory exposed to
one-sided verbs. Co-located and deterministic: one Environment runs every node; times are virtual
and compared with the profile's constants, never with the wall clock."""

from __future__ import annotations

import struct
from contextlib import contextmanager

import pytest

from nodes.actors import Cores, NodeContext
from shm.sim.env import Environment
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec, gaddr
from shm.profile import load_profile
from shm.rpc import RPC_PORT, RpcError, RpcServer, RpcTimeout, encode_request, endpoint_of, rpc
from shm.udp import UdpNet
from shm.verbs import VerbsHost

MEM = 4 << 20
PROFILE = "cx3-56g"                  # FlexKV's testbed


class Rig:
    """Compute nodes cn0..cn{n-1} on one fabric and one environment, a datagram net, a client
    thread per node (``rdma[i]``) and an actor context per node for servers (``ctx[i]``)."""

    def __init__(self, fabric, cores=4):
        self.fabric = fabric
        self.profile = fabric.profile
        self.env = Environment(seed=1)
        self.host = VerbsHost(fabric, self.env)
        self.net = UdpNet(self.host)
        self.rdma, self.ctx = [], []
        for i, nd in enumerate(fabric.nodes):
            r = NodeRdma(self.host, i)
            r.udp = self.net                 # what nodes/compute.py does for a rack's compute node
            self.rdma.append(r)
            self.ctx.append(NodeContext(nd.name, i, "compute", self.env, self.host, fabric, {}, {},
                                        Cores(self.env, cores, self.profile.cpu.ghz), udp=self.net))

    def serve(self, node: int, handlers, **kw) -> RpcServer:
        s = RpcServer(self.ctx[node], handlers, **kw)
        for k, gen in enumerate(s.actors()):
            self.env.process(gen, name=f"cn{node}.rpc.{k}")
        return s

    def client(self, node: int, body, name=None):
        """Run ``body(co)`` (a generator function) as a coroutine of a new thread on ``node``."""
        co = self.rdma[node].thread().coroutine()
        return self.env.process(body(co), name=name)


@contextmanager
def rig(prefix, n=3, profile=PROFILE, **kw):
    f = Fabric.create(load_profile(profile), [NodeSpec(f"cn{i}", "compute", MEM) for i in range(n)], prefix=prefix)
    try:
        yield Rig(f, **kw)
    finally:
        f.close()


def echo(ctx, req):
    return req.payload
    yield


def one_way_ns(prefix, nbytes: int, profile=PROFILE) -> int:
    """A datagram of ``nbytes`` from cn0 to cn1 on a fresh fabric: posted -> in the RX ring."""
    with rig(prefix + "w", n=2, profile=profile) as r:
        q = r.net.bind(1, 9)
        sock = r.net.socket(0, 9)
        got = []

        def go():
            sock.send(1, 9, b"x" * nbytes)
            ok = yield q.wait()
            got.append(q.poll().arrived_ns)
        r.env.process(go())
        r.env.run()
        return got[0]


def test_a_round_trip_costs_a_send_each_way_plus_the_handler(prefix):
    payload = b"k" * 20
    with rig(prefix) as r:
        prof = r.profile
        server = r.serve(1, {1: echo})
        times = []

        def body(co):
            for _ in range(3):                       # the first call makes the endpoint; all cost the same
                t0 = r.env.now
                reply = yield from rpc(co, "cn1", payload, method=1)
                assert reply == payload
                times.append(r.env.now - t0)
        r.client(0, body)
        r.env.run()
    send = one_way_ns(prefix, len(payload) + 12)     # the RPC header is 12 B
    poll = prof.cpu.poll_ns
    expected = 2 * send + prof.cpu.rpc_handler_ns + 2 * poll   # server polls the request, client the reply
    print(f"{PROFILE}: one-way datagram {send} ns, handler {prof.cpu.rpc_handler_ns} ns, poll {poll} ns, "
          f"round trips {times} ns, expected ~{expected} ns")
    assert server.statistics().executed == 3
    for t in times:
        assert abs(t - expected) <= 0.05 * expected
    assert times[1] == times[2]


def test_the_handler_cpu_adds_to_the_round_trip(prefix):
    def slow(ctx, req):
        ctx.cpu(5_000)
        return b"ok"
        yield

    with rig(prefix) as r:
        r.serve(1, {1: echo, 2: slow})
        got = {}

        def body(co):
            for m in (1, 2, 1, 2):
                t0 = r.env.now
                yield from rpc(co, "cn1", b"x", method=m)
                got[m] = r.env.now - t0
        r.client(0, body)
        r.env.run()
    assert got[2] - got[1] == 5_000


def _callers(prefix, handler, *, callers: int, calls: int, **serve) -> list[int]:
    """``callers`` client nodes (cn1..) each make ``calls`` calls in a row of method 1 (``handler``)
    on a server on cn0 (``serve``: its threads, coroutines): when each caller finished (ns)."""
    with rig(prefix, n=callers + 1) as r:
        s = r.serve(0, {1: handler}, **serve)
        done = []

        def body(co):
            for _ in range(calls):
                yield from rpc(co, "cn0", b"", method=1)
            done.append(r.env.now)
        for c in range(1, callers + 1):
            r.client(c, body)
        r.env.run()
        assert s.statistics().executed == callers * calls
    return done


def test_threads_limit_concurrency_and_requests_queue(prefix):
    """Four callers at once, a handler of 10 us: 2 server threads finish in two waves, 1 in four."""
    def work(ctx, req):
        ctx.cpu(10_000)
        return b"done"
        yield

    ends = {threads: sorted(_callers(prefix + str(threads), work, callers=4, calls=1, threads=threads))
            for threads in (1, 2)}
    one, two = ends[1], ends[2]
    # one thread: each request waits for the one before (10 us apart)
    assert all(9_000 <= b - a <= 11_000 for a, b in zip(one, one[1:]))
    # two threads: pairs finish together, the second pair one handler later
    assert two[1] - two[0] < 2_000 and two[3] - two[2] < 2_000 and 9_000 <= two[2] - two[0] <= 11_000
    assert two[3] < one[3] - 15_000


def test_coroutines_of_a_server_thread_never_slow_a_cpu_bound_handler(prefix):
    """Eight callers, four calls each, a handler of 2 us on its server thread's core: the threads'
    cores are the bottleneck, so running each thread as 8 coroutines must end no later than as
    one. Two mistakes made it slower: each coroutine posted its replies as a thread of its own
    (7 more sharers of the socket's doorbell lock, 2 us a reply), and a coroutine of a busy thread
    took requests while another thread's core was free."""
    def work(ctx, req):
        req.co.thread.cpu(2_000)
        return b"done"
        yield

    ends = {(threads, coroutines): max(_callers(f"{prefix}{threads}{coroutines}", work, callers=8, calls=4,
                                                 threads=threads, coroutines=coroutines))
            for threads in (1, 2) for coroutines in (1, 8)}
    print(ends)
    for threads in (1, 2):
        assert ends[threads, 8] <= 1.02 * ends[threads, 1]
    assert ends[2, 8] < 0.6 * ends[1, 8]                 # the second thread's core is used


def test_a_drop_at_a_full_ring_is_retried_and_each_request_runs_once(prefix):
    """One server thread busy 50 us, a ring of one: the third caller's request is dropped until the
    ring has room, its resends get through, and every handler runs exactly once."""
    runs = []

    def work(ctx, req):
        runs.append(req.payload)
        ctx.cpu(50_000)
        return req.payload
        yield

    with rig(prefix, n=4) as r:
        s = r.serve(0, {1: work}, threads=1, depth=1)
        got = {}

        def body(c):
            def go(co):
                yield r.env.timeout(c * 100)           # arrive in order 1, 2, 3
                got[c] = yield from rpc(co, "cn0", bytes([c]), method=1, timeout_ns=20_000, retries=10)
            return go
        for c in (1, 2, 3):
            r.client(c, body(c))
        r.env.run()
        st, net = s.statistics(), r.net.statistics()
    assert got == {1: b"\x01", 2: b"\x02", 3: b"\x03"}
    assert sorted(runs) == [b"\x01", b"\x02", b"\x03"] and st.executed == 3
    assert s.queue.statistics().dropped >= 1 and net.resends >= 1


def test_a_resend_of_an_executed_request_gets_the_cached_reply(prefix):
    """Two datagrams with one request id (a resend after a lost reply): one execution, two equal replies."""
    counter = [0]

    def incr(ctx, req):
        counter[0] += 1
        return struct.pack("<Q", counter[0])
        yield

    with rig(prefix) as r:
        s = r.serve(1, {3: incr})
        q = r.net.bind(0, 555)
        sock = r.net.socket(0, 555)
        replies = []

        def go():
            for rid in (7, 7, 8, 7):                   # resend, a new request, a stale one
                sock.send(1, RPC_PORT, encode_request(3, rid, b""))
                yield r.env.timeout(50_000)
                while len(q):
                    replies.append(q.poll().data[12:])
        r.env.process(go())
        r.env.run()
        st = s.statistics()
    assert counter[0] == 2 and st.executed == 2 and st.duplicates == 1 and st.stale == 1
    assert replies == [struct.pack("<Q", 1), struct.pack("<Q", 1), struct.pack("<Q", 2)]


def test_a_resend_while_the_request_runs_is_not_executed_again(prefix):
    runs = []

    def slow(ctx, req):
        runs.append(req.rid)
        ctx.cpu(30_000)
        return b"late"
        yield

    with rig(prefix) as r:
        s = r.serve(1, {1: slow})
        got = []

        def body(co):
            got.append((yield from rpc(co, "cn1", b"", method=1, timeout_ns=10_000, retries=5)))
        r.client(0, body)
        r.env.run()
    assert got == [b"late"] and len(runs) == 1 and s.statistics().in_progress >= 2


def test_a_late_reply_of_an_earlier_call_is_never_taken(prefix):
    def slow(ctx, req):
        ctx.cpu(30_000)
        return b"slow"
        yield

    with rig(prefix) as r:
        r.serve(1, {1: slow, 2: echo}, threads=1)     # the fast request waits behind the slow one
        got = []

        def body(co):
            with pytest.raises(RpcTimeout):
                yield from rpc(co, "cn1", b"", method=1, timeout_ns=5_000, retries=0)
            # the slow reply lands while this call waits: skipped, by its request id
            got.append((yield from rpc(co, "cn1", b"fast", method=2, timeout_ns=100_000, retries=0)))
            got.append(r.env.now)
        r.client(0, body)
        r.env.run()
    assert got[0] == b"fast" and got[1] > 30_000


def test_again_goes_on_with_a_timed_out_call_and_it_runs_once(prefix):
    """A call that timed out while its handler ran, taken up again with ``again=True``: the same
    request id, so the handler runs once and the caller gets that run's reply."""
    runs = []

    def slow(ctx, req):
        runs.append(req.rid)
        ctx.cpu(30_000)
        return b"once"
        yield

    with rig(prefix) as r:
        r.serve(1, {1: slow})
        got = []

        def body(co):
            with pytest.raises(RpcTimeout):
                yield from rpc(co, "cn1", b"", method=1, timeout_ns=5_000, retries=1)
            got.append((yield from rpc(co, "cn1", b"", method=1, timeout_ns=50_000, retries=1, again=True)))
        r.client(0, body)
        r.env.run()
    assert got == [b"once"] and len(runs) == 1


def test_every_retry_timing_out_is_one_line_naming_the_node(prefix):
    with rig(prefix) as r:
        errors = []

        def body(co):
            try:
                yield from rpc(co, "cn2", b"", method=1, timeout_ns=10_000, retries=2)   # cn2 serves nothing
            except RpcTimeout as e:
                errors.append((str(e), r.env.now))
        r.client(0, body)
        r.env.run()
        assert r.net.statistics().timeouts == 3 and r.net.statistics().resends == 2
    msg, when = errors[0]
    assert "\n" not in msg and "'cn2'" in msg and "3 attempts of 10 us" in msg
    assert 30_000 <= when <= 31_000


def test_call_all_sends_every_request_at_once_and_returns_each_outcome_in_order(prefix):
    """``RpcEndpoint.call_all``: requests to several nodes go out together through one endpoint, so
    answered ones take one round trip, not one each; a node that serves nothing ends as an
    RpcTimeout in its place (returned, not raised) after the same attempts as ``rpc``."""
    with rig(prefix, n=4) as r:
        r.serve(1, {1: echo})
        r.serve(2, {1: echo})
        got, took = [], {}

        def body(co):
            ep = endpoint_of(co)
            t0 = r.env.now
            yield from rpc(co, "cn1", b"a", method=1)
            took["one"] = r.env.now - t0
            t0 = r.env.now
            got.extend((yield from ep.call_all([("cn1", b"a"), ("cn2", b"b")], method=1, thread=co.thread)))
            took["two"] = r.env.now - t0
            t0 = r.env.now
            got.extend((yield from ep.call_all([("cn2", b"c"), ("cn3", b"d")], method=1, timeout_ns=10_000,
                                               retries=1, thread=co.thread)))
            took["dead"] = r.env.now - t0
        r.client(0, body)
        r.env.run()
        assert r.net.statistics().timeouts == 2 and r.net.statistics().resends == 1
    assert got[:3] == [b"a", b"b", b"c"] and isinstance(got[3], RpcTimeout)
    assert "'cn3'" in str(got[3]) and "2 attempts of 10 us" in str(got[3])
    assert took["two"] < 1.3 * took["one"], took           # overlapped, not one after the other
    assert 20_000 <= took["dead"] <= 21_000


def test_an_unknown_method_and_bad_servers_are_one_line(prefix):
    with rig(prefix, cores=2) as r:
        r.serve(1, {1: echo})
        errors = []

        def body(co):
            try:
                yield from rpc(co, "cn1", b"", method=9)
            except RpcError as e:
                errors.append(str(e))
            try:
                yield from rpc(co, "cn1", b"x" * 2000, method=1)
            except RpcError as e:
                errors.append(str(e))
            try:
                yield from rpc(co, "cn7", b"", method=1)
            except RpcError as e:
                errors.append(str(e))
        r.client(0, body)
        r.env.run()
        assert errors[0] == "rpc to node 'cn1': no handler for method 9"
        assert errors[2].startswith("rpc to node 'cn7': unknown node 'cn7'") and "\n" not in errors[2]
        assert "exceeds one datagram" in errors[1] and "'cn1'" in errors[1]
        with pytest.raises(RpcError, match=r"^node 'cn2': 3 RPC server threads exceed its 2 cores$"):
            RpcServer(r.ctx[2], {1: echo}, threads=3)



def test_a_handler_exception_goes_back_to_the_caller_and_the_server_keeps_serving(prefix):
    """A handler that raises: the caller's rpc() raises RpcHandlerError (an RpcError) naming the
    node, the method and the exception's first line; the server logs one line, counts it, answers a
    resend from its cache (at most once) and goes on serving on the same thread."""
    from shm.rpc import RpcHandlerError

    runs = []

    def bad(ctx, req):
        runs.append(req.rid)
        ctx.cpu(1_000)
        raise ValueError("no such key\nsecond line of detail")
        yield

    with rig(prefix) as r:
        logged = []
        s = RpcServer(r.ctx[1], {1: echo, 2: bad}, threads=1, log=logged.append)
        for k, gen in enumerate(s.actors()):
            r.env.process(gen, name=f"cn1.rpc.{k}")
        got = []

        def body(co):
            for m in (2, 1, 2, 1):
                try:
                    got.append((yield from rpc(co, "cn1", b"k", method=m)))
                except RpcError as e:
                    got.append(e)
        r.client(0, body)
        r.env.run()
        st = s.statistics()
    errs = [g for g in got if isinstance(g, Exception)]
    assert [g for g in got if not isinstance(g, Exception)] == [b"k", b"k"]
    assert len(errs) == 2 and all(isinstance(e, RpcHandlerError) for e in errs)
    assert str(errs[0]) == "rpc to node 'cn1' (method 2): the handler raised ValueError: no such key"
    assert errs[0].remote == "ValueError: no such key"
    assert st.errors == 2 and st.executed == 4 and len(runs) == 2 and s.last_error == "ValueError: no such key"
    assert len(logged) == 2 and all("\n" not in ln and "'cn1'" in ln and "method 2" in ln and "'cn0'" in ln
                                    and "ValueError: no such key" in ln for ln in logged)

    # a resend of a request whose handler raised gets the cached error, without a second run
    with rig(prefix + "r") as r:
        s = RpcServer(r.ctx[1], {2: bad}, threads=1, log=lambda line: None)
        for k, gen in enumerate(s.actors()):
            r.env.process(gen)
        q, sock = r.net.bind(0, 555), r.net.socket(0, 555)
        replies = []

        def go():
            for _ in range(2):
                sock.send(1, RPC_PORT, encode_request(2, 7, b""))
                yield r.env.timeout(50_000)
                while len(q):
                    replies.append(q.poll().data)
        runs.clear()
        r.env.process(go())
        r.env.run()
    assert len(runs) == 1 and len(replies) == 2 and replies[0] == replies[1] and replies[0][1] == 2


@pytest.mark.parametrize("kind", ["crash", "gave-up", "interrupt"])
def test_a_failpoint_crash_or_the_system_giving_up_in_a_handler_is_not_swallowed(prefix, kind):
    """A crash failpoint (ClientCrash, a BaseException), the system giving up (SystemGaveUp) and an
    Interrupt are not sent back: they end the server actor as before, out of env.run()."""
    from shm.sim.env import Interrupt, ProcessError
    from nodes.systems.api import SystemGaveUp
    from shm.failpoints import ClientCrash
    exc = {"crash": ClientCrash("failpoint verbs.post (hit 1)"), "gave-up": SystemGaveUp("table full"),
           "interrupt": Interrupt("stop")}[kind]

    def dies(ctx, req):
        raise exc
        yield

    with rig(prefix) as r:
        r.serve(1, {1: dies}, log=lambda line: pytest.fail(f"logged: {line}"))

        def body(co):
            yield from rpc(co, "cn1", b"", method=1, timeout_ns=10_000, retries=0)
        r.client(0, body)
        with pytest.raises((ProcessError, type(exc))) as got:
            r.env.run()
    assert got.value is exc or type(exc).__name__ in str(got.value)

def test_rpc_from_an_rdma_thread_and_from_a_plain_actor_context(prefix):
    """A thread (its post on the thread's core) and a NodeContext (a server actor's) both call."""
    with rig(prefix) as r:
        r.serve(2, {1: echo})
        th = r.rdma[0].thread()
        got = []

        def from_thread():
            got.append((yield from rpc(th, "cn2", b"t", method=1)))

        def from_ctx():
            got.append((yield from rpc(r.ctx[1], "cn2", b"c", method=1)))
        r.env.process(from_thread())
        r.env.process(from_ctx())
        r.env.run()
    assert sorted(got) == [b"c", b"t"] and th.cpu_free > 0


def test_compute_to_compute_and_a_nested_rpc_from_a_server_actor(prefix):
    """cn0's coroutine calls cn1; cn1's handler calls cn2 (FlexKV's proxy invalidating a sharer)
    before it answers: the reply carries both, and the nested call adds one more round trip."""
    def invalidate(ctx, req):
        return b"inv:" + req.payload
        yield

    def write(ctx, req):
        ack = yield from rpc(ctx, "cn2", req.payload, method=5, timeout_ns=50_000)
        return b"w+" + ack

    with rig(prefix) as r:
        r.serve(1, {4: write, 1: echo})
        s2 = r.serve(2, {5: invalidate})
        got = []

        def body(co):
            t0 = r.env.now
            yield from rpc(co, "cn1", b"k", method=1)
            flat = r.env.now - t0
            t0 = r.env.now
            got.append((yield from rpc(co, "cn1", b"k", method=4)))
            got.append((flat, r.env.now - t0))
        r.client(0, body)
        r.env.run()
    assert got[0] == b"w+inv:k" and s2.statistics().executed == 1
    flat, nested = got[1]
    assert 1.8 * flat <= nested <= 2.3 * flat


def test_a_handler_posts_one_sided_verbs_with_its_server_thread_coroutine(prefix):
    """A proxy-like write: the handler WRITEs the payload to cn2's exposed memory, then answers;
    the round trip grows by about one RDMA WRITE round trip."""
    with rig(prefix) as r:
        r.fabric.expose(2)
        off = r.fabric.allocate(2, 64)

        def write(ctx, req):
            co = req.co
            co.write(gaddr(2, off), req.payload)
            co.post()
            yield co.sync()
            return b"ok"

        r.serve(1, {1: echo, 2: write})
        got = []

        def body(co):
            for m in (1, 2, 1, 2):
                t0 = r.env.now
                got.append(((yield from rpc(co, "cn1", b"12345678", method=m)), r.env.now - t0))
        r.client(0, body)
        r.env.run()
        assert bytes(r.fabric.memory[2].host[off:off + 8]) == b"12345678"
    (_, flat), (ok, written) = got[2], got[3]
    print(f"flat {flat} ns, with a WRITE inside {written} ns")
    assert ok == b"ok" and 1_000 <= written - flat <= 5_000


# -- compute-node memory for one-sided verbs ---------------------------------------------------------

def test_compute_node_memory_exposed_to_one_sided_verbs(prefix):
    """The manager READs counters and WRITEs staging maps on compute nodes (FlexKV): after
    ``Fabric.expose(cn)`` a coroutine of another node READs, WRITEs and CASes cn1's memory."""
    with rig(prefix) as r:
        r.fabric.expose(1)
        off = r.fabric.allocate(1, 64)
        mem = r.fabric.memory[1].host
        mem[off:off + 8] = list((41).to_bytes(8, "little"))
        base = gaddr(1, off)
        got = []

        def body(co):
            h = co.read(base, 8)
            co.post()
            yield co.sync()
            got.append(h.value)
            co.write(base + 8, b"staging!")
            co.cas(base, 41, 42)
            co.post()
            yield co.sync()
        r.client(0, body)
        r.env.run()
        assert got == [41]
        assert bytes(mem[off + 8:off + 16]) == b"staging!" and int.from_bytes(bytes(mem[off:off + 8]), "little") == 42


# -- in a rack: a toy owner-partitioned KV (FlexKV-OP in miniature) ------------------------------------

from nodes.systems.api import KVClient, System  # noqa: E402
from shm.rpc import SERVERS, rpc_server  # noqa: E402

M_GET, M_INSERT, M_UPDATE, M_DELETE = 1, 2, 3, 4
_STORES: dict = {}                   # node name -> {key: value}, in the process that runs the node


def _owner(key: bytes, n: int) -> int:
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return (h >> 17) % n


def _kv(method):
    def handler(ctx, req):
        store = _STORES.setdefault(ctx.name, {})
        klen = req.payload[0]
        key, value = req.payload[1:1 + klen], req.payload[1 + klen:]
        ctx.cpu(ctx.profile.cpu.local_cas_ns)           # the owner's local index operation
        # the owner's op counter in its own memory, where another node could READ it (expose_compute)
        words = ctx.memory.host64
        words[ctx.layout["counter"] // 8] += 1
        if method == M_GET:
            v = store.get(key)
            return b"\x00" if v is None else b"\x01" + v
        if method == M_INSERT:
            ok = key not in store
            if ok:
                store[key] = value
        elif method == M_UPDATE:
            ok = key in store
            if ok:
                store[key] = value
        else:
            ok = store.pop(key, None) is not None
        return b"\x01" if ok else b"\x00"
        yield
    return handler


class _OwnerClient(KVClient):
    def __init__(self, layout, thread):
        self.nodes = layout["compute"]

    def _call(self, co, method, key, value=b""):
        dst = self.nodes[_owner(key, len(self.nodes))]
        return (yield from co.rpc(dst, bytes([len(key)]) + key + value, method=method, timeout_ns=200_000,
                                  retries=5))

    def get(self, co, key):
        r = yield from self._call(co, M_GET, key)
        return r[1:] if r[:1] == b"\x01" else None

    def insert(self, co, key, value):
        return (yield from self._call(co, M_INSERT, key, value)) == b"\x01"

    def update(self, co, key, value):
        return (yield from self._call(co, M_UPDATE, key, value)) == b"\x01"

    def delete(self, co, key):
        return (yield from self._call(co, M_DELETE, key)) == b"\x01"


class OwnerKV(System):
    """A test system: every operation is an RPC to the compute node owning the key (by hash),
    served by 2 RPC threads there from a dict; each owner counts its operations in a word of its
    own memory, exposed to one-sided verbs."""

    name = "owner-kv-test"
    roles = ("compute", "memory")
    expose_compute = True
    # setup: a fresh store per node at every rack start (a forked process inherits the parent's
    # dict, e.g. from the supervisor's warm-up rack)
    servers = {"compute": rpc_server({m: _kv(m) for m in (M_GET, M_INSERT, M_UPDATE, M_DELETE)}, threads=2,
                                     setup=lambda ctx: _STORES.__setitem__(ctx.name, {}))}

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        cns = [n.name for n in fabric.nodes if n.role == "compute"]
        for c in cns:
            fabric.exposed_key(c)       # KeyError unless the rack exposed it (expose_compute)
        offs = {fabric.allocate(c, 64) for c in cns}
        assert len(offs) == 1           # the same offset on every compute node (fresh, same-size nodes)
        return {"compute": cns, "counter": offs.pop()}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return _OwnerClient(layout, thread)


def owner_dict(*steps):
    from tests.test_rack import rack_dict
    d = rack_dict(*steps, compute=2, threads=3, coroutines=2, records=64)
    d["rack"]["profile"] = PROFILE
    d["system"] = {"name": "tests.test_rpc:OwnerKV"}
    d["workload"]["valuesize"] = 32
    return d


def test_an_owner_partitioned_kv_over_rpc_in_a_co_located_rack():
    from cluster.correctness.checker import check
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    from shm.fabric import REGION_HOST
    from tests.test_rack import LOAD, run
    _STORES.clear()
    rack = ColocatedRack(scenario_from_dict(owner_dict(LOAD, run(0.2)), source="t.toml"), history=20_000)
    res = rack.run()
    assert res.steps[0].ops == 64 and res.steps[-1].ops > 100
    assert check(rack.history_ops).verdict == "ok"
    executed = {n: SERVERS[n].statistics().executed for n in ("cn0", "cn1")}
    assert min(executed.values()) > 0 and sum(executed.values()) >= res.steps[-1].ops + 64
    assert len(_STORES["cn0"]) + len(_STORES["cn1"]) == 64        # every key at its one owner


def test_an_owner_partitioned_kv_over_rpc_in_a_rack_of_processes():
    """cn0 and cn1 are processes: each serves its keys and calls the other's server across processes."""
    from cluster.correctness.checker import check
    from cluster.scenario import scenario_from_dict
    from cluster.supervisor import Supervisor
    from tests.test_rack import LOAD, run
    sup = Supervisor(scenario_from_dict(owner_dict(LOAD, run(0.2)), source="t.toml"), quiet=True, history=20_000)
    assert sup.run() == 0, sup.deaths
    res = sup.results
    assert res.steps[0].ops == 64 and res.steps[-1].ops > 100
    assert check(sup.history_ops).verdict == "ok"


def test_a_manager_actor_on_a_compute_node_reads_counters_writes_staging_maps_and_rpcs(prefix):
    """FlexKV's manager on cn0 (an actor with a NodeContext): READ each other node's access counter,
    WRITE its staging map, then RPC "pause" to each and wait for every ACK."""
    with rig(prefix) as r:
        offs = {}
        for n in (1, 2):
            r.fabric.expose(n)
            offs[n] = r.fabric.allocate(n, 64)
            r.fabric.memory[n].host64[offs[n] // 8] = 100 * n          # the node's access counter

        def pause(ctx, req):
            staged = bytes(ctx.memory.host[offs[ctx.index] + 8:offs[ctx.index] + 16])
            return b"ack:" + staged
            yield

        for n in (1, 2):
            r.serve(n, {7: pause})
        ctx = r.ctx[0]
        co = NodeRdma(ctx.host, ctx.index).thread().coroutine()
        out = []

        def manager():
            hs = {n: co.read(gaddr(n, offs[n]), 8) for n in (1, 2)}
            co.post()
            yield co.sync()
            out.append({n: h.value for n, h in hs.items()})
            for n in (1, 2):
                co.write(gaddr(n, offs[n] + 8), b"map-v2-%d" % n)
            co.post()
            yield co.sync()
            for n in (1, 2):
                out.append((yield from rpc(ctx, f"cn{n}", b"", method=7)))
        r.env.process(manager())
        r.env.run()
    assert out == [{1: 100, 2: 200}, b"ack:map-v2-1", b"ack:map-v2-2"]


def _kill_cn1_then_run(system: str, last_ms: float):
    from cluster.scenario import scenario_from_dict
    from cluster.supervisor import Supervisor
    from tests.test_rack import LOAD, run
    d = owner_dict(LOAD, run(0.1), {"action": "kill", "node": "cn1"}, run(last_ms))
    d["rack"]["on_node_death"] = "continue"
    d["system"] = {"name": f"tests.test_rpc:{system}"}
    sup = Supervisor(scenario_from_dict(d, source="t.toml"), quiet=True)
    return sup, sup.run()


def test_rpcs_to_a_killed_node_time_out_instead_of_hanging():
    """cn1 is SIGKILLed mid-run (on_node_death = "continue"); the last step (2 ms) outlasts cn0's
    6 attempts of 200 us: datagrams to cn1 are dropped, a call of cn0 to a key cn1 owns raises
    RpcTimeout after the full 1.2 ms, and cn0 fails (the toy client has no fall-back: FlexKV's
    would take the memory nodes' one-sided path). cn0's failure leaves the clock instead of
    stopping every node, so the manager sees it dead and finishes the plan. (It used to set the
    rack's stop flag: every process ended its run with the plan unfinished, and the supervisor,
    which ended only on the scenario's end, waited forever.)"""
    import re
    sup, status = _kill_cn1_then_run("OwnerKV", 2.0)
    assert status == 0, sup.deaths
    assert sup.stop_reason == "scenario finished", sup.stop_reason
    deaths = {x.node: x for x in sup.deaths}
    assert deaths["cn1"].expected and not deaths["cn0"].expected, sup.deaths
    m = re.search(r"raised in dmrack process 'cn0\.t\d+c\d+' at t=(\d+) ns", deaths["cn0"].how)
    assert m and int(m.group(1)) >= 6 * 200_000, deaths["cn0"].how
    assert "RpcTimeout: rpc to node 'cn1'" in sup._tracebacks["cn0"]


def test_a_survivor_runs_a_step_much_longer_than_the_timeouts_after_a_kill():
    """As above, but cn0's client turns an RpcTimeout into a failed operation: cn0 survives and
    runs the whole 3 ms step after the kill (2.5 x the 1.2 ms of timeouts), its calls to cn1's keys
    failing after every attempt and its own keys still served, and the rack finishes."""
    sup, status = _kill_cn1_then_run("OwnerKVFallback", 3.0)
    assert status == 0, sup.deaths
    assert sup.stop_reason == "scenario finished", sup.stop_reason
    assert [(x.node, x.expected) for x in sup.deaths] == [("cn1", True)]
    last = sup.results.steps[-1]
    assert last.label == "run default for 3 ms" and last.vdur_ns >= 3_000_000
    cn0 = {n.node: n for n in last.nodes}["cn0"]
    every = cn0.kinds[0]
    assert cn0.failures > 0 and cn0.ops > cn0.failures          # timeouts failed, its own keys served
    assert every.max_us >= 6 * 200 and every.p50_us < 100        # a failure took all 6 attempts


class _FallbackClient(_OwnerClient):
    """The owner client of a system that survives a dead owner: a call that times out is a failed
    operation (recorded as such), not a failed node."""

    def _call(self, co, method, key, value=b""):
        try:
            return (yield from super()._call(co, method, key, value))
        except RpcTimeout:
            return b"\x00"


class OwnerKVFallback(OwnerKV):
    name = "owner-kv-fallback-test"

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return _FallbackClient(layout, thread)


def test_a_restarted_node_serves_rpcs_again():
    """kill cn1, run 1.5 ms (cn0's calls to cn1's keys time out), restart cn1, run 0.3 ms: a new
    cn1 process joins at the rack's virtual time, serves RPCs again from a fresh store (its keys
    are gone: reads of them miss, but every call is answered) and runs its own clients, whose
    calls cn0 takes although cn0's server saw the dead cn1's request ids on the same endpoints."""
    from cluster.scenario import scenario_from_dict
    from cluster.supervisor import Supervisor
    from tests.test_rack import LOAD, run
    d = owner_dict(LOAD, run(0.1), {"action": "kill", "node": "cn1"}, run(1.5),
                   {"action": "restart", "node": "cn1"}, run(0.3))
    d["rack"]["on_node_death"] = "continue"
    d["system"] = {"name": "tests.test_rpc:OwnerKVFallback"}
    sup = Supervisor(scenario_from_dict(d, source="t.toml"), quiet=True)
    assert sup.run() == 0, sup.deaths
    assert sup.stop_reason == "scenario finished", sup.stop_reason
    assert [(x.node, x.expected) for x in sup.deaths] == [("cn1", True)]
    steps = {s.label: {n.node: n for n in s.nodes} for s in sup.results.steps}
    dead = steps["run default for 1.5 ms"]
    assert set(dead) == {"cn0"} and dead["cn0"].failures > 0 and dead["cn0"].kinds[0].max_us >= 6 * 200
    back = steps["run default for 0.3 ms"]
    assert set(back) == {"cn0", "cn1"}
    for n in ("cn0", "cn1"):
        assert back[n].ops > 50, back[n]
        assert back[n].kinds[0].max_us < 100, back[n]            # no call timed out: cn1 answers again
    # cn1's store is fresh: reads and updates of the keys it owned miss (failures), its own do not
    assert 0 < back["cn0"].failures < back["cn0"].ops


def test_a_restarted_nodes_memory_is_what_setup_left(prefix):
    """RackState.reset_node_memory: setup's regions get their contents back, later carvings are
    zeroed and the bump pointer returns, the dead process's MRs are dropped."""
    from cluster.rack import RackState, compile_scenario
    from shm.fabric import MR_KEY, MR_PID
    from cluster.scenario import scenario_from_dict
    from tests.test_rack import LOAD, run
    d = owner_dict(LOAD, {"action": "kill", "node": "cn1"}, {"action": "restart", "node": "cn1"}, run(0.1))
    d["rack"]["on_node_death"] = "continue"
    c = compile_scenario(scenario_from_dict(d, source="t.toml"))
    with RackState.create(c, processes=True) as st:
        slot = st.slot("cn1")
        mem, fab = st.fabric.memory[slot], st.fabric
        counter = st.layout["counter"]
        mark = int(mem.alloc[0])
        assert counter < mark and st.setup_images[slot][0] == mark
        mem.host64[counter // 8] = 77                          # the dead node's counting
        off = fab.allocate(slot, 4096)                         # its thread buffers
        mem.host[off:off + 4096] = 9
        key = fab.register(slot, off, 4096, 1)
        dead_pid = 4_000_000                                   # the node's process, not this one
        mem.mrt[(key >> 8) - 1, MR_PID] = dead_pid
        st.reset_node_memory(slot, dead_pid)
        assert mem.host64[counter // 8] == 0 and int(mem.alloc[0]) == mark
        assert not mem.host[off:off + 4096].any()
        with pytest.raises(KeyError):
            fab.deregister(slot, key)
        exposed = fab.exposed_key(slot)                        # registered by the rack's owner: stays
        assert mem.mrt[(exposed >> 8) - 1, MR_KEY] == exposed
        assert fab.allocate(slot, 64) == off
