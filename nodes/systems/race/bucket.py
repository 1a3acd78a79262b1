"""Combined buckets: where a key's two combined buckets are, and one jitted pass over them.

A subtable is an array of 3-bucket groups ``[main 0 | overflow | main 1]`` (RACE §3.2). Main
bucket ``m`` lives in group ``m // 2``; its *combined bucket* is the 128 contiguous bytes made of
the main bucket and the group's overflow bucket: ``[main 0 | overflow]`` for an even ``m`` (side
0), ``[overflow | main 1]`` for an odd one (side 1). One READ of 128 bytes fetches it.

A key's two combined buckets may coincide (same main bucket) or share the overflow bucket (the two
main buckets of one group); :func:`probe` says which of the second combined bucket's buckets
duplicate the first's so :func:`scan` counts every slot once.

Slots are numbered 0..27 in the order they are read: the first combined bucket's two buckets
(0..13), then the second's (14..27), 7 per bucket; :func:`slot_offset` maps a number back to the
slot's byte offset in the memory node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nodes.systems.lib.hashing import B1_SHIFT, B2_SHIFT, BUCKET_BITS, BUCKET_MASK
from .layout import BUCKET_BYTES, COMBINED_SLOTS, GROUP_BYTES, SLOTS_PER_BUCKET, WORD

# flags of a probe
SIDE_A = 1          # the first combined bucket is [overflow | main 1]
SIDE_B = 2          # the second combined bucket is [overflow | main 1]
SKIP_B0 = 4         # the second combined bucket's first bucket is one of the first's
SKIP_B1 = 8         # ... its second bucket is one of the first's
SAME = SKIP_B0 | SKIP_B1

MAX_MATCHES = 2 * COMBINED_SLOTS
NO_SLOT = -1
HEADER_MISMATCH = -1


def probe(h: int, base: int, n_main: int) -> tuple[int, int, int]:
    """``(offset_a, offset_b, flags)``: the node offsets of a hash's two combined buckets in the
    subtable at ``base`` with ``n_main`` main buckets, and the SIDE/SKIP flags for :func:`scan`."""
    ma = (((h >> B1_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS
    mb = (((h >> B2_SHIFT) & BUCKET_MASK) * n_main) >> BUCKET_BITS
    sa = ma & 1
    sb = mb & 1
    off_a = base + (ma >> 1) * GROUP_BYTES + sa * BUCKET_BYTES
    off_b = base + (mb >> 1) * GROUP_BYTES + sb * BUCKET_BYTES
    flags = sa | (sb << 1)
    if ma == mb:
        flags |= SAME
    elif ma >> 1 == mb >> 1:
        # one group, two sides: the overflow bucket is shared ([m0|ovf] and [ovf|m1])
        flags |= SKIP_B0 if sb else SKIP_B1
    return off_a, off_b, flags


def slot_offset(idx: int, off_a: int, off_b: int) -> int:
    """The node offset of slot number ``idx`` (0..27) of a probe."""
    p, s = divmod(idx, SLOTS_PER_BUCKET)
    return (off_a if p < 2 else off_b) + (p & 1) * BUCKET_BYTES + WORD * (1 + s)


# The same arithmetic for compiled callers (the bulk load's kernel, nodes/systems/race/bulk.py),
# which pass the hash's low 63 bits as an int64: probe reads bits 16..55 only. The
# clients call the plain functions: from Python a numba call costs more than the arithmetic.
probe_nb = njit(cache=True)(probe)
slot_offset_nb = njit(cache=True)(slot_offset)


@njit(cache=True)
def scan(buf64, wa, wb, flags, fp, header, out):
    """One pass over two combined buckets read into ``buf64`` (the thread buffer as uint64) at
    word offsets ``wa`` and ``wb``.

    * every bucket header must equal ``header`` (the cached directory's view), else -1;
    * the non-empty slots whose fingerprint is ``fp`` go to ``out`` as (slot number, word) pairs;
    * the free slot an insert should take: in the combined bucket with more free slots (the
      first on a tie), its main bucket first, then its overflow bucket (RACE's placement).

    Returns ``matches + 64 * (free slot number + 1)`` (free slot number -1 if both are full)."""
    fpv = np.uint64(fp)
    hdr = np.uint64(header)
    n = 0
    ff0 = ff1 = ff2 = ff3 = -1          # first free slot number of each of the 4 buckets
    c0 = c1 = c2 = c3 = 0               # free slots of each bucket
    for p in range(4):
        if (p == 2 and flags & 4) or (p == 3 and flags & 8):
            continue
        w0 = (wa if p < 2 else wb) + (p & 1) * 8
        if buf64[w0] != hdr:
            return -1
        first = -1
        c = 0
        for s in range(7):
            w = buf64[w0 + 1 + s]
            if w == 0:
                if first < 0:
                    first = p * 7 + s
                c += 1
            elif (w >> np.uint64(56)) == fpv:
                out[2 * n] = np.uint64(p * 7 + s)
                out[2 * n + 1] = w
                n += 1
        if p == 0:
            ff0, c0 = first, c
        elif p == 1:
            ff1, c1 = first, c
        elif p == 2:
            ff2, c2 = first, c
        else:
            ff3, c3 = first, c
    # a bucket the second combined bucket shares with the first is numbered (and counted) in the
    # first: the shared overflow is A's bucket 1 when A is [main 0|ovf], its bucket 0 otherwise
    if flags & 12 == 12:
        ff2, c2, ff3, c3 = ff0, c0, ff1, c1
    elif flags & 4:
        ff2, c2 = (ff0, c0) if flags & 1 else (ff1, c1)
    elif flags & 8:
        ff3, c3 = (ff0, c0) if flags & 1 else (ff1, c1)
    # main bucket first, then overflow: side 0 = [main|ovf], side 1 = [ovf|main]
    if c2 + c3 > c0 + c1:
        if flags & 2:
            chosen = ff3 if ff3 >= 0 else ff2
        else:
            chosen = ff2 if ff2 >= 0 else ff3
    else:
        if flags & 1:
            chosen = ff1 if ff1 >= 0 else ff0
        else:
            chosen = ff0 if ff0 >= 0 else ff1
    return n + 64 * (chosen + 1)
