"""What a transactional workload declares to a system: its tables and how their values are bytes.

Declared on the workloads floor (below the systems, which import it through
nodes/systems/txn.py) so that a workload such as SmallBank can describe its tables without
importing a system.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple


class TableSpec(NamedTuple):
    """One table of a transactional workload."""

    name: str
    table_id: int          # FORD's table id (>= 1): with 2 memory nodes the primary is table_id % 2
    value_bytes: int       # the record's value size (FORD's MAX_ITEM_SIZE for the workload)
    buckets: int           # hash buckets (FORD's table json, scaled with the rows)
    rows: int              # records loaded


class Codec(NamedTuple):
    """How a table's values are bytes: ``encode(value) -> bytes`` of the table's value size,
    ``decode(bytes) -> value``."""

    encode: Callable[[Any], bytes]
    decode: Callable[[Any], Any]


RAW = Codec(lambda v: bytes(v), lambda b: bytes(b))
