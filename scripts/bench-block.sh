#!/usr/bin/env bash
# Block-path benchmark (the TresorSGX report's measures): fio sequential write/read
# (bs=1M, iodepth=64, libaio, 2 jobs, direct), dd bs=100M count=1 conv=fdatasync
# into a fresh ext4 and once more over blocks it wrote before, and hdparm -t, on loop devices over
# files on one tmpfs (or, with --backing DIR, on the file system holding DIR: a disk):
#   cryptkeep  - cryptkeep's FUSE volume file, direct-I/O loop (what `cryptkeep open` makes)
#   loop       - a plain (unencrypted) image file, direct-I/O loop (what the backing store gives)
#   bindfs     - a plain file through a multithreaded bindfs FUSE passthrough, direct-I/O loop (the ceiling)
#   gocryptfs  - a file inside a gocryptfs mount, loop device (a user-space encrypted peer)
# All in the same run, interleaved, REPS times; prints the medians as a Markdown table
# and cryptkeep's ratio to each peer.
# usage: scripts/bench-block.sh [--reps N] [--size MiB] [--keep process|inline] [--nodiscard] [--with-inline]
#                               [--backing DIR] [--only t1,t2]
#   --backing DIR: the image files go into a work dir made in DIR (removed afterwards) instead
#   of onto a tmpfs; page caches are dropped before each read test. The header names the
#   backing store (file system type and device).
#   --only: a subset of the targets (cryptkeep first; it is the one the ratios are of)
#   --with-inline: a fourth target, cryptkeep with --keep inline (the key in the I/O daemon),
#   to compare the keep process against in-process crypto in the same run
#   --nodiscard: mkfs.ext4 -E nodiscard for the dd test (mkfs's discard leaves the
#   backing files in different states: punched holes on bindfs, EOPNOTSUPP on cryptkeep)
# CK_BASE=PATH adds a target cryptkeep-base: the same volume served by another
# cryptkeep binary (an older build), to compare two builds in one run.
set -euo pipefail
reps=3; size_mib=1024; keep_args=(); mkfs_ext=lazy_itable_init=0,lazy_journal_init=0; backing=
targets=(cryptkeep loop bindfs gocryptfs)
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --size) size_mib=$2; shift 2;;
    --keep) keep_args=(--keep "$2"); shift 2;;
    --nodiscard) mkfs_ext+=,nodiscard; shift;;
    --with-inline) targets+=(inline); shift;;
    --backing) backing=$2; shift 2;;
    --only) IFS=, read -r -a targets <<< "$2"; shift 2;;
    *) echo "bench-block: unknown argument $1" >&2; exit 1;;
  esac
done
base=${CK_BASE:-}
if [ -n "$base" ]; then
  [ -x "$base" ] || { echo "bench-block: CK_BASE=$base is not an executable" >&2; exit 1; }
  targets+=(cryptkeep-base)
fi
root=$(cd "$(dirname "$0")/.." && pwd)
ck=$root/target/release/cryptkeep
[ -x "$ck" ] || { echo "bench-block: build first: cargo build --release" >&2; exit 1; }
for t in fio hdparm bindfs gocryptfs losetup mkfs.ext4; do
  command -v $t >/dev/null || { echo "bench-block: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done

if [ -n "$backing" ]; then
  [ -d "$backing" ] || { echo "bench-block: --backing $backing is not a directory" >&2; exit 1; }
  w=$(mktemp -d "$(cd "$backing" && pwd)/ck-bench.XXXXXX")
else
  w=$(mktemp -d /tmp/ck-bench.XXXXXX)
fi
export CRYPTKEEP_RUN_DIR=$w/run
loops=(); mounts=()
cleanup() {
  set +e
  for m in $w/mnt-*; do mountpoint -q "$m" && umount "$m"; done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  "$ck" close bench >/dev/null 2>&1
  "$ck" close bench-inline >/dev/null 2>&1
  [ -n "$base" ] && "$base" close bench-base >/dev/null 2>&1
  for m in "${mounts[@]}"; do fusermount3 -u "$m" 2>/dev/null; done
  mountpoint -q $w/tmpfs && umount -l $w/tmpfs
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p $w/tmpfs $w/run
if [ -n "$backing" ]; then
  t=$w/back; mkdir -p $t
else
  mount -t tmpfs -o size=$((size_mib * 6 + 512))M tmpfs $w/tmpfs
  t=$w/tmpfs
fi
store="$(findmnt -n -o FSTYPE,SOURCE --target "$t" | awk '{print $1 " on " $2}')"
echo "bench-block: backing store $t: $store" >&2
has() { [[ " ${targets[*]} " == *" $1 "* ]]; }

# cryptkeep
printf 'bench' > $w/pass
"$ck" format $t/ck.img --size $((size_mib + 16))M --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
  --key-file $w/pass --batch-mode >/dev/null
ck_dev=$("$ck" open $t/ck.img bench --key-file $w/pass "${keep_args[@]}")
if [[ " ${targets[*]} " == *" inline "* ]]; then
  "$ck" format $t/ck2.img --size $((size_mib + 16))M --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --key-file $w/pass --batch-mode >/dev/null
  inl_dev=$("$ck" open $t/ck2.img bench-inline --key-file $w/pass --keep inline)
fi
if [ -n "$base" ]; then
  "$base" format $t/ck3.img --size $((size_mib + 16))M --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --key-file $w/pass --batch-mode >/dev/null
  base_dev=$("$base" open $t/ck3.img bench-base --key-file $w/pass "${keep_args[@]}")
fi
# a plain image file, straight on the backing store
if has loop; then
  mkdir -p $t/raw; truncate -s ${size_mib}M $t/raw/file
  loop_dev=$(losetup --direct-io=on --sector-size 4096 -f --show $t/raw/file); loops+=($loop_dev)
fi
# bindfs passthrough of a plain file
if has bindfs; then
  mkdir -p $t/plain $w/bindfs; truncate -s ${size_mib}M $t/plain/file
  bindfs --multithreaded $t/plain $w/bindfs; mounts+=($w/bindfs)
  bind_dev=$(losetup --direct-io=on --sector-size 4096 -f --show $w/bindfs/file); loops+=($bind_dev)
fi
# gocryptfs
if has gocryptfs; then
  mkdir -p $t/gcipher $w/gplain
  gocryptfs -q -init -scryptn 10 -passfile $w/pass $t/gcipher >/dev/null
  gocryptfs -q -nosyslog -passfile $w/pass $t/gcipher $w/gplain; mounts+=($w/gplain)
  truncate -s ${size_mib}M $w/gplain/file
  goc_dev=$(losetup --direct-io=on --sector-size 4096 -f --show $w/gplain/file 2>/dev/null || losetup -f --show $w/gplain/file)
  loops+=($goc_dev)
fi

fio_run() { # dev rw -> MiB/s
  fio --name=b --filename=$1 --rw=$2 --bs=1M --iodepth=64 --ioengine=libaio --direct=1 --numjobs=2 \
    --offset_increment=$((size_mib / 2))M --size=$((size_mib / 2))M --runtime=10 --group_reporting \
    --output-format=json 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; \
print(round((j['write']['bw'] if '$2'=='write' else j['read']['bw'])/1024))"
}
dd_run() { # dev -> MiB/s of a 100 MB fdatasync'd write into ext4
  local m=$w/mnt-dd
  # no lazy init: its background zeroing would race the timed write
  mkfs.ext4 -q -F -E $mkfs_ext $1; mkdir -p $m; mount $1 $m
  local s e; s=$(date +%s.%N)
  dd if=/dev/zero of=$m/tempfile bs=100M count=1 conv=fdatasync 2>/dev/null
  e=$(date +%s.%N)
  python3 -c "print(round(100/($e-$s)))"
  # the same again over blocks the file system has written before ("warm")
  rm $m/tempfile; sync
  s=$(date +%s.%N)
  dd if=/dev/zero of=$m/tempfile bs=100M count=1 conv=fdatasync 2>/dev/null
  e=$(date +%s.%N); umount $m
  python3 -c "print(round(100/($e-$s)))"
}
hdparm_run() { hdparm -t $1 | awk '/Timing/ {print $(NF-1)}'; }

declare -A res
for r in $(seq 1 $reps); do
  for target in "${targets[@]}"; do
    case $target in cryptkeep) d=$ck_dev;; loop) d=$loop_dev;; bindfs) d=$bind_dev;; gocryptfs) d=$goc_dev;; inline) d=$inl_dev;; cryptkeep-base) d=$base_dev;; esac
    res[$target,write]+="$(fio_run $d write) "
    sync; echo 3 > /proc/sys/vm/drop_caches
    res[$target,read]+="$(fio_run $d read) "
    read -r cold warm <<< "$(dd_run $d | tr '\n' ' ')"
    res[$target,dd]+="$cold "; res[$target,ddwarm]+="$warm "
    sync; echo 3 > /proc/sys/vm/drop_caches
    res[$target,hdparm]+="$(hdparm_run $d) "
  done
  echo "bench-block: rep $r/$reps done" >&2
done
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "backing store: $store ($t)"
echo "| target | fio seq write [MiB/s] | fio seq read [MiB/s] | dd 100M fdatasync, fresh ext4 [MiB/s] | dd again, warm [MiB/s] | hdparm -t [MB/s] |"
echo "|---|---|---|---|---|---|"
declare -A m
for target in "${targets[@]}"; do
  row="| $target"
  for k in write read dd ddwarm hdparm; do m[$target,$k]=$(echo "${res[$target,$k]}" | med); row+=" | ${m[$target,$k]}"; done
  echo "$row |"
done
for peer in "${targets[@]:1}"; do
  row="| cryptkeep / $peer"
  for k in write read dd ddwarm hdparm; do row+=" | $(python3 -c "print(f'{${m[cryptkeep,$k]}/${m[$peer,$k]}:.2f}x')")"; done
  echo "$row |"
done
echo "each run (in order):"
for target in "${targets[@]}"; do
  row="- $target:"
  for k in write read dd ddwarm hdparm; do row+=" $k [${res[$target,$k]% }]"; done
  echo "$row"
done
echo "(medians of $reps interleaved runs; $size_mib MiB devices; backing store: $store; $(nproc) cores; mkfs.ext4 -E $mkfs_ext)"
