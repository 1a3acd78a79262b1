"""Count the work of one ``dmrack bench speed`` row instead of timing it: the Python bytecodes
its timed run executes per verb, by function (and by line for the functions you name), and with
``--instructions`` the CPU instructions of the same run under valgrind's callgrind.

Why: the speed rows are real time, and on a shared 2-core VM one run differs from the next by
10-15 % (docs/bench.md), as much as a change to the per-post path usually saves, so an A/B pair
of wall-clock runs cannot tell a 3 % change from noise. What the emulator executes for a given
row is deterministic (its virtual-time results are), so counting it compares two commits
exactly: the same row on both gives the same count run after run (callgrind's instruction count
to ~0.02 %), on any machine. Counts are not times: a bytecode that calls into numba or numpy
counts once, a cache miss not at all, so confirm a change that the counts favour with the wall
clock (``dmrack bench speed``, several runs) before claiming a speed-up.

Only the row's timed part is counted (the same part ``bench speed`` times: after the warm-up
run, the rig's making, the addresses and the page faults), with the command's garbage-collector
thresholds (``cluster.cli.GC_THRESHOLDS``).

    python3 scripts/count_work.py coroutine                    # 32 threads x depth 8, 100 virtual µs
    python3 scripts/count_work.py coroutine --depth 1 --lines _post_to,_land
    python3 scripts/count_work.py race --window-us 500 --instructions   # needs valgrind

Rows: ``coroutine`` (``coroutine_loop``), ``read_many`` (the same loop queueing each doorbell's
READs with ``co.read_many``: the same verbs), ``raw`` (``raw_verbs_loop``), ``race`` and ``sherman``
(``speed.ycsb_a``: 16 threads x 8 coroutines, 5,000 keys, loaded by inserts then YCSB-A). Compare
counts made in one checkout: two runs there agree within about 0.05 %, while the same commit
counted from another directory has differed by up to 1 % (where objects land in memory moves with
the paths, and some of the work follows it). What moves it is the path's length: two worktrees of
one commit at paths of the same length counted the same (``coroutine``: 174,559,342 instructions
in both), so a before/after pair may also be counted in two such worktrees, side by side.
Tracing every bytecode makes the run ~30x slower; callgrind ~50x. Exit status 2 for bad
arguments or a missing valgrind.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROWS = ("coroutine", "read_many", "raw", "race", "sherman")
DEPTH_ROWS = ("coroutine", "read_many")      # the rows whose loop takes --depth
_TOGGLE = "DMRACK_COUNT_WORK_TOGGLE"     # set in the child that runs under callgrind


class BytecodeCounter:
    """A trace function counting opcodes per (file, function) and, for the functions in
    ``lines``, per line. Installed with sys.settrace; generator frames resumed while it is
    installed are traced too (each resumption is a "call" event)."""

    def __init__(self, lines=()):
        self.ops: Counter = Counter()
        self.calls: Counter = Counter()
        self.by_line: Counter = Counter()
        self.lines = set(lines)
        self._keys: dict = {}           # code object -> "file:function", made once per function

    def __call__(self, frame, event, arg):
        code = frame.f_code
        key = self._keys.get(code)
        if key is None:
            key = self._keys[code] = f"{_short(code.co_filename)}:{code.co_name}"
        if event == "opcode":
            self.ops[key] += 1
            if code.co_name in self.lines:
                self.by_line[(key, frame.f_lineno or 0)] += 1
        elif event == "call":           # a frame's first event (a generator's at each resumption)
            frame.f_trace_opcodes = True
            self.calls[key] += 1
        return self


def _short(path: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    return path[len(root):] if path.startswith(root) else os.path.basename(path)


def _collect_before_counting() -> None:
    """Finalise what earlier work left for the cycle collector before the count starts: otherwise
    a collection inside the window runs those objects' finalisers (a dropped generator's
    ``finally``, a segment's ``__del__``) and their code is counted as the row's, a few hundred
    bytecodes that depend on what the process did before (a test run's earlier tests)."""
    gc.collect()


@contextmanager
def tracing(counter: BytecodeCounter):
    _collect_before_counting()
    sys.settrace(counter)
    try:
        yield
    finally:
        sys.settrace(None)


@contextmanager
def callgrind_window():
    """Callgrind's instrumentation on for the timed part only (the child runs with
    ``--instr-atstart=no``)."""
    pid = str(os.getpid())
    _collect_before_counting()
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=False)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=False)


def run_row(row: str, window_ns: int, depth: int, around) -> dict:
    """Warm the row's kernels as ``bench speed`` does, then run it once with ``around`` entered
    around its timed part; returns the verbs (and operations) it completed."""
    from cluster.experiments import bench_verbs, speed
    if row in DEPTH_ROWS:
        many = row == "read_many"
        bench_verbs.coroutine_loop(8, 20_000, depth=depth, many=many)
        verbs, _ = bench_verbs.coroutine_loop(32, window_ns, depth=depth, around=around, many=many)
        return {"verbs": verbs}
    if row == "raw":
        bench_verbs.raw_verbs_loop(2, 20_000)
        verbs, _ = bench_verbs.raw_verbs_loop(32, window_ns, around=around)
        return {"verbs": verbs}
    got = speed.ycsb_a(row, records=5_000, threads=16, coroutines=8, run_ms=window_ns / 1e6, around=around)
    return {"verbs": got["verbs"], "ops": got["ops"]}


def count_bytecodes(row: str, window_ns: int, depth: int, lines=()) -> dict:
    """The row's bytecodes: totals, per verb, and per function (and line) as a JSON-able dict."""
    counter = BytecodeCounter(lines)
    got = run_row(row, window_ns, depth, lambda: tracing(counter))
    verbs = got["verbs"]
    total = sum(counter.ops.values())
    return {
        "row": row, "window_ns": window_ns, "depth": depth if row in DEPTH_ROWS else None, **got,
        "bytecodes": total, "bytecodes_per_verb": total / verbs if verbs else None,
        "functions": [{"function": k, "bytecodes": c, "per_verb": c / verbs if verbs else None,
                       "calls_per_verb": counter.calls[k] / verbs if verbs else None}
                      for k, c in counter.ops.most_common()],
        "lines": [{"function": k, "line": ln, "per_verb": c / verbs if verbs else None}
                  for (k, ln), c in sorted(counter.by_line.items())],
    }


def callgrind_count(cmd: list[str]) -> tuple[dict, int]:
    """Run ``cmd`` (a Python child that reports on its last line of output, as JSON, and turns
    the instrumentation on with :func:`callgrind_window` around what is to be counted) under
    callgrind with the instrumentation off at start; returns its report and the instructions counted."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("count_work.py: --instructions needs valgrind (valgrind and callgrind_control on PATH)")
    out = f"/tmp/dmrack-count-work-{os.getpid()}.callgrind"
    env = dict(os.environ, **{_TOGGLE: "1", "PYTHONHASHSEED": "0"})
    try:
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                               *cmd], capture_output=True, text=True, env=env, check=False)
    finally:
        if os.path.exists(out):
            os.unlink(out)
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or m is None:
        raise SystemExit(f"count_work.py: the run under valgrind failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1:] or ''}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), int(m.group(1))


def count_instructions(row: str, window_ns: int, depth: int) -> dict:
    """Run this script's row under callgrind (instrumentation on around the timed part only);
    the instructions it counted, and per verb."""
    got, instructions = callgrind_count([sys.executable, os.path.abspath(__file__), row, "--window-us",
                                         str(window_ns / 1000), "--depth", str(depth)])
    return {**got, "instructions": instructions,
            "instructions_per_verb": instructions / got["verbs"] if got["verbs"] else None}


def _print(res: dict, top: int) -> None:
    head = f"{res['row']}" + (f", depth {res['depth']}" if res.get("depth") else "")
    print(f"{head}: {res['window_ns'] / 1000:g} virtual µs, {res['verbs']:,} verbs"
          + (f", {res['ops']:,} operations" if res.get("ops") else ""))
    if "instructions" in res:
        print(f"  instructions: {res['instructions']:,} ({res['instructions_per_verb']:,.0f} per verb)")
        return
    print(f"  bytecodes: {res['bytecodes']:,} ({res['bytecodes_per_verb']:,.1f} per verb)")
    print(f"  {'per verb':>9} {'share':>6} {'calls/verb':>10}  function")
    for f in res["functions"][:top]:
        print(f"  {f['per_verb']:9.1f} {100 * f['bytecodes'] / res['bytecodes']:5.1f}% {f['calls_per_verb']:10.2f}"
              f"  {f['function']}")
    for ln in res["lines"]:
        print(f"  {ln['per_verb']:9.2f}  {ln['function']}:{ln['line']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("row", help=f"which speed row: {', '.join(ROWS)}")
    ap.add_argument("--window-us", type=float, default=100.0, help="virtual µs of the timed run (default 100)")
    ap.add_argument("--depth", type=int, default=8, help="coroutine, read_many: READs per doorbell (default 8)")
    ap.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    ap.add_argument("--lines", default="", help="comma-separated function names to break down by line")
    ap.add_argument("--instructions", action="store_true", help="count CPU instructions under callgrind instead")
    ap.add_argument("--json", metavar="PATH", help="also write the counts as JSON")
    args = ap.parse_args(argv)
    if args.row not in ROWS:
        print(f"count_work.py: unknown row {args.row!r}; one of {', '.join(ROWS)}", file=sys.stderr)
        return 2
    if args.window_us <= 0 or args.depth < 1 or args.top < 0:
        print("count_work.py: --window-us must be above 0, --depth at least 1, --top at least 0", file=sys.stderr)
        return 2
    if args.instructions and args.lines:
        print("count_work.py: --lines breaks bytecodes down by line; --instructions counts the run as a whole",
              file=sys.stderr)
        return 2
    from cluster.cli import GC_THRESHOLDS   # here: what only measures (callgrind_window) imports no rack
    gc.set_threshold(*GC_THRESHOLDS)
    window_ns = int(args.window_us * 1000)
    if os.environ.get(_TOGGLE):          # the child under callgrind: run, report the verbs
        print(json.dumps({"row": args.row, "window_ns": window_ns,
                          "depth": args.depth if args.row in DEPTH_ROWS else None,
                          **run_row(args.row, window_ns, args.depth, callgrind_window)}))
        return 0
    try:
        res = (count_instructions(args.row, window_ns, args.depth) if args.instructions
               else count_bytecodes(args.row, window_ns, args.depth, [n for n in args.lines.split(",") if n]))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    _print(res, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
