"""A NIC steering rule: the one type that says which RX queue a datagram to a port lands in.

A rule is plain data, declared once here and used at every level that speaks of steering:

* the rack spec's ``[[steer]]`` tables (``cluster/spec.py`` parses each into a :class:`SteerRule`
  naming the ``node`` whose NIC applies it, its target a node on that card or one of its queues);
* a system's ``steering(spec)`` classmethod (``nodes/systems/api.py``), which returns the rules its
  service needs, built the same way;
* the datagram path (``shm/udp.py``, ``UdpNet.set_rules``), which takes a node's ordered list of
  rules whose targets are queue ids; ``nodes/actors.py:steer_rules`` turns the rack's rules into
  those lists by naming each target node's queues.

There was a second type for the rack's rules (``cluster.spec.SteerSpec``, with a ``node`` field)
that the systems imported from the top floor; one type with an optional ``node`` replaces both, and
it lives on the lowest floor, standard library only, so that the spec parser, the systems and the
fabric all import it downward without pulling in the NIC model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SteerRule"]


@dataclass(frozen=True)
class SteerRule:
    """Datagrams to ``port`` (or ``port``..``port_hi``, inclusive) go to queue ``target``; with a
    tuple of targets one is picked as ``spread`` says. ``mirror``: a queue that also gets a copy.

    ``node``: the node whose NIC applies the rule, for a rack's rules (the spec's ``[[steer]]``, a
    system's ``steering``), where ``target`` and ``mirror`` may also name a node on that card (then
    its queues); ``None`` in a node's own list given to ``UdpNet.set_rules``."""

    port: int
    target: str | tuple[str, ...]
    port_hi: int | None = None
    mirror: str | None = None
    # how a tuple of targets is chosen: "flow" (a hash of source node, source port and destination
    # port, as RSS) or "port" (target (port - self.port) mod len: a port per queue, as DPA-Store's
    # clients pick a DPA thread by the key's port)
    spread: str = "flow"
    node: str | None = None

    def matches(self, port: int) -> bool:
        hi = self.port if self.port_hi is None else self.port_hi
        return self.port <= port <= hi

    def targets(self) -> tuple[str, ...]:
        return (self.target,) if isinstance(self.target, str) else tuple(self.target)
