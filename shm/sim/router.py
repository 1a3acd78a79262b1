"""One inbox, several listeners: the kinds of message a node process receives, and their dispatch.

A node process has one ``env.on_message`` (the clock table's inbox, shm/sim/sync.py), but
several things talk to it: the manager (start a step, drain at the end), verbs of other processes (a SEND arriving
at one of its QPs, shm/verbs.py), datagrams of other processes (shm/udp.py) and the end of the
plan (server actors stop). Each message's first word is its kind; :class:`Router` hands it to the
listener registered for that kind and refuses an unknown kind in one line, so a stray message
is a clear error rather than another listener misreading it.

The kinds are spread apart so that a new one cannot collide with an old one by accident.
"""

from __future__ import annotations

from typing import Callable

MSG_START = 1          # manager -> compute node: start a plan step (nodes/manager.py)
MSG_DONE = 2           # compute node -> manager: a step is done on this node (or, after the plan, drained)
MSG_DRAIN = 3          # manager -> compute node: the plan is over; answer DONE once no operation is in flight
MSG_VERBS_SEND = 11    # a SEND for a QP of this process (shm/verbs.py)
MSG_UDP = 21           # a datagram for a queue of this process (shm/udp.py)
MSG_UDP_COPY = 22      # a mirror copy of a datagram, for the rule's mirror queue here
MSG_STOP = 31          # the plan is over: server actors that poll end (nodes/actors.py, ctx.stopped)


class Router:
    """``env.on_message`` of a node process: dispatch by the message's first word."""

    def __init__(self, name: str):
        self.name = name
        self.handlers: dict[int, Callable[[int, tuple], None]] = {}

    def on(self, kind: int, handler: Callable[[int, tuple], None]) -> None:
        self.handlers[kind] = handler

    def __call__(self, src: int, payload: tuple) -> None:
        kind = int(payload[0]) if payload else -1
        handler = self.handlers.get(kind)
        if handler is None:
            raise ValueError(f"{self.name}: message of unknown kind {kind} from process {src}: {tuple(payload)!r}")
        handler(src, payload)
