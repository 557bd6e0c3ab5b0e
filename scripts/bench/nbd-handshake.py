#!/usr/bin/env python3
"""nbd-handshake.py SOCKET EXPORT [N]: the median wall time, in ms, of a whole
NBD connection to a unix socket (connect, greeting, NBD_OPT_GO, NBD_CMD_DISC,
close) over N connections after a first one: the server's connection set-up
cost without a client process starting."""
import socket
import statistics
import struct
import sys
import time

path, export = sys.argv[1], sys.argv[2].encode()
n = int(sys.argv[3]) if len(sys.argv) > 3 else 50


def recv(s, k):
    b = b""
    while len(b) < k:
        c = s.recv(k - len(b))
        if not c:
            raise SystemExit("connection closed during the handshake")
        b += c
    return b


def connection():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    recv(s, 18)
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", len(export)) + export + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, len(data)) + data)
    while True:
        _, _, typ, k = struct.unpack(">QIII", recv(s, 20))
        recv(s, k)
        if typ == 1:
            break
        if typ & 0x80000000:
            raise SystemExit(f"NBD_OPT_GO refused: {typ:#x}")
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 0, 0, 0))
    s.close()


connection()
times = []
for _ in range(n):
    t = time.perf_counter()
    connection()
    times.append((time.perf_counter() - t) * 1000)
print(round(statistics.median(times), 3))
