#!/usr/bin/env python3
"""ROLEX's synonym chains and insert rate over a long insert-only run, with retraining and without.

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

import numpy as np  # noqa: E402


def fresh_keys(loaded: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` keys not in ``loaded``: points strictly between loaded neighbours, shuffled."""
    rng = np.random.default_rng(seed + 7)
    lo, hi = loaded[:-1], loaded[1:]
    ok = (hi - lo) > count // len(lo) + 2
    lo, gap = lo[ok], (hi - lo)[ok]
    per = -(-count // len(lo))
    out = []
    for j in range(1, per + 1):
        out.append(lo + gap * np.uint64(j) // np.uint64(per + 1))
    keys = np.unique(np.concatenate(out))
    keys = keys[~np.isin(keys, loaded)]
    rng.shuffle(keys)
    return keys[:count]


def run(budget: int, args) -> list[dict]:
    from cluster.experiments.dpastore import NETWORK, PROFILE, dataset_keys
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict, with_rack_tables
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from nodes.systems import get_system
    from nodes.systems.rolex.retrain import chain_lengths, retrain_stats
    from shm.coro import NodeRdma
    from shm.sim.env import Environment
    from shm.verbs import VerbsHost
    system = get_system("rolex")
    ks = dataset_keys("sparse", args.keys, args.seed)
    fresh = fresh_keys(ks, args.inserts, args.seed)
    n = len(ks) + len(fresh)
    d = with_rack_tables(system, {
        "rack": {"name": "rolex-retrain", "profile": PROFILE, "seed": args.seed},
        "profile_overrides": dict(NETWORK),
        "compute": {"count": args.nodes, "threads": args.threads, "coroutines": args.qd, "memory": "64MiB"},
        "memory": {"count": 1, "memory": f"{max(64, n * 160 // (1 << 20) + 64)}MiB"},
        "system": {"name": "rolex", "values": "inline", "retrain_synonyms": budget, "leaf_headroom": 8.0},
        "workload": {"preset": "c", "recordcount": n}})
    compiled = compile_scenario(scenario_from_dict(d, source="rolex retrain"))
    rows = []
    with RackState.create(compiled, processes=False) as state:
        system.bulk_load(state.fabric, state.layout, ((int(k).to_bytes(8, "big"), int(k).to_bytes(8, "little"))
                                                      for k in ks.tolist()))
        env = Environment(seed=args.seed)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        start_actors(system, actor_contexts(state, env, host, udp=udp))
        cursor, done = [0], [0]

        def loop(cli, co):
            while cursor[0] < len(fresh):
                k = int(fresh[cursor[0]]).to_bytes(8, "big")
                cursor[0] += 1
                if not (yield from cli.insert(co, k, k[::-1])):
                    raise RuntimeError(f"insert of a fresh key {k.hex()} failed")
                done[0] += 1

        for c in range(args.nodes):
            node = NodeRdma(host, f"cn{c}")
            node.udp = udp
            for _ in range(args.threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                for _q in range(args.qd):
                    env.process(loop(cli, th.coroutine()))
        marks = [len(fresh) * (i + 1) // args.samples for i in range(args.samples)]
        last_t, last_done = 0, 0
        step = 100_000                                   # virtual ns between looks at the count
        for mark in marks:
            while done[0] < mark:
                env.run(until=env.now + step)
            chains = chain_lengths(state.fabric, state.layout)
            st = retrain_stats(state.fabric, state.layout)
            rows.append({"inserted": done[0], "ms": env.now / 1e6, "stats": st,
                         "mops": (done[0] - last_done) / max(1, env.now - last_t) * 1e3,
                         "chain_mean": float(np.mean(chains)), "chain_max": int(max(chains)),
                         "retrains": st.retrains, "epoch": st.epoch, "cpu_ms": st.cpu_ns / 1e6,
                         "busy_ms": st.busy_ns / 1e6})
            last_t, last_done = env.now, done[0]
    return rows


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
        for r in run(budget, args):
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
