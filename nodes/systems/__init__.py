"""The registry of systems that run on the rack (``dmrack systems`` lists it).

Systems are named here and imported only when used, so listing them stays cheap and one broken
system cannot stop the others from loading.
"""

from __future__ import annotations

import importlib

# name -> "module:Class"; a new system adds one line.
BUILTIN = {
    "race": "nodes.systems.race:RaceSystem",
    "smart-ht": "nodes.systems.smart_ht:SmartHTSystem",
    "sherman": "nodes.systems.sherman:ShermanSystem",
    "smart-bt": "nodes.systems.smart_bt:SmartBTSystem",
}


def system_names() -> list[str]:
    return sorted(BUILTIN)


def get_system(name: str):
    """The :class:`nodes.systems.api.System` subclass called ``name``; ValueError if unknown."""
    try:
        target = BUILTIN[name]
    except KeyError:
        raise ValueError(f"unknown system {name!r}; available: {', '.join(system_names())}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
