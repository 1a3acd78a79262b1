"""Bytes a C++ object costs the heap of the process that holds it.

Why: a compute node's cache whose budget is the node's memory (FlexKV Fig. 23's "CN memory", the
address caches of FUSEE, Aceso and Clover) holds as many entries as fit in that memory *as the
system's code lays them out*: an entry struct allocated on its own, a node of a standard hash
map, the map's bucket array. Counting only the entry's fields (what these caches did until issue
40, with a guessed hash-map overhead) holds about twice as many entries as the code can.

What each piece costs, from the public sources of the libraries those systems build on:

* **glibc malloc** (x86-64, ``malloc/malloc.c``): a chunk is the request plus its 8-byte size
  field, rounded up to ``MALLOC_ALIGNMENT`` (16), and at least ``MIN_CHUNK_SIZE`` (32)
  (:func:`malloc_chunk`). ``new`` of a struct is ``malloc`` of its ``sizeof``.
* **libstdc++ std::string**: 32 bytes (pointer, length, a 16-byte buffer); a string of up to 15
  characters lives inside them (the short-string optimisation), a longer one in a chunk of its
  length + 1 (:func:`string_heap`).
* **libstdc++ std::unordered_map**: one chunk per element, a node of the next pointer, the
  ``pair<const Key, T>`` and, where the key's hash is not trivially cheap (``std::string``), the
  cached hash code; one bucket pointer per element at the default ``max_load_factor`` of 1
  (:func:`unordered_map_element`).
* **TBB concurrent_unordered_map** (split-ordered list): a node per element of the next pointer,
  the order key and the value; a bucket pointer and a dummy node per bucket, at the default
  ``max_load_factor`` of 4 (:func:`tbb_unordered_map_element`), allocated through ``malloc``.

The bucket arrays grow by doubling, so between two rehashes a map has 1-2x the buckets these
count: the figures are the lower end, within 8 bytes an element.
"""

from __future__ import annotations

POINTER = 8
STD_STRING = 32                   # sizeof(std::string), libstdc++
SSO_CHARS = 15                    # the longest string kept inside it
TBB_LOAD_FACTOR = 4               # elements per bucket of a TBB concurrent_unordered_map


def malloc_chunk(request: int) -> int:
    """Bytes of the glibc malloc chunk that serves a request of ``request`` bytes."""
    if request < 0:
        raise ValueError(f"a malloc request is at least 0 bytes, got {request}")
    return max(32, (request + 8 + 15) // 16 * 16)


def string_heap(length: int) -> int:
    """Heap bytes of a std::string of ``length`` characters beyond its 32-byte object."""
    return malloc_chunk(length + 1) if length > SSO_CHARS else 0


def unordered_map_element(key_bytes: int, mapped_bytes: int, cached_hash: bool) -> int:
    """Bytes one element of a std::unordered_map costs: its node's chunk and its bucket pointer
    (``key_bytes``/``mapped_bytes``: the sizeof of the key and mapped types)."""
    node = POINTER + key_bytes + mapped_bytes + (8 if cached_hash else 0)
    return malloc_chunk(node) + POINTER


def tbb_unordered_map_element(key_bytes: int, mapped_bytes: int) -> int:
    """Bytes one element of a TBB concurrent_unordered_map costs: its node's chunk (next pointer,
    order key, value) and its share of a bucket (the pointer and the bucket's dummy node)."""
    node = POINTER + 8 + key_bytes + mapped_bytes
    bucket = POINTER + malloc_chunk(POINTER + 8)
    return malloc_chunk(node) + -(-bucket // TBB_LOAD_FACTOR)
