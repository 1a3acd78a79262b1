"""Rack specs: the default rack, sizes, node naming, profiles and overrides, systems, workloads, and
every kind of bad input refused with one SpecError line naming the file, the key and the value.

Nothing here starts a process or maps memory: a spec is plain data. The systems registry is given
two test systems (``fake``, ``needs-client``); while the real ``race`` system is not importable yet,
a stand-in with the same name is registered so the default rack can be read.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import types
from pathlib import Path

import pytest

import cluster.spec as spec_mod
import nodes.systems as systems
from cluster.spec import (
    DATA_SHAPE_KEYS, DEFAULT_SOURCE, MANAGER_MEMORY_BYTES, NodeDecl, RackSpec, SpecError, WorkloadSpec,
    apply_overrides, default_spec, parse_override, read_toml,
)
from cluster.scenario import load_scenario, parse_scenario
from cluster.units import format_size, parse_size
from nodes.systems.api import Option, System
from shm.profile import dump_profile, load_profile

GiB = 1 << 30
MiB = 1 << 20


# ----------------------------------------------------------------------------- test systems


class FakeSystem(System):
    name = "fake"
    roles = ("compute", "memory")
    options = (Option("bucket_bits", 10, "log2 of the buckets", minimum=4, maximum=24),
               Option("cache", True, "cache the directory"))


class NeedsClientSystem(System):
    name = "needs-client"
    roles = ("client", "compute", "memory")
    options = ()


class StandInRace(System):
    """Registered as "race" only while nodes.systems.race cannot be imported."""

    name = "race"
    roles = ("compute", "memory")
    options = (Option("bucket_bits", 12, "log2 of the buckets", minimum=4, maximum=24),)


def _race_importable() -> bool:
    try:
        systems.get_system("race")
    except (ImportError, AttributeError):
        return False
    return True


@pytest.fixture(autouse=True)
def test_systems(monkeypatch):
    monkeypatch.setitem(systems.BUILTIN, "fake", "tests.test_spec:FakeSystem")
    monkeypatch.setitem(systems.BUILTIN, "needs-client", "tests.test_spec:NeedsClientSystem")
    if not _race_importable():
        monkeypatch.setitem(systems.BUILTIN, "race", "tests.test_spec:StandInRace")


def write(tmp_path: Path, text: str, name: str = "rack.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def spec_of(tmp_path: Path, text: str, name: str = "rack.toml", **kw) -> RackSpec:
    return load_scenario(write(tmp_path, text, name), **kw).spec


def error_of(tmp_path: Path, text: str, name: str = "rack.toml", **kw) -> str:
    with pytest.raises(SpecError) as e:
        load_scenario(write(tmp_path, text, name), **kw)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# ----------------------------------------------------------------------------- the default rack


def test_default_spec_values():
    s = default_spec()
    assert s.name == "default" and s.source == DEFAULT_SOURCE
    assert s.profile_name == "cx6-200g" and s.profile == load_profile("cx6-200g")
    assert s.profile_overrides == {}
    assert s.seed == 1 and s.on_node_death == "stop"
    assert (s.compute.count, s.compute.threads, s.compute.coroutines) == (2, 4, 4)
    assert s.compute.memory_bytes == 64 * MiB and s.compute.qp_policy == "per_thread_doorbell"
    assert s.compute.threads_per_qp is None and s.compute.connect == "on_first_post"
    assert (s.memory.count, s.memory.memory_bytes) == (2, 512 * MiB)
    assert s.client.count == 0 and s.manager.count == 1
    assert s.system.name == "race"
    assert s.system.options == systems.get_system("race").check_options({}, "x")
    assert list(s.workloads) == ["default"]
    w = s.workload
    assert w.preset == "a" and w.file is None
    assert w.overrides == {"recordcount": 10_000, "keysize": 8, "valuesize": 8, "zipfianconstant": 0.99}
    assert s.run.duration_ms is None and s.run.load is True
    assert s.warnings == ()


def test_default_spec_seed():
    assert default_spec(seed=42).seed == 42


def test_empty_file_is_the_default_rack(tmp_path):
    s = spec_of(tmp_path, "", name="empty.toml")
    d = default_spec()
    assert s.name == "empty"  # the file stem
    assert s.workload == dataclasses.replace(d.workload, source=s.source)
    assert dataclasses.replace(s, name=d.name, source=d.source, base_dir=d.base_dir, workloads=d.workloads) == d


def test_spec_is_plain_picklable_data():
    s = default_spec()
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 3  # type: ignore[misc]


def test_nodes_order_names_and_memory(tmp_path):
    s = spec_of(tmp_path, """
[compute]
count = 3
memory = "32MiB"
[memory]
count = 2
memory = "1GiB"
[client]
count = 2
memory = "8MiB"
[system]
name = "needs-client"
""")
    nodes = s.nodes()
    assert [n.name for n in nodes] == ["cn0", "cn1", "cn2", "mn0", "mn1", "cl0", "cl1", "mgr"]
    assert [n.role for n in nodes] == ["compute"] * 3 + ["memory"] * 2 + ["client"] * 2 + ["manager"]
    assert nodes[0] == NodeDecl("cn0", "compute", 32 * MiB)
    assert nodes[3].memory_bytes == GiB and nodes[5].memory_bytes == 8 * MiB
    assert nodes[-1].memory_bytes == MANAGER_MEMORY_BYTES == 64 << 10
    assert len(set(s.node_names())) == len(nodes)
    assert s.total_memory_bytes() == 3 * 32 * MiB + 2 * GiB + 2 * 8 * MiB + MANAGER_MEMORY_BYTES


def test_default_nodes():
    assert default_spec().node_names() == ["cn0", "cn1", "mn0", "mn1", "mgr"]


def test_describe_lines():
    lines = default_spec().describe()
    text = "\n".join(lines)
    assert "cx6-200g" in text and "race" in text and "YCSB A" in text
    assert "cn0, cn1, mn0, mn1, mgr" in text
    assert all("\n" not in line for line in lines)


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("text, want", [
    (4096, 4096),
    ("4096", 4096),
    ("64MiB", 64 * MiB),
    ("64 MiB", 64 * MiB),
    ("64mib", 64 * MiB),
    ("1GiB", GiB),
    ("1.5GiB", 3 * GiB // 2),
    ("2KiB", 2048),
    ("2KB", 2000),
    ("1.1GB", 1_100_000_000),
    ("3MB", 3_000_000),
    ("1TiB", 1 << 40),
    ("512B", 512),
    ("1_000B", 1000),
])
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["12 parsecs", "", "MiB", "-1MiB", "1.5B", "0.0003KB", "1e3", "x64MiB", 1.5, True,
                                  -1, None, [1]])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_size():
    assert format_size(512 * MiB) == "512 MiB"
    assert format_size(96 * GiB) == "96 GiB"
    assert format_size(3 * GiB // 2) == "1.5 GiB"
    assert format_size(100) == "100 B"
    assert format_size(64 << 10) == "64 KiB"
    assert format_size((1 << 20) + 4096) == "1.0 MiB"
    assert format_size((1 << 20) + 4096, exact=True) == "1028 KiB"
    assert format_size(1000, exact=True) == "1000 B"


# ----------------------------------------------------------------------------- profiles


def test_shipped_profile_and_overrides(tmp_path):
    s = spec_of(tmp_path, """
[rack]
profile = "cx5-100g"
[profile_overrides]
"link.gbps" = 50
"nic.atomic_slot_ns" = 400
""")
    assert s.profile_name == "cx5-100g"
    assert s.profile.link.gbps == 50 and s.profile.nic.atomic_slot_ns == 400
    assert s.profile_overrides == {"link.gbps": 50, "nic.atomic_slot_ns": 400}
    assert s.profile.pcie == load_profile("cx5-100g").pcie


def test_profile_overrides_nested_spelling(tmp_path):
    # Unquoted `link.gbps = 50` is a nested table in TOML; it means the same as the quoted key.
    a = spec_of(tmp_path, '[profile_overrides]\n"link.gbps" = 50\n', name="a.toml")
    b = spec_of(tmp_path, "[profile_overrides]\nlink.gbps = 50\n", name="b.toml")
    c = spec_of(tmp_path, "[profile_overrides.link]\ngbps = 50\n", name="c.toml")
    assert a.profile == b.profile == c.profile
    assert a.profile_overrides == b.profile_overrides == c.profile_overrides == {"link.gbps": 50}


def test_profile_path_is_relative_to_the_scenario_file(tmp_path, monkeypatch):
    mine = dataclasses.replace(load_profile("cx6-200g"), name="mine")
    write(tmp_path, dump_profile(mine), "racks/hw/mine.toml")
    path = write(tmp_path, '[rack]\nprofile = "hw/mine.toml"\n', "racks/rack.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_scenario(path).spec
    assert s.profile.name == "mine" and s.profile_name == "hw/mine.toml"
    assert Path(s.profile.source) == (tmp_path / "racks/hw/mine.toml")
    assert s.base_dir == str((tmp_path / "racks").resolve())


def test_unknown_profile_lists_the_shipped_ones(tmp_path):
    msg = error_of(tmp_path, '[rack]\nprofile = "cx9-400g"\n')
    assert msg.startswith(str(tmp_path / "rack.toml") + ": rack.profile = \"cx9-400g\": unknown profile")
    for name in ("bf3", "cx3-56g", "cx5-100g", "cx6-200g"):
        assert name in msg


def test_missing_profile_file(tmp_path):
    msg = error_of(tmp_path, '[rack]\nprofile = "hw/none.toml"\n')
    assert "rack.profile = \"hw/none.toml\"" in msg and "no such profile file" in msg
    assert str(tmp_path / "hw/none.toml") in msg


def test_broken_profile_file(tmp_path):
    write(tmp_path, 'name = "x"\n', "bad-profile.toml")
    msg = error_of(tmp_path, '[rack]\nprofile = "bad-profile.toml"\n')
    assert "rack.toml: rack.profile = \"bad-profile.toml\"" in msg and "missing" in msg


@pytest.mark.parametrize("line, want", [
    ('"link.gbps" = -5', ['profile_overrides.link.gbps = -5', ">= 0.001"]),
    ('"link.gbs" = 100', ['profile_overrides.link.gbs = 100', "unknown key"]),
    ('"link.gbps" = "fast"', ['profile_overrides.link.gbps = "fast"', "number"]),
    ('"qp.max_rd_atomic" = 1000000', ['profile_overrides.qp.max_rd_atomic = 1000000']),
])
def test_bad_profile_overrides(tmp_path, line, want):
    msg = error_of(tmp_path, f"[profile_overrides]\n{line}\n")
    assert "rack.toml: " in msg
    for w in want:
        assert w in msg, msg


def test_profile_overrides_that_only_fail_together(tmp_path):
    # Each is legal alone against cx6-200g; together they break max_rd_atomic <= max_send_wr.
    p = load_profile("cx6-200g")
    text = f'[profile_overrides]\n"qp.max_send_wr" = 4\n"qp.max_rd_atomic" = {min(8, p.qp.max_send_wr)}\n'
    if min(8, p.qp.max_send_wr) <= 4:
        pytest.skip("profile too small for this check")
    msg = error_of(tmp_path, text)
    assert "rack.toml: profile_overrides" in msg and "max_rd_atomic" in msg


# ----------------------------------------------------------------------------- systems


def test_system_options_filled_with_defaults(tmp_path):
    s = spec_of(tmp_path, '[system]\nname = "fake"\nbucket_bits = 16\n')
    assert s.system.name == "fake"
    assert s.system.options == {"bucket_bits": 16, "cache": True}
    assert s.system.roles == ("compute", "memory")


def test_client_nodes_for_a_system_that_does_not_use_them_warn(tmp_path):
    s = spec_of(tmp_path, '[system]\nname = "fake"\n[client]\ncount = 2\n')
    assert len(s.warnings) == 1 and "client.count = 2" in s.warnings[0]
    assert any("warning" in line for line in s.describe())


# ----------------------------------------------------------------------------- bad input, one line each

BAD = [
    # (file text, substrings the message must contain)
    ("[computer]\ncount = 2\n", ["[computer]", "unknown table", "did you mean compute"]),
    ("[compute]\nthread = 4\n", ["compute.thread = 4", "unknown key", "did you mean threads"]),
    ("threads = 4\n", ["threads = 4", "unknown top-level key", "[compute]"]),
    ("compute = 3\n", ["compute = 3", "must be a table"]),
    ("[[compute]]\ncount = 3\n", ["compute = [", "must be a table"]),
    ("[compute]\nthreads = -1\n", ["compute.threads = -1", "must be an integer from 1 to 256"]),
    ("[compute]\nthreads = 257\n", ["compute.threads = 257", "integer"]),
    ("[compute]\nthreads = 2.5\n", ["compute.threads = 2.5", "integer"]),
    ("[compute]\nthreads = \"4\"\n", ['compute.threads = "4"', "integer"]),
    ("[compute]\nthreads = true\n", ["compute.threads = true", "integer"]),
    ("[compute]\ncount = 0\n", ["compute.count = 0", "from 1 to 64"]),
    ("[compute]\ncount = 65\n", ["compute.count = 65", "from 1 to 64"]),
    ("[compute]\ncoroutines = 65\n", ["compute.coroutines = 65", "from 1 to 64"]),
    ("[compute]\ncoroutines = 0\n", ["compute.coroutines = 0", "from 1 to 64"]),
    ("[memory]\ncount = 17\n", ["memory.count = 17", "from 1 to 16"]),
    ("[memory]\ncount = 0\n", ["memory.count = 0", "from 1 to 16"]),
    ("[client]\ncount = -1\n", ["client.count = -1", "from 0 to 64"]),
    ("[manager]\ncount = 2\n", ["manager.count = 2", "must be 1"]),
    ("[manager]\nmemory = 5\n", ["manager.memory = 5", "unknown key"]),
    ('[memory]\nmemory = "12 parsecs"\n', ['memory.memory = "12 parsecs"', "unknown size unit 'parsecs'", "MiB"]),
    ('[memory]\nmemory = "twelve MiB"\n', ['memory.memory = "twelve MiB"', "not a size"]),
    ('[memory]\nmemory = "1KiB"\n', ['memory.memory = "1KiB"', "from 4 KiB"]),
    ("[memory]\nmemory = 1.5\n", ["memory.memory = 1.5", "size"]),
    ('[compute]\nmemory = "1MiB"\n', ['compute.memory = "1MiB"', "too small for 4 threads", "at least 1028 KiB"]),
    ('[compute]\nqp_policy = "per_thread_db"\n', ['compute.qp_policy = "per_thread_db"', "per_thread_doorbell"]),
    ("[compute]\nthreads_per_qp = 2\n", ["compute.threads_per_qp = 2", "multiplexed_qp", "per_thread_doorbell"]),
    ('[compute]\nqp_policy = "multiplexed_qp"\nthreads_per_qp = 0\n', ["compute.threads_per_qp = 0", "from 1 to 256"]),
    ('[compute]\nqp_policy = "per_thread_qp"\nconnect = "by_node"\n',
     ['compute.connect = "by_node"', "on_first_post, by_memory_node", "did you mean by_memory_node"]),
    ('[compute]\nconnect = "by_memory_node"\n',
     ['compute.connect = "by_memory_node"', "per_thread_doorbell", "changes nothing", "per_thread_qp"]),
    ('[rack]\non_node_death = "explode"\n', ['rack.on_node_death = "explode"', "stop, continue"]),
    ("[rack]\nseed = -3\n", ["rack.seed = -3", "must be an integer >= 0"]),
    ('[rack]\nname = ""\n', ['rack.name = ""', "non-empty"]),
    ('[rack]\nprofle = "bf3"\n', ['rack.profle = "bf3"', "did you mean profile"]),
    ('[system]\nname = "rase"\n', ['system.name = "rase"', "unknown system", "race", "did you mean race"]),
    ('[system]\nname = "fake"\nbucket_bits = 99\n', ["system", "bucket_bits = 99", "maximum"]),
    ('[system]\nname = "fake"\nbuckets = 3\n', ["system", "buckets", "unknown option"]),
    ('[system]\nname = "needs-client"\n', ["client.count = 0", "needs-client", "at least 1 client"]),
    ('[workload]\npreset = "g"\n', ['workload.preset = "g"', "preset letter"]),
    ('[workload]\npreset = 1\n', ["workload.preset = 1", "preset letter"]),
    ('[workload]\npreset = "a"\nfile = "w.properties"\n', ["workload.file", "preset or file, not both"]),
    ('[workload]\nfile = "nowhere.properties"\n', ['workload.file = "nowhere.properties"', "no such workload file"]),
    ("[workload]\nfieldlength = [1, 2]\n", ["workload.fieldlength = [1, 2]", "YCSB property"]),
    ('[workloads.default]\npreset = "b"\n', ["workloads.default", "bad workload name"]),
    ('[workloads.b]\npreset = "b"\n', ["workloads.b", "bad workload name"]),
    ("[workloads]\nhot = 3\n", ["workloads.hot = 3", "must be a table"]),
    ("[run]\nduration_ms = -1\n", ["run.duration_ms = -1", ">= 0"]),
    ('[run]\nload = "yes"\n', ['run.load = "yes"', "true or false"]),
    ("[run]\nduration = 10\n", ["run.duration = 10", "did you mean duration_ms"]),
]


@pytest.mark.parametrize("text, want", BAD, ids=[w[0] for _, w in BAD])
def test_bad_input_names_file_key_and_value(tmp_path, text, want):
    msg = error_of(tmp_path, text)
    assert msg.startswith(str(tmp_path / "rack.toml") + ":"), msg
    for w in want:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_toml_syntax_error_names_the_line(tmp_path):
    msg = error_of(tmp_path, "[compute]\ncount = 2\nthreads = = 4\n")
    assert "rack.toml: invalid TOML" in msg and "line 3" in msg


def test_missing_file():
    with pytest.raises(SpecError, match=r"^no such scenario file: x\.toml$"):
        load_scenario("x.toml")


def test_directory_is_not_a_scenario(tmp_path):
    with pytest.raises(SpecError, match="is a directory"):
        read_toml(tmp_path)


def test_rack_larger_than_this_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(spec_mod, "machine_memory_bytes", lambda: 24 * GiB)
    msg = error_of(tmp_path, '[memory]\ncount = 2\nmemory = "48GiB"\n')
    assert msg.startswith(str(tmp_path / "rack.toml") + ": the rack asks for 96.1 GiB of node memory")
    assert "but this machine has 24 GiB" in msg and "memory 2 x 48 GiB" in msg


def test_rack_that_fits_is_accepted(tmp_path, monkeypatch):
    monkeypatch.setattr(spec_mod, "machine_memory_bytes", lambda: 24 * GiB)
    assert spec_of(tmp_path, '[memory]\nmemory = "8GiB"\n').memory.memory_bytes == 8 * GiB


def test_real_machine_memory_is_positive():
    assert spec_mod.machine_memory_bytes() > 0


# ----------------------------------------------------------------------------- seed, name, overrides


def test_seed_from_file_and_command_line(tmp_path):
    path = write(tmp_path, "[rack]\nseed = 5\n")
    assert load_scenario(path).spec.seed == 5
    assert load_scenario(path, seed=9).spec.seed == 9
    assert load_scenario(path, seed=0).spec.seed == 0
    with pytest.raises(SpecError, match=r"rack\.seed \(from the command line\) = -2"):
        load_scenario(path, seed=-2)


def test_name_from_table_or_stem(tmp_path):
    assert spec_of(tmp_path, "", name="my-rack.toml").name == "my-rack"
    assert spec_of(tmp_path, '[rack]\nname = "demo"\n').name == "demo"


def test_overrides_set_dotted_keys(tmp_path):
    path = write(tmp_path, '[compute]\nthreads = 2\n[workloads.hot]\npreset = "c"\n')
    s = load_scenario(path, overrides={"compute.threads": 8, "profile_overrides.link.gbps": 100,
                                       "workloads.hot.requestdistribution": "hotspot",
                                       "system.name": "fake", "system.bucket_bits": 6}).spec
    assert s.compute.threads == 8 and s.profile.link.gbps == 100
    assert s.workloads["hot"].overrides["requestdistribution"] == "hotspot"
    assert s.system.options["bucket_bits"] == 6


def test_overrides_are_validated_like_the_file(tmp_path):
    path = write(tmp_path, "")
    with pytest.raises(SpecError, match=r"rack\.toml: compute\.threads = 0: must be an integer"):
        load_scenario(path, overrides={"compute.threads": 0})
    with pytest.raises(SpecError, match=r"override computer\.threads = 2: unknown table .*did you mean compute"):
        load_scenario(path, overrides={"computer.threads": 2})
    with pytest.raises(SpecError, match="dotted key"):
        load_scenario(path, overrides={"compute": 2})


def test_apply_overrides_does_not_touch_the_input():
    data = {"compute": {"threads": 2}}
    out = apply_overrides(data, {"compute.threads": 3, "memory.count": 1}, "x.toml")
    assert data == {"compute": {"threads": 2}}
    assert out == {"compute": {"threads": 3}, "memory": {"count": 1}}


@pytest.mark.parametrize("text, want", [
    ("compute.threads=8", ("compute.threads", 8)),
    ("profile_overrides.link.gbps = 2.5", ("profile_overrides.link.gbps", 2.5)),
    ("run.load=false", ("run.load", False)),
    ("system.name=race", ("system.name", "race")),
    ('rack.name="a b"', ("rack.name", "a b")),
])
def test_parse_override(text, want):
    assert parse_override(text) == want


def test_parse_override_refuses_no_equals():
    with pytest.raises(SpecError, match="table.key=value"):
        parse_override("compute.threads")


# ----------------------------------------------------------------------------- workloads


def test_workload_tables(tmp_path):
    write(tmp_path, "recordcount=10\n", "w/mine.properties")
    s = spec_of(tmp_path, """
[workload]
preset = "b"
recordcount = 5000
requestdistribution = "uniform"

[workloads.hot]
preset = "C"
requestdistribution = "hotspot"
keysize = 16

[workloads.fromfile]
file = "w/mine.properties"
operationcount = 7
""")
    d, hot, ff = s.workloads["default"], s.workloads["hot"], s.workloads["fromfile"]
    assert d.preset == "b" and d.table == "workload" and d.source == str(tmp_path / "rack.toml")
    assert d.overrides == {"recordcount": 5000, "keysize": 8, "valuesize": 8, "zipfianconstant": 0.99,
                           "requestdistribution": "uniform"}
    # Named preset workloads inherit the data shape of [workload], their own keys win.
    assert hot.preset == "c" and hot.table == "workloads.hot" and hot.name == "hot"
    assert hot.overrides == {"recordcount": 5000, "keysize": 16, "valuesize": 8, "requestdistribution": "hotspot"}
    # A file workload takes its data shape from its file: nothing inherited.
    assert ff.preset is None and ff.file == str((tmp_path / "w/mine.properties").resolve())
    assert ff.overrides == {"operationcount": 7}
    assert set(DATA_SHAPE_KEYS) >= {"recordcount", "keysize", "valuesize"}


def test_file_default_workload_gets_no_rack_defaults(tmp_path):
    write(tmp_path, "recordcount=10\n", "mine.properties")
    w = spec_of(tmp_path, '[workload]\nfile = "mine.properties"\n').workload
    assert w.overrides == {} and w.preset is None


def _fake_workloads(monkeypatch, *, fail_on: str | None = None):
    """Install stand-ins for workloads.ycsb / workloads.properties that record calls."""
    props = types.ModuleType("workloads.properties")

    class WorkloadError(ValueError):
        pass

    props.WorkloadError = WorkloadError
    ycsb = types.ModuleType("workloads.ycsb")
    calls = []

    class CoreWorkload:
        @classmethod
        def preset(cls, name, overrides, source):
            calls.append(("preset", name, overrides, source))
            if fail_on and fail_on in overrides:
                raise WorkloadError(f"{fail_on} = {overrides[fail_on]!r}: not a distribution\nsecond line")
            return ("built", name)

        @classmethod
        def from_file(cls, path, overrides):
            calls.append(("file", path, overrides))
            if fail_on and fail_on in overrides:
                raise WorkloadError(f"{Path(path).name}: {fail_on}: bad")
            return ("built", path)

    ycsb.CoreWorkload = CoreWorkload
    monkeypatch.setitem(sys.modules, "workloads.properties", props)
    monkeypatch.setitem(sys.modules, "workloads.ycsb", ycsb)
    return calls


def test_build_calls_the_ycsb_package(monkeypatch):
    calls = _fake_workloads(monkeypatch)
    w = WorkloadSpec(name="default", preset="a", file=None, overrides={"recordcount": 5}, source="r.toml",
                     table="workload")
    assert w.build() == ("built", "a")
    assert calls == [("preset", "a", {"recordcount": "5"}, "r.toml: workload")]
    f = WorkloadSpec(name="x", preset=None, file="/abs/x.properties", overrides={}, source="r.toml",
                     table="workloads.x")
    assert f.build() == ("built", "/abs/x.properties")


def test_build_turns_workload_errors_into_one_line_spec_errors(monkeypatch):
    _fake_workloads(monkeypatch, fail_on="requestdistribution")
    w = WorkloadSpec(name="hot", preset="c", file=None, overrides={"requestdistribution": "nonsense"},
                     source="r.toml", table="workloads.hot")
    with pytest.raises(SpecError) as e:
        w.build()
    assert str(e.value) == "r.toml: workloads.hot: requestdistribution = 'nonsense': not a distribution; second line"


def test_build_names_the_table_instead_of_the_overrides_layer(monkeypatch):
    _fake_workloads(monkeypatch)
    props, ycsb = sys.modules["workloads.properties"], sys.modules["workloads.ycsb"]  # the stand-ins

    def preset(name, overrides, source):
        raise props.WorkloadError("overrides: property 'recordcount' = '-5': must be >= 1")
    monkeypatch.setattr(ycsb.CoreWorkload, "preset", staticmethod(preset))
    w = WorkloadSpec(name="default", preset="a", file=None, overrides={"recordcount": -5}, source="r.toml")
    with pytest.raises(SpecError, match=r"^r\.toml: workload: property 'recordcount' = '-5': must be >= 1$"):
        w.build()


def test_overrides_reach_ycsb_as_property_strings():
    w = WorkloadSpec(name="x", preset="a", file=None,
                     overrides={"readallfields": True, "zipfianconstant": 0.99, "recordcount": 10,
                                "hotspotdatafraction": 1.0, "requestdistribution": "uniform"})
    assert w.properties() == {"readallfields": "true", "zipfianconstant": "0.99", "recordcount": "10",
                              "hotspotdatafraction": "1", "requestdistribution": "uniform"}


def test_scenario_validation_builds_every_workload(tmp_path, monkeypatch):
    calls = _fake_workloads(monkeypatch)
    spec_of(tmp_path, '[workloads.hot]\npreset = "c"\n')
    assert [c[1] for c in calls] == ["a", "c"]


def test_scenario_validation_refuses_a_bad_property(tmp_path, monkeypatch):
    _fake_workloads(monkeypatch, fail_on="requestdistribution")
    msg = error_of(tmp_path, '[workloads.hot]\npreset = "c"\nrequestdistribution = "nonsense"\n')
    assert msg.startswith(str(tmp_path / "rack.toml") + ": workloads.hot: requestdistribution = 'nonsense'")


# The real YCSB package: these run once workloads.ycsb lands.


def test_real_default_workload_builds():
    pytest.importorskip("workloads.ycsb")
    assert default_spec().workload.build() is not None


def test_real_bad_property_names_file_and_table(tmp_path):
    pytest.importorskip("workloads.ycsb")
    msg = error_of(tmp_path, '[workloads.hot]\npreset = "c"\nrequestdistribution = "nonsense"\n')
    assert "rack.toml" in msg and "workloads.hot" in msg and "nonsense" in msg


def test_real_bad_default_property_names_file_and_table(tmp_path):
    pytest.importorskip("workloads.ycsb")
    msg = error_of(tmp_path, "[workload]\nrecordcount = -5\n")
    assert "rack.toml" in msg and "workload" in msg and "-5" in msg


def test_real_file_workload_builds(tmp_path):
    pytest.importorskip("workloads.ycsb")
    write(tmp_path, "recordcount=1000\noperationcount=1000\nreadproportion=0.5\nupdateproportion=0.5\n"
                    "requestdistribution=uniform\n", "w.properties")
    s = spec_of(tmp_path, '[workload]\nfile = "w.properties"\n')
    assert s.workload.build() is not None


def test_parse_scenario_from_text():
    s = parse_scenario('[compute]\ncount = 1\n')
    assert s.spec.compute.count == 1 and s.spec.name == "default" and s.source == "<string>"
    assert parse_scenario("", source="inline.toml").spec.name == "inline"
