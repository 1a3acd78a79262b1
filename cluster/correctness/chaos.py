"""``dmrack check --chaos``: adversarial timing that stays within the rules of the fabric.

A bug whose window is a few nanoseconds in the timing model (a pointer published by a CAS that
lands a few ns before the WRITE of what it points to) passes a check run after run: any other
client needs a round trip to reach the block. Real hardware is not that kind: PCIe and NIC queues,
retransmissions, another QP's burst or a descheduled thread stretch the same window to
microseconds. Chaos stretches it on purpose, with the profile's optional ``[chaos]`` table
(``shm/profile_schema.py``), which every layer that times something reads:

* ``effect``: a work request takes up to ``effect_ns`` longer on its way to the responder
  (``shm/nic.py``: before the responder's unit), so its effect lands later;
* ``completion``: its response up to ``completion_ns`` longer on the way back, so its completion
  is delivered later;
* ``lines``: the lines of a multi-line READ or WRITE up to ``line_gap_ns`` further apart (in the
  profile's line order), so a READ racing a WRITE tears over a wider window;
* ``resume``: a coroutine resumes up to ``resume_ns`` after its verbs completed (its thread was
  descheduled: ``shm/coro.py``);
* ``writeback``: with ``nic.atomic_write_race``, an atomic's write-back lands up to
  ``writeback_ns`` later (``shm/atomic_race.py``);
* ``stall``: one request in ``1 / stall_share`` (32 under ``--chaos``) is held up to ``stall_ns``
  on its way to the responder, on top of ``effect``: the rare long delay of a retransmission or
  a paused link. Uniform delays of a few µs rarely hold one WRITE back for longer than another
  client's round trip; a stall does, which is the window a pointer published before its data
  needs (a reader READs the pointer, then the data, one round trip apart).

A chance draws a delay with probability ``share``, uniform up to the kind's maximum, from a
counter-based stream of ``seed`` (``nic.chaos_draw``): a co-located run is the same for the same
seed, bit for bit, so a failure found with one is replayed by giving it again.

Within the rules: every delay is added *before* the model applies the ordering rules of
docs/fabric.md ("Ordering rules"), so none of them is ever broken: one QP's WRITEs and SENDs are
placed in posting order, a READ or atomic lands after everything posted before it on its QP,
completions come in posting order and never before their effects, a fence still waits, lines of
one transfer keep their order. What moves is only what RC leaves free: the order of effects of
different QPs and memory nodes, a WRITE overtaking an earlier READ or atomic of its QP without a
fence, how far apart in time all of it happens. ``tests/test_chaos.py`` has a test per rule.

The numbers below are assumptions, not measurements: large enough that a window of a few ns
opens past a round trip (a READ's round trip is about 2-3 µs on the shipped profiles), small
enough that a ``--quick`` stress still completes thousands of operations.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["KINDS", "DEFAULTS", "SHARE", "ChaosSpec", "parse", "applied"]

#: kind -> the [chaos] key it sets and its largest delay (ns) under --chaos
DEFAULTS = {
    "effect": ("effect_ns", 4_000),
    "completion": ("completion_ns", 2_000),
    "lines": ("line_gap_ns", 20),
    "resume": ("resume_ns", 5_000),
    "writeback": ("writeback_ns", 2_000),
    "stall": ("stall_ns", 20_000),
}
KINDS = tuple(DEFAULTS)
#: the share of chances that draw a delay
SHARE = 0.5
#: the share of requests that stall (the rare, long delays of the stall kind: 1 in 32)
STALL_SHARE = 1 / 32


class ChaosSpec(NamedTuple):
    """Which kinds of delay a check runs with, and the seed of their stream."""
    kinds: tuple
    seed: int

    def overrides(self) -> dict:
        """The profile overrides that add the [chaos] table (every key: the kinds off are 0)."""
        out = {"chaos.seed": self.seed, "chaos.share": SHARE, "chaos.stall_share": STALL_SHARE}
        for kind, (key, most) in DEFAULTS.items():
            out[f"chaos.{key}"] = most if kind in self.kinds else 0
        return out


    def describe(self) -> str:
        """One line for the verdict: which kinds were on, how large, the share and the seed."""
        on = ", ".join(f"{k} <= {DEFAULTS[k][1]:,} ns" + (f" (1 in {round(1 / STALL_SHARE)})" if k == "stall" else "")
                       for k in KINDS if k in self.kinds)
        return f"chaos {on}; share {SHARE:g}, seed {self.seed}"

    def flags(self) -> str:
        """The command-line flags that give this chaos again."""
        kinds = "" if set(self.kinds) == set(KINDS) else " " + ",".join(k for k in KINDS if k in self.kinds)
        return f"--chaos{kinds} --chaos-seed {self.seed}"


def parse(text: str | None, seed: int) -> ChaosSpec:
    """``--chaos`` (every kind: text None or "all") or ``--chaos effect,resume``; an unknown kind is
    a ValueError of one line naming it and the kinds."""
    if seed < 0 or seed >= 1 << 62:
        raise ValueError(f"--chaos-seed must be in 0 .. 2**62-1, got {seed}")
    if text is None or text.strip() in ("", "all"):
        return ChaosSpec(KINDS, seed)
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in DEFAULTS]
    if unknown or not kinds:
        raise ValueError(f"--chaos {text!r}: unknown kind(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"the kinds are {', '.join(KINDS)} (or all)")
    return ChaosSpec(tuple(k for k in KINDS if k in kinds), seed)


def applied(spec: ChaosSpec | None, profile: str | None = None):
    """A context in which every profile loaded by name has ``spec``'s [chaos] table: every shipped
    profile and ``profile`` (a system's rack tables may name another than the check's), in this
    process and in the pools it starts (``shm.profile.overridden``). ``spec`` None: no chaos."""
    from contextlib import nullcontext
    from shm.profile import list_profiles, overridden
    if spec is None:
        return nullcontext()
    return overridden({name: spec.overrides() for name in list_profiles() + ([profile] if profile else [])})
