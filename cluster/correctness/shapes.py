"""How the correctness tools load a system: the stress shapes and mix, and the rack a check builds.

Both ``dmrack check`` (``cluster/correctness/check.py``: the conformance suite, then a stress of a
rack of processes) and the conformance suite (``cluster/correctness/conformance.py``: its
co-located history checks) push a system with the same shapes of stress, the same mix of
operations, on the same default profile (on racks merged with the tables the system needs,
``cluster.scenario.with_rack_tables``). These are declared once here, below both: the check
command imports the suite it runs, and the suite imports only this, so the two modules do not
import each other both ways. ``check.py`` and
``conformance.py`` re-export the names where they were declared first.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_PROFILE", "STRESS_KEYS", "SCAN_SHARE", "StressShape", "QUICK", "HEAVY", "stress_mix",
           "process_rack", "stress_options"]

#: The hardware profile the conformance rigs and the process stress build on unless a check names
#: one (``run_suite(profile=)``, ``dmrack check --profile``): cx6-200g, whose multi-line WRITEs
#: land in descending order, so that designs leaning on ascending order show it.
DEFAULT_PROFILE = "cx6-200g"

STRESS_KEYS = 64
#: The share of scans in the stress mix of a system with ``supports_scan`` (the rest: the
#: default get/insert/update/delete mix); systems without scans run the default mix unchanged.
SCAN_SHARE = 0.1


class StressShape(NamedTuple):
    """How hard the process stress pushes: keys, value bytes (the largest, with ``mixed_sizes``
    each write's size drawn from 16 up to it), threads and coroutines per compute node, virtual
    ms per phase (uniform, then zipfian); ``options``: (name, value) pairs of system options the
    stress runs the system with (a system's ``check_stress`` / ``heavy_stress`` / ``history_stress``
    sets them, e.g. ROLEX's, so that so few keys reach its retraining; :func:`stress_options`)."""
    keys: int = STRESS_KEYS
    value_size: int = 32
    threads: int = 4
    coroutines: int = 4
    run_ms: float = 2.0
    mixed_sizes: bool = False
    options: tuple = ()


QUICK = StressShape(run_ms=0.5)
#: ``--heavy``: values of 16 to 1000 bytes (up to 16 cache lines: a multi-line READ can meet a
#: WRITE of the same block, and a key's value moves across size classes and inline limits), four
#: times the clients on a quarter of the keys (every key sees overlapping inserts, updates,
#: deletes and re-inserts), longer phases. A system shapes it with ``System.heavy_stress``.
HEAVY = StressShape(keys=16, value_size=1000, threads=8, coroutines=8, run_ms=2.0, mixed_sizes=True)


def stress_mix(system_cls) -> dict | None:
    """The StressWorkload mix of the checks for ``system_cls``: None (the default mix) for a
    system without scans, else the default mix with SCAN_SHARE of scans."""
    if not getattr(system_cls, "supports_scan", False):
        return None
    from workloads.stress import DEFAULT_MIX
    rest = sum(DEFAULT_MIX.values())
    return {**DEFAULT_MIX, "scan": rest * SCAN_SHARE / (1.0 - SCAN_SHARE)}


def process_rack(system: str, options: dict, *, seed: int, on_node_death: str, compute: int, threads: int,
                 coroutines: int, memory: str, profile: str | None = None, profile_overrides: dict | None = None) -> dict:
    """The rack tables of a check's rack of processes (the KV stress, the transactional stress and
    kill): ``compute`` compute nodes of ``threads x coroutines`` and two memory nodes of ``memory``
    each, on ``profile`` (default :data:`DEFAULT_PROFILE`) with ``profile_overrides`` (e.g. the
    [chaos] table of ``--chaos``). The caller adds its workload and steps."""
    return {
        "rack": {"name": f"check-{system}", "profile": profile or DEFAULT_PROFILE, "seed": seed,
                 "on_node_death": on_node_death},
        **({"profile_overrides": dict(profile_overrides)} if profile_overrides else {}),
        "compute": {"count": compute, "threads": threads, "coroutines": coroutines, "memory": "16MiB"},
        "memory": {"count": 2, "memory": memory},
        "system": {"name": system, **options},
    }


def stress_options(system_cls, options: dict | None, shape: StressShape) -> dict:
    """The system options a stress of ``shape`` runs ``system_cls`` with: ``options``, and the
    shape's own (``StressShape.options``) when the check was given none of those (an option at its
    default counts as not given): a system's stress options are a set that holds together, so an
    option the check names leaves the system's options as they are."""
    opts = dict(options or {})
    if not shape.options:
        return opts
    defaults = {o.name: o.default for o in getattr(system_cls, "options", ())}
    if any(k in opts and opts[k] != defaults.get(k) for k, _v in shape.options):
        return opts
    opts.update(shape.options)
    return opts
