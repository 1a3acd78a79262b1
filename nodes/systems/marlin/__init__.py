"""Marlin (ICPP'23) on dmrack: Sherman's B-link tree with the Spear lock and out-of-place items.

* :mod:`.layout`: the leaf entry (key hint + item pointer), the data item, the Spear word's place;
* :mod:`.client`: :class:`MarlinClient` (a :class:`nodes.systems.sherman.ShermanClient` whose leaf
  operations are Marlin's), :class:`MarlinStats`;
* :mod:`.system`: :class:`MarlinSystem`.

The lock itself is the systems library's :mod:`nodes.systems.lib.spear` (Dolphin takes it too).
See docs/marlin.md.
"""

from .client import MarlinClient, MarlinStats
from .layout import LOCK_OFFSET, MAX_VALUE
from .system import MarlinSystem

__all__ = ["MarlinSystem", "MarlinClient", "MarlinStats", "LOCK_OFFSET", "MAX_VALUE"]
