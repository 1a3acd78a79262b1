"""The one KV interface every system in dmrack implements, and the contract of a system.

Workloads, the dashboard, the correctness checker and the benchmarks only ever see this interface,
which is what lets them run unchanged on every design.

A *system* has two halves:

* :meth:`System.setup` runs once, in the process that owns the rack, before any node process is
  spawned. It carves the system's remote structures (directories, tables, trees) out of the
  memory nodes with ``fabric.allocate`` and initialises them, and returns a *layout*: a small,
  picklable dict (global addresses, sizes) that every node process receives.
* :meth:`System.client` runs in a compute-node process, once per modelled CPU thread. The client
  it returns is shared by that thread's coroutines; per-thread caches (a directory cache, an
  allocation chunk) live in it.

Client operations are generators that run inside a coroutine (a process of the event core) and
issue verbs through the coroutine's :class:`shm.coro.VerbBatch` passed as ``co``::

    value = yield from client.get(co, key)         # bytes or None
    ok = yield from client.insert(co, key, value)  # False if the key exists

Keys and values are ``bytes``. Operations a design does not offer raise
:class:`UnsupportedOperation` (the workload layer reports it instead of crashing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, NamedTuple

# Declared on the lowest floor (shm/messages.py), where shm/rpc.py can tell a system's failure from
# a handler's error; re-exported here, where systems and plugins import them.
from shm.messages import SystemError_, SystemGaveUp, one_line  # noqa: F401  (re-exports)
# SystemError_ is SystemGaveUp's name before issue 42, kept for systems and plugins that import it


class UnsupportedOperation(NotImplementedError):
    """The system does not offer this operation (e.g. scans on a hash table)."""


@dataclass(frozen=True)
class Option:
    """One option of a system, settable in a rack spec's ``[system]`` table."""

    name: str
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    multiple_of: int | None = None     # an integer option's step (e.g. an allocation granule)

    def check(self, value, where: str):
        """Return ``value`` converted to the default's type, or raise ValueError naming ``where``."""
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{where}: {self.name} must be true or false, got {value!r}")
            return value
        if kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and
                                                                                  not float(value).is_integer()):
                raise ValueError(f"{where}: {self.name} must be {'an integer' if kind is int else 'a number'}, "
                                 f"got {value!r}")
            value = kind(value)
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{where}: {self.name} = {value} is below the minimum {self.minimum:g}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{where}: {self.name} = {value} is above the maximum {self.maximum:g}")
            if self.multiple_of and value % self.multiple_of:
                raise ValueError(f"{where}: {self.name} = {value} is not a multiple of {self.multiple_of}")
            return value
        if not isinstance(value, kind):
            raise ValueError(f"{where}: {self.name} must be a {kind.__name__}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{where}: {self.name} = {value!r} is not one of {', '.join(map(str, self.choices))}")
        return value


class KVClient:
    """One modelled thread's handle on a system. Subclasses override the generators they offer."""

    def get(self, co, key: bytes) -> Generator[Any, Any, bytes | None]:
        raise UnsupportedOperation(f"{type(self).__name__} has no get")
        yield  # pragma: no cover

    def insert(self, co, key: bytes, value: bytes) -> Generator[Any, Any, bool]:
        """Add a new key; False (and nothing changed) if it exists."""
        raise UnsupportedOperation(f"{type(self).__name__} has no insert")
        yield  # pragma: no cover

    def update(self, co, key: bytes, value: bytes) -> Generator[Any, Any, bool]:
        """Replace the value of an existing key; False (and nothing changed) if it is missing."""
        raise UnsupportedOperation(f"{type(self).__name__} has no update")
        yield  # pragma: no cover

    def put(self, co, key: bytes, value: bytes) -> Generator[Any, Any, None]:
        """Insert or update. Concurrent inserts and deletes of the same key can make each attempt
        miss (update: missing; insert: exists), so it alternates until one of them takes effect."""
        while True:
            if (yield from self.update(co, key, value)):
                return
            if (yield from self.insert(co, key, value)):
                return

    def delete(self, co, key: bytes) -> Generator[Any, Any, bool]:
        """Remove a key; False if it was missing."""
        raise UnsupportedOperation(f"{type(self).__name__} has no delete")
        yield  # pragma: no cover

    def scan(self, co, start: bytes, count: int) -> Generator[Any, Any, list]:
        """Up to ``count`` (key, value) pairs with key >= start, in key order."""
        raise UnsupportedOperation(f"{type(self).__name__} has no scan")
        yield  # pragma: no cover

    def statistics(self):
        """An immutable record of this client's counters (retries, cache hits, ...), or None. Every
        numeric field is summed over a compute node's clients (:func:`node_statistics`) and goes into
        the run's results, per node and summed, and onto the dashboard, so fields should be counts
        and totals that add up (docs/adding-a-system.md, "Statistics")."""
        return None


#: Fields of a statistics record that describe what a compute node's threads *share* (its one
#: index cache), not what one thread did: every client of the node reports the same figure, so a
#: node's value is the largest of its clients', not their sum (``memory_use`` reads it the same way).
#: A node-wide figure under another name goes in one client's record only, 0 in the others
#: (FlexKV's ``node_*`` fields), so that sums stay right.
NODE_SHARED_FIELDS = ("cache_bytes",)


def statistics_fields(record) -> dict:
    """The numeric fields of a ``statistics()`` record, by name in the record's order: ints and
    finite floats (numpy scalars included); bools, strings, tuples and nested records are left out.
    A ``NamedTuple`` (``_asdict``) or a dataclass; anything else (None) has none."""
    import dataclasses
    import numbers
    if record is None:
        return {}
    if hasattr(record, "_asdict"):
        items = record._asdict().items()
    elif dataclasses.is_dataclass(record) and not isinstance(record, type):
        items = ((f.name, getattr(record, f.name)) for f in dataclasses.fields(record))
    else:
        return {}
    out = {}
    for name, v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            continue
        if isinstance(v, numbers.Integral):
            out[name] = int(v)
        elif v == v and abs(v) != float("inf"):
            out[name] = float(v)
    return out


def node_statistics(records) -> dict:
    """One compute node's figures from its clients' ``statistics()`` records: every numeric field
    (:func:`statistics_fields`) summed over the records, ``NODE_SHARED_FIELDS`` the largest; in the
    order the fields first appear. Records of different types merge by field name."""
    out: dict = {}
    for rec in records:
        for name, v in statistics_fields(rec).items():
            if name not in out:
                out[name] = v
            elif name in NODE_SHARED_FIELDS:
                out[name] = max(out[name], v)
            else:
                out[name] += v
    return out


class MemoryUse(NamedTuple):
    """What an index occupies (Dolphin's Table II): bytes of index cache on the compute nodes and
    bytes of memory-node memory holding the index and its data."""

    cache_bytes: int       # summed over compute nodes (a node's threads share one cache)
    memory_bytes: int      # setup structures plus the blocks clients allocated and still link


class System:
    """A design that runs on the rack (see the module docstring). Subclasses set the class
    attributes and implement :meth:`setup` and :meth:`client`."""

    name: str = ""
    description: str = ""
    paper: str = ""                      # where it comes from
    roles: tuple[str, ...] = ("compute", "memory")
    options: tuple[Option, ...] = ()
    supports_scan: bool = False
    #: False: a key-value store behind the KV interface (this module). True: a transactional design
    #: behind nodes/systems/txn.py (``TxnSystem`` sets it): the rack drives it with a transactional
    #: workload (SmallBank) and ``dmrack check`` runs the transactional suite
    #: (cluster/correctness/txn_check.py) instead of the KV one. ``nodes.systems.is_transactional``
    #: and ``kv_system_names`` read it: the one way to tell the two kinds apart.
    transactional: bool = False
    smart_defaults: dict = {}            # SMART switches it runs with unless the rack's [smart] says otherwise
    #: Optional: a classmethod ``bulk_load(fabric, layout, pairs)`` that writes ``pairs`` (an
    #: iterable of key bytes, value bytes, consumed once: a system that can place keys one at a
    #: time should, so a large load holds no list) straight into the memory nodes of a freshly
    #: set-up, empty structure, as
    #: if they had been inserted (a load step with ``bulk = true``); None: the system has none.
    #: It runs in one compute node's process before any client runs, takes memory with
    #: ``fabric.allocate`` and must leave exactly what the clients' lookups expect.
    bulk_load = None
    #: Server actors per node role (nodes/actors.py): ``{"memory": fn, "compute": fn}``, each
    #: ``fn(ctx: nodes.actors.NodeContext)`` called once per node of that role before the
    #: scenario starts and returning the generators to run there as actors. Empty (the default):
    #: no actors, memory nodes stay passive. Actors on memory nodes need ``[memory] cores >= 1``.
    servers: dict = {}
    #: True: the rack exposes every compute node's memory to one-sided verbs (``Fabric.expose``, as
    #: it does for memory nodes) before ``setup``, so setup can carve regions on compute nodes
    #: (``fabric.allocate("cn1", n)``) that other nodes READ, WRITE and CAS with ``gaddr(cn, off)``:
    #: FlexKV's manager READs access counters and WRITEs staging maps there. False (the default):
    #: compute nodes expose nothing, as before.
    expose_compute: bool = False
    #: Which nodes run the system's KV clients (the workloads, histories, latency): ``"compute"``
    #: (the default: clients on the compute nodes' threads) or ``"client"`` (the ``[client]`` nodes,
    #: ``cl0``..: *active clients* that reach a server over the network, each with ``[compute]``
    #: threads x coroutines; the compute nodes are then the servers' hosts).
    client_role: str = "compute"
    #: Rack tables the system needs to run at all (a profile with a DPA, the devices it serves from),
    #: e.g. ``{"rack": {"profile": "bf3"}, "dpa": {"hosts": ["cn0"]}}``: racks the project builds
    #: for it (the conformance suite, ``dmrack check``) merge them under their own tables. A scenario
    #: file is taken as written.
    rack_tables: dict = {}
    #: Optional: a classmethod ``steering(spec) -> [shm.steering.SteerRule]``, NIC steering rules
    #: the system's service needs, each naming the ``node`` whose NIC applies it (after the file's
    #: ``[[steer]]``; docs/devices.md). ``cluster.spec.SteerSpec(node, port, port_hi, target,
    #: mirror)``, which plugins used before, still builds one.
    steering = None
    #: Optional: a classmethod ``rx_queues(spec, node) -> [queue ids] | None``, the RX queues a node
    #: has instead of its one default ``<node>.rx`` (named ``<node>.<name>``): e.g. one per host
    #: application thread, as a NIC's RSS queues, which the system's steering rules then target.
    rx_queues = None

    @classmethod
    def check_options(cls, given: dict, where: str) -> dict:
        """Every option with its default filled in; ValueError naming ``where`` and the key."""
        known = {o.name: o for o in cls.options}
        for k in given:
            if k not in known:
                raise ValueError(f"{where}: unknown option {k!r} for system {cls.name!r}; "
                                 f"it has {', '.join(sorted(known)) or 'none'}")
        return {name: (o.check(given[name], where) if name in given else o.default) for name, o in known.items()}

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """Bytes of memory-node memory needed to hold ``capacity`` records of this key and value
        size (``options`` filled by check_options): the rack spec refuses a rack whose memory
        nodes hold less, before anything is built, instead of failing in ``setup`` or halfway
        through the load. It must never overestimate (a rack that would run must not be refused),
        so the default is the records' raw bytes, which any design stores somewhere; a system
        that knows its layout (table, index, block headers, allocation chunks) overrides it with
        a tighter bound."""
        return int(capacity) * (int(key_bytes) + int(value_bytes))

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        """Refuse options that contradict the rack (``spec``: a ``cluster.spec.RackSpec``, the
        options filled by check_options) with a ValueError of one line naming the option, e.g.
        more proxy threads than a compute node has threads. The default accepts every rack."""

    @classmethod
    def heavy_stress(cls, shape):
        """The ``dmrack check --heavy`` stress for this system: ``shape`` (a
        ``cluster.correctness.shapes.StressShape``: keys, value bytes, threads, coroutines, ms per
        phase) as is, or ``shape._replace(...)`` for a design whose limits or weak spots call for
        another one (a smaller largest value, a key count that fills one node, ...)."""
        return shape

    @classmethod
    def check_stress(cls, shape, options: dict | None = None):
        """The ``dmrack check`` stress for this system with its ``options`` without ``--heavy``
        (the ``--quick`` or the default shape; ``--heavy``: :meth:`heavy_stress`): ``shape`` as
        is, or replaced. A shape's
        ``options`` are system options the stress (and the conformance checks that reproduce it)
        runs with when the check was given none of them (``cluster.correctness.shapes.stress_options``),
        for a design whose weak spots so few keys do not reach with its default options (ROLEX's
        retraining)."""
        return shape

    @classmethod
    def node_failed(cls, fabric, layout: dict, node: int) -> None:
        """Compute node ``node`` (a fabric index) has died (its process is gone): release what it
        held that the rest of the rack waits for. The default clears its epoch announcements
        (``layout["epochs"]``, nodes/systems/lib/reclaim.py), so that the blocks its unfinished
        operations held back come back; a system with more per-node state overrides it and calls
        this one. Runs in the rack's owner process."""
        epochs = layout.get("epochs") if isinstance(layout, dict) else None
        if epochs:
            from nodes.systems.lib.reclaim import clear_row
            clear_row(fabric, epochs, node)

    @classmethod
    def node_restarted(cls, fabric, layout: dict, node: int) -> None:
        """Compute node ``node`` is about to come back (a ``restart`` step): its memory is already
        what ``setup`` left there, its new process starts next. A system that told the others about
        the death (``node_failed``) tells them here that the node is back. Runs in the rack's owner
        process. The default does nothing."""

    @classmethod
    def memory_use(cls, layout: dict, stats_by_node: dict) -> MemoryUse | None:
        """Bytes of compute-node cache and of memory-node memory the index uses now, from the
        layout and the clients' ``statistics()`` records grouped by compute node (``{node: [record,
        ...]}``). The default reads the convention of the tree indexes: a record's ``cache_bytes``
        is its node's shared index cache (so one per node counts), ``memory_bytes`` the bytes of
        the blocks that client allocated and has not unlinked (``ChunkAllocator.used_bytes``), and
        ``layout["setup_bytes"]`` what ``setup`` carved. None if the records do not say."""
        total_cache = total_mem = 0
        seen = False
        for records in stats_by_node.values():
            records = [r for r in records if r is not None and hasattr(r, "memory_bytes")]
            if not records:
                continue
            seen = True
            total_cache += max(getattr(r, "cache_bytes", 0) for r in records)
            total_mem += sum(r.memory_bytes for r in records)
        if not seen:
            return None
        return MemoryUse(int(total_cache), int(total_mem + (layout or {}).get("setup_bytes", 0)))

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        """Build the remote structures for about ``capacity`` keys; return the picklable layout."""
        raise NotImplementedError

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> KVClient:
        # ``options`` come from a rack spec already checked and filled by check_options; a system
        # used directly from Python may call check_options itself.
        """A client for one modelled thread (``shm.coro.RdmaThread``) of a compute node."""
        raise NotImplementedError
