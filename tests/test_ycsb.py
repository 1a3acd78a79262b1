"""YCSB CoreWorkload: property files and their errors, presets against YCSB's files, validation,
operation mixes of A-F, key choice (nextKeynum, inserts, latest), determinism and independence
of streams, key/value bytes and open-loop gaps."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.generators import fnvhash64
from workloads.keys import decode_value, key_bytes, value_bytes
from workloads.properties import DEFAULTS, PRESETS, WorkloadError, load_properties, parse_properties
from workloads.ycsb import (
    OP_INSERT, OP_NAMES, OP_READ, OP_RMW, OP_SCAN, OP_UPDATE, CoreWorkload, InsertSequence, LocalInsertSequence,
)

# The property lines of YCSB's workloads/workloada .. workloadf (comments shortened).
YCSB_FILES = {
    "a": """# Workload A: Update heavy workload
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0

requestdistribution=zipfian
""",
    "b": """# Workload B: Read mostly workload
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0.95
updateproportion=0.05
scanproportion=0
insertproportion=0

requestdistribution=zipfian
""",
    "c": """# Workload C: Read only
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=1
updateproportion=0
scanproportion=0
insertproportion=0

requestdistribution=zipfian
""",
    "d": """# Workload D: Read latest workload
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0.95
updateproportion=0
scanproportion=0
insertproportion=0.05

requestdistribution=latest
""",
    "e": """# Workload E: Short ranges
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0
updateproportion=0
scanproportion=0.95
insertproportion=0.05

requestdistribution=zipfian

maxscanlength=100

scanlengthdistribution=uniform
""",
    "f": """# Workload F: Read-modify-write workload
recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0.5
updateproportion=0
scanproportion=0
insertproportion=0
readmodifywriteproportion=0.5

requestdistribution=zipfian
""",
}


def ordered(name: str, **kw) -> CoreWorkload:
    """A preset with insertorder=ordered, so that key ids are record numbers."""
    return CoreWorkload.preset(name, {"insertorder": "ordered", **kw})


# --- properties ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", "abcdef")
def test_presets_are_ycsbs_files(name):
    assert dict(parse_properties(YCSB_FILES[name], f"workload{name}")) == PRESETS[name]


def test_ycsb_defaults():
    wl = CoreWorkload.from_properties({})
    assert (wl.field_count, wl.field_length, wl.value_size, wl.key_size) == (10, 100, 1000, 8)
    assert wl.proportions == (0.95, 0.05, 0.0, 0.0, 0.0)
    assert (wl.distribution, wl.insert_order, wl.scan_length_distribution) == ("uniform", "hashed", "uniform")
    assert (wl.min_scan_length, wl.max_scan_length) == (1, 1000)
    assert (wl.hotspot_data_fraction, wl.hotspot_opn_fraction) == (0.2, 0.8)
    assert wl.read_all_fields and not wl.write_all_fields and wl.target == 0
    assert (wl.insert_start, wl.insert_count) == (0, wl.recordcount)
    assert DEFAULTS["requestdistribution"] == "uniform"


def test_parse_comments_whitespace_and_java_forms():
    text = ("# comment\n! also a comment\n\n   recordcount = 5000   \n"
            "readproportion:0.7\nupdateproportion 0.3\nrequestdistribution=\\\n  uniform\n")
    p = parse_properties(text, "mine.properties")
    assert p == {"recordcount": "5000", "readproportion": "0.7", "updateproportion": "0.3",
                 "requestdistribution": "uniform"}
    assert p.lines["recordcount"] == 4 and p.lines["requestdistribution"] == 7
    assert p.where("updateproportion") == "mine.properties:6"


def test_bad_line_names_source_and_line():
    with pytest.raises(WorkloadError, match=r"^w\.txt:3: expected 'name=value', got 'recordcount'"):
        parse_properties("a=1\n\nrecordcount\n", "w.txt")
    with pytest.raises(WorkloadError, match=r"^w\.txt:1: a property needs a name"):
        parse_properties("=5\n", "w.txt")


def test_from_file_and_overrides(tmp_path):
    path = tmp_path / "workloadx"
    path.write_text(YCSB_FILES["b"] + "fieldcount=2\nfieldlength=16\n")
    wl = CoreWorkload.from_file(path, {"recordcount": 50_000})
    assert wl.name == "workloadx" and wl.recordcount == 50_000 and wl.value_size == 32
    assert wl.proportions.read == 0.95 and wl.distribution == "zipfian"
    assert load_properties(path)["fieldcount"] == "2"
    with pytest.raises(WorkloadError, match="cannot read workload file"):
        CoreWorkload.from_file(tmp_path / "missing")


def test_preset_lookup_and_overrides():
    assert CoreWorkload.preset("A").name == "YCSB-A"
    assert CoreWorkload.preset("workloadc").proportions.read == 1.0
    with pytest.raises(WorkloadError, match="unknown YCSB core workload 'g'; choose one of a, b, c, d, e, f"):
        CoreWorkload.preset("g")
    wl = CoreWorkload.preset("a", {"readproportion": 0.75, "updateproportion": 0.25, "valuesize": 64, "keysize": 16})
    assert wl.proportions.read == 0.75 and wl.raw_proportions.update == 0.25
    assert (wl.value_size, wl.key_size) == (64, 16)


def test_proportions_not_summing_to_one_are_refused(tmp_path):
    """YCSB's DiscreteGenerator divides the weights by their sum, so readproportion = 0.9 over
    workload A's updateproportion = 0.5 silently runs 64/36; dmrack refuses it in one line naming
    the places, the sum and what YCSB would have run."""
    with pytest.raises(WorkloadError, match=r"^overrides, preset a: the operation proportions \(readproportion = 0.9, "
                                            r"updateproportion = 0.5\) sum to 1.4, not 1; set them to sum to 1 "
                                            r"\(YCSB would scale them silently to 64.3 % read, 35.7 % update\)$"):
        CoreWorkload.preset("a", {"readproportion": 0.9})
    with pytest.raises(WorkloadError, match=r"sum to 4, not 1"):
        CoreWorkload.preset("a", {"readproportion": 3, "updateproportion": 1})
    path = tmp_path / "wl"
    path.write_text("readproportion=0.5\nupdateproportion=0.4\n")
    with pytest.raises(WorkloadError, match=rf"^{path}:1, {path}:2: the operation proportions .* sum to 0.9, not 1"):
        CoreWorkload.from_file(path)
    # hand-written thirds round to a sum within PROPORTION_SUM_TOLERANCE of 1 and are taken
    wl = CoreWorkload.from_properties({"readproportion": 0.333, "updateproportion": 0.333,
                                       "insertproportion": 0.333}, "cfg")
    assert wl.proportions.read == pytest.approx(1 / 3)


def test_describe():
    wl = CoreWorkload.preset("a", {"recordcount": 100_000, "valuesize": 8})
    assert wl.describe() == "YCSB-A: 50% read 50% update, zipfian 0.99, 100000 records, 8 B keys, 8 B values"
    e = CoreWorkload.preset("e").describe()
    assert "5% insert 95% scan" in e and "scans 1-100 uniform" in e and "1000 B values" in e
    h = CoreWorkload.from_properties({"requestdistribution": "hotspot", "target": 5000}, "t").describe()
    assert "hotspot 80% of ops on 20% of records" in h and "open loop 5000 ops/s" in h


def test_unknown_property_suggests_closest(tmp_path):
    path = tmp_path / "w"
    path.write_text("recordcount=10\nrequestdistributon=zipfian\n")
    with pytest.raises(WorkloadError, match=r"w:2: unknown property 'requestdistributon'; "
                                            r"did you mean 'requestdistribution'\?"):
        CoreWorkload.from_file(path)
    with pytest.raises(WorkloadError, match=r"^overrides: unknown property 'RecordCount'; did you mean 'recordcount'"):
        CoreWorkload.preset("a", {"RecordCount": 5})
    with pytest.raises(WorkloadError, match="known properties:"):
        CoreWorkload.from_properties({"zzzzzz": 1}, "cfg")


def test_irrelevant_ycsb_properties_are_ignored():
    wl = CoreWorkload.from_properties({"workload": "site.ycsb.workloads.CoreWorkload", "table": "usertable",
                                       "threadcount": "8", "measurementtype": "histogram", "exporter": "x",
                                       "dataintegrity": "true", "htrace.sampler.classes": "x"}, "cfg")
    assert wl.recordcount == 1000


@pytest.mark.parametrize("props, pattern", [
    ({"recordcount": -5}, r"^cfg: property 'recordcount' = -5: must be >= 1"),
    ({"recordcount": "lots"}, r"property 'recordcount' = 'lots': must be an integer"),
    ({"recordcount": 10.5}, r"property 'recordcount' = 10.5: must be an integer"),
    ({"recordcount": True}, r"property 'recordcount' = True: must be an integer, not a boolean"),
    ({"operationcount": -1}, r"property 'operationcount' = -1: must be >= 0"),
    ({"readproportion": "abc"}, r"^cfg: property 'readproportion' = 'abc': must be a number"),
    ({"readproportion": -0.5}, r"property 'readproportion' = -0.5: must be >= 0"),
    ({"readproportion": "nan"}, r"must be a finite number"),
    ({"readproportion": 0, "updateproportion": 0}, r"are all 0; at least one must be > 0"),
    ({"requestdistribution": "pareto"}, r"must be one of uniform, zipfian, latest, hotspot, sequential"),
    ({"readallfields": "yes"}, r"property 'readallfields' = 'yes': must be true or false"),
    ({"keysize": 4}, r"property 'keysize' = 4: must be >= 8"),
    ({"valuesize": 0}, r"property 'valuesize' = 0: must be >= 1"),
    ({"zipfianconstant": 1.0}, r"property 'zipfianconstant' = 1.0: must be in \(0, 1\)"),
    ({"maxscanlength": 5, "minscanlength": 10}, r"property 'maxscanlength' = 5: must be >= minscanlength \(10\)"),
    ({"insertstart": 900, "insertcount": 200}, r"insertstart \(900\) \+ insertcount \(200\) must not exceed"),
    ({"insertstart": 1000}, r"property 'insertstart' = 1000: must be below recordcount"),
    ({"hotspotdatafraction": 1.5}, r"property 'hotspotdatafraction' = 1.5: must be <= 1.0"),
    ({"requestdistribution": "hotspot", "hotspotdatafraction": 0.0}, r"empty hot set"),
    ({"fieldlengthdistribution": "histogram"}, r"histogram distribution is not supported"),
    ({"fieldlengthdistribution": "uniform", "minfieldlength": 200}, r"must be <= fieldlength \(100\)"),
    ({"requestdistribution": "latest", "recordcount": 1}, r"needs at least 2 records"),
    ({"target": -1}, r"property 'target' = -1: must be >= 0.0"),
])
def test_bad_values_name_property_and_source(props, pattern):
    with pytest.raises(WorkloadError, match=pattern):
        CoreWorkload.from_properties(props, "cfg")


def test_bad_value_in_file_names_line(tmp_path):
    path = tmp_path / "wl"
    path.write_text("# x\nrecordcount=1000\n\nreadproportion = half\n")
    with pytest.raises(WorkloadError, match=rf"^{path}:4: property 'readproportion' = 'half': must be a number"):
        CoreWorkload.from_file(path)
    with pytest.raises(WorkloadError, match=r"^overrides: property 'recordcount' = -1"):
        CoreWorkload.from_file(path, {"recordcount": -1, "readproportion": 1})


def test_values_from_toml_types_and_strings():
    a = CoreWorkload.from_properties({"recordcount": 2000, "readproportion": 1, "updateproportion": 0.0,
                                      "readallfields": False, "target": 1e5, "operationcount": 1e6})
    b = CoreWorkload.from_properties({"recordcount": "2000", "readproportion": "1", "updateproportion": "0",
                                      "readallfields": "false", "target": "100000", "operationcount": "1e6"})
    assert a.properties == b.properties
    assert a.operationcount == 1_000_000 and not a.read_all_fields


# --- streams ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", "abcdef")
def test_operation_mix_of_core_workloads(name):
    wl = CoreWorkload.preset(name, {"recordcount": 10_000})
    ops, keys, scans = wl.stream(1, 0).next_batch(40_000)
    assert ops.dtype == np.int8 and keys.dtype == np.int64 and scans.dtype == np.int32
    freq = np.bincount(ops, minlength=5) / len(ops)
    for code in range(5):
        assert freq[code] == pytest.approx(wl.proportions[code], abs=0.01), OP_NAMES[code]


def test_scan_lengths_within_bounds():
    ops, _, scans = CoreWorkload.preset("e").stream(2, 0).next_batch(20_000)
    s = scans[ops == OP_SCAN]
    assert s.min() == 1 and s.max() == 100
    assert (scans[ops != OP_SCAN] == 0).all()
    wl = CoreWorkload.preset("e", {"minscanlength": 5, "maxscanlength": 50, "scanlengthdistribution": "zipfian"})
    ops, _, scans = wl.stream(2, 0).next_batch(20_000)
    s = scans[ops == OP_SCAN]
    assert s.min() == 5 and s.max() <= 50 and np.bincount(s).argmax() == 5


def test_keys_are_the_loaded_key_ids():
    wl = CoreWorkload.preset("a", {"recordcount": 5000})
    loaded = wl.load_keys(0, 5000)
    assert loaded[0] == fnvhash64(0) and wl.key_id(7) == loaded[7]
    ops, keys, _ = wl.stream(3, 0).next_batch(20_000)
    assert np.isin(keys, loaded).all()
    o = ordered("a", recordcount=5000)
    assert o.load_keys(10, 3).tolist() == [10, 11, 12]
    _, keys, _ = o.stream(3, 0).next_batch(20_000)
    assert keys.min() >= 0 and keys.max() < 5000


def test_determinism_per_seed_and_stream():
    wl = CoreWorkload.preset("e")
    a = wl.stream(42, 7).next_batch(5000)
    b = wl.stream(42, 7).next_batch(5000)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    # Batch boundaries do not change the sequence (while the insert sequence does not move).
    s = CoreWorkload.preset("a").stream(42, 7)
    parts = [s.next_batch(n) for n in (1, 999, 3000)]
    whole = CoreWorkload.preset("a").stream(42, 7).next_batch(4000)
    for i in range(3):
        assert np.array_equal(np.concatenate([p[i] for p in parts]), whole[i])


def test_streams_are_independent():
    wl = CoreWorkload.preset("a", {"recordcount": 100_000})
    ops0, keys0, _ = wl.stream(42, 0).next_batch(20_000)
    ops1, keys1, _ = wl.stream(42, 1).next_batch(20_000)
    ops2, keys2, _ = wl.stream(43, 0).next_batch(20_000)
    assert (ops0 == ops1).mean() == pytest.approx(0.5, abs=0.02)
    assert (ops0 == ops2).mean() == pytest.approx(0.5, abs=0.02)
    # The same keys are popular, but not at the same positions.
    assert (keys0 == keys1).mean() < 0.05


def test_inserts_claim_record_numbers_from_the_sequence():
    wl = CoreWorkload.preset("d", {"recordcount": 1000})
    seq = LocalInsertSequence(1000)
    s1, s2 = wl.stream(1, 0, seq), wl.stream(1, 1, seq)
    ops1, keys1, _ = s1.next_batch(2000)
    ops2, keys2, _ = s2.next_batch(2000)
    n1, n2 = int((ops1 == OP_INSERT).sum()), int((ops2 == OP_INSERT).sum())
    assert n1 > 50 and n2 > 50
    assert keys1[ops1 == OP_INSERT].tolist() == [fnvhash64(1000 + i) for i in range(n1)]
    assert keys2[ops2 == OP_INSERT].tolist() == [fnvhash64(1000 + n1 + i) for i in range(n2)]
    assert s1.statistics().inserts == n1 and s1.statistics().ops == 2000 and s1.statistics().batches == 1
    # Nothing acknowledged yet: reads stay among the loaded records.
    assert np.isin(keys1[ops1 == OP_READ], wl.load_keys(0, 1000)).all()


def test_latest_reads_follow_acknowledged_inserts():
    wl = ordered("d", recordcount=1000)
    seq = LocalInsertSequence(1000)
    s = wl.stream(5, 0, seq)
    ops, keys, _ = s.next_batch(20_000)
    reads = keys[ops == OP_READ]
    assert np.bincount(reads).argmax() == 999 and reads.max() <= 999 and reads.min() >= 1
    inserted = int((ops == OP_INSERT).sum())
    seq.acknowledge(inserted)
    limit = seq.acknowledged() - 1
    ops, keys, _ = s.next_batch(20_000)
    reads = keys[ops == OP_READ]
    assert reads.max() <= limit and np.bincount(reads).argmax() == limit
    assert (reads >= 1000).mean() > 0.5      # most reads hit the new records


def test_next_keynum_redraws_unacknowledged_records():
    wl = ordered("e", recordcount=1000, operationcount=100_000)
    assert wl.expected_new_keys == 10_000
    s = wl.stream(9, 0)
    ops, keys, _ = s.next_batch(20_000)
    assert keys[ops == OP_SCAN].max() < 1000     # the zipfian space is 11001 records; only 1000 exist
    assert s.statistics().key_retries > 0


def test_uniform_hotspot_and_sequential_requests():
    u = CoreWorkload.from_properties({"recordcount": 1000, "insertstart": 100, "insertcount": 200,
                                      "insertorder": "ordered", "readproportion": 1, "updateproportion": 0})
    _, keys, _ = u.stream(1, 0).next_batch(10_000)
    assert keys.min() == 100 and keys.max() == 299
    h = CoreWorkload.from_properties({"requestdistribution": "hotspot", "insertorder": "ordered",
                                      "hotspotdatafraction": 0.1, "hotspotopnfraction": 0.9})
    _, keys, _ = h.stream(1, 0).next_batch(20_000)
    assert (keys < 100).mean() == pytest.approx(0.9, abs=0.015)
    q = CoreWorkload.from_properties({"requestdistribution": "sequential", "insertorder": "ordered",
                                      "recordcount": 3, "readproportion": 1, "updateproportion": 0})
    assert q.stream(1, 0).next_batch(5)[1].tolist() == [0, 1, 2, 0, 1]
    x = CoreWorkload.from_properties({"requestdistribution": "exponential", "insertorder": "ordered"})
    _, keys, _ = x.stream(1, 0).next_batch(5000)
    assert keys.min() >= 0 and keys.max() <= 999 and np.median(keys) > 700


def test_insert_sequence_protocol():
    seq = LocalInsertSequence(10)
    assert isinstance(seq, InsertSequence)
    assert seq.acknowledged() == 10 and seq.next() == 10 and seq.next() == 11
    seq.acknowledge()
    assert seq.acknowledged() == 11
    with pytest.raises(ValueError, match="count of completed inserts"):
        seq.acknowledge(fnvhash64(11))
    empty = CoreWorkload.preset("c").stream(1, 0, LocalInsertSequence(0))
    with pytest.raises(WorkloadError, match="no record to choose"):
        empty.next_batch(10)


def test_op_codes():
    assert (OP_READ, OP_UPDATE, OP_INSERT, OP_SCAN, OP_RMW) == (0, 1, 2, 3, 4)
    assert OP_NAMES == ("read", "update", "insert", "scan", "rmw")


# --- bytes and arrivals -------------------------------------------------------------------------

def test_key_and_value_bytes():
    assert key_bytes(1, 8) == b"\x01" + bytes(7)
    assert key_bytes(-1, 12) == b"\xff" * 8 + bytes(4)
    with pytest.raises(ValueError, match=">= 8"):
        key_bytes(1, 4)
    v = value_bytes(0x1234, 7, 40)
    assert len(v) == 40 and v[:16] == (0x1234).to_bytes(8, "little") + (7).to_bytes(8, "little")
    assert decode_value(v) == (0x1234, 7) and decode_value(v, 0x1234) == (0x1234, 7)
    assert decode_value(v, 0x1235) is None
    torn = v[:24] + value_bytes(0x1234, 8, 40)[24:]     # second half from a later write
    assert decode_value(torn) is None
    assert len(value_bytes(1, 1, 5)) == 5 and decode_value(value_bytes(1, 1, 8)) is None
    wl = CoreWorkload.preset("a", {"keysize": 16, "valuesize": 24})
    assert len(wl.key_bytes(5)) == 16 and len(wl.value_bytes(5, 1)) == 24


def test_open_loop_interarrivals():
    wl = CoreWorkload.preset("a", {"target": 200_000})
    s = wl.stream(1, 0)
    gaps = s.interarrivals_ns(40_000)
    assert gaps.mean() == pytest.approx(5000.0, rel=0.03) and gaps.min() >= 0
    # Arrival times come from their own stream: drawing them leaves the operations unchanged.
    a = wl.stream(1, 0).next_batch(100)
    assert np.array_equal(s.next_batch(100)[1], a[1])
    with pytest.raises(ValueError, match="closed loop"):
        CoreWorkload.preset("a").stream(1, 0).interarrivals_ns(10)


def test_field_lengths():
    wl = CoreWorkload.from_properties({"fieldlengthdistribution": "uniform", "minfieldlength": 10,
                                       "fieldlength": 20})
    v = wl.field_lengths(1, 0).next_batch(2000)
    assert v.min() == 10 and v.max() == 20 and wl.value_size == 200


def test_zipfianitems_sets_the_hottest_keys_share():
    # YCSB draws from 10^10 items (hottest key 1/zeta(10^10) = 3.8 %); SMART's bench from its key
    # count (10^8 keys: 1/zeta(10^8) = 4.8 %), whatever the number of records loaded.
    def hottest(props):
        _, keys, _ = CoreWorkload.preset("c", {"recordcount": 20_000, **props}).stream(5, 0).next_batch(200_000)
        return np.unique(keys, return_counts=True)[1].max() / len(keys)
    from workloads.generators import SCRAMBLED_ITEM_COUNT
    assert int(DEFAULTS["zipfianitems"]) == SCRAMBLED_ITEM_COUNT      # the default is YCSB's own universe
    assert hottest({}) == pytest.approx(1 / 26.469, abs=0.002)
    assert hottest({"zipfianitems": 100_000_000}) == pytest.approx(0.048, abs=0.002)
    with pytest.raises(WorkloadError, match=r"property 'zipfianitems' = 1: must be >= 2"):
        CoreWorkload.preset("c", {"zipfianitems": 1})


# -- dmrack's presets for Dolphin's workloads ------------------------------------------------------

def test_dmrack_presets_are_the_documented_properties():
    from workloads.properties import DMRACK_PRESETS, YCSB_LETTERS
    assert DMRACK_PRESETS == ("load", "range-only", "range-write") and YCSB_LETTERS == tuple("abcdef")
    ro = CoreWorkload.preset("range-only")
    assert ro.proportions == (0, 0, 0, 1, 0) and ro.distribution == "uniform"
    assert (ro.min_scan_length, ro.max_scan_length, ro.scan_length_distribution) == (1, 100, "uniform")
    rw = CoreWorkload.preset("Range-Write")
    assert rw.proportions == (0, 0, 0.5, 0.5, 0) and rw.distribution == "uniform" and rw.max_scan_length == 100
    ld = CoreWorkload.preset("load")
    assert ld.proportions == (0, 0, 1, 0, 0)
    ops, _, scans = ro.stream(1, 0).next_batch(2000)
    assert set(ops.tolist()) == {3} and scans.min() >= 1 and scans.max() <= 100
    ops, _, _ = ld.stream(1, 0).next_batch(100)
    assert set(ops.tolist()) == {2}


def test_yscb_presets_unchanged_by_the_dmrack_ones():
    # the A-F presets are YCSB's files key for key (test above); their streams do not move either
    for w in "abcdef":
        assert PRESETS[w]["workload"] == "site.ycsb.workloads.CoreWorkload"
    ops, keys, _ = CoreWorkload.preset("a", {"recordcount": 1000}).stream(7, 3).next_batch(8)
    again = CoreWorkload.preset("a", {"recordcount": 1000}).stream(7, 3).next_batch(8)
    assert (ops == again[0]).all() and (keys == again[1]).all()
    with pytest.raises(WorkloadError, match="choose one of a, b, c, d, e, f or load, range-only, range-write"):
        CoreWorkload.preset("range")


# --- dense key spaces: keyspace and keyorder (dmrack extensions) ----------------------------------

def _feistel_reference(x: int, k: int) -> int:
    """map_keynum's dense mode in plain Python, from its definition (generators.py)."""
    from workloads.generators import KP_HALF, KP_KEY0, key_map_params
    kp = key_map_params(True, k).tolist()
    half, mask = kp[KP_HALF], (1 << kp[KP_HALF]) - 1
    m64 = (1 << 64) - 1
    while True:
        left, right = (x >> half) & mask, x & mask
        for r in range(4):
            z = right ^ kp[KP_KEY0 + r]
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
            z ^= z >> 31
            left, right = right, left ^ (z & mask)
        x = (left << half) | right
        if x < k:
            return x + 1


@pytest.mark.parametrize("k", [1, 2, 3, 5, 1000, 4096, 100_003])
def test_keyspace_is_a_bijection_onto_one_to_k(k):
    wl = CoreWorkload.preset("a", {"recordcount": (k + 1) // 2, "keyspace": k})
    ids = wl.load_keys(0, k)
    assert sorted(ids.tolist()) == list(range(1, k + 1))
    # the Python path (key_id) and the jitted one (load_keys) agree, and both follow the definition
    for n in (0, k // 3, k - 1):
        assert wl.key_id(n) == ids[n] == _feistel_reference(n, k)
    # past the key space ids go on at record number + 1: distinct, never a loaded id
    assert wl.key_id(k) == k + 1 and wl.key_id(k + 5) == k + 6


def test_keyspace_half_full_and_inserts_take_free_ids():
    k = 20_000
    wl = CoreWorkload.preset("a", {"recordcount": k // 2, "keyspace": k, "insertproportion": 0.2,
                                   "readproportion": 0.4, "updateproportion": 0.4})
    loaded = wl.load_keys(0, k // 2)
    assert loaded.min() >= 1 and loaded.max() <= k and len(set(loaded.tolist())) == k // 2
    # loaded at random positions: each of the 78 blocks of 256 ids (a Dolphin leaf's 7-byte prefix)
    # holds about half its ids, neither packed at one end nor evenly spaced
    per_block = np.bincount((loaded - 1) // 256)[:k // 256]
    assert 90 < per_block.mean() < 166 and per_block.std() > 2
    assert loaded[:k // 4].max() > k * 0.9           # the first records are not the low ids
    ops, keys, _ = wl.stream(7, 0).next_batch(5000)
    assert np.isin(keys[ops != OP_INSERT], loaded).all()
    new = keys[ops == OP_INSERT]
    assert len(new) > 0 and not np.isin(new, loaded).any() and new.max() <= k
    assert new.tolist() == [wl.key_id(k // 2 + i) for i in range(len(new))]


@pytest.mark.parametrize("k, n", [(2, 1), (7, 3), (20_000, 10_000), (4096, 4096)])
def test_an_ordered_load_fills_the_low_ids_in_order_and_inserts_take_the_rest(k, n):
    """loadorder = ordered (Dolphin's benchmark): records 0..N-1 are the ids 1..N in order; the
    records N..K-1 that inserts take are a bijection onto N+1..K, spread over them; past K,
    record number + 1."""
    wl = CoreWorkload.preset("a", {"recordcount": n, "keyspace": k, "loadorder": "ordered"})
    assert wl.load_keys(0, n).tolist() == list(range(1, n + 1))
    rest = wl.load_keys(n, k - n).tolist()           # what the inserts' record numbers map to
    assert sorted(rest) == list(range(n + 1, k + 1))
    for v in range(n, k, max(1, (k - n) // 7)):      # the Python path agrees with the jitted one
        assert wl.key_id(v) == rest[v - n]
    assert wl.key_id(k) == k + 1
    if k - n >= 1000:                                # pseudo-random places, not appended in order
        assert sum(a < b for a, b in zip(rest, rest[1:])) < 0.6 * len(rest)


def test_an_ordered_load_needs_a_hashed_keyspace():
    for props in ({"loadorder": "ordered"}, {"loadorder": "ordered", "keyspace": 100, "insertorder": "ordered"}):
        with pytest.raises(WorkloadError, match="'loadorder' = 'ordered': needs a keyspace and insertorder = hashed"):
            CoreWorkload.preset("a", {"recordcount": 10, **props})


def test_a_think_time_is_read_in_microseconds_and_refused_with_a_target():
    wl = CoreWorkload.preset("c", {"recordcount": 10, "thinktime": "2.5"})
    assert wl.thinktime_us == 2.5 and "2.5 µs think time" in wl.describe()
    assert CoreWorkload.preset("c", {"recordcount": 10}).thinktime_us == 0
    with pytest.raises(WorkloadError, match="'thinktime' = 5.0: a think time is for the closed loop"):
        CoreWorkload.preset("c", {"recordcount": 10, "thinktime": 5, "target": 1000})
    with pytest.raises(WorkloadError, match="'thinktime'"):
        CoreWorkload.preset("c", {"recordcount": 10, "thinktime": -1})
    assert CoreWorkload.preset("c", {"recordcount": 10}).thinkmode == "sleep"
    spin = CoreWorkload.preset("c", {"recordcount": 10, "thinktime": 3, "thinkmode": "spin"})
    assert spin.thinkmode == "spin" and "3 µs think time after each operation (spinning)" in spin.describe()
    with pytest.raises(WorkloadError, match="'thinkmode'"):
        CoreWorkload.preset("c", {"recordcount": 10, "thinkmode": "nap"})


@pytest.mark.parametrize("dist", ["zipfian", "uniform"])
def test_keyspace_request_distributions_map_like_the_load(dist):
    k = 8192
    wl = CoreWorkload.preset("c", {"recordcount": k // 2, "keyspace": k, "requestdistribution": dist})
    plain = CoreWorkload.preset("c", {"recordcount": k // 2, "requestdistribution": dist, "insertorder": "ordered"})
    _, keys, _ = wl.stream(5, 1).next_batch(4000)
    _, nums, _ = plain.stream(5, 1).next_batch(4000)       # the same record numbers, unmapped
    assert keys.tolist() == [wl.key_id(n) for n in nums.tolist()]
    assert np.isin(keys, wl.load_keys(0, k // 2)).all()


def test_keyspace_ordered_is_record_number_plus_one():
    wl = CoreWorkload.preset("a", {"recordcount": 10, "keyspace": 20, "insertorder": "ordered"})
    assert wl.load_keys(0, 10).tolist() == list(range(1, 11))


def test_keyorder_big_makes_byte_order_numeric():
    wl = CoreWorkload.preset("a", {"keyorder": "big", "keysize": 16})
    assert wl.key_bytes(0x0102) == bytes(6) + b"\x01\x02" + bytes(8)
    ids = [1, 255, 256, 257, 1 << 40, (1 << 62) + 3]
    assert sorted(ids, key=wl.key_bytes) == ids
    little = CoreWorkload.preset("a")
    assert little.key_order == "little" and little.key_bytes(0x0102) == b"\x02\x01" + bytes(6)
    from workloads.keys import key_packer
    assert key_packer(16, "big")(0x0102) == wl.key_bytes(0x0102)


@pytest.mark.parametrize("props, words", [
    ({"keyspace": 0}, "'keyspace' = 0: must be >= 1"),
    ({"keyspace": 999, "recordcount": 1000}, "must be >= recordcount (1000)"),
    ({"keyspace": "many"}, "must be an integer"),
    ({"keyorder": "middle"}, "must be one of little, big"),
])
def test_keyspace_and_keyorder_errors_are_one_line(props, words):
    with pytest.raises(WorkloadError) as e:
        CoreWorkload.preset("a", props)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_keyspace_load_beyond_the_space_is_refused():
    wl = CoreWorkload.preset("a", {"recordcount": 10, "keyspace": 12})
    with pytest.raises(WorkloadError, match="keyspace = 12"):
        wl.load_keys(10, 5)


def test_compute_nodes_pack_keys_in_the_workloads_order():
    from nodes.compute import _packer
    big = CoreWorkload.preset("a", {"keyorder": "big"})
    assert _packer(big)(0x0102) == bytes(6) + b"\x01\x02"
    assert _packer(CoreWorkload.preset("a", {"keysize": 12}))(0x0102) == b"\x02\x01" + bytes(10)
