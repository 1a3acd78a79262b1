"""A compute node's local lock table: read delegation and write combining (SMART, OSDI'23).

Why: under a skewed workload many coroutines of one compute node ask for the same hot key at the
same time. SMART keeps a table per compute node through which same-key requests meet before going
remote: a GET that finds a GET of its key in flight takes that read's result instead of reading
the key itself (*read delegation*; here only a result it may take, see below), and an UPDATE
that finds an UPDATE of its key in flight hands its value to it, so that only the last value is
written (*write combining*). Dolphin (MSST'24) reuses the same table, so it lives in the systems
library. One table per compute node, shared by its threads and coroutines
(``nodes.systems.sherman.cache.shared``); coroutines interleave only at ``yield``, so no locking
is needed.

Both are wrappers around the system's own operation::

    value = yield from table.read(key, lambda: client.remote_get(co, key))
    value = yield from table.read(key, lambda mark: client.stamped_get(co, key, mark), marks=True)
    ok = yield from table.write(key, value, lambda take: client.remote_update(co, key, take))

(the second form lets waiting GETs take the value early, see **Reads**; the first only shares
reads that start after the waiting GETs).

**Reads.** At most one remote read per key is in flight on the node. A GET that arrives while one
is in flight may take that read's result only if the result comes from a READ *posted after* the
GET arrived: the in-flight read may have looked at the key before the GET was even invoked, and a
value older than the GET's invocation breaks linearizability (a local UPDATE that returned just
before this GET started, a value another node read meanwhile). The remote read tells the table
when it posts each READ that may produce its answer (``mark()``, which stamps it) and returns the
stamp of the READ its value came from; a waiting GET that arrived before that stamp takes the
value: the READ took effect at an instant after the GET arrived and before the leader returned,
and a value read at that instant (in SMART-ART: a live leaf's value, the key's current one then)
may be the GET's linearization point. Other waiting GETs (they arrived after that READ was
posted, or the answer is "absent", which is decided across several READs and carries stamp 0)
wait for the read in flight to end; then the first of them (the *leader*) runs one remote read for
all of them, which starts after every member was invoked and ends before any returns, so its
linearization instant lies in every member's interval. ``read_handover`` counts the GETs served
without a remote access.

**Writes.** At most one remote update per key is in flight on the node (its *leader*). An UPDATE
that arrives meanwhile appends its value to the key's queue and waits. The leader's operation
receives ``take``: it calls ``take()`` right before it issues the remote write that makes the
update visible and writes what ``take()`` returns, the last value handed over so far (its own if
none); every value handed over before that call is *carried* by that write. When the leader's
operation succeeds, every carried member returns True (``write_handover`` each). Argument: every
carried member was invoked before ``take()``, hence before the leader's write took effect at some
instant t, and returns after the leader's operation has completed, hence after t; linearize the
leader and then the carried members in their arrival order, all at t: the later ones overwrite the
earlier ones, and the state after t holds the last value, exactly what was written. If ``take`` is
called again (the leader's first attempt found its leaf replaced and tries again), the members
handed over since are carried too, the write carries the latest value, and the argument holds for
the attempt that succeeds. If the leader's operation returns False (the key is missing), its
carried members do not take that answer (the key may have been missing only before they were
invoked): they are woken to try again on their own. Members that arrive after the last ``take()``
are not carried; the first of them becomes the next leader when the current one ends.

A leader that stops in the middle (a crash failpoint, ``ClientCrash``) stops its carried writers
with it (their values may or may not have been written, as its own, so they never return); the
waiting readers and the writers not yet carried go on: the first of them leads.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

_LEAD = object()          # a waiter's wake-up: you lead the next remote access


class LocalLockStats(NamedTuple):
    read_handover: int    # GETs answered by another GET's remote read
    write_handover: int   # UPDATEs whose value another UPDATE wrote
    read_leads: int       # remote reads run (by a leader)
    write_leads: int      # remote updates run (by a leader)
    write_retries: int    # carried UPDATEs queued again (the leader found the key missing)


class _ReadState:
    __slots__ = ("waiting", "stamp")

    def __init__(self):
        self.waiting: list = []          # (event, stamp at arrival) of GETs that arrived during a read
        self.stamp = 0                   # READs posted by this key's leaders (``mark``)


class _WriteQueue:
    __slots__ = ("latest", "pending", "carried")

    def __init__(self, value):
        self.latest = value              # the last value handed over (or the leader's own)
        self.pending: list = []          # events of the UPDATEs handed over and not yet carried
        self.carried: list = []          # ... carried by the leader's next successful write


class LocalLockTable:
    """One compute node's table (see the module docstring); ``env`` is the node's environment."""

    def __init__(self, env, eager_reads: bool = False):
        """``eager_reads``: the deliberate bug of taking any in-flight read's result (what the
        docstring argues against), for checking that the checker sees it."""
        self.env = env
        self.eager_reads = eager_reads
        self._reads: dict = {}
        self._writes: dict = {}
        self.read_handover = self.write_handover = 0
        self.read_leads = self.write_leads = self.write_retries = 0

    def statistics(self) -> LocalLockStats:
        return LocalLockStats(self.read_handover, self.write_handover, self.read_leads, self.write_leads,
                              self.write_retries)

    def busy(self, key) -> bool:
        """A remote read or update of ``key`` is in flight on this node."""
        return key in self._reads or key in self._writes

    # -- read delegation ---------------------------------------------------------------------------
    def read(self, key, remote, stats=None, marks: bool = False):
        """Generator: the result of ``remote()`` (a generator: the remote read), or of the read a
        group of this node's GETs of ``key`` shared (see the module docstring). ``stats``: an
        object whose ``read_handover`` is counted too (the calling client). With ``marks`` the
        remote read is ``remote(mark)``: it calls ``mark()`` right before it posts each READ that
        may produce its answer and returns ``(value, stamp)``, ``stamp`` the ``mark()`` of the
        READ the value was taken from (0: a value no other GET may take early, such as "absent")."""
        members: list = []
        st = self._reads.get(key)
        if st is not None:
            ev = self.env.event()
            st.waiting.append((ev, st.stamp))
            kind, got = yield ev
            if kind is not _LEAD:
                self.read_handover += 1
                if stats is not None:
                    stats.read_handover += 1
                return got
            members = got                         # the GETs that waited with us: ours to serve
        else:
            st = self._reads[key] = _ReadState()
        self.read_leads += 1

        def mark():
            st.stamp += 1
            return st.stamp

        ok = False
        try:
            if marks:
                value, stamp = yield from remote(mark)
            else:
                value, stamp = (yield from remote()), 0
            ok = True
        finally:
            if ok:
                for ev in members:
                    ev.succeed((None, value))
                nxt = []
                for ev, arrived in st.waiting:
                    if stamp > arrived or self.eager_reads:   # its READ was posted after this GET arrived
                        ev.succeed((None, value))
                    else:
                        nxt.append(ev)
            else:                                 # stopped: nobody got a value; the earliest leads
                nxt = members + [ev for ev, _ in st.waiting]
            st.waiting = []
            if nxt:
                nxt[0].succeed((_LEAD, nxt[1:]))
            else:
                del self._reads[key]
        return value

    # -- write combining ---------------------------------------------------------------------------
    def write(self, key, value, remote, stats=None):
        """Generator: the result of ``remote(take)`` (a generator: the remote update, which calls
        ``take()`` for the value to write right before it writes), or True once a leader's write
        carried ``value`` (see the module docstring). ``stats``: an object whose ``write_handover``
        is counted too (the calling client)."""
        q = self._writes.get(key)
        if q is not None:
            ev = self.env.event()
            q.pending.append(ev)
            q.latest = value
            got = yield ev
            if got is True:
                self.write_handover += 1
                if stats is not None:
                    stats.write_handover += 1
                return True
            # _LEAD: the queue is ours to lead; q.latest is the last value handed over (ours or later)
        else:
            q = self._writes[key] = _WriteQueue(value)
        self.write_leads += 1

        def take():
            q.carried.extend(q.pending)
            q.pending = []
            return q.latest

        done = False
        ok = False
        try:
            ok = yield from remote(take)
            done = True
        finally:
            carried, q.carried = q.carried, []
            if done and ok:
                for ev in carried:
                    ev.succeed(True)
            elif done:                             # the key was missing: the carried try again
                self.write_retries += len(carried)
                q.pending = carried + q.pending
            else:                                  # stopped with the leader (see the docstring)
                exc = sys.exc_info()[1] or RuntimeError("write leader stopped")
                for ev in carried:
                    ev.fail(exc)
            if q.pending:
                nxt, q.pending = q.pending[0], q.pending[1:]
                nxt.succeed(_LEAD)
            else:
                del self._writes[key]
        return ok
