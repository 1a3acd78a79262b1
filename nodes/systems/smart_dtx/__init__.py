"""SMART-DTX (SMART, ASPLOS'24 §5.3): FORD+ run on the SMART framework; see docs/dtx.md.

* :mod:`.system`: :class:`SmartDtxSystem` (FORD's system with SMART's techniques switched on) and
  ``DTX_TUNER``, its scaled tuner and retry-rate settings.

The transactions themselves are :mod:`nodes.systems.ford`, unchanged.
"""

from .system import DTX_TUNER, SmartDtxSystem

__all__ = ["SmartDtxSystem", "DTX_TUNER"]
