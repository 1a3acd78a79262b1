"""YCSB's number generators as numba kernels over explicit state.

What this reproduces, and from where: the generators of YCSB's ``site.ycsb.generator`` package
(``ZipfianGenerator``, ``ScrambledZipfianGenerator``, ``UniformLongGenerator``,
``HotspotIntegerGenerator``, ``SkewedLatestGenerator``, ``SequentialGenerator``,
``ExponentialGenerator``, ``CounterGenerator``, ``AcknowledgedCounterGenerator``) and
``site.ycsb.Utils.fnvhash64``, with the same formulas, the same constants and the same quirks, so
that a dmrack run of "workload A" draws keys from the distribution YCSB's Java client draws them
from. The quirks kept on purpose are listed where they occur (search for "YCSB quirk").

What is not reproduced is Java's random stream. Every generator here owns an explicit
xoshiro256** state (four uint64 words in a numpy array) seeded with splitmix64 from
``(seed, stream_id)``. Nothing uses ``np.random`` inside jitted code: numba's global generator is
per process, so after a fork every client process would replay the same stream; and a global
stream makes a run depend on how draws of different clients interleave. With explicit state a
stream is a pure function of its seed and id, and streams of different ids are independent.

Why kernels over "kind + parameter arrays" rather than jitclasses: a generator is a small integer
``kind`` plus an int64 and a float64 parameter array (zipfian parameters change when the item
count grows, so they live in an array the kernel updates in place). One dispatch function,
``draw``, serves every kind, so the YCSB operation-stream kernel (``stream_batch``, also here, so
numba's per-file cache never pairs it with a stale copy of the generators) chooses keys and scan
lengths in one compiled loop: generation must never be what limits an emulated rack. Arrays are
always passed as arguments, never captured as globals, so cached compilations stay valid.

Zeta: YCSB sums ``1/i**theta`` term by term, which for the 10^10 items of the scrambled zipfian
with a constant other than 0.99 takes minutes. Up to ``ZETA_EXACT_MAX`` items we sum exactly as
YCSB does; beyond, the Euler-Maclaurin formula gives the same number to double precision (it is
in fact closer to the true sum than a 10^10-term floating-point loop).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from shm.telemetry import OP_INSERT, OP_SCAN

MASK64 = (1 << 64) - 1

# --- constants from YCSB ------------------------------------------------------------------------
FNV_OFFSET_BASIS_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 1099511628211
ZIPFIAN_CONSTANT = 0.99
# ScrambledZipfianGenerator draws from a fixed 10^10-item zipfian (so which keys are popular does
# not depend on the record count) and folds the hashed item onto the key range.
SCRAMBLED_ITEM_COUNT = 10_000_000_000
SCRAMBLED_ZETAN = 26.46902820178302          # zeta(10^10, 0.99), precomputed by YCSB
ACK_WINDOW_SIZE = 1 << 20                    # AcknowledgedCounterGenerator.WINDOW_SIZE

ZETA_EXACT_MAX = 1 << 22

# Generator kinds (the ``kind`` argument of the kernels).
K_CONSTANT, K_UNIFORM, K_ZIPFIAN, K_SCRAMBLED, K_HOTSPOT, K_LATEST, K_SEQUENTIAL, K_EXPONENTIAL = range(8)
KIND_NAMES = ("constant", "uniform", "zipfian", "scrambled_zipfian", "hotspot", "latest", "sequential",
              "exponential")

# Layout of a zipfian parameter array (float64; item counts stay exact below 2**53).
ZP_ITEMS, ZP_BASE, ZP_THETA, ZP_ZETA2, ZP_ALPHA, ZP_ZETAN, ZP_ETA, ZP_COUNT, ZP_HALF = range(9)
ZP_SIZE = 9

# Operation codes: shm/telemetry.py declares them (workloads.ycsb re-exports YCSB's five). The
# kernels below freeze OP_INSERT and OP_SCAN when they compile, and numba's cache does not see
# that file change: safe because a code never changes (see shm/telemetry.py).
# Slot of the counts array of stream_batch that counts rejected key draws.
COUNT_RETRIES = 5
MAX_KEY_TRIES = 1_000_000


# --- random numbers -----------------------------------------------------------------------------

def _mix64(z: int) -> int:
    """splitmix64's finaliser on a Python int (seeding happens once, in Python)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def rng_state(seed: int, stream_id: int = 0, salt: int = 0) -> np.ndarray:
    """A fresh xoshiro256** state (uint64[4]) for stream ``stream_id`` of ``seed``.

    The seed and the stream id go through splitmix64 one after the other (each step a bijection),
    so two ids of one seed never share a state, and the four words are filled by splitmix64 as
    the xoshiro authors recommend. A non-zero ``salt`` gives a second, independent stream for the
    same (seed, stream_id), e.g. for arrival times next to operations."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not isinstance(stream_id, (int, np.integer)) or isinstance(stream_id, bool):
        raise TypeError(f"stream_id must be an int, got {stream_id!r}")
    x = _mix64(_mix64(int(seed) & MASK64) ^ (int(stream_id) & MASK64))
    if salt:
        x = _mix64(x ^ (int(salt) & MASK64))
    words = []
    for _ in range(4):
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        words.append(_mix64(x))
    if not any(words):  # xoshiro's one forbidden state; unreachable in practice
        words[0] = 1
    return np.array(words, dtype=np.uint64)


@njit(cache=True)
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True)
def next_u64(s):
    """xoshiro256**: the next 64 random bits of state ``s`` (advanced in place)."""
    result = _rotl(s[1] * np.uint64(5), 7) * np.uint64(9)
    t = s[1] << np.uint64(17)
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


@njit(cache=True)
def next_double(s):
    """Uniform in [0, 1) with 53 random bits, like java.util.Random.nextDouble."""
    return np.float64(next_u64(s) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def next_below(s, n):
    """Uniform in [0, n): YCSB's ``Math.abs(nextLong()) % n`` on 63 random bits (n >= 1)."""
    return np.int64((next_u64(s) >> np.uint64(1)) % np.uint64(n))


@njit(cache=True)
def interarrival_ns(s, rate_per_s):
    """An exponential gap (ns) of a Poisson arrival process of ``rate_per_s`` arrivals per second.

    Open-loop clients space their requests with it. (YCSB's ``-target`` spaces operations evenly;
    exponential gaps are the usual open-loop model and do not synchronise clients.)"""
    u = next_double(s)
    return -math.log1p(-u) * (1e9 / rate_per_s)


@njit(cache=True)
def interarrivals_ns(s, rate_per_s, out):
    for i in range(out.shape[0]):
        out[i] = interarrival_ns(s, rate_per_s)


def arrival_gaps(s, n: int, rate_per_s: float) -> np.ndarray:
    """``n`` exponential gaps (float64 ns) of an open-loop client at ``rate_per_s``, drawn from
    the random state ``s`` (op streams keep one of their own, so arrivals do not change the ops)."""
    rate = float(rate_per_s)
    if not rate > 0:
        raise ValueError(f"interarrivals need a rate > 0 ops/s, got {rate} (target=0 is a closed loop)")
    out = np.empty(int(n), np.float64)
    interarrivals_ns(s, rate, out)
    return out


# --- FNV hash -----------------------------------------------------------------------------------

@njit(cache=True)
def fnvhash64(v):
    """YCSB's ``Utils.fnvhash64``: FNV-1a over the 8 little-endian bytes of the long ``v``, then
    Java's ``Math.abs``, which leaves Long.MIN_VALUE negative (YCSB quirk, kept)."""
    x = np.uint64(v)
    h = np.uint64(0xCBF29CE484222325)
    for _ in range(8):
        h ^= x & np.uint64(0xFF)
        h *= np.uint64(1099511628211)
        x >>= np.uint64(8)
    r = np.int64(h)
    if r < 0:
        r = -r  # wraps for Long.MIN_VALUE, as Java's Math.abs does
    return r


@njit(cache=True)
def fnvhash64_inplace(a):
    for i in range(a.shape[0]):
        a[i] = fnvhash64(a[i])


@njit(cache=True)
def java_rem(a, n):
    """Java's ``a % n`` (n > 0): the sign follows the dividend. Only fnvhash64's Long.MIN_VALUE
    can make ``a`` negative here; ``-(a + n)`` avoids negating it."""
    if a >= 0:
        return a % n
    return -((-(a + n)) % n)


@njit(cache=True)
def _fill_load_keys(start, hashed, out):
    for i in range(out.shape[0]):
        k = start + i
        out[i] = fnvhash64(k) if hashed else k


# --- dense key spaces (the workload properties ``keyspace`` and ``insertorder``) -----------------
#
# How record numbers become key ids, as an int64 parameter array ``kp`` (see key_map_params):
#   KM_ORDERED   id = keynum                       (insertorder=ordered, YCSB's)
#   KM_HASHED    id = fnvhash64(keynum)            (insertorder=hashed, YCSB's default)
#   KM_DENSE     id = 1 + perm_K(keynum)           (keyspace=K, hashed): a pseudo-random bijection
#                                                  of 0..K-1 onto the ids 1..K
#   KM_DENSE_ORD id = 1 + keynum                   (keyspace=K, ordered)
#   KM_DENSE_LOW id = 1 + keynum below N, else     (keyspace=K, loadorder=ordered, N = recordcount):
#                N + 1 + perm_{K-N}(keynum - N)    the load fills 1..N in order, later inserts take
#                                                  the free ids N+1..K at pseudo-random places
# In the dense modes a record number >= K gets id keynum + 1: past the key space, but still
# distinct from every other id, so inserts beyond K never overwrite a key.
#
# perm_K is a 4-round Feistel network on 2h bits (2^2h >= K, the smallest even width, at least 2),
# restricted to 0..K-1 by cycle walking (apply it again until the value is below K; since
# 2^2h < 4K, fewer than 4 steps on average). A Feistel network is a permutation whatever its round
# function, and cycle walking of a permutation stays a permutation of the subset, so perm_K is a
# bijection of 0..K-1; the round function is splitmix64's finaliser keyed by round keys derived from
# K alone, so the map depends on K only. Why not an affine map (a*keynum + b) mod K: by the
# three-gap theorem, the first N multiples of a modulo K leave at most three distinct gaps, so
# loading half the space would fill it in a rigid near-periodic pattern; the Feistel map fills it
# like a hash (a key's neighbours are loaded independently, each with probability N/K), as
# Sherman's benchmark and Dolphin's zipfian_test do (CityHash of i, modulo the key space); Dolphin's
# own benchmark loads i itself, the ids 1..N in order (KM_DENSE_LOW).
KM_ORDERED, KM_HASHED, KM_DENSE, KM_DENSE_ORD, KM_DENSE_LOW = range(5)
KP_MODE, KP_K, KP_HALF, KP_KEY0 = 0, 1, 2, 3
KP_LOW = KP_KEY0 + 4                        # KM_DENSE_LOW: the ids 1..N the load fills in order
KP_SIZE = KP_LOW + 1
KEYSPACE_MAX = 1 << 62


def key_map_params(hashed: bool = True, keyspace: int | None = None, ordered_load: int = 0) -> np.ndarray:
    """The ``kp`` array of :func:`map_keynum` for YCSB's ``insertorder`` (``hashed``) and dmrack's
    ``keyspace`` (None: YCSB's key ids). ``ordered_load = N`` (``loadorder = ordered``, with a
    hashed ``keyspace``): records 0..N-1 take the ids 1..N in order, and the permutation covers
    the rest of the key space, N+1..K."""
    kp = np.zeros(KP_SIZE, np.int64)
    if keyspace is None:
        kp[KP_MODE] = KM_HASHED if hashed else KM_ORDERED
        return kp
    k = int(keyspace)
    if not 1 <= k <= KEYSPACE_MAX:
        raise ValueError(f"keyspace must be in 1..2^62, got {k}")
    low = int(ordered_load)
    if not 0 <= low <= k:
        raise ValueError(f"an ordered load of {low} records needs 0..keyspace ({k}) of them")
    kp[KP_MODE] = KM_DENSE_ORD if not hashed else KM_DENSE_LOW if low else KM_DENSE
    kp[KP_K] = k
    kp[KP_LOW] = low
    m = max(1, k - low)                     # the ids the permutation covers
    bits = max(2, (m - 1).bit_length())
    kp[KP_HALF] = (bits + 1) // 2
    z = m
    for r in range(4):                      # round keys from the permuted count alone, 63 bits
        z = _mix64(z)
        kp[KP_KEY0 + r] = z & ((1 << 63) - 1)
    return kp


@njit(cache=True)
def _feistel(x, half, kp):
    mask = (np.uint64(1) << np.uint64(half)) - np.uint64(1)
    left = (np.uint64(x) >> np.uint64(half)) & mask
    right = np.uint64(x) & mask
    for r in range(4):
        z = right ^ np.uint64(kp[KP_KEY0 + r])
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        left, right = right, left ^ (z & mask)
    return np.int64((left << np.uint64(half)) | right)


@njit(cache=True)
def map_keynum(v, kp):
    """The key id of record number ``v`` under the key map ``kp`` (see key_map_params)."""
    mode = kp[KP_MODE]
    if mode == KM_HASHED:
        return fnvhash64(v)
    if mode == KM_ORDERED:
        return np.int64(v)
    k = kp[KP_K]
    if v >= k or v < 0:
        return np.int64(v) + 1
    if mode == KM_DENSE_ORD:
        return np.int64(v) + 1
    low = kp[KP_LOW]                        # 0 but for KM_DENSE_LOW
    if v < low:
        return np.int64(v) + 1
    m = k - low
    x = np.int64(v) - low
    half = kp[KP_HALF]
    while True:
        x = _feistel(x, half, kp)
        if x < m:
            return x + 1 + low


@njit(cache=True)
def map_keynums_inplace(a, kp):
    """Record numbers to key ids in place (``map_keynum`` of each)."""
    if kp[KP_MODE] == KM_ORDERED:
        return
    for i in range(a.shape[0]):
        a[i] = map_keynum(a[i], kp)


@njit(cache=True)
def _fill_mapped_keys(start, kp, out):
    for i in range(out.shape[0]):
        out[i] = map_keynum(start + i, kp)


# --- zeta and the zipfian kernel ----------------------------------------------------------------

@njit(cache=True)
def zeta_sum(st, n, theta, initial):
    """YCSB's ``zetastatic(st, n, theta, initialsum)``: ``initial + sum(1/i**theta, i=st+1..n)``."""
    total = initial
    for i in range(st, n):
        total += 1.0 / (i + 1.0) ** theta
    return total


@njit(cache=True)
def zeta_em(n, theta):
    """``sum(1/i**theta, i=1..n)`` by Euler-Maclaurin: 1000 exact terms, the integral of the rest
    and three Bernoulli corrections (the remainder is below 1e-20, far under double rounding)."""
    m = 1000
    if n <= m:
        return zeta_sum(0, n, theta, 0.0)
    head = zeta_sum(0, m - 1, theta, 0.0)
    a = float(m)
    b = float(n)
    s = theta
    integral = (b ** (1.0 - s) - a ** (1.0 - s)) / (1.0 - s)
    ends = 0.5 * (a ** -s + b ** -s)
    # f(x) = x**-s; f' = -s x**(-s-1); f''' = -s(s+1)(s+2) x**(-s-3); f^(5) = -s..(s+4) x**(-s-5)
    d1 = -s * (b ** (-s - 1.0) - a ** (-s - 1.0))
    d3 = -s * (s + 1.0) * (s + 2.0) * (b ** (-s - 3.0) - a ** (-s - 3.0))
    d5 = -s * (s + 1.0) * (s + 2.0) * (s + 3.0) * (s + 4.0) * (b ** (-s - 5.0) - a ** (-s - 5.0))
    return head + integral + ends + d1 / 12.0 - d3 / 720.0 + d5 / 30240.0


@njit(cache=True)
def zeta_grow(st, n, theta, initial):
    """zeta over n items from zeta over st items: incremental like YCSB when the step is small."""
    if n - st <= ZETA_EXACT_MAX:
        return zeta_sum(st, n, theta, initial)
    return zeta_em(n, theta)


def zeta(n: int, theta: float) -> float:
    """``zeta(n, theta) = sum(1/i**theta, i=1..n)``, exact up to ZETA_EXACT_MAX items."""
    if n <= ZETA_EXACT_MAX:
        return float(zeta_sum(0, n, theta, 0.0))
    return float(zeta_em(n, theta))


def zipfian_params(min_: int, max_: int, theta: float = ZIPFIAN_CONSTANT, zetan: float | None = None) -> np.ndarray:
    """The parameter array of YCSB's ``ZipfianGenerator(min, max, theta[, zetan])``."""
    items = max_ - min_ + 1
    if items < 1:
        raise ValueError(f"zipfian generator needs max >= min, got min={min_} max={max_}")
    if not 0.0 < theta < 1.0:
        raise ValueError(f"zipfian constant must be in (0, 1) (Gray et al.'s method), got {theta}")
    if zetan is None:
        zetan = zeta(items, theta)
    zp = np.empty(ZP_SIZE, np.float64)
    zp[ZP_ITEMS] = items
    zp[ZP_BASE] = min_
    zp[ZP_THETA] = theta
    zp[ZP_ZETA2] = zeta_sum(0, 2, theta, 0.0)
    zp[ZP_ALPHA] = 1.0 / (1.0 - theta)
    zp[ZP_ZETAN] = zetan
    zp[ZP_ETA] = (1.0 - (2.0 / items) ** (1.0 - theta)) / (1.0 - zp[ZP_ZETA2] / zetan)
    zp[ZP_COUNT] = items
    zp[ZP_HALF] = 1.0 + 0.5 ** theta
    return zp


@njit(cache=True)
def zipf_next(s, zp, itemcount):
    """YCSB's ``ZipfianGenerator.nextLong(itemcount)`` (Gray et al., SIGMOD 1994)."""
    theta = zp[ZP_THETA]
    if itemcount > zp[ZP_COUNT]:
        # More items than zeta was computed for: extend zeta with the new terms. YCSB quirk, kept:
        # eta is recomputed with the item count given at construction, not the new one.
        zp[ZP_ZETAN] = zeta_grow(np.int64(zp[ZP_COUNT]), itemcount, theta, zp[ZP_ZETAN])
        zp[ZP_COUNT] = itemcount
        zp[ZP_ETA] = (1.0 - (2.0 / zp[ZP_ITEMS]) ** (1.0 - theta)) / (1.0 - zp[ZP_ZETA2] / zp[ZP_ZETAN])
    # A smaller item count keeps the old zeta (YCSB's allowitemcountdecrease=false).
    u = next_double(s)
    uz = u * zp[ZP_ZETAN]
    base = np.int64(zp[ZP_BASE])
    if uz < 1.0:
        return base
    if uz < zp[ZP_HALF]:
        return base + 1
    eta = zp[ZP_ETA]
    return base + np.int64(itemcount * (eta * u - eta + 1.0) ** zp[ZP_ALPHA])


# --- every kind behind one dispatch -------------------------------------------------------------
# ip (int64) / fp (float64) per kind:
#   constant:    ip=[value]
#   uniform:     ip=[lb, interval]
#   zipfian:     ip=[items]                 fp=zipfian params
#   scrambled:   ip=[min, itemcount]        fp=zipfian params over SCRAMBLED_ITEM_COUNT+1 items
#   hotspot:     ip=[lb, hot, cold]         fp=[hot operation fraction]
#   latest:      ip=[]                      fp=zipfian params; uses ``limit`` (the basis' last value)
#   sequential:  ip=[start, interval, counter]
#   exponential: fp=[gamma]; uses ``limit``

@njit(cache=True)
def draw(kind, s, ip, fp, limit):
    """One value of generator ``kind``. ``limit`` is the insert sequence's last acknowledged
    record number, which "latest" and "exponential" count back from."""
    if kind == K_UNIFORM:
        return ip[0] + next_below(s, ip[1])
    if kind == K_SCRAMBLED:
        v = zipf_next(s, fp, np.int64(fp[ZP_ITEMS]))
        return ip[0] + java_rem(fnvhash64(v), ip[1])
    if kind == K_ZIPFIAN:
        return zipf_next(s, fp, ip[0])
    if kind == K_LATEST:
        return limit - zipf_next(s, fp, limit)
    if kind == K_HOTSPOT:
        if next_double(s) < fp[0]:
            return ip[0] + next_below(s, ip[1])
        return ip[0] + ip[1] + next_below(s, ip[2])
    if kind == K_SEQUENTIAL:
        c = ip[2]
        ip[2] = c + 1
        return ip[0] + c % ip[1]
    if kind == K_EXPONENTIAL:
        u = next_double(s)
        x = -math.log(u) / fp[0] if u > 0.0 else 9.0e18
        if x > 9.0e18:
            x = 9.0e18  # Java's intValue() saturates rather than wrapping
        return limit - np.int64(x)
    return ip[0]


@njit(cache=True)
def draw_batch(kind, s, ip, fp, limit, out):
    for i in range(out.shape[0]):
        out[i] = draw(kind, s, ip, fp, limit)


@njit(cache=True)
def stream_batch(s, op_codes, op_weights, kkind, kip, kfp, skind, sip, sfp, limit, ops, keys, scans, counts):
    """A batch of YCSB CoreWorkload operations: ``ops`` (codes), ``keys`` (record numbers, not yet
    hashed; -1 for inserts, whose number the caller claims from the insert sequence) and
    ``scans`` (scan lengths, 0 for other operations). ``counts[op]`` counts operations and
    ``counts[COUNT_RETRIES]`` key draws rejected for lying beyond ``limit``.

    Returns the number of operations generated, or -1 if no key at or below ``limit`` could be
    drawn (the workload and the insert sequence disagree)."""
    n = ops.shape[0]
    nops = op_codes.shape[0]
    for i in range(n):
        # DiscreteGenerator.nextValue: walk the normalised weights in declaration order.
        val = next_double(s)
        op = op_codes[nops - 1]
        for j in range(nops):
            if val < op_weights[j]:
                op = op_codes[j]
                break
            val -= op_weights[j]
        ops[i] = op
        counts[op] += 1
        if op == OP_INSERT:
            keys[i] = -1
            scans[i] = 0
            continue
        # CoreWorkload.nextKeynum: redraw until the record has been acknowledged as inserted.
        tries = 0
        while True:
            k = draw(kkind, s, kip, kfp, limit)
            if 0 <= k <= limit:
                break
            tries += 1
            if tries >= MAX_KEY_TRIES:
                return -1
        counts[COUNT_RETRIES] += tries
        keys[i] = k
        scans[i] = draw(skind, s, sip, sfp, limit) if op == OP_SCAN else 0
    return n


# --- Python-facing generators -------------------------------------------------------------------

class GeneratorStats(NamedTuple):
    kind: str
    draws: int          # values generated so far
    last: int | None    # the last value generated (YCSB's lastValue), None before the first


class NumberGenerator:
    """A YCSB number generator: a kind, its parameters and its own random stream.

    ``next()`` is one value (a jitted call, ~1 us from Python); ``next_batch(n)`` fills an int64
    array in one compiled loop and is the way to draw many."""

    def __init__(self, kind: int, ip, fp, seed: int = 0, stream_id: int = 0):
        self.kind = kind
        self.ip = np.asarray(ip, dtype=np.int64)
        self.fp = np.asarray(fp, dtype=np.float64)
        if self.ip.size == 0:
            self.ip = np.zeros(1, np.int64)
        if self.fp.size == 0:
            self.fp = np.zeros(1, np.float64)
        self.rng = rng_state(seed, stream_id)
        self._draws = 0
        self._last: int | None = None

    def _limit(self) -> int:
        return 0

    def next(self) -> int:
        v = int(draw(self.kind, self.rng, self.ip, self.fp, self._limit()))
        self._draws += 1
        self._last = v
        return v

    def next_batch(self, n: int) -> np.ndarray:
        out = np.empty(int(n), np.int64)
        if n:
            draw_batch(self.kind, self.rng, self.ip, self.fp, self._limit(), out)
            self._draws += int(n)
            self._last = int(out[-1])
        return out

    def last_value(self) -> int | None:
        return self._last

    def statistics(self) -> GeneratorStats:
        return GeneratorStats(KIND_NAMES[self.kind], self._draws, self._last)


class ConstantIntegerGenerator(NumberGenerator):
    def __init__(self, value: int):
        super().__init__(K_CONSTANT, [value], [])


class UniformLongGenerator(NumberGenerator):
    """Uniform over [lb, ub], inclusive."""

    def __init__(self, lb: int, ub: int, seed: int = 0, stream_id: int = 0):
        if ub < lb:
            raise ValueError(f"uniform generator needs ub >= lb, got lb={lb} ub={ub}")
        super().__init__(K_UNIFORM, [lb, ub - lb + 1], [], seed, stream_id)


class ZipfianGenerator(NumberGenerator):
    """Zipfian over [min, max]: ``min`` is the most popular item, ``min+1`` the next, ...

    ``zetan`` may be given precomputed (as ScrambledZipfianGenerator does); otherwise it is
    computed here, which for 10^8 items is where YCSB spends minutes and we spend microseconds."""

    def __init__(self, min_: int, max_: int, theta: float = ZIPFIAN_CONSTANT, zetan: float | None = None,
                 seed: int = 0, stream_id: int = 0):
        zp = zipfian_params(min_, max_, theta, zetan)
        super().__init__(K_ZIPFIAN, [max_ - min_ + 1], zp, seed, stream_id)

    @property
    def items(self) -> int:
        return int(self.fp[ZP_ITEMS])

    @property
    def theta(self) -> float:
        return float(self.fp[ZP_THETA])

    @property
    def zetan(self) -> float:
        return float(self.fp[ZP_ZETAN])

    @property
    def eta(self) -> float:
        return float(self.fp[ZP_ETA])

    def next_long(self, itemcount: int) -> int:
        """YCSB's ``nextLong(itemcount)``: a draw over ``itemcount`` items; a larger count than
        before extends zeta incrementally (what insert-heavy workloads rely on)."""
        v = int(zipf_next(self.rng, self.fp, int(itemcount)))
        self._draws += 1
        self._last = v
        return v


class ScrambledZipfianGenerator(NumberGenerator):
    """Zipfian popularity scattered over [min, max] by fnvhash64, as YCSB's request distribution
    "zipfian" does: a 10^10-item zipfian is drawn and its item hashed onto the range."""

    def __init__(self, min_: int, max_: int, theta: float = ZIPFIAN_CONSTANT, seed: int = 0, stream_id: int = 0):
        if max_ < min_:
            raise ValueError(f"scrambled zipfian needs max >= min, got min={min_} max={max_}")
        # YCSB builds ZipfianGenerator(0, ITEM_COUNT): ITEM_COUNT + 1 items, with the precomputed
        # zeta (over ITEM_COUNT items) when the constant is the default one.
        zetan = SCRAMBLED_ZETAN if theta == ZIPFIAN_CONSTANT else None
        zp = zipfian_params(0, SCRAMBLED_ITEM_COUNT, theta, zetan)
        super().__init__(K_SCRAMBLED, [min_, max_ - min_ + 1], zp, seed, stream_id)


class HotspotIntegerGenerator(NumberGenerator):
    """``hotopnfraction`` of the draws fall uniformly in the lowest ``hotsetfraction`` of
    [lb, ub], the rest uniformly in the remainder."""

    def __init__(self, lb: int, ub: int, hotsetfraction: float, hotopnfraction: float, seed: int = 0,
                 stream_id: int = 0):
        hot, cold = hotspot_intervals(lb, ub, hotsetfraction, hotopnfraction)
        super().__init__(K_HOTSPOT, [lb, hot, cold], [hotopnfraction], seed, stream_id)


def hotspot_intervals(lb: int, ub: int, hotsetfraction: float, hotopnfraction: float) -> tuple[int, int]:
    """Sizes of the hot and cold sets of a hotspot generator, refusing the ones YCSB would divide
    by zero with (YCSB silently resets out-of-range fractions to 0; we refuse them too)."""
    if ub < lb:
        raise ValueError(f"hotspot generator needs ub >= lb, got lb={lb} ub={ub}")
    if not 0.0 <= hotsetfraction <= 1.0:
        raise ValueError(f"hotspot data fraction must be in [0, 1], got {hotsetfraction}")
    if not 0.0 <= hotopnfraction <= 1.0:
        raise ValueError(f"hotspot operation fraction must be in [0, 1], got {hotopnfraction}")
    interval = ub - lb + 1
    hot = int(interval * hotsetfraction)
    cold = interval - hot
    if hotopnfraction > 0.0 and hot == 0:
        raise ValueError(f"hotspot data fraction {hotsetfraction} of {interval} items leaves an empty hot set "
                         f"that {hotopnfraction:g} of the operations would access")
    if hotopnfraction < 1.0 and cold == 0:
        raise ValueError(f"hotspot data fraction {hotsetfraction} leaves an empty cold set "
                         f"that {1 - hotopnfraction:g} of the operations would access")
    return hot, max(cold, 1)


class SequentialGenerator(NumberGenerator):
    """start, start+1, ..., end, start, ... (YCSB's SequentialGenerator)."""

    def __init__(self, start: int, end: int):
        if end < start:
            raise ValueError(f"sequential generator needs end >= start, got {start}..{end}")
        super().__init__(K_SEQUENTIAL, [start, end - start + 1, 0], [])


class CounterGenerator:
    """0, 1, 2, ... from ``start`` (YCSB's CounterGenerator, used for load-phase record numbers)."""

    def __init__(self, start: int):
        self._next = int(start)

    def next(self) -> int:
        v = self._next
        self._next += 1
        return v

    def last_value(self) -> int:
        return self._next - 1


class AcknowledgedCounterGenerator(CounterGenerator):
    """A counter whose ``last_value`` is the highest number below which every number handed out
    has been acknowledged, as YCSB's AcknowledgedCounterGenerator (a window of 2**20 pending
    acknowledgements)."""

    def __init__(self, start: int):
        super().__init__(start)
        self._window = np.zeros(ACK_WINDOW_SIZE, np.bool_)
        self._limit = int(start) - 1

    def last_value(self) -> int:
        return self._limit

    def acknowledge(self, value: int) -> None:
        slot = value & (ACK_WINDOW_SIZE - 1)
        if self._window[slot]:
            raise RuntimeError("Too many unacknowledged insertion keys.")
        self._window[slot] = True
        index = self._limit + 1
        for _ in range(ACK_WINDOW_SIZE):
            s = index & (ACK_WINDOW_SIZE - 1)
            if not self._window[s]:
                break
            self._window[s] = False
            index += 1
        self._limit = index - 1


class SkewedLatestGenerator(NumberGenerator):
    """Popularity skewed towards the most recent records of ``basis`` (anything with a
    ``last_value()``): ``last - zipfian(last)``. YCSB quirk, kept: the zipfian never returns
    ``last`` itself, so record 0 is never drawn."""

    def __init__(self, basis, seed: int = 0, stream_id: int = 0):
        items = int(basis.last_value())
        if items < 1:
            raise ValueError(f"latest generator needs a basis with last value >= 1, got {items}")
        self.basis = basis
        super().__init__(K_LATEST, [], zipfian_params(0, items - 1), seed, stream_id)

    def _limit(self) -> int:
        return int(self.basis.last_value())


class ExponentialGenerator(NumberGenerator):
    """``limit - exponential`` with ``percentile`` % of the draws in the most recent
    ``range`` records (YCSB's request distribution "exponential"); ``basis`` gives the limit."""

    def __init__(self, percentile: float, range_: float, basis, seed: int = 0, stream_id: int = 0):
        if not 0.0 < percentile < 100.0:
            raise ValueError(f"exponential percentile must be in (0, 100), got {percentile}")
        if not range_ > 0:
            raise ValueError(f"exponential range must be > 0, got {range_}")
        self.basis = basis
        super().__init__(K_EXPONENTIAL, [], [exponential_gamma(percentile, range_)], seed, stream_id)

    def _limit(self) -> int:
        return int(self.basis.last_value())


def exponential_gamma(percentile: float, range_: float) -> float:
    return -math.log(1.0 - percentile / 100.0) / range_


def number_generator(distribution: str, lo: int, hi: int, seed: int = 0, stream_id: int = 0) -> NumberGenerator:
    """The generator YCSB builds for scan lengths ("uniform" | "zipfian" over [lo, hi]) and field
    lengths ("constant" = hi, "uniform" | "zipfian" over [lo, hi])."""
    if distribution == "constant":
        return ConstantIntegerGenerator(hi)
    if distribution == "uniform":
        return UniformLongGenerator(lo, hi, seed, stream_id)
    if distribution == "zipfian":
        return ZipfianGenerator(lo, hi, seed=seed, stream_id=stream_id)
    raise ValueError(f"unknown length distribution {distribution!r}; choose constant, uniform or zipfian")


def load_keys(start: int, count: int, hashed: bool = True, kp: np.ndarray | None = None) -> np.ndarray:
    """Key ids of records ``start .. start+count-1``: fnvhash64 of the record number when
    ``hashed`` (YCSB's insertorder=hashed), the number itself otherwise; with a key map ``kp``
    (:func:`key_map_params`, e.g. a dense ``keyspace``), ``map_keynum`` of it (``hashed`` unused)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    out = np.empty(int(count), np.int64)
    if count:
        if kp is None:
            _fill_load_keys(int(start), bool(hashed), out)
        else:
            _fill_mapped_keys(int(start), kp, out)
    return out
