"""FlexKV-OP (FlexKV §5.3, Fig. 17): FlexKV with *ownership partitioning* instead of proxying.

Every request is forwarded to the compute node that owns the key's partition (by hash: partition
``p`` belongs to compute node ``p mod C``), which serves it whole: with its local index when the
partition is offloaded, on the memory nodes' one-sided path otherwise, and with its own cache of
KV pairs, which needs no coherence because no other node ever touches the key. A client whose own
node owns the key serves it in place. What it costs compared with FlexKV: every remote key pays a
forwarding RPC, and the owner's proxy threads (``proxy_threads`` x ``proxy_coroutines``) do the
work of every client in the rack for its keys.

The serving side is :meth:`FlexKVOpClient.serve`, run by a client thread for its own node's keys
and by an *executor* (a FlexKVOpClient on a proxy thread) for requests from other nodes.
Algorithm 1 does not apply (ownership is the hash); the offload ratio (fixed or tuned by Algorithm
2) still decides which of its partitions each owner keeps in its local index.
"""

from __future__ import annotations

import struct

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.hashing import hash64
from nodes.systems.race.client import RETRY_LIMIT
from nodes.systems.race.layout import FP_SHIFT
from shm.rpc import rpc

from .cache import PAIR
from .client import GET, FlexKVClient
from .layout import is_pair, pick_tombstone, tombstone
from .node import state_of
from .proxy import OP_DELETE, OP_INSERT, OP_UPDATE, candidates
from .system import FlexKVSystem, start_node

M_OP = 7
OP_REQ = struct.Struct("<BH")            # op, key length; then the key and the value
R_NONE, R_FALSE, R_TRUE, R_VALUE = 0, 1, 2, 3
#: a free slot or tombstone of the key's buckets: the bucket scan's free-slot field
_FREE_SHIFT = 6


class FlexKVOpClient(FlexKVClient):
    def _op(self, co, op, key, value):
        if type(key) is not bytes:
            key = bytes(key)
        h = hash64(key)
        p = h & self.pmask
        cns = self.layout["cn_nodes"]
        owner = cns[p % len(cns)]
        if owner == self.thread.owner.node:
            return (yield from self.serve(co, op, key, value, h, p))
        if op == GET:
            self.gets += 1
        self.thread.cpu(self.hash_ns(len(key)))
        self.proxied_ops += 1
        self.write_rpcs += op != GET
        self.read_rpcs += op == GET
        reply = yield from rpc(co, self.names[owner], OP_REQ.pack(op, len(key)) + key + (value or b""), method=M_OP,
                               timeout_ns=self._timeout_ns, retries=self._retries)
        kind = reply[0]
        if kind == R_VALUE:
            return bytes(reply[1:])
        return None if kind == R_NONE else kind == R_TRUE

    def serve(self, co, op, key, value, h, p):
        """Generator: run ``op`` on this (the owner) node, on its local index or one-sidedly."""
        st = self.st
        yield from st.enter(p)
        try:
            st.count(p, op != GET)
            if int(st.active[p]) == self.thread.owner.node:
                return (yield from self._local(co, op, key, value, h, p))
            self.one_sided_ops += 1
            return (yield from self._one_sided(co, op, key, value, h, p))
        finally:
            st.leave(p)

    def _local(self, co, op, key, value, h, p):
        """An operation on an offloaded partition this node owns: the local index decides, the
        memory node's slot is written before the local commit (as a proxy does)."""
        st = self.st
        cache = st.cache
        cpu = self.fabric.profile.cpu
        self.proxied_ops += 1
        if op == GET:
            t0 = self._clock()
            self.gets += 1
            self.thread.cpu(self._search_ns + self.hash_ns(len(key)))
            e = cache.lookup(key, self.env.now)
            if e is not None and e.kind == PAIR:
                self.pair_hits += 1
                self.get_pair_ns += self._clock() - t0
                return e.value
        else:
            self.count_write(op, key)
        for _ in range(RETRY_LIMIT):
            while key in st.key_locks:                       # another coroutine is writing the key
                self.busy += 1
                yield self.backoff(0)
            local = st.local.get(p)
            if local is None or int(st.active[p]) != self.thread.owner.node:
                return (yield from self._one_sided(co, op, key, value, h, p))   # reassigned meanwhile
            self.thread.cpu(4 * cpu.local_read_ns_per_line)
            pairs = candidates(local, self.directory, p, h, st.scan_out)
            hds = [(s, w, self.read_block(co, w)) for s, w in pairs]
            if hds:
                yield co.sync()
            found, torn = None, False
            for s, w, hd in hds:
                v, _invalid = self._check(key, hd)
                if v >= 0:
                    found = (s, w, self._value(key, hd, v))
                    break
                torn |= v == -2
            if torn and found is None:
                self.torn_reads += 1
                continue
            if op == GET:
                self.get_other += 1
                self.get_other_ns += self._clock() - t0
                if found is None:
                    return None
                if st.kv_cache:
                    cache.put(key, PAIR, p, found[0], found[1], found[2], self.env.now)
                return found[2]
            if key in st.key_locks:
                continue
            if (found is None) != (op == OP_INSERT):
                return False
            if op == OP_INSERT:
                slot = self._local_free(local, p, h)
                if slot is None:
                    yield from self.no_free_slot(co, key)
                    continue
                expected = int(local[slot])
            else:
                slot, expected = found[0], found[1]
            if (p, slot) in st.slot_locks:
                continue
            st.key_locks.add(key)
            st.slot_locks.add((p, slot))
            try:
                new = (yield from self.new_block(co, key, value, h)) if op != OP_DELETE else \
                    tombstone(h >> FP_SHIFT, self.env.now)
                at = self._slot_gaddr(p, slot)
                co.write(at, new.to_bytes(8, "little"))
                self.queue_slot_copies(co, at, new)                 # the index's backups (replicas)
                yield co.sync()
                local[slot] = new                                   # the commit
                self.thread.cpu(cpu.local_cas_ns)
            finally:
                st.key_locks.discard(key)
                st.slot_locks.discard((p, slot))
            cache.discard(key)
            if op != OP_DELETE and st.kv_cache:
                cache.put(key, PAIR, p, slot, new, bytes(value), self.env.now)
            if is_pair(expected):
                self.retire_block(expected)
            return True
        raise SystemGaveUp(f"FlexKV-OP: operation on key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _local_free(self, local, p, h):
        """A slot of the key's buckets an insert may take: empty, or a tombstone past its lease."""
        from nodes.systems.race.bucket import SAME, probe, scan, slot_offset
        d = self.directory
        off_a, off_b, flags = probe(h, 0, d.n_main)
        r = scan(local, off_a >> 3, off_b >> 3, flags, h >> FP_SHIFT, d.expected[p], self.st.scan_out)
        free = (r >> _FREE_SHIFT) - 1
        if free >= 0:
            return slot_offset(free, off_a, off_b) >> 3
        slots = ((first + s, int(local[first + s]))
                 for first in (slot_offset(b * 7, off_a, off_b) >> 3 for b in range(4 if flags & SAME != SAME else 2))
                 for s in range(7))
        slot, _w, self._tomb_wait_ns = pick_tombstone(slots, self.env.now, self._lease_ns, self._drift)
        return slot


# -- the owner's side of a forwarded request ---------------------------------------------------------

def _executor(ctx, req) -> FlexKVOpClient:
    """The FlexKVOpClient of this proxy thread (made on first use). Its thread index follows the
    node's client threads, so its epoch announcements never share a slot with theirs."""
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    thread = req.co.thread
    ex = st.executors.get(id(thread))
    if ex is None:
        thread.index = ctx.cores.n + len(st.executors)
        ex = st.executors[id(thread)] = FlexKVOpClient(ctx.fabric, ctx.layout, thread, ctx.layout["options"])
    return ex


def handle_op(ctx, req):
    ex = _executor(ctx, req)
    op, n = OP_REQ.unpack_from(req.payload)
    key = bytes(req.payload[OP_REQ.size:OP_REQ.size + n])
    value = bytes(req.payload[OP_REQ.size + n:]) if op in (OP_INSERT, OP_UPDATE) else None
    h = hash64(key)
    p = h & ex.pmask
    out = yield from ex.reclaim.run(ex.serve(req.co, op, key, value, h, p))
    if op == GET:
        return bytes([R_NONE]) if out is None else bytes([R_VALUE]) + out
    return bytes([R_TRUE if out else R_FALSE])


def start_op_node(ctx):
    """``servers["compute"]`` of FlexKV-OP: FlexKV's, plus the forwarded operations, on coroutines."""
    return start_node(ctx, {M_OP: handle_op})


class FlexKVOpSystem(FlexKVSystem):
    name = "flexkv-op"
    description = ("FlexKV-OP: FlexKV with ownership partitioning: every request is forwarded to the compute "
                   "node owning the key, which serves it with its local index or one-sidedly and its own cache")
    servers = {"compute": start_op_node}

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        layout = super().setup(fabric, memory_nodes, options, capacity)
        layout["options"]["rank_hotness"] = False           # ownership is the hash (p mod C)
        return layout


