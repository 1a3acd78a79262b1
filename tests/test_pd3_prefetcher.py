"""PD3's prefetch decision and Host View maintenance (nodes/systems/pd3/prefetcher.py): one test
per row of the paper's Tables 1 and 2, in-flight de-duplication, stale in-flight prefetches, the
read-after-write ordering against a model of the Transfer Engine, statistics."""

from __future__ import annotations

import random

import pytest

from nodes.systems.pd3.host_view import HostView
from nodes.systems.pd3.parsers import DELETE, READ, WRITE
from nodes.systems.pd3.prefetcher import Prefetcher


def make(**kw) -> Prefetcher:
    return Prefetcher(HostView(64, 2, seed=1), **kw)


def check_consistent(pf: Prefetcher):
    s = pf.statistics()
    assert s.keys == s.reads + s.writes + s.deletes
    assert s.reads + s.deletes == s.prefetches + s.suppressed_in_flight + s.suppressed_cached
    assert s.prefetches == s.responses + s.in_flight + s.cancelled
    assert s.responses == s.response_misses + s.stale_dropped + s.delivered
    assert s.stale <= s.in_flight
    added = s.added_client_write + s.added_remote_read + s.added_prefetch
    assert len(pf.host_view) == added - s.removed_client_delete - s.removed_flush
    return s


# -- the decision ----------------------------------------------------------------------------

def test_read_of_an_uncached_key_prefetches_once():
    pf = make()
    assert pf.on_client_request([(1, READ), (2, READ)]) == [1, 2]
    assert 1 in pf.in_flight and 2 in pf.in_flight
    s = check_consistent(pf)
    assert (s.requests, s.prefetches, s.suppressed_in_flight, s.suppressed_cached) == (1, 2, 0, 0)


def test_in_flight_keys_are_not_prefetched_again():
    pf = make()
    assert pf.on_client_request([(1, READ), (1, READ)]) == [1]      # same packet
    assert pf.on_client_request([(1, READ)]) == []                  # a later packet
    assert pf.on_prefetch_response(1, True) is True
    assert pf.on_client_request([(1, READ)]) == []                  # now in the Host View
    s = check_consistent(pf)
    assert (s.prefetches, s.suppressed_in_flight, s.suppressed_cached) == (1, 2, 1)


def test_write_never_prefetches():
    pf = make(add_on_client_write=False)
    assert pf.on_client_request([(1, WRITE)]) == []
    assert 1 not in pf.host_view and 1 not in pf.in_flight
    assert pf.on_client_request([(1, READ)]) == [1]     # not reflected: a false positive prefetch
    check_consistent(pf)


def test_bad_op_is_refused():
    with pytest.raises(ValueError):
        make().on_client_request([(1, 3)])


def test_host_view_empty_marker_is_refused():
    with pytest.raises(ValueError):
        make().on_client_request([((1 << 64) - 1, READ)])


# -- Table 1 ---------------------------------------------------------------------------------

def test_addition_by_client_write():
    pf = make()
    assert pf.on_client_request([(7, WRITE), (7, READ)]) == []      # packet order: the SET first
    assert 7 in pf.host_view
    s = check_consistent(pf)
    assert (s.added_client_write, s.suppressed_cached) == (1, 1)


def test_addition_by_remote_read_is_on_by_default():
    pf = make()
    pf.on_remote_read_response([3, 4])
    assert 3 in pf.host_view and 4 in pf.host_view
    assert pf.on_client_request([(3, READ)]) == []
    assert check_consistent(pf).added_remote_read == 2


def test_addition_by_remote_read_can_be_off():
    pf = make(add_on_remote_read=False)         # the artifact's config value
    pf.on_remote_read_response([3])
    assert 3 not in pf.host_view
    assert pf.on_client_request([(3, READ)]) == [3]
    check_consistent(pf)


def test_addition_by_prefetch_delivery():
    pf = make()
    pf.on_client_request([(5, READ)])
    assert 5 not in pf.host_view
    assert pf.on_prefetch_response(5, True) is True
    assert 5 in pf.host_view and 5 not in pf.in_flight
    assert check_consistent(pf).added_prefetch == 1


def test_addition_generated_by_host_is_not_reflected_and_the_prefetch_misses():
    pf = make()
    # the host made the item itself (never written through the DPU): the DPU prefetches it, the
    # memory server does not have it and answers an error
    assert pf.on_client_request([(9, READ)]) == [9]
    assert pf.on_prefetch_response(9, False) is False
    assert 9 not in pf.host_view and 9 not in pf.in_flight
    assert check_consistent(pf).response_misses == 1


def test_deletion_by_client_delete():
    pf = make()
    pf.on_client_request([(2, WRITE)])
    assert pf.on_client_request([(2, DELETE)]) == []    # cached: the host deletes locally
    assert 2 not in pf.host_view
    assert pf.on_client_request([(2, READ)]) == [2]     # removed: the next read prefetches
    s = check_consistent(pf)
    assert (s.removed_client_delete, s.suppressed_cached) == (1, 1)


def test_delete_of_an_uncached_key_prefetches_it():
    pf = make()
    assert pf.on_client_request([(4, DELETE)]) == [4]   # "Only Read and Delete trigger prefetch"
    assert pf.on_prefetch_response(4, True) is True     # the delete's own prefetch is not stale
    check_consistent(pf)


# -- Table 2 ---------------------------------------------------------------------------------

def test_deletion_by_flush():
    pf = make()
    pf.on_client_request([(6, WRITE)])
    pf.on_flush([6, 60])                                # 60 was never in the Host View
    assert 6 not in pf.host_view
    assert pf.on_client_request([(6, READ)]) == [6]
    assert check_consistent(pf).removed_flush == 1


def test_silently_dropped_key_takes_the_normal_miss_path_until_removed():
    pf = make()
    pf.on_client_request([(8, WRITE)])
    # the host drops item 8 from its cache without telling anyone: the Host View still says cached
    assert pf.on_client_request([(8, READ)]) == []      # no prefetch: the host's normal miss path
    pf.on_client_request([(8, DELETE)])                 # a later removal ...
    assert pf.on_client_request([(8, READ)]) == [8]     # ... and prefetching resumes
    check_consistent(pf)


# -- stale in-flight prefetches --------------------------------------------------------------

@pytest.mark.parametrize("change", ["flush", "write", "delete"])
def test_a_change_during_a_prefetch_makes_its_item_stale(change):
    pf = make()
    assert pf.on_client_request([(1, READ)]) == [1]
    if change == "flush":
        pf.on_flush([1])
    else:
        pf.on_client_request([(1, WRITE if change == "write" else DELETE)])
    assert 1 in pf.stale
    before = pf.statistics()
    assert pf.on_client_request([(1, READ)]) == []
    after = pf.statistics()
    if change == "write":           # the write added the key: cached on the host, no prefetch
        assert after.suppressed_cached == before.suppressed_cached + 1
    else:                           # still in flight (its item will be dropped as stale)
        assert after.suppressed_in_flight == before.suppressed_in_flight + 1
    assert pf.on_prefetch_response(1, True) is False    # not written to the Loading Zone
    assert 1 not in pf.stale and 1 not in pf.in_flight
    s = check_consistent(pf)
    assert s.stale_dropped == 1 and s.added_prefetch == 0


def test_a_queued_prefetch_the_host_overtook_is_cancelled_before_it_is_sent():
    pf = make()
    assert pf.on_client_request([(1, READ), (2, READ)]) == [1, 2]
    pf.on_host_read([1])                    # the host missed on 1 and fetches it itself
    assert pf.cancel_stale(1) is True       # so the Transfer Engine drops the queued prefetch
    assert pf.cancel_stale(2) is False      # 2 is still wanted: sent
    assert 1 not in pf.in_flight and 1 not in pf.stale and 2 in pf.in_flight
    assert pf.on_client_request([(1, READ)]) == []     # the host's read put 1 in the Host View
    s = check_consistent(pf)
    assert (s.cancelled, s.in_flight, s.stale_dropped) == (1, 1, 0)


def test_response_without_a_prefetch_is_refused():
    with pytest.raises(ValueError):
        make().on_prefetch_response(1, True)


def test_full_host_view_inserts_are_counted():
    pf = Prefetcher(HostView(1, 1))                     # 4 slots
    pf.on_client_request([(k, WRITE) for k in range(40)])
    s = check_consistent(pf)
    assert s.full > 0 and s.added_client_write + s.full == 40


# -- read after write ------------------------------------------------------------------------

class Model:
    """The host ring, a two-phase Transfer Engine step (① take the host requests, then append
    the queued prefetch keys and send the batch), and an in-order memory server. ``early_flush``
    removes a flushed key when the host *enqueues* the write, instead of after ① (the wrong
    order): a prefetch can then be sent before the write it should follow."""

    def __init__(self, keys, early_flush=False):
        self.pf = make()
        self.early = early_flush
        self.remote = {k: 0 for k in keys}
        self.truth = dict(self.remote)                  # the newest value of each key
        self.cache: dict[int, int] = {}                 # the host's dirty items
        self.ring: list = []
        self.queue: list[int] = []                      # prefetch keys waiting for the TE
        self.batch: list | None = None                 # the requests a step took in ①
        self.stale = self.delivered = 0

    def get(self, k):
        self.queue += self.pf.on_client_request([(k, READ)])

    def writing_back(self, k) -> bool:
        return any(op == "write" and key == k for op, key, _ in self.ring + (self.batch or []))

    def set(self, k, v):
        self.queue += self.pf.on_client_request([(k, WRITE)])
        self.cache[k] = self.truth[k] = v

    def evict(self, k):
        if k in self.cache:
            self.ring.append(("write", k, self.cache.pop(k)))
            if self.early:
                self.pf.on_flush([k])

    def te_take(self):                                  # ① DMA READ of the host ring
        if self.batch is not None:                      # the step has taken its requests
            return
        self.batch, self.ring = self.ring, []
        if not self.early:
            self.pf.on_flush([k for op, k, _ in self.batch if op == "write"])

    def te_send(self):                                  # append prefetches, ③, server, ④
        if self.batch is None:                          # a step starts with ①
            return
        self.batch += [("prefetch", k, None) for k in self.queue]
        self.queue = []
        for op, k, v in self.batch:
            if op == "write":
                self.remote[k] = v
            elif self.pf.on_prefetch_response(k, k in self.remote):
                # the host takes the item from the Loading Zone only on a miss in its cache;
                # an item it holds (dirty, newer) makes the delivery a false positive, not stale
                if k not in self.cache:
                    self.delivered += 1
                    self.stale += self.remote[k] != self.truth[k]
        self.batch = None


def test_a_prefetch_right_after_a_flush_reads_the_new_value():
    for early, stale in ((False, 0), (True, 1)):
        m = Model([1], early_flush=early)
        m.set(1, 5)                     # host caches the new value (Host View: added)
        m.te_take()                     # the TE takes what the ring holds (nothing yet)
        m.evict(1)                      # the write-back waits in the host ring
        m.get(1)                        # correct order: still in the Host View, no prefetch
        m.te_send()
        m.te_take()
        m.te_send()                     # the write reaches the server
        m.get(1)                        # removed after ①: now a prefetch, behind the write
        m.te_take()
        m.te_send()
        assert m.stale == stale, early
        assert m.delivered == 1, early  # one prefetch either way; early, it carries the old value


def test_random_interleavings_never_deliver_a_stale_item_in_the_right_order():
    def run(early, seed):
        rng = random.Random(seed)
        m = Model(range(4), early_flush=early)
        for step in range(3000):
            k = rng.randrange(4)
            r = rng.random()
            if r < 0.35:
                m.get(k)
            elif r < 0.5:
                # a host that writes a key again while its write-back has not reached the server
                # can receive an older item the flush's removal let through (see the module
                # docstring, "not covered"): the model's host waits, as PD3 would need it to
                if not m.writing_back(k):
                    m.set(k, step + 1)
            elif r < 0.7:
                m.evict(k)
            elif r < 0.85:
                m.te_take()
            else:
                m.te_send()
        m.te_take()
        m.te_send()
        check_consistent(m.pf)
        return m
    right = [run(False, s) for s in range(3)]
    assert all(m.stale == 0 for m in right) and all(m.delivered > 50 for m in right)
    # the model can see staleness: removing at enqueue time delivers old items
    assert sum(run(True, s).stale for s in range(3)) > 0


def test_statistics_after_a_mixed_run():
    pf = make()
    pf.on_client_request([(1, READ), (2, WRITE), (2, READ), (3, DELETE)])
    pf.on_prefetch_response(1, True)
    pf.on_flush([2])
    pf.on_client_request([(1, READ), (2, READ)])
    s = check_consistent(pf)
    assert (s.requests, s.keys, s.reads, s.writes, s.deletes) == (2, 6, 4, 1, 1)
    assert (s.prefetches, s.suppressed_cached, s.in_flight) == (3, 2, 2)
    assert (s.added_client_write, s.added_prefetch, s.removed_flush) == (1, 1, 1)
