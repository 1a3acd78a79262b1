"""What a rack measures and reports, declared once: operation kinds, node states and counters.

Five modules on three floors use these names: a workload draws operation codes
(``workloads/generators.py``, ``stress.py``, ``traces.py``); a compute node dispatches on them,
records each operation under its kind and says which state it is in (``nodes/compute.py``); the
stats plane lays out one latency record per kind and one header word per counter
(``cluster/stats.py``); a node process publishes the counters with its heartbeat
(``cluster/node_main.py``); the results (``cluster/results.py``) and the dashboard
(``cluster/dashboard.py``) read them back by name. Each of those files used to hold its own copy
(op codes in five, node states in two, a counter in five), so adding a counter meant five edits
and one forgotten edit a silent 0. Now they all derive from the tuples below.

Why in ``shm``: the declaration must sit on a floor that every user may import. ``workloads`` may
import neither ``nodes`` nor ``cluster``, and ``shm`` is the bottom floor, which everything
above may use. Like ``shm/messages.py`` this module is a leaf of the standard library (it imports
nothing of the project and no third-party package), so a workload importing it drags in no
shared memory, numba or NIC model: it is vocabulary, not behaviour.

**Operation kinds.** A workload's operation code and the stats plane's kind are one concept, so
they are declared once: the code of a kind is its index in ``OP_KINDS``. The first five are
YCSB's operations in the order of its ``CoreWorkload`` (read, update, insert, scan,
read-modify-write); ``delete`` is issued by the stress workload and the Twitter traces. The codes
are a layout, not only names: they index the stats plane's per-kind records, the workloads'
``int8`` operation arrays and the results' per-kind figures, and numba kernels freeze them when
they compile (``workloads/generators.py``), so a code never changes: a new kind is appended, and
is a new stats-plane layout (``cluster/stats.py`` refuses to start until its layout says so). The
names a workload's *properties* use for its mix ("get", a trace's "gets", "cas") are that
workload's own, mapped to these codes in that workload (``stress.MIX_OPS``, ``traces.TRACE_OPS``).
``OP_KINDS`` are KV operations and transaction outcomes; the NIC's opcodes (``shm/nic.py``) are another thing.

**Node states.** What a process's stats slot says it is doing; the dashboard adds "dead" (the
supervisor saw the process die without publishing a last state), which no process publishes.

**Counters.** Totals (or, for a ``level``, the value now) a process publishes in the header of its
stats slot beside the heartbeat. Every counter is an integer >= 0 and is additive, which is how
it is summed: a node's value is the sum over what produces it there (``source``), and the rack's
value is the sum over the nodes. ``source`` says who produces it:

* ``"memory"``: a memory node's host memory (``shm/fabric.py``'s occupancy);
* ``"clients"``: the compute node's KV clients, the field of the same name in their
  ``statistics()`` records, summed over them (0 for a record without it): a new counter of this
  source needs no other edit (``nodes/compute.py:ComputeNode.client_counters``);
* ``"actors"``: the devices the node's server actors run on (cores, DPA threads, DMA engine, UDP
  queues, DMA rings), read in ``cluster/node_main.py:_device_counters``: a new counter of this
  source needs the line there that reads its value.

``summary`` says whether the results' ``summary`` carries the rack's total (every counter is in
each node's row of the results whatever it says). The stats plane, the results' node rows and
the dashboard derive from this tuple: a counter added here is published, stored, exported and
shown (``tests/test_telemetry.py`` adds one and checks). The stats slot's header has room for 24
counters (``cluster/stats.py``: ``SLOT_HDR_WORDS``); a 25th is a new layout.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "OP_KINDS", "N_KINDS", "KIND_INDEX", "YCSB_OPS",
    "OP_READ", "OP_UPDATE", "OP_INSERT", "OP_SCAN", "OP_RMW", "OP_DELETE", "OP_COMMIT", "OP_ABORT", "TXN_KINDS",
    "STATE_NAMES", "STATE_EMPTY", "STATE_STARTING", "STATE_LOADING", "STATE_RUNNING", "STATE_DONE",
    "STATE_FAILED",
    "Counter", "COUNTERS", "COUNTER_NAMES", "SOURCES", "counters_of",
]

# -- operation kinds ----------------------------------------------------------------------------

#: Operation kinds; a kind's code is its index (never reordered: see the module docstring). The
#: first six are KV operations; ``commit`` and ``abort`` are a transactional workload's attempts
#: (nodes/systems/txn.py): a committed transaction (recorded ok, its latency from begin to commit)
#: and an aborted attempt (recorded as a failure), so the stats plane, the results and the dashboard
#: count committed and aborted transactions per second, the abort rate and committed latencies
#: with the machinery every kind has. A KV workload never records them (results leave out kinds
#: without operations, so a KV run's rows are what they were).
OP_KINDS = ("read", "update", "insert", "scan", "rmw", "delete", "commit", "abort")
N_KINDS = len(OP_KINDS)
KIND_INDEX = {k: i for i, k in enumerate(OP_KINDS)}
OP_READ = KIND_INDEX["read"]
OP_UPDATE = KIND_INDEX["update"]
OP_INSERT = KIND_INDEX["insert"]
OP_SCAN = KIND_INDEX["scan"]
OP_RMW = KIND_INDEX["rmw"]
OP_DELETE = KIND_INDEX["delete"]
OP_COMMIT = KIND_INDEX["commit"]
OP_ABORT = KIND_INDEX["abort"]
#: The kinds a transactional workload records.
TXN_KINDS = ("commit", "abort")
#: The operations of YCSB's CoreWorkload, codes 0..4 (``workloads/ycsb.py`` draws these).
YCSB_OPS = OP_KINDS[:OP_RMW + 1]

# -- node states --------------------------------------------------------------------------------

#: A process's states as its stats slot publishes them; a state's code is its index.
#: empty: nobody has called ``begin`` yet.
STATE_NAMES = ("empty", "starting", "loading", "running", "done", "failed")
STATE_EMPTY, STATE_STARTING, STATE_LOADING, STATE_RUNNING, STATE_DONE, STATE_FAILED = range(len(STATE_NAMES))

# -- counters -----------------------------------------------------------------------------------

#: Who produces a counter on a node (see the module docstring).
SOURCES = ("memory", "clients", "actors", "fabric")


class Counter(NamedTuple):
    """One counter of a stats slot's header."""

    name: str                       # the word's name: a key of heartbeat(counters=...), a results field
    unit: str                       # what one of it is: "bytes", "ns" (virtual), or what it counts
    source: str                     # who produces it on a node (SOURCES)
    meaning: str
    summary: bool = False           # the results' summary carries the rack's total
    level: bool = False             # a value now (a queue's depth), not a total since the process began


#: The counters, in the order of their words in a stats slot's header (append; never reorder).
COUNTERS = (
    Counter("mem_used", "bytes", "memory", "bytes carved from the node's host memory", summary=True),
    Counter("mem_capacity", "bytes", "memory", "bytes of host memory the node has", summary=True),
    Counter("bytes_reclaimed", "bytes", "clients", "bytes the node's clients reclaimed", summary=True),
    Counter("blocks_reused", "blocks", "clients", "blocks the node's clients reused", summary=True),
    Counter("torn_reads", "reads", "clients",
            "multi-line READs the node's clients found torn (a WRITE met halfway) and read again", summary=True),
    # nodes that run server actors (docs/devices.md, "Observability")
    Counter("cpu_cores", "cores", "actors",
            "modelled cores the node's actors run on (a DPU's Arm cores, a DPA's cores)", level=True),
    Counter("cpu_busy_ns", "ns", "actors", "virtual ns those cores were busy, summed over the cores"),
    Counter("dpa_threads", "threads", "actors", "DPA hardware threads started (DPA nodes)"),
    Counter("dpa_stall_ns", "ns", "actors", "virtual ns DPA threads waited off their cores (memory, DMA)"),
    Counter("dma_bytes", "bytes", "actors", "bytes the node's DMA engine moved to or from its host"),
    Counter("rx_queued", "datagrams", "actors", "datagrams waiting in the node's RX queues", level=True),
    Counter("udp_dropped", "datagrams", "actors", "datagrams the node's queues dropped (full ring, or overrun)"),
    Counter("udp_resends", "requests", "actors", "requests the node's processes sent again after a timeout"),
    Counter("ring_depth", "records", "actors",
            "records waiting in the DMA rings the node's actors serve (ctx.rings)", level=True),
    # what the node's verbs saw of the windows a race needs (shm.fabric.WINDOW_COUNTERS; dmrack check)
    Counter("cas_raced", "CASes", "fabric", "CASes the node's verbs lost to a race (their compare failed)",
            summary=True),
    Counter("chaos_delays", "delays", "fabric",
            "delays chaos (the profile's [chaos] table) drew for the node's verbs and coroutines", summary=True),
)
COUNTER_NAMES = tuple(c.name for c in COUNTERS)


def counters_of(source: str) -> tuple[str, ...]:
    """The names of the counters ``source`` produces, in header order."""
    if source not in SOURCES:
        raise ValueError(f"unknown counter source {source!r}; sources are {', '.join(SOURCES)}")
    return tuple(c.name for c in COUNTERS if c.source == source)
