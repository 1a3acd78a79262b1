"""Hardware profiles: load, validate, override and dump the TOML files that feed the timing model.

A *profile* is every number the timing model needs to turn a verb, a DMA or a compute step into
virtual time (link speed, NIC unit times, PCIe, doorbells, WQE cache, QP limits, CPU costs, DPU DMA).
The schema -- which sections and keys exist, their types, units and legal ranges -- lives in
:mod:`shm.profile_schema` as frozen dataclasses whose fields carry metadata. This module is the
generic loader on top of it:

* ``load_profile("cx6-200g")`` reads a profile shipped in ``shm/profiles/<name>.toml`` (found with
  :mod:`importlib.resources`, so it works from a wheel as well as from a checkout);
  ``load_profile("path/to/my.toml")`` reads any file. A string is a *path* when it contains a path
  separator or ends in ``.toml``; otherwise it is a shipped *name*.
* Validation is strict and complete, because a silently wrong number gives silently wrong results:
  every section and every key must be present (an *optional* section, such as ``[dpa]`` of a card
  with a Data Path Accelerator, may be left out as a whole, but if present it gives every key),
  nothing unknown is accepted, types are exact
  (an ``int`` field takes an integer only -- not ``true``, not ``1.0``; a ``float`` field takes an
  integer or a float; a ``bool`` field takes ``true``/``false`` only), values must lie within the
  inclusive ``min``/``max`` of the field metadata, and a few cross-field rules reject combinations
  that cannot exist (e.g. ``qp.max_rd_atomic`` above ``qp.max_send_wr``). All problems of a file are
  reported at once, one line each, and every line starts with the file and names the dotted key:
  ``cx6-200g.toml: 'link.gbps' must be >= 0.001, got -5``.
* A profile file may give only what differs from another with ``extends = "bf3"`` (a shipped name
  or a path): the tables of that profile, this file's keys replacing theirs (:func:`_extended`);
  ``bf3-b3220`` is the BlueField-3 B3220 written that way.
* ``with_overrides(p, {"nic.atomic_slot_ns": 400})`` returns a new profile with some keys changed,
  validated by exactly the same code (it goes through the same dict -> Profile path). Scenarios use
  it for knob changes, benchmarks for ablations.
* ``with overridden({"bf3": {"dpu.dram_ns": 240}}):`` changes a profile *wherever it is loaded* while
  the block runs: every ``load_profile`` of a profile so named returns it with those keys changed
  (after validation, as ``with_overrides``). It is how a sensitivity run reaches every rack an
  experiment builds -- through rack specs, rigs or cost tables, in this process and in the worker
  processes :mod:`cluster.experiments.pointpool` starts, which it hands the active overrides to
  (:func:`active_overrides`) -- without each experiment threading an argument through every
  function. A rack spec's own ``[profile_overrides]`` apply on top, so an experiment that sets a
  key itself keeps its value.
* ``profile_to_dict`` / ``profile_from_dict`` / ``dump_profile`` convert to plain data and back to
  TOML text, so that any profile (including an overridden one) can be written out, edited and
  loaded again: ``load(dump(p)) == p`` up to :attr:`Profile.source`.

Profiles are immutable (frozen dataclasses), so one loaded profile can be shared freely between the
processes of an event loop; each node process loads its own copy by name from the rack spec.

Command line: ``python -m shm.profile list | show NAME | check FILE... | dump NAME_OR_FILE``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import typing
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Mapping

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from shm.profile_schema import ASSUMPTIONS, OPTIONAL_SECTIONS, SECTIONS, Profile

__all__ = [
    "Profile",
    "ProfileError",
    "load_profile",
    "list_profiles",
    "profile_to_dict",
    "profile_from_dict",
    "with_overrides",
    "dump_profile",
    "schema_fields",
    "overridden",
    "active_overrides",
    "assumptions_by_section",
]

_TOP_LEVEL = ("name", "description")
#: a profile file's key naming the profile it only changes (:func:`_extended`)
EXTENDS = "extends"


class ProfileError(ValueError):
    """A profile that cannot be used. ``errors`` holds one line per problem; ``str()`` joins them.

    Every line starts with the file (or ``<label>`` for in-memory data) and names the dotted key.
    """

    def __init__(self, errors: list[str] | str):
        if isinstance(errors, str):
            errors = [errors]
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


# ----------------------------------------------------------------------------- schema access


def _field_types(cls: type) -> dict[str, type]:
    # profile_schema uses ``from __future__ import annotations``: resolve the string annotations.
    return typing.get_type_hints(cls)


def schema_fields(*, optional: bool = False) -> list[tuple[str, type, dict]]:
    """Every key of the schema as ``(dotted_key, python_type, metadata)``, in schema order: the keys
    every profile has, and with ``optional=True`` also those of the optional sections (``dpa.*``)."""
    out = []
    sections = {**SECTIONS, **OPTIONAL_SECTIONS} if optional else SECTIONS
    for section, cls in sections.items():
        types = _field_types(cls)
        for f in dataclasses.fields(cls):
            out.append((f"{section}.{f.name}", types[f.name], dict(f.metadata)))
    return out


# ----------------------------------------------------------------------------- finding files


def _profiles_dir():
    return resources.files("shm").joinpath("profiles")


def list_profiles() -> list[str]:
    """Names of the profiles shipped with the package, sorted."""
    d = _profiles_dir()
    if not d.is_dir():
        return []
    return sorted(p.name[: -len(".toml")] for p in d.iterdir() if p.name.endswith(".toml") and p.is_file())


def _is_path(name_or_path: str) -> bool:
    return "/" in name_or_path or os.sep in name_or_path or name_or_path.endswith(".toml")


def load_profile(name_or_path: str | os.PathLike) -> Profile:
    """Load and validate a profile.

    A bare name (``"cx6-200g"``) loads the profile shipped in ``shm/profiles/<name>.toml`` and its
    top-level ``name`` must equal the file stem. A path (contains ``/`` or ends in ``.toml``, or any
    :class:`os.PathLike`) loads that file. Raises :class:`ProfileError` on any problem.
    """
    if isinstance(name_or_path, os.PathLike) or _is_path(str(name_or_path)):
        path = Path(name_or_path)
        label = str(name_or_path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ProfileError(f"{label}: no such file") from None
        except IsADirectoryError:
            raise ProfileError(f"{label}: is a directory, not a profile file") from None
        except OSError as e:
            raise ProfileError(f"{label}: cannot read: {e.strerror or e}") from None
        data = _extended(_parse_toml(raw, label), label, path.parent)
        return _with_active(profile_from_dict(data, source=str(path), label=label))

    name = str(name_or_path)
    known = list_profiles()
    if name not in known:
        raise ProfileError(
            f"unknown profile {name!r}: shipped profiles are {', '.join(known) or '(none)'}; "
            f"or give the path of a .toml file"
        )
    p = _load_shipped(name)
    if p.name != name:
        raise ProfileError(f"{name}.toml: 'name' must match the file name {name!r}, got {p.name!r}")
    return _with_active(p)


# ----------------------------------------------------------------------------- overrides while a block runs

# profile name -> {"section.key": value}: what load_profile changes while overridden() is entered
_active: dict[str, dict[str, Any]] = {}


def active_overrides() -> dict[str, dict[str, Any]]:
    """The overrides :func:`overridden` has in force now (a copy; empty when none is): what a worker
    process must enter to load the same profiles as this one."""
    return {name: dict(keys) for name, keys in _active.items()}


@contextmanager
def overridden(overrides: Mapping[str, Mapping[str, Any]]) -> Iterator[dict[str, dict[str, Any]]]:
    """While entered, :func:`load_profile` returns each profile named in ``overrides`` (by its
    ``name``) with those dotted keys changed, validated like :func:`with_overrides`. Nested blocks
    add up (the inner value of a key wins); on exit the previous overrides are back. A shipped
    profile named here is checked on entry, so an unknown key or a value out of range is a
    :class:`ProfileError` before anything runs."""
    global _active
    merged = active_overrides()
    for name, keys in overrides.items():
        merged.setdefault(name, {}).update(keys)
    for name, keys in merged.items():
        if name in list_profiles():
            with_overrides(_load_shipped(name), keys)
    previous, _active = _active, merged
    try:
        yield active_overrides()
    finally:
        _active = previous


def _load_shipped(name: str) -> Profile:
    """The shipped profile ``name`` as its file says, without the active overrides."""
    res = _profiles_dir().joinpath(f"{name}.toml")
    label = f"{name}.toml"
    return profile_from_dict(_shipped_data(name), source=str(res), label=label)


def _shipped_data(name: str, seen: tuple = ()) -> dict:
    """The plain data of shipped profile ``name``, its ``extends`` resolved."""
    label = f"{name}.toml"
    return _extended(_parse_toml(_profiles_dir().joinpath(label).read_bytes(), label), label, None, seen + (name,))


def _extended(data: Any, label: str, folder: Path | None, seen: tuple = ()) -> Any:
    """A profile file may give only what differs from another: ``extends = "bf3"`` (a shipped name,
    or the path of a file, relative to this one's folder) takes every table of that profile and
    replaces the keys this file gives, table by table; ``name`` and ``description`` are this
    file's own, and a section this file lists under ``[assumptions]`` replaces that section's list
    (a knob this file gives a source for is then no longer an assumption). Why: a card variant
    (BlueField-3 B3220 beside the B3140L) differs in a few numbers, and a copy of the whole file
    would keep hundreds of sourced values twice. The result is validated like any profile."""
    if not isinstance(data, Mapping) or EXTENDS not in data:
        return data
    base_ref = data[EXTENDS]
    if not isinstance(base_ref, str) or not base_ref.strip():
        raise ProfileError(f"{label}: {EXTENDS!r} must name a profile (a shipped name or a .toml path), got "
                           f"{_describe(base_ref)}")
    where = f"{label}: {EXTENDS} = {base_ref!r}"
    if _is_path(base_ref):
        path = Path(base_ref) if folder is None or Path(base_ref).is_absolute() else folder / base_ref
        if str(path.resolve()) in seen:
            raise ProfileError(f"{where}: profiles extend each other in a circle")
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise ProfileError(f"{where}: cannot read {path}: {e.strerror or e}") from None
        base = _extended(_parse_toml(raw, str(path)), str(path), path.parent, seen + (str(path.resolve()),))
    else:
        if base_ref in seen:
            raise ProfileError(f"{where}: profiles extend each other in a circle")
        if base_ref not in list_profiles():
            raise ProfileError(f"{where}: unknown profile; shipped profiles are {', '.join(list_profiles())}, or give "
                               f"the path of a .toml file")
        base = _shipped_data(base_ref, seen)
    merged: dict = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, v in data.items():
        if key == EXTENDS:
            continue
        if isinstance(v, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **v}      # (for [assumptions]: a section's list replaced whole)
        else:
            merged[key] = v
    return merged


def _with_active(p: Profile) -> Profile:
    keys = _active.get(p.name)
    return with_overrides(p, keys) if keys else p


def _parse_toml(raw: bytes, label: str) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message already carries "(at line L, column C)".
        raise ProfileError(f"{label}: invalid TOML: {e}") from None


# ----------------------------------------------------------------------------- validation


def _describe(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return repr(v)
    return repr(v) if not isinstance(v, float) else _fmt_num(v)


def _fmt_num(v: float | int) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _check_value(key: str, typ: type, meta: Mapping, v: Any, errors: list[str], label: str):
    """Type- and range-check one value; return the converted value or None on error."""
    if typ is bool:
        if type(v) is not bool:
            errors.append(f"{label}: {key!r} must be true or false, got {_describe(v)}")
            return None
        return v
    if typ is int:
        if type(v) is not int:
            kind = "a boolean" if isinstance(v, bool) else _describe(v)
            errors.append(f"{label}: {key!r} must be an integer, got {kind}")
            return None
    elif typ is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            kind = "a boolean" if isinstance(v, bool) else _describe(v)
            errors.append(f"{label}: {key!r} must be a number, got {kind}")
            return None
        if isinstance(v, float) and not math.isfinite(v):
            errors.append(f"{label}: {key!r} must be a finite number, got {v!r}")
            return None
        v = float(v)
    elif typ is str:
        if not isinstance(v, str):
            errors.append(f"{label}: {key!r} must be a string, got {_describe(v)}")
            return None
        return v
    else:  # pragma: no cover - the schema only uses the types above
        raise TypeError(f"unsupported schema type {typ!r} for {key}")
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and v < lo:
        errors.append(f"{label}: {key!r} must be >= {_fmt_num(lo)}, got {_fmt_num(v)}")
        return None
    if hi is not None and v > hi:
        errors.append(f"{label}: {key!r} must be <= {_fmt_num(hi)}, got {_fmt_num(v)}")
        return None
    return v


def _cross_checks(values: dict[str, dict[str, Any]], errors: list[str], label: str) -> None:
    """Rules that involve the relation between keys, or a property beyond a range.

    Each rule runs only if the keys it reads passed their own checks, so one bad value gives one line.
    """

    def have(*keys: str) -> bool:
        return all(values.get(k.split(".")[0], {}).get(k.split(".")[1]) is not None for k in keys)

    def get(key: str):
        s, f = key.split(".")
        return values[s][f]

    if have("qp.max_rd_atomic", "qp.max_send_wr") and get("qp.max_rd_atomic") > get("qp.max_send_wr"):
        errors.append(
            f"{label}: 'qp.max_rd_atomic' ({get('qp.max_rd_atomic')}) must be <= 'qp.max_send_wr' "
            f"({get('qp.max_send_wr')}): a READ/atomic must fit in the send queue"
        )
    if have("nic.device_memory_bytes") and get("nic.device_memory_bytes") % 64:
        errors.append(
            f"{label}: 'nic.device_memory_bytes' must be a multiple of 64 (one cache line), "
            f"got {get('nic.device_memory_bytes')}"
        )
    if have("link.mtu_bytes"):
        mtu = get("link.mtu_bytes")
        if mtu & (mtu - 1):
            errors.append(f"{label}: 'link.mtu_bytes' must be a power of two, got {mtu}")
        if have("link.header_bytes") and get("link.header_bytes") >= mtu:
            errors.append(
                f"{label}: 'link.header_bytes' ({get('link.header_bytes')}) must be < 'link.mtu_bytes' "
                f"({mtu}): a packet must have room for payload"
            )
    _dpa_checks(have, get, errors, label)
    if have("nvm.read_ns", "nvm.dram_read_ns") and get("nvm.read_ns") < get("nvm.dram_read_ns"):
        errors.append(f"{label}: 'nvm.read_ns' ({get('nvm.read_ns')}) must be >= 'nvm.dram_read_ns' "
                      f"({get('nvm.dram_read_ns')}): the model adds their difference to a host-memory access")
    if have("nvm.xpline_bytes"):
        xp = get("nvm.xpline_bytes")
        if xp & (xp - 1):
            errors.append(f"{label}: 'nvm.xpline_bytes' must be a power of two, got {xp}")


def _dpa_checks(have, get, errors: list[str], label: str) -> None:
    """Rules of the optional [dpa] table (skipped when the profile has none)."""
    if have("dpa.usable_threads", "dpa.cores", "dpa.threads_per_core"):
        hw = get("dpa.cores") * get("dpa.threads_per_core")
        if get("dpa.usable_threads") > hw:
            errors.append(
                f"{label}: 'dpa.usable_threads' ({get('dpa.usable_threads')}) must be <= 'dpa.cores' x "
                f"'dpa.threads_per_core' ({hw}): there are no more hardware threads"
            )
    if have("dpa.line_bytes"):
        line = get("dpa.line_bytes")
        if line & (line - 1):
            errors.append(f"{label}: 'dpa.line_bytes' must be a power of two, got {line}")
        else:
            for key in ("dpa.l1_bytes", "dpa.l2_bytes", "dpa.l3_bytes", "dpa.memory_bytes"):
                if have(key) and get(key) % line:
                    errors.append(f"{label}: {key!r} must be a multiple of 'dpa.line_bytes' ({line}), got {get(key)}")
    prev = None
    for key in ("dpa.l1_ns", "dpa.l2_ns", "dpa.l3_ns", "dpa.memory_ns"):
        if not have(key):
            prev = None
            continue
        if prev is not None and get(key) < get(prev):
            errors.append(f"{label}: {key!r} ({get(key)}) must be >= {prev!r} ({get(prev)}): "
                          f"a farther level is not faster")
        prev = key


def profile_from_dict(data: Mapping[str, Any], *, source: str = "", label: str | None = None) -> Profile:
    """Validate plain data shaped like the TOML file and build a :class:`Profile`.

    ``label`` prefixes every error line (default: ``source`` or ``<dict>``).
    """
    label = label or source or "<dict>"
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise ProfileError(f"{label}: a profile must be a table, got {_describe(data)}")

    top: dict[str, str] = {}
    for key in _TOP_LEVEL:
        if key not in data:
            errors.append(f"{label}: missing key {key!r}")
        else:
            v = _check_value(key, str, {}, data[key], errors, label)
            if v is not None:
                if key == "name" and not v.strip():
                    errors.append(f"{label}: 'name' must not be empty")
                top[key] = v

    for key, v in data.items():
        if key in _TOP_LEVEL or key == ASSUMPTIONS:
            continue
        if key in SECTIONS or key in OPTIONAL_SECTIONS:
            if not isinstance(v, Mapping):
                errors.append(f"{label}: {key!r} must be a table [{key}], got {_describe(v)}")
        elif isinstance(v, Mapping):
            errors.append(f"{label}: unknown section [{key}] (known: {', '.join([*SECTIONS, *OPTIONAL_SECTIONS])})")
        else:
            errors.append(f"{label}: unknown key {key!r}")

    values: dict[str, dict[str, Any]] = {}
    for section, cls in {**SECTIONS, **OPTIONAL_SECTIONS}.items():
        table = data.get(section)
        if table is None:
            if section not in OPTIONAL_SECTIONS:
                errors.append(f"{label}: missing section [{section}]")
            continue
        if not isinstance(table, Mapping):
            continue  # reported above
        types = _field_types(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        sec_values: dict[str, Any] = {}
        for fname, f in fields.items():
            key = f"{section}.{fname}"
            if fname not in table:
                errors.append(f"{label}: missing key {key!r}")
                continue
            sec_values[fname] = _check_value(key, types[fname], f.metadata, table[fname], errors, label)
        for fname in table:
            if fname not in fields:
                errors.append(f"{label}: unknown key '{section}.{fname}'")
        values[section] = sec_values

    _cross_checks(values, errors, label)
    assumptions = _assumptions(data.get(ASSUMPTIONS), set(values), errors, label)
    if errors:
        raise ProfileError(errors)
    sections = {s: SECTIONS[s](**values[s]) for s in SECTIONS}
    sections.update({s: OPTIONAL_SECTIONS[s](**values[s]) for s in OPTIONAL_SECTIONS if s in values})
    return Profile(name=top["name"], description=top["description"], source=source, assumptions=assumptions,
                   **sections)


def _assumptions(table: Any, present: set[str], errors: list[str], label: str) -> tuple[str, ...]:
    """The ``[assumptions]`` table (optional): one array of knob names per section the profile has.
    Returns the dotted knobs in schema order; a name that is not a knob of its section, a section
    the profile does not have, a non-array or a repeated name is one error line each."""
    if table is None:
        return ()
    if not isinstance(table, Mapping):
        errors.append(f"{label}: {ASSUMPTIONS!r} must be a table [{ASSUMPTIONS}], got {_describe(table)}")
        return ()
    named: set[str] = set()
    for section, names in table.items():
        where = f"{label}: [{ASSUMPTIONS}] {section}"
        if section not in present:
            known = [s for s in (*SECTIONS, *OPTIONAL_SECTIONS) if s in present]
            errors.append(f"{where}: no section [{section}] in this profile (its sections: {', '.join(known)})")
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            errors.append(f"{where}: must be an array of knob names of [{section}], got {_describe(names)}")
            continue
        cls = {**SECTIONS, **OPTIONAL_SECTIONS}[section]
        knobs = [f.name for f in dataclasses.fields(cls)]
        for n in names:
            if n not in knobs:
                errors.append(f"{where}: {n!r} is not a knob of [{section}] (its knobs: {', '.join(knobs)})")
            elif f"{section}.{n}" in named:
                errors.append(f"{where}: {n!r} is listed twice")
            else:
                named.add(f"{section}.{n}")
    return tuple(k for k, _, _ in schema_fields(optional=True) if k in named)


def assumptions_by_section(p: Profile) -> dict[str, list[str]]:
    """``p.assumptions`` as the ``[assumptions]`` table has them: section -> knob names, schema order."""
    out: dict[str, list[str]] = {}
    for key in p.assumptions:
        section, _, knob_name = key.partition(".")
        out.setdefault(section, []).append(knob_name)
    return out


# ----------------------------------------------------------------------------- conversions


def profile_to_dict(p: Profile) -> dict[str, Any]:
    """Plain nested dict with exactly the keys of a profile file (``source`` is not included)."""
    out: dict[str, Any] = {"name": p.name, "description": p.description}
    for section in SECTIONS:
        out[section] = dataclasses.asdict(getattr(p, section))
    for section in OPTIONAL_SECTIONS:   # only the optional sections the profile has
        if getattr(p, section) is not None:
            out[section] = dataclasses.asdict(getattr(p, section))
    if p.assumptions:
        out[ASSUMPTIONS] = assumptions_by_section(p)
    return out


def with_overrides(p: Profile, overrides: Mapping[str, Any]) -> Profile:
    """A copy of ``p`` with dotted keys replaced (``{"nic.atomic_slot_ns": 400}``), fully validated.

    ``"name"`` and ``"description"`` may be overridden too. An unknown key, a wrong type, a value out
    of range or a broken cross-field rule raises :class:`ProfileError` naming the key.
    """
    label = f"{Path(p.source).name if p.source else p.name} (overrides)"
    data = profile_to_dict(p)
    errors: list[str] = []
    # a table the profile lacks may be added whole, every key given (as ``dmrack check --chaos`` does)
    added: dict[str, set] = {}
    for key in overrides:
        section, _, fname = key.partition(".") if isinstance(key, str) else ("", "", "")
        if section in OPTIONAL_SECTIONS and section not in data:
            added.setdefault(section, set()).add(fname)
    for section, given in added.items():
        if given >= {f.name for f in dataclasses.fields(OPTIONAL_SECTIONS[section])}:
            data[section] = {n: None for n in given}
    for key, v in overrides.items():
        if not isinstance(key, str):
            errors.append(f"{label}: override keys must be strings like 'nic.atomic_slot_ns', got {key!r}")
            continue
        if key in _TOP_LEVEL:
            data[key] = v
            continue
        section, _, fname = key.partition(".")
        if section == ASSUMPTIONS:
            errors.append(f"{label}: {key!r} cannot be overridden: the [{ASSUMPTIONS}] table lists knobs, it is "
                          f"not one")
        elif section in OPTIONAL_SECTIONS and section not in data:
            names = [f.name for f in dataclasses.fields(OPTIONAL_SECTIONS[section])]
            if fname == min(added[section]):      # one line for the table, not one per key
                missing = ", ".join(f"{section}.{n}" for n in names if n not in added[section])
                errors.append(f"{label}: unknown key {key!r} (this profile has no [{section}] table; to add one, "
                              f"give every key of it: missing {missing})")
        elif section not in SECTIONS and section not in OPTIONAL_SECTIONS:
            errors.append(f"{label}: unknown key {key!r} (no section [{section}])")
        elif fname not in data[section]:
            errors.append(f"{label}: unknown key {key!r}")
        else:
            data[section][fname] = v
    if errors:
        raise ProfileError(errors)
    return profile_from_dict(data, source=p.source, label=label)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)  # shortest repr that round-trips; always has '.' or 'e'
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def dump_profile(p: Profile) -> str:
    """TOML text of ``p`` (no comments) that :func:`load_profile` reads back to an equal profile."""
    d = profile_to_dict(p)
    lines = [f"name = {_toml_value(d['name'])}", f"description = {_toml_value(d['description'])}"]
    for section in [*SECTIONS, *OPTIONAL_SECTIONS, ASSUMPTIONS]:
        if section not in d:
            continue
        lines.append("")
        lines.append(f"[{section}]")
        for k, v in d[section].items():
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- command line


def _main(argv: list[str]) -> int:
    usage = "usage: python -m shm.profile list | show NAME_OR_FILE | check FILE... | dump NAME_OR_FILE"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "list" and not args:
            for n in list_profiles():
                print(f"{n:12s} {load_profile(n).description}")
        elif cmd == "show" and len(args) == 1:
            print(json.dumps(profile_to_dict(load_profile(args[0])), indent=2))
        elif cmd == "dump" and len(args) == 1:
            sys.stdout.write(dump_profile(load_profile(args[0])))
        elif cmd == "check" and args:
            bad = 0
            for a in args:
                try:
                    load_profile(a)
                    print(f"{a}: ok")
                except ProfileError as e:
                    bad += 1
                    print(e, file=sys.stderr)
            return 1 if bad else 0
        else:
            print(usage, file=sys.stderr)
            return 2
    except ProfileError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
