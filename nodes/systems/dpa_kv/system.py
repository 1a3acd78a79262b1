"""dpa-kv's System: options, the steering rule, the table's setup in DPA memory, the client."""

from __future__ import annotations

from nodes.systems.api import Option, SystemGaveUp
from .datagram import DatagramSystem, request_options
from shm.steering import SteerRule

from .client import DpaKvClient
from .server import SLOT_HEADER, dpa_server
from .wire import BASE_PORT, PORTS


class DpaKvSystem(DatagramSystem):
    name = "dpa-kv"
    description = ("reference service: a key-value table in DPA memory served by DPA threads over "
                   "steered UDP (clients -> host NIC -> a DPA thread per port -> reply)")
    paper = "dmrack reference service for the device roles (the DPA-Store pattern, Ni et al.)"
    options = (
        Option("key_max", 64, "largest key in bytes (a slot's key field)", minimum=1, maximum=255),
        Option("value_max", 1024, "largest value in bytes (a slot's value field; a request must fit one datagram)",
               minimum=1, maximum=1400),
        Option("load_factor", 0.5, "keys per slot the table is sized for", minimum=0.05, maximum=0.95),
        *request_options(timeout_us=100.0),
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
    def setup(cls, fabric, memory_nodes, options, capacity):
        dpa = cls.dpa_index(fabric)
        slots = max(8, -(-int(capacity / options["load_factor"]) // PORTS))
        slot_bytes = -(-(SLOT_HEADER.size + options["key_max"] + options["value_max"]) // 8) * 8
        need = PORTS * slots * slot_bytes
        have = fabric.nodes[dpa].memory_bytes
        if need > have - 4096:
            raise SystemGaveUp(f"dpa-kv: a table for {capacity:,} keys needs {need / 2**20:.1f} MiB of DPA memory "
                               f"(slots of {slot_bytes} B at load factor {options['load_factor']}); dpa0 has "
                               f"{have / 2**20:.1f} MiB: raise dpa.memory or lower value_max or the key count")
        table = fabric.allocate(dpa, need)
        return {"dpa": "dpa0", "server": fabric.nodes[dpa].nic_of, "table": table, "slots": slots,
                "slot_bytes": slot_bytes, "key_max": options["key_max"]}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return DpaKvClient(layout, thread, options)
