"""The systems library: what a design on the rack needs besides its own data structure.

Every design in nodes/systems (RACE, SMART-HT, Sherman, SMART-BT) and any plugin system builds on
these modules instead of copying them; docs/systems-library.md shows each with an example.

* :mod:`.hashing`: a fixed 64-bit key hash every process agrees on (``hash64``), ``mix64``, bit
  fields and range reduction, and RACE's field split (suffix, two buckets, fingerprint);
* :mod:`.record`: versioned and checksummed records (``RecordFormat``, ``check_record``), the
  checksum RACE's KV blocks carry (``checksum32``) and Sherman's per-line versions
  (``stamp_lines``, ``lines_consistent``): telling a torn READ from a good one;
* :mod:`.memory_nodes`: the memory nodes ``System.setup`` is given, as fabric indexes, checked
  (``memory_node_indexes``);
* :mod:`.array`: N fixed-size records spread over the memory nodes, allocated and zeroed at
  setup (``allocate_array``), described by a picklable ``RecordArray`` with ``address_of(i)``;
* :mod:`.alloc`: client-side allocation of remote blocks out of chunks (``ChunkAllocator``);
* :mod:`.reclaim`: epoch-based reclamation, safe reuse of the blocks an operation unlinked
  (``setup_epochs``, ``Reclaimer``);
* :mod:`.hocl`: Sherman's hierarchical on-chip lock (lock tables in NIC device memory, the
  compute node's local lock table with hand-over; ``setup_lock_tables``, ``HoclClient``);
* :mod:`.art`: ART internal nodes on remote memory, SMART-ART's and Dolphin's format, with
  lock-free insertion and reverse pointers (``ArtTree``, docs/art.md);
* :mod:`.radix_cache`: a compute node's radix cache of node images under a byte budget
  (``RadixCache``);
* :mod:`.heap`: what a C++ object costs its heap (glibc chunks, std::string, std and TBB hash-map
  elements), for caches whose budget is a compute node's memory.

Modules are imported on use (``from nodes.systems.lib.alloc import ChunkAllocator``): this
package imports nothing itself, so using one module does not compile the others' jitted code.
"""
