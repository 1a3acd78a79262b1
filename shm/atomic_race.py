"""Remote atomics that are atomic only against other atomics: the opt-in ``nic.atomic_write_race``.

A ConnectX NIC executes a remote CAS or FAA as a PCIe read of the word, then a write-back of the
new value, holding the address against its *own* atomics in between (mlx5 reports
``IBV_ATOMIC_HCA``, not ``IBV_ATOMIC_GLOB``). A WRITE that lands on the word in that window, from
any QP, is overwritten by the write-back: lost. In the emulator an atomic is one ``cmpxchg`` on the
shared mapping, atomic against everything, so a design that mixes WRITE and CAS on one word (a lock
released by a WRITE while other clients CAS it, a version word both CASed and WRITTEN) looks
correct here and may lose updates on hardware (docs/fabric.md, "Atomicity").

With ``nic.atomic_write_race = true`` every atomic that changes its word still happens at its
effect time (so atomics stay exact among themselves, and the value it returns is right), and
``nic.atomic_slot_ns`` later (the modelled read-modify-write: how long the NIC holds the address;
``nic.device_memory_ns`` for device memory) its *write-back* lands: if the word no longer holds
the value the atomic wrote and no later atomic has touched the word since, it is written again,
undoing whatever WRITE landed in between, and the loss is counted. A failed CAS writes nothing
back (ConnectX does not), so it cannot lose a WRITE.

The last atomic per word is tracked per process: co-located racks are exact; in a rack of
processes a write-back can also undo another process's atomic that landed inside the window (the
tracking does not see it), so use the knob to find a design's WRITE/CAS mixes co-located.
"""

from __future__ import annotations

from itertools import count

from shm.atomics import cas, load_acquire
from shm.fabric import REGION_HOST, gaddr
from shm.deferred import before_write
from shm.landing import pending_writes_of
from shm.nic import ChaosStream


class AtomicWriteRace:
    """Write-backs of one process's atomics (see the module docstring)."""

    def __init__(self, fabric):
        nic = fabric.profile.nic
        self.fabric = fabric
        self.host_hold_ns = nic.atomic_slot_ns
        self.device_hold_ns = nic.device_memory_ns
        self.last: dict[tuple[int, int, int], int] = {}   # (node, region, word) -> token of the last atomic
        self._tokens = count(1)
        self.writes_lost = 0                                  # write-backs that undid a WRITE
        # chaos (docs/checking.md): a write-back may land later, the window it can undo a WRITE in wider
        self._chaos = ChaosStream.of(fabric.profile, "writeback_ns", 1 << 61)

    def after_atomic(self, env, node: int, region: int, off: int, wrote: bool) -> None:
        """An atomic on word ``off`` of ``node``'s ``region`` took effect now; ``wrote``: it
        changed the word (a CAS that matched, any FAA). Schedules its write-back."""
        key = (node, region, off // 8)
        token = next(self._tokens)
        self.last[key] = token
        if not wrote:
            return
        mem = self.fabric.memory[node]
        words = mem.host64 if region == REGION_HOST else mem.device64
        value = int(words[off // 8])
        hold = self.host_hold_ns if region == REGION_HOST else self.device_hold_ns
        if self._chaos is not None:
            d = self._chaos.draw()
            if d:
                hold += d
                self.fabric.windows["write_backs_delayed"] += 1
        env.schedule(env.now + hold, self._write_back, (key, words, value, token))
        env.effect_at(env.now + hold)
        # the word it writes back (a host READ waits for it only if it reads that word)
        pending_writes_of(self.fabric).add_verb(node, env.now + hold, env.now + hold, gaddr(node, off, region), 8)

    def _write_back(self, arg) -> None:
        key, words, value, token = arg
        if self.last.get(key) != token:
            return                       # a later atomic owns the word now: its write-back decides
        del self.last[key]
        before_write(self.fabric, key[0])
        i = key[2]
        while True:
            cur = int(load_acquire(words, i))
            if cur == value:
                return
            if int(cas(words, i, cur, value)) == cur:
                self.writes_lost += 1
                return


def atomic_race_of(fabric) -> AtomicWriteRace | None:
    """The process's ``AtomicWriteRace`` for ``fabric`` when its profile turns the knob on, else None."""
    if not fabric.profile.nic.atomic_write_race:
        return None
    race = getattr(fabric, "_atomic_race", None)
    if race is None:
        race = fabric._atomic_race = AtomicWriteRace(fabric)
    return race
