"""The registry of systems that run on the rack (``dmrack systems`` lists it).

A system is found, in this order, by

1. a **built-in** name (``BUILTIN`` below: the designs shipped in nodes/systems);
2. an **entry point** of the group ``dmrack.systems`` (``ENTRY_POINT_GROUP``) declared by an
   installed package: ``[project.entry-points."dmrack.systems"] my-ht = "mypkg.ht:MyHT"`` in its
   pyproject.toml (examples/plugin has one);
3. a **``module:Class``** name (``mypkg.ht:MyHT``), imported from ``sys.path`` (PYTHONPATH): what a
   spec's ``[system] name`` or ``dmrack check --system`` may give for a system that is not
   installed.

A plugin class must subclass :class:`nodes.systems.api.System` and carry a ``name`` that is not a
built-in's. Once resolved it is also known by that ``name`` in this process (the conformance
suite names systems by it) and in the node processes forked from it. Every failure is one
:class:`SystemLoadError` line (a ``ValueError``: the CLI prints it and exits 2) naming the
module and the error.

Systems are imported only when used, so listing them stays cheap and one broken system cannot
stop the others from loading: ``BUILTIN`` is a declared table of ``module:Class`` targets, the
style every registry of dmrack follows (``shm/targets.py``, which resolves them).
"""

from __future__ import annotations

from shm.messages import clip, did_you_mean
from shm.targets import TargetError, is_target, load, resolve

# name -> "module:Class" (the registries' one style, shm/targets.py); a new built-in system adds
# one line.
BUILTIN = {
    "race": "nodes.systems.race:RaceSystem",
    "smart-ht": "nodes.systems.smart_ht:SmartHTSystem",
    "sherman": "nodes.systems.sherman:ShermanSystem",
    "smart-bt": "nodes.systems.smart_bt:SmartBTSystem",
    "marlin": "nodes.systems.marlin:MarlinSystem",
    "dpa-kv": "nodes.systems.dpa_kv:DpaKvSystem",
    "dpa-store": "nodes.systems.dpastore:DpaStoreSystem",
    "dolphin": "nodes.systems.dolphin:DolphinSystem",
    "flexkv": "nodes.systems.flexkv:FlexKVSystem",
    "flexkv-op": "nodes.systems.flexkv:FlexKVOpSystem",
    "fusee": "nodes.systems.fusee:FuseeSystem",
    "smart-art": "nodes.systems.smart_art:SmartArtSystem",
    "pd3": "nodes.systems.pd3:Pd3System",
    "rolex": "nodes.systems.rolex:RolexSystem",
    "clover": "nodes.systems.clover:CloverSystem",
    "aceso": "nodes.systems.aceso:AcesoSystem",
    "ford": "nodes.systems.ford:FordSystem",
    "smart-dtx": "nodes.systems.smart_dtx:SmartDtxSystem",
}

ENTRY_POINT_GROUP = "dmrack.systems"

_loaded: dict = {}       # plugin name (as asked and as cls.name) -> class, in this process
_origins: dict = {}      # class -> where it came from (for dmrack systems)


class SystemLoadError(ValueError):
    """A system that cannot be used: unknown, a module that does not import, not a System
    subclass, a name clash. One line."""


def entry_points() -> dict:
    """name -> ``importlib.metadata.EntryPoint`` of every installed ``dmrack.systems`` entry point."""
    from importlib.metadata import entry_points as eps
    try:
        found = eps(group=ENTRY_POINT_GROUP)
    except TypeError:                       # Python < 3.10 style: a dict by group
        found = eps().get(ENTRY_POINT_GROUP, ())
    return {ep.name: ep for ep in found}


def system_names() -> list[str]:
    """The built-in names, then the names of installed entry points (sorted within each)."""
    return sorted(BUILTIN) + sorted(n for n in entry_points() if n not in BUILTIN)


def is_transactional(cls_or_name) -> bool:
    """Whether a system (its class or name) is transactional (``System.transactional``: a
    ``nodes.systems.txn.TxnSystem``) rather than a KV store; the one way the registry's users tell
    them apart (the KV conformance suite, ``dmrack check``, ``dmrack run``)."""
    cls = get_system(cls_or_name) if isinstance(cls_or_name, str) else cls_or_name
    return bool(getattr(cls, "transactional", False))


def kv_system_names() -> list[str]:
    """:func:`system_names` without the transactional systems: what loops over every KV system
    (the KV conformance suite's tests) iterate. Loads each system to read its class attribute."""
    return [n for n in system_names() if not is_transactional(n)]


def is_known(name: str) -> bool:
    """``name`` is a built-in, an installed entry point, a plugin already loaded in this process,
    or a ``module:Class`` name (which may still fail to load)."""
    return name in BUILTIN or name in _loaded or is_plugin_target(name) or name in entry_points()


def is_plugin_target(name: str) -> bool:
    """``name`` looks like ``module:Class``."""
    return is_target(name)


def _import_target(target: str, asked: str, origin: str):
    """The class named by ``module:Class``, checked (subclass of System, a usable name)."""
    from nodes.systems.api import System
    asked = clip(asked)                     # only ever shown in messages
    try:
        obj = load(target, "module:Class")
    except TargetError as e:
        raise SystemLoadError(f"system {asked!r}: {e}") from None
    if not (isinstance(obj, type) and issubclass(obj, System)):
        raise SystemLoadError(f"system {asked!r}: {clip(target)} is not a subclass of nodes.systems.api.System "
                              f"(it is {obj!r})")
    if obj is System:
        raise SystemLoadError(f"system {asked!r}: {clip(target)} is the System base class itself, not a system")
    name = getattr(obj, "name", "")
    if not isinstance(name, str) or not name:
        raise SystemLoadError(f"system {asked!r}: {clip(target)} has no name (set the class attribute name = \"...\")")
    if name in BUILTIN and _builtin_class(name) is not obj:
        raise SystemLoadError(f"system {asked!r}: {clip(target)} is named {name!r}, which is a built-in system; "
                              f"give it another name")
    other = _loaded.get(name)
    if other is not None and other is not obj:
        raise SystemLoadError(f"system {asked!r}: {clip(target)} is named {name!r}, like {_origins.get(other)} "
                              f"already loaded; give it another name")
    _origins.setdefault(obj, origin)
    return obj


def _builtin_class(name: str):
    return resolve(BUILTIN[name])


def get_system(name: str):
    """The :class:`nodes.systems.api.System` subclass called ``name`` (see the module docstring);
    :class:`SystemLoadError` (a ValueError) if unknown or unusable."""
    if name in BUILTIN:
        return _builtin_class(name)
    cls = _loaded.get(name)
    if cls is not None:
        return cls
    if is_plugin_target(name):
        cls = _import_target(name, name, f"module:Class {name}")
    else:
        ep = entry_points().get(name)
        if ep is None:
            raise SystemLoadError(f"unknown system {clip(name)!r}; available: {', '.join(system_names())}"
                                  f"{did_you_mean(name, system_names())} (or a plugin as module:Class)")
        dist = getattr(getattr(ep, "dist", None), "name", None)
        cls = _import_target(ep.value, name, f"entry point {name} ({dist or 'installed package'}: {ep.value})")
    _loaded[name] = cls
    _loaded[cls.name] = cls
    return cls


def system_origin(name: str) -> str:
    """Where the system ``name`` comes from: ``built-in``, ``entry point ...`` or ``module:Class ...``
    (resolves it)."""
    if name in BUILTIN:
        return "built-in"
    return _origins.get(get_system(name), "plugin")
