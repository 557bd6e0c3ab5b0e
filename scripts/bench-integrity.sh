#!/usr/bin/env bash
# Integrity-device benchmark: sequential direct-I/O write and read (dd, 1 MiB
# requests) through the loop device of `cryptkeep integrity open` — with the
# journal and with --integrity-no-journal, crc32c tags — against a plain
# direct-I/O loop device on an image in the same tmpfs, interleaved, REPS
# times; prints each run, the medians and each mode's ratio to the plain
# loop device (the ratio the dm-integrity report gives for the kernel).
# usage: scripts/bench-integrity.sh [--reps N] [--size MiB]
set -euo pipefail
reps=3; size=256
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --size) size=$2; shift 2;;
    *) echo "bench-integrity: unknown argument $1" >&2; exit 1;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-integrity: needs root (tmpfs, loop devices)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
ck=$root/target/release/cryptkeep
[ -x "$ck" ] || { echo "bench-integrity: build first: cargo build --release" >&2; exit 1; }
w=$(mktemp -d /tmp/ck-bench-int.XXXXXX)
cleanup() {
  "$ck" close bench-int >/dev/null 2>&1 || true
  losetup -n -O NAME,BACK-FILE | awk -v w="$w" 'index($2, w) == 1 {print $1}' | xargs -r -n1 losetup -d
  mountpoint -q "$w" && umount -l "$w"
  rm -rf "$w"
}
trap cleanup EXIT
mount -t tmpfs -o size=$(( size * 3 + 512 ))M tmpfs "$w"
export CRYPTKEEP_RUN_DIR=$w/run
truncate -s $(( size + 128 ))M "$w/plain.img" "$w/int.img"
"$ck" integrity format -q "$w/int.img" >/dev/null
rate() { python3 -c "print(round($1 / ($3 - $2)))"; }
declare -A res
for ((r = 1; r <= reps; r++)); do
  for mode in plain journal direct; do
    case $mode in
      plain) dev=$(losetup --direct-io=on -f --show "$w/plain.img");;
      journal) dev=$("$ck" integrity open "$w/int.img" bench-int);;
      direct) dev=$("$ck" integrity open --integrity-no-journal "$w/int.img" bench-int);;
    esac
    s=$(date +%s.%N); dd if=/dev/zero of="$dev" bs=1M count="$size" oflag=direct status=none; e=$(date +%s.%N)
    wr=$(rate "$size" "$s" "$e")
    s=$(date +%s.%N); dd if="$dev" of=/dev/null bs=1M count="$size" iflag=direct status=none; e=$(date +%s.%N)
    rd=$(rate "$size" "$s" "$e")
    echo "run $r: $mode: write $wr MiB/s, read $rd MiB/s"
    res[$mode,w]+="$wr "; res[$mode,r]+="$rd "
    if [ "$mode" = plain ]; then losetup -d "$dev"; else "$ck" close bench-int; fi
  done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| target | write [MiB/s] | read [MiB/s] | write / plain | read / plain |"
echo "|---|---|---|---|---|"
pw=$(echo "${res[plain,w]}" | med); pr=$(echo "${res[plain,r]}" | med)
for mode in plain journal direct; do
  mw=$(echo "${res[$mode,w]}" | med); mr=$(echo "${res[$mode,r]}" | med)
  echo "| $mode | $mw | $mr | $(python3 -c "print(f'{$mw/$pw:.2f}')") | $(python3 -c "print(f'{$mr/$pr:.2f}')") |"
done
echo "(medians of $reps interleaved runs; ${size} MiB; crc32c tags, 512-byte blocks; images on one tmpfs; $(nproc) cores)"
