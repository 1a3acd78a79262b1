"""RACE hashing (Zuo et al., USENIX ATC'21) as a reusable library; see docs/race.md.

Pieces, importable separately by the systems built on RACE (SMART-HT, FUSEE, Aceso, FlexKV):

* :mod:`.layout`: slot / header / directory-entry / KV-block encodings, :class:`Geometry`;
* :mod:`.hashing`: the jitted 64-bit key hash and its fields (suffix, two buckets, fingerprint);
* :mod:`.bucket`: where a key's two combined buckets are (:func:`probe`) and one jitted pass over
  them (:func:`scan`);
* :mod:`.directory`: the client-side directory cache and its RDMA refresh;
* :mod:`.alloc`: the client-side chunked KV-block allocator;
* :mod:`.client`: :class:`RaceClient` (get / insert / update / delete), :class:`RaceStats`;
* :mod:`.system`: :class:`RaceSystem` (options, setup, client).
"""

from .alloc import ChunkAllocator, alloc_rpc_ns
from .bucket import probe, scan, slot_offset
from .client import RaceClient, RaceStats
from .directory import DirectoryCache
from .hashing import hash64
from .layout import (
    Geometry, ItemTooLarge, LayoutError, check_block, decode_block, encode_block, pack_slot, slot_block,
)
from .system import RaceSystem

__all__ = [
    "RaceSystem", "RaceClient", "RaceStats", "ChunkAllocator", "alloc_rpc_ns", "DirectoryCache", "Geometry",
    "ItemTooLarge", "LayoutError", "hash64", "probe", "scan", "slot_offset", "pack_slot", "slot_block",
    "encode_block", "decode_block", "check_block",
]
