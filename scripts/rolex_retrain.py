#!/usr/bin/env python3
"""ROLEX's synonym chains and insert rate over a long insert-only run, with retraining and without.

The run is ``cluster.experiments.dpastore.rolex_retrain`` (``dmrack reproduce dpastore --only
retrain`` runs it at two sizes and writes JSON rows); this script gives its sizes on the command line.

    python3 scripts/rolex_retrain.py                      # 20,000 keys, 60,000 inserts, budgets 126 and 0
    python3 scripts/rolex_retrain.py --keys 10000 --inserts 20000 --budgets 126,32,0

A co-located rack as DPA-Store's Fig. 15 runs ROLEX (``cluster/experiments/dpastore.py``
``rolex_point``: bf3 cards, 100 Gb/s links, one memory node with ROLEX's retrainer, 8-byte inline
values, SOSD-like sparse keys bulk-loaded with full leaves), but with fewer clients (``--nodes`` x
``--threads`` x ``--qd``) so that the memory node's NIC is not saturated, and for as long as the
inserts take: every fresh key lies between two loaded neighbours (the dataset grows inside its own
distribution). For each synonym budget (the option ``retrain_synonyms``; 0: never retrain) it
prints, at every ``--samples``-th of the inserts: the virtual time, the insert rate since the last
sample, the mean and longest synonym chain of the current table's primary leaves, and the
retrainer's counters (docs/rolex.md, "Retraining"). Deterministic for a seed (virtual time).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.experiments.dpastore import rolex_retrain  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=20_000, help="keys bulk-loaded (default 20,000)")
    ap.add_argument("--inserts", type=int, default=60_000, help="fresh keys inserted (default 60,000)")
    ap.add_argument("--budgets", default="126,0", help="retrain_synonyms values to run (default 126,0)")
    ap.add_argument("--nodes", type=int, default=2, help="client compute nodes (default 2)")
    ap.add_argument("--threads", type=int, default=8, help="threads per node (default 8)")
    ap.add_argument("--qd", type=int, default=4, help="coroutines per thread (default 4)")
    ap.add_argument("--samples", type=int, default=6, help="rows per budget (default 6)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    for budget in (int(b) for b in args.budgets.split(",")):
        print(f"retrain_synonyms = {budget}" + (" (never retrain)" if budget == 0 else ""))
        print(f"{'inserted':>9} {'ms':>8} {'Mops':>6} {'chain mean':>10} {'max':>4} {'retrains':>8} "
              f"{'epoch':>5} {'MN cpu ms':>9} {'busy ms':>8}")
        for r in rolex_retrain(budget, keys=args.keys, inserts=args.inserts, nodes=args.nodes, threads=args.threads,
                               qd=args.qd, samples=args.samples, seed=args.seed):
            print(f"{r['inserted']:>9,} {r['ms']:>8.2f} {r['mops']:>6.3f} {r['chain_mean']:>10.2f} {r['chain_max']:>4} "
                  f"{r['retrains']:>8} {r['epoch']:>5} {r['cpu_ms']:>9.2f} {r['busy_ms']:>8.2f}", flush=True)
        st = r["stats"]
        if st.retrains:
            print(f"  {st.retrains} retrains: {st.keys:,} keys re-laid, {st.leaves_read:,} leaves READ "
                  f"({st.synonyms_merged:,} synonym leaves merged), {st.leaves_written:,} written, "
                  f"{st.lock_rounds} lock rounds met a taken lock, longest chain merged {st.longest_chain}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
