"""FlexKV (Hu, Shen, Yang): index proxying on compute nodes over a RACE index; see docs/flexkv.md.

* :mod:`.layout`: tombstones, the KV pair's valid bit, partitions and maps;
* :mod:`.cache`: the compute-node cache of addresses and KV pairs;
* :mod:`.node`: a compute node's shared state (maps, local index, metadata, locks, pause gate);
* :mod:`.proxy`: the proxy's RPC handlers (read, write, invalidate, flush);
* :mod:`.reassignment`: the manager actor and the pause/resume reassignment;
* :mod:`.algorithms`: Algorithms 1 and 2, pure;
* :mod:`.client`: :class:`FlexKVClient` (proxied and one-sided paths);
* :mod:`.system`: :class:`FlexKVSystem`;
* :mod:`.op`: FlexKV-OP (ownership partitioning), :class:`FlexKVOpSystem`.
"""

from .client import FlexKVClient, FlexKVStats
from .system import FlexKVSystem
from .op import FlexKVOpClient, FlexKVOpSystem

__all__ = ["FlexKVSystem", "FlexKVClient", "FlexKVStats", "FlexKVOpSystem", "FlexKVOpClient"]
