"""FlexKV's encodings on top of RACE's (nodes/systems/race/layout.py).

FlexKV keeps RACE's index in the memory nodes (FlexKV §2.2, "index partitions are RACE subtables")
and adds three things to its words, all in bits RACE leaves free:

* **Deleted slots** carry the paper's ``valid = 0 | T_delete``: a slot word whose length field
  (``units``) is 0 is a *tombstone*: ``fp:8 | 0:8 | T_delete:47 | 0:1``. A committed RACE slot
  always has ``units >= 1``, so RACE's clients skip tombstones as they skip empty slots
  (``race.layout.slot_is_tombstone``). Why not clear the slot as RACE does: an INSERT may reuse a
  deleted slot only after ``T_delete + T_lease (1 + drift)`` (§3.5, cached slot addresses are
  leases), and a client whose delete RPC timed out recognises its own tombstone (its ``T_delete``)
  when it retries against the memory node, so a delete that took effect is never reported as
  "missing".
* **The KV pair's valid bit** (§2.2.2, address-cache validation): the top bit of the block
  header's ``key_len`` (u16, keys are far below 32 KiB). Set means *invalid*, so a freshly written
  block is valid without any change to RACE's block encoding. A proxy sets it with a 1-byte WRITE
  on the pair an UPDATE or DELETE replaces, before its commit, so a client reading a cached address
  after the commit sees the pair is stale.
* **Partitions** are the RACE subtables: the table is built with ``2**d`` subtables, ``d`` chosen
  from the ``partitions`` option, so the hash suffix that picks a key's directory entry is its
  partition (FlexKV's prototype uses subtables as its unit of partitioning, §4).

The partition map a compute node uses is a vector of int16, one per partition: the fabric index of
the compute node whose proxy owns the partition's index, or ``ON_MEMORY`` (-1) when the partition
is not offloaded and is served one-sidedly from the memory nodes (FlexKV's "non-proxied" path).
"""

from __future__ import annotations

import numpy as np

from nodes.systems.race.layout import FP_SHIFT, UNITS_SHIFT

ON_MEMORY = -1
MAP_DTYPE = np.int16

_T_BITS = 47
T_MASK = (1 << _T_BITS) - 1
#: key_len's top bit in the KV block header (little-endian u16 at byte 0): the pair is invalid
INVALID_BYTE = 1
INVALID_BIT = 0x80


def tombstone(fp: int, t_delete_ns: int) -> int:
    """The slot word of a key deleted at virtual time ``t_delete_ns``."""
    return (fp << FP_SHIFT) | ((t_delete_ns & T_MASK) << 1)


def is_tombstone(w: int) -> bool:
    return w != 0 and not (w >> UNITS_SHIFT) & 0xFF


def tomb_time(w: int) -> int:
    return (w >> 1) & T_MASK


def is_pair(w: int) -> bool:
    """A committed slot pointing at a KV pair (not empty, not a tombstone, not tentative)."""
    return bool((w >> UNITS_SHIFT) & 0xFF) and not w & 1


def reusable(w: int, now_ns: int, lease_ns: int, drift: float) -> bool:
    """May an INSERT take slot word ``w`` now? Empty, or a tombstone whose lease ran out:
    ``T_delete + T_lease (1 + drift) <= now`` (clocks of different nodes drift apart by at most
    ``drift``, so a cached slot lease that some node still believes valid has expired everywhere)."""
    if w == 0:
        return True
    return is_tombstone(w) and tomb_time(w) + lease_ns * (1 + drift) <= (now_ns & T_MASK)


def pick_tombstone(slots, now_ns: int, lease_ns: int, drift: float):
    """Among ``slots`` (``(slot id, word)`` pairs: a key's buckets when none is empty), the first
    deleted slot an insert may take now: ``(slot id, word, None)``; else ``(None, None, wait)``
    with the ns until the first one may be taken (None: no deleted slot at all)."""
    wait = None
    for sid, w in slots:
        if not is_tombstone(w):
            continue
        if reusable(w, now_ns, lease_ns, drift):
            return sid, w, None
        left = tomb_time(w) + int(lease_ns * (1 + drift)) - (now_ns & T_MASK) + 1
        wait = left if wait is None else min(wait, left)
    return None, None, wait


def partition_bits(partitions: int) -> int:
    """log2 of a power-of-two partition count."""
    if partitions < 1 or partitions & (partitions - 1):
        raise ValueError(f"partitions must be a power of two, got {partitions}")
    return partitions.bit_length() - 1
