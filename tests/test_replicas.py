"""nodes/systems/lib/replicas.py: replicated chunks (a block's copies on the next memory nodes) and
record-array backups (an index's subtables), the placement FlexKV's replicas and FUSEE use."""

from __future__ import annotations

import pytest

from nodes.systems.lib.array import allocate_array
from nodes.systems.lib.replicas import (
    ReplicaError, Replicas, granule_of, setup_record_copies, setup_replicas, table_bytes,
)
from shm.fabric import Fabric, NodeSpec, gaddr, gaddr_node, gaddr_offset
from tests.test_verbs import rack_profile


@pytest.fixture
def fab(prefix):
    f = Fabric.create(rack_profile(), [NodeSpec("c0", "compute", 1 << 20)] +
                      [NodeSpec(f"m{i}", "memory", 8 << 20) for i in range(3)], prefix=prefix)
    try:
        yield f
    finally:
        f.close()


def test_a_chunk_comes_with_mirrors_on_the_next_nodes_and_any_block_finds_its_copies(fab):
    mns = [1, 2, 3]
    rmap = setup_replicas(fab, mns, 3, 64 << 10, "test")
    assert rmap.granule == granule_of(64 << 10) == 64 << 10 and table_bytes(rmap) > 0
    reps = Replicas(fab, rmap)
    assert reps.backup_nodes(3) == [1, 2]                    # round the list
    off = reps.allocate(2, 100 << 10)                        # two granules
    assert off % rmap.granule == 0
    for inside in (0, 4096, (64 << 10) + 128):              # the second granule too
        copies = reps.copies_of(2, off + inside)
        assert [n for n, _ in copies] == [3, 1]
        fab.memory[2].host[off + inside:off + inside + 4] = list(b"abcd")
    reps.copy_region(2, off, 100 << 10)
    for n, o in reps.copies_of(2, off + 4096):
        assert bytes(fab.memory[n].host[o:o + 4]) == b"abcd"
    assert [gaddr_node(a) for a in reps.backup_gaddrs(2, off)] == [3, 1]


def test_one_copy_maps_nothing_and_more_copies_than_nodes_is_one_line(fab):
    assert setup_replicas(fab, [1, 2, 3], 1, 1 << 20, "test") is None
    with pytest.raises(ReplicaError, match="replicas = 4 needs 4 memory nodes") as e:
        setup_replicas(fab, [1, 2, 3], 4, 1 << 20, "system 'x'")
    assert "\n" not in str(e.value)


def test_a_block_outside_every_replicated_chunk_is_refused(fab):
    reps = Replicas(fab, setup_replicas(fab, [1, 2, 3], 2, 64 << 10, "test"))
    with pytest.raises(KeyError, match="no replicated chunk"):
        reps.copies_of(1, 3 << 20)


def test_record_backups_sit_k_nodes_after_their_primary_with_its_bytes(fab):
    tables = allocate_array(fab, [1, 2, 3], 5, 256)
    for i in range(5):
        tables.words(fab, i)[:] = i + 1
    copies = setup_record_copies(fab, tables, 3)
    assert setup_record_copies(fab, tables, 1) is None
    for i in range(5):
        addr = gaddr(tables.node_of(i), tables.offset_of(i) + 24)
        backups = copies.backup_gaddrs(addr)
        assert [gaddr_node(b) for b in backups] == [[1, 2, 3][(i + k) % 3] for k in (1, 2)]
        for b in backups:
            assert int(fab.memory[gaddr_node(b)].host64[gaddr_offset(b) // 8]) == i + 1
    tables.words(fab, 3)[:] = 99                             # a bulk load writes the primaries ...
    copies.copy_all(fab)                                     # ... and then the backups get them
    assert all(int(fab.memory[gaddr_node(b)].host64[gaddr_offset(b) // 8]) == 99
               for b in copies.backup_gaddrs(gaddr(tables.node_of(3), tables.offset_of(3))))
