#!/usr/bin/env python3
"""memscan.py PID HEXKEY: exits 1 if any 16-byte window of the key (hex)
occurs in a readable mapping of process PID, 0 otherwise. Scans itself
first (it holds the key) to prove the scanner finds what is there."""
import re
import sys


def scan(pid, needles, quiet=False):
    hits = 0
    with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in m:
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if "r" not in f[1] or (len(f) > 5 and f[5] in ("[vvar]", "[vsyscall]")):
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            for n in needles:
                if n in data:
                    hits += 1
                    if not quiet:
                            print(f"key bytes found in {line.strip()}", file=sys.stderr)
    return hits


key = bytes.fromhex(re.sub(r"[^0-9a-fA-F]", "", sys.argv[2]))
needles = [key[i : i + 16] for i in range(0, len(key) - 15, 16)]
if scan("self", needles, quiet=True) == 0:
    print("FAIL: the scanner does not find the key in its own memory", file=sys.stderr)
    sys.exit(2)
sys.exit(1 if scan(sys.argv[1], needles) else 0)
