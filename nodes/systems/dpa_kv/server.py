"""dpa-kv: a reference service on DPA threads -- clients -> steered UDP -> a DPA thread -> reply.

The smallest complete service of the offload-device roles (docs/devices.md, "Reference services"),
and the pattern DPA-Store builds on: a key-value store whose server is a BlueField-3 DPA.

* **Clients** are *active clients* on the rack's client nodes (``[client]``, ``cl0``..:
  ``System.client_role = "client"``), each with ``[compute]`` threads x coroutines running the
  workloads (YCSB, the checker's stress) and measuring latency at the client; the compute node
  ``dpa.hosts[0]`` is the server's host. An operation is one datagram to that host on UDP port
  ``BASE_PORT + h(key) mod PORTS``, and the reply (``shm.udp.call``: timeout, resends, counted).
  Each coroutine binds a port of its own node for its replies (``UdpNet.bind``), so replies reach
  it in whatever process it runs, and coroutines never take each other's replies.
* **Steering**: the system adds one rule to the host's NIC (``System.steering``): ports
  ``BASE_PORT``..``BASE_PORT + PORTS - 1`` go to ``dpa0``'s thread queues, port ``p`` to thread
  ``(p - BASE_PORT) mod threads``. A key therefore always reaches the same thread, which owns its
  partition of the table alone: no locks, and the store is linearisable per key (each thread
  serves its queue in order).
* **The server** is one actor per DPA thread (``[dpa] threads`` of them) on the DPA node's cores
  (``nodes.devices.dpa_core``). Per request: a doorbell burst of the profile's ``dpa.packet_cycles`` on its core
  (parse, build and post the reply), the probe's loads through the DPA cache model (header and key
  of each slot probed, then the value), and the reply through its own doorbell.
* **The table** lives in the DPA node's memory (its segment: ``[dpa] memory``): ``PORTS``
  partitions of open-addressing slots (linear probing, tombstones on delete), each slot a header
  word (state, key length, value length), the key and the value, of sizes fixed by the options.
* **At most once**: a client resends after a timeout; the thread keeps the last request id and
  reply per client port and answers a repeated request from it instead of executing it again (an
  insert resent after a lost reply must not fail as "exists").

Built on the rack's device roles only, with no host CPU on the data path. One DPA serves
(``dpa0``; further DPAs of a rack idle). Scans are not offered (a hash table).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from nodes.systems.api import KVClient, Option, System, SystemError_
from shm.udp import Requester
from shm.steering import SteerRule

BASE_PORT = 9000
PORTS = 256                     # partitions of the table, each owned by one DPA thread
REPLY_PORT = 20000              # coroutine k of thread t of a node binds REPLY_PORT + t * 64 + k

OP_GET, OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 3, 4
ST_OK, ST_MISSING, ST_EXISTS = 0, 1, 2
EMPTY, USED, TOMBSTONE = 0, 1, 2
_REQ = struct.Struct("<BIB")        # op, request id, key length; then key, then value
_REP = struct.Struct("<BIB")        # op, request id, status; then the value (get)
_HDR = struct.Struct("<BBHI")       # slot: state, key length, value length, unused


def port_of(key: bytes) -> int:
    """The UDP port of ``key``: a fixed 64-bit FNV-1a hash, not Python's (varies between runs)."""
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return BASE_PORT + (h >> 17) % PORTS


def _slot_hash(key: bytes) -> int:
    h = 0x811C9DC5
    for b in key:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


class DpaKvStats(NamedTuple):
    requests: int       # operations this client sent
    resends: int        # requests sent again after a timeout
    timeouts: int       # waits for a reply that ran out


class DpaKvClient(KVClient):
    """The client of one modelled compute thread; every coroutine gets its own reply port."""

    def __init__(self, layout: dict, thread, options: dict):
        self.thread = thread
        self.net = thread.owner.udp
        if self.net is None:
            raise SystemError_("dpa-kv needs the datagram path: a profile with a [udp] table")
        self.server = layout["server"]          # the DPA's host: the NIC that steers to its threads
        self.timeout_ns = int(options["timeout_us"] * 1000)
        self.key_max, self.value_max = int(options["key_max"]), int(options["value_max"])
        self.resends = int(options["resends"])
        self.calls = Requester(self.net, thread, REPLY_PORT, timeout_ns=self.timeout_ns, resends=self.resends)

    def _call(self, co, op: int, key: bytes, value: bytes = b""):
        if len(key) > self.key_max or len(value) > self.value_max:
            raise SystemError_(f"dpa-kv: a key of {len(key)} B and a value of {len(value)} B do not fit a slot "
                               f"(system.key_max = {self.key_max}, system.value_max = {self.value_max})")
        reply = yield from self.calls.request(co, self.server, port_of(key),
                                              lambda rid: _REQ.pack(op, rid, len(key)) + key + value,
                                              lambda data: _REP.unpack_from(data)[1])
        if reply is None:
            raise SystemError_(f"dpa-kv: no reply from the DPA behind {self.server} after "
                               f"{self.resends + 1} attempts of {self.timeout_ns / 1000:g} us")
        _op, _rid, status = _REP.unpack_from(reply.data)
        return status, reply.data[_REP.size:]

    def get(self, co, key):
        status, value = yield from self._call(co, OP_GET, key)
        return value if status == ST_OK else None

    def insert(self, co, key, value):
        status, _ = yield from self._call(co, OP_INSERT, key, value)
        return status == ST_OK

    def update(self, co, key, value):
        status, _ = yield from self._call(co, OP_UPDATE, key, value)
        return status == ST_OK

    def delete(self, co, key):
        status, _ = yield from self._call(co, OP_DELETE, key)
        return status == ST_OK

    def statistics(self) -> DpaKvStats:
        c = self.calls
        return DpaKvStats(c.requests, c.n_resends, c.n_timeouts)


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
        return _HDR.unpack_from(self.mem[a:a + _HDR.size].tobytes())

    def key(self, a: int, n: int) -> bytes:
        o = a + _HDR.size
        return self.mem[o:o + n].tobytes()

    def value(self, a: int, n: int) -> bytes:
        o = a + _HDR.size + self.key_max
        return self.mem[o:o + n].tobytes()

    def write(self, a: int, state: int, key: bytes, value: bytes) -> None:
        self.mem[a:a + _HDR.size] = np.frombuffer(_HDR.pack(state, len(key), len(value), 0), np.uint8)
        o = a + _HDR.size
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
        op, rid, klen = _REQ.unpack_from(dg.data)
        who = (dg.src_node, dg.src_port)
        seen = last.get(who)
        if seen is not None and seen[0] == rid:
            sock.send(dg.src_node, dg.src_port, seen[1])        # a resend: answer it again, do not redo it
            continue
        key = dg.data[_REQ.size:_REQ.size + klen]
        value = dg.data[_REQ.size + klen:]
        status, out = yield from _execute(th, table, dg.dst_port - BASE_PORT, op, key, value)
        reply = _REP.pack(op, rid, status) + out
        last[who] = (rid, reply)
        sock.send(dg.src_node, dg.src_port, reply)


def _execute(th, table: _Table, part: int, op: int, key: bytes, value: bytes):
    """Linear probing in partition ``part``; every slot header and key it reads is a priced load."""
    n = table.slots
    i = _slot_hash(key) % n
    free = None
    for _ in range(n):
        a = table.addr(part, i)
        yield th.load(a, _HDR.size + len(key))
        state, klen, vlen, _ = table.header(a)
        if state == EMPTY:
            break
        if state == TOMBSTONE:
            free = a if free is None else free
        elif klen == len(key) and table.key(a, klen) == key:
            if op == OP_GET:
                yield th.load(a + _HDR.size + table.key_max, vlen)
                return ST_OK, table.value(a, vlen)
            if op == OP_INSERT:
                return ST_EXISTS, b""
            if op == OP_UPDATE:
                yield th.load(a, _HDR.size + table.key_max + len(value), write=True)
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
        raise SystemError_(f"dpa-kv: partition {part} of the table is full ({n} slots); raise "
                           f"system.load_factor's room or [dpa] memory")
    yield th.load(a, _HDR.size + table.key_max + len(value), write=True)
    table.write(a, USED, key, value)
    return ST_OK, b""


class DpaKvSystem(System):
    name = "dpa-kv"
    description = ("reference service: a key-value table in DPA memory served by DPA threads over "
                   "steered UDP (clients -> host NIC -> a DPA thread per port -> reply)")
    paper = "dmrack reference service for the device roles (the DPA-Store pattern, Ni et al.)"
    roles = ("compute", "client")
    client_role = "client"              # active clients on cl0..: the compute node is the DPA's host
    options = (
        Option("key_max", 64, "largest key in bytes (a slot's key field)", minimum=1, maximum=255),
        Option("value_max", 1024, "largest value in bytes (a slot's value field; a request must fit one datagram)",
               minimum=1, maximum=1400),
        Option("load_factor", 0.5, "keys per slot the table is sized for", minimum=0.05, maximum=0.95),
        Option("timeout_us", 100.0, "a client's wait for a reply before it sends again (virtual us)",
               minimum=0.1, maximum=1e6),
        Option("resends", 3, "times a client sends a request again before it gives up", minimum=0, maximum=100),
    )
    servers = {"dpa": dpa_server}
    rack_tables = {"rack": {"profile": "bf3"}, "dpa": {"hosts": ["cn0"], "threads": 4, "memory": "32MiB"},
                   "client": {"count": 2}}

    @classmethod
    def steering(cls, spec):
        """The host's NIC steers the service's ports to the DPA's threads (one port, one thread)."""
        if not spec.dpa.hosts:
            return []
        return [SteerRule(BASE_PORT, "dpa0", port_hi=BASE_PORT + PORTS - 1, spread="port", node=spec.dpa.hosts[0])]

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        return 0                        # nothing on memory nodes: the table is in DPA memory

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        names = [n.name for n in fabric.nodes]
        if "dpa0" not in names:
            raise SystemError_("dpa-kv needs a DPA: give the rack dpa.hosts = [\"cn0\"] (and rack.profile = \"bf3\")")
        dpa = names.index("dpa0")
        slots = max(8, -(-int(capacity / options["load_factor"]) // PORTS))
        slot_bytes = -(-(_HDR.size + options["key_max"] + options["value_max"]) // 8) * 8
        need = PORTS * slots * slot_bytes
        have = fabric.nodes[dpa].memory_bytes
        if need > have - 4096:
            raise SystemError_(f"dpa-kv: a table for {capacity:,} keys needs {need / 2**20:.1f} MiB of DPA memory "
                               f"(slots of {slot_bytes} B at load factor {options['load_factor']}); dpa0 has "
                               f"{have / 2**20:.1f} MiB: raise dpa.memory or lower value_max or the key count")
        table = fabric.allocate(dpa, need)
        return {"dpa": "dpa0", "server": fabric.nodes[dpa].nic_of, "table": table, "slots": slots,
                "slot_bytes": slot_bytes, "key_max": options["key_max"]}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return DpaKvClient(layout, thread, options)
