"""Soak a rack: run ``dmrack up`` (or ``dmrack run FILE``) for a long real time and sample its
memory footprint; print the samples, the slope of each series and whether it is flat.

A rack that reclaims memory (docs/reclaim.md) must hold a flat footprint however long it runs.
This is a benchmark, not a test: it takes as long as you ask (an hour by default) and reads real
process sizes. Every ``--every`` seconds it samples

* ``anon``: the anonymous memory of the rack's processes (the supervisor and its ``dmrack-*``
  children): the sum of their ``Pss_Anon`` (``/proc/PID/smaps_rollup``), i.e. Python heaps and
  numpy arrays, each page shared after the fork counted once. Not RSS or USS: those include pages
  of shared libraries (libllvmlite alone is ~70 MiB), which the kernel may drop from the page
  cache and fault back into one process only, so the USS of a process jumps by tens of MiB
  with no allocation at all (seen in a 40-minute run);
* ``shm``: the bytes of shared memory the rack's segments really occupy (tmpfs pages touched:
  memory-node memory grows exactly when blocks are carved from fresh memory);

and fits a least-squares line to the samples after ``--warmup`` seconds (the load and the first
chunks). Each sample also keeps every process's anonymous memory (``anon_by_process`` in the JSON;
the summary prints the first and last fitted ones), and ``DMRACK_MEMTRACE=DIR`` in the environment
makes the nodes log what inside them holds memory (``cluster/memtrace.py``). A series is flat when the line's growth over one hour is at most ``--tolerance`` MiB or
1 % of the series' mean, whichever is larger. The rack is stopped with SIGINT (as Ctrl-C would) at the end; its summary is
printed after the table. ``--json PATH`` writes the samples and slopes.

    python3 scripts/soak.py                          # dmrack up, one hour
    python3 scripts/soak.py --minutes 5 --every 10   # a shorter look
    python3 scripts/soak.py --minutes 10 -- run examples/minimal.toml --set memory.memory=8MiB

Exit status: 0 when every series is flat, 1 when one grows, 2 for bad arguments or a rack that
did not start.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil

HOUR_S = 3600.0


def rack_processes(sup: psutil.Process) -> list[psutil.Process]:
    """The supervisor and its node processes."""
    try:
        return [sup] + sup.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def anon_by_process(procs) -> dict[str, int]:
    """Each process's proportional anonymous memory (``Pss_Anon``, Linux 5.x+), by process title
    (``dmrack-cn0-<rack id>``, ...; the supervisor is ``supervisor``)."""
    out: dict[str, int] = {}
    for i, p in enumerate(procs):
        try:
            name = "supervisor" if i == 0 else p.name()
            with open(f"/proc/{p.pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss_Anon:"):
                        out[name] = out.get(name, 0) + int(line.split()[1]) * 1024
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    return out


def shm_bytes(pid: int) -> int:
    """Bytes of tmpfs the rack's segments occupy (pages touched), for a supervisor ``pid``."""
    total = 0
    for path in glob.glob(f"/dev/shm/dmrack.{pid}.*"):
        try:
            total += os.stat(path).st_blocks * 512
        except FileNotFoundError:
            pass
    return total


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, in value per hour."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in samples) / var * HOUR_S


def flat(samples, tolerance_bytes: float) -> tuple[bool, float, float]:
    """(flat?, growth per hour in bytes, mean) of a series."""
    per_hour = slope_per_hour(samples)
    mean = sum(v for _, v in samples) / len(samples) if samples else 0.0
    return abs(per_hour) <= max(tolerance_bytes, 0.01 * mean), per_hour, mean


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="how long the rack runs (default 60)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples (default 30)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds left out of the fit (default: a tenth of the run, at least 30)")
    ap.add_argument("--tolerance", type=float, default=4.0,
                    help="MiB per hour a series may grow and still count as flat (default 4)")
    ap.add_argument("--json", help="write the samples and slopes here")
    ap.add_argument("command", nargs="*", help="the dmrack command after '--' (default: up)")
    a = ap.parse_args(argv)
    if a.minutes <= 0 or a.every <= 0 or (a.warmup is not None and a.warmup < 0) or a.tolerance < 0:
        print("soak: --minutes, --every and --tolerance must be positive, --warmup not negative", file=sys.stderr)
        return 2
    duration = a.minutes * 60
    warmup = a.warmup if a.warmup is not None else max(30.0, duration / 10)
    if warmup >= duration:
        print(f"soak: --warmup {warmup:g} s leaves nothing of a {duration:g} s run to fit", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "cluster.cli"] + (a.command or ["up"]) + ["--no-dashboard"]
    print("soak:", " ".join(["dmrack"] + cmd[3:]), f"for {a.minutes:g} min, a sample every {a.every:g} s",
          flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sup = psutil.Process(proc.pid)
    samples: list[dict] = []
    t0 = time.monotonic()
    print(f"{'t s':>8} {'anon MiB':>10} {'shm MiB':>10} {'procs':>6}", flush=True)
    try:
        while True:
            now = time.monotonic() - t0
            if proc.poll() is not None:
                break
            procs = rack_processes(sup)
            per = anon_by_process(procs)
            s = {"t": round(now, 1), "anon": sum(per.values()), "shm": shm_bytes(proc.pid), "procs": len(procs),
                 "anon_by_process": per}
            samples.append(s)
            print(f"{s['t']:8.0f} {s['anon'] / 2**20:10.1f} {s['shm'] / 2**20:10.1f} {s['procs']:6d}", flush=True)
            if now >= duration:
                break
            time.sleep(min(a.every, max(0.0, duration - now)))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    ran = time.monotonic() - t0
    print(out.rstrip())
    if proc.returncode not in (0, -signal.SIGINT, 130) or ran < duration * 0.99:
        print(f"soak: the rack ended after {ran:.0f} s of {duration:.0f} (exit status {proc.returncode})",
              file=sys.stderr)
        return 2 if len(samples) < 2 else 1
    fit = [s for s in samples if s["t"] >= warmup]
    tol = a.tolerance * 2**20
    verdicts = {}
    print(f"\nfit over {len(fit)} samples from {warmup:.0f} s to {ran:.0f} s:")
    for series in ("anon", "shm"):
        ok, per_hour, mean = flat([(s["t"], s[series]) for s in fit], tol)
        verdicts[series] = {"flat": ok, "bytes_per_hour": per_hour, "mean_bytes": mean}
        print(f"  {series}: mean {mean / 2**20:.1f} MiB, slope {per_hour / 2**20:+.2f} MiB/hour "
              f"({100 * per_hour / mean if mean else 0:+.2f} % of the mean per hour): "
              f"{'flat' if ok else 'GROWS'}")
    if len(fit) >= 2:
        first, last = fit[0]["anon_by_process"], fit[-1]["anon_by_process"]
        print(f"  by process (anonymous MiB, at {fit[0]['t']:.0f} s -> at {fit[-1]['t']:.0f} s):")
        for name in sorted(set(first) | set(last)):
            print(f"    {name:<20} {first.get(name, 0) / 2**20:8.1f} -> {last.get(name, 0) / 2**20:8.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": cmd[3:], "minutes": a.minutes, "warmup_s": warmup, "samples": samples,
                       "fit": verdicts}, f, indent=1)
    return 0 if all(v["flat"] for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
