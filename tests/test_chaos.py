"""Chaos (docs/checking.md, "Chaos"): its draws (compiled against plain Python), that it delays
effects, completions and resumptions within their maxima, that a run is the same for the same
seed and that a [chaos] table with every kind off moves no time. That it never breaks an ordering
rule: tests/test_chaos_rules.py."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.correctness.chaos import DEFAULTS, KINDS, ChaosSpec, applied, parse
from shm import nic
from shm.profile import load_profile, with_overrides


# -- the draws -------------------------------------------------------------------------------------

def test_compiled_draws_equal_the_plain_python_ones():
    rng = np.random.default_rng(5)
    for _ in range(2000):
        seed, salt, n = (int(x) for x in rng.integers(0, 1 << 62, 3))
        share = int(rng.integers(0, nic.CHAOS_SHARE_ONE + 1))
        most = int(rng.integers(0, 10**7))
        assert nic.chaos_draw(seed, salt, n, share, most) == nic.chaos_draw_py(seed, salt, n, share, most)


def test_draws_are_uniform_up_to_the_maximum_and_drawn_at_the_share():
    draws = [nic.chaos_draw_py(7, 3, n, nic.CHAOS_SHARE_ONE // 4, 1000) for n in range(20000)]
    drawn = [d for d in draws if d > 0]
    assert 0.23 < len(drawn) / len(draws) < 0.27
    assert max(drawn) <= 1000 and 450 < np.mean(drawn) < 550
    assert all(nic.chaos_draw_py(7, 3, n, 0, 1000) == 0 for n in range(1000))


# -- what chaos does -------------------------------------------------------------------------------

def _read_times(profile, n=200):
    """Effect and completion (ns) of ``n`` single 8-byte READs posted one after another on one QP."""
    from cluster.experiments.bench_verbs import Rig
    from shm.coro import NodeRdma
    from shm.fabric import gaddr
    out = []
    with Rig(profile, 1, 1, mem_bytes=1 << 20) as rig:
        node = NodeRdma(rig.host, rig.cns[0], policy="per_thread_doorbell")
        thr = node.thread()
        qp = thr.qp(rig.mns[0])
        rows = np.zeros((1, nic.WR_COLS), np.int64)
        rows[0, nic.WR_LEN] = 8
        t = 0
        for k in range(n):
            rows[0, nic.WR_OFF] = 64 * k
            qp.model_post(rig.mns[0], rows)
            out.append((t, int(rows[0, nic.WR_OUT + nic.OUT_EFFECT]), int(rows[0, nic.WR_OUT + nic.OUT_DONE])))
            t += 10_000
            rig.env.run(until=t)
        _ = gaddr
    return out


def test_chaos_delays_effects_and_completions_within_their_maxima():
    base = load_profile("cx6-200g")
    calm = _read_times(base)
    spec = ChaosSpec(("effect",), seed=4)
    stormy = _read_times(with_overrides(base, spec.overrides()))
    later = [(s[1] - c[1]) for c, s in zip(calm, stormy)]
    assert all(0 <= d <= DEFAULTS["effect"][1] + 1 for d in later)
    assert sum(d > 0 for d in later) > 20                     # a quarter of the READs, about
    assert _read_times(with_overrides(base, spec.overrides())) == stormy        # the same seed: the same times
    assert _read_times(with_overrides(base, spec._replace(seed=5).overrides())) != stormy
    done = _read_times(with_overrides(base, ChaosSpec(("completion",), 4).overrides()))
    assert [c[1] for c in done] == [c[1] for c in calm]       # effects untouched
    assert any(d[2] > c[2] for c, d in zip(calm, done))       # completions later
    assert all(d[2] >= d[1] for d in done)


def test_no_chaos_table_moves_nothing():
    base = load_profile("cx6-200g")
    off = ChaosSpec((), seed=9).overrides()                   # the table, every kind 0
    assert _read_times(with_overrides(base, off)) == _read_times(base)


def test_a_descheduled_thread_resumes_late():
    from cluster.experiments.bench_verbs import Rig
    from shm.coro import NodeRdma
    from shm.fabric import gaddr

    def loop_time(profile):
        with Rig(profile, 1, 1, mem_bytes=1 << 20) as rig:
            env = rig.env
            co = NodeRdma(rig.host, rig.cns[0]).thread().coroutine()
            ends = []

            def body():
                for k in range(50):
                    co.read(gaddr(rig.mns[0], 64 * k), 8)
                    yield co.sync()
                    ends.append(env.now)
            env.process(body())
            env.run()
            return ends
    base = load_profile("cx6-200g")
    calm = loop_time(base)
    late = loop_time(with_overrides(base, ChaosSpec(("resume",), 2).overrides()))
    assert late[-1] > calm[-1]
    assert late[-1] - calm[-1] <= 50 * DEFAULTS["resume"][1]


def test_chaos_kinds_parse_and_refuse_unknown_ones():
    assert parse(None, 3) == ChaosSpec(KINDS, 3)
    assert parse("all", 3).kinds == KINDS
    assert parse("resume, effect", 3).kinds == ("effect", "resume")
    assert parse("lines", 8).flags() == "--chaos lines --chaos-seed 8"
    assert parse(None, 8).flags() == "--chaos --chaos-seed 8"
    with pytest.raises(ValueError, match="unknown kind.*'jitter'.*the kinds are effect, completion"):
        parse("effect,jitter", 1)
    with pytest.raises(ValueError, match="--chaos-seed"):
        parse(None, -1)
    ov = ChaosSpec(("lines",), 2).overrides()
    assert ov["chaos.line_gap_ns"] == DEFAULTS["lines"][1] and ov["chaos.effect_ns"] == 0


# -- faults that only chaos catches (docs/checking.md, "Chaos") ------------------------------------

PLUGIN_DIR = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "plugin"
#: chaos seeds a caught fault must be caught within (the suite's co-located checks are the same
#: run for the same seed: these are deterministic)
SEEDS = (1, 2, 3)


def _suite(system: str, only, options: dict, chaos_seed: int | None, kinds=KINDS):
    from cluster.correctness.conformance import run_suite
    spec = ChaosSpec(kinds, chaos_seed) if chaos_seed is not None else None
    with applied(spec):
        return {o.name: o for o in run_suite(system, only=only, options=options)}


def _caught_within_seeds(system: str, only, options: dict, kinds=KINDS) -> int | None:
    """The first chaos seed of SEEDS under which a check of ``only`` fails, or None."""
    for seed in SEEDS:
        if not all(o.passed for o in _suite(system, only, options, seed, kinds).values()):
            return seed
    return None


@pytest.mark.parametrize("system, only, fault, kinds", [
    ("toyht.chainkv:ChainKV", ["no_torn_values", "history_zipfian"], "link-before-write", KINDS),
    ("sherman", ["no_torn_values"], "value-after-entry", KINDS),
    # the block must land more than a reader's round trip after the leaf naming it: the stall
    # kind's rare long delays give that (docs/checking.md, "What it catches")
    ("rolex", ["no_torn_values", "history_zipfian"], "value-with-write-back", KINDS),
])
def test_a_narrow_window_fault_passes_without_chaos_and_fails_with_it(monkeypatch, system, only, fault, kinds):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    options = {"fault": fault}
    calm = _suite(system, only, options, None)
    assert all(o.passed for o in calm.values()), {n: o.detail for n, o in calm.items()}
    assert _caught_within_seeds(system, only, options, kinds) is not None, \
        f"{system} {fault}: not caught on seeds {SEEDS}"


def test_the_correct_designs_pass_under_chaos(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    for system in ("toyht.chainkv:ChainKV", "sherman"):
        assert _caught_within_seeds(system, ["no_torn_values", "history_zipfian"], {}) is None, system


def test_a_check_reports_the_windows_it_hit():
    """The co-located checks' window counters (shm.fabric.WINDOW_COUNTERS): chaos's delays only
    under chaos, raced CASes and READs overlapped by writes either way; the line under the verdict."""
    from cluster.correctness.check import windows_line
    from shm.fabric import windows_hit

    def hit(seed):
        before = windows_hit()
        _suite("race", ["no_torn_values"], {}, seed)
        return {k: v - before[k] for k, v in windows_hit().items()}
    calm, stormy = hit(None), hit(1)
    assert calm["chaos_delays"] == calm["resumes_delayed"] == 0
    assert calm["cas_raced"] > 0 and stormy["cas_raced"] > 0
    assert stormy["chaos_delays"] > 0 and stormy["resumes_delayed"] > 0
    assert 0 < stormy["chaos_delay_ns"] / stormy["chaos_delays"] <= DEFAULTS["effect"][1]
    assert "CASes lost a race" in windows_line(calm) and "chaos" not in windows_line(calm)
    assert "chaos delayed" in windows_line(stormy)


def test_the_stall_kind_alone_draws_rare_long_delays():
    """``--chaos stall``: few requests delayed, each by much more than effect's largest delay (a
    stall is uniform up to 20 µs on one request in 32)."""
    from shm.fabric import windows_hit
    before = windows_hit()
    _suite("race", ["no_torn_values"], {}, 1, ("stall",))
    got = {k: v - before[k] for k, v in windows_hit().items()}
    assert got["chaos_delays"] > 0 and got["resumes_delayed"] == 0
    assert got["chaos_delay_ns"] / got["chaos_delays"] > DEFAULTS["effect"][1]


def test_each_kind_alone_lines_and_writeback(prefix):
    """``--chaos lines`` alone spreads a multi-line WRITE's lines over a longer window (and keeps
    them in order: tests/test_chaos_rules.py); ``--chaos writeback`` alone, with
    ``nic.atomic_write_race``, widens the window in which a CAS's write-back undoes a WRITE."""
    from tests.test_atomic_race import DELAYS, cas_then_write
    from tests.test_coro import new_fabric, setup
    from tests.test_landing import KIB, ordered, watch_write

    def spread(profile):
        with new_fabric(prefix, profile=profile, mem=4 << 20) as fab:
            env, node = setup(fab)
            seen, _ = watch_write(env, fab, node.thread().coroutine(), fab.allocate("m0", KIB))
        partial = [t for t, s in seen if any(s) and not all(s)]
        return partial[-1] - partial[0] if partial else 0
    calm = ordered(False)
    stretched = [spread(with_overrides(calm, ChaosSpec(("lines",), seed).overrides())) for seed in (1, 2, 3, 4)]
    assert max(stretched) > spread(calm) + 100          # some transfers drew a gap (16 lines x up to 20 ns)

    race = with_overrides(calm, {"nic.atomic_write_race": True})
    with new_fabric(prefix, profile=race) as fab:
        lost_calm = cas_then_write(fab, DELAYS).count(1)
    spec = ChaosSpec(("writeback",), 1)
    with new_fabric(prefix, profile=with_overrides(race, spec.overrides())) as fab:
        lost_late = cas_then_write(fab, DELAYS).count(1)
        assert fab.windows["write_backs_delayed"] > 0
    assert lost_late > lost_calm


def test_a_scenario_runs_under_chaos_with_profile_overrides():
    """The [chaos] table is a profile knob: a scenario's [profile_overrides] turn it on."""
    from cluster.scenario import scenario_from_dict
    doc = {"rack": {"name": "chaotic", "profile": "cx6-200g", "seed": 1},
           "profile_overrides": ChaosSpec(KINDS, 7).overrides(),
           "compute": {"count": 1, "threads": 1, "coroutines": 1, "memory": "16MiB"},
           "memory": {"count": 1, "memory": "16MiB"}, "system": {"name": "race"},
           "workload": {"preset": "a", "recordcount": 100, "keysize": 8, "valuesize": 16},
           "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.1}]}
    spec = scenario_from_dict(doc, source="test").spec
    assert spec.profile.chaos.seed == 7 and spec.profile.chaos.effect_ns == DEFAULTS["effect"][1]
