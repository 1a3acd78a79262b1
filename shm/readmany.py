"""Many READs queued in one call: their work-request rows packed by one compiled pass.

``co.read_many(addrs, length)`` (shm/coro.py) queues the same READs as ``co.read(a, length)`` for
each address in order, with the same buffer offsets, and they are priced, landed and completed
exactly as those would be. What it saves is Python per READ: a coroutine that reads eight words
per doorbell spent about a third of its bytecodes queueing them one by one (a call, a handle, a
tuple each: ``scripts/count_work.py coroutine``) and as many packing the tuples into the model's
rows at the post. Here one compiled pass fills a private row array at queue time, checks that
every address names one node, and says whether each READ stays within one 64-byte line of host
memory (what a post must be for its READs to land late, shm/deferred.py). Such a block, of at
least ``DEFER_MIN`` READs and posted alone, goes to the NIC model and straight to a ``ReadBatch``
with those rows. Fewer READs, a line crossed, device memory or several nodes: the READs are queued
one by one at once, as ``read`` queues them; a block its post cannot take whole (persistent
memory, throttled posts, deferral off, other verbs queued beside it) becomes those READs then.

:func:`pack_reads_py` is the plain-Python reference of the compiled :func:`pack_reads`;
tests/test_readmany.py compares them on random addresses.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from shm import nic
from shm.fabric import NODE_BITS, NODE_MASK, NODE_SHIFT, OFFSET_BITS, OFFSET_MASK, REGION_HOST, REGION_MASK
from shm.kernels import entry

#: added to :func:`pack_reads`'s node when every READ is a one-line READ of host memory
ONE_LINE_HOST = 1 << NODE_BITS


def pack_reads_py(rows, addrs, length, base, stride, flags):
    """Fill ``rows`` (one per address, ``nic.WR_*`` columns) with READs of ``length`` bytes at the
    global addresses ``addrs`` (int64: a global address's 64 bits, two's complement), READ ``i``
    landing at ``base + i * stride`` in the thread's buffer, ``flags`` on the first one only (a
    fence is taken by the first verb queued after it). Returns the node the addresses name, plus
    :data:`ONE_LINE_HOST` if each READ stays within one 64-byte line of host memory; -1 if they
    name more than one node, -2 if one is negative as an int64 (a node of 2,048 or above, or a
    negative address): the caller queues those READ by READ."""
    node = (addrs[0] >> NODE_SHIFT) & NODE_MASK     # masked: an arithmetic shift keeps the bits
    one_line = True
    for i in range(addrs.shape[0]):
        a = addrs[i]
        if a < 0:
            return -2
        if (a >> NODE_SHIFT) & NODE_MASK != node:
            return -1
        off = a & OFFSET_MASK
        region = (a >> OFFSET_BITS) & REGION_MASK
        rows[i, nic.WR_OP] = nic.VERB_READ
        rows[i, nic.WR_LEN] = length
        rows[i, nic.WR_OFF] = off
        rows[i, nic.WR_REGION] = region
        rows[i, nic.WR_FLAGS] = flags if i == 0 else 0
        rows[i, nic.WR_OUT] = 0
        rows[i, nic.WR_OUT + 1] = 0
        rows[i, nic.WR_OUT + 2] = 0
        rows[i, nic.WR_LOFF] = base + i * stride
        if region != REGION_HOST or (off & 63) + length > 64:
            one_line = False
    return node + ONE_LINE_HOST if one_line else node


pack_reads = njit(cache=True)(pack_reads_py)


def pack_reads_entry():
    """:func:`pack_reads` entered without numba's typing (shm/kernels.py): the rows and addresses
    are arrays ``read_many`` makes itself (int64, C order)."""
    return entry(pack_reads, np.zeros((1, nic.WR_COLS), np.int64), np.zeros(1, np.int64), 0, 0, 0, 0)
