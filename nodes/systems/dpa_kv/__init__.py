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

Parts: :mod:`.wire` (ports, the key's port, request and reply formats), :mod:`.server` (the table
and the DPA threads' actors), :mod:`.datagram` (the client and system shape of a service behind
steered UDP, which DPA-Store's client and system share), :mod:`.client` (:class:`DpaKvClient`),
:mod:`.system` (:class:`DpaKvSystem`). The names below were those of the flat module ``nodes/systems/dpa_kv.py``
and keep working from here.
"""

from .client import DpaKvClient, DpaKvStats
from .server import EMPTY, SLOT_HEADER, TOMBSTONE, USED, dpa_server
from .system import DpaKvSystem
from .wire import (
    BASE_PORT, OP_DELETE, OP_GET, OP_INSERT, OP_UPDATE, PORTS, REP, REPLY_PORT, REQ, ST_EXISTS, ST_MISSING, ST_OK,
    port_of,
)

__all__ = [
    "DpaKvSystem", "DpaKvClient", "DpaKvStats", "dpa_server", "port_of", "BASE_PORT", "PORTS", "REPLY_PORT",
    "OP_GET", "OP_INSERT", "OP_UPDATE", "OP_DELETE", "ST_OK", "ST_MISSING", "ST_EXISTS", "EMPTY", "USED",
    "TOMBSTONE", "REQ", "REP", "SLOT_HEADER",
]
