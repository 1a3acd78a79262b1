"""RESP2 encoder and incremental parser (workloads/resp.py), checked against hiredis's C parser and
encoder where it has one."""

from __future__ import annotations

import random

import pytest

from workloads.resp import (
    INCOMPLETE, MAX_BULK, MAX_DEPTH, NULL_ARRAY, RespError, RespParser, RespProtocolError,
    SimpleString, encode_command, encode_reply,
)

EVERY_TYPE = [
    (SimpleString("OK"), b"+OK\r\n"),
    (SimpleString(""), b"+\r\n"),
    (RespError("ERR unknown command 'FOO'"), b"-ERR unknown command 'FOO'\r\n"),
    (0, b":0\r\n"),
    (-42, b":-42\r\n"),
    ((1 << 63) - 1, b":9223372036854775807\r\n"),
    (-(1 << 63), b":-9223372036854775808\r\n"),
    (b"foo", b"$3\r\nfoo\r\n"),
    (b"", b"$0\r\n\r\n"),
    (b"a\r\nb\x00\xff", b"$6\r\na\r\nb\x00\xff\r\n"),   # bulk strings are binary-safe
    (None, b"$-1\r\n"),
    ([], b"*0\r\n"),
    ([1, b"a", None], b"*3\r\n:1\r\n$1\r\na\r\n$-1\r\n"),
    ([[SimpleString("OK"), []], [[RespError("E")]]], b"*2\r\n*2\r\n+OK\r\n*0\r\n*1\r\n*1\r\n-E\r\n"),
]


def parse_all(data: bytes, chunks=None, **limits) -> list:
    """Every value of ``data``, fed whole or cut at the given chunk sizes."""
    p = RespParser(**limits)
    out = []
    if chunks is None:
        chunks = [len(data)]
    i = 0
    for n in chunks:
        p.feed(data[i:i + n])
        i += n
        out.extend(p)
    assert i >= len(data)
    assert p.next() is INCOMPLETE and p.pending == 0
    return out


def random_chunks(rng: random.Random, total: int) -> list[int]:
    out = []
    while total > 0:
        n = rng.choice([1, 1, 2, 3, 5, 8, 13, 64, 1000])
        out.append(n)
        total -= n
    return out


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 4 else 6)
    if kind == 0:
        return SimpleString("".join(rng.choice("abcXYZ 019-+:$*'") for _ in range(rng.randrange(12))))
    if kind == 1:
        return RespError("ERR " + "".join(rng.choice("abc xyz") for _ in range(rng.randrange(12))))
    if kind == 2:
        return rng.choice([0, -1, 1, rng.randrange(-(1 << 63), 1 << 63), (1 << 63) - 1, -(1 << 63)])
    if kind in (3, 4):
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 10, 100, 3000])))
    if kind == 5:
        return None
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(6))]


def random_values(seed: int, n: int) -> list:
    rng = random.Random(seed)
    return [random_value(rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Encoding and round trips


@pytest.mark.parametrize("value, wire", EVERY_TYPE)
def test_every_type_encodes_to_its_wire_form_and_parses_back(value, wire):
    assert encode_reply(value) == wire
    [parsed] = parse_all(wire)
    assert parsed == value and type(parsed) is type(value)


def test_null_array_and_null_bulk_both_parse_as_none():
    assert encode_reply(NULL_ARRAY) == b"*-1\r\n"
    assert encode_reply([NULL_ARRAY, None]) == b"*2\r\n*-1\r\n$-1\r\n"
    assert parse_all(b"*-1\r\n$-1\r\n") == [None, None]


def test_str_and_tuples_encode_as_bulk_strings_and_arrays():
    assert encode_reply("é") == b"$2\r\n\xc3\xa9\r\n"
    assert encode_reply((1, "a", bytearray(b"b"), memoryview(b"c"))) == encode_reply([1, b"a", b"b", b"c"])


def test_simple_strings_that_are_not_utf8_round_trip_to_their_bytes():
    [s] = parse_all(b"+\xff\xfe\r\n")
    assert isinstance(s, SimpleString) and encode_reply(s) == b"+\xff\xfe\r\n"


def test_encoders_refuse_what_resp_cannot_say():
    for bad in (1.5, True, object(), {b"k": b"v"}):
        with pytest.raises(TypeError):
            encode_reply(bad)
    with pytest.raises(ValueError, match="CR or LF"):
        encode_reply(SimpleString("a\r\nb"))
    with pytest.raises(ValueError, match="CR or LF"):
        encode_reply(RespError("a\nb"))
    with pytest.raises(ValueError, match="64-bit"):
        encode_reply(1 << 63)
    with pytest.raises(ValueError, match="needs at least"):
        encode_command()
    for bad in (1.5, False, None, [b"a"]):
        with pytest.raises(TypeError, match="bytes, str or int"):
            encode_command("SET", bad)


def test_encode_command_is_an_array_of_bulk_strings():
    assert encode_command("GET", b"k") == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    assert encode_command("SET", "k", 12) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n"
    assert parse_all(encode_command("DEL", b"\r\n")) == [[b"DEL", b"\r\n"]]


def test_random_values_round_trip():
    values = random_values(1, 300)
    assert parse_all(b"".join(encode_reply(v) for v in values)) == values


# ---------------------------------------------------------------------------------------------
# Incremental parsing


def test_byte_by_byte_and_random_splits_give_the_same_values():
    values = random_values(2, 200)
    data = b"".join(encode_reply(v) for v in values)
    assert parse_all(data, [1] * len(data)) == values
    for seed in range(5):
        assert parse_all(data, random_chunks(random.Random(seed), len(data))) == values


def test_next_returns_incomplete_until_the_value_is_whole_and_keeps_partial_arrays():
    p = RespParser()
    p.feed(b"*3\r\n:1\r\n$5\r\nhel")
    assert p.next() is INCOMPLETE
    p.feed(b"lo\r")
    assert p.next() is INCOMPLETE
    p.feed(b"\n*-1\r")
    assert p.next() is INCOMPLETE
    p.feed(b"\n")
    assert p.next() == [1, b"hello", None]
    assert p.next() is INCOMPLETE and p.pending == 0


def test_pipelined_requests_in_one_buffer_come_out_in_order():
    data = (encode_command("SET", "k", "v") + encode_command("get", "k") + encode_command("DEL", "k")
            + encode_command("GET", "k2")[:-3])
    p = RespParser()
    p.feed(data)
    assert list(p.requests()) == [("SET", [b"k", b"v"]), ("GET", [b"k"]), ("DEL", [b"k"])]
    assert p.next_request() is INCOMPLETE
    p.feed(b"2\r\n")
    assert p.next_request() == ("GET", [b"k2"])


def test_a_large_bulk_string_fed_in_pieces_is_not_copied_before_it_is_whole():
    body = bytes(range(256)) * 4096
    p = RespParser()
    p.feed(b"$%d\r\n" % len(body))
    for i in range(0, len(body), 65536):
        assert p.next() is INCOMPLETE
        p.feed(body[i:i + 65536])
    p.feed(b"\r\n")
    assert p.next() == body


# ---------------------------------------------------------------------------------------------
# Against hiredis


def _as_hiredis(value):
    """Our value as hiredis.Reader gives it: simple strings as bytes, errors as ReplyError."""
    if isinstance(value, SimpleString):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, RespError):
        return ("error", str(value))
    if isinstance(value, list):
        return [_as_hiredis(v) for v in value]
    return value


def _from_hiredis(value, hiredis):
    if isinstance(value, hiredis.ReplyError):
        return ("error", value.args[0])
    if isinstance(value, list):
        return [_from_hiredis(v, hiredis) for v in value]
    return value


def test_encode_command_matches_hiredis_pack_command():
    hiredis = pytest.importorskip("hiredis")
    rng = random.Random(3)
    for _ in range(300):
        args = ["SET"]
        for _ in range(rng.randrange(5)):
            kind = rng.randrange(3)
            if kind == 0:
                args.append(bytes(rng.randrange(256) for _ in range(rng.randrange(40))))
            elif kind == 1:
                args.append("".join(rng.choice("abc é€\r\n") for _ in range(rng.randrange(10))))
            else:
                args.append(rng.randrange(-(1 << 70), 1 << 70))
        assert encode_command(*args) == hiredis.pack_command(tuple(args))


def test_hiredis_and_ours_read_the_same_stream_alike():
    hiredis = pytest.importorskip("hiredis")
    values = random_values(4, 400) + [NULL_ARRAY, [NULL_ARRAY]]
    data = b"".join(encode_reply(v) for v in values)
    ref = hiredis.Reader()
    theirs = []
    rng = random.Random(5)
    i = 0
    for n in random_chunks(rng, len(data)):
        ref.feed(data[i:i + n])
        i += n
        while (v := ref.gets()) is not False:
            theirs.append(_from_hiredis(v, hiredis))
    ours = parse_all(data, random_chunks(rng, len(data)))
    assert len(theirs) == len(values)
    assert [_as_hiredis(v) for v in ours] == theirs


def test_hiredis_reads_our_commands_as_we_do():
    hiredis = pytest.importorskip("hiredis")
    commands = [("SET", f"key:{i}", bytes([i % 256]) * (i % 50)) for i in range(200)]
    data = b"".join(hiredis.pack_command(c) for c in commands)
    ref = hiredis.Reader()
    ref.feed(data)
    theirs = []
    while (v := ref.gets()) is not False:
        theirs.append(v)
    p = RespParser()
    p.feed(data)
    assert [[name.encode(), *args] for name, args in p.requests()] == theirs


# ---------------------------------------------------------------------------------------------
# Malformed input

MALFORMED = [
    # (stream, offset of the problem, words of the reason, parser limits)
    (b"?x\r\n", 0, "bad type byte b'?'", {}),
    (b"GET k\r\n", 0, "inline commands are not supported", {}),
    (b"$abc\r\n", 0, "bulk length b'abc' is not a decimal number", {}),
    (b"*1\r\n$\r\n", 4, "bulk length b'' is not a decimal number", {}),
    (b"*x\r\n", 0, "array length b'x' is not a decimal number", {}),
    (b":1.5\r\n", 0, "integer b'1.5' is not a decimal number", {}),
    (b":007\r\n", 0, "not a decimal number", {}),
    (b":-0\r\n", 0, "not a decimal number", {}),
    (b":+5\r\n", 0, "not a decimal number", {}),
    (b": 5\r\n", 0, "not a decimal number", {}),
    (b":9223372036854775808\r\n", 0, "out of the signed 64-bit range", {}),
    (b"$-2\r\n", 0, "bulk length -2 is negative", {}),
    (b":1\r\n*-5\r\n", 4, "array length -5 is negative", {}),
    (b"$3\r\nabcXY", 7, "expected CRLF after a 3-byte bulk string, got b'X'", {}),
    (b"$3\r\nabc\rX", 7, "expected CRLF after a 3-byte bulk string, got b'\\rX'", {}),
    (b"+OK\n", 3, "bare LF", {}),
    (b"*2\r\n:12\n", 7, "bare LF", {}),
    (b"+O\rK\r\n", 2, "CR not followed by LF", {}),
    (b"+OK" + b"x" * 20, 0, "no CRLF within 16 bytes", {"max_line": 16}),
    (b"$11\r\n", 0, "bulk length 11 exceeds the limit 10", {"max_bulk": 10}),
    (b"$99999999999999999999\r\n", 0, "out of the signed 64-bit range", {}),
    (b"*1\r\n*4\r\n", 4, "array length 4 exceeds the limit 3", {"max_array": 3}),
    (b"*1\r\n*1\r\n*1\r\n:1\r\n", 8, "arrays nested deeper than 2", {"max_depth": 2}),
]


def feed_until_error(p: RespParser, data: bytes, chunks: list[int]):
    """The values before the error, and the error."""
    out, i = [], 0
    with pytest.raises(RespProtocolError) as info:
        for n in chunks:
            p.feed(data[i:i + n])
            i += n
            out.extend(p)
    return out, info.value


@pytest.mark.parametrize("data, offset, words, limits", MALFORMED)
def test_malformed_input_raises_one_line_naming_the_offset(data, offset, words, limits):
    for chunks in ([len(data)], [1] * len(data)):
        p = RespParser(**limits)
        _, e = feed_until_error(p, data, chunks)
        message = str(e)
        assert "\n" not in message and "\r" not in message
        assert message == f"RESP protocol error at byte {offset}: {e.reason}"
        assert e.offset == offset and words in e.reason
    # The parser fails until reset, even when fed more ...
    p.feed(b":1\r\n")
    with pytest.raises(RespProtocolError, match=f"at byte {offset}:"):
        p.next()
    # ... and after it, reads the next bytes as a new stream from offset 0.
    p.reset()
    out, e = feed_until_error(p, b":7\r\n" + data, [3, len(data) + 2])
    assert out[0] == 7 and e.offset == offset + 4
    p.reset()
    p.feed(encode_command("GET", "k"))
    assert p.next_request() == ("GET", [b"k"])


def test_values_before_the_bad_bytes_come_out_first_and_a_server_can_answer_and_go_on():
    p = RespParser()
    p.feed(encode_command("SET", "a", "1") + b"*1\r\n$x\r\n" + encode_command("GET", "a"))
    replies = []
    try:
        for name, args in p.requests():
            replies.append(encode_reply(SimpleString("OK")))
    except RespProtocolError as e:
        replies.append(encode_reply(RespError(f"ERR Protocol error: {e.reason}")))
        p.reset()
    assert replies == [b"+OK\r\n", b"-ERR Protocol error: bulk length b'x' is not a decimal number\r\n"]
    p.feed(encode_command("GET", "a"))
    assert list(p.requests()) == [("GET", [b"a"])]


REQUEST_SHAPES = [
    (b"+PING\r\n", "got a simple string"),
    (b"$4\r\nPING\r\n", "got a bulk string"),
    (b":1\r\n", "got an integer"),
    (b"-ERR\r\n", "got an error"),
    (b"*-1\r\n", "got a null"),
    (b"$-1\r\n", "got a null"),
    (b"*0\r\n", "got an empty array"),
    (b"*2\r\n$3\r\nGET\r\n:1\r\n", "element 1 must be a bulk string, got an integer"),
    (b"*2\r\n$3\r\nGET\r\n$-1\r\n", "element 1 must be a bulk string, got a null"),
    (b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nk\r\n", "element 1 must be a bulk string, got an array"),
]


@pytest.mark.parametrize("data, words", REQUEST_SHAPES)
def test_requests_must_be_arrays_of_bulk_strings(data, words):
    p = RespParser()
    prefix = encode_command("PING")
    p.feed(prefix + data)
    assert p.next_request() == ("PING", [])
    with pytest.raises(RespProtocolError) as info:
        p.next_request()
    assert info.value.offset == len(prefix) and words in info.value.reason
    with pytest.raises(RespProtocolError):
        p.next_request()
    p.reset()
    p.feed(encode_command("ping"))
    assert p.next_request() == ("PING", [])


def test_command_names_are_upper_cased_ascii_and_args_stay_bytes():
    p = RespParser()
    p.feed(encode_command(b"sEt\xe9", b"Key", b"\xff"))
    assert p.next_request() == ("SET\xe9", [b"Key", b"\xff"])


def test_limits_are_inclusive_configurable_and_checked():
    assert parse_all(b"$10\r\n0123456789\r\n", max_bulk=10) == [b"0123456789"]
    assert parse_all(b"*3\r\n:1\r\n:2\r\n:3\r\n", max_array=3) == [[1, 2, 3]]
    nested = b"*1\r\n" * MAX_DEPTH + b":1\r\n"
    [v] = parse_all(nested)
    for _ in range(MAX_DEPTH):
        [v] = v
    assert v == 1
    assert parse_all(b"+" + b"x" * 16 + b"\r\n", max_line=16) == [SimpleString("x" * 16)]
    assert RespParser().max_bulk == MAX_BULK == 512 << 20
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="max_bulk must be an int >= 1"):
            RespParser(max_bulk=bad)
