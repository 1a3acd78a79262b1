"""Key hashing: a fixed 64-bit key hash every process agrees on, and ways to cut it into fields.

Why a library module: every design on the rack must place a key the same way in every process
(compute nodes are separate OS processes), so it can never use Python's per-process salted
``hash``; and a hash table needs several independent-looking fields out of one hash (which
bucket, which subtable, a fingerprint). Offered here:

* :func:`hash64` (jitted): FNV-1a over the key bytes followed by the MurmurHash3 64-bit finaliser
  (full avalanche); ~0.3 us per call with a ``bytes`` key; :func:`hash64_words` is the same hash of
  a whole array of 8-byte keys (each ``uint64`` word's little-endian bytes) in one call;
* :func:`mix64` (plain Python): splitmix64's finaliser, to scatter an integer key (sequential ids
  land in unrelated slots of a cache or table);
* :func:`field` and :func:`reduce_range`: a bit field of a hash, and a multiply-shift range
  reduction of such a field onto ``0..n-1`` (no modulo bias worth the name, no division);
* the field split RACE uses (and the RACE family: SMART-HT, FUSEE, ...), which a new extendible
  hash table can take as is. Its 64 bits are used as four disjoint fields::

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

Python code derives the fields from the integer hash.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from shm.nic import mix64_py

SUFFIX_BITS = 16
SUFFIX_MASK = (1 << SUFFIX_BITS) - 1
BUCKET_BITS = 20
BUCKET_MASK = (1 << BUCKET_BITS) - 1
B1_SHIFT = 16
B2_SHIFT = 36
FP_SHIFT = 56


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True)
def _fmix64(h):
    """MurmurHash3's 64-bit finaliser: the avalanche after FNV-1a's byte loop."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True)
def hash64(key):
    """The 64-bit hash of a bytes-like key (FNV-1a + MurmurHash3 fmix64)."""
    h = _FNV_OFFSET
    for i in range(len(key)):
        h = (h ^ np.uint64(key[i])) * _FNV_PRIME
    return _fmix64(h)


@njit(cache=True)
def hash64_words(words, out):
    """``out[i] = hash64(words[i].to_bytes(8, "little"))`` for a ``uint64`` array: the hash of
    each word's 8 little-endian bytes, for a whole key set at once (a call of :func:`hash64` per
    key costs ~0.3 us of dispatch and a ``bytes`` object; an experiment names 10^5..10^6 keys)."""
    for j in range(words.shape[0]):
        w = words[j]
        h = _FNV_OFFSET
        for i in range(8):
            h = (h ^ ((w >> np.uint64(8 * i)) & np.uint64(0xFF))) * _FNV_PRIME
        out[j] = _fmix64(h)


# splitmix64's finaliser of a 64-bit integer: sequential keys land in unrelated slots (and
# deterministically, unlike Python's per-process salted ``hash``); one definition, the fabric's
mix64 = mix64_py


def field(h: int, shift: int, bits: int) -> int:
    """Bits ``shift .. shift+bits-1`` of a hash."""
    return (h >> shift) & ((1 << bits) - 1)


def reduce_range(h: int, shift: int, bits: int, n: int) -> int:
    """The ``bits``-bit field of ``h`` at ``shift`` mapped onto ``0..n-1`` by multiply-shift
    (``field * n >> bits``): uniform for a uniform field, and independent of the other fields."""
    return (((h >> shift) & ((1 << bits) - 1)) * n) >> bits


def fingerprint(h: int) -> int:
    return h >> FP_SHIFT


def suffix(h: int, depth: int) -> int:
    return h & ((1 << depth) - 1)


def main_buckets(h: int, n_main: int) -> tuple[int, int]:
    """The two main-bucket indices (0..n_main-1) of a hash in a subtable of ``n_main`` main buckets."""
    return ((((h >> B1_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS,
            (((h >> B2_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS)
