"""``dmrack reproduce smart``: SMART (ASPLOS'24) experiments at reduced scale, published beside emulated.

Every experiment runs co-located racks (deterministic) on the ``cx6-200g`` profile, one compute
node and one or two memory nodes as in the paper's scale-up setup, and prints rows of
(experiment, series, x, metric, emulated, published) like ``dmrack bench``. Reduced scale means
fewer keys (tens of thousands instead of 100 M), windows of a few virtual milliseconds instead of
seconds, and fewer points per curve; docs/smart.md says where that moves a figure.

Experiments available now:

* ``fig3``: 8-byte READ throughput by QP policy and thread count (the verbs bench's experiment);
* ``fig4``: READ throughput against outstanding work requests per thread;
* ``fig5``: RACE update-only throughput and p99 by thread count (zipf 0.99) and by zipf parameter
  at 16 threads.
"""

from __future__ import annotations

import time

from cluster.benchtable import Row, check_json_path, print_rows, write_json


def fig3(quick: bool, progress) -> list[Row]:
    from cluster.bench_verbs import smart_fig3
    return [_renamed(r, "fig3") for r in smart_fig3(quick, progress)]


def fig4(quick: bool, progress) -> list[Row]:
    from cluster.bench_verbs import smart_fig4
    return [_renamed(r, "fig4") for r in smart_fig4(quick, progress)]


def _renamed(r: Row, experiment: str) -> Row:
    return Row(experiment, r.series, r.x, r.metric, r.emulated, r.published)


UPDATE_ONLY = {"readproportion": 0, "updateproportion": 1}


def fig5(quick: bool, progress) -> list[Row]:
    """RACE, 100% updates: by thread count at zipf 0.99, and by zipf parameter at 16 threads.
    Published (SMART §3.3): the peak is at 8 threads; p99 grows by up to 17.1x with more threads;
    from θ = 0 to 0.99 the median latency grows 1.9x and the p99 78.4x."""
    from cluster.bench_ycsb import measure
    records = 20_000 if quick else 100_000
    warm, win = (0.1, 0.5) if quick else (0.2, 2.0)
    threads = (1, 4, 8, 16, 32, 64, 96) if quick else (1, 2, 4, 8, 16, 24, 32, 48, 64, 96)
    progress("fig5: RACE updates by thread count")
    pts, _ = measure("race", "a", threads, records=records, warm_ms=warm, measure_ms=win, progress=progress,
                     properties=UPDATE_ONLY)
    rows = []
    for p in pts:
        rows.append(Row("fig5", "race, zipf 0.99", p["threads"], "Mops", p["mops"]))
        rows.append(Row("fig5", "race, zipf 0.99", p["threads"], "p99 µs", p["p99_us"]))
    best = max(pts, key=lambda p: p["mops"])
    rows.append(Row("fig5", "race, zipf 0.99", "peak", "threads at peak", best["threads"], 8))
    p99s = [p["p99_us"] for p in pts if p["p99_us"]]
    rows.append(Row("fig5", "race, zipf 0.99", "max/min", "p99 growth", max(p99s) / min(p99s), 17.1))
    thetas = (0.0, 0.5, 0.9, 0.99)
    by_theta = {}
    for theta in thetas:
        progress(f"fig5: RACE updates at 16 threads, zipf {theta}")
        # θ = 0 is the uniform distribution (YCSB's zipfian generator needs 0 < θ < 1)
        skew = {"requestdistribution": "uniform"} if theta == 0 else {"zipfianconstant": theta}
        (p,), _ = measure("race", "a", (16,), records=records, warm_ms=warm, measure_ms=win, progress=progress,
                          properties={**UPDATE_ONLY, **skew})
        by_theta[theta] = p
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "Mops", p["mops"]))
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "p50 µs", p["p50_us"]))
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "p99 µs", p["p99_us"]))
    lo, hi = by_theta[0.0], by_theta[0.99]
    rows.append(Row("fig5", "race, 16 threads", "0.99/0", "p50 ratio", hi["p50_us"] / lo["p50_us"], 1.9))
    rows.append(Row("fig5", "race, 16 threads", "0.99/0", "p99 ratio", hi["p99_us"] / lo["p99_us"], 78.4))
    return rows


EXPERIMENTS = {"fig3": fig3, "fig4": fig4, "fig5": fig5}


def run(only=None, quick: bool = False, json_path: str | None = None, console=None) -> list[Row]:
    from rich.console import Console
    console = console or Console()
    names = list(EXPERIMENTS) if not only else only
    for n in names:
        if n not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {n!r}; choose from {', '.join(EXPERIMENTS)}")
    check_json_path(json_path)
    rows: list[Row] = []
    with console.status("starting") as status:
        def progress(msg):
            status.update(f"[bold]reproduce smart[/]: {msg}")
        for n in names:
            t0 = time.perf_counter()
            got = EXPERIMENTS[n](quick, progress)
            rows.extend(got)
            print_rows(console, f"SMART {n}  ({time.perf_counter() - t0:.1f} s real)", got)
    if json_path:
        write_json(console, json_path, rows)
    return rows
