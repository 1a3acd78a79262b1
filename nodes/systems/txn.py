"""The transactional interface: what a distributed-transaction design offers, beside the KV one.

The KV interface (nodes/systems/api.py) has one operation per call. A transaction reads and writes
several records of named tables and either all of its writes take effect or none does; a design
such as FORD (FAST'22) fetches a transaction's records in one batch of one-sided verbs, runs the
application's logic on the compute node, then validates and commits. So the interface is built
around a *transaction body*: a generator the coordinator runs inside a coroutine::

    def send_payment(tx, a, b):
        src = tx.read_for_update("checking", a)     # declare: the read-write set
        dst = tx.read_for_update("checking", b)
        yield from tx.execute()                      # fetch (and lock) them: one stage
        if src.value < 500:
            tx.abort("user")                         # the application's own abort
        tx.write(src, src.value - 500)
        tx.write(dst, dst.value + 500)

    outcome = yield from client.run(co, send_payment, a, b)    # TxnOutcome(committed, reason)

``read``/``read_for_update`` (and ``insert``/``delete`` for designs and workloads that need them)
only *declare* a record; ``yield from tx.execute()`` fetches everything declared since the last
stage, as FORD's ``TxExe`` does (its read-only set by READs, its read-write set by CAS-lock +
READ), and returns the items. A body may run several stages (TATP's later steps depend on what
the first read). Any abort (a lock held by another transaction, a failed validation, a missing
record, the body's ``tx.abort``) raises :class:`TxnAborted` through the body; ``run`` catches it,
releases what the attempt held and returns the outcome with the reason. An aborted attempt is
not retried unless the caller asks (``retries``), as in FORD's benchmarks, which draw a new
transaction after an abort.

Values are the record's value bytes; the workload layer encodes them (SmallBank: signed 64-bit
integer cents, so that the conserved total is exact). ``Item.value`` is that workload's decoding
once the stage has run: ``TxnClient`` takes a ``codec`` (bytes <-> value) per table.

Every attempt can be recorded (``client.history``: a list, a shared ``nodes.txn_history.TxnHistoryWriter``
or None) as a :class:`TxnRecord`: the versions it read and the versions it installed, which is what
the serializability checker (cluster/correctness/serializability.py) builds its dependency graph from.
"""

from __future__ import annotations

from typing import Any, Generator, NamedTuple

from nodes.systems.api import System, UnsupportedOperation  # noqa: F401  (re-export)
from nodes.txn_history import ABORT_REASONS, TxnRecord  # noqa: F401  (re-exports: declared with the history rows)
from shm.failpoints import ClientCrash
from workloads.tables import RAW, Codec, TableSpec  # noqa: F401  (re-exports: declared on the workloads floor)

class TxnAborted(Exception):
    """Raised through a transaction body when its attempt aborts; ``reason`` is one of
    :data:`ABORT_REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        if reason not in ABORT_REASONS:
            raise ValueError(f"abort reason {reason!r} is not one of {', '.join(ABORT_REASONS)}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class TxnOutcome(NamedTuple):
    committed: bool
    reason: str = ""       # "" when committed, else one of ABORT_REASONS
    attempts: int = 1
    result: Any = None     # what the body returned (SmallBank: the cents it created)


class TxnStats(NamedTuple):
    """A coordinator's counters (summed over a node's clients, into results and the dashboard)."""

    attempts: int = 0
    commits: int = 0
    aborts: int = 0
    abort_lock: int = 0
    abort_validation: int = 0
    abort_not_found: int = 0
    abort_invisible: int = 0
    abort_user: int = 0
    retries: int = 0               # attempts re-run after an abort because the caller asked (run(retries=))
    invisible_rereads: int = 0     # lock-word re-READs of a record whose commit was in flight
    cache_hits: int = 0            # records fetched through the address cache (no bucket READ)
    bucket_reads: int = 0
    commit_latency_ns: int = 0     # summed over committed attempts (begin to commit return)


class Item:
    """A record a transaction declared: its table and key, and once its stage ran, ``found``,
    ``value`` (the table codec's decoding), ``version`` (as read). ``write`` sets ``new_value``."""

    __slots__ = ("table", "key", "mode", "found", "value", "version", "new_value", "raw", "state")

    READ, UPDATE, INSERT, DELETE = "read", "update", "insert", "delete"

    def __init__(self, table: str, key: int, mode: str):
        self.table = table
        self.key = int(key)
        self.mode = mode
        self.found = False
        self.value = None
        self.version = None
        self.new_value = None
        self.raw = None         # the value bytes as read
        self.state = None       # the design's per-item state (address, lock taken, ...)

    @property
    def writable(self) -> bool:
        return self.mode != Item.READ

    def __repr__(self) -> str:
        return f"Item({self.table}[{self.key}] {self.mode} v={self.version} value={self.value!r})"


class Txn:
    """One attempt of a transaction, handed to its body. Designs subclass it and implement
    :meth:`_execute_stage`, :meth:`_commit` and :meth:`_abort`; the declaring methods are common."""

    def __init__(self, client: "TxnClient", co, txn_id: int, name: str):
        self.client = client
        self.co = co
        self.txn_id = txn_id
        self.name = name
        self.items: list[Item] = []
        self._staged: list[Item] = []
        self.aborted: str | None = None
        self.installed: list = []     # (table, key, version, value bytes) the commit wrote
        self.start_ns = co.env.now
        self.result = None            # what the body returned, once it has

    # -- declaring ---------------------------------------------------------------------------
    def _declare(self, table: str, key: int, mode: str) -> Item:
        if table not in self.client.codecs:
            raise KeyError(f"no table {table!r}; tables: {', '.join(self.client.codecs)}")
        for it in self.items:
            if it.table == table and it.key == int(key):
                raise ValueError(f"{table}[{key}] declared twice in one transaction")
        it = Item(table, key, mode)
        self.items.append(it)
        self._staged.append(it)
        return it

    def read(self, table: str, key: int) -> Item:
        """Declare a record of the read-only set."""
        return self._declare(table, key, Item.READ)

    def read_for_update(self, table: str, key: int) -> Item:
        """Declare a record of the read-write set (the design locks it)."""
        return self._declare(table, key, Item.UPDATE)

    def insert(self, table: str, key: int) -> Item:
        """Declare a record to insert (its value set with ``write``)."""
        return self._declare(table, key, Item.INSERT)

    def delete(self, table: str, key: int) -> Item:
        """Declare a record to delete."""
        return self._declare(table, key, Item.DELETE)

    def write(self, item: Item, value) -> None:
        """Set a read-write (or insert) item's new value; installed at commit."""
        if item.mode not in (Item.UPDATE, Item.INSERT):
            raise ValueError(f"{item.table}[{item.key}] was declared {item.mode}, not for update")
        item.new_value = value

    def abort(self, reason: str = "user", detail: str = "") -> None:
        """The body gives up: raises :class:`TxnAborted` (caught by ``run``)."""
        raise TxnAborted(reason, detail)

    def execute(self) -> Generator[Any, Any, list]:
        """Fetch the records declared since the last stage; returns them. Raises TxnAborted."""
        staged, self._staged = self._staged, []
        if staged:
            yield from self._execute_stage(staged)
            codecs = self.client.codecs
            for it in staged:
                if it.found:
                    it.value = codecs[it.table].decode(it.raw)
        return staged

    # -- the design's part ---------------------------------------------------------------------
    def _execute_stage(self, items: list[Item]):
        raise NotImplementedError
        yield  # pragma: no cover

    def _commit(self):
        """Validate and commit; raise TxnAborted if validation fails."""
        raise NotImplementedError
        yield  # pragma: no cover

    def _abort(self, reason: str):
        """Release what the attempt holds (called once, after any abort)."""
        raise NotImplementedError
        yield  # pragma: no cover


class TxnClient:
    """One modelled thread's coordinator, shared by its coroutines. ``run`` is the one entry
    point workloads use; designs subclass it with ``begin`` building their :class:`Txn`."""

    def __init__(self, codecs: dict[str, Codec] | None = None, client_id: int = 0):
        self.codecs = dict(codecs or {})
        self.client_id = client_id
        self.history: list | None = None       # set to a list to record every attempt
        self._next_txn = 0
        self._stats = dict.fromkeys(TxnStats._fields, 0)

    def set_codecs(self, codecs: dict[str, Codec]) -> None:
        self.codecs = dict(codecs)

    def begin(self, co, name: str = "") -> Txn:
        raise UnsupportedOperation(f"{type(self).__name__} has no transactions")

    def count(self, field: str, n: int = 1) -> None:
        self._stats[field] += n

    def new_txn_id(self) -> int:
        """Unique over the rack: the client's id in the high bits (FORD: tx_id = coroutine-local
        counter combined with the thread id)."""
        self._next_txn += 1
        return (self.client_id << 40) | self._next_txn

    def run(self, co, body, *args, name: str | None = None, retries: int = 0):
        """``outcome = yield from client.run(co, body, *args)``: run ``body(tx, *args)`` and commit.
        An aborted attempt is re-run up to ``retries`` more times (0: FORD's benchmarks, which
        discard it). Returns a :class:`TxnOutcome`."""
        name = name or getattr(body, "__name__", "txn")
        attempt = 0
        while True:
            attempt += 1
            if attempt > 1:
                self.count("retries")
            tx = self.begin(co, name)
            start = tx.start_ns
            self.count("attempts")
            try:
                result = tx.result = yield from body(tx, *args)
                yield from tx.execute()            # anything declared after the last stage
                yield from tx._commit()
            except ClientCrash:
                # the coordinator stops here (a failpoint): what it posted may land, so its
                # writes count as "may have happened" for the checker
                self._record(tx, start, "unknown", "crash")
                raise
            except TxnAborted as e:
                tx.aborted = e.reason
                yield from tx._abort(e.reason)
                self.count("aborts")
                self.count("abort_" + e.reason)
                self._record(tx, start, "aborted", e.reason)
                if attempt <= retries:
                    continue
                return TxnOutcome(False, e.reason, attempt)
            self.count("commits")
            self.count("commit_latency_ns", co.env.now - start)
            self._record(tx, start, "committed", "")
            return TxnOutcome(True, "", attempt, result)

    def installing(self, tx: Txn) -> None:
        """A design calls this once it has set ``tx.installed`` and before it posts the WRITEs that
        install it: from here on they may land. A history shared with the rack's owner
        (``nodes.txn_history.TxnHistoryWriter``) records the attempt now, as in flight, so that a
        process killed before the attempt returns leaves it as "may have happened"; a list (the
        co-located rigs) needs nothing, a stopped coroutine records itself (``run``)."""
        intend = getattr(self.history, "intend", None)
        if intend is not None:
            intend(self._snapshot(tx, tx.start_ns, "unknown", "crash"))

    def _snapshot(self, tx: Txn, start: int, status: str, reason: str) -> TxnRecord:
        reads = tuple((it.table, it.key, it.version) for it in tx.items
                      if it.found and it.version is not None and it.mode != Item.INSERT)
        writes = tuple(tx.installed) if status in ("committed", "unknown") else ()
        return TxnRecord(tx.txn_id, self.client_id, tx.name, start, tx.co.env.now, status, reason, reads, writes,
                         tx.result)

    def _record(self, tx: Txn, start: int, status: str, reason: str) -> None:
        if self.history is not None:
            self.history.append(self._snapshot(tx, start, status, reason))

    def statistics(self) -> TxnStats:
        return TxnStats(**self._stats)


class TxnSystem(System):
    """A transactional design. Like a KV :class:`System` it has options, ``setup`` on the rack's
    owner and a client per thread, but its structures are the workload's tables:

    * ``setup_tables(fabric, memory_nodes, options, tables) -> layout`` carves and initialises a
      table per :class:`TableSpec` (primary and backups as the design places them);
    * ``load(fabric, layout, table, rows)`` writes ``rows`` ((key int, value bytes), ...) into a
      freshly set-up table as the design's loader does (FORD loads every replica identically);
    * ``client(fabric, layout, thread, options) -> TxnClient``;
    * ``records(fabric, layout, table)`` (for checkers): every replica's view of every record,
      ``{key: [(version, lock, value bytes, valid), per replica]}``.
    """

    transactional = True

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        raise UnsupportedOperation(f"{cls.name} is transactional: use setup_tables with the workload's tables")

    @classmethod
    def setup_tables(cls, fabric, memory_nodes: list[int], options: dict, tables: list[TableSpec]) -> dict:
        raise NotImplementedError

    @classmethod
    def load(cls, fabric, layout: dict, table: str, rows) -> None:
        raise NotImplementedError

    @classmethod
    def records(cls, fabric, layout: dict, table: str) -> dict:
        raise NotImplementedError
