"""A serializability checker for transaction histories (Adya's direct serialization graph).

The linearizability checker (checker.py) judges one key's operations against a register. A
transaction touches several records, so its correctness condition is *serializability*: the
committed transactions must be equivalent to some serial order. With the versions each read saw
and each write installed recorded (nodes/systems/txn.py ``TxnRecord``), the check needs no search:
build the direct serialization graph (Adya, "Weak Consistency", MIT 1999, §3; what Elle infers for
Jepsen) over the committed transactions, with an edge for each dependency

* **ww** (write-write): Ti installed version v of a record, Tj the version that follows it;
* **wr** (write-read): Ti installed version v, Tj read v;
* **rw** (read-write, anti-dependency): Ti read v, Tj installed the version that follows v;

and the history is serializable (conflict-serializable, which is what a lock-and-validate design
guarantees) iff the graph has no cycle. A cycle is returned as the counterexample: the
transactions around it, each edge with its kind and record, as Elle reports a G0/G1c/G2 cycle.

A record's versions are ordered by their numbers (FORD as SMART runs it writes version + 1 at
commit, so the order is the commit order per record). Before the graph, the history's own
consistency is checked, each finding an *anomaly* naming the transactions:

* two committed transactions installed the same version of a record (a **lost update**: both
  read v and wrote v + 1, which a lock or validation should have prevented);
* a committed transaction read a version nobody committed (an aborted or in-flight write seen: a
  **dirty read**), unless a coordinator that crashed mid-commit (status "unknown") installed it;
* (with the final state) a record's value is not the value its last installer wrote, or a
  version is newer than any committed install (an aborted attempt left something behind).

Version 0 is the loaded value (the loader is transaction 0).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

INITIAL = 0          # the version the loader installs; its "transaction" is INIT_TXN
INIT_TXN = "init"


class Edge(NamedTuple):
    src: object
    dst: object
    kind: str            # "ww", "wr" or "rw"
    record: tuple        # (table, key)
    version: int


class SerializabilityReport(NamedTuple):
    ok: bool
    committed: int
    edges: int
    cycle: tuple         # edges around a cycle, () if none
    anomalies: tuple     # one line each
    message: str


def _name(rec) -> str:
    return f"T{rec.txn_id:#x}({rec.name})" if rec is not None else INIT_TXN


def check_history(history: Iterable, final: dict | None = None, max_anomalies: int = 10) -> SerializabilityReport:
    """Check ``history`` (``TxnRecord``s of every attempt; aborted ones are ignored but for what
    they may have leaked) and, if given, the ``final`` state ``{(table, key): (version, value bytes)}``
    read from the primaries at quiescence."""
    recs = list(history)
    committed = [r for r in recs if r.status == "committed"]
    unknown = [r for r in recs if r.status == "unknown"]
    by_id = {r.txn_id: r for r in committed}
    anomalies: list[str] = []

    # who installed each version of each record
    installer: dict[tuple, dict[int, object]] = {}
    values: dict[tuple, dict[int, bytes]] = {}
    for r in committed:
        for table, key, version, value in r.writes:
            vers = installer.setdefault((table, key), {})
            if version in vers:
                other = by_id[vers[version]]
                anomalies.append(f"lost update: {_name(other)} and {_name(r)} both installed version {version} "
                                 f"of {table}[{key}]")
                continue
            vers[version] = r.txn_id
            values.setdefault((table, key), {})[version] = bytes(value)
    maybe = {(t, k, v) for r in unknown for t, k, v, _ in r.writes}

    order = {rk: sorted(vs) for rk, vs in installer.items()}

    def next_after(rk, v):
        for w in order.get(rk, ()):
            if w > v:
                return w
        return None

    edges: list[Edge] = []
    for r in committed:
        for table, key, v in r.reads:
            rk = (table, key)
            w = installer.get(rk, {}).get(v)
            if w is None and v != INITIAL:
                if (table, key, v) not in maybe:
                    anomalies.append(f"dirty read: {_name(r)} read version {v} of {table}[{key}], which no "
                                     f"committed transaction installed")
            elif w is not None and w != r.txn_id:
                edges.append(Edge(w, r.txn_id, "wr", rk, v))
            nv = next_after(rk, v)
            if nv is not None:
                w2 = installer[rk][nv]
                if w2 != r.txn_id:
                    edges.append(Edge(r.txn_id, w2, "rw", rk, nv))
        for table, key, v, _ in r.writes:
            rk = (table, key)
            prev = [x for x in order.get(rk, ()) if x < v]
            if prev:
                w = installer[rk][prev[-1]]
                if w != r.txn_id:
                    edges.append(Edge(w, r.txn_id, "ww", rk, v))

    if final is not None:
        for rk, (version, value) in final.items():
            vs = values.get(rk, {})
            if version == INITIAL and not vs:
                continue
            if version not in vs and version != INITIAL:
                if (rk[0], rk[1], version) not in maybe:
                    anomalies.append(f"final state: {rk[0]}[{rk[1]}] is at version {version}, which no committed "
                                     f"transaction installed (newest committed: {max(vs) if vs else INITIAL})")
                continue
            if max(vs) != version:   # (INITIAL included: a committed install was lost)
                anomalies.append(f"final state: {rk[0]}[{rk[1]}] is at version {version} but version {max(vs)} "
                                 f"was committed (by {_name(by_id[installer[rk][max(vs)]])})")
            elif version in vs and bytes(value) != vs[version]:
                anomalies.append(f"final state: {rk[0]}[{rk[1]}] version {version} holds {bytes(value).hex()}, "
                                 f"not what {_name(by_id[installer[rk][version]])} wrote "
                                 f"({vs[version].hex()})")

    cycle = find_cycle(edges)
    ok = not cycle and not anomalies
    if ok:
        msg = f"serializable: {len(committed)} committed transactions, {len(edges)} dependencies, no cycle"
    else:
        parts = []
        if cycle:
            parts.append("cycle " + describe_cycle(cycle, by_id))
        parts.extend(anomalies[:max_anomalies])
        if len(anomalies) > max_anomalies:
            parts.append(f"... {len(anomalies) - max_anomalies} more anomalies")
        msg = "NOT serializable: " + "; ".join(parts)
    return SerializabilityReport(ok, len(committed), len(edges), tuple(cycle), tuple(anomalies), msg)


def find_cycle(edges: list[Edge]) -> list[Edge]:
    """A cycle of the graph as its edges in order (the first one found by an iterative DFS), or []."""
    out: dict[object, list[Edge]] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    WHITE, GREY, BLACK = 0, 1, 2
    color: dict = {}
    for root in list(out):
        if color.get(root, WHITE) != WHITE:
            continue
        path: list[Edge] = []            # the edges from root to the node on top of the stack
        stack = [(root, iter(out.get(root, ())))]
        color[root] = GREY
        while stack:
            node, it = stack[-1]
            e = next(it, None)
            if e is None:
                color[node] = BLACK
                stack.pop()
                if path:
                    path.pop()
                continue
            c = color.get(e.dst, WHITE)
            if c == GREY:                # back edge: the cycle is the path from e.dst, plus e
                start = 0
                for i, pe in enumerate(path):
                    if pe.src == e.dst:
                        start = i
                        break
                else:
                    start = len(path)
                return path[start:] + [e]
            if c == WHITE:
                color[e.dst] = GREY
                path.append(e)
                stack.append((e.dst, iter(out.get(e.dst, ()))))
    return []


def describe_cycle(cycle: list[Edge], by_id: dict) -> str:
    def n(t):
        return _name(by_id.get(t)) if t != INIT_TXN else INIT_TXN
    return " -> ".join(f"{n(e.src)} -{e.kind} {e.record[0]}[{e.record[1]}]@v{e.version}->" for e in cycle) + \
        f" {n(cycle[0].src)}"
