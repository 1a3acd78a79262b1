"""``dmrack reproduce flexkv``: FlexKV's own figures (:mod:`cluster.experiments.flexkv`) and its
comparison with Clover, FUSEE and Aceso (:mod:`cluster.experiments.flexkv_compare`), registered
as one reproduction.

Why a module of its own: the comparison builds on the FlexKV module's racks and points, so the
reproduction that lists both parts sits above the two of them (and neither imports the other's
listing).
"""

from __future__ import annotations

from cluster.experiments import flexkv as F
from cluster.experiments import flexkv_compare as C
from cluster.experiments.rows import reproduction

FIGURES = F.FIGURES + C.FIGURES
EXPERIMENTS = {"fig3": F.fig3, **C.PARTS, "fig16": F.fig16, "table1": F.table1, "fig17": F.fig17,
               "fig19": F.fig19, "fig20": F.fig20, "fig24": F.fig24, "fig18": F.fig18}
SIDE_BY_SIDE = ("fig11", "fig12", "fig13", "fig14", "fig15", "fig21", "fig22", "fig23", "fig16", "table1", "fig17",
                "fig19", "fig20", "fig24")


def setup(quick: bool) -> dict:
    """The racks of this reproduction, for the run record (cluster.experiments.provenance)."""
    out = F.setup(quick)
    out["spec"] += (f"; the comparison (Figs. 11-15, 21-23): {C.MEMORY} memory nodes, every system's fault "
                    f"tolerance on ({C.REPLICAS} copies or the equivalent), systems "
                    f"{', '.join(f'{k}={v}' for k, v in C.COMPARED.items())}")
    return out


def check_systems() -> None:
    from nodes.systems import is_known
    if not is_known("flexkv"):
        raise ValueError("reproduce flexkv needs the system flexkv; not registered")


EXPERIMENT = reproduction(
    "flexkv", "FlexKV", title="FlexKV (Hu, Shen, Yang): Figs. 3, 11-24 and Table 1",
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, profiles=(F.PROFILE,),
    check=check_systems,
    # what `dmrack sensitivity flexkv` runs per knob: Fig. 3's verb-rate ratios, the measurement the
    # design rests on (WRITE 10.1x, SEND&RECV 19.5x, LOCAL_CAS 177.1x RDMA_CAS). Fig. 16's ablation is
    # 20 racks (five steps x YCSB A-D), too many for a run per knob: `--only fig16` when it is wanted.
    headline=("fig3",))
