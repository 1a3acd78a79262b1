"""PD3's request parsers and the memory server's key directory (nodes/systems/pd3/parsers.py):
each format on valid, pipelined, empty and malformed packets; RESP built with
workloads.resp.encode_command; KeyDirectory updates, lookups and misses."""

from __future__ import annotations

import struct

import pytest

from nodes.systems.lib.hashing import hash64
from nodes.systems.pd3.parsers import (
    DELETE, READ, RESERVED_KEY, WRITE, HashMapParser, KeyDirectory, KeyLocation, PageParser,
    ParserStats, RespRequestParser, encode_hashmap, encode_pages, resp_key,
)
from workloads.resp import encode_command as cmd


def k(name):
    return resp_key(name)


# -- hash map --------------------------------------------------------------------------------

def test_hashmap_records_in_packet_order():
    p = HashMapParser()
    pkt = encode_hashmap([(READ, 5), (WRITE, 6, 99), (DELETE, 7), (READ, 0)])
    assert len(pkt) == 9 + 17 + 9 + 9
    assert pkt[:9] == b"\x00" + struct.pack("<Q", 5)
    assert p.parse(pkt) == [(5, READ), (6, WRITE), (7, DELETE), (0, READ)]
    assert p.parse(memoryview(pkt)) == [(5, READ), (6, WRITE), (7, DELETE), (0, READ)]
    assert p.statistics() == ParserStats(2, 8, 0, 0, 4, 2, 2)


def test_hashmap_empty_packet_has_no_keys_and_is_not_malformed():
    p = HashMapParser()
    assert p.parse(b"") == []
    assert p.statistics() == ParserStats(1, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("pkt", [
    b"\x00" + b"\x01" * 7,                                  # truncated key
    encode_hashmap([(READ, 1)]) + b"\x01" + struct.pack("<Q", 2) + b"\x00" * 4,   # write cut in its value
    b"\x03" + struct.pack("<Q", 1),                         # unknown op
    b"\x00" + struct.pack("<Q", RESERVED_KEY),              # the Host View's empty marker
])
def test_hashmap_malformed_packet_yields_nothing_and_is_counted(pkt):
    p = HashMapParser()
    assert p.parse(pkt) == []
    assert p.parse(encode_hashmap([(READ, 3)])) == [(3, READ)]      # and the parser goes on
    assert p.statistics() == ParserStats(2, 1, 1, 0, 1, 0, 0)


def test_hashmap_encoder_refuses_bad_records():
    with pytest.raises(ValueError):
        encode_hashmap([(WRITE, 1)])
    with pytest.raises(ValueError):
        encode_hashmap([(7, 1)])
    with pytest.raises(ValueError):
        encode_hashmap([(READ, -1)])


def test_parse_refuses_a_non_bytes_packet():
    with pytest.raises(ValueError, match="a packet is bytes"):
        HashMapParser().parse("GET")


# -- page server -----------------------------------------------------------------------------

def test_pages_are_reads():
    p = PageParser()
    assert p.parse(encode_pages([10])) == [(10, READ)]
    assert p.parse(encode_pages([1, 2, 3, 2])) == [(1, READ), (2, READ), (3, READ), (2, READ)]
    assert p.parse(b"") == []
    assert p.statistics() == ParserStats(3, 5, 0, 0, 5, 0, 0)


@pytest.mark.parametrize("pkt", [b"\x01" * 7, encode_pages([1]) + b"\x00", struct.pack("<Q", RESERVED_KEY)])
def test_pages_malformed(pkt):
    p = PageParser()
    assert p.parse(pkt) == []
    assert p.statistics().malformed == 1


# -- RESP ------------------------------------------------------------------------------------

def test_resp_key_is_hash64_and_shared_with_the_host():
    assert resp_key(b"user:1") == int(hash64(b"user:1")) == resp_key("user:1")
    assert resp_key(b"a") != resp_key(b"b")
    with pytest.raises(ValueError):
        resp_key(5)


@pytest.mark.parametrize("request_, expect", [
    (cmd("GET", "a"), [("a", READ)]),
    (cmd("get", "a"), [("a", READ)]),
    (cmd("SET", "a", "1"), [("a", WRITE)]),
    (cmd("SET", "a", "1", "EX", "10"), [("a", WRITE)]),
    (cmd("DEL", "a", "b", "c"), [("a", DELETE), ("b", DELETE), ("c", DELETE)]),
    (cmd("UNLINK", "a"), [("a", DELETE)]),
    (cmd("MGET", "a", "b"), [("a", READ), ("b", READ)]),
    (cmd("MSET", "a", "1", "b", "2"), [("a", WRITE), ("b", WRITE)]),
    (cmd("INCR", "n"), [("n", READ)]),                  # read-modify-write parses as READ
    (cmd("INCRBY", "n", 5), [("n", READ)]),
    (cmd("GETSET", "n", "v"), [("n", READ)]),
])
def test_resp_commands(request_, expect):
    p = RespRequestParser()
    assert p.parse(request_) == [(k(name), op) for name, op in expect]
    assert p.statistics().malformed == 0 and p.statistics().ignored == 0


def test_resp_pipelined_packet_yields_every_key_in_order():
    p = RespRequestParser()
    pkt = cmd("GET", "x") + cmd("SET", "y", "v") + cmd("PING") + cmd("DEL", "x", "z") + cmd("MGET", "y", "x")
    assert p.parse(pkt) == [(k("x"), READ), (k("y"), WRITE), (k("x"), DELETE), (k("z"), DELETE),
                            (k("y"), READ), (k("x"), READ)]
    assert p.statistics() == ParserStats(1, 6, 0, 1, 3, 1, 2)


def test_resp_unknown_command_and_wrong_arity_are_ignored_not_malformed():
    p = RespRequestParser()
    pkt = cmd("PING") + cmd("GET") + cmd("GET", "a", "b") + cmd("SET", "a") + cmd("MSET", "a", "1", "b") + cmd("GET", "c")
    assert p.parse(pkt) == [(k("c"), READ)]
    s = p.statistics()
    assert (s.malformed, s.ignored, s.keys) == (0, 5, 1)


def test_resp_empty_packet():
    p = RespRequestParser()
    assert p.parse(b"") == []
    assert p.statistics() == ParserStats(1, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("pkt", [
    b"GET a\r\n",                                       # inline commands are not supported
    cmd("GET", "a")[:-3],                               # cut inside the key
    cmd("GET", "a") + b"*2\r\n$3\r\nGET\r\n",           # a whole request, then one cut after its name
    b"*1\r\n$3\r\nGETX\r\n",                            # bulk string not followed by CRLF
    b":5\r\n",                                          # not a request
    b"*2\r\n$3\r\nGET\r\n:1\r\n",                       # an element that is not a bulk string
    b"*0\r\n",                                          # an empty array
    b"$-1\r\n",
])
def test_resp_malformed_packet_yields_no_keys_counts_and_keeps_going(pkt):
    p = RespRequestParser()
    assert p.parse(pkt) == []
    assert p.parse(cmd("GET", "ok")) == [(k("ok"), READ)]      # nothing of the bad packet leaks in
    s = p.statistics()
    assert (s.packets, s.malformed, s.keys) == (2, 1, 1)


# -- KeyDirectory ----------------------------------------------------------------------------

def test_directory_built_from_write_requests():
    d = KeyDirectory()
    hm = HashMapParser()
    data = encode_hashmap([(WRITE, 1, 100)])
    assert d.apply_request(hm, data, region=0, offset=4096) == [(1, WRITE)]
    d.apply_request(hm, encode_hashmap([(WRITE, 2, 200)]), region=1, offset=64)
    assert d.lookup(1) == KeyLocation(0, 4096, 17)
    assert d.lookup(2) == KeyLocation(1, 64, 17)
    assert len(d) == 2 and 1 in d


def test_directory_rewrite_moves_and_delete_drops():
    d = KeyDirectory()
    d.apply([(5, WRITE)], 0, 0, 8)
    d.apply([(5, WRITE)], 0, 128, 8)                    # a newer write of the item elsewhere
    assert d.lookup(5) == KeyLocation(0, 128, 8)
    d.apply([(5, DELETE), (6, DELETE), (7, READ)], 0, 256, 9)
    assert d.lookup(5) is None                          # a miss: PD3 answers the prefetch with an error
    assert d.lookup(7) is None                          # a READ record maps nothing
    s = d.statistics()
    assert (s.keys, s.writes, s.deletes, s.deleted_absent, s.lookups, s.hits, s.misses) == (0, 2, 2, 1, 3, 1, 2)


def test_directory_from_resp_and_a_malformed_write_changes_nothing():
    d = KeyDirectory()
    p = RespRequestParser()
    d.apply_request(p, cmd("MSET", "a", "1", "b", "2"), region=2, offset=0)
    assert d.lookup(resp_key("a")) == d.lookup(resp_key("b")) == KeyLocation(2, 0, len(cmd("MSET", "a", "1", "b", "2")))
    assert d.apply_request(p, b"junk", region=2, offset=512) == []
    assert len(d) == 2 and d.statistics().requests == 2


def test_directory_refuses_bad_input():
    d = KeyDirectory()
    with pytest.raises(ValueError):
        d.apply([(1, 9)], 0, 0, 8)
    with pytest.raises(ValueError):
        d.apply([(1, WRITE)], -1, 0, 8)
    with pytest.raises(ValueError):
        d.lookup(RESERVED_KEY)
