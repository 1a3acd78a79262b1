"""PD3 (prefetching data with DPUs for disaggregated memory) on the rack; see docs/pd3.md.

The system is :class:`Pd3System` (``pd3``, :mod:`.system`: clients, the host's application, the
DPU and the memory server). Its parts:

* :mod:`.host_view`: the DPU-side set of keys believed cached on the host (PD3's Host View);
* :mod:`.loading_zone`: the host ring the DPU DMA-writes prefetched items into, and the
  application threads' non-blocking ``CheckAndReturn``;
* :mod:`.leap`: the Leap prefetcher (trend detection and prefetch window, PD3's userspace port),
  the algorithm of PD3's Leap baseline;
* :mod:`.parsers`: the user-defined request parser interface, the hash map's, page server's and
  RESP2 store's parsers, and the memory server's key -> address directory built from them;
* :mod:`.prefetcher`: the prefetch decision and Host View maintenance of PD3's Tables 1 and 2;
* :mod:`.dpu_costs`: the DPU cores' price of the Host View's lookups (profile ``[dpu]``);
* :mod:`.hashmap` and :mod:`.garnet`: the host applications (the hash map / page server, and the
  Garnet-like RESP2 store on a hybrid log);
* :mod:`.client_base`: the set-up both clients share (reply ports, the host, the limits);
* :mod:`.transfer`: the Transfer Engine (DPU core) and the memory server's batch executor;
* :mod:`.system`: :class:`Pd3System` (options, steering, setup, the roles' actors, the client).
"""

from .system import Pd3Client, Pd3System

__all__ = ["Pd3System", "Pd3Client"]
