#!/usr/bin/env python3
"""READs, bytes, round trips and virtual latency per SMART-ART scan (docs/smart_art.md, "Scans").

    PYTHONPATH=$PWD python3 scripts/smart_art_scan_cost.py [--threads 4] [--scans 60]

Dolphin's ``--quick`` tree (16 384 keys drawn from a key space of 32 768, big-endian, 8-byte
values, ``full_nodes``; cluster/experiments/dolphin.py), bulk-loaded on ``cx5-100g`` with 4 memory
nodes; one compute node of ``--threads`` threads x 1 coroutine, each running ``--scans`` scans of
uniform 1-100 items from uniform start keys (Dolphin's range-only). Co-located, deterministic.
"""

from __future__ import annotations

import argparse
import random
import statistics

from cluster.correctness.conformance import rig
from nodes.systems.smart_art import SmartArtSystem

RECORDS = 16_384


def _k(i: int) -> bytes:
    return i.to_bytes(8, "big")


class TracingCo:
    """A coroutine whose READs, bytes and round trips (syncs with verbs outstanding) are counted."""

    def __init__(self, co):
        self.co, self.reads, self.bytes, self.rounds = co, 0, 0, 0

    def __getattr__(self, name):
        return getattr(self.co, name)

    def read(self, addr, length):
        self.reads += 1
        self.bytes += length
        return self.co.read(addr, length)

    def sync(self):
        if self.co.queued or self.co.in_flight:
            self.rounds += 1
        return self.co.sync()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--scans", type=int, default=60)
    a = ap.parse_args()
    if a.threads < 1 or a.scans < 1:
        ap.error("--threads and --scans must be at least 1")
    with rig(SmartArtSystem, compute_threads=a.threads, memory_nodes=4, profile="cx5-100g",
             options={"full_nodes": True, "local_lock": False}, memory_bytes=256 << 20) as r:
        ids = sorted(random.Random(1).sample(range(2 * RECORDS), RECORDS))
        SmartArtSystem.bulk_load(r.fabric, r.layout, [(_k(i), i.to_bytes(8, "little")) for i in ids])
        rows = []

        def body(cl, co, i):
            rnd = random.Random(100 + i)
            t = TracingCo(co)
            for _ in range(a.scans):
                start, count = _k(rnd.randrange(2 * RECORDS)), rnd.randint(1, 100)
                v0, b0, r0, t0 = t.reads, t.bytes, t.rounds, r.env.now
                got = yield from cl.wrapped.scan(t, start, count)
                rows.append((count, len(got), t.reads - v0, t.bytes - b0, t.rounds - r0, r.env.now - t0))

        r.each(body)

    def show(name, xs):
        if not xs:                      # a short run may draw no scan of this length
            print(f"{name}: no scans")
            return
        print(f"{name}: scans {len(xs)}, items {statistics.mean(x[1] for x in xs):.1f}, "
              f"READs {statistics.mean(x[2] for x in xs):.1f}, bytes {statistics.mean(x[3] for x in xs):,.0f}, "
              f"round trips {statistics.mean(x[4] for x in xs):.2f}, latency mean "
              f"{statistics.mean(x[5] for x in xs) / 1e3:.1f} us, p50 {statistics.median(x[5] for x in xs) / 1e3:.1f} us")

    print(f"{a.threads} threads, per scan:")
    show("all (1-100 items)", rows)
    show("short (<= 10 items)", [x for x in rows if x[0] <= 10])


if __name__ == "__main__":
    main()
