"""Two-sided RPC over datagrams for coroutines and server actors (issue 24, item 1).

Why here, in ``shm/`` beside ``shm/udp.py`` and ``shm/coro.py``, and not in ``nodes/``: the layer
is a thin protocol on the datagram path (a header, request ids, a dedup table) that needs nothing
of a rack. Its client runs from a ``shm.coro`` coroutine or thread, or from a server actor, and its
server is a plain generator per server thread over a ``UdpNet`` queue; ``rpc_server`` only adapts
it to the ``System.servers`` hook of ``nodes/actors.py`` (it takes a ``NodeContext``, or anything
with the same few fields), so unit tests run it on a bare fabric and systems run it in a rack.

Client::

    reply = yield from rpc(co, "cn1", payload, method=3, timeout_ns=50_000, retries=3)

``co`` is a ``shm.coro.VerbBatch``, an ``RdmaThread`` (its ``owner.udp`` is the net, as a rack's
compute node sets it) or a ``NodeContext`` (a server actor calling out: nested RPCs). Each calling
process gets its own endpoint: a UDP socket and a reply port bound on its node (``REPLY_PORT_BASE``
upwards), so concurrent callers never take each other's replies. The reply is the handler's bytes.

* **Pricing**: the request and the reply are datagrams of ``shm.udp``, i.e. UD SENDs of
  ``payload + header + 28`` bytes through the NIC model (``UdpSocket.send``); from a coroutine the
  post is charged to its thread's core (``thread=``), as its verbs are. Waiting for the reply polls
  the reply queue (``cpu.poll_ns``). On the server: one ``cpu.poll_ns`` to take the request, then
  ``cpu.rpc_handler_ns`` (receive, dispatch, answer) on the node's cores, plus whatever the handler
  charges (``ctx.cpu``, verbs, nested RPCs), then the reply's UD SEND. No verb changed price.
* **Request ids**: a call has one id (a per-endpoint counter, from the virtual time the endpoint
  was made, so a restarted node's endpoints are never stale) that every resend repeats; a reply is
  taken only if its id is the current call's, so a late reply of an earlier call (one that timed
  out) is skipped, never returned.
* **Retries and errors**: ``timeout_ns`` per attempt, ``retries`` resends; when every attempt
  timed out, :class:`RpcTimeout`, one line naming the node, the method and the attempts (the node is
  gone, has no server on the port, or is overloaded: a datagram to a full RX ring is dropped).
  An unknown method is :class:`RpcError` naming node and method; a handler that raised an
  ``Exception`` is :class:`RpcHandlerError` naming node, method and the exception's first line
  (the server logs one line and keeps serving; failpoint crashes, ``SystemGaveUp``, ``Interrupt``
  and other BaseExceptions are not caught: see :func:`_propagates`).
* **At most once**: the server keeps, per client endpoint (node, port), the id of its latest
  request and, once executed, its reply. A resend of an executed request gets the cached reply
  again; a resend while it still runs is dropped (its reply is on its way); an older id is stale
  and dropped. A client endpoint has one call outstanding at a time, so one entry per endpoint is
  exact and the table stays as small as the number of clients.
* **Server threads**: ``rpc_server(handlers, threads=2)`` starts ``threads`` actors on one RX
  queue (the node's port ``RPC_PORT``); each takes one request at a time and runs its handler to
  the end, so with all threads busy requests wait in the ring (and beyond ``depth`` are dropped).
  FlexKV runs 2 proxy threads per compute node. Each thread has a ``shm.coro`` coroutine of its
  own (``request.co``) for one-sided verbs from its handlers (FlexKV's proxy WRITEs the slot to the
  memory node before its local commit); its posts are priced on that thread's core, as a client's.
* **Server coroutines** (``coroutines=n``): each thread runs ``n`` handlers at once, as a
  coroutine thread does: while one waits for its verbs or RPCs, another runs on the core. They
  share the thread's core and its socket, and so are one user of the socket's QP and doorbell;
  a coroutine takes a request only when its thread's core is free (a coroutine thread polls its
  queue from its scheduler, between coroutines), so a request goes to a thread that can run it;
  and a handler's reply is posted before its coroutine yields, when the handler's CPU ends. With
  a handler that never waits, ``n`` coroutines serve exactly as fast as one
  (``tests/test_rpc.py``).

The caller's side (the header, the errors, endpoints, :func:`rpc`) is in ``shm/rpc_client.py``,
which ``shm/coro.py`` imports for ``VerbBatch.rpc`` while this module, the server, imports
``shm/coro.py`` for its threads' coroutines; every name of it is re-exported here.

Not built yet: RPC from the manager process (it has no datagram net; a manager that needs RPCs
would get a socket on a node of its own), no batching of several requests in one datagram, payloads are limited to
one datagram (``udp.mtu_bytes - 28 - HEADER.size`` bytes).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from shm.coro import NodeRdma
from shm.messages import SystemGaveUp
from shm.rpc_client import (  # noqa: F401  (the caller's side, re-exported: shm.rpc is the one name)
    HEADER, KIND_REPLY, KIND_REQUEST, REPLY_PORT_BASE, RPC_PORT, ST_ERROR, ST_NO_METHOD, ST_OK, RpcEndpoint,
    RpcError, RpcHandlerError, RpcTimeout, encode_request, endpoint_of, rpc)
from shm.udp import UDP_OK

__all__ = ["rpc", "rpc_server", "RpcServer", "RpcEndpoint", "Request", "RpcError", "RpcTimeout", "RpcHandlerError", "RpcStats",
           "RPC_PORT", "REPLY_PORT_BASE", "HEADER", "encode_request"]


class Request(NamedTuple):
    src_node: int        # fabric index of the caller's node
    src_port: int        # the caller's reply port
    method: int
    rid: int             # the request id (the same in every resend)
    payload: bytes
    arrived_ns: int      # when the request landed in the server's RX queue
    co: Any = None       # the server thread's shm.coro VerbBatch for one-sided verbs (None: verbs off)


class RpcStats(NamedTuple):
    requests: int        # requests received (resends included)
    executed: int        # handler executions
    duplicates: int      # resends answered from the cache (at most once)
    in_progress: int     # resends dropped because the request was still running
    stale: int           # requests older than the endpoint's latest, dropped
    no_method: int       # requests for a method nobody registered
    errors: int = 0      # handler executions that raised (answered with an error status, cached as any reply)


# -- server -------------------------------------------------------------------------------------

class RpcServer:
    """The RPC server of one node: ``threads`` actors on one bound RX queue, a dedup table."""

    def __init__(self, ctx, handlers: dict[int, Callable], *, threads: int = 2, port: int = RPC_PORT,
                 depth: int | None = None, verbs_buffer: int = 64 << 10, log: Callable[[str], None] | None = None,
                 coroutines: int = 1):
        self.ctx = ctx
        self.log = log if log is not None else _log_stderr
        net = ctx.udp
        if net is None:
            raise RpcError(f"node {ctx.name!r}: an RPC server needs the datagram path (a profile with [udp])")
        if type(threads) is not int or threads < 1:
            raise RpcError(f"node {ctx.name!r}: RPC server threads must be an integer >= 1, got {threads!r}")
        cores = getattr(ctx, "cores", None)
        if cores is not None and threads > cores.n:
            raise RpcError(f"node {ctx.name!r}: {threads} RPC server threads exceed its {cores.n} cores")
        for m, h in handlers.items():
            if type(m) is not int or not 0 <= m <= 0xFFFF or not callable(h):
                raise RpcError(f"node {ctx.name!r}: RPC handlers map a method 0..65535 to a function, got {m!r}: {h!r}")
        if type(coroutines) is not int or coroutines < 1:
            raise RpcError(f"node {ctx.name!r}: RPC server coroutines must be an integer >= 1, got {coroutines!r}")
        if coroutines > 1 and not verbs_buffer:
            raise RpcError(f"node {ctx.name!r}: server coroutines need a verbs buffer (verbs_buffer > 0)")
        self.handlers = dict(handlers)
        self.threads = threads
        self.coroutines = coroutines
        self.net = net
        self.port = port
        self.queue = net.bind(ctx.index, port, depth)
        self._ctx_index = ctx.index
        if type(verbs_buffer) is not int or verbs_buffer < 0:
            raise RpcError(f"node {ctx.name!r}: verbs_buffer must be an integer >= 0, got {verbs_buffer!r}")
        self.verbs_buffer = verbs_buffer
        self.handler_ns = ctx.profile.cpu.rpc_handler_ns
        self._last: dict[tuple[int, int], tuple[int, bytes | None]] = {}
        self.requests = self.executed = self.duplicates = self.in_progress = self.stale = self.no_method = 0
        self.errors = 0
        self.last_error = ""             # the latest handler exception's line, as the caller got it

    def statistics(self) -> RpcStats:
        return RpcStats(self.requests, self.executed, self.duplicates, self.in_progress, self.stale, self.no_method,
                        self.errors)

    def actors(self) -> list:
        """One generator per server thread; each owns a UD QP on a doorbell of its own (a verbs
        context per thread, as SMART's thread-aware allocation), so the threads never take turns
        on a QP lock or a doorbell."""
        from shm.verbs import Context
        rdma = None
        if self.verbs_buffer:
            rdma = NodeRdma(self.net.host, self._ctx_index, buffer_bytes=self.verbs_buffer)
        out = []
        for _ in range(self.threads):
            verbs = Context(self.net.host, self._ctx_index, low_latency=0, doorbells=1)
            sock = self.net.socket(self._ctx_index, self.port, context=verbs)
            thread = rdma.thread() if rdma is not None else None
            for _ in range(self.coroutines):
                # a thread's coroutines share its core (thread.cpu) and its socket: one handler
                # runs on the core at a time, the others wait for their verbs or RPCs meanwhile
                out.append(self._serve(sock, thread.coroutine() if thread is not None else None))
        return out

    def _serve(self, sock, co=None):
        ctx, q = self.ctx, self.queue
        # the server thread's core (its coroutine's thread) when it has one, else the node's cores;
        # its replies are posted on that core too, so a thread's coroutines are one user of its
        # socket's QP (not one sharer of the doorbell lock each, which would price lock handovers
        # between coroutines of one thread, who never contend for it)
        thread = co.thread if co is not None else None
        charge = thread.cpu if thread is not None else ctx.cpu
        env = ctx.env
        while True:
            ev = q.wait()
            yield ev
            if thread is not None and thread.cpu_free > env.now:
                # the thread's core is running another of its coroutines: a coroutine thread polls
                # its queue only when it is back in its scheduler, so the request waits for a
                # thread that is free first (or for this one, once its core is)
                while thread.cpu_free > env.now:
                    yield thread.cpu_free - env.now
                if not q:
                    continue
            dg = q.poll()                                    # one cpu.poll_ns
            if dg is None:
                continue                                     # another thread took it
            if len(dg.data) < HEADER.size:
                continue
            kind, _st, method, rid = HEADER.unpack_from(dg.data)
            if kind != KIND_REQUEST:
                continue
            self.requests += 1
            who = (dg.src_node, dg.src_port)
            seen = self._last.get(who)
            if seen is not None:
                if rid < seen[0]:
                    self.stale += 1
                    continue
                if rid == seen[0]:
                    if seen[1] is None:
                        self.in_progress += 1                # still running: its reply will go out
                    else:
                        self.duplicates += 1                 # executed: the cached reply, not a second run
                        sock.send(dg.src_node, dg.src_port, seen[1], thread=thread)
                    continue
            self._last[who] = (rid, None)
            charge(self.handler_ns)
            handler = self.handlers.get(method)
            if handler is None:
                self.no_method += 1
                reply = HEADER.pack(KIND_REPLY, ST_NO_METHOD, method, rid)
            else:
                try:
                    out = yield from handler(ctx, Request(dg.src_node, dg.src_port, method, rid,
                                                          dg.data[HEADER.size:], dg.arrived_ns, co))
                except Exception as e:                       # noqa: BLE001 - sent back to the caller
                    if _propagates(e):
                        raise
                    out = e
                self.executed += 1
                if isinstance(out, Exception):
                    reply = self._error_reply(method, rid, out, dg.src_node)
                else:
                    reply = HEADER.pack(KIND_REPLY, ST_OK, method, rid) + bytes(out or b"")
                    if len(reply) > self.net.max_payload:
                        raise RpcError(f"node {ctx.name!r}: the reply of method {method} "
                                       f"({len(reply) - HEADER.size} B) exceeds one datagram")
            # the reply is posted before this coroutine yields, as a coroutine thread answers before
            # it goes back to its scheduler: the post starts when the handler's CPU ends (the
            # model prices it from there), not after whatever another coroutine of the thread
            # booked on the core meanwhile
            status = sock.send(dg.src_node, dg.src_port, reply, thread=thread)
            assert status == UDP_OK
            # settle the CPU the handler charged before its result is kept for resends: a resend
            # taken by another thread meanwhile is in progress (dropped), its reply on the way
            yield 0
            if self._last.get(who, (rid,))[0] == rid:
                self._last[who] = (rid, reply)


    def _error_reply(self, method: int, rid: int, exc: Exception, src: int) -> bytes:
        """The reply for a handler that raised ``exc``: status ST_ERROR and ``Type: first line``
        (cut to one datagram); the server logs one line and keeps serving."""
        lines = str(exc).strip().splitlines()
        remote = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        self.errors += 1
        self.last_error = remote
        caller = self.net.fabric.nodes[src].name if 0 <= src < len(self.net.fabric.nodes) else str(src)
        self.log(f"rpc server {self.ctx.name!r}: method {method} from {caller!r} raised {remote} "
                 f"(t={self.ctx.env.now} ns; the caller gets RpcHandlerError)")
        room = self.net.max_payload - HEADER.size
        data = remote.encode("utf-8", "replace")[:room]
        return HEADER.pack(KIND_REPLY, ST_ERROR, method, rid) + data


def _log_stderr(line: str) -> None:
    import sys
    print(line, file=sys.stderr, flush=True)


def _propagates(exc: BaseException) -> bool:
    """An exception a handler raised that must not be sent back as an error reply but end the
    server actor as before: the system giving up (``SystemGaveUp``: the rack stops) and an
    ``Interrupt`` thrown into the actor. Process shutdown and failpoints never get here: a
    ``crash`` failpoint raises ``ClientCrash`` (a BaseException), an ``exit`` failpoint ends the
    process with ``os._exit``, and ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` are
    BaseExceptions too; only ``Exception`` is caught."""
    from shm.sim.env import Interrupt
    if isinstance(exc, Interrupt):
        return True
    return isinstance(exc, SystemGaveUp)


#: per process: node name -> its RpcServer (tests and systems read their statistics here)
SERVERS: dict[str, RpcServer] = {}


def rpc_server(handlers: dict[int, Callable], *, threads: int = 2, port: int = RPC_PORT,
               depth: int | None = None, setup: Callable[[Any], Any] | None = None, verbs_buffer: int = 64 << 10,
               log: Callable[[str], None] | None = None, coroutines: int = 1):
    """A ``System.servers`` entry: ``servers = {"compute": rpc_server({1: get}, threads=2)}``.

    ``handlers``: method id -> generator function ``handler(ctx, request) -> reply bytes`` (it may
    ``yield`` events, charge ``ctx.cpu(ns)``, post verbs, call :func:`rpc`). ``threads``: server
    actors (refused beyond the node's cores). ``depth``: the RX ring (default ``udp.rx_depth``).
    ``setup(ctx)``: called once per node before the actors start (state for the handlers).
    ``verbs_buffer``: bytes of the node's memory for each server thread's verbs buffer: the thread
    gets a ``shm.coro`` coroutine, ``request.co``, for one-sided verbs (0: none). ``coroutines``:
    handlers each thread runs at once (module docstring, "Server coroutines"; needs the verbs
    buffer)."""
    def start(ctx):
        if setup is not None:
            setup(ctx)
        server = RpcServer(ctx, handlers, threads=threads, port=port, depth=depth, verbs_buffer=verbs_buffer, log=log,
                           coroutines=coroutines)
        SERVERS[ctx.name] = server
        return server.actors()
    return start
