"""PD3's third application: a Garnet-like key-value cache over a hybrid log, speaking RESP2.

Garnet (Microsoft's KV cache, PD3 §8.1) keeps its records in a *hybrid log* (FASTER's, PD3 [16]):
records are appended at the log's tail, the newest part of the log is in memory and the rest has
spilled -- here to the memory server, the way the PD3 artifact's Garnet devices spill it. An
in-memory hash index (pinned metadata) gives every key its latest record. This module is the host
side of that store on the same rack, threads and miss paths as the hash map (:mod:`.hashmap`,
:mod:`.system`); what differs:

* **The log, not an LRU** (:class:`HybridLogHost`). Memory holds the last ``cache_items`` records
  *appended*, stale versions included (a log's budget is bytes of log). The newest
  :data:`MUTABLE_FRACTION` of it is the mutable region: a SET of a key whose latest record lies
  there updates it in place; older (the read-only region) or spilled, the SET appends a new record
  (read-copy-update), and the old version is garbage. A record leaving memory spills: written to the
  memory server if it is its key's latest version and dirty, announced to the DPU if clean (as the
  hash map's evictions). **A read of a spilled record does not bring it back** (Garnet's read cache
  and copy-reads-to-tail are off by default), so the DPU's Prefetcher is told not to add keys the
  host reads remotely (Table 1's "remote read" row, ``add_on_remote_read=False``). Where the spilled
  records live remotely: at their key's slot (as the hash map's), not at their log address -- one
  remote READ of one record either way; compaction of the remote log is left out.
* **RESP2 over datagrams, one request at a time.** A client connection (a coroutine, its own reply
  port) has one request active, and so does an application thread: Garnet allows no more than one
  request active on a thread (PD3 §8.2), which is why Redy's asynchrony cannot help it. Commands:
  ``GET``, ``SET k v [NX|XX]``, ``DEL k...``, ``PING``; anything else is a RESP error reply, and a
  malformed request gets ``-ERR Protocol error: ...`` with the thread serving on.
* **Costs.** A request's own processing and its response, on a hit: the profile's
  ``software.garnet_hit_ns`` (500 ns, PD3 Fig. 19's measured "process" + "respond" of Garnet: a
  published measurement, used as a cost).
  Its miss path, whatever the mode, and the reply's datagram are priced by the rack, as for the
  hash map. :class:`StageStats` keeps the Fig. 19 breakdown: hit, consume (CheckAndReturn's CPU),
  request + transfer (a miss's wait for its record).
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import NamedTuple

from workloads.resp import INCOMPLETE, RespError, RespParser, RespProtocolError, SimpleString, encode_command
from workloads.resp import encode_reply as resp_reply

from nodes.systems.api import SystemGaveUp

from . import hashmap as hm
from .client_base import HostAppClient
from .parsers import PORT, resp_key

#: Garnet's default mutable region: the newest 90 % of the in-memory log (``MutablePercent`` 90,
#: FASTER's ``LogSettings.MutableFraction`` 0.9)
MUTABLE_FRACTION = 0.9

OK = SimpleString("OK")


class HybridLogHost(hm.HashMapHost):
    """The in-memory part of the log, as the hash map's cache interface (see the module docstring):
    ``cache`` holds the keys whose latest record is in memory; ``install`` of a fetched record
    does nothing (no read cache); ``touch`` does not reorder."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.log: deque = deque()        # (seq, key) of the records in memory, oldest first
        self.seq_of: dict = {}           # key -> seq of its latest record (in memory or spilled)
        self.tail = 0                    # seq of the next record appended
        self.n.update(in_place=0, appended=0, garbage=0)

    def touch(self, key: int) -> bool:
        return key in self.cache

    def load_cached(self, key: int, value) -> None:
        self._append(key, value)

    def load_cached_records(self, keys: list, value) -> None:
        """:meth:`load_cached` of each of ``keys`` in order: appended to the log at once while they
        all fit in memory (nothing spills, so each append is only its entries), else one by one."""
        if len(self.log) + len(keys) > self.cache_items:
            for k in keys:
                self._append(k, value)
            return
        seqs = range(self.tail, self.tail + len(keys))
        self.cache.update(zip(keys, repeat(value)))
        self.seq_of.update(zip(keys, seqs))
        self.log.extend(zip(seqs, keys))
        self.tail += len(keys)
        self.n["appended"] += len(keys)

    def install(self, key: int, value, *, dirty: bool) -> list:
        if not dirty:
            return []                    # a record read from remote memory stays there
        if key in self.cache and self.seq_of[key] >= self.tail - int(MUTABLE_FRACTION * self.cache_items):
            self.cache[key] = value      # in the mutable region: in place
            self.dirty.add(key)
            self.n["in_place"] += 1
            return []
        self.dirty.add(key)
        return self._append(key, value)

    def _append(self, key: int, value) -> list:
        self.cache[key] = value
        self.seq_of[key] = self.tail
        self.log.append((self.tail, key))
        self.tail += 1
        self.n["appended"] += 1
        out = []
        while len(self.log) > self.cache_items:
            seq, k = self.log.popleft()
            if self.seq_of.get(k) != seq:
                self.n["garbage"] += 1   # a stale version: nothing to write
                continue
            self.leave(k, self.cache.pop(k), out)
        return out


class StageStats(NamedTuple):
    """PD3 Fig. 19's breakdown of GETs on an application thread, as measured in a run."""
    hits: int                 # served from memory
    hit_ns: float             # ... CPU per hit ("process" + "respond")
    consumed: int             # served from the Loading Zone
    consume_ns: float         # ... CheckAndReturn's CPU per item taken
    misses: int               # fetched by the miss path
    fetch_ns: float           # ... mean wait for the record ("request" + "transfer")


class Stages:
    def __init__(self):
        self.n = [0, 0, 0]
        self.ns = [0, 0, 0]

    def add(self, kind: int, ns: int) -> None:
        self.n[kind] += 1
        self.ns[kind] += ns

    def statistics(self) -> StageStats:
        mean = [self.ns[i] / self.n[i] if self.n[i] else 0.0 for i in range(3)]
        return StageStats(self.n[0], mean[0], self.n[1], mean[1], self.n[2], mean[2])


HIT, CONSUME, FETCH = 0, 1, 2


def serve(app, t, dg):
    """One RESP request datagram on application thread ``t`` of ``app`` (a :class:`.system.HostApp`)."""
    hit_ns = app.ctx.profile.software.garnet_hit_ns    # process + respond, PD3 Fig. 19 (measured)
    m = app.map
    m.n["packets"] += 1
    parser = RespParser(max_bulk=max(app.value_max, 4096))
    parser.feed(dg.data)
    try:
        req = parser.next_request()
        if req is INCOMPLETE:
            raise RespProtocolError("the request is cut by the end of the datagram", len(dg.data))
        if parser.pending or parser.open_arrays:   # (an array cut short leaves pending at 0)
            raise RespProtocolError("more than one request in a datagram (one request is active at a time)",
                                    len(dg.data) - parser.pending)
    except RespProtocolError as e:
        m.n["malformed"] += 1
        t.cpu(hit_ns)
        t.sock.send(dg.src_node, dg.src_port, resp_reply(RespError(f"ERR Protocol error: {e}")), thread=t.rt)
        return
    name, args = req
    m.n["requests"] += 1
    t.cpu(app.work_ns)                                 # the network layer's share (work_us), if any
    busy0 = t.busy_ns
    t.cpu(hit_ns)
    evicted: list = []
    if name == "GET" and len(args) == 1:
        key = resp_key(args[0])
        while key in m.fetching:                       # another thread is bringing it in
            yield m.fetching[key]
        if key not in m.live:
            reply = None
        elif m.touch(key) or key in m.flushing:
            m.n["hits"] += 1
            if app.zone is not None:                   # any prefetch of it so far is of no use
                m.floor[key] = max(m.floor.get(key, 0), (app.api.seen + 1) & 0xFFFFFFFF)
            reply = m.cache[key] if key in m.cache else m.flushing[key]
            app.stages.add(HIT, t.busy_ns - busy0)
        else:
            t0, zone0, b0 = app.env.now, t.zone_hits, t.busy_ns
            (reply,) = yield from app.fetch(t, [key])
            if t.zone_hits > zone0:
                app.stages.add(CONSUME, t.busy_ns - b0)
            else:
                app.stages.add(FETCH, app.env.now - t0)
    elif name == "SET" and len(args) in (2, 3):
        key, value = resp_key(args[0]), args[1]
        flag = args[2].upper() if len(args) == 3 else b""
        if flag not in (b"", b"NX", b"XX"):
            reply = RespError("ERR syntax error")
        elif len(value) > app.value_max:
            reply = RespError(f"ERR value of {len(value)} B exceeds the store's {app.value_max} B")
        else:
            while key in m.fetching:
                yield m.fetching[key]
            exists = key in m.live
            if (flag == b"NX" and exists) or (flag == b"XX" and not exists):
                reply = None
            else:
                if not exists:
                    m.live.add(key)
                    m.new_slot(key)
                evicted += m.write(key, bytes(value))
                reply = OK
    elif name == "DEL" and args:
        count = 0
        for raw in args:
            key = resp_key(raw)
            while key in m.fetching:
                yield m.fetching[key]
            if key in m.live:
                m.live.discard(key)
                evicted += m.write(key, None)          # a tombstone, spilled in its time
                count += 1
        reply = count
    elif name == "PING" and len(args) <= 1:
        reply = SimpleString("PONG") if not args else args[0]
    elif name in ("GET", "SET", "DEL", "PING"):
        reply = RespError(f"ERR wrong number of arguments for '{name.lower()}' command")
    else:
        reply = RespError(f"ERR unknown command '{name[:32]}'")
    if m.dropped:
        yield from app.announce(t)
    if evicted:
        # the log's spill goes on in the background, as FASTER flushes a page once the tail leaves it:
        # the request does not wait for it (reads of a spilling record are served from it meanwhile)
        app.env.process(app.write_back(t, evicted, background=True))
    yield from app.announce(t)
    t.sock.send(dg.src_node, dg.src_port, resp_reply(reply), thread=t.rt)


def encode_get(key: bytes) -> bytes:
    return encode_command("GET", key)


def encode_set(key: bytes, value: bytes, flag: str | None = None) -> bytes:
    return encode_command("SET", key, value, *([flag] if flag else []))


def encode_del(key: bytes) -> bytes:
    return encode_command("DEL", key)


# --- the client: a RESP connection per coroutine -------------------------------------------------------------

class GarnetClient(HostAppClient):
    """A client thread's handle on the Garnet-like store: each coroutine is one RESP connection
    (its own reply port) with one request active, sent in a datagram of its own. RESP carries no
    request id, so before each request a connection drops whatever late reply of an earlier one is
    still queued; a reply that comes in after its request was resent and answered is the one case
    left (the rack loses no datagram unless a scenario drops them)."""

    def __init__(self, layout, thread, options):
        super().__init__(layout, thread, options)       # its reply ports: a connection per coroutine
        self.port0 = PORT
        self.requests = 0

    def command(self, co, data: bytes):
        """Send one RESP request, return the reply's value (a RespError is returned, not raised)."""
        from shm.udp import call
        sock, queue = self.endpoint(co)
        while len(queue):
            queue.poll()                               # a late reply of an earlier request
        self.requests += 1
        # the connection's RX queue on the host: a hash of the flow, as RSS
        port = self.port0 + ((self.thread.owner.node * 40503 + sock.port) * 2654435761 >> 16) % self.app_threads
        reply = yield from call(sock, self.server, port, data, queue, timeout_ns=self.timeout_ns, resends=3,
                                thread=self.thread)
        if reply is None:
            raise SystemGaveUp(f"pd3 garnet: no reply from {self.server} after 4 attempts of "
                               f"{self.timeout_ns / 1000:g} us")
        p = RespParser()
        p.feed(reply.data)
        return p.next()

    def _value(self, value: bytes) -> bytes:
        if len(value) > self.value_max:
            raise SystemGaveUp(f"pd3: a {len(value)} B value exceeds system.value_max = {self.value_max}")
        return value

    def get(self, co, key):
        r = yield from self.command(co, encode_get(key))
        return r if isinstance(r, bytes) else None

    def insert(self, co, key, value):
        r = yield from self.command(co, encode_set(key, self._value(value), "NX"))
        return r == OK

    def update(self, co, key, value):
        r = yield from self.command(co, encode_set(key, self._value(value), "XX"))
        return r == OK

    def put(self, co, key, value):
        yield from self.command(co, encode_set(key, self._value(value)))

    def delete(self, co, key):
        r = yield from self.command(co, encode_del(key))
        return r == 1
