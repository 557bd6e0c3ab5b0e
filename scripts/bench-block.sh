#!/usr/bin/env bash
# Block-path benchmark (the TresorSGX report's measures): fio sequential write/read
# (bs=1M, iodepth=64, libaio, 2 jobs, direct), dd bs=100M count=1 conv=fdatasync
# into a fresh ext4 and once more over blocks it wrote before, and hdparm -t, on loop devices over
# files on one tmpfs (or, with --backing DIR, on the file system holding DIR: a disk):
#   cryptkeep  - cryptkeep's FUSE volume file, direct-I/O loop (what `cryptkeep open` makes)
#   loop       - a plain (unencrypted) image file, direct-I/O loop (what the backing store gives)
#   bindfs     - a plain file through a multithreaded bindfs FUSE passthrough, direct-I/O loop (the ceiling)
#   gocryptfs  - a file inside a gocryptfs mount, loop device (a user-space encrypted peer)
# All in the same run, interleaved (the order reversed in every second run), REPS times; prints the medians as a Markdown table
# and cryptkeep's ratio to each peer.
# usage: scripts/bench-block.sh [--reps N] [--size MiB] [--keep process|inline] [--nodiscard] [--with-inline]
#                               [--backing DIR] [--only t1,t2] [--load cpu] [--seconds S] [--tests LIST]
#                               [--io-uring]
#   --io-uring: every cryptkeep target is opened with --io-uring (its block file served over
#   FUSE-over-io_uring queues instead of /dev/fuse)
#   --tests LIST: which measures, from seq (fio 1 MiB sequential write and read), rand4k (fio
#   4 KiB random write and read, iodepth 64, 2 jobs, S seconds each, 5 by default: the
#   requests of a database or a VM image, where each request pays the path's fixed cost),
#   dd and hdparm; default seq,dd,hdparm. The random measure of the keep:
#     scripts/bench-block.sh --only cryptkeep,inline --tests rand4k --reps 5
#   --load cpu: one busy process per CPU (stress-ng --cpu $(nproc)) runs through all the
#   measurements: the block path on a machine busy with other work. With --with-inline it
#   is the measure of what the keep process costs under contention.
#   --seconds S: each fio test runs for S seconds, over the device again and again (fio
#   --time_based), instead of one pass (1 GiB: well under a second on a tmpfs, so a
#   single scheduling hiccup of a busy machine moves the figure); the dd and hdparm tests
#   are unchanged. The loaded measure of the keep:
#     scripts/bench-block.sh --only cryptkeep,inline --load cpu --seconds 5 --reps 5
#   Every image file is fully allocated (fallocate) and written over once before it is
#   measured, so the first run does not pay for the backing store's allocation.
#   --backing DIR: the image files go into a work dir made in DIR (removed afterwards) instead
#   of onto a tmpfs; page caches are dropped before each read test, and each fio write ends
#   with an fsync of the device inside its time (fio --end_fsync=1), so a target that
#   writes its image through the page cache is timed until its data is on the disk, as a
#   direct-I/O loop's is. The header names the backing store (file system type and device).
#   --only: a subset of the targets (cryptkeep first; it is the one the ratios are of)
#   --with-inline: a fourth target, cryptkeep with --keep inline (the key in the I/O daemon),
#   to compare the keep process against in-process crypto in the same run
#   --nodiscard: mkfs.ext4 -E nodiscard for the dd test (mkfs's discard leaves the
#   backing files in different states: punched holes on bindfs, EOPNOTSUPP on cryptkeep)
# CK=PATH: the cryptkeep binary (default target/release/cryptkeep).
# CK_BASE=PATH adds a target cryptkeep-base: the same volume served by another
# cryptkeep binary (an older build), to compare two builds in one run. It is opened with
# the same arguments (--io-uring among them): to compare a transport, make it a wrapper
# that drops the flag.
set -euo pipefail
reps=3; size_mib=1024; keep_args=(); mkfs_ext=lazy_itable_init=0,lazy_journal_init=0; backing= load=
fio_seconds= tests=seq,dd,hdparm ck_open_args=()
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
    --load) [ "$2" = cpu ] || { echo "bench-block: --load takes 'cpu'" >&2; exit 1; }
            load=$2; shift 2;;
    --seconds) [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench-block: --seconds takes a whole number of seconds" >&2; exit 1; }
               fio_seconds=$2; shift 2;;
    --tests) tests=$2; shift 2;;
    --io-uring) ck_open_args+=(--io-uring); shift;;
    *) echo "bench-block: unknown argument $1" >&2; exit 1;;
  esac
done
# The measures, as result keys, with their column headers.
keys=()
declare -A header=(
  [write]='fio seq write [MiB/s]' [read]='fio seq read [MiB/s]'
  [randwrite]='fio 4K randwrite [MiB/s]' [randread]='fio 4K randread [MiB/s]'
  [dd]='dd 100M fdatasync, fresh ext4 [MiB/s]' [ddwarm]='dd again, warm [MiB/s]' [hdparm]='hdparm -t [MB/s]')
IFS=, read -r -a wanted <<< "$tests"
declare -A seen=()
for x in "${wanted[@]}"; do
  [ -z "${seen[$x]:-}" ] || continue
  seen[$x]=1
  case $x in
    seq) keys+=(write read);; rand4k) keys+=(randwrite randread);;
    dd) keys+=(dd ddwarm);; hdparm) keys+=(hdparm);;
    *) echo "bench-block: --tests takes seq, rand4k, dd and hdparm, not '$x'" >&2; exit 1;;
  esac
done
[ ${#keys[@]} -gt 0 ] || { echo "bench-block: --tests names no measure" >&2; exit 1; }
wants() { [[ ",$tests," == *",$1,"* ]]; }
# A target named twice (--only cryptkeep,inline --with-inline) is measured once.
declare -A named=(); once=()
for t in "${targets[@]}"; do
  [ -n "${named[$t]:-}" ] || { named[$t]=1; once+=("$t"); }
done
targets=("${once[@]}")
base=${CK_BASE:-}
if [ -n "$base" ]; then
  [ -x "$base" ] || { echo "bench-block: CK_BASE=$base is not an executable" >&2; exit 1; }
  [[ " ${targets[*]} " == *" cryptkeep-base "* ]] || targets+=(cryptkeep-base)
fi
root=$(cd "$(dirname "$0")/.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "bench-block: build first: cargo build --release" >&2; exit 1; }
for t in fio hdparm bindfs gocryptfs losetup mkfs.ext4 python3; do
  command -v $t >/dev/null || { echo "bench-block: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
blk_name=bench-block blk_ck=$ck blk_fio_time_based=$fio_seconds
. "$root/scripts/bench/lib-block.sh"
blk_init "$backing" $((size_mib * 6 + 512))
w=$blk_w t=$blk_store store=$blk_store_desc
has() { [[ " ${targets[*]} " == *" $1 "* ]]; }

printf 'bench' > $w/pass
blk_cryptkeep bench $size_mib $w/pass -- "${keep_args[@]}" "${ck_open_args[@]}"; ck_dev=$blk_dev
if has inline; then blk_cryptkeep bench-inline $size_mib $w/pass -- --keep inline "${ck_open_args[@]}"; inl_dev=$blk_dev; fi
if [ -n "$base" ]; then
  blk_cryptkeep_format $t/bench-base.img $size_mib $w/pass
  BIN=$base blk_cryptkeep_open $t/bench-base.img bench-base $w/pass "${keep_args[@]}" "${ck_open_args[@]}"; base_dev=$blk_dev
fi
# a plain image file, straight on the backing store
if has loop; then blk_plain_loop raw $size_mib; loop_dev=$blk_dev; fi
# bindfs passthrough of a plain file
if has bindfs; then blk_bindfs bindfs $size_mib; bind_dev=$blk_dev; fi
if has gocryptfs; then blk_gocryptfs gocryptfs $size_mib $w/pass; goc_dev=$blk_dev; fi

# On a disk, writes are timed until they are durable (see blk_fio).
# dev rw -> MiB/s; a random test runs 5 s unless --seconds says otherwise
fio_run() {
  local secs=${fio_seconds:-10}
  [[ $2 == rand* ]] && secs=${fio_seconds:-5}
  printf '%.0f\n' "$(blk_fio $1 $2 $size_mib $secs ${backing:+durable})"
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
hdparm_run() { blk_hdparm -t $1; }

declare -A res
if [ -n "$load" ]; then bench_load_start "$load"; sleep 1; fi
for r in $(seq 1 $reps); do
  for target in $(rep_order "$r" "${targets[@]}"); do
    case $target in cryptkeep) d=$ck_dev;; loop) d=$loop_dev;; bindfs) d=$bind_dev;; gocryptfs) d=$goc_dev;; inline) d=$inl_dev;; cryptkeep-base) d=$base_dev;; esac
    if wants seq; then
      res[$target,write]+="$(fio_run $d write) "
      sync; echo 3 > /proc/sys/vm/drop_caches
      res[$target,read]+="$(fio_run $d read) "
    fi
    if wants rand4k; then
      res[$target,randwrite]+="$(fio_run $d randwrite) "
      sync; echo 3 > /proc/sys/vm/drop_caches
      res[$target,randread]+="$(fio_run $d randread) "
    fi
    if wants dd; then
      read -r cold warm <<< "$(dd_run $d | tr '\n' ' ')"
      res[$target,dd]+="$cold "; res[$target,ddwarm]+="$warm "
    fi
    if wants hdparm; then
      sync; echo 3 > /proc/sys/vm/drop_caches
      res[$target,hdparm]+="$(hdparm_run $d) "
    fi
  done
  echo "bench-block: rep $r/$reps done" >&2
done
bench_load_stop
echo "backing store: $store ($t)"
row="| target"; sep="|---"
for k in "${keys[@]}"; do row+=" | ${header[$k]}"; sep+="|---"; done
echo "$row |"; echo "$sep|"
declare -A m
for target in "${targets[@]}"; do
  row="| $target"
  for k in "${keys[@]}"; do m[$target,$k]=$(echo "${res[$target,$k]}" | med); row+=" | ${m[$target,$k]}"; done
  echo "$row |"
done
for peer in "${targets[@]:1}"; do
  has cryptkeep || break # the ratios are cryptkeep's; --only may leave it out
  row="| cryptkeep / $peer"
  for k in "${keys[@]}"; do row+=" | $(python3 -c "a, b = ${m[cryptkeep,$k]}, ${m[$peer,$k]}; print(f'{a / b:.2f}x' if b else 'n/a')")"; done
  echo "$row |"
  row="| cryptkeep / $peer, paired"
  for k in "${keys[@]}"; do row+=" | $(paired_ratio "${res[cryptkeep,$k]}" "${res[$peer,$k]}")"; done
  echo "$row |"
done
has cryptkeep && [ ${#targets[@]} -gt 1 ] && echo "(paired: the median of the runs' own ratios)"
echo "each run (in order):"
for target in "${targets[@]}"; do
  row="- $target:"
  for k in "${keys[@]}"; do row+=" $k [${res[$target,$k]% }]"; done
  echo "$row"
done
echo "(medians of $reps interleaved runs, the order reversed in every second one; $size_mib MiB devices; backing store: $store; $(nproc) cores; mkfs.ext4 -E $mkfs_ext${backing:+; fio writes timed until durable (--end_fsync=1)}${load:+; under load: stress-ng --cpu $(nproc)}${fio_seconds:+; each fio test runs ${fio_seconds} s (--time_based)}$(wants rand4k && echo "; 4K random tests: ${fio_seconds:-5} s each, iodepth 64, 2 jobs")${ck_open_args:+; cryptkeep opened with ${ck_open_args[*]}})"
