"""FUSEE (Shen et al., FAST'23): a RACE index replicated on several memory nodes, changed by
clients only with the SNAPSHOT protocol, replicated KV pairs carrying an embedded operation log,
and an address cache; see docs/fusee.md.

* :mod:`.layout`: the log tail, tombstones, the replicating bit;
* :mod:`.alloc`: replicated coarse blocks and their replica map;
* :mod:`.cache`: the compute node's address cache (miss-rate bypass);
* :mod:`.client`: :class:`FuseeClient` (SNAPSHOT, recovery of stalled writers);
* :mod:`.system`: :class:`FuseeSystem`.
"""

from .client import FuseeClient, FuseeStats
from .system import FuseeSystem

__all__ = ["FuseeSystem", "FuseeClient", "FuseeStats"]
