"""SMART-BT (SMART, ASPLOS'24 §5.2, §6.2.3): Sherman on the SMART framework + speculative lookup;
see docs/smart_bt.md.

* :mod:`.client`: :class:`SpecCache` (the compute node's direct-mapped key -> entry-line cache),
  :class:`SmartBTClient` (Sherman's client with the speculative get), :class:`SmartBTStats`;
* :mod:`.system`: :class:`SmartBTSystem` (options, the per-line leaf layout, SMART's defaults).

The tree, layout, HOCL and splits are Sherman's (:mod:`nodes.systems.sherman`), unchanged.
"""

from .client import SPEC_CACHE_SLOTS, SPEC_FIELDS, SmartBTClient, SmartBTStats, SpecCache
from .system import SmartBTSystem

__all__ = ["SmartBTSystem", "SmartBTClient", "SmartBTStats", "SpecCache", "SPEC_FIELDS", "SPEC_CACHE_SLOTS"]
