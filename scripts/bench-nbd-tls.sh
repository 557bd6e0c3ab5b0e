#!/usr/bin/env bash
# NBD export over TLS vs plaintext: two copies of one LUKS1 image (cryptsetup luksFormat,
# aes-xts-plain64, on a tmpfs), each opened by cryptkeep and exported over TCP loopback:
#   plain       - open --nbd tcp:... (no TLS configured), nbd:// client
#   plain-on    - open --nbd tcp:... --nbd-tls on, the same nbd:// client in plaintext
#                 (TLS offered but not used: the plaintext path with TLS support built in)
#   tls         - the --nbd-tls on export, nbds://...?tls-certificates=DIR (TLS 1.3,
#                 rustls with ring; certificates from tests/e2e/lib/tls_certs.sh, EC P-256)
# measured with libnbd's nbdcopy (4 connections, its default), interleaved, REPS times
# (medians):
#   seq read   - nbdcopy EXPORT null: (the whole export), MiB/s
#   seq write  - nbdcopy RANDOM-FILE EXPORT (the whole export), MiB/s
#   setup      - nbdinfo --size EXPORT, wall time in ms (median of 10, after a first one):
#                what the TLS handshake adds to a connection
#   daemon CPU - CPU time (user + system) of the daemon serving the export (it does the
#                TLS; the keep process does the sector crypto) per GiB read and written,
#                in seconds: less sensitive than MiB/s to other load on the machine
# usage: scripts/bench-nbd-tls.sh [--reps N] [--size MiB]
# CK=PATH: the cryptkeep binary (default target/release/cryptkeep).
set -euo pipefail
reps=3; size_mib=512
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --size) size_mib=$2; shift 2;;
    *) echo "bench-nbd-tls: unknown argument $1" >&2; exit 1;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "bench-nbd-tls: build first: cargo build --release" >&2; exit 1; }
for t in nbdcopy nbdinfo cryptsetup openssl python3; do
  command -v $t >/dev/null || { echo "bench-nbd-tls: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
blk_name=bench-nbd-tls blk_ck=$ck
. "$root/scripts/bench/lib-block.sh"
blk_init "" $((size_mib * 3 + 256))
w=$blk_w t=$blk_store

printf 'bench' > "$w/pass"
"$root/tests/e2e/lib/tls_certs.sh" "$w/pki"
truncate -s $((size_mib + 2))M "$t/a.img"
cryptsetup luksFormat --type luks1 --batch-mode --pbkdf-force-iterations 1000 --key-file "$w/pass" "$t/a.img" </dev/null
cp --sparse=always "$t/a.img" "$t/b.img"
head -c ${size_mib}M /dev/urandom > "$t/src"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pa=$(port) pb=$(port)
blk_cryptkeep_open "$t/a.img" bta "$w/pass" --no-loop --nbd "tcp:127.0.0.1:$pa"
blk_cryptkeep_open "$t/b.img" btb "$w/pass" --no-loop --nbd "tcp:127.0.0.1:$pb" --nbd-tls on \
  --nbd-tls-cert "$w/pki/server-cert.pem" --nbd-tls-key "$w/pki/server-key.pem"
declare -A uri
uri[plain]="nbd://127.0.0.1:$pa/bta"
uri[plain-on]="nbd://127.0.0.1:$pb/btb"
uri[tls]="nbds://localhost:$pb/btb?tls-certificates=$w/pki"
targets=(plain plain-on tls)
for x in "${targets[@]}"; do
  for i in $(seq 100); do nbdinfo --size "${uri[$x]}" >/dev/null 2>&1 && break; sleep 0.1; done
  nbdinfo --size "${uri[$x]}" >/dev/null || blk_die "no export at ${uri[$x]}"
done
blk_log "TLS: $(nbdinfo "${uri[tls]}" 2>/dev/null | grep -i 'tls' | head -n1 | sed 's/^[[:space:]]*//')"

now() { date +%s.%N; }
declare -A dpid
dpid[plain]=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/bta/state.json")
dpid[plain-on]=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/btb/state.json")
dpid[tls]=${dpid[plain-on]}
[ -n "${dpid[plain]}" ] && [ -n "${dpid[tls]}" ] || blk_die "no daemon pid in the state files"
# cpu PID: user + system time of every thread of PID, in clock ticks.
cpu() { awk '{print $14 + $15}' /proc/"$1"/stat; }
cpu_s_per_gib() { python3 -c "import os,sys; print(round((int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf('SC_CLK_TCK') * 1024 / $size_mib, 2))" "$1" "$2"; }
rate() { python3 -c "import sys; print(round($size_mib / (float(sys.argv[2]) - float(sys.argv[1])), 1))" "$1" "$2"; }
setup_ms() {
  nbdinfo --size "$1" >/dev/null
  local i a b
  for i in $(seq 10); do
    a=$(now); nbdinfo --size "$1" >/dev/null; b=$(now)
    python3 -c "import sys; print(round((float(sys.argv[2]) - float(sys.argv[1])) * 1000, 2))" "$a" "$b"
  done | sort -n | sed -n 5,6p | python3 -c 'import sys; v=[float(x) for x in sys.stdin]; print(round(sum(v)/len(v), 2))'
}

: > "$w/results"
for r in $(seq "$reps"); do
  order=("${targets[@]:$((r % 3))}" "${targets[@]:0:$((r % 3))}")
  for x in "${order[@]}"; do
    c0=$(cpu "${dpid[$x]}"); a=$(now); nbdcopy "$t/src" "${uri[$x]}"; b=$(now); c1=$(cpu "${dpid[$x]}")
    wr=$(rate "$a" "$b") wc=$(cpu_s_per_gib "$c0" "$c1")
    c0=$(cpu "${dpid[$x]}"); a=$(now); nbdcopy "${uri[$x]}" null:; b=$(now); c1=$(cpu "${dpid[$x]}")
    rd=$(rate "$a" "$b") rc=$(cpu_s_per_gib "$c0" "$c1")
    su=$(setup_ms "${uri[$x]}")
    echo "$x $rd $wr $su $rc $wc" >> "$w/results"
    blk_log "rep $r $x: read $rd MiB/s ($rc CPU s/GiB), write $wr MiB/s ($wc CPU s/GiB), setup $su ms"
  done
done

python3 - "$w/results" "$size_mib" "$reps" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for t in ("plain", "plain-on", "tls"):
    v = [r[1:] for r in rows if r[0] == t]
    med[t] = [statistics.median(float(x[i]) for x in v) for i in range(5)]
print(f"\nNBD export of a {sys.argv[2]} MiB LUKS1 volume (aes-xts-plain64), nbdcopy over TCP loopback, median of {sys.argv[3]}\n")
print("| client | seq read MiB/s | seq write MiB/s | setup ms (nbdinfo) | daemon CPU s/GiB read | daemon CPU s/GiB write |")
print("|---|---:|---:|---:|---:|---:|")
for t, (rd, wr, su, rc, wc) in med.items():
    print(f"| {t} | {rd} | {wr} | {su} | {rc} | {wc} |")
p, s = med["plain"], med["tls"]
print(f"\ntls / plain: read {s[0] / p[0]:.2f}x, write {s[1] / p[1]:.2f}x (throughput), setup {s[2] / p[2]:.2f}x (time)")
PY
