"""The memory nodes a system's ``setup`` is given, checked once for every design.

``System.setup(fabric, memory_nodes, ...)`` receives the rack's memory nodes by name or index. Every
design on one-sided verbs needs the same three things of them before it lays anything out: their
fabric indexes, at least one, none twice. What a design's own pointers can address (8 bits of node
number in RACE's slots and Sherman's root word, 4 in an ART entry) it checks on top, with its own
reason. One function, so that the messages say the same thing for every system.
"""

from __future__ import annotations

from shm.messages import SystemGaveUp


def memory_node_indexes(fabric, memory_nodes, system: str) -> list[int]:
    """The fabric indexes of ``memory_nodes``; :class:`SystemGaveUp` (one line naming ``system``)
    if there is none or one is listed twice."""
    mns = [fabric.node_index(m) for m in memory_nodes]
    if not mns:
        raise SystemGaveUp(f"{system} needs at least one memory node")
    if len(set(mns)) != len(mns):
        raise SystemGaveUp(f"{system}: memory node listed twice in {mns}")
    return mns
