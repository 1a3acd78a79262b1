"""Spear: Marlin's FAA-only ternary-state node lock (ICPP'23), as Dolphin's code uses it.

Why a library module: Marlin uses it between a leaf's structure modifications (SMOs: splits) and
its inserts, deletes and updates (IDUs), and Dolphin (MSST'24) takes the same lock for its leaves;
both need the same constants and the same back-off rules.

One signed 64-bit word in the node (two's complement; an FAA of a negative delta subtracts) holds
three states at once:

* ``0``: free;
* ``n > 0`` (up to ``SMO_UP_LIMIT``'s distance): ``n`` IDUs inside the node. IDUs do not exclude
  each other: each changes only what it owns with a CAS of its own, so they run concurrently;
* ``SMO_STATUS + n`` (far below ``SMO_UP_LIMIT``): an SMO owns the node and waits for the ``n``
  IDUs still inside to leave (or has them drained: ``n == 0``, or 1 when the SMO started from
  inside an IDU and keeps its own count).

The constants are Dolphin's (hust-anhang/Dolphin): ``normalOp = 1``, ``SMOstatus = -1 000 000``,
``SMOUpLimit = -100 000``. The gap between them is room for IDUs that FAA +1 while an SMO holds
the word and back out: 900 000 of them at once before the states could be confused.

The protocol (every step is one FAA or READ of the word; no CAS, so no failed-CAS storms):

* **IDU enter**: FAA +1 posted in the same doorbell as the READ of the node (the READ executes
  after the FAA on their QP, so it sees every SMO that ended before the FAA). Old value below
  ``SMO_UP_LIMIT``: an SMO is running; FAA -1 and READ the word until it is at least
  ``SMO_UP_LIMIT``, then start again.
* **IDU exit**: FAA -1 queued after the IDU's last WRITE or CAS (an atomic executes after the
  WRITEs and atomics posted before it on its QP, so a draining SMO sees the IDU's changes); it
  is posted unsignaled: nothing waits for it.
* **SMO enter**: FAA +SMO_STATUS. Old value below ``SMO_UP_LIMIT``: another SMO holds the node;
  FAA -SMO_STATUS back (and -1 more when started from inside an IDU, or the other SMO would wait
  for us forever), READ until the word is at least ``SMO_UP_LIMIT``, and let the caller start
  over. Otherwise READ the word until it is exactly ``SMO_STATUS`` (+1 from inside an IDU): the
  IDUs have drained and no new one gets in.
* **SMO exit**: FAA -SMO_STATUS (-(SMO_STATUS + 1) from inside an IDU), queued after the SMO's
  WRITE of the node, whose bytes must never cover the lock word (a WRITE is not atomic with the
  FAAs of other clients).

No leases: a client that stops inside an IDU keeps the node from ever splitting, one that stops
inside an SMO keeps every IDU out of the node (Marlin describes no failure handling either).
"""

from __future__ import annotations

from shm.messages import SystemGaveUp

NORMAL_OP = 1
SMO_STATUS = -1_000_000
SMO_UP_LIMIT = -100_000
SPIN_LIMIT = 100_000          # READs of a lock word before it is declared stuck (SystemGaveUp)

_U64 = 1 << 64


def signed(word: int) -> int:
    """The lock word (an FAA's or READ's unsigned 64-bit value) as the signed count it is."""
    return word - _U64 if word >= 1 << 63 else word


class Spear:
    """One client's use of Spear locks: the verbs and the counters. ``name`` names the system in
    errors."""

    __slots__ = ("name", "idu_waits", "smo_conflicts", "spin_reads")

    def __init__(self, name: str):
        self.name = name
        self.idu_waits = 0          # IDU entries that met an SMO and backed out
        self.smo_conflicts = 0      # SMO entries that met another SMO and backed out
        self.spin_reads = 0         # READs of a lock word while waiting

    @staticmethod
    def queue_idu_enter(co, lock: int):
        """Queue the IDU's FAA +1 (post it with the node READ); its handle."""
        return co.faa(lock, NORMAL_OP)

    @staticmethod
    def idu_entered(handle) -> bool:
        """Did the FAA +1 of ``handle`` get in (no SMO held the word)?"""
        return signed(handle.value) >= SMO_UP_LIMIT

    def idu_back_off(self, co, lock: int):
        """Generator: an FAA +1 that met an SMO: take it back and wait for the SMO to end."""
        self.idu_waits += 1
        co.faa(lock, -NORMAL_OP)
        yield from self.wait_no_smo(co, lock)

    @staticmethod
    def queue_idu_exit(co, lock: int) -> None:
        """Queue the IDU's FAA -1 after its last WRITE/CAS and ring the doorbell (unsignaled)."""
        co.faa(lock, -NORMAL_OP)
        co.post()

    def wait_no_smo(self, co, lock: int):
        """Generator: READ the word (the verbs queued on ``co`` go with the first READ) until no
        SMO holds it."""
        for _ in range(SPIN_LIMIT):
            h = co.read(lock, 8)
            yield co.sync()
            self.spin_reads += 1
            if signed(int.from_bytes(h.data[:8], "little")) >= SMO_UP_LIMIT:
                return
        raise SystemGaveUp(f"{self.name}: an SMO held lock {lock:#x} for {SPIN_LIMIT} READs")

    def smo_enter(self, co, lock: int, inside_idu: bool, drain: bool = True):
        """Generator: take the word for an SMO and wait for the IDUs to drain. False (nothing
        held any more, our own IDU count included) if another SMO had it: start over.
        ``drain=False`` is a deliberate bug for the checker: the SMO does not wait for the IDUs."""
        own = NORMAL_OP if inside_idu else 0
        h = co.faa(lock, SMO_STATUS)
        yield co.sync()
        old = signed(h.value)
        if old < SMO_UP_LIMIT:
            self.smo_conflicts += 1
            co.faa(lock, -(SMO_STATUS + own))
            yield from self.wait_no_smo(co, lock)
            return False
        cur = old + SMO_STATUS
        if not drain:
            return True
        for _ in range(SPIN_LIMIT):
            if cur == SMO_STATUS + own:
                return True
            h = co.read(lock, 8)
            yield co.sync()
            self.spin_reads += 1
            cur = signed(int.from_bytes(h.data[:8], "little"))
        raise SystemGaveUp(f"{self.name}: IDUs did not leave lock {lock:#x} in {SPIN_LIMIT} READs "
                           f"(a client stopped inside one?)")

    @staticmethod
    def queue_smo_exit(co, lock: int, inside_idu: bool) -> None:
        """Queue the SMO's release after its WRITE of the node and ring the doorbell."""
        co.faa(lock, -(SMO_STATUS + (NORMAL_OP if inside_idu else 0)))
        co.post()
