"""SMART-HT (SMART, ASPLOS'24 §5.1): RACE hashing run on the SMART framework; see docs/smart.md.

* :mod:`.system`: :class:`SmartHTSystem` (RACE's system with SMART's techniques switched on) and
  ``SCALED_TUNER``, the tuner settings scaled to the emulator (SMART-BT uses them too).

The hash table itself is :mod:`nodes.systems.race`, unchanged.
"""

from .system import SCALED_TUNER, SmartHTSystem

__all__ = ["SmartHTSystem", "SCALED_TUNER"]
