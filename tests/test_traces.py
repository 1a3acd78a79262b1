"""Trace workloads (workloads/traces.py): the Twitter cache-trace CSV reader, the mapping of its
operations onto the rack's, the deterministic split among clients, the synthetic stand-ins
(workloads/twitter_synth.py), and co-located racks replaying a generated trace."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.spec import SpecError
from workloads.properties import WorkloadError
from workloads.traces import (OP_DELETE, TRACE_OPS, TraceWorkload, classify, read_trace, trace_key_id)
from workloads.twitter_synth import PRESETS, SynthParams, synth_rows, write_trace
from workloads.ycsb import OP_INSERT, OP_READ, OP_UPDATE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = """\
0,k1,2,10,1,get,0
0,k2,2,20,1,set,100
1,k1,2,30,2,replace,0
1,k2,2,0,2,get,0
2,k2,2,0,2,delete,0
3,k2,2,5,1,add,0
3,k3,2,0,1,incr,0
"""


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_reads_the_seven_columns(tmp_path):
    rows = read_trace(write(tmp_path, "# a comment\n\n" + SMALL + "4,a,b,9,7,3,get,0\n"))
    assert len(rows.ops) == 8
    assert [TRACE_OPS[o] for o in rows.ops] == ["get", "set", "replace", "get", "delete", "add", "incr", "get"]
    assert rows.value_sizes.tolist() == [10, 20, 30, 0, 0, 5, 0, 7]
    assert rows.timestamps.tolist() == [0, 0, 1, 1, 2, 3, 3, 4]
    assert rows.lines.tolist() == [3, 4, 5, 6, 7, 8, 9, 10]          # comment and blank line skipped
    assert rows.clients.tolist()[:3] == [1, 1, 2] and rows.ttls.tolist()[1] == 100
    # distinct keys in order of first appearance; a key may hold commas (the middle fields)
    assert rows.key_ids.tolist() == [trace_key_id(k) for k in ("k1", "k2", "k3", "a,b")]
    assert rows.keys.tolist() == [0, 1, 0, 1, 1, 1, 2, 3]


def test_key_ids_are_deterministic_63_bit_hashes():
    assert trace_key_id("k1") == trace_key_id("k1") != trace_key_id("k2")
    assert 0 <= trace_key_id("anything") < 1 << 63
    assert trace_key_id("k1") == 2324281397090770841              # BLAKE2b-64, fixed across runs


@pytest.mark.parametrize("line, what", [
    ("0,k,2,10,1,get", "expected 7 comma-separated fields"),
    ("0,k,2,10,1,fetch,0", "unknown operation 'fetch'"),
    ("x,k,2,10,1,get,0", "timestamp 'x' is not an integer"),
    ("0,k,2,-1,1,get,0", "value size -1 is negative"),
    ("0,k,2,10,1,get,1.5", "TTL '1.5' is not an integer"),
    ("0,,2,10,1,get,0", "empty key"),
])
def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, line, what):
    path = write(tmp_path, SMALL + line + "\n", name=f"bad{abs(hash(line))}.csv")
    with pytest.raises(WorkloadError) as e:
        read_trace(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:8: ") and what in msg and "\n" not in msg


def test_empty_and_missing_traces(tmp_path):
    with pytest.raises(WorkloadError, match="has no rows"):
        read_trace(write(tmp_path, "# nothing\n"))
    with pytest.raises(WorkloadError, match="cannot read trace"):
        read_trace(str(tmp_path / "none.csv"))


def test_op_mapping_follows_presence():
    # k1: get first (loaded) -> read, replace -> update; k2: set first (not loaded) -> insert, get -> read,
    # delete -> delete, add after the delete -> insert again; k3: incr first (loaded) -> update
    wl = TraceWorkload(SMALL_PATH)
    assert wl._codes1.tolist() == [OP_READ, OP_INSERT, OP_UPDATE, OP_READ, OP_DELETE, OP_INSERT, OP_UPDATE]
    assert wl.recordcount == 2 and wl.expected_new_keys == 1 and wl.distinct_keys == 3
    assert wl.load_keys(0, 2).tolist() == [trace_key_id("k1"), trace_key_id("k3")]
    # records beyond the loaded keys are filler keys no row touches
    extra = wl.load_keys(0, 4).tolist()
    assert extra[:2] == [trace_key_id("k1"), trace_key_id("k3")] and len(set(extra)) == 4
    assert wl.proportions.read == pytest.approx(2 / 7) and wl.proportions.delete == pytest.approx(1 / 7)
    assert wl.finite and wl.operationcount == 7


def test_loop_passes_start_from_the_state_the_first_pass_ends_in():
    wl = TraceWorkload(SMALL_PATH, {"loop": True})
    # after one pass every key is present: k2's first set and k2's add become updates
    assert wl._codes2.tolist() == [OP_READ, OP_UPDATE, OP_UPDATE, OP_READ, OP_DELETE, OP_INSERT, OP_UPDATE]
    s = wl.stream()
    ops, keys, sizes = s.next_batch(10)
    assert ops.tolist() == wl._codes1.tolist() + wl._codes2.tolist()[:3]
    assert s.statistics().passes == 2 and not wl.finite


def test_value_sizes_are_clamped_or_fixed():
    wl = TraceWorkload(SMALL_PATH)
    # writes carry their row's size clamped to [minvaluesize=16, largest=30]; reads and deletes 0
    assert wl.stream().next_batch(7)[2].tolist() == [0, 20, 30, 0, 0, 16, 16]
    assert wl.value_size == 30 and wl.value_size_of(trace_key_id("k1"), 1) == 16   # first size 10 -> 16
    capped = TraceWorkload(SMALL_PATH, {"valuesize": 25, "minvaluesize": 1})
    assert capped.stream().next_batch(7)[2].tolist() == [0, 20, 25, 0, 0, 5, 1]
    assert capped.value_size_of(trace_key_id("k1"), 1) == 10
    fixed = TraceWorkload(SMALL_PATH, {"valuesize": 8, "valuesizes": "fixed"})
    assert fixed.stream().next_batch(7)[2].tolist() == [0, 8, 8, 0, 0, 8, 8]
    assert fixed.value_size_of(trace_key_id("k1"), 1) == 8
    with pytest.raises(WorkloadError, match="valuesizes = 'fixed' needs valuesize"):
        TraceWorkload(SMALL_PATH, {"valuesizes": "fixed"})
    with pytest.raises(WorkloadError, match="unknown trace property 'lopp'; did you mean 'loop'"):
        TraceWorkload(SMALL_PATH, {"lopp": True})
    with pytest.raises(WorkloadError, match="'split' = 'time': must be one of key, row"):
        TraceWorkload(SMALL_PATH, {"split": "time"})


def test_limit_keeps_the_first_rows():
    wl = TraceWorkload(SMALL_PATH, {"limit": 3})
    assert wl.operationcount == 3 and wl.distinct_keys == 2


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("trace") / "synth.csv")
    write_trace(path, SynthParams(keys=300, rows=3000, alpha=0.8, read_ratio=0.3, delete_ratio=0.05,
                                  value_size="uniform:16:200", seed=5))
    return path


@pytest.mark.parametrize("split", ["key", "row"])
def test_split_is_a_deterministic_partition(synth, split):
    wl = TraceWorkload(synth, {"split": split})
    shares = [wl.share(c, 7) for c in range(7)]
    everything = np.sort(np.concatenate(shares))
    assert everything.tolist() == list(range(wl.operationcount))           # every row exactly once
    assert all((np.diff(s) > 0).all() for s in shares)                     # each in trace order
    again = TraceWorkload(synth, {"split": split})
    assert all((a == again.share(c, 7)).all() for c, a in enumerate(shares))
    if split == "key":                                                     # a key belongs to one client
        owner = {}
        for c, s in enumerate(shares):
            for k in wl.rows.keys[s].tolist():
                assert owner.setdefault(k, c) == c
    else:
        assert shares[3].tolist()[:3] == [3, 10, 17]


def test_streams_replay_their_share(synth):
    wl = TraceWorkload(synth)
    s = wl.client_stream(2, 5)
    got = []
    while True:
        ops, keys, _ = s.next_batch(64)
        if not len(ops):
            break
        got.extend(keys.tolist())
    rows = wl.share(2, 5)
    assert got == wl.rows.key_ids[wl.rows.keys[rows]].tolist()
    assert s.statistics().ops == len(rows)


def test_synthetic_generator_meets_its_parameters(tmp_path):
    p = SynthParams(keys=1000, rows=20000, alpha=1.0, read_ratio=0.25, delete_ratio=0.05, seed=2)
    a, b = str(tmp_path / "a.csv"), str(tmp_path / "b.csv")
    write_trace(a, p)
    write_trace(b, p)
    assert open(a, "rb").read() == open(b, "rb").read()                   # reproducible for a seed
    rows = read_trace(a)
    ops = np.array([TRACE_OPS[o] for o in rows.ops])
    assert abs((ops == "get").mean() - 0.25) < 0.02 and abs((ops == "delete").mean() - 0.05) < 0.01
    counts = np.sort(np.bincount(rows.keys))[::-1]
    assert counts[0] > 10 * np.median(counts)                               # skewed
    assert PRESETS["cluster9"].read_ratio == 1.0 and PRESETS["cluster8"].read_ratio < 0.7
    with pytest.raises(ValueError, match="alpha"):
        synth_rows(p._replace(alpha=-0.5))
    flat = np.bincount(synth_rows(p._replace(alpha=0))["keys"], minlength=p.keys)   # 0: uniform (FlexKV's cluster 35)
    assert flat.max() < 3 * flat.mean()


def test_script_writes_a_stand_in(tmp_path):
    out = tmp_path / "c9.csv"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_twitter_trace.py"), "cluster9", str(out),
                        "--keys", "50", "--rows", "200"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cluster9 stand-in" in r.stdout
    wl = TraceWorkload(str(out))
    assert wl.proportions.read == 1.0 and wl.recordcount == wl.distinct_keys      # read-only: every key loaded


# -- in a rack ------------------------------------------------------------------------------------

def rack(system, trace_dir, workload, steps, compute=2):
    d = {"rack": {"name": "t", "profile": "cx6-200g", "seed": 3},
         "compute": {"count": compute, "threads": 2, "coroutines": 2, "memory": "8MiB"},
         "memory": {"count": 2, "memory": "32MiB"},
         "system": {"name": system},
         "workload": workload,
         "step": steps}
    return scenario_from_dict(d, source="t.toml", base_dir=trace_dir)


def expected_failures(wl):
    """Reads of absent keys and deletes of absent keys, walking the trace from the loaded keys."""
    present = set(wl.preload.tolist())
    fails = {"read": 0, "delete": 0}
    for code, k in zip(wl._codes1.tolist(), wl.rows.keys.tolist()):
        if code == OP_READ:
            fails["read"] += k not in present
        elif code == OP_DELETE:
            fails["delete"] += k not in present
            present.discard(k)
        else:
            present.add(k)
    return fails


@pytest.mark.parametrize("system", ["race", "sherman"])
def test_rack_replays_a_trace_once(synth, system):
    sc = rack(system, os.path.dirname(synth), {"trace": os.path.basename(synth)},
              [{"action": "load"}, {"action": "run"}])             # no duration: ends with the trace
    wl = TraceWorkload(synth)
    res = ColocatedRack(sc).run()
    load, run = res.steps
    assert load.ops == wl.recordcount and load.failures == 0
    kinds = {k.kind: k for k in run.kinds}
    assert run.ops == wl.operationcount                              # every row, once
    codes = np.bincount(wl._codes1, minlength=6)
    assert kinds["read"].ops == codes[OP_READ] and kinds["update"].ops == codes[OP_UPDATE]
    assert kinds["insert"].ops == codes[OP_INSERT] and kinds["delete"].ops == codes[OP_DELETE]
    # split by key keeps each key's operations in order: inserts and updates all succeed, and the
    # only failures are the trace's own misses
    fails = expected_failures(wl)
    assert kinds["update"].failures == 0 and kinds["insert"].failures == 0
    assert kinds["read"].failures == fails["read"] and kinds["delete"].failures == fails["delete"]


def test_rack_loops_a_trace_for_a_timed_run(synth):
    sc = rack("race", os.path.dirname(synth), {"trace": os.path.basename(synth), "loop": True, "limit": 100},
              [{"action": "load"}, {"action": "run", "duration_ms": 0.5}], compute=1)
    run = ColocatedRack(sc).run().steps[1]
    assert run.ops > 100                                             # more than one pass


def test_spec_errors_name_the_trace_file_and_line(tmp_path):
    bad = write(tmp_path, SMALL + "9,k,2,x,1,set,0\n", "bad.csv")
    with pytest.raises(SpecError) as e:
        rack("race", str(tmp_path), {"trace": "bad.csv"}, [{"action": "load"}])
    assert str(e.value) == f"{bad}:8: value size 'x' is not an integer in '9,k,2,x,1,set,0'"
    with pytest.raises(SpecError, match="workload.trace = \"none.csv\": no such trace file"):
        rack("race", str(tmp_path), {"trace": "none.csv"}, [{"action": "load"}])
    with pytest.raises(SpecError, match="give trace or preset, not both"):
        rack("race", str(tmp_path), {"trace": "bad.csv", "preset": "a"}, [{"action": "load"}])
    with pytest.raises(SpecError, match="unknown trace property 'recordcont'"):
        write(tmp_path, SMALL, "ok.csv")
        rack("race", str(tmp_path), {"trace": "ok.csv", "recordcont": 5}, [{"action": "load"}])


def test_cli_exits_2_on_a_malformed_row(tmp_path):
    write(tmp_path, "0,k,2,10,1,get\n", "bad.csv")
    (tmp_path / "r.toml").write_text('[workload]\ntrace = "bad.csv"\n[run]\nduration_ms = 1\n')
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "run", str(tmp_path / "r.toml"), "--colocated",
                        "--no-dashboard"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2
    assert f"{tmp_path / 'bad.csv'}:1: expected 7 comma-separated fields" in r.stderr


SMALL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_small_trace.csv")


@pytest.fixture(autouse=True, scope="module")
def _small_trace():
    with open(SMALL_PATH, "w") as f:
        f.write(SMALL)
    yield
    os.unlink(SMALL_PATH)


# -- the range presets in a rack (scans need a system with scans: sherman) ----------------------------

def test_range_presets_in_a_rack_on_sherman():
    d = {"rack": {"name": "t", "profile": "cx6-200g", "seed": 3},
         "compute": {"count": 1, "threads": 2, "coroutines": 2, "memory": "8MiB"},
         "memory": {"count": 2, "memory": "32MiB"},
         "system": {"name": "sherman"},
         "workload": {"preset": "range-only", "recordcount": 400, "valuesize": 8},
         "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.2},
                  {"action": "run", "duration_ms": 0.2, "workload": "range-write"}]}
    sc = scenario_from_dict(d, source="t.toml")
    assert sc.spec.workload.title == "YCSB RANGE-ONLY"
    res = ColocatedRack(sc).run()
    ro, rw = res.steps[1], res.steps[2]
    assert {k.kind for k in ro.kinds} == {"all", "scan"} and ro.ops > 0
    assert {k.kind for k in rw.kinds} == {"all", "scan", "insert"}
    assert {k.kind: k.failures for k in rw.kinds}["insert"] == 0


def test_range_presets_need_a_system_with_scans():
    from cluster.rack import RackError, compile_scenario
    d = {"workload": {"preset": "range-only", "recordcount": 100},
         "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.1}]}
    with pytest.raises(RackError, match="has scans"):
        compile_scenario(scenario_from_dict(d, source="t.toml"))


def test_preset_names_in_a_spec():
    with pytest.raises(SpecError, match="one of a, b, c, d, e, f, or one of load, range-only, range-write"):
        scenario_from_dict({"workload": {"preset": "range"}}, source="t.toml")
    sc = scenario_from_dict({"workload": {"preset": "load", "recordcount": 100}}, source="t.toml")
    assert sc.spec.workload.build().proportions.insert == 1


def test_trace_keyspace_gives_dense_big_endian_ids(tmp_path):
    from workloads.traces import TraceWorkload
    path = tmp_path / "t.csv"
    path.write_text("0,a,1,8,1,get,0\n1,b,1,8,1,set,0\n2,c,1,8,1,get,0\n3,a,1,8,1,set,0\n")
    wl = TraceWorkload(path, {"keyspace": 10, "keyorder": "big", "recordcount": 5})
    ids = wl.key_ids.tolist()
    assert len(set(ids)) == 3 and all(1 <= i <= 10 for i in ids)
    loaded = wl.load_keys(0, 5).tolist()        # a and c (read first), then 3 fillers after the trace's keys
    assert loaded[:2] == [ids[0], ids[2]] and len(set(loaded)) == 5 and not set(loaded[2:]) & set(ids)
    assert all(1 <= i <= 10 for i in loaded)
    assert wl.key_bytes(0x0102) == bytes(6) + b"\x01\x02"
    _, keys, _ = wl.stream().next_batch(4)
    assert keys.tolist() == [ids[0], ids[1], ids[2], ids[0]]
    with pytest.raises(WorkloadError, match="'keyspace' = 2: must be >= the trace's 3 distinct keys"):
        TraceWorkload(path, {"keyspace": 2})
