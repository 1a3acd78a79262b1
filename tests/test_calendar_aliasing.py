"""Aliasing calendars fail the run (issue 40): a hot address's CAS queue fits its slot's ring.

The per-address atomic slots were rings of 64 x 1024 ns buckets (64 us) until 2026-11-28; a
hot address with a few hundred CASes queued (SMART fig5/fig7, ROLEX's group locks) outran them
and the slot served CASes for free, with only a warning. The slots now span 4.2 ms like the
NIC's rings (``shm.nic.SLOT_RING``), and a fabric whose calendar aliased raises
``CalendarAliased`` when it closes, so no experiment or test can give numbers from such a run.
"""

from __future__ import annotations

import glob

import pytest

from cluster.experiments.bench_verbs import Rig, _atomic_clients
from shm.calendar import CalendarAliased
from shm.fabric import REGION_HOST, gaddr
from shm.profile import load_profile


def test_a_hot_address_queue_longer_than_the_old_ring_stays_a_fifo():
    """256 clients CAS one word: ~256 x 370 ns = 95 us queued on its slot, past the old 64 us ring.
    The slot still serialises (one CAS per slot time) and nothing aliases (close would raise).
    On cx6-200g an atomic does not hold its processing unit while it waits (on cx5-100g it does,
    and the queue forms in the units instead), so the whole queue is the slot's: with 64 buckets
    this run counted 391 overflows."""
    nic = load_profile("cx6-200g").nic
    with Rig(load_profile("cx6-200g"), 4, 1, mem_bytes=1 << 20) as rig:
        a = gaddr(rig.mns[0], rig.fabric.allocate(rig.mns[0], 8, region=REGION_HOST), REGION_HOST)
        mops = _atomic_clients(rig, clients=256, op="cas", address=lambda rng: a, warmup=200_000,
                               window=200_000)
        assert rig.fabric.calendar_errors() == []
    bound = min(1e3 / nic.atomic_slot_ns, nic.atomic_units * 1e3 / nic.atomic_unit_ns)
    assert mops == pytest.approx(bound, rel=0.02)


def test_a_fabric_whose_calendar_aliased_raises_when_it_closes_and_still_cleans_up():
    rig = Rig(load_profile("cx5-100g"), 1, 1, mem_bytes=1 << 20)
    prefix = rig.fabric.prefix
    lay = rig.fabric.layout.resources
    o = lay.offsets["mn0.slot7"]
    rig.fabric.table[o + 6] = 3                  # three requests served unqueued ("stale")
    with pytest.raises(CalendarAliased, match=r"timing of this run is wrong.*mn0\.slot7 stale=3"):
        rig.close()
    assert not glob.glob(f"/dev/shm/{prefix.lstrip('/')}*")


def test_closing_on_the_way_out_of_another_error_does_not_hide_it():
    with pytest.raises(ZeroDivisionError):
        with Rig(load_profile("cx5-100g"), 1, 1, mem_bytes=1 << 20) as rig:
            rig.fabric.table[rig.fabric.layout.resources.offsets["mn0.tx"] + 8] = 1
            1 / 0
