#!/usr/bin/env python3
"""A hostile NBD client against a unix socket: malformed negotiation,
oversized lengths, out-of-range requests, a request after NBD_CMD_DISC,
and many connections opened and dropped. Each case checks that the server
answers with an error and keeps the connection, or closes only that
connection. usage: nbd_hostile.py SOCKET EXPORT SIZE"""
import socket
import struct
import sys
import time

from nbd_wire import (IHAVEOPT, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, opt_reply, option,
                      recv, request)
import nbd_wire

SOCK, EXPORT, SIZE = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def hello(flags=3):
    return nbd_wire.hello(SOCK, flags)


def closed(s):
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True


def go(structured=False):
    """Negotiates with NBD_OPT_GO; answers the socket in transmission."""
    return nbd_wire.go(SOCK, EXPORT, structured)


def simple_reply(s):
    h = recv(s, 16)
    if h is None:
        return None
    magic, err, cookie = struct.unpack(">IIQ", h)
    if magic != 0x67446698:
        fail(f"bad reply magic {magic:#x}")
    return err, cookie


def read_ok(s, structured, cookie=99):
    request(s, 0, 0, 512, cookie)
    if structured:
        h = recv(s, 20)
        magic, flags, typ, c, n = struct.unpack(">IHHQI", h)
        body = recv(s, n)
        if magic != 0x668E33EF or typ != 1 or c != cookie or flags != 1 or n != 8 + 512 or body is None:
            fail(f"a good structured read failed: type {typ} flags {flags} length {n}")
        return
    r = simple_reply(s)
    if r != (0, cookie) or recv(s, 512) is None:
        fail(f"a good read after the bad requests failed: {r}")


print("bad option magic: closed")
s = hello()
s.sendall(struct.pack(">QII", 0x1122334455667788, OPT_GO, 0))
if not closed(s):
    fail("bad option magic did not close the connection")

print("unknown client flags: closed")
s = hello(flags=0xFF)
if not closed(s):
    fail("unknown client flags accepted")

print("oversized option (1 MiB): ERR_TOO_BIG, connection kept")
s = hello()
option(s, OPT_GO, b"\0" * (1 << 20))
r = opt_reply(s)
if r is None or r[1] != 0x80000009:
    fail(f"expected NBD_REP_ERR_TOO_BIG, got {r}")
option(s, OPT_ABORT, b"")
if opt_reply(s)[1] != 1:
    fail("ABORT after ERR_TOO_BIG not acknowledged")

print("option of 4 GiB announced: closed without reading it")
s = hello()
s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, 0xFFFFFFFF))
if not closed(s):
    fail("a 4 GiB option did not close the connection")

print("GO with an unknown export: ERR_UNKNOWN; EXPORT_NAME of one: closed")
s = hello()
option(s, OPT_GO, struct.pack(">I", 5) + b"nope!" + struct.pack(">H", 0))
if opt_reply(s)[1] != 0x80000006:
    fail("unknown export not refused")
option(s, OPT_EXPORT_NAME, b"nope!")
if not closed(s):
    fail("EXPORT_NAME of an unknown export kept the connection")

for structured in (False, True):
    print(f"transmission (structured={structured}): bad requests answered, connection kept")
    s = go(structured)
    # A read longer than the maximum block size (64 MiB).
    request(s, 0, 0, 64 << 20, 1)
    if structured:
        h = recv(s, 20)
        magic, flags, typ, cookie, n = struct.unpack(">IHHQI", h)
        body = recv(s, n)
        err = struct.unpack(">I", body[:4])[0]
        if typ != 0x8001 or cookie != 1 or err != 75:
            fail(f"oversized structured read: type {typ:#x} error {err}")
    else:
        if simple_reply(s) != (22, 1):
            fail("oversized read not EINVAL")
    # A write longer than the maximum: the payload is drained.
    request(s, 1, 0, 33 << 20, 2, b"\0" * (33 << 20))
    r = simple_reply(s)
    if r[1] != 2 or r[0] not in (22, 75):
        fail(f"oversized write: {r}")
    read_ok(s, structured)
    # Out of range: past the end, and an offset that overflows.
    request(s, 1, SIZE - 100, 512, 3, b"x" * 512)
    if simple_reply(s) != (28, 3):
        fail("write past the end not ENOSPC")
    request(s, 6, 2**64 - 512, 1024, 4)
    if simple_reply(s) != (28, 4):
        fail("write zeroes at an overflowing offset not ENOSPC")
    request(s, 5, SIZE, 4096, 5)
    if simple_reply(s) != (22, 5):
        fail("cache past the end not EINVAL")
    # Unknown command and unknown flags.
    request(s, 77, 0, 0, 6)
    if simple_reply(s) != (22, 6):
        fail("unknown command not EINVAL")
    request(s, 3, 0, 0, 7, flags=1 << 12)
    if simple_reply(s) != (22, 7):
        fail("unknown flag not EINVAL")
    read_ok(s, structured)
    # A request after NBD_CMD_DISC is never answered.
    request(s, 2, 0, 0, 8)
    try:
        request(s, 0, 0, 512, 9)
    except OSError:
        pass  # the server may have closed already
    if not closed(s):
        fail("a request after NBD_CMD_DISC was answered")

print("bad request magic: closed")
s = go()
s.sendall(b"\0" * 28)
if not closed(s):
    fail("bad request magic kept the connection")

print("10000 connections opened and dropped")
for i in range(10000):
    c = socket.socket(socket.AF_UNIX)
    try:
        # Beyond the connection cap the server closes at once.
        c.connect(SOCK)
        if i % 3 == 0:
            c.sendall(b"\0\0\0\3")
    except OSError:
        pass
    c.close()

print("a normal client still works (once the dropped connections' threads are gone)")
for _ in range(100):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(SOCK)
        ok = recv(s, 18) is not None
        s.close()
        if ok:
            break
    except OSError:
        pass
    time.sleep(0.05)
s = go(True)
request(s, 2, 0, 0, 1)

print("40 idle connections (more than the cap) do not keep a normal client out")
idle = []
for _ in range(40):
    c = socket.socket(socket.AF_UNIX)
    c.connect(SOCK)
    idle.append(c)
s = go(True)
request(s, 2, 0, 0, 1)
for c in idle:
    c.close()
print("hostile client: all cases passed")
