"""The ``dmrack`` command line.

Subcommands are thin: each parses its arguments and calls one function of the package, so the same
work is reachable from Python. Errors in user input end with a one-line message and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys


def _cmd_bench(args) -> int:
    if args.suite != "verbs":
        print(f"dmrack bench: unknown suite {args.suite!r}; available: verbs", file=sys.stderr)
        return 2
    from cluster import bench_verbs
    only = [x for x in (args.only or "").split(",") if x] or None
    unknown = [x for x in only or [] if x not in bench_verbs.EXPERIMENTS]
    if unknown:
        print(f"dmrack bench verbs: unknown experiment {unknown[0]!r}; choose from "
              f"{', '.join(bench_verbs.EXPERIMENTS)}", file=sys.stderr)
        return 2
    bench_verbs.run(only=only, quick=args.quick, json_path=args.json)
    return 0


def _cmd_profiles(args) -> int:
    from rich.console import Console
    from rich.table import Table
    from shm.profile import list_profiles, load_profile
    table = Table(title="hardware profiles")
    for col in ("name", "link", "one-way", "PCIe", "doorbells", "WQE cache", "description"):
        table.add_column(col)
    for name in list_profiles():
        p = load_profile(name)
        table.add_row(name, f"{p.link.gbps:g} Gb/s", f"{p.link.one_way_ns} ns", f"{p.pcie.gbps:g} Gb/s",
                      f"{p.doorbell.low_latency}+{p.doorbell.medium_latency}", str(p.wqe_cache.capacity),
                      p.description)
    Console().print(table)
    return 0


def _cmd_clean(args) -> int:
    from shm.segment import list_segments, reclaim_stale
    gone = reclaim_stale()
    left = list_segments()
    print(f"dmrack clean: removed {len(gone)} stale segment(s)"
          + (f"; {len(left)} segment(s) of live racks left alone" if left else ""))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dmrack", description="Emulated disaggregated-memory rack")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="benchmarks that print published vs emulated tables")
    b.add_argument("suite", help="which suite: verbs")
    b.add_argument("--quick", action="store_true", help="reduced sweeps (all tables in about two minutes)")
    b.add_argument("--json", metavar="PATH", help="also write the rows as JSON records")
    b.add_argument("--only", metavar="EXP[,EXP]", help="run only these experiments")
    b.set_defaults(func=_cmd_bench)

    p = sub.add_parser("profiles", help="list the shipped hardware profiles")
    p.set_defaults(func=_cmd_profiles)

    c = sub.add_parser("clean", help="remove shared memory left behind by dead racks")
    c.set_defaults(func=_cmd_clean)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("dmrack: interrupted", file=sys.stderr)
        return 130
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"dmrack {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
