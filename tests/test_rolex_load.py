"""ROLEX under DPA-Store's client load, and the calendar aliasing it exposed (2026-11-25).

``rolex_point`` at 6 compute nodes x 31 threads x 32 coroutines reported 122 Mops of GETs through
one memory node's 100 Gb/s link, when each GET READs at least one 1 KiB leaf (at most ~12 M leaves
a second fit). The cause was not ROLEX: the NIC calendars (``shm/calendar.py``) are rings of
buckets, then 4096 x 64 ns = 262 us, and that load queues ~1.6 ms of READ responses on the
memory node's link (and READs behind ``max_rd_atomic`` on each QP, booked that far ahead). A
booking more than a ring span ahead reset buckets still holding live work, requests stamped then
found a later tag and were served without queueing ("stale"): the link carried 20x its capacity.
The per-node rings are now 65536 buckets (``shm.nic.NODE_RING``, 4.2 ms), and a ring that
aliases is counted (``overflows``, ``stale``), reported by ``Fabric.calendar_errors`` and warned
about when the fabric closes.

Small and in virtual time: 2 x 31 x 32 coroutines on 5,000 keys already outran the old rings
(17.8 Mops reported).
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.dpastore import NETWORK, rolex_point
from nodes.systems.rolex.core import LEAF_BYTES
from shm.calendar import ResourceLayout, reserve


def test_rolex_gets_cannot_outrun_the_memory_nodes_link():
    r = rolex_point(keys=5000, op="get", client_nodes=2, client_threads=31, qd=32, window_us=(100, 100))
    link_bytes_per_us = NETWORK["link.gbps"] * 1e3 / 8          # 12,500 B per us at 100 Gb/s
    most = link_bytes_per_us / LEAF_BYTES                         # Mops if a GET READ one leaf, no headers
    assert r["failed"] == 0 and r["ops"] > 100
    assert r["calendar_errors"] == 0
    assert r["mops"] <= most, (r, most)
    assert r["mops"] > 0.5 * most / 3                              # and the link is busy (2-3 leaves per GET)


def test_a_backlog_longer_than_the_ring_is_counted():
    """A resource asked to queue past its ring's span is no longer a FIFO: the calendar says so."""
    lay = ResourceLayout()
    o = lay.add("r", 1, 1000, 16)                 # 16 buckets of 1 ns: a 16 ns span
    tbl = np.zeros(lay.words, dtype=np.int64)
    lay.initialise(tbl)
    for _ in range(8):                            # 8 x 3 ns queued at t=0: a 24 ns backlog
        reserve(tbl, o, 0, 3000)
    assert lay.statistics(tbl, "r").overflows > 0
    # below the span nothing is counted, and untouched buckets are not mistaken for live ones
    lay2 = ResourceLayout()
    o2 = lay2.add("r", 1, 1000, 16)
    tbl2 = np.zeros(lay2.words, dtype=np.int64)
    lay2.initialise(tbl2)
    for _ in range(4):
        reserve(tbl2, o2, 0, 3000)
    reserve(tbl2, o2, 100_000, 3000)
    st = lay2.statistics(tbl2, "r")
    assert st.overflows == 0 and st.stale == 0


def test_a_bucket_untouched_for_long_is_not_taken_for_a_later_one():
    """With 64 ns buckets a 24-bit tag wrapped its half range at 537 ms: a bucket first used then
    (or never since the start) was taken for a later time, and the request served unqueued."""
    lay = ResourceLayout()
    o = lay.add("r", 1, 64_000, 65536)
    tbl = np.zeros(lay.words, dtype=np.int64)
    lay.initialise(tbl)
    t = 600_000_000_000                              # 600 ms in ps
    assert reserve(tbl, o, t, 100_000) == t + 100_000
    assert reserve(tbl, o, t, 100_000) == t + 200_000   # queues behind the first
    assert lay.statistics(tbl, "r").stale == 0
