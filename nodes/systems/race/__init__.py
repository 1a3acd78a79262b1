"""RACE hashing (Zuo et al., USENIX ATC'21) as a reusable library; see docs/race.md.

Pieces, importable separately by the systems built on RACE (SMART-HT, FUSEE, Aceso, FlexKV):

* :mod:`.layout`: slot / header / directory-entry / KV-block encodings, :class:`Geometry`;
* :mod:`.bucket`: where a key's two combined buckets are (:func:`probe`) and one jitted pass over
  them (:func:`scan`);
* :mod:`.directory`: the client-side directory cache and its RDMA refresh;
* :mod:`.client`: :class:`RaceClient` (get / insert / update / delete), :class:`RaceStats`;
* :mod:`.system`: :class:`RaceSystem` (options, setup, client).

The key hash, the chunk allocator and epoch-based reclamation are the systems library's
(:mod:`nodes.systems.lib.hashing`, :mod:`nodes.systems.lib.alloc`, :mod:`nodes.systems.lib.reclaim`;
docs/systems-library.md).
"""

from .bucket import probe, scan, slot_offset
from .client import RaceClient, RaceStats
from .directory import DirectoryCache
from .layout import (
    Geometry, ItemTooLarge, LayoutError, check_block, decode_block, encode_block, pack_slot, slot_block,
)
from .system import RaceSystem

__all__ = [
    "RaceSystem", "RaceClient", "RaceStats", "DirectoryCache", "Geometry", "ItemTooLarge", "LayoutError", "probe",
    "scan", "slot_offset", "pack_slot", "slot_block", "encode_block", "decode_block", "check_block",
]
