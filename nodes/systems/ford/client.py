"""The FORD coordinator: a transaction's phases over one-sided verbs (see docs/dtx.md).

One :class:`FordClient` per modelled thread (its address cache and undo-log slice are the
thread's, as in FORD); each transaction attempt is a :class:`FordTxn`. The phases follow SMART's
``dtx/dtx.cpp`` (FORD+, [S] semantics: ``version + 1`` at commit, an INVISIBLE record re-read
rather than aborted), each ``yield co.sync()`` one round trip:

* **Execute** (``IssueReadOnly``/``IssueReadLock``, one stage per ``tx.execute()``): a read-only
  record with a cached address is one READ of the record, a read-write one the *hitchhiked lock*,
  a CAS of its lock word 0 -> LOCKED and a READ of the record in the same doorbell (the READ is
  executed after the CAS at the responder, so it sees the locked state); an uncached record is a
  READ of its bucket (and of overflow buckets, a round each), and an uncached read-write record is
  locked only at validation. A record found INVISIBLE has its lock word re-read until the commit in
  flight ends.
* **Undo log** (``ParallelUndoLog``): one WRITE per memory node of the before-images of the
  read-write set, posted with validation and awaited by its sync (FORD+: the log shares the data
  QP, so SMART's ``Sync`` is the commit gate).
* **Validate**: a READ of the version (and, corrected, the lock word) of each read-only record;
  a CAS + READ of the version of each read-write record not locked in execution. Skipped when
  there is no read-only record and every read-write record was locked in execution, and for a
  one-record read-only transaction.
* **Commit** (coalescent): per read-write record, to the primary a WRITE of the lock word
  LOCKED|INVISIBLE and a WRITE of the record with version + 1; to each backup the same with the
  backup's own offset; a 1-byte READ after the last backup WRITE is the remote flush. One sync.
* **Release**: a WRITE of 0 to every replica's lock word, posted and not awaited.
* **Abort**: a WRITE of 0 to the primary lock word of each record locked (or, in FORD's code, each
  one whose CAS was posted: ``abort_unlocks``), not awaited.

Failpoints between the phases (``ford.executed``, ``ford.validated``, ``ford.primaries_written``,
``ford.committed``) let a test stop a coordinator with its locks held or its commit half applied.
"""

from __future__ import annotations

from nodes.systems.lib.cpu_costs import SoftwareCosts
from nodes.systems.race.client import hash_ns
from nodes.systems.txn import Item, Txn, TxnAborted, TxnClient
from shm.fabric import gaddr
from shm.failpoints import failpoint

from .code_costs import code_ns
from .layout import (
    INVISIBLE, LOCK_OFF, LOCKED, LOG_HEADER, SLOTS_PER_BUCKET, VERSION_OFF, bucket_of, decode_item, encode_item,
    next_off, owner_bits,
)


class _State:
    """A record's place and locks within one attempt."""

    __slots__ = ("addr", "rel", "tinfo", "lock_posted", "locked", "handle", "cas", "bucket", "raw_record")

    def __init__(self, tinfo):
        self.tinfo = tinfo
        self.addr = None          # the primary's global address of the record
        self.rel = None           # its offset within the table (the same on every replica)
        self.lock_posted = False  # a CAS of its lock word was posted (FORD's locked_rw_set)
        self.locked = False       # that CAS returned 0: this attempt holds the lock
        self.handle = None
        self.cas = None
        self.bucket = None        # the bucket (global address) being READ
        self.raw_record = None    # the record's bytes as fetched (the undo log's before-image)


class FordTxn(Txn):
    cpu_charged = False                  # the attempt's own CPU charged (FordClient.charge_attempt)

    def _execute_stage(self, items: list[Item]):
        cl: FordClient = self.client
        co = self.co
        for it in items:
            it.state = _State(cl.tables[it.table])
        todo = list(items)
        while todo:
            for it in todo:
                st = it.state
                ti = st.tinfo
                # an insert always READs its bucket chain (FORD: inserts are not cached)
                addr = cl.cache.get((ti["id"], it.key)) if cl.addr_cache and it.mode != Item.INSERT else None
                if addr is not None and st.bucket is None:
                    st.addr = addr
                    st.rel = addr - ti["pgaddr"]
                    if it.mode != Item.READ:
                        st.cas = co.cas(addr + LOCK_OFF, 0, LOCKED)
                        st.lock_posted = True
                    st.handle = co.read(addr, ti["item_bytes"])
                    cl.count("cache_hits")
                else:
                    if st.bucket is None:
                        st.bucket = ti["pgaddr"] + bucket_of(it.key, ti["buckets"]) * ti["bucket_bytes"]
                    st.handle = co.read(st.bucket, ti["bucket_bytes"])
                    cl.count("bucket_reads")
            yield co.sync()
            again, invisible, failure = [], [], None
            for it in todo:
                st = it.state
                ti = st.tinfo
                if st.cas is not None:
                    if st.cas.value == 0:
                        st.locked = True
                    elif failure is None:
                        failure = TxnAborted("lock", f"{it.table}[{it.key}]")
                    st.cas = None
                if it.mode == Item.INSERT:
                    nxt, problem = cl._scan_insert(st, it)
                    if problem is not None:
                        failure = failure or problem
                    elif nxt:
                        st.bucket = ti["pgaddr"] - ti["pbase"] + nxt
                        again.append(it)
                    continue
                if st.bucket is None:
                    rec = decode_item(st.handle.data, ti["value_bytes"])
                    raw = bytes(st.handle.data)
                else:
                    rec, raw, nxt = cl._scan(st, it.key)
                    if rec is None:
                        if nxt:
                            st.bucket = ti["pgaddr"] - ti["pbase"] + nxt
                            again.append(it)
                        elif failure is None:
                            failure = TxnAborted("not_found", f"{it.table}[{it.key}]")
                        continue
                if rec.key != it.key or rec.table_id != ti["id"]:       # stale cache entry
                    cl.cache.pop((ti["id"], it.key), None)       # (dtx_check_rw.cc:83-101)
                    if st.locked:                                # release, then look it up afresh
                        co.write(st.addr + LOCK_OFF, 0)
                    st.locked = st.lock_posted = False
                    st.bucket = None
                    again.append(it)
                    continue
                if not rec.valid:
                    if failure is None:
                        failure = TxnAborted("not_found", f"{it.table}[{it.key}] deleted")
                    continue
                st.raw_record = raw
                it.found = True
                it.raw = rec.value
                it.version = rec.version
                if rec.lock & INVISIBLE and not st.locked:
                    invisible.append(it)
            if failure is not None:
                raise failure
            for it in invisible:
                yield from cl._wait_visible(co, it)
            todo = again                         # overflow buckets, stale cache entries: another round
        failpoint("ford.executed")

    def _commit(self):
        cl: FordClient = self.client
        co = self.co
        rw = [it for it in self.items if it.mode != Item.READ]
        ro = [it for it in self.items if it.mode == Item.READ]
        cl.charge_attempt(self)
        if rw:
            cl._log(co, self, rw)
        unlocked = [it for it in rw if not it.state.locked]
        validate = (ro and not (len(self.items) == 1)) or unlocked
        if cl.fault == "commit-without-validation":
            validate = False
        failure = None
        if validate:
            checks = []
            for it in ro:
                st = it.state
                checks.append((it, co.read(st.addr + VERSION_OFF, 16 if cl.validate_lock_bit else 8), None))
            for it in unlocked:
                st = it.state
                cas = co.cas(st.addr + LOCK_OFF, 0, LOCKED)
                st.lock_posted = True
                checks.append((it, co.read(st.addr + VERSION_OFF, 8), cas))
            yield co.sync()                      # also the commit gate: the undo-log WRITEs are acked
            for it, h, cas in checks:
                if cas is not None:
                    if cas.value == 0:
                        it.state.locked = True
                    elif failure is None:
                        failure = TxnAborted("validation", f"{it.table}[{it.key}] locked")
                word = h.data
                version = int.from_bytes(bytes(word[:8]), "little")
                if version != it.version and failure is None:
                    failure = TxnAborted("validation", f"{it.table}[{it.key}] version {it.version} -> {version}")
                if cas is None and cl.validate_lock_bit and failure is None:
                    lock = int.from_bytes(bytes(word[8:16]), "little")
                    if lock:
                        failure = TxnAborted("validation", f"{it.table}[{it.key}] locked ({lock:#x})")
            if failure is not None:
                raise failure
        elif rw:
            yield co.sync()                      # the commit gate: the undo log acked
        failpoint("ford.validated")
        if not rw:
            return
        yield from cl._coalescent_commit(co, self, rw)

    def _abort(self, reason: str):
        cl: FordClient = self.client
        co = self.co
        for it in self.items:
            st = it.state
            if st is None:
                continue
            if st.locked or (st.lock_posted and cl.abort_unlocks == "attempted"):
                co.write(st.addr + LOCK_OFF, 0)
                st.locked = False
        co.post()                                # not awaited (FORD: unsignalled)
        # an attempt that ends in execution has not paid its CPU yet (one that fails validation has)
        cl.charge_attempt(self)
        return
        yield  # pragma: no cover


class FordClient(TxnClient):
    def __init__(self, fabric, layout: dict, thread, options: dict):
        super().__init__(client_id=(thread.owner.node << 12) | thread.index)
        self.fabric = fabric
        self.layout = layout
        self.thread = thread
        self.options = options
        self.addr_cache = options["addr_cache"]
        self.abort_unlocks = options["abort_unlocks"]
        self.validate_lock_bit = options["validate_lock_bit"]
        self.on_invisible = options["on_invisible"]
        self.invisible_limit = options["invisible_rereads"]
        self.flush = options["flush"]
        self.fault = options["fault"]
        self.txn_cpu_ns = options["txn_cpu_ns"]
        # The coordinator's own CPU per attempt (the verbs' posting and polling are charged by the
        # verbs layer). A transaction of FORD's SmallBank or TATP costs what the artifact's code
        # measured (code_costs.py, option code_cpu = "artifact"); any other, or code_cpu =
        # "formula", is priced from the profile's [software] table as every system's
        # (nodes/systems/lib/cpu_costs.py): the fixed work of an operation (op_cycles); per record
        # the address-cache lookup (hashing its 8-byte key, one DRAM miss into the map) and its
        # lines checked (line_cycles each); per read-write record its before-image copied into the
        # undo log and its new image built (its lines twice).
        self._measured = options["code_cpu"] == "artifact"
        self._ghz = fabric.profile.cpu.ghz
        sw = SoftwareCosts(fabric.profile)
        self._attempt_ns = sw.op_ns
        self._record_ns = hash_ns(fabric.profile, 8) + sw.dram_ns
        self._line_ns = sw.line_ns
        self.cache: dict = {}
        self.tables = {}
        for name, t in layout["tables"].items():
            (pnode, pbase), backups = t["replicas"][0], t["replicas"][1:]
            self.tables[name] = dict(t, name=name, pnode=pnode, pbase=pbase, pgaddr=gaddr(pnode, pbase),
                                     backups=[gaddr(n, b) for n, b in backups], next_off=next_off(t["value_bytes"]))
        # this thread's undo-log slice on every memory node
        computes = layout["compute_nodes"]
        node = thread.owner.node
        ordinal = computes.index(node) if node in computes else 0
        slot = ordinal * layout["log_threads"] + thread.index % layout["log_threads"]
        self.log_bytes = layout["log_slice_bytes"]
        self.logs = [gaddr(m, off + slot * self.log_bytes) for m, off in sorted(layout["logs"].items())]
        self.log_pos = 0

    def run(self, co, body, *args, name: str | None = None, retries: int = 0):
        """:meth:`TxnClient.run`, under SMART's conflict avoidance when the thread has it (SMART-DTX,
        or FORD on a rack whose ``[smart]`` table turns it on): each attempt is one operation of
        coroutine throttling (``op_begin``/``op_end``: SMART's ``begin_task``/``end_task``, at most
        c_max transactions of the thread in flight) and its outcome feeds the retry-rate controller,
        an abort waiting the back-off before the coroutine goes on (``retry_task``; FORD draws a new
        transaction after an abort, so the pause comes after every abort, TATP's by-construction
        ones included: madsys-dev/smart dtx/dtx.h:91-96,134-163, dtx.cpp:149-162). Without it, the
        plain loop, not one event more."""
        thread = self.thread
        if not thread.conflict_control:
            return (yield from super().run(co, body, *args, name=name, retries=retries))
        attempt = 0
        while True:
            # the back-off exponent restarts with each new transaction (op_begin(co)), and grows
            # over the retries of one when the caller asks for retries
            yield from thread.op_begin(co if attempt == 0 else None)
            try:
                out = yield from super().run(co, body, *args, name=name, retries=0)
                yield from co.after_attempt(out.committed)
            finally:
                thread.op_end()
            if out.committed or attempt >= retries:
                return out._replace(attempts=attempt + 1)
            attempt += 1
            self.count("retries")

    def attempt_ns(self, tx: FordTxn) -> int:
        """The coordinator's own CPU for attempt ``tx`` (see ``__init__``), ``txn_cpu_ns`` included."""
        ns = code_ns(tx.name, self._ghz) if self._measured else None
        if ns is None:
            lines = sum(-(-it.state.tinfo["item_bytes"] // 64) for it in tx.items if it.state is not None)
            rw_lines = sum(-(-it.state.tinfo["item_bytes"] // 64) for it in tx.items
                           if it.state is not None and it.mode != Item.READ)
            ns = self._attempt_ns + len(tx.items) * self._record_ns + (lines + 2 * rw_lines) * self._line_ns
        return ns + self.txn_cpu_ns

    def charge_attempt(self, tx: FordTxn) -> None:
        """Charge the thread the attempt's own CPU, once per attempt: at its commit, or at its
        abort when it ended before the commit."""
        if not tx.cpu_charged:
            tx.cpu_charged = True
            self.thread.cpu(self.attempt_ns(tx))

    def begin(self, co, name: str = "") -> FordTxn:
        return FordTxn(self, co, self.new_txn_id(), name)

    # -- pieces of the phases ------------------------------------------------------------------
    @staticmethod
    def _bucket(st: _State):
        """The bucket just READ: ``(slots, next)``, ``slots`` yielding (offset in the bucket,
        decoded record, its raw bytes) for its 22 records, ``next`` the overflow bucket's node
        offset (0: none)."""
        ti = st.tinfo
        data = st.handle.data
        ib, vb = ti["item_bytes"], ti["value_bytes"]

        def slots():
            for off in range(0, SLOTS_PER_BUCKET * ib, ib):
                raw = data[off:off + ib]
                yield off, decode_item(raw, vb), raw
        return slots(), int.from_bytes(bytes(data[ti["next_off"]:ti["next_off"] + 8]), "little")

    def _scan(self, st: _State, key: int):
        """Look for ``key`` in the bucket just READ: (record, its bytes, 0) when found (the
        address cached), else (None, None, the ``next`` offset or 0)."""
        ti = st.tinfo
        slots, nxt = self._bucket(st)
        for off, rec, raw in slots:
            if rec.valid and rec.key == key and rec.table_id == ti["id"]:
                st.addr = st.bucket + off
                st.rel = st.addr - ti["pgaddr"]
                if self.addr_cache:
                    self.cache[(ti["id"], key)] = st.addr
                st.bucket = None
                return rec, bytes(raw), 0
        return None, None, nxt

    def _scan_insert(self, st: _State, it: Item):
        """Choose an insert's slot in the bucket just READ (FORD ``FindInsertOff``, dtx_check_rw.cc:
        186-244: a slot with ``valid == 0`` and an unlocked lock word). Here a slot is kept by its key
        once used: the key's own deleted record is taken first, else a never-used slot, so a
        key's versions stay one sequence for the checker (FORD reuses any invalid slot). A live
        record of the key aborts (the key exists: TATP InsertCallForwarding's duplicate), and so
        does a never-used slot that is locked, an insert in flight in this chain whose key cannot
        be seen (two inserts of one key could otherwise take two slots). Returns (the ``next``
        offset to READ, 0 once decided; an abort or None); a chosen slot sets the item's address,
        its version (the slot's, validated by CAS + READ) and its before-image."""
        ti = st.tinfo
        slots, nxt = self._bucket(st)
        for off, rec, raw in slots:
            if rec.table_id == ti["id"] and rec.key == it.key:
                if rec.valid:
                    return 0, TxnAborted("user", f"{it.table}[{it.key}] exists")
                if rec.lock:
                    return 0, TxnAborted("lock", f"{it.table}[{it.key}] (deleted) is locked")
                self._take_slot(st, it, st.bucket + off, rec.version, bytes(raw))
            elif rec.table_id == 0:
                if rec.lock:
                    return 0, TxnAborted("lock", f"{it.table}: an insert is in flight in {it.key}'s bucket")
                if st.addr is None:
                    self._take_slot(st, it, st.bucket + off, 0, None)
        if nxt:
            return nxt, None
        if st.addr is None:
            return 0, TxnAborted("not_found", f"{it.table}[{it.key}]: no free slot in its bucket chain")
        return 0, None

    def _take_slot(self, st: _State, it: Item, addr: int, version: int, raw) -> None:
        """The insert goes to ``addr``; a key's own deleted record beats a never-used slot."""
        ti = st.tinfo
        st.addr = addr
        st.rel = addr - ti["pgaddr"]
        it.version = version
        # the undo log's before-image: the record as it was, or for a never-used slot an absent
        # record of the key (valid 0), so that recovery can roll an interrupted insert back
        st.raw_record = raw if raw is not None else encode_item(ti["id"], it.key, ti["pbase"] + st.rel, 0, 0, b"",
                                                                 ti["value_bytes"], valid=False)

    def _wait_visible(self, co, it: Item):
        """SMART: re-READ the lock word until bit 63 clears, keeping what was read (dtx.cpp:382-394)."""
        if self.on_invisible == "abort":
            raise TxnAborted("invisible", f"{it.table}[{it.key}]")
        for _ in range(self.invisible_limit):
            self.count("invisible_rereads")
            h = co.read(it.state.addr + LOCK_OFF, 8)
            yield co.sync()
            if not h.value & INVISIBLE:
                return
        raise TxnAborted("invisible", f"{it.table}[{it.key}] stayed invisible")

    def _log(self, co, tx: FordTxn, rw: list[Item]) -> None:
        """One WRITE per memory node: the entry header and every read-write record's before-image
        (SMART's entries have no images, a bug the brief notes: images are written here)."""
        entry = LOG_HEADER.pack(tx.txn_id, self.client_id, len(rw)) + b"".join(it.state.raw_record for it in rw)
        if len(entry) > self.log_bytes:
            raise TxnAborted("user", f"undo-log entry of {len(entry)} B exceeds the slice")
        if self.log_pos + len(entry) > self.log_bytes:
            self.log_pos = 0                    # circular, never truncated (log_allocator.h:23-29)
        for base in self.logs:
            co.write(base + self.log_pos, entry)
        self.log_pos = (self.log_pos + len(entry) + 7) & ~7

    def _coalescent_commit(self, co, tx: FordTxn, rw: list[Item]):
        codecs = self.codecs
        installed = []
        backup_writes = []
        invis = LOCKED | INVISIBLE | owner_bits(tx.txn_id)       # whose commit it is, for recovery
        last_backup = None
        for it in rw:
            st = it.state
            ti = st.tinfo
            if it.mode == Item.DELETE:               # valid := 0, the bytes kept (FORD: delete = valid 0)
                value = it.raw
            elif it.mode == Item.INSERT and it.new_value is None:
                raise TxnAborted("user", f"{it.table}[{it.key}] inserted without a value")
            else:
                value = codecs[it.table].encode(it.new_value if it.new_value is not None else it.value)
            valid, ins = it.mode != Item.DELETE, it.mode == Item.INSERT
            version = it.version + 1
            co.write(st.addr + LOCK_OFF, invis)
            co.write(st.addr, encode_item(ti["id"], it.key, ti["pbase"] + st.rel, version, invis, value,
                                          ti["value_bytes"], valid, ins))
            if self.fault == "unlock-before-backups":
                co.write(st.addr + LOCK_OFF, 0)
            for (bnode, bbase), bg in zip(ti["replicas"][1:], ti["backups"]):
                baddr = bg + st.rel
                backup_writes.append((baddr, encode_item(ti["id"], it.key, bbase + st.rel, version, invis & ~LOCKED,
                                                         value, ti["value_bytes"], valid, ins)))
                last_backup = baddr
            installed.append((it.table, it.key, version, value))
        tx.installed = installed                 # posted from here on: they may land
        self.installing(tx)
        co.post()
        failpoint("ford.primaries_written")
        for baddr, rec in backup_writes:
            co.write(baddr + LOCK_OFF, invis & ~LOCKED)
            co.write(baddr, rec)
            if self.flush == "every":
                co.read(baddr, 1)
        if self.flush == "selective" and last_backup is not None:
            co.read(last_backup, 1)             # the remote flush (RFLUSH 2)
        if self.flush == "every":
            for it in rw:
                co.read(it.state.addr, 1)
        yield co.sync()
        failpoint("ford.committed")
        for it in rw:
            st = it.state
            if self.fault != "unlock-before-backups":
                co.write(st.addr + LOCK_OFF, 0)
            for bg in st.tinfo["backups"]:
                co.write(bg + st.rel + LOCK_OFF, 0)
            st.locked = False
        co.post()                                # release, not awaited
