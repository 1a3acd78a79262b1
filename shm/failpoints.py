"""Named failpoints: crash a client at a chosen point between two verbs.

Code marks a point with ``failpoint("race.insert.published")``; by default that is one dict test.
A test (or a user reproducing a bug) *arms* a point with an action:

* ``crash``: raise :class:`ClientCrash` in the coroutine that reached it. The compute node lets
  that coroutine die where it stands: its operation never returns (the history records it as
  invoked but not returned, i.e. "may or may not have happened") and nothing after the point
  runs, exactly as if that client's machine had stopped between two verbs;
* ``exit``: end the whole process at once with ``os._exit`` (no cleanup, like ``kill -9``), so
  the supervisor sees a node die in the middle of an operation;
* ``off``: disarmed.

``after=N`` lets the point pass N times before it fires; ``times=M`` fires it M times (default
once). Arming is per process; racks of processes arm their nodes from the environment variable
``DMRACK_FAILPOINTS`` (inherited by the forked nodes), in the style of fail-rs::

    DMRACK_FAILPOINTS="race.update.block_written=crash@3;cn1:verbs.post=exit@1000"

(``cn1:`` arms the point in node cn1's process only).

Every point a module offers is listed in ``KNOWN`` so that a typo in an armed name is an error,
not a point that silently never fires. :func:`validate` applies those rules to the whole
variable without arming anything; ``dmrack up/run/check`` call it before a rack is built, because
the nodes arm their points only after they have forked, where a typo would kill a node of a
rack that took seconds to build instead of being one line at the prompt.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from shm.messages import clip, did_you_mean

ENV = "DMRACK_FAILPOINTS"
ACTIONS = ("crash", "exit", "off")
EXIT_STATUS = 86

KNOWN = {
    "verbs.post": "shm/coro.py: a coroutine is about to ring the doorbell for its queued verbs",
    "verbs.sync": "shm/coro.py: a coroutine asks to wait for its verbs, before it posts what is still queued",
    "race.insert.published": "RACE insert: the tentative slot is published, not yet settled or committed",
    "race.insert.settled": "RACE insert: duplicates settled, before the commit CAS",
    "race.update.block_written": "RACE update: the new KV block is written, the slot not yet swung",
    "race.delete.found": "RACE delete: the slot is found, before the CAS that clears it",
    "aceso.update.written": "Aceso update: the new record is written to its data and delta blocks, the slot's CAS not yet posted",
    "aceso.update.committed": "Aceso update: the slot's CAS succeeded, the cache and the block's seal not yet updated",
    "aceso.delete.logged": "Aceso delete: the delete's log record is written, the slot's CAS not yet posted",
    "flexkv.proxy.memory_written": "FlexKV proxy write: the memory node's slot written (and the old pair invalidated), the LOCAL_CAS commit not yet",
    "fusee.update.found": "FUSEE update: the new KV block written to its replicas and the key's slot found, no backup CASed",
    "fusee.delete.found": "FUSEE delete: the delete's log block written and the key's slot found, no backup CASed",
    "fusee.snapshot.backups_cased": "FUSEE SNAPSHOT: every backup slot CASed (consensus 0), nothing decided",
    "fusee.snapshot.backups_settled": "FUSEE SNAPSHOT: the winner holds every backup (consensus 1), its log not committed",
    "fusee.snapshot.log_committed": "FUSEE SNAPSHOT: the winner's log committed on every copy, the primary not yet CASed",
    "fusee.insert.committed": "FUSEE insert: committed in the primary with the replicating bit, no backup written",
    "fusee.insert.replicated": "FUSEE insert: every backup holds the word, the primary's replicating bit not cleared",
    "dolphin.idu.entered": "Dolphin IDU: Spear taken shared (FAA +1 with the leaf READ), nothing written yet",
    "dolphin.update.found": "Dolphin update: the key's slot found, before the value WRITE and the release",
    "dolphin.update.written": "Dolphin update: the value WRITE posted, the Spear release not yet",
    "dolphin.insert.key_set": "Dolphin insert: the key CASed into its slot, its value not yet written",
    "dolphin.smo.new_leaf_written": "Dolphin split: the new leaf written (unreachable), the old one not yet shrunk",
    "dolphin.smo.old_leaf_shrunk": "Dolphin split: the old leaf shrunk, the new one not yet published",
    "dolphin.smo.special_written": "Dolphin split: a prefix's special node written, not yet CASed into the ART",
    "marlin.idu.entered": "Marlin insert/update/delete: the leaf's Spear count is taken (FAA +1 done), nothing changed",
    "marlin.item.written": "Marlin insert/update: the new data item is written, the entry's CAS not yet posted",
    "marlin.split.drained": "Marlin split: the Spear word is the SMO's and the IDUs have drained, nothing written",
    "marlin.split.right_written": "Marlin split: the new right leaf is written, the old leaf not yet cut",
    "art.upgrade.written": "ART node upgrade: the replacement node is written (header posted), the parent entry "
                           "not yet swung",
    "smart-art.insert.leaf_written": "SMART-ART insert: the new leaf is written, not yet linked into the tree",
    "smart-art.update.leaf_written": "SMART-ART out-of-place update: the new leaf is written, the old leaf not yet "
                                     "marked replaced",
    "clover.insert.written": "Clover insert of a new key: its first version is written to every replica, the "
                             "metadata server not yet asked to create the key",
    "clover.write.block_written": "Clover update/delete/insert: the new version is written to every replica, the "
                                  "CAS that links it behind the chain's tail not yet posted",
    "clover.write.linked": "Clover update/delete/insert: the version is linked (CAS done), the backups' next "
                           "words, the cache and the GC entry not yet written",
    "ford.executed": "FORD transaction: its records fetched and its read-write set (cached addresses) locked, "
                     "nothing validated or logged",
    "ford.validated": "FORD transaction: validated and its undo log acked on every memory node, nothing written",
    "ford.primaries_written": "FORD commit: the primaries' lock and record WRITEs posted, the backups' not yet",
    "ford.committed": "FORD commit: every replica written (and flushed), the locks not yet released",
}


class ClientCrash(BaseException):
    """Raised by a ``crash`` failpoint: the client stops here (BaseException so that ordinary
    ``except Exception`` blocks in system code do not swallow it)."""


class Armed(NamedTuple):
    action: str
    after: int
    times: int


class FailpointStats(NamedTuple):
    armed: tuple
    hits: tuple
    fired: tuple


#: The points armed in this process (name -> :class:`Armed`; empty while none is). A hot path tests it
#: before the call, ``if ARMED_POINTS: failpoint(name)``, so that an unarmed point costs one test, not
#: a call (shm/coro.py's two per post). Read it; only :func:`arm` and :func:`disarm_all` change it.
ARMED_POINTS: dict[str, Armed] = {}
_hits: dict[str, int] = {}
_fired: dict[str, int] = {}


def arm(name: str, action: str = "crash", *, after: int = 0, times: int = 1) -> None:
    if name not in KNOWN:
        raise ValueError(f"unknown failpoint {clip(name)!r}{did_you_mean(name, KNOWN, quote=True)}; "
                         f"known: {', '.join(sorted(KNOWN))}")
    if action not in ACTIONS:
        raise ValueError(f"failpoint {name}: unknown action {action!r}; choose {', '.join(ACTIONS)}")
    if after < 0 or times < 1:
        raise ValueError(f"failpoint {name}: after must be >= 0 and times >= 1, got {after}, {times}")
    if action == "off":
        ARMED_POINTS.pop(name, None)
        return
    ARMED_POINTS[name] = Armed(action, after, times)
    _hits[name] = 0
    _fired[name] = 0


def armed(name: str) -> bool:
    """``name`` is armed in this process (for a point that must post its verbs before it stops)."""
    return name in ARMED_POINTS


def disarm_all() -> None:
    ARMED_POINTS.clear()
    _hits.clear()
    _fired.clear()


def parse(spec: str) -> list[tuple[str | None, str, str, int]]:
    """``"[node:]name=action[@after];..."`` -> [(node or None, name, action, after)]; ValueError
    naming the bad part. A ``node:`` prefix (``cn1:race.update.cas=exit``) arms the point in that
    node's process only."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, eq, rest = part.partition("=")
        if not eq:
            raise ValueError(f"{ENV}: {clip(part)!r} is not [node:]name=action[@after]")
        node, colon, point = name.strip().rpartition(":")
        action, _, after = rest.partition("@")
        try:
            n = int(after) if after else 0
        except ValueError:
            raise ValueError(f"{ENV}: {clip(part)!r}: after {clip(after)!r} is not an integer") from None
        out.append((node if colon else None, point, action.strip(), n))
    return out


def validate(spec: str, nodes=None) -> list[tuple[str | None, str, str, int]]:
    """Check a ``DMRACK_FAILPOINTS`` value completely without arming anything; returns what
    :func:`parse` returns, or raises ValueError with one line naming the bad part and, for a
    misspelt point, action or node, the closest correct one ("did you mean ..."). ``nodes``
    (optional): the rack's node names, which a ``node:`` prefix must be one of."""
    def hint(word, choices) -> str:
        return did_you_mean(word, choices, quote=True)

    out = parse(spec)
    for only, name, action, after in out:
        where = clip(f"{ENV}: {(only + ':') if only is not None else ''}{name}={action}" + (f"@{after}" if after else ""))
        if name not in KNOWN:
            raise ValueError(f"{where}: unknown failpoint {clip(name)!r}{hint(name, KNOWN)} "
                             f"(known: {', '.join(sorted(KNOWN))})")
        if action not in ACTIONS:
            raise ValueError(f"{where}: unknown action {clip(action)!r}{hint(action, ACTIONS)} "
                             f"(choose {', '.join(ACTIONS)})")
        if after < 0:
            raise ValueError(f"{where}: after must be >= 0, got {after}")
        if nodes is not None and only is not None and only not in nodes:
            raise ValueError(f"{where}: no node {clip(only)!r} in this rack{hint(only, nodes)} "
                             f"(nodes: {', '.join(nodes)})")
    return out


def arm_from_env(environ=os.environ, node: str | None = None) -> list[str]:
    """Arm what ``DMRACK_FAILPOINTS`` names for this process (``node``: its node name); returns
    the names armed."""
    names = []
    for only, name, action, after in parse(environ.get(ENV, "")):
        if only is None or only == node:
            arm(name, action, after=after)
            names.append(name)
    return names


def failpoint(name: str) -> None:
    """Mark a point; fires its armed action, if any."""
    if not ARMED_POINTS:
        return
    a = ARMED_POINTS.get(name)
    if a is None:
        return
    hit = _hits[name] = _hits[name] + 1
    if hit <= a.after or _fired[name] >= a.times:
        return
    _fired[name] += 1
    if a.action == "exit":
        os._exit(EXIT_STATUS)
    raise ClientCrash(f"failpoint {name} (hit {hit})")


def statistics() -> FailpointStats:
    return FailpointStats(tuple(sorted(ARMED_POINTS)), tuple(sorted(_hits.items())), tuple(sorted(_fired.items())))
