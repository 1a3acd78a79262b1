"""Sherman (Wang et al., SIGMOD'22) as a reusable library; see docs/sherman.md.

Pieces, importable separately by the systems built on Sherman (SMART-BT, Dolphin):

* :mod:`.layout`: the 1 KB node format (per-line node versions, one-line leaf entries, internal
  pairs), node images, snapshot parsing, the jitted version check and leaf probe;
* :mod:`.cache`: :class:`IndexCache`, the compute-node cache of internal nodes, shared per node;
* :mod:`.client`: :class:`ShermanClient` (get / insert / update / delete / scan), :class:`ShermanStats`;
* :mod:`.system`: :class:`ShermanSystem` (options, setup, client).

HOCL (lock slots in NIC device memory, the compute node's local lock table), the chunk allocator
and epoch-based reclamation are the systems library's (:mod:`nodes.systems.lib.hocl`,
:mod:`nodes.systems.lib.alloc`, :mod:`nodes.systems.lib.reclaim`; docs/systems-library.md).
"""

from .cache import IndexCache, IndexNode
from .client import ShermanClient, ShermanStats
from .layout import (
    INLINE_VALUE, INTERNAL_KEYS, LEAF_SLOTS, MAX_VALUE, NODE_BYTES, KeySizeError, ValueTooLarge, internal_image,
    leaf_image,
)
from .system import ShermanSystem

__all__ = [
    "ShermanSystem", "ShermanClient", "ShermanStats", "IndexCache", "IndexNode",
    "NODE_BYTES", "LEAF_SLOTS", "INTERNAL_KEYS", "INLINE_VALUE", "MAX_VALUE", "KeySizeError", "ValueTooLarge",
    "leaf_image", "internal_image",
]
