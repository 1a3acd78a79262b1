"""What PD3's two clients share: a client thread of the rack's client nodes talking to the host's
application over datagrams.

Both the hash map's client (:class:`nodes.systems.pd3.system.Pd3Client`: the ops of a thread's
coroutines batched into one packet) and the Garnet-like store's
(:class:`nodes.systems.pd3.garnet.GarnetClient`: one RESP connection per coroutine) send to the
host ``cn0`` on :data:`.parsers.PORT` and take replies on ports of their own node (a reply port
per coroutine, :class:`shm.udp.ReplyPorts`), with the layout's thread count and value limit and
the option ``timeout_us``. That set-up is here once; the packets and the replies are each
client's.
"""

from __future__ import annotations

from nodes.systems.api import KVClient, SystemGaveUp
from shm.udp import ReplyPorts

from .parsers import REPLY_PORT


class HostAppClient(KVClient):
    """The set-up of a client of PD3's host application (module docstring)."""

    def __init__(self, layout, thread, options):
        self.thread = thread
        self.net = thread.owner.udp
        if self.net is None:
            raise SystemGaveUp("pd3 needs the datagram path: a profile with a [udp] table (bf3)")
        self.server = layout["host_name"]
        self.app_threads = layout["threads"]
        self.value_max = layout["value_max"]
        self.timeout_ns = int(options["timeout_us"] * 1000)
        # a reply port per coroutine: replies of requests in flight never mix
        self.endpoint = ReplyPorts(self.net, thread, REPLY_PORT, 256)
