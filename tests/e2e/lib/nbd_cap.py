#!/usr/bin/env python3
"""The connection cap of an NBD export on a unix socket: with a cap of 2,
two sessions (through NBD_OPT_GO) are held, a third client is closed at
once, and once one of the two ends a new client is served.
usage: nbd_cap.py SOCKET EXPORT"""
import sys
import time

from nbd_wire import Closed, go

SOCK, EXPORT = sys.argv[1], sys.argv[2].encode()
# Closed or reset; a time-out is no refusal (the third client must be closed at once).
REFUSED = (Closed, ConnectionError)

held = [go(SOCK, EXPORT), go(SOCK, EXPORT)]
try:
    go(SOCK, EXPORT)
    sys.exit("a third session got in past --nbd-max-connections 2")
except REFUSED:
    pass
held.pop().close()
for _ in range(100):
    try:
        go(SOCK, EXPORT).close()
        break
    except REFUSED:
        time.sleep(0.05)
else:
    sys.exit("no session after one of the two ended")
print("connection cap: held 2, refused the third, served after one ended")
