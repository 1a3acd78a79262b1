"""Clover (pDPM: Tsai, Shan, Zhang, USENIX ATC'20; code WukLab/pDPM ``clover/``); see docs/clover.md.

* :mod:`.layout`: the version pointer and block formats, the metadata server's messages;
* :mod:`.ms`: the metadata server (RPC handlers on a memory node's cores);
* :mod:`.client`: :class:`CloverClient` (get / insert / update / delete), :class:`CloverStats`;
* :mod:`.system`: :class:`CloverSystem` (options, roles, setup, bulk load).
"""

from .client import CloverClient, CloverStats
from .system import CloverSystem

__all__ = ["CloverSystem", "CloverClient", "CloverStats"]
