"""``dmrack bench speed``: how fast the emulator runs, in real time, layer by layer.

Every experiment and every user's study is bounded by emulated verbs per real second, so this
bench measures them on the host at hand, one row per layer, with the same closed loop wherever
it can (threads posting ``depth`` 8-byte READs to random addresses of one memory node and
waiting for them, ``cx6-200g``):

* ``one process``: the coroutine API (``read``, ``sync``) in one process; addresses come from a
  precomputed list per client, as cheap as the SimPy model's, so the row measures the emulator
  and not ``numpy.random`` (``one process, numpy addresses``: two ``rng.integers`` calls per
  verb, as the closed loops of ``bench verbs`` draw them; ``one process, read_many``: the same
  READs queued ``depth`` at a time with ``co.read_many``, the same virtual run);
* ``raw verbs``: the pyverbs layer (``QP.post_send`` of ``depth`` READ work requests, ``CQ.wait``
  for all of them, one ``CQ.poll``);
* ``two processes``: two compute-node processes under the default lax sync window, and under
  wider windows (which let the processes drift further apart and wait less);
* ``simpy``: the textbook SimPy model of the same loop (a capacity-limited NIC, a fixed round
  trip; the ``bench`` extra), drawing addresses as ``one process`` does;
* ``race ycsb-a`` and ``sherman ycsb-a``: a co-located rack loading and running YCSB-A (operations
  and verbs per real second of the whole run); ``race bulk load`` and ``sherman bulk load``: keys
  per real second of a load step with ``bulk = true``;
* ``rack``: ``examples/minimal.toml`` (the default rack with a bounded run) as a rack of processes,
  as ``dmrack run`` runs it, against the same scenario co-located, verbs per real second over the
  steps; and the rack of processes without the adaptive spin of waits on another node's clock
  (``sync.spin_us = 0``, shm/sim/sync.py), what it ran before the spin existed. The target:
  processes 1.3x as fast as co-located (on a machine with a core per busy node);
* ``reproduce smart --quick fig12``: the wall time of one reproduction part (``fig3``, ``fig4``
  and ``fig13`` too without ``--quick``).

The verbs-level loops start their clocks once the memory node's pages are in memory
(``bench_verbs.fault_in``): a fresh segment allocates a page on first touch, about 3 µs here,
which is a third of the ``--quick`` window's real time, a start-up cost of the segment, not the
emulator's speed (RDMA pins registered memory, so the hardware never pays it in a loop either).

The systems' rows start their clocks once their rack's kernels are compiled or loaded from
numba's cache (``warm``: the rack's warm-up scenario, run once per rack in the process, as the
supervisor runs it before it forks the nodes), so a first run on a fresh machine measures the
emulator and not the compiler. The reproduction part is timed as a user runs it, warm-up included.

The verbs-level loops (``one process``, ``raw verbs``, ``two processes``, ``simpy``) are declared
in ``cluster/experiments/bench_verbs.py`` (``bench verbs --only speed`` gives the same rows) and
re-exported here.

Virtual-time results never depend on these numbers; tests check that each row is measured, never
how fast. The targets of the compiled fabric core's issue sit in the published column: 800 k verbs
per real second per process through the coroutine API, 250 k through raw verbs, the coroutine loop
12x the SimPy model of it (``one process / simpy``), a rack of processes 1.3x the same rack
co-located.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

from cluster.experiments.figures import Figure
from cluster.experiments.rows import Row, bench
# The verbs-level loops and their rows are ``dmrack bench verbs --only speed`` too: declared in
# bench_verbs.py beside the rig they run on (so that bench_verbs.py need not import this module,
# which times SMART's reproduction, whose Figs. 3 and 4 are bench_verbs.py's), and re-exported here.
from cluster.experiments.bench_verbs import (  # noqa: F401  (re-exports)
    ADDRESSES, DEPTH, TARGET_COROUTINE, TARGET_RAW, TARGET_SIMPY_RATIO, coroutine_loop, raw_verbs_loop, simpy_loop, two_processes,
    verbs_rows)

# the racks (name, profile) whose kernels this process has compiled or loaded from numba's cache
_WARM: set = set()


def warm(scenario) -> None:
    """Compile (or load from numba's cache) what ``scenario``'s rack runs before a row's clock
    starts: its warm-up rack (cluster.scenario.warmup_scenario, what the supervisor runs before it
    forks), once per rack in this process. Without it a row timed on a cold cache measured numba
    compiling the system's kernels, not the emulator running them (RACE YCSB-A: about 1.0k-1.8k
    operations per real second on a cold cache against 10k warm)."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import warmup_scenario
    key = (scenario.spec.name, scenario.spec.profile_name)
    if key not in _WARM:
        ColocatedRack(warmup_scenario(scenario.spec)).run()
        _WARM.add(key)


def ycsb_a(system: str, *, records: int, threads: int, coroutines: int, run_ms: float,
           around=nullcontext) -> dict:
    """A co-located rack: load ``records`` keys with one thread, run YCSB-A (zipf 0.99) for
    ``run_ms`` virtual ms; operations and verbs per real second over the whole run (``around``:
    a context manager entered around the timed run alone, as in :func:`coroutine_loop`)."""
    from cluster.experiments.bench_ycsb import SMART_KEYS, scenario_dict
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = scenario_dict(system, "a", (threads,), records=records, warm_ms=run_ms / 4, measure_ms=run_ms,
                        coroutines=coroutines, properties=SMART_KEYS, memory_nodes=1)
    scenario = scenario_from_dict(doc, source=f"bench speed {system}")
    warm(scenario)
    rack = ColocatedRack(scenario)
    with around():
        t0 = time.perf_counter()
        res = rack.run()
        wall = time.perf_counter() - t0
    ops = sum(s.ops for s in res.steps)
    return {"ops_per_s": ops / wall, "verbs_per_s": rack.verbs / wall, "virtual_us_per_s": rack.env.now / 1e3 / wall,
            "ops": ops, "verbs": rack.verbs}


def bulk_load_rate(system: str, keys: int) -> float:
    """Keys per real second of ``system``'s bulk load (cn0's whole load step: the keys generated,
    recorded and placed), on a co-located rack of 2 compute and 2 memory nodes."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = {"rack": {"name": f"bench-speed-bulk-{system}", "profile": "cx6-200g", "seed": 1},
           "compute": {"count": 2, "threads": 1, "coroutines": 1, "memory": "16MiB"},
           "memory": {"count": 2, "memory": f"{max(64, keys * 600 // 2 >> 20)}MiB"},
           "system": {"name": system},
           "workload": {"preset": "c", "recordcount": keys, "keysize": 8, "valuesize": 8},
           "step": [{"action": "load", "bulk": True}]}
    scenario = scenario_from_dict(doc, source=f"bench speed bulk {system}")
    warm(scenario)
    res = ColocatedRack(scenario).run()
    real = res.steps[0].real_s
    return keys / real if real else 0.0


def systems_rows(quick: bool, progress) -> list[Row]:
    rows = []
    sizes = {"records": 5_000 if quick else 20_000, "threads": 16, "coroutines": 8,
             "run_ms": 0.5 if quick else 2.0}
    for system in ("race", "sherman"):
        progress(f"speed: {system} YCSB-A co-located")
        got = ycsb_a(system, **sizes)
        x = f"16 threads x 8 coroutines, {sizes['records']:,} keys"
        rows.append(Row("speed", f"{system} ycsb-a", x, "ops/s real", round(got["ops_per_s"])))
        rows.append(Row("speed", f"{system} ycsb-a", x, "verbs/s real", round(got["verbs_per_s"])))
        rows.append(Row("speed", f"{system} ycsb-a", x, "virtual µs per real s", round(got["virtual_us_per_s"], 1)))
    keys = 100_000 if quick else 1_000_000
    for system in ("race", "sherman"):
        progress(f"speed: {system} bulk load of {keys:,} keys")
        rows.append(Row("speed", f"{system} bulk load", f"{keys:,} keys", "keys/s real",
                        round(bulk_load_rate(system, keys))))
    return rows


def minimal_rack(colocated: bool, overrides: dict | None = None, run_ms: float | None = None) -> tuple:
    """(verbs per real second, virtual µs per real second) of ``examples/minimal.toml`` over its
    steps, co-located or as a rack of processes (a quiet supervisor: no dashboard, no summary)."""
    from pathlib import Path
    from cluster.scenario import load_scenario
    path = Path(__file__).resolve().parents[2] / "examples" / "minimal.toml"
    sets = dict(overrides or {})
    if run_ms is not None:
        sets["run.duration_ms"] = run_ms
    scenario = load_scenario(str(path), overrides=sets or None)
    if colocated:
        from cluster.rack import ColocatedRack
        res = ColocatedRack(scenario).run()
    else:
        from cluster.supervisor import Supervisor
        sup = Supervisor(scenario, dashboard=False, quiet=True)
        if sup.run() != 0 or sup.results is None:
            raise RuntimeError(f"the rack of processes failed: {sup.stop_reason}")
        res = sup.results
    return res.verbs_per_s or 0.0, (res.speed or 0.0) / 1e3


# issue 43's target: the default rack as processes (a core per node) runs 1.3x the same rack in one
# process, with nothing else on the machine
TARGET_PROCESSES_RATIO = 1.3


def rack_rows(quick: bool, progress) -> list[Row]:
    run_ms = 10 if quick else 40
    x = f"examples/minimal.toml, {run_ms} virtual ms"
    progress("speed: minimal.toml co-located")
    minimal_rack(True, run_ms=1)                       # compile (or load) the kernels first
    colocated, colocated_us = minimal_rack(True, run_ms=run_ms)
    progress("speed: minimal.toml as processes")
    processes, processes_us = minimal_rack(False, run_ms=run_ms)
    progress("speed: minimal.toml as processes, no spin")
    parked, _ = minimal_rack(False, {"profile_overrides.sync.spin_us": 0}, run_ms=run_ms)
    # rows of their own experiment, so the figure of the verbs-level loops does not draw them;
    # "rack time per real second" is the dashboard's speed figure of dmrack up's default rack
    return [Row("rack", "co-located", x, "verbs/s real", round(colocated)),
            Row("rack", "as processes", x, "verbs/s real", round(processes), round(colocated)),
            Row("rack", "as processes, no spin", x, "verbs/s real", round(parked)),
            Row("rack", "processes / co-located", x, "ratio of verbs/s real", round(processes / colocated, 2),
                TARGET_PROCESSES_RATIO),
            Row("rack", "rack time, co-located", x, "virtual us per real s", round(colocated_us)),
            Row("rack", "rack time, as processes", x, "virtual us per real s", round(processes_us))]


def reproduce_rows(quick: bool, progress) -> list[Row]:
    from cluster.experiments import reproduce_smart as smart
    rows = []
    for name in ("fig12",) if quick else ("fig3", "fig4", "fig12", "fig13"):
        progress(f"speed: reproduce smart --quick {name}")
        t0 = time.perf_counter()
        smart.EXPERIMENTS[name](True, lambda msg: None)
        rows.append(Row("speed", f"reproduce smart --quick {name}", "-", "wall s", round(time.perf_counter() - t0, 1)))
    return rows


# wall-clock figures (cluster.experiments.figures): bars per configuration, log scale where
# rates differ by orders of magnitude (raw verbs against SimPy)
FIGURES = [
    Figure("verbs", "speed", "verbs/s real", "Emulation speed: verbs per real second", "",
           "verbs per real second", kind="bar", ylog=True, xs="category"),
    Figure("systems", "speed", ("ops/s real", "virtual µs per real s"), "Systems co-located: YCSB A speed", "",
           ("operations per real second", "virtual µs per real second"), kind="bar", xs="category"),
    Figure("bulk-load", "speed", "keys/s real", "Bulk load speed", "", "keys per real second", kind="bar",
           xs="category"),
    Figure("rack", "rack", "verbs/s real", "The minimal rack: processes against co-located", "",
           "verbs per real second", kind="bar", xs="category"),
    Figure("reproduce", "speed", "wall s", "Reproduction parts: wall time", "", "seconds", kind="bar", xs="category"),
]


EXPERIMENTS = {"verbs": verbs_rows, "systems": systems_rows, "rack": rack_rows, "reproduce": reproduce_rows}


def setup(quick: bool) -> dict:
    """The rigs and racks of this bench, for the run record (cluster.experiments.provenance)."""
    return {"profile": "cx6-200g", "seed": 1,
            "spec": "a raw-verbs rig (1 compute, 1 memory node) and the systems' co-located racks",
            "scale": "short windows" if quick else "full windows",
            "note": "measures this machine's real time: compare only with runs on the same machine"}


EXPERIMENT = bench("speed", title="how fast the emulator runs in real time: verbs, systems, reproduction parts",
                   parts=EXPERIMENTS, setup=setup, figures=FIGURES, title_prefix="speed: ")
