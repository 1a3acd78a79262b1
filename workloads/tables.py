"""What a transactional workload declares to a system: its tables and how their values are bytes.

Declared on the workloads floor (below the systems, which import it through
nodes/systems/txn.py) so that a workload such as SmallBank can describe its tables without
importing a system.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from workloads.properties import WorkloadError


class TableSpec(NamedTuple):
    """One table of a transactional workload."""

    name: str
    table_id: int          # FORD's table id (>= 1): with 2 memory nodes the primary is table_id % 2
    value_bytes: int       # the record's value size (FORD's MAX_ITEM_SIZE for the workload)
    buckets: int           # hash buckets (FORD's table json, scaled with the rows)
    rows: int              # records loaded


class Codec(NamedTuple):
    """How a table's values are bytes: ``encode(value) -> bytes`` of the table's value size,
    ``decode(bytes) -> value``."""

    encode: Callable[[Any], bytes]
    decode: Callable[[Any], Any]


RAW = Codec(lambda v: bytes(v), lambda b: bytes(b))


def check_int(workload: str, name: str, value, lo: int, hi: int | None = None) -> int:
    """A transactional workload's integer parameter ``name``, or one WorkloadError line."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(f"{workload}: {name} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise WorkloadError(f"{workload}: {name} = {value} must be {rng}")
    return value


def check_number(workload: str, name: str, value, lo: float, hi: float) -> float:
    """A transactional workload's number parameter ``name`` in ``lo..hi``, or one WorkloadError line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise WorkloadError(f"{workload}: {name} must be a number in {lo:g}..{hi:g}, got {value!r}")
    return float(value)


def check_mix(workload: str, frequencies, types: tuple) -> tuple[tuple, list]:
    """A transaction mix (one non-negative integer per type, summing to 100, as FORD's workgen
    array): ``(frequencies, workgen)``, ``workgen`` the 100 type names a uniform draw picks from."""
    freq = tuple(frequencies)
    if len(freq) != len(types) or any(isinstance(f, bool) or not isinstance(f, int) or f < 0 for f in freq):
        raise WorkloadError(f"{workload}: frequencies must be {len(types)} non-negative integers "
                            f"({', '.join(types)}), got {frequencies!r}")
    if sum(freq) != 100:
        raise WorkloadError(f"{workload}: frequencies must sum to 100 (FORD's workgen array), got {sum(freq)}")
    return freq, [t for t, f in zip(types, freq) for _ in range(f)]


class _MemoryItem:
    """A record a body declared in :func:`run_in_memory`: ``table``, ``key``, and after
    ``execute`` whether it was ``found`` and its ``value``."""

    __slots__ = ("table", "key", "found", "value")

    def __init__(self, table: str, key: int):
        self.table, self.key, self.found, self.value = table, int(key), False, None


class _MemoryAbort(Exception):
    pass


class _MemoryTxn:
    """The part of a transaction's interface the workloads' bodies use (``read``,
    ``read_for_update``, ``execute``, ``write``, ``abort``; nodes/systems/txn.py has the real one),
    against a plain dict, one transaction at a time: no verbs, no concurrency."""

    def __init__(self, state: dict):
        self.state = state
        self.items: list = []
        self.writes: list = []

    def read(self, table: str, key: int) -> _MemoryItem:
        it = _MemoryItem(table, key)
        self.items.append(it)
        return it

    read_for_update = read

    def execute(self):
        for it in self.items:
            v = self.state.get((it.table, it.key))
            it.found, it.value = v is not None, v
        return
        yield  # pragma: no cover  (a generator, as the real one: bodies ``yield from`` it)

    def write(self, item: _MemoryItem, value) -> None:
        self.writes.append((item, value))

    def abort(self, reason: str, detail: str = "") -> None:
        raise _MemoryAbort(reason)


def run_in_memory(state: dict, body, args) -> bool:
    """Run transaction ``body(tx, *args)`` of a workload against ``state`` ((table, key) -> value),
    one at a time, and apply its writes if it commits; True if it did. What a workload uses to
    bring its tables to the state a long run leaves them in before a rack loads them (SmallBank's
    ``warm_transactions``)."""
    tx = _MemoryTxn(state)
    try:
        for _ in body(tx, *args):       # nothing is ever awaited: execute() yields no event
            pass
    except _MemoryAbort:
        return False
    for it, value in tx.writes:
        state[(it.table, it.key)] = value
    return True


class TxnWorkload:
    """What every transactional workload shares (SmallBank, TATP): the attributes a rack reads of a
    workload, and :meth:`from_properties`, the scenario's ``[workload]`` keys (``PARAMETERS``, each
    a constructor argument) checked in one line. A subclass gives ``PARAMETERS``, ``LABEL`` (its name
    in errors), ``TYPES`` (the names of its transactions, as ``next`` draws them), ``tables()``, ``codecs()``, ``rows(table)``, ``recordcount``, ``describe()`` and
    ``next(rng) -> (name, body, args)``."""

    PARAMETERS: tuple = ()
    #: parameters every transactional workload takes besides its own: ``target``, transactions
    #: arriving per second (virtual, rack-wide; 0: closed loop, FORD's benchmark)
    COMMON = ("target",)
    LABEL = "transactional workload"
    transactional = True
    key_size = 8                        # FORD's keys are u64
    expected_new_keys = 0               # the rack sizes tables from the workload's own rows
    target = 0.0                        # 0: closed loop (FORD's benchmark); else an open loop's rate
    finite = False

    @classmethod
    def from_properties(cls, props: dict, where: str | None = None):
        """From a scenario's ``[workload]`` keys; an unknown key or a bad value is one
        :class:`WorkloadError` line naming ``where`` and the key."""
        where = where or cls.LABEL.lower()
        known = cls.PARAMETERS + cls.COMMON
        unknown = [k for k in props if k not in known]
        if unknown:
            raise WorkloadError(f"{where}.{unknown[0]}: unknown {cls.LABEL} parameter; the parameters are "
                                f"{', '.join(known)}")
        own = {k: v for k, v in props.items() if k not in cls.COMMON}
        try:
            w = cls(**own)
            if "target" in props:
                w.target = check_number(cls.LABEL.lower(), "target", props["target"], 0, 1e12)
        except WorkloadError as e:
            raise WorkloadError(f"{where}: {e}") from None
        return w

    def loop(self) -> str:
        """How transactions are issued, for ``describe()``: closed loop, or the open loop's rate."""
        return f", open loop {self.target:g} txn/s" if self.target > 0 else ""


#: The transactional workloads a scenario's ``[workload]`` may name (``preset`` or ``kind``), as
#: ``module:Class`` targets (imported when used).
TXN_WORKLOADS = {"smallbank": "workloads.smallbank:SmallBank", "tatp": "workloads.tatp:Tatp"}


def txn_workload_class(name: str):
    """The class of the transactional workload ``name`` (a key of :data:`TXN_WORKLOADS`)."""
    import importlib
    module, cls = TXN_WORKLOADS[name].split(":")
    return getattr(importlib.import_module(module), cls)
