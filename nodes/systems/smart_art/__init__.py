"""SMART-ART (Luo et al., OSDI'23): an adaptive radix tree on disaggregated memory; see
docs/smart_art.md.

* :mod:`.layout`: the leaf (one per KV pair: rev_ptr, status word, checksum, key, value), its
  image, checksum and status encodings, :class:`Leaf`;
* :mod:`.client`: :class:`SmartArtClient` (get / insert / update / delete / scan; the design of
  the update paths and why the leaf's status decides), :class:`SmartArtStats`;
* :mod:`.system`: :class:`SmartArtSystem` (options, setup, bulk load, client).

The internal nodes, the radix cache and the local lock table are the systems library's
(:mod:`nodes.systems.lib.art`, :mod:`nodes.systems.lib.radix_cache`,
:mod:`nodes.systems.lib.local_lock`; docs/systems-library.md). The names below were those of the
flat module ``nodes/systems/smart_art.py`` and keep working from here.
"""

from nodes.systems.lib.alloc import UNIT

from .client import RETRY_LIMIT, SmartArtClient, SmartArtStats
from .layout import (
    CHECKSUM, DEAD, KEY, KEY_BYTES, LIVE, LOCKED, MAX_LEAF_BYTES, MAX_VALUE, REV_PTR, STATUS, UNITS, VALUE, VLEN,
    KeySizeError, Leaf, ValueTooLarge, checksum, dead, leaf_body, leaf_image, leaf_units, successor_of,
)
from .system import LAYOUT_FORMAT, SmartArtSystem

__all__ = [
    "SmartArtSystem", "SmartArtClient", "SmartArtStats", "Leaf", "KeySizeError", "ValueTooLarge", "leaf_units",
    "leaf_image", "leaf_body", "checksum", "dead", "successor_of", "KEY_BYTES", "REV_PTR", "STATUS", "CHECKSUM",
    "KEY", "VLEN", "UNITS", "VALUE", "LIVE", "LOCKED", "DEAD", "MAX_LEAF_BYTES", "MAX_VALUE", "RETRY_LIMIT",
    "LAYOUT_FORMAT", "UNIT",
]
