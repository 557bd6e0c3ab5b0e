#!/usr/bin/env bash
# Throughput of RBD on a scripts/ceph/cluster.sh cluster, along the paths cryptkeep uses:
#   rbd bench (librbd directly: the ceiling), sequential 4 MiB and random 4 KiB;
#   nbdcopy through qemu-nbd (qemu's rbd driver), plain and with librbd's LUKS2;
#   cryptkeep's volume over qemu-nbd (when cryptkeep opens nbd+unix:// URIs).
# Prints a Markdown table (MiB/s; IOPS for 4 KiB). Starts the cluster in DIR if
# it is not running, and stops it at the end only if it started it.
# usage: scripts/ceph/bench.sh DIR [MiB per run, default 512] [runs, default 3]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CK=${CK:-$ROOT/target/release/cryptkeep}
CEPH_DIR=${1:?usage: bench.sh DIR [MiB] [runs]}
MIB=${2:-512}
RUNS=${3:-3}
. "$HERE/lib.sh"

LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
W=$(mktemp -d /tmp/ck-ceph-bench.XXXXXX)
started=
cleanup() {
  set +e
  [ -n "${ckname:-}" ] && "$CK" close "$ckname" >/dev/null 2>&1
  for s in "$W"/*.sock.pid; do [ -f "$s" ] && ceph_nbd_unexport "${s%.pid}"; done
  ceph_rbd rm bench-plain >/dev/null 2>&1; ceph_rbd rm bench-luks >/dev/null 2>&1; ceph_rbd rm bench-ck >/dev/null 2>&1
  [ -n "$started" ] && ceph_cluster stop "$CEPH_DIR"
  rm -rf "$W"
}
trap cleanup EXIT

if ! ceph_cluster status "$CEPH_DIR" >/dev/null 2>&1; then
  ceph_cluster start "$CEPH_DIR" >/dev/null 2>&1 || { echo "bench.sh: the cluster did not start (see $CEPH_DIR/log)" >&2; exit 1; }
  started=1
fi

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# mibs BYTES SECONDS
mibs() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f", b / 1048576 / s}'; }
# timed CMD...: seconds it took
timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'; }

rows=()
row() { rows+=("| $1 | $2 | $3 |"); echo "bench.sh: $1: $2 ($3)" >&2; }

size=$((MIB + 64))M
ceph_rbd create rbd/bench-plain --size "$size"

# rbd bench prints "elapsed: S ops: N ops/sec: X bytes/sec: Y"
rbdb() { # rbdb TYPE SIZE PATTERN TOTAL -> ops/sec
  ceph_rbd bench --io-type "$1" --io-size "$2" --io-threads 16 --io-total "$4" --io-pattern "$3" rbd/bench-plain 2>/dev/null |
    awk '/^elapsed:/ {print $6}'
}
for spec in "write 4M seq" "read 4M seq"; do
  set -- $spec
  v=$(for r in $(seq "$RUNS"); do rbdb "$1" "$2" "$3" "${MIB}M"; done | median)
  row "rbd bench $1, $2 $3, 16 threads" "$(awk -v o="$v" 'BEGIN {printf "%.0f MiB/s", o * 4}')" "librbd, $RUNS runs of $MIB MiB, median"
done
for spec in "write 4K rand" "read 4K rand"; do
  set -- $spec
  v=$(for r in $(seq "$RUNS"); do rbdb "$1" "$2" "$3" 32M; done | median)
  row "rbd bench $1, $2 $3, 16 threads" "$(awk -v o="$v" 'BEGIN {printf "%.0f IOPS (%.1f MiB/s)", o, o * 4 / 1024}')" "librbd, $RUNS runs of 32 MiB, median"
done

head -c "${MIB}M" /dev/urandom > "$W/src"
nbd_rw() { # nbd_rw LABEL URI NOTE
  local w r
  w=$(for i in $(seq "$RUNS"); do timed nbdcopy --flush "$W/src" "$2"; done | median)
  r=$(for i in $(seq "$RUNS"); do timed nbdcopy "$2" null:; done | median)
  row "$1: write" "$(mibs $((MIB * 1048576)) "$w") MiB/s" "$3"
  row "$1: read" "$(mibs "$(nbdinfo --size "$2")" "$r") MiB/s" "$3"
}
uri=$(ceph_nbd_export bench-plain "$W/plain.sock")
nbd_rw "qemu-nbd, rbd, no encryption" "$uri" "nbdcopy, $RUNS runs of $MIB MiB, median"
ceph_nbd_unexport "$W/plain.sock"

printf 'bench' > "$W/pass"
ceph_rbd create rbd/bench-luks --size "$size"
ceph_rbd_luks_format bench-luks "$W/pass" >/dev/null 2>&1
uri=$(ceph_nbd_export bench-luks "$W/luks.sock" "$W/pass")
nbd_rw "qemu-nbd, rbd + librbd LUKS2 (aes-xts-plain64, 4096-byte sectors)" "$uri" "nbdcopy, $RUNS runs of $MIB MiB, median"
ceph_nbd_unexport "$W/luks.sock"

if [ -x "$CK" ] && [[ "$("$CK" open --help 2>/dev/null)" == *"nbd+unix"* ]]; then
  ceph_rbd create rbd/bench-ck --size "$size"
  uri=$(ceph_nbd_export bench-ck "$W/ck.sock")
  "$CK" format "$uri" "${CEPH_LUKS2_OPTS[@]}" --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file "$W/pass" --batch-mode </dev/null >/dev/null
  export CRYPTKEEP_RUN_DIR=$W/run
  ckname=ckbench
  dev=$("$CK" open "$uri" "$ckname" --key-file "$W/pass")
  w=$(for i in $(seq "$RUNS"); do timed dd if="$W/src" of="$dev" bs=4M oflag=direct conv=fsync; done | median)
  r=$(for i in $(seq "$RUNS"); do timed dd if="$dev" of=/dev/null bs=4M count=$((MIB / 4)) iflag=direct; done | median)
  row "cryptkeep over qemu-nbd + rbd (LUKS2 aes-xts-plain64, 4096): write" "$(mibs $((MIB * 1048576)) "$w") MiB/s" "dd 4 MiB O_DIRECT to the loop device, $RUNS runs, median"
  row "cryptkeep over qemu-nbd + rbd (LUKS2 aes-xts-plain64, 4096): read" "$(mibs $((MIB * 1048576)) "$r") MiB/s" "dd 4 MiB O_DIRECT from the loop device, $RUNS runs, median"
  "$CK" close "$ckname"; ckname=
else
  echo "bench.sh: cryptkeep does not open nbd+unix:// URIs (yet): no cryptkeep row" >&2
fi

echo "| path | throughput | how |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Ceph $(ceph --version | awk '{print $3}'), 3 OSDs (file-backed BlueStore, $(ceph_cli osd pool get rbd size | awk '{print $2}') replicas), $(nproc) cores; load average before/after: $LOAD0 / $(cut -d' ' -f1-3 /proc/loadavg)"
