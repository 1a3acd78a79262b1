"""PD3 (prefetching data with DPUs for disaggregated memory) will live in this package.

Not a system on the rack yet: nothing here is registered. Its parts so far:

* :mod:`.host_view`: the DPU-side set of keys believed cached on the host (PD3's Host View);
* :mod:`.loading_zone`: the host ring the DPU DMA-writes prefetched items into, and the
  application threads' non-blocking ``CheckAndReturn``;
* :mod:`.leap`: the Leap prefetcher (trend detection and prefetch window, PD3's userspace port),
  the algorithm of PD3's Leap baseline;
* :mod:`.parsers`: the user-defined request parser interface, the hash map's, page server's and
  RESP2 store's parsers, and the memory server's key -> address directory built from them;
* :mod:`.prefetcher`: the prefetch decision and Host View maintenance of PD3's Tables 1 and 2.
"""
