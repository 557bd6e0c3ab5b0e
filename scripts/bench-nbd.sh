#!/usr/bin/env bash
# NBD export benchmark: one LUKS1 image (cryptsetup luksFormat, aes-xts-plain64, on a
# tmpfs), exported over a unix socket by
#   cryptkeep  - cryptkeep open --nbd (the keep process does the sector crypto)
#   qsd        - qemu-storage-daemon, its luks block driver under an NBD export
#   nbdkit     - nbdkit's file plugin under its luks filter
# and measured with libnbd's clients, interleaved, REPS times (medians):
#   seq read   - nbdcopy EXPORT null: (the whole export), MiB/s
#   seq write  - nbdcopy RANDOM-FILE EXPORT (the whole export), MiB/s
#   fio read / fio write - fio through nbdfuse (libnbd's FUSE client, its default
#                connections) and a loop device over its file: sequential 1 MiB direct I/O,
#                iodepth 64, two jobs on the two halves (scripts/bench/lib-block.sh blk_fio), MiB/s
#   setup      - nbdinfo --size EXPORT, wall time in ms (median of 10, after a first one)
#   handshake  - a whole connection (connect, NBD_OPT_GO, NBD_CMD_DISC) from one Python
#                process, ms (median of 50, after a first one): set-up without a client
#                process starting (scripts/bench/nbd-handshake.py)
# Prints a Markdown table and cryptkeep's ratio to each peer.
# usage: scripts/bench-nbd.sh [--reps N] [--size MiB]
# CK=PATH: the cryptkeep binary (default target/release/cryptkeep).
set -euo pipefail
reps=3; size_mib=1024
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --size) size_mib=$2; shift 2;;
    *) echo "bench-nbd: unknown argument $1" >&2; exit 1;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "bench-nbd: build first: cargo build --release" >&2; exit 1; }
for t in nbdcopy nbdinfo nbdfuse nbdkit qemu-storage-daemon cryptsetup fio python3; do
  command -v $t >/dev/null || { echo "bench-nbd: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
blk_name=bench-nbd blk_ck=$ck
. "$root/scripts/bench/lib-block.sh"
blk_init "" $((size_mib * 2 + 256))
w=$blk_w t=$blk_store

printf 'bench' > "$w/pass"
img=$t/luks1.img
truncate -s $((size_mib + 2))M "$img"
cryptsetup luksFormat --type luks1 --batch-mode --pbkdf-force-iterations 1000 --key-file "$w/pass" "$img" </dev/null
head -c ${size_mib}M /dev/urandom > "$t/src"

# Wait for a unix socket to accept.
wait_sock() {
  local i
  for i in $(seq 100); do [ -S "$1" ] && nbdinfo --size "$2" >/dev/null 2>&1 && return 0; sleep 0.1; done
  blk_die "no NBD server at $1"
}

blk_cryptkeep_open "$img" bn "$w/pass" --nbd "unix:$w/ck.sock" --no-loop
declare -A uri sock name
uri[cryptkeep]=$blk_dev sock[cryptkeep]=$w/ck.sock name[cryptkeep]=bn
sock[qsd]=$w/qsd.sock name[qsd]=qsd sock[nbdkit]=$w/nbdkit.sock name[nbdkit]=""
qemu-storage-daemon \
  --object "secret,id=k0,file=$w/pass" \
  --blockdev "driver=file,node-name=f0,filename=$img" \
  --blockdev "driver=luks,node-name=l0,file=f0,key-secret=k0" \
  --nbd-server "addr.type=unix,addr.path=$w/qsd.sock" \
  --export "type=nbd,id=e0,node-name=l0,name=qsd,writable=on" >&2 &
blk_qsd_pids+=($!)
uri[qsd]="nbd+unix:///qsd?socket=$w/qsd.sock"
nbdkit -f -U "$w/nbdkit.sock" --filter=luks file "$img" passphrase="+$w/pass" >&2 &
blk_qsd_pids+=($!)
uri[nbdkit]="nbd+unix:///?socket=$w/nbdkit.sock"
wait_sock "$w/ck.sock" "${uri[cryptkeep]}"
wait_sock "$w/qsd.sock" "${uri[qsd]}"
wait_sock "$w/nbdkit.sock" "${uri[nbdkit]}"
targets=(cryptkeep qsd nbdkit)
for x in "${targets[@]}"; do
  blk_log "$x: ${uri[$x]} ($(nbdinfo --json "${uri[$x]}" | python3 -c 'import json,sys; e=json.load(sys.stdin)["exports"][0]; print("multi-conn" if e.get("can_multi_conn") else "single connection")'))"
done
# nbdfuse and a loop device over each export: the path fio measures.
declare -A ldev
for x in "${targets[@]}"; do
  mkdir -p "$w/nf-$x"
  nbdfuse "$w/nf-$x" "${uri[$x]}" >&2 3>&- &
  blk_qsd_pids+=($!)
  for i in $(seq 100); do [ -f "$w/nf-$x/nbd" ] && break; sleep 0.1; done
  [ -f "$w/nf-$x/nbd" ] || blk_die "nbdfuse did not show $x's export"
  blk_attach "$w/nf-$x/nbd"
  ldev[$x]=$blk_dev
done

now() { date +%s.%N; }
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
  # Rotate the order each repetition.
  order=("${targets[@]:$((r % 3))}" "${targets[@]:0:$((r % 3))}")
  for x in "${order[@]}"; do
    a=$(now); nbdcopy "$t/src" "${uri[$x]}"; b=$(now)
    wr=$(rate "$a" "$b")
    a=$(now); nbdcopy "${uri[$x]}" null:; b=$(now)
    rd=$(rate "$a" "$b")
    su=$(setup_ms "${uri[$x]}")
    hs=$(python3 "$root/scripts/bench/nbd-handshake.py" "${sock[$x]}" "${name[$x]}" 50)
    fw=$(blk_fio "${ldev[$x]}" write "$size_mib" 60) || blk_die "fio write on $x failed"
    fr=$(blk_fio "${ldev[$x]}" read "$size_mib" 60) || blk_die "fio read on $x failed"
    echo "$x $rd $wr $su $hs $fr $fw" >> "$w/results"
    blk_log "rep $r $x: read $rd MiB/s, write $wr MiB/s, setup $su ms, handshake $hs ms, fio read $fr MiB/s, fio write $fw MiB/s"
  done
done

python3 - "$w/results" "$size_mib" "$reps" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for t in ("cryptkeep", "qsd", "nbdkit"):
    v = [r[1:] for r in rows if r[0] == t]
    med[t] = [statistics.median(float(x[i]) for x in v) for i in range(6)]
print(f"\nNBD export of a {sys.argv[2]} MiB LUKS1 volume (aes-xts-plain64) over a unix socket, median of {sys.argv[3]}\n")
print("| target | nbdcopy read MiB/s | nbdcopy write MiB/s | fio read (nbdfuse + loop) MiB/s | fio write (nbdfuse + loop) MiB/s | setup ms (nbdinfo) | handshake ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for t, (rd, wr, su, hs, fr, fw) in med.items():
    print(f"| {t} | {rd} | {wr} | {fr} | {fw} | {su} | {hs} |")
c = med["cryptkeep"]
for p in ("qsd", "nbdkit"):
    o = med[p]
    print(f"\ncryptkeep / {p}: nbdcopy read {c[0] / o[0]:.2f}x, write {c[1] / o[1]:.2f}x; "
          f"fio read {c[4] / o[4]:.2f}x, write {c[5] / o[5]:.2f}x (throughput ratios: higher is faster); "
          f"setup {c[2] / o[2]:.2f}x, handshake {c[3] / o[3]:.2f}x (time ratios: lower is faster)")
PY
