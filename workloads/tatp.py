"""TATP as FORD defines it (minghust/ford workload/tatp; the same in SMART's dtx/tatp), for transactional systems.

Five tables (FORD's table ids, so that with 2 memory nodes subscriber, special_facility and
call_forwarding have their primaries on node 1, secondary_subscriber and access_info on node 0:
SMART manager.h:149-155), keys packed into 8 bytes as FORD packs its key structs:

=====================  ==  ================================  ===================================  =======
table                  id  key                               value (bytes used of the 40)         buckets
=====================  ==  ================================  ===================================  =======
subscriber             1   s_id                              bits, hex, byte2, msc/vlr location   0.125 N
secondary_subscriber   2   sub_nbr (15 decimal digits, 4 b)  s_id, magic                          0.125 N
special_facility       3   s_id << 8 | sf_type               is_active, error_cntrl, data_a, b    0.4 N
access_info            4   s_id << 8 | ai_type               data1, data2, data3, data4           0.4 N
call_forwarding        5   s_id << 16 | sf_type << 8 | start end_time, numberx                  0.5 N
=====================  ==  ================================  ===================================  =======

Every record's value is 40 bytes (SMART's ``CONFIG_ITEM_SIZE`` for TATP: 96-byte records), of which
each table uses its fields' bytes. Population (tatp.h:471-629, a fixed seed): per subscriber 1-4
access_info rows of distinct types, 1-4 special_facility rows (``is_active`` with p = 0.85), and
for each special facility each start time in {0, 8, 16} with p = 0.5 a call_forwarding row whose
end time is start + 1..8. Bucket counts from FORD's table json (12,500 / 40,000 / 50,000 for
100,000 subscribers), scaled with N.

Subscriber ids are NURand-skewed as FORD draws them (tatp.h:281-287,342-346):
``((rand % N) | (rand & A)) % N`` with A = 65,535 for N <= 1,000,000 (1,048,575 above).

The mix (tatp_db.h FREQUENCY_*; each step one ``tx.execute()``, FORD's ``TxExe``):

=======================  ==  ==================================================================
GetSubscriberData        35  read subscriber (1 record, read-only: no validation)
GetAccessData            35  read access_info(s, 1..4): a missing row aborts (``not_found``)
GetNewDestination        10  read special_facility(s, 1..4) (missing or inactive aborts); then
                             read call_forwarding(s, sf, t) for t = 0, 8, .. start (any missing
                             aborts); aborts unless a row has start <= st and end_time > et
UpdateSubscriberData      2  update subscriber.bit_1 and special_facility(s, 1..4).data_a
UpdateLocation           14  read secondary_subscriber(sub_nbr(s)); then update subscriber.vlr_location
InsertCallForwarding      2  read secondary_subscriber; then special_facility (missing aborts);
                             then insert call_forwarding(s, sf, {0,8,16}) (an existing row aborts)
DeleteCallForwarding      2  read secondary_subscriber; then delete call_forwarding(s, sf, start)
                             (missing aborts)
=======================  ==  ==================================================================

The missing rows make about a quarter of attempts abort by construction (the brief's §4.2:
GetAccessData 0.35 x 0.375, GetNewDestination about 0.095, the rest about 0.03); FORD counts them as
aborts and draws a new transaction, as here.

Invariants (:func:`check_tatp`): ``secondary_subscriber[sub_nbr(s)].s_id == s`` and its magic;
every live call_forwarding row has its special_facility row (an insert reads it first).

Bad parameters are refused with one line (:class:`workloads.properties.WorkloadError`).
"""

from __future__ import annotations

import random
import struct
from typing import NamedTuple

from workloads.tables import Codec, TableSpec, TxnWorkload, check_int, check_mix, check_number

TYPES = ("GetSubscriberData", "GetAccessData", "GetNewDestination", "UpdateSubscriberData", "UpdateLocation",
         "InsertCallForwarding", "DeleteCallForwarding")
#: tatp_db.h FREQUENCY_* (= SMART dtx/tatp.h), in the order of its workgen array
FREQUENCIES = (35, 35, 10, 2, 14, 2, 2)
#: config/tatp_config.json (= SMART config/transaction.json)
NUM_SUBSCRIBERS = 100_000
#: SMART dtx CMakeLists CONFIG_ITEM_SIZE for TATP (every table's value slot)
VALUE_BYTES = 40
#: FORD's table ids (TATPTableType)
SUBSCRIBER_ID, SEC_SUBSCRIBER_ID, SPECIAL_FACILITY_ID, ACCESS_INFO_ID, CALL_FORWARDING_ID = 1, 2, 3, 4, 5
#: buckets per subscriber, FORD's workload/tatp/tatp_tables/*.json for 100,000 subscribers
BUCKETS = {"subscriber": 0.125, "secondary_subscriber": 0.125, "special_facility": 0.4, "access_info": 0.4,
           "call_forwarding": 0.5}
#: tatp_db.h: the magic numbers FORD asserts on every read (97..101 in its struct fields)
MAGIC = {"secondary_subscriber": 98, "access_info": 99, "special_facility": 100, "call_forwarding": 101}
START_TIMES = (0, 8, 16)
ACTIVE_PERCENT = 85                     # tatp.h: is_active = (rand % 100 < 85)
POPULATE_SEED = 0xDEADBEEF              # a fixed seed (FORD's FastRand is seeded fixed too; the value is ours)

_SUB = struct.Struct("<HxxxxxxQQII")    # bits (bit_1..bit_10), hex (4-bit x 10), byte2 (8 x 1 B), msc, vlr
_SEC = struct.Struct("<II")             # s_id, magic
_AI = struct.Struct("<BB3s5sB")         # data1, data2, data3, data4, magic
_SF = struct.Struct("<BBB5sB")          # is_active, error_cntrl, data_a, data_b, magic
_CF = struct.Struct("<B15sB")           # end_time, numberx, magic


def _codec(st: struct.Struct) -> Codec:
    return Codec(lambda v, st=st: st.pack(*v).ljust(VALUE_BYTES, b"\0"),
                 lambda b, st=st: st.unpack_from(bytes(b), 0))


CODECS = {"subscriber": _codec(_SUB), "secondary_subscriber": _codec(_SEC), "special_facility": _codec(_SF),
          "access_info": _codec(_AI), "call_forwarding": _codec(_CF)}


def sub_nbr_key(s_id: int) -> int:
    """The secondary key: s_id as 15 decimal digits, one 4-bit nibble each (tatp.h)."""
    return int(str(int(s_id)).zfill(15), 16)


def ai_key(s_id: int, ai_type: int) -> int:
    return (int(s_id) << 8) | ai_type


def sf_key(s_id: int, sf_type: int) -> int:
    return (int(s_id) << 8) | sf_type


def cf_key(s_id: int, sf_type: int, start_time: int) -> int:
    return (int(s_id) << 16) | (sf_type << 8) | start_time


class Tatp(TxnWorkload):
    """The workload's parameters (validated), its population and its transaction bodies."""

    TYPES = TYPES           # its transactions' names (what a shared history records by position)
    #: the scenario keys of :meth:`from_properties`, with the constructor's argument each sets
    PARAMETERS = ("subscribers", "frequencies", "buckets_scale", "seed")
    LABEL = "TATP"
    value_size = VALUE_BYTES

    def __init__(self, subscribers: int = NUM_SUBSCRIBERS, frequencies=FREQUENCIES, buckets_scale: float = 1.0,
                 seed: int = POPULATE_SEED):
        self.subscribers = check_int("tatp", "subscribers", subscribers, 1, 1 << 32)
        self.frequencies, self._workgen = check_mix("tatp", frequencies, TYPES)
        self.buckets_scale = check_number("tatp", "buckets_scale", buckets_scale, 0.01, 64)
        self.seed = check_int("tatp", "seed", seed, 0)
        # tatp.h:281-287: A = 65,535 up to 1 M subscribers, 1,048,575 above
        self.nurand_a = 65_535 if self.subscribers <= 1_000_000 else 1_048_575
        self._rows = self._populate()

    @property
    def recordcount(self) -> int:
        """Subscribers (the rack's capacity formula reads it)."""
        return self.subscribers

    def describe(self) -> str:
        freq = "/".join(str(f) for f in self.frequencies)
        return f"TATP: {self.subscribers:,} subscribers, mix {freq} ({', '.join(TYPES)}){self.loop()}"

    # -- what the system is given ---------------------------------------------------------------
    def tables(self) -> list[TableSpec]:
        n = self.subscribers
        ids = {"subscriber": SUBSCRIBER_ID, "secondary_subscriber": SEC_SUBSCRIBER_ID,
               "special_facility": SPECIAL_FACILITY_ID, "access_info": ACCESS_INFO_ID,
               "call_forwarding": CALL_FORWARDING_ID}
        return [TableSpec(name, ids[name], VALUE_BYTES, max(1, round(n * per * self.buckets_scale)),
                          len(self._rows[name])) for name, per in BUCKETS.items()]

    def codecs(self) -> dict:
        return dict(CODECS)

    def rows(self, table: str):
        enc = CODECS[table].encode
        return ((k, enc(v)) for k, v in self._rows[table])

    def _populate(self) -> dict:
        rng = random.Random(self.seed)
        rows = {t: [] for t in BUCKETS}
        for s in range(self.subscribers):
            rows["subscriber"].append((s, (rng.getrandbits(10), rng.getrandbits(40), rng.getrandbits(64),
                                           rng.getrandbits(32), rng.getrandbits(32))))
            rows["secondary_subscriber"].append((sub_nbr_key(s), (s, MAGIC["secondary_subscriber"])))
            for ai in sorted(rng.sample(range(1, 5), rng.randint(1, 4))):
                rows["access_info"].append((ai_key(s, ai), (rng.getrandbits(8), rng.getrandbits(8), b"abc", b"defgh",
                                                            MAGIC["access_info"])))
            for sf in sorted(rng.sample(range(1, 5), rng.randint(1, 4))):
                active = 1 if rng.randrange(100) < ACTIVE_PERCENT else 0
                rows["special_facility"].append((sf_key(s, sf), (active, rng.getrandbits(8), rng.getrandbits(8),
                                                                 b"ijklm", MAGIC["special_facility"])))
                for st in START_TIMES:
                    if rng.randrange(2):
                        rows["call_forwarding"].append((cf_key(s, sf, st), (st + rng.randint(1, 8), b"0" * 15,
                                                                            MAGIC["call_forwarding"])))
        return rows

    # -- drawing transactions -----------------------------------------------------------------
    def s_id(self, rng: random.Random) -> int:
        """FORD's NURand-like skew (tatp.h:342-346), 0-based."""
        n = self.subscribers
        return ((rng.randrange(1 << 32) % n) | (rng.randrange(1 << 32) & self.nurand_a)) % n

    def next(self, rng: random.Random):
        """``(name, body, args)`` of the next transaction: ``yield from client.run(co, body, *args)``."""
        name = self._workgen[rng.randrange(100)]
        s = self.s_id(rng)
        if name == "GetSubscriberData":
            args = (s,)
        elif name == "GetAccessData":
            args = (s, rng.randint(1, 4))
        elif name == "GetNewDestination":
            args = (s, rng.randint(1, 4), rng.choice(START_TIMES), rng.randint(1, 24))
        elif name == "UpdateSubscriberData":
            args = (s, rng.randint(1, 4), rng.getrandbits(1), rng.getrandbits(8))
        elif name == "UpdateLocation":
            args = (s, rng.getrandbits(32))
        elif name == "InsertCallForwarding":
            st = rng.choice(START_TIMES)
            args = (s, rng.randint(1, 4), st, st + rng.randint(1, 8))
        else:
            args = (s, rng.randint(1, 4), rng.choice(START_TIMES))
        return name, BODIES[name], args


# -- the transaction bodies (tatp_txn.cc); a missing record aborts inside the design (not_found) ----

def get_subscriber_data(tx, s):
    tx.read("subscriber", s)
    yield from tx.execute()
    return 0


def get_access_data(tx, s, ai_type):
    tx.read("access_info", ai_key(s, ai_type))
    yield from tx.execute()
    return 0


def get_new_destination(tx, s, sf_type, start_time, end_time):
    sf = tx.read("special_facility", sf_key(s, sf_type))
    yield from tx.execute()
    if not sf.value[0]:
        tx.abort("user", "special facility inactive")
    rows = [(t, tx.read("call_forwarding", cf_key(s, sf_type, t))) for t in START_TIMES if t <= start_time]
    yield from tx.execute()
    if not any(t <= start_time and it.value[0] > end_time for t, it in rows):
        tx.abort("user", "no call forwarding matches")
    return 0


def update_subscriber_data(tx, s, sf_type, bit_1, data_a):
    sub = tx.read_for_update("subscriber", s)
    sf = tx.read_for_update("special_facility", sf_key(s, sf_type))
    yield from tx.execute()
    bits, hexv, byte2, msc, vlr = sub.value
    tx.write(sub, ((bits & ~1) | bit_1, hexv, byte2, msc, vlr))
    active, err, _, data_b, magic = sf.value
    tx.write(sf, (active, err, data_a, data_b, magic))
    return 0


def _secondary(tx, s):
    sec = tx.read("secondary_subscriber", sub_nbr_key(s))
    yield from tx.execute()
    if sec.value[0] != s:                   # FORD asserts it (tatp_txn.cc)
        tx.abort("user", f"secondary_subscriber of {s} names {sec.value[0]}")


def update_location(tx, s, vlr):
    yield from _secondary(tx, s)
    sub = tx.read_for_update("subscriber", s)
    yield from tx.execute()
    bits, hexv, byte2, msc, _ = sub.value
    tx.write(sub, (bits, hexv, byte2, msc, vlr))
    return 0


def insert_call_forwarding(tx, s, sf_type, start_time, end_time):
    yield from _secondary(tx, s)
    tx.read("special_facility", sf_key(s, sf_type))
    yield from tx.execute()
    cf = tx.insert("call_forwarding", cf_key(s, sf_type, start_time))
    yield from tx.execute()
    tx.write(cf, (end_time, b"1" * 15, MAGIC["call_forwarding"]))
    return 0


def delete_call_forwarding(tx, s, sf_type, start_time):
    yield from _secondary(tx, s)
    tx.delete("call_forwarding", cf_key(s, sf_type, start_time))
    yield from tx.execute()
    return 0


BODIES = {"GetSubscriberData": get_subscriber_data, "GetAccessData": get_access_data,
          "GetNewDestination": get_new_destination, "UpdateSubscriberData": update_subscriber_data,
          "UpdateLocation": update_location, "InsertCallForwarding": insert_call_forwarding,
          "DeleteCallForwarding": delete_call_forwarding}


class TatpReport(NamedTuple):
    ok: bool
    problems: tuple
    message: str


def check_tatp(records: dict, subscribers: int) -> TatpReport:
    """TATP's invariants on the tables' records (``{table: {key: [(version, lock, value, valid,
    off), per replica]}}``, the primary first): every subscriber's secondary row names it with
    its magic, and every live call_forwarding row has its special_facility row."""
    problems = []
    sec = records["secondary_subscriber"]
    for s in range(subscribers):
        reps = sec.get(sub_nbr_key(s))
        if not reps or not reps[0][3]:
            problems.append(f"secondary_subscriber of {s} missing")
            continue
        s_id, magic = _SEC.unpack_from(reps[0][2], 0)
        if (s_id, magic) != (s, MAGIC["secondary_subscriber"]):
            problems.append(f"secondary_subscriber of {s} is ({s_id}, magic {magic})")
    sfs = records["special_facility"]
    for key, reps in records["call_forwarding"].items():
        if not reps[0][3]:
            continue
        if _CF.unpack_from(reps[0][2], 0)[2] != MAGIC["call_forwarding"]:
            problems.append(f"call_forwarding[{key:#x}] has a bad magic")
        sfk = key >> 8
        if sfk not in sfs or not sfs[sfk][0][3]:
            problems.append(f"call_forwarding[{key:#x}] has no special_facility row")
    msg = "TATP invariants hold" if not problems else f"{len(problems)} TATP invariant(s) broken, first: {problems[0]}"
    return TatpReport(not problems, tuple(problems), msg)
