"""An unreliable datagram path for UDP-style services: RX queues, steering and mirror rules, resends.

What it models (issue 22, items 4 and 5 at the fabric level; node roles and client processes come
later):

* **Datagrams** of at most ``udp.mtu_bytes - 28`` bytes of payload (an IP packet of the profile's
  MTU, 1500 B on Ethernet, less the IPv4 and UDP headers), sent by a :class:`UdpSocket` on one node
  to ``(node, port)`` or straight to a named queue. A larger one is refused with
  :data:`UDP_TOO_BIG` and nothing is sent.
* **Pricing: a UD SEND.** Each socket owns a verbs UD QP (``shm/verbs.py``) and a datagram is priced
  by the same call of the NIC model as a UD SEND of ``payload + 28`` bytes
  (:func:`shm.nic.model_post_rows`, opcode ``VERB_SEND_UD``): the sender's CPU (post, WQE, doorbell),
  its PCIe and requester unit, the egress link, the wire, the receiver's ingress link, responder
  unit and PCIe. The datagram is in its RX ring at the UD SEND's effect time; the send never waits
  for it (no acknowledgement, as UD and UDP). Reusing the one pricing function keeps the two paths
  identical and leaves every existing verb's timing unchanged (nothing in ``shm/nic.py`` changed).
* **RX queues** (:class:`RxQueue`): a ring of ``depth`` datagrams (default ``udp.rx_depth``); a
  datagram arriving at a full ring is **dropped and counted**, never blocks the sender and never
  raises. Receivers ``poll()`` (one ``cpu.poll_ns``, as a CQ poll) or ``yield q.wait(timeout_ns)``,
  an event that fires when a datagram is there or at the timeout, in virtual time.
* **Steering** (:class:`SteerRule`, declared in ``shm/steering.py``, item 5): per destination
  node, an ordered list of plain-data rules mapping a destination port or an inclusive port range
  to a target queue id, or to several (a flow hash of source node, source port and destination
  port picks one, as RSS does). The first rule that matches wins; a datagram no rule matches is
  dropped and counted ``unsteered``. Targets are queue ids (today host queues; a DPA thread's or
  DPU's queue later is a queue id too); an unknown target is refused with one line naming it.
* **Mirroring**: a rule's ``mirror`` names a second queue that receives a copy of every matching
  datagram while the original still reaches the primary target (PD3 mirrors client packets to the
  DPU). ASSUMPTION (no published figure): the NIC's switch replicates the packet after the
  receiver's ingress, so the copy costs no second wire crossing but a second pass through a
  responder unit (``nic.resp_recv_ns``) and its own PCIe write of the payload at the receiving
  node, booked on that node's calendars: the copy lands after the original, and copies contend
  with everything else the NIC serves.
* **Request/response with timeout and resends** (:func:`call`): ``reply = yield from call(...)``
  from any server actor or coroutine sends a request, waits for a matching reply up to ``timeout_ns``,
  resends up to ``resends`` times, and counts timeouts and resends.

:meth:`UdpNet.statistics` is an immutable record (:class:`UdpStats`) of sent, received, dropped and
the rest. Not built yet: datagrams between processes of a rack (every queue of a net lives in the
process that made it; a datagram to a queue elsewhere is refused), IP fragmentation (refused as
too big), checksum or loss models on the wire (drops happen only at full rings and unmatched ports).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, NamedTuple

import numpy as np

from shm import nic
from shm.calendar import reserve
from shm.fabric import REGION_HOST
from shm.steering import SteerRule   # re-exported: the one steering-rule type lives in a leaf
from shm.verbs import CQ, IBV_QPT_UD, PD, QP, Context, QPInitAttr, VerbsHost

__all__ = [
    "UdpNet", "UdpSocket", "RxQueue", "SteerRule", "Datagram", "UdpStats", "RxQueueStats", "UdpError", "call",
    "call_all",
    "ReplyPorts", "Requester", "Attempts",
    "UDP_OK", "UDP_TOO_BIG", "IP_UDP_HEADER_BYTES",
]

#: IPv4 (20 B, RFC 791) + UDP (8 B, RFC 768) headers: they travel with the payload and count toward the MTU
IP_UDP_HEADER_BYTES = 28

UDP_OK = 0
UDP_TOO_BIG = 1          # payload over udp.mtu_bytes - 28: nothing sent

_PS = 1000
#: slots of a node's staging ring for datagrams to other processes (see UdpNet._stage): a slot is
#: reused after this many later sends of that node, long after its datagram was read
STAGING_SLOTS = 64


class UdpError(ValueError):
    """Bad input to the datagram path (an unknown queue, a bad rule): one line naming it."""


class Datagram(NamedTuple):
    src_node: int
    src_port: int
    dst_node: int
    dst_port: int
    data: bytes
    sent_ns: int         # when the sender posted it
    arrived_ns: int      # when it landed in the queue
    queue: str           # the queue it landed in
    mirrored: bool = False   # a mirror copy


class UdpStats(NamedTuple):
    sent: int            # datagrams put on the wire
    received: int        # datagrams placed in a queue (mirror copies included)
    dropped: int         # arrived at a full queue
    too_big: int         # refused at the sender: payload over the MTU
    unsteered: int       # no rule of the destination node matched the port
    mirrored: int        # mirror copies placed
    timeouts: int        # call(): waits for a reply that ran out
    resends: int         # call(): requests sent again after a timeout


class RxQueueStats(NamedTuple):
    received: int
    dropped: int
    depth: int
    queued: int


def _flow_hash(src_node: int, src_port: int, dst_port: int) -> int:
    """A fixed integer mix (not Python's hash, which varies between runs for strings)."""
    h = (src_node * 0x9E3779B1 + src_port * 0x85EBCA77 + dst_port * 0xC2B2AE3D) & 0xFFFFFFFF
    h ^= h >> 15
    return (h * 0x2C1B3C6D) & 0xFFFFFFFF


class RxQueue:
    """A receive ring of ``depth`` datagrams on ``node``, named ``qid`` (unique in its net)."""

    def __init__(self, net: "UdpNet", node: int, qid: str, depth: int):
        self.net = net
        self.env = net.env
        self.node = node
        self.id = qid
        self.depth = depth
        self._ring: deque[Datagram] = deque()
        self._waiters: list = []
        self.received = self.dropped = 0

    def __len__(self) -> int:
        return len(self._ring)

    def _land(self, dg: Datagram) -> bool:
        if len(self._ring) >= self.depth:
            self.dropped += 1
            self.net._dropped += 1
            return False
        self._ring.append(dg)
        self.received += 1
        self.net._received += 1
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for ev in waiters:
                if not ev.triggered:
                    ev.succeed(True)
        return True

    def poll(self) -> Datagram | None:
        """The oldest datagram, or None; charges one ``cpu.poll_ns`` to the calling process."""
        env = self.env
        if env.active_process is not None:
            env.charge(self.net.profile.cpu.poll_ns)
        return self._ring.popleft() if self._ring else None

    def poll_burst(self, max_n: int) -> list:
        """Up to ``max_n`` of the oldest datagrams (maybe none) for one ``cpu.poll_ns``: a burst
        receive, as DPDK's ``rte_eth_rx_burst`` takes what the ring holds in one call, so a busy
        poller pays the poll once per burst rather than once per datagram."""
        if max_n < 1:
            raise UdpError(f"queue {self.id!r}: a burst of {max_n} datagrams")
        env = self.env
        if env.active_process is not None:
            env.charge(self.net.profile.cpu.poll_ns)
        ring = self._ring
        return [ring.popleft() for _ in range(min(max_n, len(ring)))]

    def wait(self, timeout_ns: int | None = None):
        """An event that fires with True once a datagram is queued (at once if one is), or with
        False ``timeout_ns`` from now if none came."""
        ev = self.env.event()
        if self._ring:
            ev.succeed(True)
            return ev
        self._waiters.append(ev)
        if timeout_ns is not None:
            if timeout_ns < 0:
                raise UdpError(f"queue {self.id!r}: negative timeout {timeout_ns}")
            self.env.schedule(self.env.now + timeout_ns, self._expire, ev)
        return ev

    def _expire(self, ev) -> None:
        if not ev.triggered:
            self._waiters = [w for w in self._waiters if w is not ev]
            ev.succeed(False)

    def statistics(self) -> RxQueueStats:
        return RxQueueStats(self.received, self.dropped, self.depth, len(self._ring))


class UdpNet:
    """The datagram path of one process's fabric: its queues, every node's steering rules, stats."""

    def __init__(self, host: VerbsHost):
        self.host = host
        self.env = host.env
        self.fabric = host.fabric
        self.profile = host.fabric.profile
        if self.profile.udp is None:
            raise UdpError(f"profile {self.profile.name!r} has no [udp] table (udp.mtu_bytes, udp.rx_depth)")
        self.max_payload = self.profile.udp.mtu_bytes - IP_UDP_HEADER_BYTES
        self.queues: dict[str, RxQueue] = {}
        self.rules: dict[int, tuple[SteerRule, ...]] = {}
        self.bound: dict[tuple[int, int], str] = {}      # (node, port) -> queue id (bind())
        self._names = {nd.name: i for i, nd in enumerate(self.fabric.nodes)}
        self._staging: dict[int, list] = {}              # node -> [base, next slot] (remote sends)
        self._contexts: dict[int, tuple[Context, PD, CQ]] = {}
        self._sent = self._received = self._dropped = self._too_big = 0
        self._unsteered = self._mirrored = self._timeouts = self._resends = 0
        self._overrun = 0

    # -- set-up ---------------------------------------------------------------------------------
    def add_queue(self, node, qid: str, depth: int | None = None) -> RxQueue:
        n = self.fabric.node_index(node)
        if not isinstance(qid, str) or not qid:
            raise UdpError(f"a queue id must be a non-empty string, got {qid!r}")
        if qid in self.queues:
            raise UdpError(f"queue {qid!r} already exists")
        depth = self.profile.udp.rx_depth if depth is None else depth
        if type(depth) is not int or depth < 1:
            raise UdpError(f"queue {qid!r}: depth must be an integer >= 1, got {depth!r}")
        q = self.queues[qid] = RxQueue(self, n, qid, depth)
        return q

    def set_rules(self, node, rules) -> None:
        """Replace the steering rules of ``node`` (a list of :class:`SteerRule`, first match wins);
        checked whole before any is used, so a bad list changes nothing."""
        n = self.fabric.node_index(node)
        name = self.fabric.nodes[n].name
        rules = tuple(rules)
        for i, r in enumerate(rules):
            where = f"steering rule {i} of node {name!r}"
            if not isinstance(r, SteerRule):
                raise UdpError(f"{where}: expected a SteerRule, got {type(r).__name__}")
            hi = r.port if r.port_hi is None else r.port_hi
            if not (type(r.port) is int and type(hi) is int and 0 <= r.port <= hi <= 65535):
                raise UdpError(f"{where}: ports must satisfy 0 <= port <= port_hi <= 65535, got {r.port}..{hi}")
            targets = r.targets()
            if not targets:
                raise UdpError(f"{where}: no target queue")
            if r.node is not None and r.node != name:
                raise UdpError(f"{where}: the rule is for node {r.node!r}")
            if r.spread not in ("flow", "port"):
                raise UdpError(f"{where}: spread must be 'flow' or 'port', got {r.spread!r}")
            for t in (*targets, *((r.mirror,) if r.mirror is not None else ())):
                if t not in self.queues and not self._remote_queue(t):
                    raise UdpError(f"{where}: unknown target queue {t!r}")
        self.rules[n] = rules

    def _remote_queue(self, qid) -> bool:
        """A queue of a node another process runs (named ``<node>.<name>``): that process owns it,
        and a datagram steered to it is delivered there (a queue it lacks counts as unsteered)."""
        if not isinstance(qid, str) or "." not in qid:
            return False
        owner = qid.split(".", 1)[0]
        return owner in self._names and not self.host.is_local(self._names[owner])

    def bind(self, node, port: int, depth: int | None = None) -> RxQueue:
        """A queue ``<node>.p<port>`` for datagrams to ``(node, port)`` that no steering rule of
        ``node`` matches: a socket bound to a port, as UDP's bind(). Replies to a client's port
        land in its bound queue, in whatever process the client runs."""
        n = self.fabric.node_index(node)
        if type(port) is not int or not 0 <= port <= 65535:
            raise UdpError(f"UDP port must be an integer 0..65535, got {port!r}")
        if (n, port) in self.bound:
            raise UdpError(f"port {port} of node {self.fabric.nodes[n].name!r} is already bound")
        q = self.add_queue(n, f"{self.fabric.nodes[n].name}.p{port}", depth)
        self.bound[(n, port)] = q.id
        return q

    def socket(self, node, port: int, *, context: Context | None = None) -> "UdpSocket":
        """A socket on ``node``. By default the sockets of one node share one verbs context, so their
        QPs share its 16 doorbells (and their locks, as threads of one host process do). ``context``:
        a verbs :class:`Context` on ``node`` to make this socket's QP in instead, e.g. one with a
        doorbell per device thread (``Context(host, node, low_latency=0, doorbells=n)``, SMART's
        thread-aware allocation) for DPA threads that each ring their own."""
        n = self.fabric.node_index(node)
        if type(port) is not int or not 0 <= port <= 65535:
            raise UdpError(f"UDP port must be an integer 0..65535, got {port!r}")
        if context is not None:
            if context.node != n:
                raise UdpError(f"socket on node {self.fabric.nodes[n].name!r}: its context is on node "
                               f"{self.fabric.nodes[context.node].name!r}")
            pd = PD(context)
            return UdpSocket(self, n, port, (context, pd, CQ(context)))
        if n not in self._contexts:
            ctx = Context(self.host, n)
            self._contexts[n] = (ctx, PD(ctx), CQ(ctx))
        return UdpSocket(self, n, port)

    # -- the path -------------------------------------------------------------------------------
    def _steer(self, dg: Datagram) -> tuple[str | None, str | None]:
        for r in self.rules.get(dg.dst_node, ()):
            if r.matches(dg.dst_port):
                targets = r.targets()
                if len(targets) == 1:
                    t = targets[0]
                elif r.spread == "port":
                    t = targets[(dg.dst_port - r.port) % len(targets)]
                else:
                    t = targets[_flow_hash(dg.src_node, dg.src_port, dg.dst_port) % len(targets)]
                return t, r.mirror
        bound = self.bound.get((dg.dst_node, dg.dst_port))
        return (bound, None) if bound is not None else (None, None)

    def _arrive(self, dg: Datagram, qid: str | None) -> None:
        """The datagram reached its node's NIC (the UD SEND's effect time): steer, mirror, land."""
        now = self.env.now
        mirror = None
        if qid is None:
            qid, mirror = self._steer(dg)
            if qid is None:
                self._unsteered += 1
                return
        q = self.queues.get(qid)
        if q is None:
            self._unsteered += 1         # steered to a queue nobody made (a remote process's check)
            return
        q._land(dg._replace(arrived_ns=now, queue=qid))
        if mirror is not None:
            # the copy: a second responder-unit pass and its own PCIe write at the receiving node
            prm = self.fabric.params
            desc = self.fabric.descriptors[dg.dst_node]
            tbl = self.fabric.table
            t = reserve(tbl, desc[nic.D_RESP], now * _PS, int(prm[nic.P_RESP_COST + nic.VERB_SEND_UD]))
            nbytes = len(dg.data) + IP_UDP_HEADER_BYTES
            cost = (int(prm[nic.P_PCIE_RESP_B_PER_WR]) * int(prm[nic.P_PCIE_FS_PER_B])
                    + nbytes * int(prm[nic.P_PCIE_PAYLOAD_FS_PER_B])) // 1000
            t = reserve(tbl, desc[nic.D_PCIE], t, cost) + int(prm[nic.P_PCIE_LAT])
            at = (t + _PS - 1) // _PS
            owner = self._owner(mirror)
            if owner is None or self.host.is_local(owner):
                self.env.schedule(at, self._land_copy, (dg, mirror))
            else:
                self._ship(owner, at, dg, copy=True, stage_on=q.node)

    def _land_copy(self, arg) -> None:
        dg, qid = arg
        q = self.queues.get(qid)
        if q is None:
            self._unsteered += 1
            return
        if q._land(dg._replace(arrived_ns=self.env.now, queue=qid, mirrored=True)):
            self._mirrored += 1

    # -- between processes ---------------------------------------------------------------------
    def _owner(self, qid: str) -> int | None:
        """The node that owns queue ``qid``: its own, or the ``<node>.`` prefix of its name."""
        q = self.queues.get(qid)
        if q is not None:
            return q.node
        return self._names.get(qid.split(".", 1)[0]) if "." in qid else None

    def _stage(self, dg: Datagram, node: int) -> tuple[int, int]:
        """Put ``dg.data`` in a slot of ``node``'s staging ring (the sender's own memory, where a NIC
        would DMA the payload from; for a mirror copy, the node that received the original) for the
        receiving process to copy at arrival; returns the slot's
        offset and the sequence number written at its head, which the receiver checks (a slot
        reused before its datagram was read is an overrun, counted and dropped)."""
        slot_bytes = 8 + ((self.max_payload + 7) // 8) * 8
        st = self._staging.get(node)
        if st is None:
            st = self._staging[node] = [self.fabric.allocate(node, STAGING_SLOTS * slot_bytes), 0]
        seq = st[1]
        st[1] += 1
        off = st[0] + (seq % STAGING_SLOTS) * slot_bytes
        mem = self.fabric.memory[node].host
        mem[off:off + 8] = np.frombuffer(np.int64(seq + 1).tobytes(), np.uint8)
        mem[off + 8:off + 8 + len(dg.data)] = np.frombuffer(dg.data, np.uint8)
        return off, seq + 1

    def _ship(self, node: int, at: int, dg: Datagram, *, copy: bool = False, stage_on: int | None = None) -> None:
        proc = self.host.proc_of_node[node]
        if proc < 0:                     # a node without a process clock (a passive memory node)
            self._unsteered += 1
            return
        holder = dg.src_node if stage_on is None else stage_on
        off, seq = self._stage(dg, holder)
        nodes = (holder << 32) | (dg.src_node << 16) | dg.dst_node
        ports = (dg.src_port << 16) | dg.dst_port
        from shm.sim.router import MSG_UDP, MSG_UDP_COPY
        self.host.env.send(proc, at, (MSG_UDP_COPY if copy else MSG_UDP, nodes, ports, off, seq, len(dg.data),
                                      dg.sent_ns))

    def deliver(self, kind_copy: bool, payload) -> None:
        """A datagram from another process reached this one (``shm.sim.router``): read its
        payload from the sender's staging slot, then steer and land it as a local one."""
        nodes, ports, off, seq, length, sent = (int(x) for x in payload)
        holder, src, dst = nodes >> 32, (nodes >> 16) & 0xFFFF, nodes & 0xFFFF
        sport, dport = ports >> 16, ports & 0xFFFF
        mem = self.fabric.memory[holder].host
        if int(np.frombuffer(mem[off:off + 8].tobytes(), np.int64)[0]) != seq:
            self._overrun += 1
            self._dropped += 1
            return
        dg = Datagram(src, sport, dst, dport, bytes(mem[off + 8:off + 8 + length]), sent, -1, "")
        if not kind_copy:
            self._arrive(dg, None)
            return
        _qid, mirror = self._steer(dg)
        if mirror is None:
            self._unsteered += 1
            return
        self._land_copy((dg, mirror))

    def statistics(self) -> UdpStats:
        return UdpStats(self._sent, self._received, self._dropped, self._too_big, self._unsteered,
                        self._mirrored, self._timeouts, self._resends)


class UdpSocket:
    """A UDP endpoint on ``node`` with source port ``port``; owns one UD QP for the NIC model."""

    def __init__(self, net: UdpNet, node: int, port: int, context=None):
        self.net = net
        self.env = net.env
        self.node = node
        self.port = port
        ctx, pd, cq = context if context is not None else net._contexts[node]
        self.qp = QP(pd, QPInitAttr(qp_type=IBV_QPT_UD, scq=cq))
        self._rows = np.zeros((1, 8), np.int64)   # the columns of nic.model_post_rows

    def send(self, dst_node, dst_port: int = 0, data: bytes = b"", *, queue: str | None = None,
             thread=None) -> int:
        """Send ``data`` to ``(dst_node, dst_port)`` through that node's steering rules, or with
        ``queue`` straight to that queue (no steering, no mirror). Returns :data:`UDP_OK` or
        :data:`UDP_TOO_BIG`; never waits for the datagram to arrive.

        ``thread``: the modelled CPU thread whose core the post runs on (a ``shm.coro.RdmaThread``,
        or anything with a ``cpu_free`` ns): coroutines of one thread then share its core, as
        their verbs do. Without it the calling process is its own core."""
        net = self.net
        data = bytes(data)
        if len(data) > net.max_payload:
            net._too_big += 1
            return UDP_TOO_BIG
        dst = net.fabric.node_index(dst_node)
        if type(dst_port) is not int or not 0 <= dst_port <= 65535:
            raise UdpError(f"UDP port must be an integer 0..65535, got {dst_port!r}")
        if queue is not None:
            q = net.queues.get(queue)
            if q is None:
                raise UdpError(f"unknown target queue {queue!r}")
            if q.node != dst:
                raise UdpError(f"queue {queue!r} is on node {net.fabric.nodes[q.node].name!r}, "
                               f"not {net.fabric.nodes[dst].name!r}")
        host = net.host
        if queue is not None and not host.is_local(dst):
            raise UdpError(f"queue {queue!r}: a datagram to a named queue of another process is not possible; "
                           f"send to its node and port (steering or a bound port picks the queue)")
        rows = self._rows
        rows[0, :] = 0
        rows[0, 0] = nic.VERB_SEND_UD
        rows[0, 1] = len(data) + IP_UDP_HEADER_BYTES
        rows[0, 3] = REGION_HOST
        sent = self.env.now
        if thread is None:             # the UD SEND's price: CPU, PCIe, units, links (shm/nic.py)
            self.qp.model_post(dst, rows)
        else:
            self.qp.model_post(dst, rows, thread.cpu_free, thread)
            thread.cpu_free = self.qp.cpu_free
        effect, done = int(rows[0, 5]), int(rows[0, 6])
        net._sent += 1
        dg = Datagram(self.node, self.port, dst, dst_port, data, sent, -1, "")
        owner = dst
        if queue is None and host.proc_of_node is not None:
            qid, _mirror = net._steer(dg)       # the rules are the rack's, the same in every process
            owner = net._owner(qid) if qid is not None else dst
            owner = dst if owner is None else owner
        if host.is_local(owner):
            self.env.schedule(effect, net._arrive, dg, queue)
        else:
            net._ship(owner, effect, dg)
        self.env.schedule(done, _retire, (net.fabric, self.qp.ctx.desc))
        return UDP_OK


def _retire(arg) -> None:
    fabric, desc = arg
    nic.retire(fabric.table, desc, 1)   # the WQE leaves the NIC's cache at its completion, as a verb's


class ReplyPorts:
    """A client thread's reply endpoints, one per coroutine: the ``k``-th coroutine to ask gets port
    ``base + thread.index x stride + k`` on the thread's node, its socket and its bound RX queue, so
    replies to requests in flight never mix (a client that matches replies by request id could share
    a port; one that cannot, as RESP's, must not). ``ports(co) -> (socket, queue)``."""

    def __init__(self, net: "UdpNet", thread, base: int, stride: int):
        self.net, self.thread, self.base, self.stride = net, thread, base, stride
        self._eps: dict = {}

    def __call__(self, co):
        ep = self._eps.get(id(co))
        if ep is None:
            k = len(self._eps)
            if k >= self.stride:
                raise UdpError(f"thread {self.thread.index} has more than {self.stride} coroutines with reply ports")
            port = self.base + self.thread.index * self.stride + k
            node = self.thread.owner.node
            ep = self._eps[id(co)] = (self.net.socket(node, port), self.net.bind(node, port))
        return ep

    def __len__(self) -> int:
        return len(self._eps)


class Attempts:
    """One :func:`call`'s own sends, counted through its ``on_send`` (the net's counters, read
    around a call, mix in every other caller's during the wait), each passed on to ``then``."""

    __slots__ = ("sent", "_then")

    def __init__(self, then: Callable[[int], None] | None = None):
        self.sent = 0
        self._then = then

    def __call__(self, attempt: int) -> None:
        self.sent = attempt + 1
        if self._then is not None:
            self._then(attempt)

    @property
    def resends(self) -> int:
        return self.sent - 1

    def timeouts(self, replied: bool) -> int:
        """Waits that ran out: every send but the one answered."""
        return self.sent - (1 if replied else 0)


class Requester:
    """A client thread's request/response over datagrams (dpa-kv's and dpa-store's clients): a
    request id per request, a reply port per coroutine (:class:`ReplyPorts`), and the resends and
    timeouts of its own calls counted (its own attempts: the net's counters, read around a call,
    would also count every other coroutine's timeouts during the wait)."""

    def __init__(self, net: "UdpNet", thread, reply_base: int, *, timeout_ns: int, resends: int):
        self.net, self.thread = net, thread
        self.endpoint = ReplyPorts(net, thread, reply_base, 64)
        self.timeout_ns, self.resends = timeout_ns, resends
        self._rid = 0
        self.requests = self.n_resends = self.n_timeouts = 0

    def request(self, co, dst_node, dst_port: int, make: Callable[[int], bytes], rid_of: Callable[[bytes], int],
                on_send: Callable[[int], None] | None = None):
        """``reply = yield from requester.request(co, node, port, make, rid_of)``: sends ``make(rid)``
        and returns the first reply whose ``rid_of(data)`` is ``rid``, or None after every attempt.
        ``on_send``: as in :func:`call`."""
        sock, queue = self.endpoint(co)
        self._rid = (self._rid + 1) & 0xFFFFFFFF
        rid = self._rid
        self.requests += 1
        sends = Attempts(on_send)
        reply = yield from call(sock, dst_node, dst_port, make(rid), queue, timeout_ns=self.timeout_ns,
                                resends=self.resends, match=lambda dg: rid_of(dg.data) == rid, thread=self.thread,
                                on_send=sends)
        self.n_resends += sends.resends
        self.n_timeouts += sends.timeouts(reply is not None)
        return reply


def call(sock: UdpSocket, dst_node, dst_port: int, data: bytes, reply_queue: RxQueue, *, timeout_ns: int,
         resends: int = 3, match: Callable[[Datagram], bool] | None = None, queue: str | None = None,
         thread=None, on_send: Callable[[int], None] | None = None):
    """Request/response over datagrams, for actors and coroutines: ``reply = yield from call(...)``.

    Sends ``data``, waits up to ``timeout_ns`` for a datagram in ``reply_queue`` that ``match``
    accepts (others are consumed and skipped: stale replies of earlier requests), and sends again
    up to ``resends`` times. Returns the reply, or None when every attempt timed out. Each wait
    that runs out counts one timeout, each repeated send one resend (``UdpNet.statistics``).
    ``thread``: as in :meth:`UdpSocket.send`, for coroutines of a ``shm.coro`` thread.
    ``on_send(attempt)`` is called before each send (0 the first, 1 the first resend, ...): how a
    caller learns that its own request was resent (the net's counters mix every caller's)."""
    replies, _sends = yield from call_all(sock, [(dst_node, dst_port, data, True)], reply_queue, timeout_ns=timeout_ns,
                                          resends=resends, key=lambda dg: True if match is None or match(dg) else None,
                                          queue=queue, thread=thread, on_send=on_send)
    return replies[0]


def call_all(sock: UdpSocket, requests: list, reply_queue: RxQueue, *, timeout_ns: int, resends: int = 3,
             key: Callable[[Datagram], object], queue: str | None = None, thread=None,
             on_send: Callable[[int], None] | None = None):
    """Several request/responses at once over one socket: ``replies, sends = yield from call_all(...)``.

    ``requests``: ``(dst_node, dst_port, data, k)`` each, ``k`` the value ``key(reply)`` gives for
    its reply (a request id). Every request is sent at once (one UD QP addresses any node), the
    replies are taken as they come, and the ones still unanswered after ``timeout_ns`` are sent
    again, up to ``resends`` times, as :func:`call` does for one. Returns ``(replies, sends)``, lists
    in the order of ``requests``: each one's reply (None when every attempt timed out) and how many
    times it was sent. Datagrams no request is waiting for (stale replies of earlier requests) are
    consumed and skipped. ``queue``, ``thread`` and ``on_send`` (called with the attempt before each
    send) as in :func:`call`, which is this function with one request."""
    net = sock.net
    env = sock.env
    if type(timeout_ns) is not int or timeout_ns <= 0:
        raise UdpError(f"call: timeout_ns must be an integer > 0, got {timeout_ns!r}")
    if type(resends) is not int or resends < 0:
        raise UdpError(f"call: resends must be an integer >= 0, got {resends!r}")
    out: list = [None] * len(requests)
    sends = [0] * len(requests)
    waiting = {req[3]: i for i, req in enumerate(requests)}
    for attempt in range(resends + 1):
        for i in waiting.values():
            dst_node, dst_port, data, _k = requests[i]
            if attempt:
                net._resends += 1
            sends[i] += 1
            if on_send is not None:
                on_send(attempt)
            if sock.send(dst_node, dst_port, data, queue=queue, thread=thread) != UDP_OK:
                raise UdpError(f"call: a request of {len(data)} B exceeds the datagram payload limit "
                               f"({net.max_payload} B)")
        deadline = env.now + timeout_ns
        while waiting:
            left = deadline - env.now
            if left <= 0 and not len(reply_queue):
                break
            ev = reply_queue.wait(max(left, 0))
            yield ev
            if not ev.value:
                break
            dg = reply_queue.poll()
            if dg is not None:
                i = waiting.pop(key(dg), None)
                if i is not None:
                    out[i] = dg
        if not waiting:
            break
        net._timeouts += len(waiting)
    return out, sends
