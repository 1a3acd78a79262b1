"""N fixed-size records spread over the memory nodes: allocated and zeroed at setup, addressed by index.

Why a library module: most designs start from a pre-sized table of fixed-size records (buckets,
slots, subtables, lock words, per-key records) laid over the memory nodes, and each would
otherwise hand-write the same loop: round-robin the records over the nodes, allocate each
node's share, zero it, remember the bases, and turn an index into a global address in every
client. :func:`allocate_array` does it in ``System.setup`` and returns a :class:`RecordArray`, a
small frozen (picklable) description to put in the layout; clients call ``address_of(i)``.

Record ``i`` lives on memory node ``nodes[i % len(nodes)]`` at ``bases[i % len(nodes)] + (i //
len(nodes)) * stride`` (``stride``: the record size rounded up to ``align``): neighbouring
records are on different nodes, so a hot range of indices spreads its load. Each node's share is
one ``fabric.allocate`` call, so the offsets are those that allocating the records one by one in
index order would give (records are whole multiples of ``align``, the allocation alignment).
"""

from __future__ import annotations

from dataclasses import dataclass

from shm.fabric import LINE, gaddr


@dataclass(frozen=True)
class RecordArray:
    """``count`` records of ``record_bytes`` (every ``stride`` bytes) round-robin over ``nodes``
    (fabric indices), node ``nodes[j]``'s share starting at byte ``bases[j]``."""

    count: int
    record_bytes: int
    stride: int
    nodes: tuple
    bases: tuple

    def node_of(self, i: int) -> int:
        return self.nodes[i % len(self.nodes)]

    def offset_of(self, i: int) -> int:
        """Byte offset of record ``i`` in its node's memory."""
        n = len(self.nodes)
        return self.bases[i % n] + (i // n) * self.stride

    def address_of(self, i: int) -> int:
        """The fabric global address of record ``i`` (what a client READs, WRITEs or CASes)."""
        if not 0 <= i < self.count:
            raise IndexError(f"record {i} of an array of {self.count}")
        n = len(self.nodes)
        return gaddr(self.nodes[i % n], self.bases[i % n] + (i // n) * self.stride)

    def per_node(self, j: int) -> int:
        """How many records node ``nodes[j]`` holds."""
        n = len(self.nodes)
        return self.count // n + (1 if j < self.count % n else 0)

    def words(self, fabric, i: int):
        """Record ``i`` as a writable uint64 view of its node's memory (setup-time initialisation
        by the rack's owner process; clients use verbs)."""
        node, off = self.node_of(i), self.offset_of(i)
        return fabric.memory[node].host64[off // 8:(off + self.record_bytes) // 8]

    @staticmethod
    def footprint(count: int, record_bytes: int, align: int = LINE) -> int:
        """Bytes of memory-node memory the array takes (for ``System.footprint``)."""
        return int(count) * (-(-int(record_bytes) // align) * align)


def allocate_array(fabric, memory_nodes, count: int, record_bytes: int, *, align: int = LINE,
                   zero: bool = True) -> RecordArray:
    """Allocate ``count`` records of ``record_bytes`` round-robin over ``memory_nodes`` (fabric
    indices or names), zero them (unless ``zero=False``) and describe them. MemoryError (from
    ``fabric.allocate``) if a node's share does not fit: ``System.setup`` turns it into one line
    naming the option to change."""
    if count < 1:
        raise ValueError(f"an array needs at least one record, got {count}")
    if record_bytes < 1:
        raise ValueError(f"records need at least one byte, got {record_bytes}")
    nodes = tuple(fabric.node_index(m) for m in memory_nodes)
    if not nodes:
        raise ValueError("an array needs at least one memory node")
    stride = -(-int(record_bytes) // align) * align
    shell = RecordArray(int(count), int(record_bytes), stride, nodes, (0,) * len(nodes))
    bases = []
    for j, node in enumerate(nodes):
        k = shell.per_node(j)
        if k == 0:
            bases.append(0)
            continue
        off = fabric.allocate(node, k * stride, align=align)
        if zero:
            fabric.memory[node].host[off:off + k * stride] = 0
        bases.append(off)
    return RecordArray(int(count), int(record_bytes), stride, nodes, tuple(bases))
