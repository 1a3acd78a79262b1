"""dpa-kv's datagrams and where a key goes: the UDP port range the host's NIC steers to the DPA's
threads, the hash that picks a key's port, and the request and reply formats::

    request   op u8 | request id u32 | key length u8 | key | value
    reply     op u8 | request id u32 | status u8 | the value (GET)
"""

from __future__ import annotations

import struct

BASE_PORT = 9000
PORTS = 256                     # partitions of the table, each owned by one DPA thread
REPLY_PORT = 20000              # coroutine k of thread t of a node binds REPLY_PORT + t * 64 + k

OP_GET, OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 3, 4
ST_OK, ST_MISSING, ST_EXISTS = 0, 1, 2
REQ = struct.Struct("<BIB")         # op, request id, key length; then key, then value
REP = struct.Struct("<BIB")         # op, request id, status; then the value (get)


def port_of(key: bytes) -> int:
    """The UDP port of ``key``: a fixed 64-bit FNV-1a hash, not Python's (varies between runs)."""
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return BASE_PORT + (h >> 17) % PORTS
