"""Hardware profiles: every shipped profile loads and round-trips; every kind of bad input is refused
with a ProfileError naming the file and the dotted key."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shm.profile import (
    ProfileError,
    dump_profile,
    list_profiles,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    schema_fields,
    with_overrides,
)
from shm.profile_schema import OPTIONAL_SECTIONS, SECTIONS, Profile

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ["bf3", "bf3-b3220", "cx3-56g", "cx5-100g", "cx6-200g"]


# ----------------------------------------------------------------------------- helpers


def _good_text(name: str = "mine") -> str:
    """A valid profile as TOML text (cx6-200g's values under another name)."""
    p = dataclasses.replace(load_profile("cx6-200g"), name=name)
    return dump_profile(p)


def _edit(text: str, section: str, key: str, new_line: str | None) -> str:
    """Replace (or with None, delete) ``key = ...`` inside ``[section]``."""
    out, cur, done = [], None, False
    for line in text.splitlines():
        m = re.match(r"\[(\w+)\]", line)
        if m:
            cur = m.group(1)
        if cur == section and re.match(rf"{key}\s*=", line):
            done = True
            if new_line is not None:
                out.append(new_line)
            continue
        out.append(line)
    assert done, f"{section}.{key} not in text"
    return "\n".join(out) + "\n"


def _write(tmp_path: Path, text: str, name: str = "my.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(path, *needles: str) -> ProfileError:
    with pytest.raises(ProfileError) as ei:
        load_profile(str(path))
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in error message:\n{msg}"
    return ei.value


# ----------------------------------------------------------------------------- shipped profiles


def test_list_profiles_is_sorted_and_complete():
    names = list_profiles()
    assert names == sorted(names)
    assert set(SHIPPED) <= set(names)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads(name):
    p = load_profile(name)
    assert isinstance(p, Profile)
    assert p.name == name
    assert p.description
    assert p.source.endswith(f"{name}.toml")
    for section, cls in SECTIONS.items():
        assert isinstance(getattr(p, section), cls)
    # float fields hold floats, int fields ints (no silent 1.0 / True)
    for key, typ, _ in schema_fields():
        s, f = key.split(".")
        assert type(getattr(getattr(p, s), f)) is typ, key


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_round_trips(name, tmp_path):
    p = load_profile(name)
    d = profile_to_dict(p)
    # optional sections ([dpa]) appear only in the profiles that have them; every shipped profile
    # lists its unsourced knobs ([assumptions], tests/test_sensitivity.py)
    assert set(d) == {"name", "description", *SECTIONS, *(s for s in OPTIONAL_SECTIONS if getattr(p, s) is not None),
                      "assumptions"}
    assert profile_from_dict(d, source=p.source) == p
    # through TOML text and a file path as well
    path = _write(tmp_path, dump_profile(p), f"{name}.toml")
    q = load_profile(path)
    assert dataclasses.replace(q, source=p.source) == p
    assert q.source == str(path)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_value_has_a_source_comment(name):
    """Each key line sits under a comment (its source or derivation); consecutive keys may share one."""
    lines = (REPO / "shm" / "profiles" / f"{name}.toml").read_text().splitlines()
    is_key = [bool(re.match(r"\w+\s*=", l.strip())) for l in lines]
    for i, line in enumerate(lines):
        if not is_key[i] or line.startswith(("name", "description")):
            continue
        j = i - 1
        while j >= 0 and is_key[j]:
            j -= 1
        assert j >= 0 and lines[j].lstrip().startswith("#"), f"{name}.toml line {i + 1} has no source comment: {line}"


def test_shipped_profiles_are_self_consistent():
    """The numbers the calibration hangs on (see docs/profiles.md)."""
    cx6 = load_profile("cx6-200g")
    # PCIe binds 8 B READs at ~110 Mops: 85 B per READ at pcie.gbps + 8 B of data at pcie.payload_gbps
    pc = cx6.pcie
    read8_ns = 8 * pc.bytes_per_wr / pc.gbps + 8 * 8 / pc.payload_gbps
    assert 1e3 / read8_ns == pytest.approx(110, rel=1e-3)
    # ... and 1 KB READs (Sherman's leaves) near the artifact's flat 11.5 Mops
    assert 1e3 / (8 * pc.bytes_per_wr / pc.gbps + 8 * 1024 / pc.payload_gbps) == pytest.approx(11.5, rel=0.03)
    assert cx6.pcie.bytes_per_wr + 8 + cx6.wqe_cache.miss_bytes == 180
    assert cx6.nic.requester_units / cx6.nic.req_read_ns * 1e3 > 110
    assert cx6.sync.window_ns <= cx6.link.one_way_ns
    cx3 = load_profile("cx3-56g")
    assert cx3.sync.window_ns <= cx3.link.one_way_ns
    # FlexKV Fig. 3: inbound WRITE ~10.1x the NIC-wide CAS rate of one MN
    write_in = cx3.nic.responder_units / cx3.nic.resp_write_ns
    cas = cx3.nic.atomic_units / cx3.nic.atomic_unit_ns
    assert write_in / cas == pytest.approx(10.1, rel=0.02)
    assert load_profile("bf3").dma.latency_ns == 910


def test_bare_name_and_path_are_distinguished(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a file in the cwd named like a profile is not picked up by the bare name ...
    _write(tmp_path, _good_text("cx6-200g"), "cx6-200g")
    assert load_profile("cx6-200g").source.endswith("profiles/cx6-200g.toml")
    # ... but anything ending in .toml, or with a slash, is a path
    _write(tmp_path, _good_text("local"), "local.toml")
    assert load_profile("local.toml").name == "local"
    assert load_profile("./local.toml").name == "local"
    assert load_profile(tmp_path / "local.toml").name == "local"


def test_user_profile_name_need_not_match_file(tmp_path):
    path = _write(tmp_path, _good_text("something-else"), "my.toml")
    assert load_profile(path).name == "something-else"


# ----------------------------------------------------------------------------- bad input


def test_unknown_key(tmp_path):
    text = _edit(_good_text(), "nic", "atomic_units", "atomic_units = 1\nfoo = 3")
    _refused(_write(tmp_path, text), "my.toml", "unknown key 'nic.foo'")


def test_unknown_top_level_key(tmp_path):
    _refused(_write(tmp_path, "colour = 'blue'\n" + _good_text()), "my.toml", "unknown key 'colour'")


def test_unknown_section(tmp_path):
    _refused(_write(tmp_path, _good_text() + "\n[foo]\nbar = 1\n"), "my.toml", "unknown section [foo]")


def test_section_that_is_not_a_table(tmp_path):
    text = "dma = 5\n" + _good_text().replace("[dma]\nlatency_ns = 310\ngbps = 81.84\nread_gbps = 81.84\nmax_outstanding = 64\n", "")
    err = _refused(_write(tmp_path, text), "my.toml", "'dma' must be a table [dma], got 5")
    assert "missing section" not in str(err)


def test_missing_key(tmp_path):
    text = _edit(_good_text(), "pcie", "latency_ns", None)
    _refused(_write(tmp_path, text), "my.toml", "missing key 'pcie.latency_ns'")


def test_missing_section(tmp_path):
    text = _good_text().replace("[dma]\nlatency_ns = 310\ngbps = 81.84\nread_gbps = 81.84\nmax_outstanding = 64\n", "")
    _refused(_write(tmp_path, text), "my.toml", "missing section [dma]")


@pytest.mark.parametrize("key", ["name", "description"])
def test_missing_top_level_key(tmp_path, key):
    text = "\n".join(l for l in _good_text().splitlines() if not l.startswith(f"{key} ="))
    _refused(_write(tmp_path, text), "my.toml", f"missing key '{key}'")


def test_float_for_int(tmp_path):
    text = _edit(_good_text(), "qp", "max_send_wr", "max_send_wr = 1.5")
    _refused(_write(tmp_path, text), "my.toml", "'qp.max_send_wr' must be an integer, got 1.5")


def test_integral_float_for_int_is_refused(tmp_path):
    text = _edit(_good_text(), "qp", "max_send_wr", "max_send_wr = 16.0")
    _refused(_write(tmp_path, text), "my.toml", "'qp.max_send_wr' must be an integer")


def test_bool_for_int(tmp_path):
    text = _edit(_good_text(), "nic", "atomic_units", "atomic_units = true")
    _refused(_write(tmp_path, text), "my.toml", "'nic.atomic_units' must be an integer, got a boolean")


def test_bool_for_float(tmp_path):
    text = _edit(_good_text(), "link", "gbps", "gbps = false")
    _refused(_write(tmp_path, text), "my.toml", "'link.gbps' must be a number, got a boolean")


def test_string_for_number(tmp_path):
    text = _edit(_good_text(), "link", "one_way_ns", 'one_way_ns = "600"')
    _refused(_write(tmp_path, text), "my.toml", "'link.one_way_ns' must be an integer, got '600'")


def test_int_for_bool(tmp_path):
    text = _edit(_good_text(), "nic", "ordered_multiline_writes", "ordered_multiline_writes = 1")
    _refused(_write(tmp_path, text), "my.toml", "'nic.ordered_multiline_writes' must be true or false, got 1")


def test_int_accepted_for_float_and_stored_as_float(tmp_path):
    text = _edit(_good_text(), "link", "gbps", "gbps = 200")
    p = load_profile(_write(tmp_path, text))
    assert p.link.gbps == 200.0 and type(p.link.gbps) is float


def test_non_finite_float(tmp_path):
    text = _edit(_good_text(), "pcie", "gbps", "gbps = nan")
    _refused(_write(tmp_path, text), "my.toml", "'pcie.gbps' must be a finite number")


def test_below_minimum(tmp_path):
    text = _edit(_good_text(), "link", "gbps", "gbps = -5")
    path = _write(tmp_path, text)
    _refused(path, f"{path}: 'link.gbps' must be >= 0.001, got -5")


def test_above_maximum(tmp_path):
    text = _edit(_good_text(), "cpu", "ghz", "ghz = 11.5")
    _refused(_write(tmp_path, text), "my.toml", "'cpu.ghz' must be <= 10, got 11.5")


def test_bounds_are_inclusive(tmp_path):
    text = _edit(_good_text(), "link", "gbps", "gbps = 0.001")
    text = _edit(text, "nic", "atomic_units", "atomic_units = 4096")
    p = load_profile(_write(tmp_path, text))
    assert p.link.gbps == 0.001 and p.nic.atomic_units == 4096


def test_cross_field_rd_atomic_vs_send_wr(tmp_path):
    text = _edit(_good_text(), "qp", "max_send_wr", "max_send_wr = 8")
    _refused(_write(tmp_path, text), "my.toml", "'qp.max_rd_atomic' (16) must be <= 'qp.max_send_wr' (8)")


def test_cross_field_device_memory_multiple_of_64(tmp_path):
    text = _edit(_good_text(), "nic", "device_memory_bytes", "device_memory_bytes = 1000")
    _refused(_write(tmp_path, text), "my.toml", "'nic.device_memory_bytes' must be a multiple of 64")


def test_cross_field_mtu_power_of_two(tmp_path):
    text = _edit(_good_text(), "link", "mtu_bytes", "mtu_bytes = 3000")
    _refused(_write(tmp_path, text), "my.toml", "'link.mtu_bytes' must be a power of two, got 3000")


def test_cross_field_header_smaller_than_mtu(tmp_path):
    text = _edit(_good_text(), "link", "header_bytes", "header_bytes = 4096")
    text = _edit(text, "link", "mtu_bytes", "mtu_bytes = 4096")
    _refused(_write(tmp_path, text), "my.toml", "'link.header_bytes' (4096) must be < 'link.mtu_bytes' (4096)")


def test_cross_field_rule_skipped_when_a_key_is_already_bad(tmp_path):
    text = _edit(_good_text(), "qp", "max_send_wr", "max_send_wr = 0")
    err = _refused(_write(tmp_path, text), "'qp.max_send_wr' must be >= 1, got 0")
    assert len(err.errors) == 1


def test_all_problems_reported_at_once(tmp_path):
    text = _edit(_good_text(), "link", "gbps", "gbps = -5")
    text = _edit(text, "qp", "max_send_wr", "max_send_wr = 1.5")
    text = _edit(text, "pcie", "mmio_ns", None)
    err = _refused(_write(tmp_path, text), "'link.gbps'", "'qp.max_send_wr'", "'pcie.mmio_ns'")
    assert len(err.errors) == 3
    assert all(line.startswith(f"{tmp_path / 'my.toml'}:") for line in err.errors)


def test_syntax_error_names_file_and_line(tmp_path):
    text = _good_text().replace("[nic]\n", "[nic]\nrequester_units = = 3\n")
    _refused(_write(tmp_path, text), "my.toml", "invalid TOML", "line")


def test_duplicate_key_is_a_syntax_error(tmp_path):
    text = _edit(_good_text(), "nic", "atomic_units", "atomic_units = 1\natomic_units = 2")
    _refused(_write(tmp_path, text), "my.toml", "invalid TOML")


def test_not_utf8(tmp_path):
    path = tmp_path / "my.toml"
    path.write_bytes(b"name = \"\xff\"\n")
    _refused(path, "my.toml", "UTF-8")


def test_unknown_profile_name_lists_known_ones():
    with pytest.raises(ProfileError) as ei:
        load_profile("cx9-800g")
    msg = str(ei.value)
    assert "'cx9-800g'" in msg
    for n in SHIPPED:
        assert n in msg


def test_missing_file(tmp_path):
    _refused(tmp_path / "nope.toml", "nope.toml", "no such file")


def test_directory_is_not_a_profile(tmp_path):
    d = tmp_path / "dir.toml"
    d.mkdir()
    _refused(d, "dir.toml", "directory")


def test_empty_name(tmp_path):
    text = _good_text().replace('name = "mine"', 'name = "  "')
    _refused(_write(tmp_path, text), "my.toml", "'name' must not be empty")


def test_shipped_name_must_match_file_stem(tmp_path, monkeypatch):
    """A shipped profile whose top-level name disagrees with its file is refused."""
    import shm.profile as mod

    pdir = tmp_path / "profiles"
    pdir.mkdir()
    (pdir / "cx6-200g.toml").write_text(_good_text("wrong"))

    monkeypatch.setattr(mod, "_profiles_dir", lambda: pdir)
    assert mod.list_profiles() == ["cx6-200g"]
    with pytest.raises(ProfileError) as ei:
        mod.load_profile("cx6-200g")
    assert "cx6-200g.toml" in str(ei.value) and "'name' must match" in str(ei.value)


def test_profile_error_is_a_value_error():
    assert issubclass(ProfileError, ValueError)


# ----------------------------------------------------------------------------- overrides


def test_with_overrides_changes_only_those_keys():
    p = load_profile("cx6-200g")
    q = with_overrides(p, {"nic.atomic_slot_ns": 400, "link.gbps": 100, "description": "ablation"})
    assert q.nic.atomic_slot_ns == 400
    assert q.link.gbps == 100.0 and type(q.link.gbps) is float
    assert q.description == "ablation"
    assert q.source == p.source
    assert dataclasses.replace(q, nic=p.nic, link=p.link, description=p.description) == p
    assert p.nic.atomic_slot_ns == 370  # the original is untouched (frozen)


def test_with_overrides_empty_is_equal():
    p = load_profile("cx3-56g")
    assert with_overrides(p, {}) == p


@pytest.mark.parametrize(
    "overrides, needles",
    [
        ({"nic.foo": 1}, ["cx6-200g.toml", "unknown key 'nic.foo'"]),
        ({"foo.bar": 1}, ["cx6-200g.toml", "unknown key 'foo.bar'"]),
        ({"nic": 1}, ["cx6-200g.toml", "unknown key 'nic'"]),
        ({"nic.atomic_slot_ns": -1}, ["cx6-200g.toml", "'nic.atomic_slot_ns' must be >= 0, got -1"]),
        ({"qp.max_send_wr": 1.5}, ["cx6-200g.toml", "'qp.max_send_wr' must be an integer, got 1.5"]),
        ({"nic.atomic_units": True}, ["'nic.atomic_units' must be an integer, got a boolean"]),
        ({"nic.ordered_multiline_writes": 0}, ["'nic.ordered_multiline_writes' must be true or false"]),
        ({"qp.max_rd_atomic": 64, "qp.max_send_wr": 32}, ["'qp.max_rd_atomic' (64) must be <= 'qp.max_send_wr' (32)"]),
        ({"link.mtu_bytes": 1000}, ["'link.mtu_bytes' must be a power of two"]),
        ({"name": 5}, ["'name' must be a string"]),
    ],
)
def test_with_overrides_validates(overrides, needles):
    p = load_profile("cx6-200g")
    with pytest.raises(ProfileError) as ei:
        with_overrides(p, overrides)
    for n in needles:
        assert n in str(ei.value), str(ei.value)


def test_overridden_profile_dumps_and_reloads(tmp_path):
    p = with_overrides(load_profile("cx5-100g"), {"wqe_cache.capacity": 512, "name": "cx5-small-cache"})
    q = load_profile(_write(tmp_path, dump_profile(p)))
    assert dataclasses.replace(q, source=p.source) == p


# ----------------------------------------------------------------------------- tools


def test_profile_from_dict_label_and_non_mapping():
    with pytest.raises(ProfileError, match=r"^<dict>: a profile must be a table"):
        profile_from_dict([1, 2])  # type: ignore[arg-type]
    d = profile_to_dict(load_profile("cx6-200g"))
    del d["sync"]["window_ns"]
    with pytest.raises(ProfileError, match=r"^here: missing key 'sync.window_ns'$"):
        profile_from_dict(d, label="here")


def test_cli_check_list_and_dump(tmp_path):
    bad = _write(tmp_path, _edit(_good_text(), "link", "gbps", "gbps = -5"), "bad.toml")
    good = _write(tmp_path, _good_text(), "good.toml")
    r = subprocess.run([sys.executable, "-m", "shm.profile", "check", str(good), str(bad)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 1
    assert "good.toml: ok" in r.stdout
    assert "bad.toml: 'link.gbps' must be >= 0.001, got -5" in r.stderr
    r = subprocess.run([sys.executable, "-m", "shm.profile", "list"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and all(n in r.stdout for n in SHIPPED)
    r = subprocess.run([sys.executable, "-m", "shm.profile", "dump", "cx3-56g"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0 and r.stdout == dump_profile(load_profile("cx3-56g"))


def test_profile_table_script_covers_every_key():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_table.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for key, _, _ in schema_fields():
        assert f"`{key}`" in r.stdout
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_table.py"), "--values"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and all(n in r.stdout.splitlines()[0] for n in SHIPPED)


# ----------------------------------------------------------------------------- the optional [dpa] table


def _bf3_text() -> str:
    return dump_profile(dataclasses.replace(load_profile("bf3"), name="mine"))


def test_dpa_table_is_optional_and_complete_when_present(tmp_path):
    assert load_profile("cx6-200g").dpa is None
    dpa = load_profile("bf3").dpa
    assert (dpa.cores, dpa.threads_per_core, dpa.usable_threads, dpa.memory_ns) == (16, 16, 189, 465)
    assert "[dpa]" not in _good_text() and "[dpa]" in _bf3_text()
    _refused(_write(tmp_path, _edit(_bf3_text(), "dpa", "l2_ns", None)), "my.toml: missing key 'dpa.l2_ns'")
    assert "dpa.cores" in [k for k, _, _ in schema_fields(optional=True)]
    assert "dpa.cores" not in [k for k, _, _ in schema_fields()]


@pytest.mark.parametrize("key, line, needle", [
    ("cores", "cores = 0", "'dpa.cores' must be >= 1, got 0"),
    ("ghz", 'ghz = "fast"', "'dpa.ghz' must be a number, got 'fast'"),
    ("usable_threads", "usable_threads = 257", "'dpa.usable_threads' (257) must be <= 'dpa.cores' x "
                                               "'dpa.threads_per_core' (256)"),
    ("line_bytes", "line_bytes = 48", "'dpa.line_bytes' must be a power of two, got 48"),
    ("l2_bytes", "l2_bytes = 1000", "'dpa.l2_bytes' must be a multiple of 'dpa.line_bytes' (64), got 1000"),
    ("l3_ns", "l3_ns = 10", "'dpa.l3_ns' (10) must be >= 'dpa.l2_ns' (20)"),
    ("memory_ns", "memory_ns = -1", "'dpa.memory_ns' must be >= 0, got -1"),
])
def test_bad_dpa_value_is_one_line_naming_the_key(tmp_path, key, line, needle):
    e = _refused(_write(tmp_path, _edit(_bf3_text(), "dpa", key, line)), needle)
    assert len(e.errors) == 1 and "\n" not in e.errors[0] and e.errors[0].startswith(str(tmp_path))


def test_dpa_overrides():
    p = with_overrides(load_profile("bf3"), {"dpa.memory_ns": 100})
    assert p.dpa.memory_ns == 100 and p.dma == load_profile("bf3").dma
    with pytest.raises(ProfileError, match=r"unknown key 'dpa.cores' \(this profile has no \[dpa\] table; to add one, give every key"):
        with_overrides(load_profile("cx6-200g"), {"dpa.cores": 4})
    # a whole optional table may be added by overrides that give every key of it
    chaos = {"chaos.seed": 3, "chaos.share": 0.5, "chaos.effect_ns": 100, "chaos.completion_ns": 0,
             "chaos.line_gap_ns": 0, "chaos.resume_ns": 0, "chaos.writeback_ns": 0,
             "chaos.stall_ns": 0, "chaos.stall_share": 0}
    assert with_overrides(load_profile("cx6-200g"), chaos).chaos.effect_ns == 100
    with pytest.raises(ProfileError, match="'dpa.usable_threads' .* must be <="):
        with_overrides(load_profile("bf3"), {"dpa.threads_per_core": 8})


# ----------------------------------------------------------------------------- extends

def test_b3220_is_bf3_but_for_its_packet_matching():
    a, b = profile_to_dict(load_profile("bf3")), profile_to_dict(load_profile("bf3-b3220"))
    diff = {(s, k) for s in a if isinstance(a[s], dict) for k in a[s] if a[s][k] != b[s][k]}
    assert diff == {("nic", "resp_recv_ns")}
    assert b["nic"]["resp_recv_ns"] == round(a["nic"]["resp_recv_ns"] / 1.69)      # DPA-Store §4.2.9's ping
    assert b["name"] == "bf3-b3220" and b["assumptions"] == a["assumptions"]


def test_a_file_extends_a_shipped_profile_or_a_path(tmp_path):
    base = _write(tmp_path, 'extends = "cx6-200g"\nname = "mine"\ndescription = "d"\n[link]\n# measured\ngbps = 100.0\n'
                  '[assumptions]\nlink = []\n', "base.toml")
    p = load_profile(base)
    ref = load_profile("cx6-200g")
    assert p.link.gbps == 100.0 and p.link.one_way_ns == ref.link.one_way_ns and p.nic == ref.nic
    assert "link.one_way_ns" in ref.assumptions and "link.one_way_ns" not in p.assumptions    # its list replaced
    assert ("nic.req_read_ns" in p.assumptions) == ("nic.req_read_ns" in ref.assumptions)      # the others kept
    child = _write(tmp_path, 'extends = "base.toml"\nname = "child"\ndescription = "d"\n[nic]\nresp_recv_ns = 300\n',
                   "child.toml")
    q = load_profile(child)                       # a path relative to the file, extended twice
    assert (q.link.gbps, q.nic.resp_recv_ns, q.nic.resp_read_ns) == (100.0, 300, ref.nic.resp_read_ns)


@pytest.mark.parametrize("text, needle", [
    ('extends = "bf9"\nname = "x"\ndescription = "d"\n', "extends = 'bf9': unknown profile"),
    ('extends = 3\nname = "x"\ndescription = "d"\n', "'extends' must name a profile"),
    ('extends = "loop.toml"\nname = "x"\ndescription = "d"\n', "extend each other in a circle"),
    ('extends = "nope.toml"\nname = "x"\ndescription = "d"\n', "cannot read"),
    ('extends = "bf3"\nname = "x"\ndescription = "d"\n[nic]\nresp_recv_ns = -1\n', "'nic.resp_recv_ns' must be"),
])
def test_bad_extends_is_one_line(tmp_path, text, needle):
    path = _write(tmp_path, text, "loop.toml")
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert needle in str(e.value) and str(e.value).startswith(str(path)) and "\n" not in str(e.value)

