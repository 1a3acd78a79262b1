"""The client side of a service behind steered UDP (dpa-kv, DPA-Store): one base for their clients.

It lives in dpa-kv, the reference service whose pattern DPA-Store builds on (not in the systems
library, which imports nothing of ``nodes.systems.api``: api uses the library).

Both services are reached the same way (docs/devices.md, "Reference services"): a client thread of
the rack's client nodes sends one datagram per request to the server's host, whose NIC steers the
port to a DPA thread, and waits for the reply with a timeout and resends (``shm.udp.Requester``:
a request id per request, a reply port per coroutine, resends and timeouts counted). What differs
between the services is the wire format and the port a key goes to; what is the same -- the
datagram path the client needs, the layout's ``server``, the options ``timeout_us`` and
``resends``, the one-line error when every attempt timed out, the counters, and the system's
shape (active clients on the client nodes, nothing on memory nodes, a DPA the rack must have) --
is here once.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from nodes.systems.api import KVClient, Option, System, SystemGaveUp
from shm.udp import Requester


class DatagramStats(NamedTuple):
    requests: int       # requests this client sent
    resends: int        # requests sent again after a timeout
    timeouts: int       # waits for a reply that ran out


class DatagramClient(KVClient):
    """A client of one modelled thread; every coroutine gets its own reply port. Subclasses set
    ``service`` (the name in messages), ``reply_port`` (the first reply port of the node: coroutine
    k of thread t binds ``reply_port + t * 64 + k``) and ``stats_class``."""

    service = ""
    reply_port = 0
    stats_class = DatagramStats

    def __init__(self, layout: dict, thread, options: dict):
        self.thread = thread
        self.net = thread.owner.udp
        if self.net is None:
            raise SystemGaveUp(f"{self.service} needs the datagram path: a profile with a [udp] table")
        self.server = layout["server"]          # the DPA's host: the NIC that steers to its threads
        self.timeout_ns = int(options["timeout_us"] * 1000)
        self.resends = int(options["resends"])
        self.calls = Requester(self.net, thread, self.reply_port, timeout_ns=self.timeout_ns, resends=self.resends)

    def request(self, co, port: int, make: Callable[[int], bytes], rid_of: Callable[[bytes], int],
                on_send: Callable[[int], None] | None = None):
        """``reply = yield from self.request(co, port, make, rid_of)``: ``make(rid)`` sent to the
        server's ``port``; the reply datagram, or :class:`SystemGaveUp` after every attempt.
        ``on_send(attempt)`` before each send (``shm.udp.call``)."""
        reply = yield from self.calls.request(co, self.server, port, make, rid_of, on_send)
        if reply is None:
            raise SystemGaveUp(f"{self.service}: no reply from the DPA behind {self.server} after "
                               f"{self.resends + 1} attempts of {self.timeout_ns / 1000:g} us")
        return reply

    def statistics(self):
        c = self.calls
        return self.stats_class(c.requests, c.n_resends, c.n_timeouts)


def request_options(timeout_us: float) -> tuple[Option, Option]:
    """The options a :class:`DatagramClient` reads: ``timeout_us`` (the service's default) and
    ``resends``."""
    return (Option("timeout_us", timeout_us, "a client's wait for a reply before it sends again (virtual us)",
                   minimum=0.1, maximum=1e6),
            Option("resends", 3, "times a client sends a request again before it gives up", minimum=0, maximum=100))


class DatagramSystem(System):
    """A service on the DPA of ``dpa.hosts[0]`` reached over steered UDP: active clients on the
    client nodes (``cl0``..; the compute node is the DPA's host), nothing on memory nodes."""

    roles = ("compute", "client")
    client_role = "client"

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        return 0                        # nothing on memory nodes: the service lives in DPA memory

    @classmethod
    def dpa_index(cls, fabric) -> int:
        """The fabric index of the serving DPA, ``dpa0``; a one-line error when the rack has none."""
        names = [n.name for n in fabric.nodes]
        if "dpa0" not in names:
            raise SystemGaveUp(f"{cls.name} needs a DPA: give the rack dpa.hosts = [\"cn0\"] and rack.profile = \"bf3\"")
        return names.index("dpa0")
