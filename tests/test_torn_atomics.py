"""A READ never returns a torn word of a line a remote atomic changes meanwhile.

A READ copies a 64-byte line byte by byte (``shm.fabric._sample_line``) and retries if the line's
seqlock moved during the copy; WRITEs hold that seqlock while they place a line. Remote atomics
(``apply_one_sided`` -> ``remote_atomic``) were one bare ``cmpxchg`` / ``xadd`` on the word,
leaving the seqlock alone: in a rack of processes a CAS landing in the middle of another
process's copy handed the reader a word half old, half new. For RACE that is a slot word with the
key's fingerprint and length but a mixed-up block address, so a get of a key being updated read
some other block and returned "not found" (a rare flake of
tests/test_cli_edges.py::test_up_check_and_history_work_on_the_default_rack).

The first test is deterministic (the mechanism a reader relies on: an atomic that lands on a line
moves the line's seqlock, so a copy that overlapped it is retried); the second reproduces the race
itself with two processes on one shared line and counts torn words (no timing assertion; before
the fix one run counted 16,096 torn READs, after it none).
"""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from numba import njit

from shm.atomics import swap
from shm.fabric import REGION_DEVICE, REGION_HOST, Fabric, NodeSpec, gaddr, read_lines
from shm.profile import load_profile
from shm.verbs import (
    IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_MASKED_ATOMIC_CMP_AND_SWP,
    IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, apply_one_sided,
)

fork = multiprocessing.get_context("fork")

# Two slot-like words that share their top bytes (a RACE slot's fingerprint and length) and
# differ in every other byte (memory node and block offset): a torn mix is neither.
OLD = 0xAB01_0000_0000_0040
NEW = 0xAB01_01FF_FFFF_FFC0
WORD_OFF = 4096 + 8            # a word in the middle of line 64 of the memory node


@pytest.fixture
def fab(prefix):
    f = Fabric.create(load_profile("cx6-200g"), [NodeSpec("c0", "compute", 1 << 20),
                                                  NodeSpec("m0", "memory", 1 << 20)], prefix=prefix)
    try:
        f.expose(1)
        yield f
    finally:
        f.close()


def _atomic(fab, op, off, compare_add, swap=0, cmask=0, smask=0, region=REGION_HOST):
    lbuf = np.zeros(8, np.uint8)
    st = apply_one_sided(fab, 1, op, gaddr(1, off, region), fab.exposed_key(1, region), lbuf, 0, 8,
                         compare_add, swap, cmask, smask)
    assert st == IBV_WC_SUCCESS
    return int(lbuf.view(np.uint64)[0])


@pytest.mark.parametrize("region", [REGION_HOST, REGION_DEVICE])
@pytest.mark.parametrize("op, args", [
    (IBV_WR_ATOMIC_CMP_AND_SWP, (OLD, NEW)),
    (IBV_WR_ATOMIC_CMP_AND_SWP, (NEW, OLD)),          # a CAS that fails changes nothing, still fenced
    (IBV_WR_ATOMIC_FETCH_AND_ADD, (64,)),
    (IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, (OLD, NEW, (1 << 64) - 1, (1 << 64) - 1)),
    (IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, (64, 0, 0)),
])
def test_a_remote_atomic_moves_its_lines_seqlock(fab, op, args, region):
    mem = fab.memory[1]
    words, locks = (mem.host64, mem.host_locks) if region == REGION_HOST else (mem.device64, mem.device_locks)
    off = WORD_OFF if region == REGION_HOST else 64 + 8
    words[off // 8] = OLD
    stripe = (off // 64) & (locks.shape[0] - 1)
    before = int(locks[stripe])
    assert before % 2 == 0
    assert _atomic(fab, op, off, *args, region=region) == OLD
    after = int(locks[stripe])
    # a reader that sampled the seqlock before the atomic sees it moved and copies the line again;
    # the lock is free again afterwards (even)
    assert after == before + 2


def test_reads_racing_remote_cas_in_another_process_are_never_torn(prefix):
    def flip(fab, mem):
        lbuf = np.zeros(8, np.uint8)
        addr, key = gaddr(1, WORD_OFF), fab.exposed_key(1)
        for _ in range(FLIPS):
            apply_one_sided(fab, 1, IBV_WR_ATOMIC_CMP_AND_SWP, addr, key, lbuf, 0, 8, OLD, NEW)
            apply_one_sided(fab, 1, IBV_WR_ATOMIC_CMP_AND_SWP, addr, key, lbuf, 0, 8, NEW, OLD)
    _race_reads_against(prefix, flip)


def test_reads_racing_plain_atomics_in_another_process_are_never_torn(prefix):
    """A word changed by a CPU atomic, which takes no seqlock (the reclaimer's epoch announcements:
    ``swap``), is copied whole by a READ: the aligned word is one 8-byte load. (The byte loop it
    replaced was vectorised by LLVM here, so this passed before too; the guarantee is now the
    code's, not the compiler's.)"""
    def flip(fab, mem):
        for _ in range(FLIPS):
            swap(mem.host64, WORD_OFF // 8, NEW)
            swap(mem.host64, WORD_OFF // 8, OLD)
    _race_reads_against(prefix, flip)


FLIPS = 300_000


def _race_reads_against(prefix, flip):
    """READ the word's line in this process while ``flip(fab, mem)`` flips it between OLD and NEW
    in a child process; no READ may return anything else."""
    fab = Fabric.create(load_profile("cx6-200g"), [NodeSpec("c0", "compute", 1 << 20),
                                                    NodeSpec("m0", "memory", 1 << 20)], prefix=prefix)
    try:
        fab.expose(1)
        mem = fab.memory[1]
        mem.host64[WORD_OFF // 8] = OLD
        p = fork.Process(target=flip, args=(fab, mem), daemon=True)
        p.start()
        try:
            torn = seen = 0
            dst = np.zeros(64, np.uint8)
            line = WORD_OFF // 64 * 64
            while p.is_alive() or seen == 0:
                torn += _torn_copies(dst, mem.host, line, mem.host_locks, 20_000)
                seen += 1
            assert p.exitcode == 0
        finally:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
        assert torn == 0, f"{torn} READs returned a word that is neither the old nor the new value"
    finally:
        fab.close()


def _torn_copies(dst, src, line_off, locks, n) -> int:
    return int(_torn_copies_jit(dst, src, line_off, locks, n, np.uint64(OLD), np.uint64(NEW)))


@njit(cache=True)
def _torn_copies_jit(dst, src, line_off, locks, n, old, new):
    torn = 0
    i = WORD_OFF - line_off
    for _ in range(n):
        read_lines(dst, 0, src, line_off, 64, locks)
        w = np.uint64(0)
        for k in range(8):
            w |= np.uint64(dst[i + k]) << np.uint64(8 * k)
        if w != old and w != new:
            torn += 1
    return torn
