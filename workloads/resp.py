r"""RESP2, the Redis serialization protocol: an encoder and an incremental parser.

PD3's Garnet-like key-value cache speaks RESP2 to its clients, so dmrack's clients send RESP2
requests as byte payloads and its servers parse them and answer in RESP2. RESP2 is five kinds of
value, each a type byte, a line ended by CRLF and, for two of them, a body:

    +OK\r\n                     simple string (no CR or LF inside)         -> SimpleString("OK")
    -ERR unknown\r\n            error (same form; a reply, not a failure)  -> RespError("ERR unknown")
    :42\r\n                     integer, signed 64-bit                     -> 42
    $3\r\nfoo\r\n               bulk string: a length, that many bytes     -> b"foo"
    $-1\r\n                     null bulk string                           -> None
    *2\r\n:1\r\n$1\r\na\r\n     array: a count, then that many values      -> [1, b"a"]
    *-1\r\n                     null array                                 -> None

A request is an array of bulk strings (``GET k`` is ``*2\r\n$3\r\nGET\r\n$1\r\nk\r\n``).
Redis's "inline" requests (a bare ``GET k\r\n`` typed into telnet) are not supported: no dmrack
client sends them, and a request starting with a letter is refused as a bad type byte.

Encoding: ``encode_command(*args)`` builds a request; ``encode_reply(value)`` builds a reply from
the same Python values the parser returns, so ``encode_reply(parse(x))`` gives ``x`` back, bar the
two nulls, which RESP2 clients (hiredis too) read alike as ``None``: ``None`` encodes as the null
bulk string and the ``NULL_ARRAY`` marker as the null array. Simple strings and errors have their
own ``str`` subclasses because a plain ``str`` or ``bytes`` reply is far more often a value (a bulk
string) than a status.

Why incremental: a stream hands the server whatever bytes one read got, which can end in the
middle of a value, and a client may pipeline several requests in one buffer. ``RespParser.feed``
appends bytes; ``next()`` returns the next complete value, or ``INCOMPLETE`` (``None`` is a value)
when the rest has not arrived; iterating over the parser drains the complete values. Arrays being
filled are kept on a stack of frames holding the elements parsed so far, so a split never makes
the parser go back over whole elements: only the one element cut by the end of the buffer (a
header line, or a bulk string, whose body is not touched until all of it is buffered) is looked
at again after the next ``feed``. ``pending`` is the number of bytes buffered and not yet parsed,
for a server that caps what one connection may hold.

Limits, all per parser: ``max_bulk`` bytes in a bulk string (default 512 MiB, Redis's
``proto-max-bulk-len``), ``max_array`` elements in an array (default 1 Mi), ``max_depth`` nested
arrays (default 8; requests are flat, replies rarely go past 3) and ``max_line`` bytes in a line
(default 64 KiB, Redis's longest inline request: a line must end within it, so a peer that never
sends CRLF cannot make the server buffer without bound). Nothing is allocated from a length before
the bytes arrive, so a large announced length costs nothing until it is sent.

Errors: malformed input raises ``RespProtocolError``, whose message is one line naming the problem
and the byte offset in the stream (bytes fed since the parser was made or last reset) of the type
byte of a bad header line, or of the bad byte itself for a stray CR or LF or a bulk string not
followed by CRLF. Malformed is: a bad type byte, a length or integer that is not canonical
decimal (no sign but a leading ``-``, no leading zeros, no spaces: the form Redis's ``string2ll``
accepts) or not 64-bit, a negative length other than -1, a length over its limit, nesting past
``max_depth``, a bare CR or LF inside a line, a bulk string not followed by CRLF, a line longer
than ``max_line``. The same input gives the same error however it is split into feeds. This is
stricter than hiredis, which does not check the CRLF after a bulk string's bytes and allows
deeper nesting; on what both accept they agree (``tests/test_resp.py`` checks it).

Staying usable after a malformed request: once the stream is malformed the parser cannot know
where the next request starts, so it fails until ``reset()``: ``next()`` raises the same error
again rather than guess. Values before the bad bytes have already come out (values are parsed
lazily, in order), so a server answers those, then answers the error and resets, which drops the
buffered bytes (what Redis does by closing the connection, without closing it) and restarts the
offsets at 0; the next bytes fed start a new request::

    try:
        for name, args in parser.requests():
            send(handle(name, args))
    except RespProtocolError as e:
        send(encode_reply(RespError(f"ERR Protocol error: {e.reason}")))
        parser.reset()

With datagram payloads, one datagram holding whole requests, a server can also ``reset()`` before
each datagram so that a truncated datagram never joins the next.
"""

from __future__ import annotations

import re
from typing import Iterator, Union

__all__ = [
    "SimpleString", "RespError", "RespProtocolError", "RespParser", "INCOMPLETE", "NULL_ARRAY",
    "encode_command", "encode_reply", "MAX_BULK", "MAX_ARRAY", "MAX_DEPTH", "MAX_LINE",
]

MAX_BULK = 512 << 20
MAX_ARRAY = 1 << 20
MAX_DEPTH = 8
MAX_LINE = 64 << 10

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Canonical decimal only, as Redis's string2ll: "007", "-0", "+5" and " 5" are refused.
_DECIMAL = re.compile(rb"0|-?[1-9][0-9]*")


class SimpleString(str):
    """A RESP simple string (``+OK``): a status, not data."""

    def __repr__(self) -> str:
        return f"SimpleString({str.__repr__(self)})"


class RespError(str):
    """A RESP error reply (``-ERR ...``): a value the server sends, not an exception raised here."""

    def __repr__(self) -> str:
        return f"RespError({str.__repr__(self)})"


class _NullArray:
    def __repr__(self) -> str:
        return "NULL_ARRAY"


class _Incomplete:
    def __repr__(self) -> str:
        return "INCOMPLETE"


NULL_ARRAY = _NullArray()   # encode_reply(NULL_ARRAY) == b"*-1\r\n"
INCOMPLETE = _Incomplete()  # RespParser.next(): no complete value buffered yet

Value = Union[bytes, int, None, SimpleString, RespError, list]


class RespProtocolError(ValueError):
    """Malformed RESP input; ``reason`` is the problem, ``offset`` the byte in the stream."""

    def __init__(self, reason: str, offset: int):
        super().__init__(f"RESP protocol error at byte {offset}: {reason}")
        self.reason = reason
        self.offset = offset


# ---------------------------------------------------------------------------------------------
# Encoding


def _arg_bytes(arg) -> bytes:
    if isinstance(arg, (bytes, bytearray, memoryview)):
        return bytes(arg)
    if isinstance(arg, str):
        return arg.encode()
    # bool is an int, but True as b"1" or b"True" is a guess either way.
    if isinstance(arg, int) and not isinstance(arg, bool):
        return str(arg).encode()
    raise TypeError(f"RESP command arguments are bytes, str or int, got {type(arg).__name__}")


def encode_command(*args) -> bytes:
    """A request: the array of bulk strings of ``args`` (bytes as they are, str as UTF-8, int in
    decimal), the bytes ``hiredis.pack_command`` gives."""
    if not args:
        raise ValueError("a RESP command needs at least its name")
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = _arg_bytes(arg)
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


def _line_text(kind: str, text: str) -> bytes:
    # surrogateescape: a parsed simple string that was not UTF-8 encodes back to its own bytes.
    data = text.encode("utf-8", "surrogateescape")
    if b"\r" in data or b"\n" in data:
        raise ValueError(f"a RESP {kind} cannot contain CR or LF: {text!r}")
    return data


def _encode(value, parts: list) -> None:
    # Subclasses of str first: SimpleString and RespError are str too.
    if isinstance(value, SimpleString):
        parts += (b"+", _line_text("simple string", value), b"\r\n")
    elif isinstance(value, RespError):
        parts += (b"-", _line_text("error", value), b"\r\n")
    elif isinstance(value, (bytes, bytearray, memoryview, str)):
        data = value.encode() if isinstance(value, str) else bytes(value)
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    elif value is None:
        parts.append(b"$-1\r\n")
    elif value is NULL_ARRAY:
        parts.append(b"*-1\r\n")
    elif isinstance(value, int) and not isinstance(value, bool):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"a RESP integer is signed 64-bit, got {value}")
        parts.append(b":%d\r\n" % value)
    elif isinstance(value, (list, tuple)):
        parts.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode(item, parts)
    else:
        raise TypeError(f"no RESP encoding for {type(value).__name__}: {value!r}")


def encode_reply(value) -> bytes:
    """A reply: ``SimpleString`` -> ``+``, ``RespError`` -> ``-``, int -> ``:``, bytes or str
    (UTF-8) -> bulk string, ``None`` -> null bulk string, list or tuple -> array (nested as
    deep as given), ``NULL_ARRAY`` -> null array. bool and float are refused (TypeError)."""
    parts: list = []
    _encode(value, parts)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# Parsing

_OPENED = object()  # _element() pushed an array frame: its elements come next


def _show(data) -> str:
    """Offending bytes for a one-line message: repr escapes CR and LF, and long input is cut."""
    data = bytes(data)
    return repr(data) if len(data) <= 24 else repr(data[:24])[:-1] + "...'"


class RespParser:
    """Incremental RESP2 parser: ``feed`` bytes, take complete values with ``next()``, iteration
    or ``requests()``. Values: bytes (bulk string), None (either null), int, SimpleString,
    RespError, list (array). See the module docstring for limits and errors."""

    def __init__(self, max_bulk: int = MAX_BULK, max_array: int = MAX_ARRAY,
                 max_depth: int = MAX_DEPTH, max_line: int = MAX_LINE):
        for name, limit in (("max_bulk", max_bulk), ("max_array", max_array),
                            ("max_depth", max_depth), ("max_line", max_line)):
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"RespParser {name} must be an int >= 1, got {limit!r}")
        self.max_bulk = max_bulk
        self.max_array = max_array
        self.max_depth = max_depth
        self.max_line = max_line
        self.reset()

    def reset(self) -> None:
        """Drop buffered bytes, partial values and a pending error; offsets restart at 0."""
        self._buf = bytearray()
        self._pos = 0       # first byte of _buf not yet part of a parsed element
        self._base = 0      # stream offset of _buf[0]
        self._stack: list[tuple[list, int]] = []   # open arrays: (elements so far, count)
        self._start = 0     # stream offset where the value being parsed began
        self._error: RespProtocolError | None = None

    @property
    def open_arrays(self) -> int:
        """How many arrays are open (some of their elements parsed, the rest still to come):
        with ``pending`` at 0, a request is whole only when this is 0 too."""
        return len(self._stack)

    def feed(self, data) -> None:
        """Append bytes read from the peer (bytes, bytearray or memoryview)."""
        if self._pos:
            # Parsed bytes go only here, so their cost is paid once per read, not per value.
            del self._buf[:self._pos]
            self._base += self._pos
            self._pos = 0
        self._buf += data

    @property
    def pending(self) -> int:
        """Bytes buffered and not yet part of a returned value or an open array."""
        return len(self._buf) - self._pos

    def next(self) -> Value:
        """The next complete value, or ``INCOMPLETE``; raises ``RespProtocolError`` on malformed
        input, and again on every call until ``reset()``."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except RespProtocolError as e:
            self._error = e
            raise

    def __iter__(self) -> Iterator[Value]:
        """The complete values buffered, in order; stops (until more is fed) at ``INCOMPLETE``."""
        while (value := self.next()) is not INCOMPLETE:
            yield value

    def next_request(self):
        """The next request as ``(NAME, [arg bytes, ...])`` with the name upper-cased (ASCII
        letters only) and decoded as Latin-1, or ``INCOMPLETE``. A value that is not a non-empty
        array of bulk strings is a ``RespProtocolError`` at the offset where it began."""
        value = self.next()
        if value is INCOMPLETE:
            return value
        problem = None
        if not isinstance(value, list):
            problem = f"a request must be an array of bulk strings, got {_kind(value)}"
        elif not value:
            problem = "a request must be an array of bulk strings, got an empty array"
        else:
            for i, arg in enumerate(value):
                if not isinstance(arg, bytes):
                    problem = f"request element {i} must be a bulk string, got {_kind(arg)}"
                    break
        if problem is not None:
            self._error = RespProtocolError(problem, self._start)
            raise self._error
        return value[0].upper().decode("latin-1"), value[1:]

    def requests(self):
        """``next_request()`` over the complete requests buffered."""
        while (request := self.next_request()) is not INCOMPLETE:
            yield request

    # -- internals ----------------------------------------------------------------------------

    def _next(self) -> Value:
        while True:
            if not self._stack:
                self._start = self._base + self._pos
            value = self._element()
            if value is INCOMPLETE:
                return INCOMPLETE
            if value is _OPENED:
                continue
            # A complete element goes into the innermost open array, and closes every array it
            # fills; the else runs when none is left open: the value is a whole top-level one.
            while self._stack:
                items, count = self._stack[-1]
                items.append(value)
                if len(items) < count:
                    break
                self._stack.pop()
                value = items
            else:
                return value

    def _fail(self, reason: str, index: int):
        raise RespProtocolError(reason, self._base + index)

    def _line(self):
        """``(text, end)``: the line at ``_pos`` without its type byte and CRLF, and the index
        after its CRLF; None while its CRLF has not arrived."""
        buf, start = self._buf, self._pos
        window = start + 1 + self.max_line + 2
        lf = buf.find(b"\n", start, window)
        if lf < 0:
            # No LF in the window: a CR with a byte after it there is a bare CR.
            cr = buf.find(b"\r", start, window)
            if 0 <= cr and cr + 1 < min(len(buf), window):
                self._fail("CR not followed by LF in a line", cr)
            if len(buf) >= window:
                self._fail(f"no CRLF within {self.max_line} bytes of a line", start)
            return None
        cr = buf.find(b"\r", start, lf)
        if cr < 0:
            self._fail("bare LF in a line (lines end with CRLF)", lf)
        if cr != lf - 1:
            self._fail("CR not followed by LF in a line", cr)
        return bytes(buf[start + 1:cr]), lf + 1

    def _number(self, what: str, text: bytes) -> int:
        if not _DECIMAL.fullmatch(text):
            self._fail(f"{what} {_show(text)} is not a decimal number", self._pos)
        n = int(text)
        if not _INT64_MIN <= n <= _INT64_MAX:
            self._fail(f"{what} {n} is out of the signed 64-bit range", self._pos)
        return n

    def _element(self):
        """One element at ``_pos``: its value, ``_OPENED`` or ``INCOMPLETE``; ``_pos`` moves past
        it only when it is complete, so an incomplete one is retried whole after the next feed."""
        buf, start = self._buf, self._pos
        if start >= len(buf):
            return INCOMPLETE
        kind = buf[start]
        if kind not in b"+-:$*":
            hint = " (inline commands are not supported)" if bytes([kind]).isalpha() else ""
            self._fail(f"bad type byte {_show(buf[start:start + 1])}{hint}", start)
        line = self._line()
        if line is None:
            return INCOMPLETE
        text, end = line
        if kind == ord("+") or kind == ord("-"):
            self._pos = end
            s = text.decode("utf-8", "surrogateescape")
            return SimpleString(s) if kind == ord("+") else RespError(s)
        if kind == ord(":"):
            n = self._number("integer", text)
            self._pos = end
            return n
        what = "bulk length" if kind == ord("$") else "array length"
        n = self._number(what, text)
        limit = self.max_bulk if kind == ord("$") else self.max_array
        if n < -1:
            self._fail(f"{what} {n} is negative (only -1, null, is allowed)", start)
        if n > limit:
            self._fail(f"{what} {n} exceeds the limit {limit}", start)
        if n == -1:
            self._pos = end
            return None
        if kind == ord("$"):
            # A wrong byte where CRLF belongs fails as soon as it arrives, not after the next one.
            crlf = end + n
            bad = f"expected CRLF after a {n}-byte bulk string, got "
            if len(buf) > crlf and buf[crlf] != 13:
                self._fail(bad + _show(buf[crlf:crlf + 1]), crlf)
            if len(buf) < crlf + 2:
                return INCOMPLETE
            if buf[crlf + 1] != 10:
                self._fail(bad + _show(buf[crlf:crlf + 2]), crlf)
            self._pos = end + n + 2
            return bytes(buf[end:end + n])
        if n == 0:
            self._pos = end
            return []
        if len(self._stack) >= self.max_depth:
            self._fail(f"arrays nested deeper than {self.max_depth}", start)
        self._pos = end
        self._stack.append(([], n))
        return _OPENED


def _kind(value) -> str:
    if value is None:
        return "a null"
    if isinstance(value, SimpleString):
        return "a simple string"
    if isinstance(value, RespError):
        return "an error"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, bytes):
        return "a bulk string"
    return "an array"
