"""dpa-kv's server: the table in the DPA's memory and one actor per DPA thread serving it.

* **The server** is one actor per DPA thread (``[dpa] threads`` of them) on the DPA node's cores
  (``nodes.devices.dpa_core``). Per request: a doorbell burst of the profile's ``dpa.packet_cycles`` on its core
  (parse, build and post the reply), the probe's loads through the DPA cache model (header and key
  of each slot probed, then the value), and the reply through its own doorbell.
* **The table** lives in the DPA node's memory (its segment: ``[dpa] memory``): ``PORTS``
  partitions of open-addressing slots (linear probing, tombstones on delete), each slot a header
  word (state, key length, value length), the key and the value, of sizes fixed by the options.
  A port's partition is served by one thread alone: no locks.
* **At most once**: the thread keeps the last request id and reply per client port and answers a
  repeated request from it instead of executing it again (an insert resent after a lost reply
  must not fail as "exists").
"""

from __future__ import annotations

import struct

import numpy as np

from nodes.systems.api import SystemGaveUp

from .wire import BASE_PORT, OP_GET, OP_INSERT, OP_UPDATE, REP, REQ, ST_EXISTS, ST_MISSING, ST_OK

EMPTY, USED, TOMBSTONE = 0, 1, 2
#: a slot's header: state, key length, value length, unused
SLOT_HEADER = struct.Struct("<BBHI")


def _slot_hash(key: bytes) -> int:
    h = 0x811C9DC5
    for b in key:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


class _Table:
    """Partition ``part`` of the table in the DPA node's memory (host bytes of its segment)."""

    def __init__(self, mem: np.ndarray, layout: dict):
        self.mem = mem
        self.base = layout["table"]
        self.slots = layout["slots"]
        self.slot_bytes = layout["slot_bytes"]
        self.key_max = layout["key_max"]

    def addr(self, part: int, i: int) -> int:
        return self.base + (part * self.slots + i) * self.slot_bytes

    def header(self, a: int):
        return SLOT_HEADER.unpack_from(self.mem[a:a + SLOT_HEADER.size].tobytes())

    def key(self, a: int, n: int) -> bytes:
        o = a + SLOT_HEADER.size
        return self.mem[o:o + n].tobytes()

    def value(self, a: int, n: int) -> bytes:
        o = a + SLOT_HEADER.size + self.key_max
        return self.mem[o:o + n].tobytes()

    def write(self, a: int, state: int, key: bytes, value: bytes) -> None:
        self.mem[a:a + SLOT_HEADER.size] = np.frombuffer(SLOT_HEADER.pack(state, len(key), len(value), 0), np.uint8)
        o = a + SLOT_HEADER.size
        self.mem[o:o + len(key)] = np.frombuffer(key, np.uint8)
        o += self.key_max
        self.mem[o:o + len(value)] = np.frombuffer(value, np.uint8)

    def mark(self, a: int, state: int) -> None:
        self.mem[a] = state


def dpa_server(ctx):
    """Server actors of a DPA node (``System.servers["dpa"]``): one per hardware thread."""
    layout = ctx.layout
    if ctx.name != layout["dpa"]:
        return []                       # one DPA serves; a rack's other DPAs idle
    table = _Table(ctx.memory.host, layout)
    queues = [q for q in ctx.queues if q.id.startswith(f"{ctx.name}.t")]
    queues.sort(key=lambda q: int(q.id.rsplit(".t", 1)[1]))
    from shm.verbs import Context
    verbs = Context(ctx.host, ctx.index, low_latency=0, doorbells=len(queues))  # a doorbell per thread
    return [_serve(ctx, ctx.dpa.thread(), q, ctx.udp.socket(ctx.index, BASE_PORT, context=verbs), table)
            for q in queues]


def _serve(ctx, th, queue, sock, table: _Table):
    """One DPA thread: take a request, execute it on its partitions, reply; at most once per request."""
    # the DPA model's packet-handling assumption (as the UDP ping of `dmrack bench devices`): parse,
    # probe and post the reply; the probe's loads are priced on top
    cycles_ns = round(ctx.profile.dpa.packet_cycles / ctx.profile.dpa.ghz)
    last: dict = {}                     # (client node, client port) -> (request id, reply)
    while True:
        ev = queue.wait()
        yield ev
        dg = queue.poll()
        if dg is None:
            continue
        yield th.compute(cycles_ns, doorbell=True)
        op, rid, klen = REQ.unpack_from(dg.data)
        who = (dg.src_node, dg.src_port)
        seen = last.get(who)
        if seen is not None and seen[0] == rid:
            sock.send(dg.src_node, dg.src_port, seen[1])        # a resend: answer it again, do not redo it
            continue
        key = dg.data[REQ.size:REQ.size + klen]
        value = dg.data[REQ.size + klen:]
        status, out = yield from _execute(th, table, dg.dst_port - BASE_PORT, op, key, value)
        reply = REP.pack(op, rid, status) + out
        last[who] = (rid, reply)
        sock.send(dg.src_node, dg.src_port, reply)


def _execute(th, table: _Table, part: int, op: int, key: bytes, value: bytes):
    """Linear probing in partition ``part``; every slot header and key it reads is a priced load."""
    n = table.slots
    i = _slot_hash(key) % n
    free = None
    for _ in range(n):
        a = table.addr(part, i)
        yield th.load(a, SLOT_HEADER.size + len(key))
        state, klen, vlen, _ = table.header(a)
        if state == EMPTY:
            break
        if state == TOMBSTONE:
            free = a if free is None else free
        elif klen == len(key) and table.key(a, klen) == key:
            if op == OP_GET:
                yield th.load(a + SLOT_HEADER.size + table.key_max, vlen)
                return ST_OK, table.value(a, vlen)
            if op == OP_INSERT:
                return ST_EXISTS, b""
            if op == OP_UPDATE:
                yield th.load(a, SLOT_HEADER.size + table.key_max + len(value), write=True)
                table.write(a, USED, key, value)
                return ST_OK, b""
            yield th.load(a, 1, write=True)                      # delete: a tombstone
            table.mark(a, TOMBSTONE)
            return ST_OK, b""
        i = (i + 1) % n
    else:
        a = None                        # every slot probed: no empty one
    if op != OP_INSERT:
        return ST_MISSING, b""
    a = free if free is not None else a
    if a is None:
        raise SystemGaveUp(f"dpa-kv: partition {part} of the table is full ({n} slots); raise "
                           f"system.load_factor's room or [dpa] memory")
    yield th.load(a, SLOT_HEADER.size + table.key_max + len(value), write=True)
    table.write(a, USED, key, value)
    return ST_OK, b""
