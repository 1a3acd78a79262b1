"""Aceso (Hu, Zuo et al., SOSP'24) on the RACE library; see docs/aceso.md.

* :mod:`.layout`: the versioned slot word, the KV record and its trailer, the parity placement;
* :mod:`.cache`: the compute node's address cache;
* :mod:`.client`: :class:`AcesoClient` (get / insert / update / delete), :class:`AcesoStats`;
* :mod:`.server`: the memory-node actors (allocation, XOR parity, differential checkpoints);
* :mod:`.system`: :class:`AcesoSystem`.
"""

from .client import AcesoClient, AcesoStats
from .server import MemoryNodeStats, memory_node_stats
from .system import AcesoSystem

__all__ = ["AcesoSystem", "AcesoClient", "AcesoStats", "MemoryNodeStats", "memory_node_stats"]
