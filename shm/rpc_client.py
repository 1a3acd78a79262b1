"""The calling side of two-sided RPC (``shm/rpc.py``) and the wire format both sides speak.

``shm/rpc.py`` describes the protocol (pricing, request ids, retries, at most once, server
threads) and holds the server; this module holds what a caller needs: the header, the errors, a
caller's endpoint (a socket and a bound reply queue) and :func:`rpc`. It is a module of its own so
that the coroutine verbs of ``shm/coro.py`` (``VerbBatch.rpc``) can call it while the server, whose
threads own a ``shm.coro`` coroutine for one-sided verbs, imports ``shm/coro.py``: both import this
module downward, and neither imports the other's. ``shm.rpc`` re-exports every name here, so
``from shm.rpc import rpc, RpcError, RPC_PORT`` keeps working.
"""

from __future__ import annotations

import struct
import weakref

from shm.udp import UdpError, call_all

__all__ = ["rpc", "RpcEndpoint", "RpcError", "RpcTimeout", "RpcHandlerError", "RPC_PORT", "REPLY_PORT_BASE",
           "HEADER", "encode_request", "endpoint_of", "KIND_REQUEST", "KIND_REPLY", "ST_OK", "ST_NO_METHOD",
           "ST_ERROR"]

#: the UDP port every node's RPC server listens on (a bound port: no steering rule needed)
RPC_PORT = 7471
#: reply ports of a node's client endpoints count up from here
REPLY_PORT_BASE = 40000

KIND_REQUEST, KIND_REPLY = 1, 2
ST_OK, ST_NO_METHOD, ST_ERROR = 0, 1, 2
#: kind u8, status u8, method u16, request id u64
HEADER = struct.Struct("<BBHQ")


class RpcError(RuntimeError):
    """An RPC that cannot complete (unknown method, a payload too big): one line naming the node."""


class RpcTimeout(RpcError):
    """Every attempt of an RPC timed out: one line naming the node."""


class RpcHandlerError(RpcError):
    """The handler raised on the server: one line naming the node, the method and the exception
    (its type and the first line of its message); ``.remote`` is that ``Type: message`` part."""

    def __init__(self, message: str, remote: str = ""):
        super().__init__(message)
        self.remote = remote


def encode_request(method: int, rid: int, payload: bytes) -> bytes:
    """The datagram of a request (for tests that send one by hand)."""
    return HEADER.pack(KIND_REQUEST, ST_OK, method, rid) + bytes(payload)



# -- client -------------------------------------------------------------------------------------

class RpcEndpoint:
    """One caller's socket, bound reply queue and request-id counter on ``node`` of ``net``."""

    def __init__(self, net, node, port: int | None = None):
        self.net = net
        self.node = net.fabric.node_index(node)
        if port is None:
            port = _next_port(net, self.node)
        self.port = port
        self.sock = net.socket(self.node, port)
        self.queue = net.bind(self.node, port)
        # Ids start at the virtual time the endpoint is made, not at 0: a restarted node's new
        # process reuses the same (node, port) endpoints, and a server still holds the old
        # incarnation's latest id for them (its dedup table), so ids from 1 would be dropped as
        # stale. Every call takes more than 1 ns, so the old endpoint's ids never reached the time
        # of its death, which the new one starts above.
        self._rid = int(net.env.now)
        self.calls = self.resends = self.timeouts = 0

    def call(self, dst_node, payload: bytes, *, method: int = 0, timeout_ns: int = 100_000, retries: int = 3,
             thread=None, port: int = RPC_PORT, again: bool = False):
        """``reply = yield from ep.call(...)``: see :func:`rpc`."""
        dst, name, payload = self._checked(dst_node, payload, method)
        if not (again and self._rid):
            self._rid += 1
        got, = yield from self._exchange([(dst, name, payload, self._rid)], method, timeout_ns, retries, thread, port)
        if isinstance(got, RpcError):
            raise got
        return got

    def call_all(self, calls: list, *, method: int = 0, timeout_ns: int = 100_000, retries: int = 3,
                 thread=None, port: int = RPC_PORT):
        """``results = yield from ep.call_all([(dst_node, payload), ...], method=m)``: the requests go
        out together through this endpoint's socket (a UD QP addresses every node), each with a
        request id of its own, and their replies are taken as they come; an unanswered one is sent
        again after ``timeout_ns``, up to ``retries`` times (:func:`shm.udp.call_all`). Returns, in
        the order of ``calls``, each reply's bytes or the :class:`RpcError` that call ended with
        (returned, not raised: one peer that is gone need not hide the others' answers)."""
        requests = []
        for dst_node, payload in calls:
            dst, name, payload = self._checked(dst_node, payload, method)
            self._rid += 1
            requests.append((dst, name, payload, self._rid))
        return (yield from self._exchange(requests, method, timeout_ns, retries, thread, port))

    def _checked(self, dst_node, payload, method: int) -> tuple:
        """(node index, node name, payload bytes) of a request, or one RpcError line naming the problem."""
        net = self.net
        try:
            dst = net.fabric.node_index(dst_node)
        except KeyError as e:
            raise RpcError(f"rpc to node {dst_node!r}: {e.args[0]}") from None
        name = net.fabric.nodes[dst].name
        if type(method) is not int or not 0 <= method <= 0xFFFF:
            raise RpcError(f"rpc to node {name!r}: method must be an integer 0..65535, got {method!r}")
        payload = bytes(payload)
        if len(payload) + HEADER.size > net.max_payload:
            raise RpcError(f"rpc to node {name!r}: a payload of {len(payload)} B exceeds one datagram "
                           f"({net.max_payload - HEADER.size} B after the {HEADER.size} B RPC header)")
        return dst, name, payload

    def _exchange(self, requests: list, method: int, timeout_ns: int, retries: int, thread, port: int):
        """Send ``requests`` ((node index, name, payload, request id) each) together and collect their
        replies (:func:`shm.udp.call_all`, matched by request id); each outcome in order, counted in
        this endpoint's calls, resends and timeouts."""
        wire = [(dst, port, HEADER.pack(KIND_REQUEST, ST_OK, method, rid) + payload, rid)
                for dst, _name, payload, rid in requests]
        self.calls += len(wire)
        try:
            got, sends = yield from call_all(self.sock, wire, self.queue, timeout_ns=timeout_ns, resends=retries,
                                             key=_reply_rid, thread=thread)
        except UdpError as e:
            raise RpcError(f"rpc to node {requests[0][1]!r}: {e}") from None
        out = []
        for (_dst, name, _payload, _rid), dg, sent in zip(requests, got, sends):
            self.resends += sent - 1
            self.timeouts += sent - (dg is not None)
            out.append(_timeout(name, method, retries, timeout_ns) if dg is None else _outcome(name, method, dg.data))
        return out


def _reply_rid(dg):
    """The request id a reply datagram answers (None for anything that is not a reply)."""
    if len(dg.data) < HEADER.size:
        return None
    kind, _st, _m, rid = HEADER.unpack_from(dg.data)
    return rid if kind == KIND_REPLY else None


def _timeout(name: str, method: int, retries: int, timeout_ns: int) -> RpcTimeout:
    return RpcTimeout(f"rpc to node {name!r} (method {method}): no reply after {retries + 1} attempts of "
                      f"{timeout_ns / 1000:g} us (the node is gone, serves no RPCs, or drops them)")


def _outcome(name: str, method: int, data) -> bytes | RpcError:
    """A reply datagram's payload, or the RpcError its status names."""
    _kind, status, _m, _r = HEADER.unpack_from(data)
    if status == ST_NO_METHOD:
        return RpcError(f"rpc to node {name!r}: no handler for method {method}")
    if status == ST_ERROR:
        remote = data[HEADER.size:].decode("utf-8", "replace")
        return RpcHandlerError(f"rpc to node {name!r} (method {method}): the handler raised {remote}", remote)
    return data[HEADER.size:]


_PORTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()       # net -> {node: next port}
_ENDPOINTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # net -> {(node, id(process)): (process, ep)}


def _next_port(net, node: int) -> int:
    ports = _PORTS.setdefault(net, {})
    while True:
        p = ports.get(node, REPLY_PORT_BASE)
        ports[node] = p + 1
        if p > 0xFFFF:
            raise RpcError(f"node {net.fabric.nodes[node].name!r}: no reply ports left for RPC endpoints")
        if (node, p) not in net.bound:
            return p


def _resolve(who, net=None):
    """(net, node, thread) of a coroutine, an RdmaThread or a NodeContext."""
    thread = None
    if hasattr(who, "thread") and hasattr(who, "sync"):          # shm.coro.VerbBatch
        thread = who.thread
    elif hasattr(who, "owner") and hasattr(who, "cpu_free"):     # shm.coro.RdmaThread
        thread = who
    if thread is not None:
        net = net if net is not None else getattr(thread.owner, "udp", None)
        node = thread.owner.node
    else:                                                         # a NodeContext (server actor)
        net = net if net is not None else getattr(who, "udp", None)
        node = getattr(who, "index", None)
    if net is None or node is None:
        raise RpcError(f"rpc: {type(who).__name__} has no datagram net (a profile with [udp], and a rack that "
                       f"gives its nodes one) ")
    return net, node, thread


def endpoint_of(who, *, net=None) -> RpcEndpoint:
    """The calling process's endpoint on ``who``'s node (made on first use, then reused)."""
    net, node, _thread = _resolve(who, net)
    proc = net.env.active_process
    eps = _ENDPOINTS.setdefault(net, {})
    key = (node, id(proc))
    got = eps.get(key)
    if got is None or got[0] is not proc:
        got = eps[key] = (proc, RpcEndpoint(net, node))
    return got[1]


def rpc(who, dst_node, payload: bytes = b"", *, method: int = 0, timeout_ns: int = 100_000, retries: int = 3,
        net=None, port: int = RPC_PORT, again: bool = False):
    """``reply = yield from rpc(co, dst_node, payload, method=m, timeout_ns=..., retries=...)``.

    Sends ``payload`` to method ``method`` of ``dst_node``'s RPC server and returns the handler's
    reply bytes. ``who``: the caller (a coroutine, an ``RdmaThread``, a ``NodeContext``); ``net``
    overrides its datagram net; ``port`` the server's (a node may run several servers, e.g.
    one whose handlers never wait on other nodes, so nested RPCs cannot deadlock). Raises :class:`RpcTimeout` when every one of the ``retries + 1``
    attempts timed out, :class:`RpcError` for an unknown method or a payload over one datagram.
    ``again=True`` goes on with the caller's previous call after its RpcTimeout: the same request
    id, so the server runs it at most once in all (an executed one answers from its reply cache),
    and no request of the caller's can still run after a reply came."""
    net, _node, thread = _resolve(who, net)
    ep = endpoint_of(who, net=net)
    return (yield from ep.call(dst_node, payload, method=method, timeout_ns=timeout_ns, retries=retries,
                               thread=thread, port=port, again=again))
