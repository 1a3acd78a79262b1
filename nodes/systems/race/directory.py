"""The client-side cache of RACE's directory, and its refresh over RDMA.

The directory lives on the first memory node (see layout.py for its words). A client caches it at
start (from the layout, as if it had read it while connecting) and re-reads it when a bucket header
disagrees with the cached entry it used: after a subtable split (not implemented yet: tables are
pre-sized) the header's local depth or suffix changes, and a stale client would look in the wrong
subtable. The machinery is complete so splits can be added without touching the clients' ops.
"""

from __future__ import annotations

from .layout import DIR_HEADER_WORDS, WORD, pack_header, unpack_dir_entry

READ_PIECE = 4096     # the directory is fetched in READs of at most this many bytes, in one post


class DirectoryCache:
    """Cached ``global_depth`` and, per directory index, the subtable's node, offset, local depth and
    the bucket header its buckets must carry (``expected``)."""

    __slots__ = ("addr", "global_depth", "mask", "groups", "n_main", "nodes", "bases", "expected",
                 "local_depths", "fetches")

    def __init__(self, addr: int, global_depth: int, groups: int, entries: list[int]):
        self.addr = addr              # fabric global address of the remote directory
        self.fetches = 0
        self._load(global_depth, groups, entries)

    def _load(self, global_depth: int, groups: int, entries: list[int]) -> None:
        if len(entries) != 1 << global_depth:
            raise ValueError(f"RACE directory: {len(entries)} entries for global depth {global_depth}")
        self.global_depth = global_depth
        self.mask = (1 << global_depth) - 1
        self.groups = groups
        self.n_main = 2 * groups
        self.nodes = []
        self.bases = []
        self.expected = []
        self.local_depths = []
        for i, e in enumerate(entries):
            ld, node, off = unpack_dir_entry(e)
            self.nodes.append(node)
            self.bases.append(off)
            self.local_depths.append(ld)
            self.expected.append(pack_header(ld, i & ((1 << ld) - 1)))

    def entry(self, h: int) -> tuple[int, int, int]:
        """(node, subtable offset, expected bucket header) of a key hash."""
        i = h & self.mask
        return self.nodes[i], self.bases[i], self.expected[i]

    def refresh(self, co):
        """Generator: re-read the whole directory with RDMA READs and reload the cache: READs of at
        most READ_PIECE bytes, 8 per post, and no more than 1/4 of the thread buffer per post (the
        buffer is a ring shared with the thread's other coroutines)."""
        words = DIR_HEADER_WORDS + (1 << self.global_depth)
        batch = max(WORD, min(READ_PIECE, co.thread.owner.buffer_bytes // 32) // WORD * WORD)
        while True:
            total = words * WORD
            raw = bytearray()
            for first in range(0, total, batch * 8):
                handles = [co.read(self.addr + start, min(batch, total - start))
                           for start in range(first, min(total, first + batch * 8), batch)]
                yield co.sync()
                for h in handles:
                    raw += h.data.tobytes()
            vals = [int.from_bytes(raw[i:i + WORD], "little") for i in range(0, len(raw), WORD)]
            depth, groups = vals[0], vals[1]
            self.fetches += 1
            need = DIR_HEADER_WORDS + (1 << depth)
            if need <= len(vals):
                self._load(depth, groups, vals[DIR_HEADER_WORDS:need])
                return
            words = need              # the directory grew meanwhile: read it whole again


def directory_words(global_depth: int, groups: int, entries: list[int]) -> list[int]:
    """The words of a directory as stored remotely."""
    return [global_depth, groups, *entries]
