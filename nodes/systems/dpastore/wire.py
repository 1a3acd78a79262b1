"""DPA-Store's datagrams: one request per UDP packet, a response that mirrors it, and the client.

The paper's clients are stateless: they hash a key to pick the traverser thread (its UDP port,
which the NIC steers to that thread), send one request per packet and resend on timeout; a
response "mirrors the request layout with a status in the type field", and a RANGE response
carries up to 64 pairs (1500-byte MTU). Here::

    request   op u8 | flags u8 | count u16 | request id u32 | key u64 |
              bloom bits 3 x u8 | bucket u8 | value length u16 | value
    response  op u8 | status u8 | count u16 | request id u32 | then
              GET: the value;  RANGE: next key u64, then count x (key u64 | length u16 | value);
              ERROR: a one-line message

``flags`` bit 0: the hot-entry cache hints are valid (clients that bypass the cache clear it, as
a GET the hot-thread switch sends to another traverser does: :mod:`.hotswitch`).
RANGE ``count`` asks for that many pairs; a response holds what fits a packet (at most
:data:`RANGE_MAX` pairs) and, with status ``ST_MORE``, the key the client continues from.

Malformed requests (too short, unknown op, a length that does not match the packet, a RANGE of
0 or more than the limit) get an ``ST_ERROR`` response naming the problem, and the thread goes on
serving. A request id repeated by a resend is answered from the thread's last reply to that
client port, never executed twice.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.dpa_kv.datagram import DatagramClient

from .hotswitch import HotSwitch, SwitchSettings

BASE_PORT = 9500
REPLY_PORT = 21000            # coroutine k of thread t binds REPLY_PORT + t * 64 + k
RANGE_MAX = 64                # pairs per RANGE response (the paper: 64 pairs in a 1500 B packet)

OP_GET, OP_INSERT, OP_UPDATE, OP_DELETE, OP_RANGE = 1, 2, 3, 4, 5
OPS = {OP_GET: "GET", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE", OP_RANGE: "RANGE"}
ST_OK, ST_MISSING, ST_EXISTS, ST_MORE, ST_ERROR = 0, 1, 2, 3, 9
FLAG_HINTS = 1

REQ = struct.Struct("<BBHIQBBBBH")     # 22 bytes
REP = struct.Struct("<BBHI")           # 8 bytes
PAIR = struct.Struct("<QH")            # a RANGE pair's key and value length


class Request(NamedTuple):
    op: int
    rid: int
    key: int
    count: int
    hints: tuple | None                # (bloom bits, bucket) or None
    value: bytes


class Malformed(ValueError):
    """A request the thread cannot parse; the message goes back in the error response."""


def key_int(key: bytes) -> int:
    if len(key) != 8:
        raise SystemGaveUp(f"dpa-store keys are exactly 8 bytes (uint64, as the paper's); got {len(key)}")
    return int.from_bytes(key, "big")


def port_hash(key: int) -> int:
    """The shared key hash that picks a traverser (splitmix64's finaliser: stable across runs)."""
    z = (key + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def encode_request(op: int, rid: int, key: int, *, count: int = 0, hints=None, value: bytes = b"") -> bytes:
    bits, bucket = hints if hints is not None else ((0, 0, 0), 0)
    return REQ.pack(op, FLAG_HINTS if hints is not None else 0, count, rid, key, *bits, bucket, len(value)) + value


def parse_request(data: bytes, value_max: int) -> Request:
    if len(data) < REQ.size:
        raise Malformed(f"request of {len(data)} B is shorter than the {REQ.size}-byte header")
    op, flags, count, rid, key, b0, b1, b2, bucket, vlen = REQ.unpack_from(data)
    if op not in OPS:
        raise Malformed(f"unknown operation {op}")
    if len(data) != REQ.size + vlen:
        raise Malformed(f"value length {vlen} does not match the packet ({len(data) - REQ.size} B after the header)")
    if op in (OP_INSERT, OP_UPDATE) and vlen > value_max:
        raise Malformed(f"a value of {vlen} B exceeds value_max = {value_max}")
    if op in (OP_INSERT, OP_UPDATE) and value_max == 8 and (
            vlen != 8 or int.from_bytes(data[REQ.size:], "little") >= (1 << 64) - 2):
        raise Malformed("values are 8-byte words other than the buffer's two reserved marks")
    if op == OP_RANGE and not 1 <= count <= 0xFFFF:
        raise Malformed(f"RANGE of {count} pairs")
    hints = ((b0, b1, b2), bucket) if flags & FLAG_HINTS else None
    return Request(op, rid, key, count, hints, bytes(data[REQ.size:]))


def request_id(data: bytes) -> int:
    """The request id of a packet that may be malformed (0 if it is too short to have one)."""
    return struct.unpack_from("<I", data, 4)[0] if len(data) >= 8 else 0


def range_reply(op: int, rid: int, pairs, next_key, mtu_payload: int) -> tuple:
    """(response bytes, pairs packed): as many pairs as fit, at most RANGE_MAX."""
    body = bytearray(struct.pack("<Q", 0))
    n = 0
    for k, v in pairs:
        if n == RANGE_MAX or REP.size + len(body) + PAIR.size + len(v) > mtu_payload:
            break
        body += PAIR.pack(k, len(v)) + v
        n += 1
    more = n < len(pairs) or next_key is not None
    nxt = pairs[n][0] if n < len(pairs) else (next_key if next_key is not None else 0)
    struct.pack_into("<Q", body, 0, nxt)
    return REP.pack(op, ST_MORE if more else ST_OK, n, rid) + bytes(body), n


def parse_range(data: bytes) -> tuple:
    """(pairs, next key or None) of a RANGE response."""
    _op, status, n, _rid = REP.unpack_from(data)
    nxt = struct.unpack_from("<Q", data, REP.size)[0]
    o = REP.size + 8
    out = []
    for _ in range(n):
        k, vlen = PAIR.unpack_from(data, o)
        o += PAIR.size
        out.append((k, bytes(data[o:o + vlen])))
        o += vlen
    return out, (nxt if status == ST_MORE else None)


class DpaStoreStats(NamedTuple):
    """One client's counters: requests (a RANGE continued over packets counts each), resends and
    timeouts (as every datagram client's), and the hot-thread switch's (``hot_switch``; zero
    without it): this thread's GETs sent to an alternative traverser, its replies that came late
    (the request timed out at least once: the switch's signal), and the decisions of the node's
    switch its replies triggered, raising or lowering a traverser's moved share."""
    requests: int
    resends: int
    timeouts: int
    gets_moved: int
    late_replies: int
    switch_raised: int
    switch_lowered: int


class DpaStoreClient(DatagramClient):
    """A stateless client: a key's hash picks the traverser's port; every coroutine its reply port.
    With ``hot_switch`` it watches, per traverser, the share of its requests answered late and
    moves a growing share of a hot traverser's GETs to an alternative one, without cache hints
    (:mod:`.hotswitch`)."""

    service = "dpa-store"
    reply_port = REPLY_PORT
    stats_class = DpaStoreStats

    def __init__(self, layout: dict, thread, options: dict):
        super().__init__(layout, thread, options)
        self.traversers = layout["traversers"]
        self.value_max = layout["value_max"]
        self.cache = bool(layout["hot_cache"])
        self.endpoint = self.calls.endpoint             # coroutine -> (socket, reply queue)
        self.switch = None
        self.moved = self.late = self.raised = self.lowered = 0
        if options.get("hot_switch"):
            from nodes.systems.lib.shared import shared
            self.env = self.net.env
            self.salt = (thread.owner.node << 12) | thread.index   # one client thread of the rack
            self.switch = shared(thread.owner, layout["dpa_region"], "dpastore.hot_switch",
                                 lambda: HotSwitch(self.traversers, SwitchSettings.of(options), self.timeout_ns))

    def _hints(self, k: int):
        if not self.cache:
            return None
        from .hotcache import cache_hints
        h = cache_hints(k)
        return (tuple(h.bloom), h.bucket)

    def _call(self, co, op: int, k: int, *, count: int = 0, value: bytes = b"", hints=None, movable: bool = False):
        """One request to the key's owner (``movable``: a GET the switch may send elsewhere, then
        without ``hints``); (status, reply bytes)."""
        owner = port_hash(k) % self.traversers
        t = owner
        sw = self.switch
        if sw is not None and movable:
            t = sw.target(owner, k, self.salt)
            if t != owner:
                self.moved += 1
                hints = None                            # bypass (and never fill) the other thread's cache
        sends = [0]

        def sent(attempt: int) -> None:
            sends[0] = attempt + 1

        reply = yield from self.request(
            co, BASE_PORT + t, lambda rid: encode_request(op, rid, k, count=count, hints=hints, value=value),
            lambda data: REP.unpack_from(data)[3], sent if sw is not None else None)
        if sw is not None:                              # late: timed out, sent again at least once
            late = sends[0] > 1
            self.late += late
            d = sw.record(t, late, self.env.now)
            self.raised += d > 0
            self.lowered += d < 0
        status = REP.unpack_from(reply.data)[1]
        if status == ST_ERROR:
            raise SystemGaveUp(f"dpa-store: the DPA refused a request: {reply.data[REP.size:].decode(errors='replace')}")
        return status, reply.data

    def statistics(self):
        c = self.calls
        return DpaStoreStats(c.requests, c.n_resends, c.n_timeouts, self.moved, self.late, self.raised, self.lowered)

    def _value(self, value: bytes) -> bytes:
        if len(value) > self.value_max:
            raise SystemGaveUp(f"dpa-store: a value of {len(value)} B exceeds system.value_max = {self.value_max}")
        if self.value_max == 8 and (len(value) != 8 or int.from_bytes(value, "little") >= (1 << 64) - 2):
            raise SystemGaveUp("dpa-store: with system.value_max = 8 values are 8-byte words (the paper's), "
                               f"not {len(value)} B, and not ff..ff or fe..ff (the buffer's reserved marks)")
        return bytes(value)

    def get(self, co, key):
        k = key_int(key)
        status, data = yield from self._call(co, OP_GET, k, hints=self._hints(k), movable=True)
        return bytes(data[REP.size:]) if status == ST_OK else None

    def insert(self, co, key, value):
        k = key_int(key)
        status, _ = yield from self._call(co, OP_INSERT, k, value=self._value(value), hints=self._hints(k))
        return status == ST_OK

    def update(self, co, key, value):
        k = key_int(key)
        status, _ = yield from self._call(co, OP_UPDATE, k, value=self._value(value), hints=self._hints(k))
        return status == ST_OK

    def delete(self, co, key):
        k = key_int(key)
        status, _ = yield from self._call(co, OP_DELETE, k, hints=self._hints(k))
        return status == ST_OK

    def scan(self, co, start, count):
        """RANGE: the traverser of the start key walks the leaves; a response that could not hold
        every pair says where to continue, and the client asks again from there."""
        k = key_int(start)
        out: list = []
        while len(out) < count:
            status, data = yield from self._call(co, OP_RANGE, k, count=min(count - len(out), 0xFFFF))
            pairs, nxt = parse_range(data)
            out.extend((p.to_bytes(8, "big"), v) for p, v in pairs)
            if nxt is None:
                break
            k = nxt
        return out[:count]
