"""A client's protection against hot traverser threads (DPA-Store §3.1.3), as plain logic.

The paper: "if the response rate on a client exceeds a threshold, the clients can gradually send
GET requests to different traverser threads using an alternative hashing scheme. To prevent
hot-entry cache incoherency at this point, the client removes the hash metadata from the
request, bypassing the cache." The paragraph before says what the client monitors: "DPA-Store
handles buffer overflows on the server by monitoring response rates at the client side. If the
client does not receive a response in a timely fashion, it re-sends the request." So the signal
here is the share of a client's requests to a traverser that were not answered in time -- that
timed out at least once and were sent again (a packet the thread's full RX ring dropped, or one
that waited in it past the client's timeout). docs/dpastore.md ("Hot threads") says why not the
latency of the replies.

:class:`HotSwitch` is one client's state, shared by the threads of a client node (the paper's
"client" is a machine, as its 6 clients x 31 threads):

* per traverser, the replies from it and how many of those were late; every ``window`` replies
  from a traverser the client decides: a late share above ``threshold`` raises that traverser's
  *moved share* by ``step`` (at most ``1 - step``: the owner keeps a share of its GETs, so the
  client goes on measuring it); once no reply from it has been late, and its share has not
  changed, for one client timeout, the next reply in time lowers the share by ``step`` (a drop
  shows only a timeout later, so a faster way down would be blind);
* a GET whose owner has a moved share goes, for that share of the owner's GETs (a deterministic
  accumulator, not a random draw), to the key's *alternative* traverser: a second hash of the key
  and, with ``rehash = "key+client"``, of the client thread (:func:`alt_hash`: a hot key's moved
  GETs spread over many threads), never the owner, and not a traverser this client itself has a
  moved share for (then the GET stays with its owner);
* writes (INSERT, UPDATE, DELETE) and RANGEs never move: only the owner's insert-buffer check and
  hot-entry cache stay coherent for a key (one thread runs a key's writes one at a time).

A moved GET carries no cache hints, so the other thread neither reads nor fills its cache; it
reads the same tree and the same leaf insert buffers in DPA memory as the owner, so it returns
the newest value written (docs/dpastore.md, "Hot threads").
"""

from __future__ import annotations

from typing import NamedTuple

MASK = (1 << 64) - 1
REHASH = ("key+client", "key")


def alt_hash(key: int, salt: int) -> int:
    """The alternative hash: MurmurHash3's fmix64 of the key XOR a salt (independent of the
    port hash, splitmix64, and of the cache hints' salted fmix64)."""
    z = (key ^ (salt * 0xD6E8FEB86659FD93) ^ 0x5851F42D4C957F2D) & MASK
    z ^= z >> 33
    z = (z * 0xFF51AFD7ED558CCD) & MASK
    z ^= z >> 33
    z = (z * 0xC4CEB9FE1A85EC53) & MASK
    return z ^ (z >> 33)


class SwitchSettings(NamedTuple):
    threshold: float            # late share of a window above which the moved share rises
    window: int                 # replies from one traverser per decision
    step: float                 # moved share added or taken away per decision
    rehash: str                 # "key+client" or "key"

    @classmethod
    def of(cls, options: dict) -> "SwitchSettings":
        """From a client's system options (checked against their bounds by ``System.check_options``)."""
        return cls(float(options["hot_threshold"]), int(options["hot_window"]), float(options["hot_step"]),
                   options["hot_rehash"])


class HotSwitch:
    """One client node's per-traverser signal and moved shares, shared by its threads (the paper's
    "client" is a machine: 6 clients x 31 threads); see the module docstring. ``hold_ns``: how long
    a traverser's replies must have come in time before its moved share is lowered a step (the
    clients' timeout: a request dropped now shows as late only that much later)."""

    def __init__(self, traversers: int, settings: SwitchSettings, hold_ns: int):
        self.n = traversers
        self.s = settings
        self.hold_ns = hold_ns
        self.top = 1.0 - settings.step
        self.replies = [0] * traversers     # replies in the current window, per traverser
        self.late = [0] * traversers        # of which late (resent)
        self.share = [0.0] * traversers     # moved share of the traverser's GETs
        self.acc = [0.0] * traversers       # the share's accumulator: a GET moves when it passes 1
        self.calm = [0] * traversers        # since when no late reply and no change of the share

    def alternative(self, owner: int, key: int, salt: int = 0) -> int:
        """The key's alternative traverser (for the client thread ``salt`` with ``rehash =
        "key+client"``, else for every thread): never the owner."""
        a = alt_hash(key, salt if self.s.rehash == "key+client" else 0) % (self.n - 1)
        return a + 1 if a >= owner else a

    def target(self, owner: int, key: int, salt: int = 0) -> int:
        """The traverser a GET of ``key`` (owned by ``owner``) goes to now."""
        s = self.share[owner]
        if not s or self.n < 2:
            return owner
        acc = self.acc[owner] + s
        if acc < 1.0:
            self.acc[owner] = acc
            return owner
        alt = self.alternative(owner, key, salt)
        if self.share[alt]:                 # this client sees the alternative hot too: stay
            return owner
        self.acc[owner] = acc - 1.0
        return alt

    def record(self, t: int, late: bool, now: int) -> int:
        """A reply from traverser ``t`` at ``now``; ``late``: its request timed out at least once.
        +1 if it raised ``t``'s moved share, -1 if it lowered it, else 0."""
        self.replies[t] += 1
        if late:
            self.late[t] += 1
            self.calm[t] = now
        s = self.share[t]
        if self.replies[t] >= self.s.window:
            share = self.late[t] / self.replies[t]
            self.replies[t] = self.late[t] = 0
            if share > self.s.threshold and s < self.top:
                self.share[t] = min(self.top, s + self.s.step)
                self.calm[t] = now
                return 1
        if s and not late and now - self.calm[t] >= self.hold_ns:
            s -= self.s.step
            self.share[t] = s if s > 1e-9 else 0.0
            if not self.share[t]:
                self.acc[t] = 0.0
            self.calm[t] = now
            return -1
        return 0
