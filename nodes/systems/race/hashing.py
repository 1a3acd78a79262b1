"""Key hashing: one jitted 64-bit hash per key, split into the fields RACE needs.

Every process must agree on where a key lives, so the hash is a fixed function of the key bytes
(never Python's per-process salted ``hash``). ``hash64`` is FNV-1a over the bytes followed by the
MurmurHash3 64-bit finaliser (full avalanche), and its 64 bits are used as four disjoint fields::

    63    56 55               36 35               16 15            0
    +-------+-------------------+-------------------+---------------+
    |  fp   |  bucket 2 (20 b)  |  bucket 1 (20 b)  | suffix (16 b) |
    +-------+-------------------+-------------------+---------------+

* ``suffix``: the low ``global_depth`` bits pick the directory entry (extendible hashing: a split
  of a subtable of local depth ``d`` moves the keys whose bit ``d`` is set);
* ``bucket 1``/``bucket 2``: the two hash functions of RACE, each mapped onto the subtable's main
  buckets with a multiply-shift range reduction (so they do not depend on the suffix: both
  combined buckets of a key stay in the same subtable, and a split keeps them together);
* ``fp``: the slot fingerprint.

Calling the jitted function with a ``bytes`` object costs ~0.3 us; Python code derives the fields.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SUFFIX_BITS = 16
SUFFIX_MASK = (1 << SUFFIX_BITS) - 1
BUCKET_BITS = 20
BUCKET_MASK = (1 << BUCKET_BITS) - 1
B1_SHIFT = 16
B2_SHIFT = 36
FP_SHIFT = 56


@njit(cache=True)
def hash64(key):
    """The 64-bit hash of a bytes-like key (FNV-1a + MurmurHash3 fmix64)."""
    h = np.uint64(0xCBF29CE484222325)
    p = np.uint64(0x100000001B3)
    for i in range(len(key)):
        h = (h ^ np.uint64(key[i])) * p
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


def fingerprint(h: int) -> int:
    return h >> FP_SHIFT


def suffix(h: int, depth: int) -> int:
    return h & ((1 << depth) - 1)


def main_buckets(h: int, n_main: int) -> tuple[int, int]:
    """The two main-bucket indices (0..n_main-1) of a hash in a subtable of ``n_main`` main buckets."""
    return ((((h >> B1_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS,
            (((h >> B2_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS)
