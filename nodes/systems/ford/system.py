"""FordSystem: FORD's tables and undo logs on the memory nodes, a coordinator per thread.

Placement (SMART dtx/manager.h:149-155 with BACKUP_DEGREE 1 on 2 blades; FORD
workload/smallbank/smallbank_db.cc:15-63 with BACKUP_DEGREE 2): table ``t``'s primary is memory
node ``t % N`` of the rack's N memory nodes, its backups the next ``replicas - 1`` nodes round the
ring. Every replica of a table is loaded identically (same buckets, same slots), so a record's
backup address is its primary offset rebased on the backup's table (dtx_issue.cc:467-477).

Undo logs (SMART backend.cpp:22-23, manager.h:21: 1 GiB per blade, an 8 MiB slice per thread):
one region per memory node, a slice per coordinator thread, circular, never truncated.
"""

from __future__ import annotations

import math

import numpy as np

from nodes.systems.api import Option, SystemGaveUp
from nodes.systems.lib.memory_nodes import memory_node_indexes
from nodes.systems.txn import TableSpec, TxnSystem
from shm.fabric import gaddr

from .layout import (
    INVISIBLE, KEY_OFF, LOCK_OFF, MAX_LOG_IMAGES, owner_of, RESERVE_FRACTION, SLOTS_PER_BUCKET, TABLE_ID_OFF, VERSION_OFF, bucket_bytes, bucket_of,
    decode_item, encode_item, item_bytes, next_off,
)

LAYOUT_FORMAT = 1
FAULTS = ("none", "commit-without-validation", "unlock-before-backups")


class FordSystem(TxnSystem):
    name = "ford"
    description = ("FORD+ (as SMART ran it): one-sided OCC transactions, records with version and lock words "
                   "in chained bucketed hash tables, primary-backup replication, hitchhiked CAS-lock + READ, "
                   "undo logs on every memory node, coalescent commit with a selective remote flush")
    paper = ("Zhang et al., FORD: Fast One-sided RDMA-based Distributed Transactions for Disaggregated "
             "Persistent Memory, USENIX FAST'22 (minghust/ford); FORD+ as in Wang et al., SMART, EuroSys'24 "
             "(madsys-dev/smart dtx/)")
    roles = ("compute", "memory")
    options = (
        Option("replicas", 2, "copies of every table (a primary and replicas - 1 backups on distinct memory nodes); "
               "SMART's FORD+ runs 2 (dtx/common.h:32 BACKUP_DEGREE 1), FORD 3", minimum=1, maximum=8),
        Option("addr_cache", True, "keep each thread's (table, key) -> record address cache (FORD addr_cache.h): a hit "
               "READs the record (CAS + READ to lock it) instead of its bucket"),
        Option("abort_unlocks", "taken", "which locks an abort releases: 'taken' (only where the CAS returned 0: "
               "correct) or 'attempted' (every read-write record whose CAS was posted, as FORD and SMART's code do: "
               "dtx.cpp:202,235, a lost update when it frees another transaction's lock: the brief's hazard 1)",
               choices=("taken", "attempted")),
        Option("validate_lock_bit", True, "validation of a read-only record also fails if its lock word is set "
               "(Silo-style; one 16-B READ of version and lock instead of 8 B). false: versions only, as FORD's code "
               "(dtx_check.cc:134-141, hazard 2)"),
        Option("on_invisible", "reread", "a record fetched while its commit is in flight (lock bit 63): 'reread' its "
               "lock word until the bit clears (SMART dtx.cpp:382-394) or 'abort' (FORD INV_ABORT)",
               choices=("reread", "abort")),
        Option("invisible_rereads", 1000, "lock-word re-READs before an INVISIBLE record aborts the transaction "
               "(assumption: a bound so that a coordinator that died mid-commit cannot stall readers forever; SMART "
               "spins without one)", minimum=1, maximum=10**7),
        Option("flush", "selective", "remote flush READs at commit: 'selective' (one 1-B READ after the last "
               "read-write record's backup WRITE: FORD RFLUSH 2), 'every' (after every replica WRITE: RFLUSH 1) or "
               "'none' (RFLUSH 0)", choices=("selective", "every", "none")),
        Option("log_slice_bytes", 1 << 20, "bytes of undo log per coordinator thread on each memory node (SMART: 8 MiB "
               "= 1 GiB / 128 threads; scaled down, an assumption: the log is circular and never read back in a run)",
               minimum=4096, maximum=1 << 30),
        Option("log_threads", 32, "coordinator threads per compute node the undo-log slices are sized for (a thread "
               "beyond shares a slice modulo this)", minimum=1, maximum=1024),
        Option("code_cpu", "artifact", "the coordinator's own CPU per attempt: 'artifact' (SmallBank's and TATP's "
               "transactions cost what SMART's artifact code measured, nodes/systems/ford/code_costs.py; any other "
               "transaction the formula) or 'formula' (every transaction priced from the profile's [software] table: "
               "an operation, per record a lookup and its lines, per read-write record its lines twice more)",
               choices=("artifact", "formula")),
        Option("txn_cpu_ns", 0, "modelled CPU ns per transaction attempt added to the coordinator's own CPU "
               "(code_cpu)", minimum=0, maximum=10**6),
        Option("fault", "none", "a deliberate bug, to prove the checker catches it: 'commit-without-validation' "
               "skips validation (records not locked in execution are written unlocked); 'unlock-before-backups' "
               "releases the primary's lock in the primary doorbell, before the backups are written",
               choices=FAULTS),
    )

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        nodes = getattr(spec, "nodes", ())
        mns = [n for n in (nodes() if callable(nodes) else nodes) if getattr(n, "role", "") == "memory"]
        if mns and options["replicas"] > len(mns):
            raise ValueError(f"system {cls.name!r}: replicas = {options['replicas']} needs that many memory nodes; the rack "
                             f"has {len(mns)}")

    # -- setup ---------------------------------------------------------------------------------
    @classmethod
    def setup_tables(cls, fabric, memory_nodes, options: dict, tables: list[TableSpec]) -> dict:
        opts = cls.check_options(dict(options or {}), f"system {cls.name!r}")
        mns = memory_node_indexes(fabric, memory_nodes, "FORD")
        if opts["replicas"] > len(mns):
            raise SystemGaveUp(f"FORD: replicas = {opts['replicas']} needs that many memory nodes, got {len(mns)}")
        for m in mns:
            fabric.expose(m)
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or len({t.table_id for t in tables}) != len(tables):
            raise ValueError(f"FORD: table names and ids must be unique: {tables}")
        layout_tables = {}
        try:
            for t in tables:
                main = int(t.buckets)
                reserve = max(1, math.ceil(main * RESERVE_FRACTION))
                nbytes = (main + reserve) * bucket_bytes(t.value_bytes)
                replicas = []
                for i in range(opts["replicas"]):
                    node = mns[(t.table_id + i) % len(mns)]
                    off = fabric.allocate(node, nbytes)
                    fabric.memory[node].host[off:off + nbytes] = 0
                    replicas.append((node, off))
                layout_tables[t.name] = {"id": t.table_id, "value_bytes": t.value_bytes,
                                         "item_bytes": item_bytes(t.value_bytes),
                                         "bucket_bytes": bucket_bytes(t.value_bytes), "buckets": main,
                                         "reserve": reserve, "replicas": replicas, "used_reserve": 0}
            computes = [i for i, n in enumerate(fabric.nodes) if n.role == "compute"]
            slices = max(1, len(computes)) * opts["log_threads"]
            logs = {}
            for m in mns:
                logs[m] = fabric.allocate(m, slices * opts["log_slice_bytes"])
        except MemoryError as e:
            raise SystemGaveUp(f"FORD: the tables and undo logs do not fit the memory nodes: {e}") from None
        return {"system": cls.name, "format": LAYOUT_FORMAT, "memory_nodes": mns, "tables": layout_tables,
                "logs": logs, "log_slice_bytes": opts["log_slice_bytes"], "log_threads": opts["log_threads"],
                "compute_nodes": computes}

    @classmethod
    def load(cls, fabric, layout: dict, table: str, rows) -> None:
        """FORD's loader (HashStore::LocalInsert): each key into the first free slot of its bucket's
        chain, an overflow bucket from the reserve when the chain is full; identically on every
        replica (each record carrying its own replica's offset). Version 0, unlocked, valid."""
        t = layout["tables"][table]
        vb, ib, bb = t["value_bytes"], t["item_bytes"], t["bucket_bytes"]
        nxt = next_off(vb)
        pnode, pbase = t["replicas"][0]
        pmem = fabric.memory[pnode].host
        for key, value in rows:
            b = pbase + bucket_of(key, t["buckets"]) * bb
            while True:
                slot = _free_slot(pmem, b, ib)
                if slot is not None:
                    break
                n = int(pmem[b + nxt:b + nxt + 8].view(np.uint64)[0])
                if n == 0:
                    if t["used_reserve"] >= t["reserve"]:
                        raise SystemGaveUp(f"FORD: table {table!r} ran out of overflow buckets while loading")
                    new = pbase + (t["buckets"] + t["used_reserve"]) * bb
                    t["used_reserve"] += 1
                    for node, base in t["replicas"]:
                        fabric.memory[node].host[base + (b - pbase) + nxt:base + (b - pbase) + nxt + 8] = \
                            np.frombuffer(int(base + (new - pbase)).to_bytes(8, "little"), np.uint8)
                    n = new
                b = n
            rel = b - pbase + slot * ib
            for node, base in t["replicas"]:
                rec = encode_item(t["id"], key, base + rel, 0, 0, value, vb)
                fabric.memory[node].host[base + rel:base + rel + ib] = np.frombuffer(rec, np.uint8)

    # -- the checkers' view --------------------------------------------------------------------
    @classmethod
    def records(cls, fabric, layout: dict, table: str) -> dict:
        """``{key: [(version, lock, value bytes, valid, remote_offset), per replica]}`` of every
        record ever loaded (valid or not)."""
        t = layout["tables"][table]
        vb, ib, bb = t["value_bytes"], t["item_bytes"], t["bucket_bytes"]
        out: dict = {}
        for node, base in t["replicas"]:
            mem = fabric.memory[node].host
            for b in range(t["buckets"] + t["used_reserve"]):
                boff = base + b * bb
                for s in range(SLOTS_PER_BUCKET):
                    off = boff + s * ib
                    r = decode_item(mem[off:off + ib], vb)
                    if r.table_id != t["id"]:
                        continue
                    out.setdefault(r.key, []).append((r.version, r.lock, r.value, r.valid, r.remote_offset))
        return out

    @classmethod
    def addresses(cls, fabric, layout: dict, table: str) -> dict:
        """``{(table id, key): the primary's global address}`` of every live record: what a
        coordinator's address cache holds after FORD's warm-up (50,000 transactions per thread,
        bench.cpp:241), for experiments that start warm (``client.cache``)."""
        t = layout["tables"][table]
        node, base = t["replicas"][0]
        items = cls._items(fabric, t, node, base)
        live = np.nonzero((items[:, 0] == t["id"]))[0]
        return {(t["id"], int(items[i, 2])): gaddr(node, cls._word(t, base, i) * 8) for i in live}

    @classmethod
    def _items(cls, fabric, t: dict, node: int, base: int):
        """A replica's records as a (records, words) uint64 array (a copy: write through
        ``_word``): column 0 table_id, 2 key,
        3 remote_offset, 4 version, 5 lock, 6.. value, valid, user_insert."""
        nb = t["buckets"] + t["reserve"]
        bw, iw = t["bucket_bytes"] // 8, t["item_bytes"] // 8
        words = fabric.memory[node].host64[base // 8: base // 8 + nb * bw].reshape(nb, bw)
        return words[:, :SLOTS_PER_BUCKET * iw].reshape(nb * SLOTS_PER_BUCKET, iw)

    @staticmethod
    def _word(t: dict, base: int, i: int) -> int:
        """The word index in its node's memory of record ``i`` of a replica based at ``base``."""
        b, slot = divmod(int(i), SLOTS_PER_BUCKET)
        return (base + b * t["bucket_bytes"] + slot * t["item_bytes"]) // 8

    @classmethod
    def audit(cls, fabric, layout: dict, limit: int = 10) -> list[str]:
        """Records whose primary is unlocked while a backup holds another version or value: FORD
        releases a primary only after every backup WRITE of its commit was acked, so this never
        holds of a correct run at any instant (the checker samples it during a run)."""
        out = []
        for name, t in layout["tables"].items():
            if len(t["replicas"]) < 2:
                continue
            p = cls._items(fabric, t, *t["replicas"][0])
            cols = [0, 1, 2, 4] + list(range(6, t["item_bytes"] // 8))
            live = (p[:, 0] != 0) & (p[:, 5] == 0)
            for node, base in t["replicas"][1:]:
                b = cls._items(fabric, t, node, base)
                bad = np.nonzero(live & (p[:, cols] != b[:, cols]).any(axis=1))[0]
                for i in bad[:limit - len(out)]:
                    out.append(f"{name}[{int(p[i, 2])}]: primary unlocked at version {int(p[i, 4])}, backup on node "
                               f"{node} at version {int(b[i, 4])}")
                if len(out) >= limit:
                    return out
        return out

    @classmethod
    def log_entries(cls, fabric, layout: dict) -> list:
        """Every undo-log entry in the first memory node's slices (the logs are written to every
        node alike), as ``(tx_id, [(table, image words), ...])``. A slice is written from its start
        and wraps back to it (``FordClient._log``), so each is read from its start, entry after
        entry (the header's count of images says where one ends), until a word that is not an
        entry: the end of the current lap, or the stale bytes of an earlier one. An image is
        accepted only if its table id and value size are a table's."""
        by_id = {t["id"]: t for t in layout["tables"].values()}
        log_node = layout["memory_nodes"][0]
        log_off = layout["logs"][log_node]
        n_slices = max(1, len(layout["compute_nodes"])) * layout["log_threads"]
        sw = layout["log_slice_bytes"] // 8
        logw = fabric.memory[log_node].host64[log_off // 8: log_off // 8 + n_slices * sw]
        entries = []
        for s in range(n_slices):
            w = logw[s * sw:(s + 1) * sw]
            pos = 0
            while pos + 2 <= sw:
                tx_id, n = int(w[pos]), int(w[pos + 1]) >> 32
                if tx_id == 0 or not 0 < n <= MAX_LOG_IMAGES:
                    break
                p, images = pos + 2, []
                for _ in range(n):
                    t = by_id.get(int(w[p])) if p + 2 <= sw else None
                    if t is None or int(w[p + 1]) != t["value_bytes"] or p + t["item_bytes"] // 8 > sw:
                        break
                    images.append((t, w[p:p + t["item_bytes"] // 8].copy()))
                    p += t["item_bytes"] // 8
                if len(images) != n:
                    break
                entries.append((tx_id, images))
                pos = p
        return entries

    @classmethod
    def recover(cls, fabric, layout: dict) -> dict:
        """After coordinators died (their coroutines stopped at a failpoint, or their processes
        killed), make every record clean again from the undo logs, so that no committed
        transaction is lost, no partial one stays visible and no lock stays held (FORD's code has
        none; the procedure the brief infers from the protocol). Run with no coordinator active.

        A record INVISIBLE on any replica had a commit in flight: the transaction that made it so
        is named by the lock word (``layout.owner_of``) and its undo-log entry holds the
        before-images of all its records. A coordinator reports a commit only after every commit
        WRITE (primaries and backups) was acked and releases nothing before, so the transaction
        is decided by its records:

        * every record of the entry holds a newer version than its before-image on every
          replica, the replicas agreeing: the commit may have been reported, and it is whole:
          **rolled forward** (its lock words cleared). This is the case of a coordinator that died
          after its commit returned, with its releases posted but not landed;
        * otherwise it was never reported and part of it may be missing: **rolled back**, every
          record of the entry that is still held getting its before-image on every replica.

        A record only LOCKED (no commit reached it) is unlocked. Limit: a record longer than one
        64-B line whose WRITEs were cut mid-record on every replica at the same line would look
        written (the version word is in its first line); SmallBank's records are one line.
        Returns counts."""
        rows = {}                                    # table id -> (table, replicas' rows, offset -> row)
        names = {t["id"]: name for name, t in layout["tables"].items()}
        for t in layout["tables"].values():
            reps = [cls._items(fabric, t, n, b) for n, b in t["replicas"]]
            live = np.nonzero(reps[0][:, 0] == t["id"])[0]
            rows[t["id"]] = (t, reps, {int(reps[0][i, 3]): int(i) for i in live})
        entries = {tx: images for tx, images in cls.log_entries(fabric, layout)}
        owners: dict = {}                            # owner tx id -> its images
        for tid, (t, reps, _) in rows.items():
            for i in np.nonzero(np.any([(r[:, 5] & np.uint64(INVISIBLE)) != 0 for r in reps], axis=0))[0]:
                locks = [int(r[i, 5]) for r in reps if int(r[i, 5]) & INVISIBLE]
                owner = owner_of(locks[0])
                if owner not in entries:
                    raise SystemGaveUp(f"FORD recovery: {names[tid]}[{int(reps[0][i, 2])}] is INVISIBLE in the "
                                       f"commit of transaction {owner:#x}, which has no undo-log entry")
                owners[owner] = entries[owner]
        handled: set = set()
        forward = back = unlocked = 0
        for owner, images in owners.items():
            whole = all(cls._written(rows[t["id"]][1], rows[t["id"]][2].get(int(img[3])), int(img[4]))
                        for t, img in images)
            for t, img in images:
                _, reps, where = rows[t["id"]]
                i = where.get(int(img[3]))
                if i is None or (t["id"], i) in handled or not any(r[i, 5] for r in reps):
                    continue
                handled.add((t["id"], i))
                iw = t["item_bytes"] // 8
                for r, (node, base) in zip(reps, t["replicas"]):
                    w = cls._word(t, base, i)
                    if whole:
                        fabric.memory[node].host64[w + 5] = 0
                    else:
                        row = img.copy()
                        row[5] = 0
                        row[3] = r[i, 3]              # each replica's own offset
                        fabric.memory[node].host64[w:w + iw] = row
                if whole:
                    forward += 1
                else:
                    back += 1
        for tid, (t, reps, _) in rows.items():
            for i in map(int, np.nonzero(np.any([r[:, 5] != 0 for r in reps], axis=0))[0]):
                if (tid, i) not in handled:
                    for node, base in t["replicas"]:
                        fabric.memory[node].host64[cls._word(t, base, i) + 5] = 0
                    unlocked += 1
        return {"rolled_forward": forward, "rolled_back": back, "unlocked": unlocked}

    @staticmethod
    def _written(reps, i, before: int) -> bool:
        """Record ``i`` holds a version after ``before`` on every replica, the replicas agreeing
        on everything but their own offset and lock word (a commit's WRITEs to it all landed)."""
        if i is None:
            return False
        first = reps[0][i]
        for r in reps:
            row = r[i]
            if int(row[4]) <= before or row[4] != first[4] or (row[6:] != first[6:]).any() \
                    or (row[:3] != first[:3]).any():
                return False
        return True

    @classmethod
    def recover_power_failure(cls, fabric, layout: dict) -> dict:
        """After memory nodes with persistent memory lost power (``shm.nvm.power_fail``, the rack's
        ``kill`` of an NVM memory node) while no transaction was in flight: make every record's
        replicas equal again, each to its replica of the highest version, unlocked.

        Why the highest version is the last committed one: a commit's selective flush (one 1-B READ
        after the last read-write record's backup WRITE, FORD RFLUSH 2) makes durable every earlier
        WRITE of the coordinator's QP to that memory node: that backup, and any other record's
        primary or backup WRITE of the transaction that went to the same node. With SMART's
        placement (2 memory nodes, every table on both) every record of a committed transaction
        has its new version durable on the flushed node, while the copies on the other node (the
        primaries of the last record's tables, the backup of an Amalgamate's savings record: the
        brief's §1.5) revert to an older version if nothing else flushed them. Versions grow by
        one per commit, so the highest survivor is the newest committed value. The lock words do
        not survive cleanly (the C1 WRITE of LOCKED|INVISIBLE or INVISIBLE is flushed, the release
        is not): they are all cleared. Returns counts.

        Not covered: a transaction in flight at the failure (the rack kills memory nodes between
        steps, when every operation has returned; a coordinator crash is :meth:`recover`'s), and
        placements where a record has no replica on the flushed node (more than 2 memory nodes,
        or ``replicas = 1``, which FORD's selective flush never flushes)."""
        repaired = unlocked = 0
        for name, t in layout["tables"].items():
            reps = [cls._items(fabric, t, n, b) for n, b in t["replicas"]]
            iw = t["item_bytes"] // 8
            versions = np.stack([r[:, 4] for r in reps])
            best = versions.argmax(axis=0)
            live = reps[0][:, 0] != 0
            for i in np.nonzero(live)[0]:
                src = reps[int(best[i])][i]
                differs = any((r[i, [0, 1, 2, 4]] != src[[0, 1, 2, 4]]).any() or (r[i, 6:iw] != src[6:iw]).any()
                              for r in reps)
                locked = any(r[i, 5] != 0 for r in reps)
                if not differs and not locked:
                    continue
                repaired += bool(differs)
                unlocked += bool(locked and not differs)
                for r, (node, base) in zip(reps, t["replicas"]):
                    row = src.copy()
                    row[3] = r[i, 3]                  # each replica's own offset
                    row[5] = 0
                    w = cls._word(t, base, i)
                    fabric.memory[node].host64[w:w + iw] = row
        return {"repaired": repaired, "unlocked": unlocked}

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict):
        from .client import FordClient
        return FordClient(fabric, layout, thread, cls.check_options(dict(options or {}), f"system {cls.name!r}"))


def _free_slot(mem, bucket_off: int, ib: int):
    for s in range(SLOTS_PER_BUCKET):
        off = bucket_off + s * ib
        if int(mem[off + TABLE_ID_OFF:off + TABLE_ID_OFF + 8].view(np.uint64)[0]) == 0:
            return s
    return None


__all__ = ["FordSystem", "FAULTS", "KEY_OFF", "LOCK_OFF", "VERSION_OFF"]
