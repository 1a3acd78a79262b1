#!/usr/bin/env python3
"""Print the hardware-profile keys as a markdown table, generated from the schema metadata.

    python scripts/profile_table.py              # key | type | unit | range | meaning
    python scripts/profile_table.py --values     # key | unit | one column per shipped profile
    python scripts/profile_table.py --envelope   # back-of-envelope numbers implied by each profile

``--envelope`` evaluates the verb pipeline described in docs/profiles.md with no contention and no
queueing (depth-1 latencies, per-resource rate ceilings). It checks that a profile's starting values
are self-consistent and near the published numbers they were derived from; it is *not* the timing
model, whose benchmark (published vs emulated) is the real calibration report.

docs/profiles.md embeds the output of the first two forms; re-run and paste after a schema change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shm.profile import list_profiles, load_profile, schema_fields  # noqa: E402
from shm.profile_schema import Profile  # noqa: E402


def _num(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and v >= 1 << 20 and (v & (v - 1)) == 0:
        return f"2^{v.bit_length() - 1}"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:,}" if isinstance(v, int) else str(v)


def schema_table() -> str:
    rows = ["| key | type | unit | range | meaning |", "|---|---|---|---|---|"]
    for key, typ, meta in schema_fields(optional=True):
        lo, hi = meta.get("min"), meta.get("max")
        rng = "" if lo is None and hi is None else f"{_num(lo)} .. {_num(hi)}"
        rows.append(f"| `{key}` | {typ.__name__} | {meta.get('unit', '')} | {rng} | {meta.get('doc', '')} |")
    return "\n".join(rows)


def values_table() -> str:
    names = list_profiles()
    profiles = [load_profile(n) for n in names]
    rows = ["| key | unit | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for key, _typ, meta in schema_fields(optional=True):
        section, field = key.split(".")
        # an optional section ([dpa]) that a profile does not have: "-"
        vals = [_num(getattr(getattr(p, section), field)) if getattr(p, section) is not None else "-"
                for p in profiles]
        rows.append(f"| `{key}` | {meta.get('unit', '')} | " + " | ".join(vals) + " |")
    return "\n".join(rows)


# ----------------------------------------------------------------------------- envelope


def _ser(nbytes: float, gbps: float) -> float:
    """ns to move nbytes at gbps."""
    return nbytes * 8 / gbps


def _pcie(p: Profile, overhead: float, payload: float = 0) -> float:
    """ns of PCIe: per-request bytes at pcie.gbps, payload at pcie.payload_gbps (as shm/nic.py)."""
    return _ser(overhead, p.pcie.gbps) + _ser(payload, p.pcie.payload_gbps)


def _wire(p: Profile, payload: int) -> float:
    """Serialisation of one message on one link (headers per MTU packet), as shm/nic.py books it:
    once on the sender's egress and once on the receiver's ingress."""
    packets = max(1, -(-payload // p.link.mtu_bytes))
    return _ser(payload + packets * p.link.header_bytes, p.link.gbps)


def _cpu_per_wr(p: Profile) -> float:
    return p.cpu.post_ns + p.cpu.wqe_ns + p.doorbell.lock_ns


def _to_requester(p: Profile) -> float:
    """Post of one WR until the requester unit starts it: CPU, doorbell, MMIO, WQE fetch."""
    return _cpu_per_wr(p) + p.pcie.mmio_ns + _pcie(p, p.pcie.bytes_per_wr) + p.pcie.latency_ns


def read_rtt(p: Profile, size: int = 8) -> float:
    """Depth-1 READ, uncontended, following shm/nic.py model_post: post -> doorbell lock -> MMIO ->
    WQE fetch -> requester unit -> wire -> responder unit -> host-memory read -> wire back ->
    PCIe write of data + CQE -> one poll."""
    return (
        _to_requester(p) + p.nic.req_read_ns
        + 2 * _wire(p, 0) + p.link.one_way_ns
        + p.nic.resp_read_ns + p.pcie.latency_ns + _pcie(p, p.pcie.resp_bytes_per_wr, size)
        + 2 * _wire(p, size) + p.link.one_way_ns
        + _pcie(p, 0, size) + p.pcie.latency_ns
        + p.cpu.poll_ns
    )


def write_rtt(p: Profile, size: int = 8, inline: bool = False) -> float:
    """Depth-1 signaled WRITE until its completion is polled (the ack comes back)."""
    payload = 0 if inline else p.pcie.latency_ns + _pcie(p, 0, size)
    return (
        _to_requester(p) + p.nic.req_write_ns + payload
        + 2 * _wire(p, size) + p.link.one_way_ns
        + p.nic.resp_write_ns
        + 2 * _wire(p, 0) + p.link.one_way_ns
        + p.pcie.latency_ns
        + p.cpu.poll_ns
    )


def write_one_way(p: Profile, size: int = 8, inline: bool = False) -> float:
    """Post of a WRITE until its data is in remote host memory."""
    payload = 0 if inline else p.pcie.latency_ns + _pcie(p, 0, size)
    return (
        _to_requester(p) + p.nic.req_write_ns + payload
        + 2 * _wire(p, size) + p.link.one_way_ns
        + p.nic.resp_write_ns + _pcie(p, p.pcie.resp_bytes_per_wr, size) + p.pcie.latency_ns
    )


def atomic_rtt(p: Profile) -> float:
    """Depth-1 CAS/FAA: the responder's host-memory trip is the per-address slot hold."""
    n = p.nic
    return (
        _to_requester(p) + n.req_atomic_ns
        + 2 * _wire(p, 16) + p.link.one_way_ns
        + n.resp_atomic_ns + n.atomic_unit_ns + n.atomic_slot_ns
        + 2 * _wire(p, 8) + p.link.one_way_ns
        + _pcie(p, 0, 8) + p.pcie.latency_ns
        + p.cpu.poll_ns
    )


def _mops(units: float, ns: float) -> float:
    return float("inf") if ns == 0 else units / ns * 1e3


def rates(p: Profile) -> dict[str, float]:
    n, pc, ln = p.nic, p.pcie, p.link

    def bw(nbytes: float, gbps: float) -> float:  # Mops a bandwidth allows
        return gbps / (8 * nbytes) * 1e3

    def pcie(overhead: float, payload: float) -> float:  # Mops the PCIe pipe allows
        return 1e3 / _pcie(p, overhead, payload)

    return {
        "read8_out": min(_mops(n.requester_units, n.req_read_ns), pcie(pc.bytes_per_wr, 8),
                         bw(ln.header_bytes + 8, ln.gbps)),
        "write8_out": min(_mops(n.requester_units, n.req_write_ns), pcie(pc.bytes_per_wr, 8),
                          bw(ln.header_bytes + 8, ln.gbps)),
        "read8_in": min(_mops(n.responder_units, n.resp_read_ns), pcie(pc.resp_bytes_per_wr, 8),
                        bw(ln.header_bytes + 8, ln.gbps)),
        "read128_in": min(_mops(n.responder_units, n.resp_read_ns), pcie(pc.resp_bytes_per_wr, 128),
                          bw(ln.header_bytes + 128, ln.gbps)),
        "write8_in": min(_mops(n.responder_units, n.resp_write_ns), pcie(pc.resp_bytes_per_wr, 8),
                         bw(ln.header_bytes + 8, ln.gbps)),
        # random addresses: an atomic never waits for its address, so even with atomic_holds_unit it
        # keeps its responder unit only for its own unit time (shm/nic.py: the unit waits with it, not
        # through its read-modify-write)
        "atomic_nic": min(_mops(n.atomic_units, n.atomic_unit_ns), _mops(n.responder_units, n.resp_atomic_ns),
                          _mops(n.atomic_slots, n.atomic_slot_ns)),
        "atomic_same_addr": min(_mops(n.atomic_units, n.atomic_unit_ns), _mops(1, n.atomic_slot_ns),
                                _mops(n.responder_units, n.resp_atomic_ns)),
        "recv_in": _mops(n.responder_units, n.resp_recv_ns),
        "read1k_out": min(_mops(n.requester_units, n.req_read_ns), pcie(pc.bytes_per_wr, 1024),
                          bw(ln.header_bytes + 1024, ln.gbps)),
        "read8_out_thrashing": min(_mops(n.requester_units, n.req_read_ns),
                                   pcie(pc.bytes_per_wr + p.wqe_cache.miss_bytes, 8)),
    }


def thread_rate(p: Profile, depth: int) -> float:
    """Mops of one thread that posts `depth` READs, one ibv_post_send (and doorbell) each as SMART's
    bench does, then waits for all of them; per-QP in-order requester included."""
    c = max(_cpu_per_wr(p), p.nic.req_read_ns)
    return depth / ((depth - 1) * c + read_rtt(p)) * 1e3


# (metric, function of profile, published value, source) per shipped profile
def _published(name: str):
    r = rates
    common = [
        ("8 B READ RTT, depth 1 (us)", lambda p: read_rtt(p) / 1e3),
        ("8 B WRITE RTT / 2 (us)", lambda p: write_rtt(p) / 2e3),
        ("8 B WRITE post to remote memory (us)", lambda p: write_one_way(p) / 1e3),
        ("8 B FAA/CAS RTT (us)", lambda p: atomic_rtt(p) / 1e3),
        ("max 8 B READ, one NIC (Mops)", lambda p: r(p)["read8_out"]),
        ("max 8 B WRITE, one NIC (Mops)", lambda p: min(r(p)["write8_out"], r(p)["write8_in"])),
        ("max 1 KB READ, one NIC (Mops)", lambda p: r(p)["read1k_out"]),
        ("NIC-wide atomics (Mops)", lambda p: r(p)["atomic_nic"]),
        ("same-address atomics (Mops)", lambda p: r(p)["atomic_same_addr"]),
        ("inbound RECV (Mops)", lambda p: r(p)["recv_in"]),
    ]
    pub = {
        "cx6-200g": {
            "8 B READ RTT, depth 1 (us)": (2.35, "SMART artifact fig4a: 12 thr x depth 1 = 5.1 Mops"),
            "max 8 B READ, one NIC (Mops)": (110.0, "SMART 6.1 / 6.3"),
            "max 8 B WRITE, one NIC (Mops)": (90.0, "SMART artifact fig3b (90.6)"),
            "max 1 KB READ, one NIC (Mops)": (11.5, "SMART artifact fig12: Sherman, 1 KB leaves, 24-94 thr"),
            "same-address atomics (Mops)": (2.7, "rdma_bench (CX3 number, CALIBRATION)"),
        },
        "cx3-56g": {
            "8 B READ RTT, depth 1 (us)": (1.9, "perftest, 1.8-2.0"),
            "8 B WRITE RTT / 2 (us)": (1.0, "perftest ~1.0 (half round trip)"),
            "8 B FAA/CAS RTT (us)": (2.3, "perftest"),
            "NIC-wide atomics (Mops)": (2.45, "perftest single-QP FAA"),
            "same-address atomics (Mops)": (2.7, "rdma_bench"),
        },
        "cx5-100g": {
            "8 B WRITE RTT / 2 (us)": (1.0, "perftest ~1.0 (half round trip)"),
            "NIC-wide atomics (Mops)": (48.0, "rlib benchs (ROLEX artifact), ConnectX-4/5 class"),
        },
        "bf3": {},
    }.get(name, {})
    rows = []
    for metric, fn in common:
        v, src = pub.get(metric, (None, ""))
        rows.append((metric, fn, v, src))
    return rows


def envelope() -> str:
    out = []
    for name in list_profiles():
        p = load_profile(name)
        out.append(f"### {name}\n")
        out.append("| quantity | envelope | published | source |")
        out.append("|---|---|---|---|")
        for metric, fn, pubv, src in _published(name):
            pv = "" if pubv is None else f"{pubv:g}"
            out.append(f"| {metric} | {fn(p):.3g} | {pv} | {src} |")
        rr = rates(p)
        out.append(f"| 8 B READ, thrashing WQE cache (Mops) | {rr['read8_out_thrashing']:.3g} | "
                   f"{'54.4 (49.5% of 110)' if name == 'cx6-200g' else ''} | "
                   f"{'SMART 3.2, 96 thr x 32 OWRs' if name == 'cx6-200g' else ''} |")
        for d, pub12 in ((1, 5.1), (8, 21.8), (32, 40.4)):
            pv = f"{pub12:g}" if name == "cx6-200g" else ""
            out.append(f"| 12 threads x depth {d}, per-thread doorbell (Mops) | {12 * thread_rate(p, d):.3g} | "
                       f"{pv} | {'SMART artifact fig4a' if pv else ''} |")
        if name == "cx3-56g":
            cas = 3 * rr["atomic_nic"]  # FlexKV Fig. 3: 3 MNs serve the CAS
            out.append(f"| FlexKV: WRITE / CAS (3 MNs) | {3 * rr['write8_in'] / cas:.3g} | 10.1 | FlexKV 3.1 Fig. 3 |")
            out.append(f"| FlexKV: SEND&RECV (20 CNs) / CAS | {20 * rr['recv_in'] / cas:.3g} | 19.5 | FlexKV 3.1 Fig. 3 |")
            out.append(f"| FlexKV: LOCAL_CAS (200 clients) / CAS | {200e3 / p.cpu.local_cas_ns / cas:.4g} | 177.1 | "
                       f"FlexKV 3.1 Fig. 3 |")
            local_read = 200e3 / (2 * p.cpu.local_read_ns_per_line)  # 128 B = 2 lines per client
            out.append(f"| FlexKV: LOCAL_READ / RDMA_READ, 128 B | {local_read / (3 * rr['read128_in']):.3g} | 38.2 | "
                       f"FlexKV 3.2 |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--values", action="store_true", help="one column per shipped profile")
    g.add_argument("--envelope", action="store_true", help="back-of-envelope check of each shipped profile")
    a = ap.parse_args(argv)
    print(values_table() if a.values else envelope() if a.envelope else schema_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
