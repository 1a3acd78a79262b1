"""``dpa-store``: DPA-Store (OSDI'26) on the rack -- an ordered KV store served by DPA threads.

Where its parts run (docs/dpastore.md has the whole design):

* **clients** on the client nodes (``cl0``..): stateless; a key's hash picks the traverser's UDP
  port (:mod:`.wire`); with ``hot_switch`` a client node moves a share of a hot traverser's GETs
  to an alternative one (:mod:`.hotswitch`);
* **traversers** on ``dpa0``: one per RX queue the host's NIC steers a port to; they walk the
  learned index (or, with ``index = "btree"``, the B+-tree baseline: :mod:`.inner`) in DPA
  memory and DMA keys and values from the host (:mod:`.traverser`);
* **stitchers** on ``dpa0`` too, the last ``stitchers`` hardware threads, on a core of their own
  (``stitcher_core = "dedicated"``, the paper's plan) or among the traversers (``"shared"``, the
  paper's -14 % INSERT case) (:mod:`.stitcher`);
* **patchers** on ``cn0``, the DPA's host, each on a host core of its own (:mod:`.host`).

``setup`` carves the DPA region (all of ``dpa0``'s memory), the host's control block, patch and
stitch rings, the mirror and the heap in ``cn0``'s memory, and builds the empty tree (a root
over one empty leaf) through the bulk-load path; ``bulk_load`` replaces it with a tree over the
loaded pairs.
"""

from __future__ import annotations

from nodes.systems.api import Option, SystemGaveUp
from nodes.systems.dpa_kv.datagram import DatagramSystem, request_options
from shm.fabric import REGION_HOST
from shm.steering import SteerRule

from . import layout as L
from . import wire as W
from .hotswitch import REHASH
from .inner import INDEXES

def _ring_record(lay_value_max: int) -> int:
    return -(-(8 + L.LeafGeometry.of(lay_value_max).buffer_bytes + 8) // 8) * 8


class Waker:
    """Park or poll. Co-located (one process, shared events), an idle actor parks on a bell its
    producer rings; in a rack of processes no event crosses processes, so it polls every
    ``poll_ns`` and ends once the rack has stopped (``ctx.stopped``) and it has nothing left."""

    def __init__(self, env, stopped, poll_ns: int):
        self.env, self.stopped, self.poll_ns = env, stopped, poll_ns
        self.bell = None
        self.colocated = False
        self.rung = False

    def ring(self) -> None:
        self.rung = True
        if self.bell is not None and not self.bell.triggered:
            self.bell.succeed()

    def wait(self):
        """The event to yield while idle, or None: the rack has stopped, end the actor."""
        if self.rung:
            self.rung = False
            return self.env.timeout(0)
        if self.colocated:
            if self.bell is None or self.bell.triggered:
                self.bell = self.env.event()
            return self.bell
        if self.stopped is not None and self.stopped.triggered:
            return None
        return self.env.timeout(self.poll_ns)


def _host_server(ctx):
    """cn0: the patchers, which take patch requests, change the mirror, and queue stitches."""
    lay = ctx.layout
    if ctx.index != lay["host"]:
        return []
    from nodes.actors import Cores
    from shm.dmaring import DmaRing
    from .host import STITCH, HostTree
    tree = HostTree(ctx.fabric, lay)
    ring = DmaRing.attach(ctx.fabric, ctx.index, lay["patch_ring"])
    rings = [DmaRing.attach(ctx.fabric, ctx.index, base) for base in lay["stitch_rings"]]
    ctx.rings.extend([ring] + rings)
    cores = Cores(ctx.env, lay["patchers"], ctx.profile.cpu.ghz)
    env = ctx.env
    tree.waker = Waker(env, ctx.stopped, lay["poll_ns"])
    tree.flush_waker = Waker(env, ctx.stopped, lay["poll_ns"])
    tree.stitch_wakers = []                 # co-located: the stitchers' bells (set by the DPA side)
    tree.cores = cores
    ctx.directory["dpastore.host"] = tree

    class _Cpu:                             # what DmaRing.host_take charges its reads and CAS to
        @staticmethod
        def cpu(ns):
            cores.charge(ns)

    def flush() -> bool:
        """Stitches go into their rings in queue order (a full ring keeps the rest queued);
        True if some are still waiting for room."""
        for q, r, s in zip(tree.queues, rings, range(len(rings))):
            pushed = False
            while q and r.host_push(STITCH.pack(*q[0]), _Cpu):
                q.popleft()
                pushed = True
            if pushed and tree.stitch_wakers:
                tree.stitch_wakers[s].ring()
        return any(tree.queues)

    def patcher():
        while True:
            tree.reclaim()
            rec = ring.host_take(_Cpu)
            if rec is None:
                ev = tree.waker.wait()
                if ev is None:
                    return
                yield ev
                continue
            leaf = int.from_bytes(rec[:8], "little")
            cores.charge(tree.patch_cost_ns(leaf))
            yield env.timeout(0)
            tree.patch(leaf, rec[8:])
            if flush():
                tree.flush_waker.ring()

    def flusher():                          # a full stitch ring: keep offering the rest
        while True:
            if flush():
                yield env.timeout(lay["poll_ns"])
                continue
            ev = tree.flush_waker.wait()
            if ev is None:
                return
            yield ev

    return [patcher() for _ in range(lay["patchers"])] + [flusher()]


def _dpa_server(ctx):
    """dpa0: traversers on the steered queues, stitchers on the last threads."""
    lay = ctx.layout
    if ctx.name != lay["dpa"]:
        return []
    from shm.dmaring import DmaRing
    from shm.verbs import Context
    from .stitcher import Stitcher
    from .traverser import PricedCache, Traverser
    n_trav, n_st = lay["traversers"], lay["stitchers"]
    if n_trav + n_st > ctx.dpa.limit:
        raise SystemGaveUp(f"dpa-store: {n_trav} traversers and {n_st} stitchers need {n_trav + n_st} DPA threads; "
                           f"the rack's dpa.threads is {ctx.dpa.limit}")
    queues = {q.id: q for q in ctx.queues}
    per_core = ctx.profile.dpa.threads_per_core
    trav_cores = -(-n_trav // per_core)
    verbs = Context(ctx.host, ctx.index, low_latency=0, doorbells=n_trav)     # a doorbell per thread
    patch_ring = DmaRing.attach(ctx.fabric, lay["host"], lay["patch_ring"])
    gens, travs, stitchers = [], [], []
    for i in range(n_trav):
        th = ctx.dpa.thread(core=i // per_core)
        sock = ctx.udp.socket(ctx.index, W.BASE_PORT + i, context=verbs)
        cache = PricedCache(lay, i, ctx.memory.host64, lay["seed"] + i) if lay["hot_cache"] else None
        t = Traverser(ctx, th, i, queues[f"{ctx.name}.t{i}"], sock, lay, patch_ring, cache)
        travs.append(t)
        gens.append(t.run())
    for s in range(n_st):
        if lay["stitcher_core"] == "dedicated":
            core = trav_cores
            if core >= ctx.profile.dpa.cores:
                raise SystemGaveUp(f"dpa-store: no DPA core left for the stitchers ({n_trav} traversers use "
                                   f"{trav_cores} of {ctx.profile.dpa.cores}); use stitcher_core = \"shared\"")
        else:                           # the traversers' cores with a free hardware thread, the last first
            room = [c for c in range(trav_cores - 1, -1, -1) if len(ctx.dpa.cores[c].threads) < per_core]
            if not room:
                raise SystemGaveUp(f"dpa-store: stitcher_core = \"shared\" needs a free thread on a traverser "
                                   f"core; {n_trav} traversers fill {trav_cores} cores: use fewer traversers")
            core = room[0]
        ring = DmaRing.attach(ctx.fabric, lay["host"], lay["stitch_rings"][s])
        st = Stitcher(ctx, ctx.dpa.thread(core=core), s, ring, lay, n_trav,
                      Waker(ctx.env, ctx.stopped, lay["poll_ns"]))
        stitchers.append(st)
        gens.append(st.run())
    ctx.directory["dpastore.dpa"] = (travs, stitchers)
    host = ctx.directory.get("dpastore.host")
    if host is not None:                    # co-located: park idle actors on bells, ring them on work
        host.waker.colocated = host.flush_waker.colocated = True
        host.stitch_wakers = [st.waker for st in stitchers]
        for st in stitchers:
            st.waker.colocated = True
        for t in travs:
            t.on_patch = host.waker.ring
    return gens


class DpaStoreSystem(DatagramSystem):
    name = "dpa-store"
    description = ("DPA-Store: a learned-index ordered KV store on BlueField-3 DPA threads (clients -> steered "
                   "UDP -> traversers; writes via insert buffers, host patchers and DPA stitchers)")
    paper = "DPA-Store: An Ordered Network Data Path Key-Value Store (OSDI'26)"
    supports_scan = True
    options = (
        Option("value_max", 1024, "largest value in bytes (a value slot; 8 = the paper's 8-byte values)",
               minimum=1, maximum=1400),
        Option("traversers", 6, "DPA traverser threads, one steered UDP port each (the paper: 176)",
               minimum=1, maximum=L.MAX_TRAVERSERS),
        Option("stitchers", 4, "DPA stitcher threads (the last hardware threads of [dpa] threads)",
               minimum=1, maximum=L.MAX_STITCHERS),
        Option("patchers", 4, "host patcher threads on the DPA's host, a core each", minimum=1, maximum=64),
        Option("stitcher_core", "dedicated", "stitchers on a DPA core of their own, or among the traversers",
               choices=("dedicated", "shared")),
        Option("leaf_eps", 8, "error bound of a leaf's model: a leaf search DMAs at most 2 eps + 1 keys "
               "(8: at most 3 lines, the paper's constraint; docs/dpastore.md)", minimum=1, maximum=64),
        Option("inner_eps", 4, "error bound of an inner segment's model (4: at most 2 lines of pivots)",
               minimum=1, maximum=64),
        Option("prefetch", True, "prefetch the next lines while the model computes (the paper's +19 %)"),
        Option("hot_cache", True, "the per-traverser hot-entry cache (clients send its hints)"),
        *request_options(timeout_us=200.0),
        Option("hot_switch", False, "clients move a growing share of a hot traverser's GETs to an alternative "
               "traverser, without cache hints (the paper's protection against hot threads, §3.1.3; off by "
               "default: the published rows do not say it was on; docs/dpastore.md \"Hot threads\")"),
        Option("hot_threshold", 0.05, "hot_switch: share of a client's replies from one traverser that came late "
               "(the request timed out and was sent again) above which it moves more of that traverser's GETs "
               "(ASSUMPTION: the paper names a threshold, not its value)", minimum=0.0, maximum=0.99),
        Option("hot_window", 16, "hot_switch: replies from one traverser per decision of a client (ASSUMPTION: "
               "the paper gives no interval)", minimum=1, maximum=100_000),
        Option("hot_step", 0.125, "hot_switch: share of a traverser's GETs moved more (or fewer) per decision, "
               "at most 1 - hot_step moved (ASSUMPTION: the paper says only \"gradually\")",
               minimum=0.01, maximum=0.5),
        Option("hot_rehash", "key+client", "hot_switch: the alternative traverser is a second hash of the key and "
               "the client thread (a hot key's GETs spread over many threads) or of the key alone (they all go "
               "to one other thread) (ASSUMPTION: the paper says \"an alternative hashing scheme\")",
               choices=REHASH),
        Option("seed", 1, "seed of the hot-entry caches' random admission", minimum=0, maximum=2**31),
        Option("index", "learned", "the inner nodes: the learned index, or the B+-tree baseline of Fig. 12 "
               "(2 KB nodes of 128 keys, binary search; docs/dpastore.md)", choices=INDEXES),
    )
    servers = {"compute": _host_server, "dpa": _dpa_server}
    rack_tables = {"rack": {"profile": "bf3"}, "dpa": {"hosts": ["cn0"], "threads": 10, "memory": "16MiB"},
                   "compute": {"memory": "96MiB"},
                   "client": {"count": 2}}

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        if options.get("hot_switch") and int(options["traversers"]) < 2:
            raise ValueError(f"system.hot_switch = true needs traversers >= 2 (an alternative to move GETs to); "
                             f"traversers = {options['traversers']}")

    @classmethod
    def steering(cls, spec):
        """Port BASE + i goes to traverser i's queue (the last ``stitchers`` threads have none)."""
        if not spec.dpa.hosts:
            return []
        n = min(int(spec.system.options.get("traversers", 6)), spec.dpa.threads)
        return [SteerRule(W.BASE_PORT + i, f"dpa0.t{i}", port_hi=W.BASE_PORT + i, spread="port", node=spec.dpa.hosts[0])
                for i in range(n)]

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        from shm.dmaring import DmaRing
        dpa = cls.dpa_index(fabric)
        host = fabric.node_index(fabric.nodes[dpa].nic_of)
        value_max = int(options["value_max"])
        geo = L.LeafGeometry.of(value_max)
        have = fabric.nodes[dpa].memory_bytes
        dpa_bytes = have - min(4 << 20, have // 8)      # the rest: the DPA's own sockets and queues
        region = fabric.allocate(dpa, dpa_bytes)
        host_ctl = fabric.allocate(host, L.HOST_CONTROL_BYTES)
        patch_ring = DmaRing.layout(fabric, host, 256, _ring_record(value_max)).base
        stitch_rings = [DmaRing.layout(fabric, host, 1024, 40).base for _ in range(options["stitchers"])]
        mirror = fabric.allocate(host, dpa_bytes)
        # the heap takes the host's free memory but a reserve for its own queues: leaves' arrays,
        # the snapshots COPYs read and replaced blocks waiting for their epoch all live there
        free = fabric.region_bytes(host, REGION_HOST) - int(fabric.memory[host].alloc[0])
        heap_bytes = free - min(4 << 20, free // 8)
        need = (-(-max(capacity, 1) // 96) + 16) * (L.HOST_KEYS_BYTES + geo.host_values_bytes)
        if heap_bytes < need:
            raise SystemGaveUp(f"dpa-store: the host ({fabric.nodes[host].name}) has {max(heap_bytes, 0) / 2**20:.1f} MiB "
                               f"left for the leaves' arrays of {capacity:,} keys, which need {need / 2**20:.1f} MiB: "
                               f"raise compute.memory")
        try:
            heap = fabric.allocate(host, heap_bytes)
        except MemoryError as e:
            raise SystemGaveUp(f"dpa-store: the host's memory cannot hold the leaves' arrays for {capacity:,} keys "
                               f"({heap_bytes / 2**20:.1f} MiB): raise compute.memory ({e})") from None
        lay = {"dpa": "dpa0", "dpa_index": dpa, "host": host, "server": fabric.nodes[dpa].nic_of,
               "dpa_region": region, "dpa_bytes": dpa_bytes, "host_ctl": host_ctl, "patch_ring": patch_ring,
               "stitch_rings": stitch_rings, "mirror": mirror, "heap": heap, "heap_bytes": heap_bytes,
               "value_max": value_max, "stitchers": int(options["stitchers"]), "patchers": int(options["patchers"]),
               "stitcher_core": options["stitcher_core"], "prefetch": bool(options["prefetch"]),
               "hot_cache": bool(options["hot_cache"]), "seed": int(options["seed"]), "poll_ns": 1000,
               "index": options["index"], "leaf_eps": int(options["leaf_eps"]),
               "inner_eps": int(options["inner_eps"])}
        lay["traversers"] = int(options["traversers"])
        cls._build(fabric, lay, [], [])
        return lay

    @staticmethod
    def _build(fabric, lay: dict, keys, values) -> int:
        """The tree over sorted pairs, through COPY and CONNECT stitches applied at once; returns
        the bytes the stitchers copied (what the copy path would take ``host_copy_ns`` of)."""
        from .host import HostTree
        from .stitcher import apply_now
        tree = HostTree(fabric, lay)
        plan = tree.build(keys, values)
        dm = fabric.memory[lay["dpa_index"]]
        return apply_now(dm.host, dm.host64, fabric.memory[lay["host"]], tree.geo, plan.stitches)

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        items = {}
        for key, value in pairs:
            k = W.key_int(bytes(key))
            if len(value) > layout["value_max"] or (layout["value_max"] == 8 and (
                    len(value) != 8 or int.from_bytes(value, "little") >= (1 << 64) - 2)):
                raise SystemGaveUp(f"dpa-store: a value of {len(value)} B does not fit system.value_max = "
                                   f"{layout['value_max']} (8: exactly 8 bytes, not the two reserved words)")
            if k in items:
                raise SystemGaveUp(f"dpa-store: bulk load of key {k:#x} twice")
            items[k] = bytes(value)
        keys = sorted(items)
        cls._reset(fabric, layout)
        layout_bytes = cls._build(fabric, layout, keys, [items[k] for k in keys])
        fabric.memory[layout["host"]].host64[layout["host_ctl"] // 8 + 2] = layout_bytes

    @staticmethod
    def _reset(fabric, lay: dict) -> None:
        """Forget the empty tree setup built (a bulk load starts from nothing); refuse a used one."""
        from .host import HostTree
        tree = HostTree(fabric, lay)
        path, leaf = tree.descend(0)
        meta = L.read_leaf(tree.hb, tree.mirror(leaf))
        dm = fabric.memory[lay["dpa_index"]]
        reserved = int(dm.host64[(leaf + tree.geo.counters) // 8])
        if len(path) != 1 or meta.count or reserved or len(tree.inner(path[0][0])[1]) != 1:
            raise SystemGaveUp("dpa-store: a bulk load needs the empty store setup made; this one holds keys")
        root_word = lay["dpa_region"] // 8 + L.CTL_ROOT
        dm.host64[root_word] = 0
        tree.hw[tree.mirror(lay["dpa_region"]) // 8 + L.CTL_ROOT] = 0

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return W.DpaStoreClient(layout, thread, options)


