"""State a compute node's threads share: one object per (compute node, structure, kind).

Why a library module: ``System.client`` runs once per modelled thread, but much of what a design
keeps on a compute node is the node's, not the thread's: Sherman's index cache and local lock
table, SMART-ART's and Dolphin's radix caches, ROLEX's learned cache. Every thread of the node must
get the *same* object, made once, and

* a rack of processes runs each compute node in a process of its own, but a co-located rack
  (``dmrack run --colocated``, the conformance suite, the experiments) runs every compute node in
  one process, so a module-level singleton would be shared by nodes that must not share it;
* one process can build racks one after another (tests, sweeps), so the object must go when its
  node does.

So :func:`shared` keys the objects by the node's ``shm.coro.NodeRdma`` (``thread.owner`` of the
``thread`` a client is given; one per compute node per rack, held weakly: a finished rack's
objects go with it), then by a ``structure`` (e.g. the tree's root address, so two structures of
one node do not share) and a ``kind`` (the name of the object). Coroutines of a node interleave
only at ``yield``, so a shared object needs no lock while a client uses it between two yields.
"""

from __future__ import annotations

import weakref
from typing import Callable, TypeVar

T = TypeVar("T")

_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shared(owner, structure, kind: str, factory: Callable[[], T]) -> T:
    """The object ``factory()`` made once per (``owner``: the compute node's ``NodeRdma``, i.e.
    ``thread.owner``; ``structure``: anything hashable naming the structure, e.g. a root word's
    address; ``kind``): the first client of the node to ask makes it, every later one gets it."""
    per_owner = _SHARED.get(owner)
    if per_owner is None:
        per_owner = _SHARED[owner] = {}
    key = (structure, kind)
    obj = per_owner.get(key)
    if obj is None:
        obj = per_owner[key] = factory()
    return obj
