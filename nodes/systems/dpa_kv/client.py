"""dpa-kv's client: one datagram per operation to the port of its key (:mod:`.wire`), the reply,
resends and timeouts through the datagram client DPA-Store's shares (:mod:`.datagram`)."""

from __future__ import annotations

from nodes.systems.api import SystemGaveUp
from .datagram import DatagramClient, DatagramStats

from .wire import OP_DELETE, OP_GET, OP_INSERT, OP_UPDATE, REP, REPLY_PORT, REQ, ST_OK, port_of


class DpaKvStats(DatagramStats):
    """requests, resends, timeouts of one client (:class:`DatagramStats`)."""
    __slots__ = ()


class DpaKvClient(DatagramClient):
    """The client of one modelled compute thread; every coroutine gets its own reply port."""

    service = "dpa-kv"
    reply_port = REPLY_PORT
    stats_class = DpaKvStats

    def __init__(self, layout: dict, thread, options: dict):
        super().__init__(layout, thread, options)
        self.key_max, self.value_max = int(options["key_max"]), int(options["value_max"])

    def _call(self, co, op: int, key: bytes, value: bytes = b""):
        if len(key) > self.key_max or len(value) > self.value_max:
            raise SystemGaveUp(f"dpa-kv: a key of {len(key)} B and a value of {len(value)} B do not fit a slot "
                               f"(system.key_max = {self.key_max}, system.value_max = {self.value_max})")
        reply = yield from self.request(co, port_of(key), lambda rid: REQ.pack(op, rid, len(key)) + key + value,
                                        lambda data: REP.unpack_from(data)[1])
        _op, _rid, status = REP.unpack_from(reply.data)
        return status, reply.data[REP.size:]

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
