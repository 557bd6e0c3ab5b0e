"""The NBD wire as the e2e scripts speak it over a unix socket: the fixed
newstyle greeting, options and their replies, NBD_OPT_GO, requests.
A connection the server closes or refuses raises Closed."""
import socket
import struct

IHAVEOPT = 0x49484156454F5054
REQ = 0x25609513
OPT_EXPORT_NAME, OPT_ABORT, OPT_GO, OPT_STRUCTURED = 1, 2, 7, 8


class Closed(Exception):
    """The server closed the connection, or refused what was asked."""


def recv(s, n):
    """Exactly n bytes, or None when the server closed first."""
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return None
        b += c
    return b


def hello(path, flags=3, timeout=20):
    """Connects and answers the greeting with the client flags `flags`."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(path)
    g = recv(s, 18)
    if g is None or g[:16] != b"NBDMAGICIHAVEOPT":
        raise Closed(f"bad greeting {g!r}")
    s.sendall(struct.pack(">I", flags))
    return s


def option(s, opt, data):
    s.sendall(struct.pack(">QII", IHAVEOPT, opt, len(data)) + data)


def opt_reply(s):
    """(option, reply type, data), or None when the server closed."""
    h = recv(s, 20)
    if h is None:
        return None
    _, opt, typ, n = struct.unpack(">QIII", h)
    return opt, typ, recv(s, n)


def go(path, export, structured=False):
    """Negotiates `export` with NBD_OPT_GO; the socket, in transmission."""
    s = hello(path)
    if structured:
        option(s, OPT_STRUCTURED, b"")
        r = opt_reply(s)
        if r is None or r[1] != 1:
            raise Closed("structured replies refused")
    option(s, OPT_GO, struct.pack(">I", len(export)) + export + struct.pack(">H", 0))
    while True:
        r = opt_reply(s)
        if r is None:
            raise Closed("NBD_OPT_GO: connection closed")
        if r[1] == 1:
            return s
        if r[1] & 0x80000000:
            raise Closed(f"NBD_OPT_GO refused: {r}")


def request(s, typ, offset, length, cookie, payload=b"", flags=0):
    s.sendall(struct.pack(">IHHQQI", REQ, flags, typ, cookie, offset, length) + payload)
