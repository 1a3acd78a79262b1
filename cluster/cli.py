"""The ``dmrack`` command line.

Subcommands are thin: each parses its arguments and calls one function of the package, so the same
work is reachable from Python. Errors in user input end with a one-line message and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading

from cluster.experiments.pointpool import available_cpus
from shm.calendar import CalendarAliased


def _only(values) -> list[str] | None:
    """``--only a,b --only c`` -> ["a", "b", "c"] (repeats add up; None: everything)."""
    return [x for v in (values or ()) for x in v.split(",") if x] or None


def _experiment(kind: str, name: str):
    """The experiment ``dmrack <kind> <name>`` runs (cluster.experiments.registry), or None after
    one line naming what is available."""
    from cluster.experiments.registry import UnknownExperiment, find
    try:
        return find(kind, name)
    except UnknownExperiment as e:
        print(f"dmrack {kind}: {e}", file=sys.stderr)
        return None


def _run_experiment(exp, args, **options) -> int:
    """Run ``exp`` with the command line's --only, --quick, --json, --quiet and --plot and those of
    ``options`` it takes; an unknown --only name is its run's ValueError, one line and exit status
    2; points that failed on a Dask cluster (the others' rows printed and written) are exit
    status 1. --plot DIR checks for matplotlib before anything runs, writes the result JSON into DIR too
    (unless --json says where) and a PNG per figure after the run."""
    import os

    from cluster.experiments.progress import set_quiet
    from cluster.experiments.rows import ExperimentsFailed
    set_quiet(args.quiet)
    status = 0
    options = {k: v for k, v in options.items() if k in exp.options}
    json_path, plot_dir = args.json, getattr(args, "plot", None)
    if plot_dir:
        from cluster.experiments.figures import slug
        from cluster.experiments.plot import require
        require()
        _make_dir(plot_dir, flag="--plot")
        stem = slug(" ".join([exp.kind, exp.name] + ([str(options["system"])] if "system" in options else [])))
        json_path = json_path or os.path.join(plot_dir, f"{stem}.json")
    try:
        rows = exp.run(only=_only(args.only), quick=args.quick, json_path=json_path, console=_console(), **options)
    except ExperimentsFailed as e:
        print(f"dmrack {args.command}: {e}", file=sys.stderr)
        rows, status = e.rows, 1
    if plot_dir:
        from cluster.experiments.plot import write_plots
        from cluster.experiments.rows import result_dict
        result = result_dict(rows, getattr(rows, "run", None))      # what the JSON file holds
        paths = write_plots(result["run"], result["rows"], plot_dir, stem)
        print(f"wrote {len(paths)} figure(s) to {plot_dir}")
    return status


def _cmd_plot(args) -> int:
    """Figures of saved result files, without running anything: DIR/<file name>-<figure>.png."""
    import os

    from cluster.experiments.figures import slug
    from cluster.experiments.plot import require, write_plots
    from cluster.experiments.rows import load_result
    require()
    loaded = [(path, *load_result(path)) for path in args.results]     # every file read before any is drawn
    _make_dir(args.out, flag="--out")
    stems: set[str] = set()
    for path, run, rows in loaded:
        stem = base = slug(os.path.splitext(os.path.basename(path))[0])
        k = 2
        while stem in stems:
            stem, k = f"{base}-{k}", k + 1
        stems.add(stem)
        paths = write_plots(run, rows, args.out, stem)
        print(f"{path}: wrote {len(paths)} figure(s) to {args.out}")
    return 0


def _cmd_report(args) -> int:
    """One self-contained HTML page of result files: summary, provenance, figures, tables."""
    from cluster.experiments.report import write_report
    write_report(args.results, args.output)
    print(f"wrote {args.output}")
    return 0


def _cmd_bench(args) -> int:
    exp = _experiment("bench", args.suite)
    if exp is None:
        return 2
    bounds = _trace_bounds(args)
    if bounds is None:
        return _run_experiment(exp, args, system=args.system)
    if "trace" not in exp.options:
        raise ValueError(f"--trace goes with bench ycsb (a co-located rack per workload), not bench {args.suite}")
    return _run_experiment(exp, args, system=args.system, trace=(args.trace, bounds))


def _outputs(args, create: bool = True) -> tuple[str | None, str | None]:
    """Where results go: --out DIR gives DIR/results.json and DIR/results.csv; --json/--csv win.
    ``create``: make --out (and its parents) if missing; with False only check the paths, so that
    a run refused for another reason leaves no empty directory behind."""
    import os
    json_path, csv_path = args.json, args.csv
    out = os.path.abspath(args.out) if args.out else None
    if args.out:
        if create:
            _make_dir(args.out)
        json_path = json_path or os.path.join(args.out, "results.json")
        csv_path = csv_path or os.path.join(args.out, "results.csv")
    for path in (json_path, csv_path, getattr(args, "history", None)):
        parent = os.path.dirname(os.path.abspath(path)) if path else None
        if path and not os.path.isdir(parent) and not (not create and parent == out):
            raise FileNotFoundError(f"cannot write {path}: no such directory {os.path.dirname(path) or '.'}")
    return json_path, csv_path


def _make_dir(path: str, flag: str = "--out") -> None:
    """``--out DIR`` (or ``flag``): create DIR and its parents if missing (a run's output directory
    is usually new); one line if it cannot be (a file in the way, no permission)."""
    import os
    if os.path.isdir(path):
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise FileNotFoundError(f"{flag} {path}: cannot create the directory: {e.strerror}") from None


def _history_wanted(args) -> bool:
    return bool(args.history or args.check)


def _check_failpoints(nodes=None) -> None:
    """A typo in DMRACK_FAILPOINTS is one line now, not a node killed by ValueError after the rack
    was built (the nodes arm their points only after they fork)."""
    import os
    from shm.failpoints import ENV, validate
    if os.environ.get(ENV):
        validate(os.environ[ENV], nodes)


def _run_scenario(scenario, args, note: str | None = None) -> int:
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f"--duration must be a positive number of seconds, got {args.duration:g}")
    _check_failpoints(scenario.spec.node_names())
    _outputs(args, create=False)
    if _history_wanted(args):
        from cluster.scenario import check_history
        check_history(scenario)
    bounds = _trace_bounds(args)
    if bounds is not None and not args.colocated:
        raise ValueError("--trace records a co-located run: add --colocated (in a rack of processes each node "
                         "keeps its own clock; see docs/trace.md)")
    json_path, csv_path = _outputs(args)     # last: --out is created only for a rack that will run
    if note:
        print(note)
    history = HISTORY_CAPACITY if _history_wanted(args) else 0
    if args.colocated:
        from cluster.rack import ColocatedRack
        console = _console()
        rack = ColocatedRack(scenario, history=history, trace=bounds)
        if not rack.compiled.finite:
            last = scenario.steps[-1]
            raise ValueError(f"{scenario.source}: step[{last.index}] (run workload {last.workload}) has no "
                             f"duration_ms, so it runs until stopped; --colocated needs every step to end: give "
                             f"it one, or run.duration_ms for the default steps (e.g. --set run.duration_ms=10)")
        with console.status(f"running {len(rack.compiled.plan)} steps co-located (one process, deterministic)"):
            try:
                res = rack.run()
            except Exception as e:
                gave_up = _gave_up(e)
                if gave_up is None:
                    raise
                from cluster.supervisor import EXIT_GAVE_UP
                print(f"dmrack {args.command}: the system gave up: {gave_up}", file=sys.stderr)
                return EXIT_GAVE_UP
        console.print(res.table())
        if json_path:
            res.to_json(json_path)
        if csv_path:
            res.to_csv(csv_path)
        checked = []
        status = _history_out(rack.history_ops, args, console, on_result=checked.append)
        if rack.tracer is not None:
            _write_trace(rack.tracer, args.trace, console, checked[0] if checked else None, rack.history_ops)
        return status
    from cluster.supervisor import Supervisor
    sup = Supervisor(scenario, duration_s=args.duration, dashboard=False if args.no_dashboard else None,
                     json_path=json_path, csv_path=csv_path, history=history)
    status = sup.run()
    if sup.history_ops is not None:
        status = max(status, _history_out(sup.history_ops, args, sup.console))
    return status


def _gave_up(e: BaseException) -> str | None:
    """The one-line message of a SystemGaveUp (the system gave up: out of memory, a full table)
    that ``e`` is or was caused by, or None."""
    from shm.messages import SystemGaveUp
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, SystemGaveUp):
            return e.one_line()
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


HISTORY_CAPACITY = 1 << 22      # operations recorded per compute node with --history/--check


def _history_out(ops, args, console, on_result=None) -> int:
    """Write the recorded history (--history) and check it (--check); 1 if it is not linearizable.
    ``on_result`` is given the checker's result."""
    if ops is None:
        return 0
    from cluster.correctness.checker import check, dump_jsonl
    if args.history:
        dump_jsonl(ops, args.history)
        console.print(f"dmrack: wrote {len(ops):,} operations to {args.history}")
    if not args.check:
        return 0
    result = check(ops)
    if on_result is not None:
        on_result(result)
    console.print(result.summary(), highlight=False)
    if result.verdict == "illegal":
        console.print(result.explain(), highlight=False, markup=False)
        return 1
    return 0


def _trace_bounds(args):
    """--trace FILE: the bounds of the recording (None without --trace); a path that cannot be
    written, or bounds that record nothing, is one line before anything runs."""
    path = getattr(args, "trace", None)
    if not path:
        if getattr(args, "trace_window_us", None) is not None or getattr(args, "trace_ops", None) is not None:
            raise ValueError("--trace-window-us and --trace-ops go with --trace FILE")
        return None
    from shm.sim.trace import DEFAULT_MAX_OPS, DEFAULT_WINDOW_US, TraceBounds, check_trace_path
    check_trace_path(path)
    window = DEFAULT_WINDOW_US if args.trace_window_us is None else args.trace_window_us
    ops = DEFAULT_MAX_OPS if args.trace_ops is None else args.trace_ops
    if not window > 0:
        raise ValueError(f"--trace-window-us must be a positive number of virtual µs, got {window:g}")
    if ops < 1:
        raise ValueError(f"--trace-ops must be at least 1, got {ops}")
    return TraceBounds(window_ns=int(round(window * 1000)), max_ops=ops)


def _write_trace(tracer, path: str, console, result=None, history=None) -> None:
    """Write a recorded trace; with a checker result that found violations, the operations of the
    failing keys (at most five) go into the same file, a process track per key."""
    from shm.sim.trace import violation_events
    extra = []
    if result is not None and result.verdict == "illegal" and history:
        for k, f in enumerate(result.failures[:5]):
            extra.extend(violation_events(f.key, history, first_pid=1000 + 100 * k))
    doc = tracer.write(path, extra_events=extra)
    o = doc["otherData"]
    console.print(f"dmrack: wrote a trace of {o['ops_recorded']:,} operations and {o['verbs_recorded']:,} verbs "
                  f"({len(doc['traceEvents']):,} events) to {path}" +
                  (f", with the operations of {min(len(result.failures), 5)} failing key(s)" if extra else "") +
                  "; open it in https://ui.perfetto.dev or chrome://tracing", highlight=False, soft_wrap=True)


def _console():
    from rich.console import Console
    console = Console()
    return console if console.is_terminal else Console(width=160)   # piped: do not wrap at 80


def _cmd_up(args) -> int:
    from cluster.scenario import HISTORY_VALUE_SIZE, default_scenario
    _check_failpoints()
    overrides = dict(_parse_set(x) for x in args.set or [])
    history = _history_wanted(args)
    if args.rack is not None:
        from cluster.scenario import rack_scenario
        return _run_scenario(rack_scenario(args.rack, seed=args.seed, overrides=overrides or None), args)
    scenario = default_scenario(seed=args.seed, overrides=overrides or None, history=history)
    note = None
    if history and "workload.valuesize" not in overrides:
        note = (f"dmrack up: values are {HISTORY_VALUE_SIZE} bytes instead of 8, so that each recorded "
                f"operation carries the version it wrote or read")
    return _run_scenario(scenario, args, note=note)


def _cmd_warm(args) -> int:
    """Compile (or load from numba's cache) the kernels of the default rack or of the given
    scenario files' racks, ahead of a first run (an image build, a CI step): what a rack's
    supervisor does before it forks its nodes (cluster.supervisor.warm_up)."""
    import time
    from cluster.rack import compile_scenario
    from cluster.scenario import default_scenario, load_scenario
    from cluster.supervisor import warm_up
    from numba.core.config import CACHE_DIR
    scenarios = [load_scenario(f) for f in args.files] if args.files else [default_scenario()]
    compiled = [compile_scenario(sc) for sc in scenarios]          # every file checked before any compile
    console = _console()
    for c in compiled:
        t0 = time.monotonic()
        with console.status(f"dmrack warm: compiling the kernels of rack {c.spec.name!r} "
                            f"(system {c.system.name}, profile {c.spec.profile_name})"):
            warm_up(c)
        console.print(f"dmrack warm: rack {c.spec.name!r} (system {c.system.name}) ready in "
                      f"{time.monotonic() - t0:.1f} s", highlight=False)
    where = CACHE_DIR or "__pycache__ beside each module"
    console.print(f"dmrack warm: kernels cached in {where}; racks of these systems now start in seconds",
                  highlight=False)
    return 0


def _cmd_run(args) -> int:
    from cluster.scenario import load_scenario
    _check_failpoints()
    overrides = dict(_parse_set(x) for x in args.set or [])
    return _run_scenario(load_scenario(args.file, seed=args.seed, overrides=overrides or None), args)


def _parse_set(text: str):
    from cluster.spec import parse_override
    return parse_override(text)


def _parse_options(system: str, texts) -> dict:
    """``dmrack check --option KEY=VALUE ...``: a malformed one is one line naming --option, with an
    example from the system's own options (its first, or the one the text names, at its default);
    an unknown system is get_system's one line (with its "did you mean")."""
    from cluster.spec import parse_override
    from nodes.systems import get_system
    if not texts:
        return {}
    defaults = {o.name: o.default for o in get_system(system).options}
    out = {}
    for text in texts:
        name = text.partition("=")[0].strip()
        example_key = name if name in defaults else next(iter(defaults), None)
        example = (f"{example_key}={_option_text(defaults[example_key])}" if example_key is not None
                   else "name=value")
        key, value = parse_override(text, flag="--option", shape="key=value", example=example)
        out[key] = value
    return out


def _option_text(v) -> str:
    """An option's default as it is typed after --option KEY= (TOML for booleans)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _cmd_reproduce(args) -> int:
    exp = _experiment("reproduce", args.paper)
    if exp is None:
        return 2
    if args.dask is not None:
        if args.jobs is not None:
            print("dmrack reproduce: --dask and --jobs do not go together: on a Dask cluster its worker threads "
                  "say how many racks run at a time", file=sys.stderr)
            return 2
        from cluster.experiments import pointpool
        with pointpool.backend(dask=args.dask) as dask:
            print(f"dmrack reproduce: fresh racks run on the Dask cluster at {dask.address} "
                  f"({dask.threads()} worker threads now)", file=sys.stderr)
            return _run_experiment(exp, args, jobs=1)
    jobs = available_cpus() if args.jobs is None else _whole(args.jobs)
    if jobs is None or jobs < 1:
        print(f"dmrack reproduce: --jobs takes a whole number of processes, at least 1; got {args.jobs!r}",
              file=sys.stderr)
        return 2
    return _run_experiment(exp, args, jobs=jobs)


def _cmd_sensitivity(args) -> int:
    """Run a paper's headline parts once per profile assumption and factor; print what moved."""
    import os

    from cluster.experiments import sensitivity
    from cluster.experiments.progress import set_quiet
    exp = _experiment("reproduce", args.paper)
    if exp is None:
        return 2
    jobs = 1 if args.jobs is None else _whole(args.jobs)
    if jobs is None or jobs < 1:
        raise ValueError(f"--jobs takes a whole number of processes, at least 1; got {args.jobs!r}")
    factors = sensitivity.parse_factors(args.factors)
    knobs = _only(args.knobs)
    if args.plot:
        from cluster.experiments.plot import require
        require()
        _make_dir(args.plot, flag="--plot")
    json_path = args.json or (os.path.join(args.plot, f"sensitivity-{exp.name}.json") if args.plot else None)
    set_quiet(True)                       # the experiment's own bar would redraw per run: one line per run instead
    res = sensitivity.run(exp, parts=_only(args.only), quick=args.quick, jobs=jobs, knobs=knobs, factors=factors,
                          json_path=json_path, log=None if args.quiet else sensitivity.main_log)
    console = _console()
    sensitivity.print_report(console, res, all_rows=args.all_rows)
    if json_path:
        print(f"wrote {len(res['rows'])} records and the table to {json_path}")
    if args.plot:
        paths = sensitivity.write_tornado(res, args.plot, f"sensitivity-{exp.name}")
        print(f"wrote {len(paths)} figure(s) to {args.plot}")
    return 0


def _cmd_compare(args) -> int:
    from cluster.experiments import compare
    from cluster.experiments.rows import check_json_path
    check_json_path(args.json)
    c = compare.compare_files(args.old, args.new, tolerance_pct=args.tolerance, include_real=args.include_real)
    compare.print_comparison(_console(), c)
    if args.json:
        compare.write_json(args.json, c)
    return c.status


def _cmd_check(args) -> int:
    from cluster.correctness import check
    from cluster.experiments.progress import set_quiet
    set_quiet(args.quiet)
    if (args.system is None) == (args.history is None):
        raise ValueError("give --system NAME (check a system) or --history FILE (check a recorded history)")
    if args.out:
        _make_dir(args.out)
    if args.history is not None:
        if args.option or args.quick or args.heavy or args.seed is not None or args.trace or args.profile \
                or args.chaos is not None or args.only or args.scale:
            raise ValueError("--option, --quick, --heavy, --seed, --profile, --chaos, --only, --scale and --trace go "
                             "with --system, not --history")
        if args.time_limit <= 0:
            raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
        return check.check_history_file(args.history, time_limit_s=args.time_limit, console=_console(),
                                        report_path=args.report, out_dir=args.out, json_path=args.json)
    if args.quick and args.heavy:
        raise ValueError("--quick and --heavy do not go together: --heavy is the longer, harder stress")
    _check_failpoints()
    if args.profile is not None:
        from shm.profile import load_profile
        load_profile(args.profile)               # an unknown name: one line, exit 2
    options = _parse_options(args.system, args.option)
    from nodes.systems import is_transactional
    if is_transactional(args.system):
        return _check_txn(args, options)
    bounds = _trace_bounds(args)
    from cluster.correctness.chaos import parse as parse_chaos
    from cluster.correctness.conformance import CHECKS, HEAVY_CHECKS, STRESS_CHECKS, Scale
    chaos = parse_chaos(args.chaos, args.chaos_seed) if args.chaos is not None else None
    only = [c.strip() for c in args.only.split(",") if c.strip()] if args.only else None
    if only is not None:
        known = {**CHECKS, **HEAVY_CHECKS, **STRESS_CHECKS}
        unknown = [c for c in only if c not in known]
        if unknown or not only:
            raise ValueError(f"--only {args.only!r}: unknown check(s) {', '.join(map(repr, unknown)) or '(none)'}; "
                             f"the checks are {', '.join(known)}")
    if args.scale is not None and only is None:
        raise ValueError("--scale goes with --only CHECKS (it sizes those conformance checks)")
    if only is not None and args.trace and not any(c.startswith(("history_", "stress_")) for c in only):
        raise ValueError("--trace with --only records a history check (history_uniform, history_zipfian, "
                         "history_heavy, stress_uniform, stress_zipfian): name one")
    scale = Scale.parse(args.scale) if args.scale is not None else None
    try:
        report = check.run(args.system, options=options, quick=args.quick, heavy=args.heavy, seed=args.seed or 1,
                           console=_console(), json_path=args.json, report_path=args.report, out_dir=args.out,
                           trace=(args.trace, bounds) if bounds is not None else None, profile=args.profile,
                           chaos=chaos, only=only, scale=scale, shrink_failures=not args.no_shrink)
    except check.StressRackFailed as e:
        print(f"FAIL: {args.system}: {e}", file=sys.stderr)
        return 1
    return 0 if report.passed else 1


def _check_txn(args, options: dict) -> int:
    """``dmrack check --system NAME`` of a transactional system (cluster/correctness/txn_check.py)."""
    from cluster.correctness import txn_check
    from cluster.correctness.chaos import parse as parse_chaos
    if args.scale is not None or args.trace:
        raise ValueError(f"--scale and --trace go with the KV checks; system {args.system!r} is transactional "
                         f"(its checks: {', '.join(list(txn_check.TXN_CHECKS) + [txn_check.STRESS])})")
    chaos = parse_chaos(args.chaos, args.chaos_seed) if args.chaos is not None else None
    only = [c.strip() for c in args.only.split(",") if c.strip()] if args.only else None
    if only is not None:
        known = list(txn_check.TXN_CHECKS) + [txn_check.STRESS]
        unknown = [c for c in only if c not in known]
        if unknown or not only:
            raise ValueError(f"--only {args.only!r}: unknown check(s) {', '.join(map(repr, unknown)) or '(none)'}; "
                             f"the transactional checks are {', '.join(known)}")
    report = txn_check.run(args.system, options=options, quick=args.quick, heavy=args.heavy, seed=args.seed or 1,
                           console=_console(), json_path=args.json, report_path=args.report, out_dir=args.out,
                           profile=args.profile, chaos=chaos, only=only)
    return 0 if report.passed else 1


def _cmd_systems(args) -> int:
    """The built-in systems, the installed dmrack.systems entry points and the module:Class names
    given on the command line, each with where it came from. A named system that does not load is
    one line, exit 2; an installed entry point that does not load is listed with its error."""
    import json
    from nodes.systems import BUILTIN, SystemLoadError, entry_points, get_system, system_names, system_origin
    eps = entry_points()
    rows = []
    for name in list(dict.fromkeys(system_names() + list(args.names or []))):
        asked = name in (args.names or [])
        try:
            cls = get_system(name)
            origin = system_origin(name)
        except SystemLoadError as e:
            if asked:
                raise
            rows.append({"name": name, "source": f"entry point {eps[name].value}" if name in eps else "?",
                         "error": str(e), "description": "", "paper": "", "roles": [], "scan": False, "options": {}})
            continue
        rows.append({"name": name, "source": origin, "class_name": cls.name, "description": cls.description,
                     "paper": cls.paper, "roles": list(cls.roles), "scan": cls.supports_scan,
                     "options": {o.name: {"default": o.default, "help": o.help} for o in cls.options}})
    for name, ep in eps.items():                 # an entry point shadowed by a built-in is a clash
        if name in BUILTIN:
            rows.append({"name": name, "source": f"entry point {ep.value}", "description": "", "paper": "",
                         "error": f"entry point {name!r} ({ep.value}) clashes with the built-in system {name!r}; "
                                  f"the built-in is used", "roles": [], "scan": False, "options": {}})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table
    table = Table(title="systems")
    for col in ("name", "source", "roles", "scan", "options (default)", "description"):
        table.add_column(col)
    for r in rows:
        if "error" in r:
            table.add_row(r["name"], r["source"], "", "", "", f"[bold red]cannot be used:[/] {r['error']}")
            continue
        table.add_row(r["name"], r["source"], ", ".join(r["roles"]), "yes" if r["scan"] else "no",
                      "\n".join(f"{k} ({v['default']})" for k, v in r["options"].items()),
                      r["description"] + (f"\n[dim]{r['paper']}[/]" if r["paper"] else ""))
    _console().print(table)
    return 0


def _cmd_profiles(args) -> int:
    from rich.table import Table
    from shm.profile import list_profiles, load_profile
    if getattr(args, "json", False):
        import json
        from dataclasses import asdict
        print(json.dumps([{k: v for k, v in asdict(load_profile(n)).items()} for n in list_profiles()],
                         indent=2, default=str))
        return 0
    if getattr(args, "assumptions", False):
        return _profile_assumptions()
    table = Table(title="hardware profiles")
    for col in ("name", "link", "one-way", "PCIe per-WR / payload", "doorbells", "WQE cache", "description"):
        table.add_column(col)
    for name in list_profiles():
        p = load_profile(name)
        table.add_row(name, f"{p.link.gbps:g} Gb/s", f"{p.link.one_way_ns} ns",
                      f"{p.pcie.gbps:g} / {p.pcie.payload_gbps:g} Gb/s",
                      f"{p.doorbell.low_latency}+{p.doorbell.medium_latency}", str(p.wqe_cache.capacity),
                      p.description)
    _console().print(table)
    return 0


def _profile_assumptions() -> int:
    """Each shipped profile's [assumptions] (its knobs without a published source), with their
    values and units: the knobs ``dmrack sensitivity`` varies."""
    from rich.table import Table
    from shm.profile import assumptions_by_section, list_profiles, load_profile, schema_fields
    units = {k: meta["unit"] for k, _, meta in schema_fields(optional=True)}
    table = Table(title="assumptions: profile knobs without a published source (dmrack sensitivity varies them)")
    for col in ("profile", "section", "knobs (value unit)"):
        table.add_column(col)
    for name in list_profiles():
        p = load_profile(name)
        for section, names in assumptions_by_section(p).items():
            values = (_knob_value(getattr(getattr(p, section), n), units[f"{section}.{n}"]) for n in names)
            table.add_row(name, section, ", ".join(f"{n} ({v})" for n, v in zip(names, values)))
        if not p.assumptions:
            table.add_row(name, "-", "none declared")
    _console().print(table)
    return 0


def _knob_value(v, unit: str) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:g} {unit}" if isinstance(v, float) else f"{v} {unit}"


def _cmd_clean(args) -> int:
    from shm.segment import list_segments, reclaim_stale
    gone = reclaim_stale()
    left = list_segments()
    print(f"dmrack clean: removed {len(gone)} stale segment(s)"
          + (f"; {len(left)} segment(s) of live racks left alone" if left else ""))
    return 0


PLOT_HELP = ("write a PNG per figure into DIR (created if missing), and the result JSON too unless --json "
             "is given; needs matplotlib: pip install 'dmrack[plot]'")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose --help can end with the experiments of a kind (``experiments``:
    "bench" or "reproduce"), each with its title and the parts --only takes. They are read from
    the registry when the help is printed, not when the parser is built, so that no other command
    imports an experiment."""

    def __init__(self, *args, experiments: str | None = None, **kwargs):
        if experiments:
            kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.experiments = experiments

    def format_help(self) -> str:
        if self.experiments and self.epilog is None:
            from cluster.experiments.registry import KINDS, available
            found = available(self.experiments)
            width = max((len(e.name) for e in found), default=0)
            noun = KINDS[self.experiments]
            lines = [f"{noun}s (dmrack {self.experiments} {noun.upper()}):"]
            for e in found:
                lines.append(f"  {e.name:<{width}}  {e.title}")
                if e.parts:
                    lines.append(f"  {'':<{width}}  --only {', '.join(e.parts)}")
            self.epilog = "\n".join(lines)
        return super().format_help()


# Python's cyclic collector, set for the emulator's heaps. With the default thresholds (700, 10,
# 10) a collection of the youngest objects runs every 700 net allocations and a full one, which
# visits every tracked object, every hundred of those: a reproduction's point holds 10^5-10^6
# long-lived objects (a loaded index, its keys, the coroutines) and a verb allocates a few short-
# lived ones, so full collections went over the same live heap again and again: 25-30 % of DPA-Store's
# Figs. 10 and 12, 6 % of FlexKV's Fig. 11, a third of a PD3 point's run (docs/bench.md, "The
# compiled fabric core, third step"). At these thresholds garbage cycles are still found by the
# young collection (every 100,000 allocations: a few MB at most), and a full collection runs a
# thousand times less often. Node processes forked by `dmrack run`/`up` and experiment workers
# inherit it. dmrack has no __del__ or weakref finaliser whose timing could matter, and the
# reproductions' rows are identical either way (dmrack compare of every --quick reproduction).
GC_THRESHOLDS = (100_000, 50, 100)


class Terminated(KeyboardInterrupt):
    """SIGTERM to a command that runs no supervisor of its own (``reproduce``, ``bench``, ...):
    unwound as Ctrl-C is, so its pool's workers are terminated (each unlinks its segments on
    SIGTERM, shm/segment.py) and its own racks close, instead of the process dying at once and
    its workers with it (their parent-death signal is SIGKILL), leaving their segments behind.
    ``dmrack up``/``run`` put their supervisor's handler in its place while they run."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return _main(argv)
    finally:
        gc.set_threshold(*before)     # main() called in-process (tests) leaves the caller's as it was


def _main(argv=None) -> int:
    parser = _Parser(prog="dmrack", description="Emulated disaggregated-memory rack")
    sub = parser.add_subparsers(dest="command", required=True)

    def run_flags(p):
        p.add_argument("--duration", type=float, metavar="S", help="stop after S real seconds")
        p.add_argument("--seed", type=int, help="random seed (overrides the spec's rack.seed)")
        p.add_argument("--no-dashboard", action="store_true", help="no live dashboard (plain progress lines)")
        p.add_argument("--out", metavar="DIR", help="write DIR/results.json and DIR/results.csv")
        p.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
        p.add_argument("--csv", metavar="PATH", help="write the results as CSV to PATH")
        p.add_argument("--history", metavar="PATH", help="record every operation and write them as JSON lines")
        p.add_argument("--check", action="store_true",
                       help="record every operation and check the history for linearizability at the end "
                            "(values must be >= 16 bytes to carry versions; dmrack up makes them 16)")
        p.add_argument("--colocated", action="store_true",
                       help="run every node in this process (deterministic; scenarios must end by themselves)")
        trace_flags(p, "the start of the first run step (needs --colocated)")

    def trace_flags(p, what):
        p.add_argument("--trace", metavar="FILE",
                       help=f"write {what} as a Chrome trace-event / Perfetto JSON timeline to FILE "
                            f"(operations, verbs with their NIC, PCIe and link stages, CPU; docs/trace.md)")
        p.add_argument("--trace-window-us", type=float, metavar="US",
                       help="--trace: record the operations that begin within US virtual µs of the start of "
                            "the measured part (default 100)")
        p.add_argument("--trace-ops", type=int, metavar="N",
                       help="--trace: record at most N operations (default 1000)")

    def set_flag(p):
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a spec key, e.g. --set compute.threads=8 (repeatable)")

    u = sub.add_parser("up", help="run the built-in default rack (RACE, YCSB-A zipf 0.99), or a file's rack, "
                                  "until Ctrl-C")
    u.add_argument("rack", nargs="?", help="a scenario file whose rack to bring up with the default steps (its "
                                           "[[step]] list is left out: load, then run until Ctrl-C); default: the "
                                           "built-in rack")
    set_flag(u)
    run_flags(u)
    u.set_defaults(func=_cmd_up)

    r = sub.add_parser("run", help="run a scenario file (a rack spec plus steps)")
    r.add_argument("file", help="scenario TOML file")
    set_flag(r)
    run_flags(r)
    r.set_defaults(func=_cmd_run)

    w = sub.add_parser("warm", help="compile the fabric's kernels ahead of a first run (numba caches them; "
                                    "a first `dmrack up` does it too, in 10-40 s)")
    w.add_argument("files", nargs="*", metavar="FILE",
                   help="scenario files whose racks to warm up (default: the built-in rack of `dmrack up`)")
    w.set_defaults(func=_cmd_warm)

    def quiet_flag(p):
        p.add_argument("--quiet", action="store_true",
                       help="no progress bar on stderr (there is none anyway when stderr is not a terminal)")

    b = sub.add_parser("bench", help="benchmarks that print published vs emulated tables", experiments="bench")
    b.add_argument("suite", help="which suite (listed below)")
    b.add_argument("--system", default="race", help="ycsb: the system to measure (default race)")
    b.add_argument("--quick", action="store_true", help="reduced sweeps (about two minutes)")
    b.add_argument("--json", metavar="PATH", help="also write the rows as JSON records")
    b.add_argument("--only", metavar="EXP[,EXP]", action="append",
                   help="run only these experiments / workloads (comma-separated or repeated)")
    b.add_argument("--plot", metavar="DIR", help=PLOT_HELP)
    quiet_flag(b)
    trace_flags(b, "the first point of ycsb (its measured step)")
    b.set_defaults(func=_cmd_bench)

    rp = sub.add_parser("reproduce", help="a paper's experiments at reduced scale, published beside emulated",
                        experiments="reproduce")
    rp.add_argument("paper", help="which paper (listed below)")
    rp.add_argument("--quick", action="store_true", help="fewer points and shorter windows")
    rp.add_argument("--json", metavar="PATH", help="also write the rows as JSON records")
    rp.add_argument("--only", metavar="EXP[,EXP]", action="append",
                    help="run only these experiments (comma-separated or repeated)")
    rp.add_argument("--jobs", metavar="N",
                    help=f"fresh racks run side by side, N at a time (default: the CPUs available, "
                         f"{available_cpus()} here); the figures do not depend on it")
    rp.add_argument("--plot", metavar="DIR", help=PLOT_HELP)
    quiet_flag(rp)
    rp.add_argument("--dask", metavar="ADDRESS",
                    help="run the fresh racks as tasks on a Dask cluster instead: a scheduler's tcp://HOST:PORT, "
                         "or local:N to start N worker processes on this machine (needs dmrack[dist]); "
                         "the same rows as --jobs")
    rp.set_defaults(func=_cmd_reproduce)

    se = sub.add_parser("sensitivity", help="a paper's headline rows with each profile assumption at 0.5x and 2x: "
                                            "which published rows move, and by how much",
                        experiments="reproduce")
    se.add_argument("paper", help="which paper (listed below; its headline parts run unless --only)")
    se.add_argument("--quick", action="store_true", help="the --quick scale of dmrack reproduce")
    se.add_argument("--only", metavar="EXP[,EXP]", action="append",
                    help="run these parts instead of the paper's headline (comma-separated or repeated)")
    se.add_argument("--knobs", metavar="SECTION.KEY[,...]", action="append",
                    help="vary only these knobs (default: every knob in the [assumptions] of the paper's profiles; "
                         "a sourced knob may be named too)")
    se.add_argument("--factors", metavar="F[,F]", help="the factors each knob is multiplied by (default 0.5,2; "
                                                       "integers are rounded; a boolean knob is flipped)")
    se.add_argument("--json", metavar="PATH",
                    help="write the rows and the table here after every run; given again, a stopped run resumes")
    se.add_argument("--plot", metavar="DIR", help="write a tornado chart per published row that moved into DIR "
                                                  "(and the JSON, unless --json says where); needs matplotlib")
    se.add_argument("--jobs", metavar="N", help="fresh racks side by side within each run (default 1)")
    se.add_argument("--all-rows", action="store_true", help="print every published row, not only those that moved")
    quiet_flag(se)
    se.set_defaults(func=_cmd_sensitivity)

    pl = sub.add_parser("plot", help="figures (PNG) of saved --json files of bench or reproduce, without rerunning")
    pl.add_argument("results", nargs="+", metavar="RESULT.json", help="--json files of bench or reproduce")
    pl.add_argument("--out", required=True, metavar="DIR",
                    help="write DIR/<file name>-<figure>.png (created if missing)")
    pl.set_defaults(func=_cmd_plot)

    rep = sub.add_parser("report", help="one self-contained HTML page of --json files: summary, provenance, "
                                        "figures, published beside emulated")
    rep.add_argument("results", nargs="+", metavar="RESULT.json",
                     help="--json files of bench or reproduce, or results.json of run or up (docs/results.md)")
    rep.add_argument("-o", "--output", required=True, metavar="PATH", help="the HTML file to write")
    rep.set_defaults(func=_cmd_report)

    cp = sub.add_parser("compare", help="what changed between two --json files of bench or reproduce (or results.json "
                                        "files of run or up); "
                                        "exit 1 if a row left ±30 %% of its published value")
    cp.add_argument("old", metavar="OLD.json", help="the earlier run's --json file (bench or reproduce), or results.json (run)")
    cp.add_argument("new", metavar="NEW.json", help="the later run's --json file")
    cp.add_argument("--tolerance", type=float, default=0.0, metavar="PCT",
                    help="relative moves up to PCT %% count as unchanged (default 0: any change is a move)")
    real = cp.add_mutually_exclusive_group()
    real.add_argument("--ignore-real", dest="include_real", action="store_false", default=False,
                      help="list rows that measure wall-clock time (metric with 'real' or 'wall') apart, "
                           "not compared (the default)")
    real.add_argument("--include-real", dest="include_real", action="store_true",
                      help="compare the wall-clock rows too")
    cp.add_argument("--json", metavar="PATH", help="also write the comparison as JSON")
    cp.set_defaults(func=_cmd_compare)

    ck = sub.add_parser("check", help="conformance suite and a multi-process stress with the history checked, "
                                      "or a recorded history checked for linearizability")
    ck.add_argument("--system", help="the system to check: a name (see dmrack systems) or a plugin as module:Class")
    ck.add_argument("--history", metavar="FILE",
                    help="instead: check this recorded history (JSON lines, from --history) for linearizability; "
                         "exit status 0 linearizable, 1 not, 2 malformed, 3 undecided")
    ck.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                    help="--history: seconds the checker may take (default 10)")
    ck.add_argument("--report", metavar="PATH",
                    help="write the full report (every explanation) here; default dmrack-check-NAME.txt in --out "
                         "or the current directory, written when something fails")
    ck.add_argument("--out", metavar="DIR", help="directory for the report (created if missing)")
    ck.add_argument("--option", action="append", metavar="KEY=VALUE", help="a system option (repeatable)")
    ck.add_argument("--quick", action="store_true", help="a shorter stress")
    ck.add_argument("--heavy", action="store_true",
                    help="a harder stress: 1000-byte values (16 lines), 8 x 8 clients per node on 16 keys")
    ck.add_argument("--seed", type=int, help="random seed")
    ck.add_argument("--profile", metavar="NAME",
                    help="the hardware profile of the checks' racks (default cx6-200g, whose multi-line WRITEs land "
                         "in descending order; see dmrack profiles)")
    ck.add_argument("--chaos", nargs="?", const="all", metavar="KINDS",
                    help="adversarial timing within the fabric's ordering rules, to open narrow race windows: "
                         "effect, completion, lines, resume, writeback (comma-separated; default all); "
                         "see docs/checking.md")
    ck.add_argument("--chaos-seed", type=int, default=1, metavar="N",
                    help="the seed of the chaos delays (default 1); a failure prints the one to replay it")
    ck.add_argument("--only", metavar="CHECKS",
                    help="run only these conformance checks (comma-separated; no process stress): what a replay of "
                         "a shrunk failure runs")
    ck.add_argument("--scale", metavar="SIZES",
                    help="run the --only checks smaller: threads=N,coroutines=N,keys=N,length=F (a shrunk failure)")
    ck.add_argument("--no-shrink", action="store_true",
                    help="do not search for a smaller run of a failing conformance check")
    ck.add_argument("--json", metavar="PATH", help="also write the verdict as JSON")
    quiet_flag(ck)
    trace_flags(ck, "a co-located run of the stress (and the operations of failing keys)")
    ck.set_defaults(func=_cmd_check)

    sy = sub.add_parser("systems", help="list the systems that run on the rack (built-in, installed plugins)")
    sy.add_argument("names", nargs="*", metavar="MODULE:CLASS",
                    help="also list these plugin systems (module:Class, imported from PYTHONPATH)")
    sy.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sy.set_defaults(func=_cmd_systems)

    p = sub.add_parser("profiles", help="list the shipped hardware profiles")
    p.add_argument("--json", action="store_true", help="print every profile as JSON")
    p.add_argument("--assumptions", action="store_true",
                   help="list each profile's knobs without a published source (its [assumptions] table)")
    p.set_defaults(func=_cmd_profiles)

    c = sub.add_parser("clean", help="remove shared memory left behind by dead racks")
    c.set_defaults(func=_cmd_clean)

    args = parser.parse_args(argv)
    # only where nobody else handles SIGTERM (main() called in-process by a test keeps its own)
    own_term = threading.current_thread() is threading.main_thread() \
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if own_term:
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return args.func(args)
    except Terminated:
        print("dmrack: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("dmrack: interrupted", file=sys.stderr)
        return 130
    except (ValueError, KeyError, FileNotFoundError, MemoryError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"dmrack {args.command}: {msg}", file=sys.stderr)
        return 2
    except CalendarAliased as e:
        # not bad input: the model's calendars were too short for this run (a bug to report)
        print(f"dmrack {args.command}: {e}", file=sys.stderr)
        return 1
    finally:
        if own_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
