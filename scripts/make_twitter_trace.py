#!/usr/bin/env python3
"""Write a synthetic trace in Twitter's cache-trace CSV format (workloads/twitter_synth.py).

    python3 scripts/make_twitter_trace.py cluster8 out/cluster8.csv --keys 10000 --rows 100000
    python3 scripts/make_twitter_trace.py custom out/t.csv --alpha 0.9 --read-ratio 0.5 \\
        --value-size lognormal:230:1.0

``cluster8`` and ``cluster9`` are *stand-ins* for Twitter's traces of those clusters (which are not
available here): write-intensive and read-only, with the parameters and reasons given in
workloads/twitter_synth.py. Every option overrides the preset's value.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workloads.twitter_synth import PRESETS, SynthParams, write_trace  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", choices=sorted(PRESETS) + ["custom"], help="stand-in to start from")
    ap.add_argument("out", help="CSV file to write")
    ap.add_argument("--keys", type=int, help="distinct keys")
    ap.add_argument("--rows", type=int, help="trace length (requests)")
    ap.add_argument("--alpha", type=float, help="Zipf skew (p ~ rank^-alpha, > 0)")
    ap.add_argument("--read-ratio", type=float, help="fraction of gets")
    ap.add_argument("--delete-ratio", type=float, help="fraction of deletes (the rest are sets)")
    ap.add_argument("--value-size", help="lognormal:MEDIAN:SIGMA, uniform:LO:HI or fixed:N (bytes)")
    ap.add_argument("--clients", type=int, help="client ids in the client column")
    ap.add_argument("--rate", type=float, help="rows per second of trace time")
    ap.add_argument("--seed", type=int, help="random seed")
    a = ap.parse_args(argv)
    p = PRESETS.get(a.preset, SynthParams())
    given = {"keys": a.keys, "rows": a.rows, "alpha": a.alpha, "read_ratio": a.read_ratio,
             "delete_ratio": a.delete_ratio, "value_size": a.value_size, "clients": a.clients, "rate": a.rate,
             "seed": a.seed}
    p = p._replace(**{k: v for k, v in given.items() if v is not None})
    try:
        n = write_trace(a.out, p)
    except (ValueError, OSError) as e:
        print(f"make_twitter_trace: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {n} rows, {p.keys} keys, alpha {p.alpha:g}, read ratio {p.read_ratio:g}, delete ratio "
          f"{p.delete_ratio:g}, values {p.value_size}, seed {p.seed} ({a.preset}"
          f"{' stand-in' if a.preset in PRESETS else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
