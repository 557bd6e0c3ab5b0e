#!/usr/bin/env bash
# Overlay-path benchmark (the EncFS/eCryptfs report's tests, regenerated): on one tmpfs
# (or, with --backing DIR, on the file system holding DIR: a disk),
#   stream_write  dd if=/dev/zero bs=4k count=25600 conv=fdatasync (100 MB in 4 KiB writes) [MiB/s]
#   stream_read   drop_caches, then dd bs=4k of that file to /dev/null                      [MiB/s]
#   extract       tar -xf of a Linux source tree (Debian's linux-source, pre-decompressed)  [s]
#   du            drop_caches, then du -s of the tree                                       [s]
#   rsync         rsync -an tree/ elsewhere/ (dry run: mostly stat())                       [s]
#   delete        rm -rf of the tree                                                        [s]
#   on-disk       du -sb of the backing (cipher) dir after extract vs the plain tree        [overhead %]
# on each target, all in the same run, interleaved, REPS times; prints the medians as a
# Markdown table and cryptkeep's ratio to each peer:
#   plain      - the backing file system itself (baseline)
#   bindfs     - bindfs --multithreaded passthrough (the FUSE ceiling; as in bench-block.sh)
#   gocryptfs  - Debian's gocryptfs, -scryptn 10, default options
#   cryptkeep  - cryptkeep fs, --scryptn 10
#   cryptkeep-devfuse - the same with `fs mount --no-io-uring` (requests read from /dev/fuse,
#                  what a kernel without enable_uring gets)
#   cryptkeep-keep - the same with `fs mount --keep` (keys and crypto in the keep process)
#   cryptkeep-base - `cryptkeep fs` of the binary in CK_BASE (an earlier build), for a
#                  before/after comparison measured in the same run
# The fuse module's enable_uring is turned on first (as scripts/install-deps.sh does), so the
# cryptkeep targets without --no-io-uring use per-CPU FUSE-over-io_uring queues.
#   securefs   - Debian's securefs, its default format (printed below)
#   encfs      - Debian's EncFS, --standard, password on stdin
# Missing peers are installed with apt-get (not in CI: this is a benchmark, not a test).
# usage: scripts/bench-fs.sh [--reps N] [--quick] [--only t1,t2] [--csv FILE]
#   (cryptkeep-base is not in the default list: --only ...,cryptkeep-base with CK_BASE set)
#   --quick: only the first 10,000 files of the tar (a fast check)
#   --backing DIR: the backing dirs (and the plain target) go into a work dir made in DIR,
#     removed afterwards, instead of onto a tmpfs; the tar being extracted stays on a tmpfs.
#     The header names the backing store (file system type and device).
#   CK=path overrides the cryptkeep binary (default target/release/cryptkeep)
set -euo pipefail
reps=3; quick=0; csv=; backing=
targets=(plain bindfs gocryptfs cryptkeep cryptkeep-devfuse cryptkeep-keep securefs encfs)
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --quick) quick=1; shift;;
    --only) IFS=, read -r -a targets <<< "$2"; shift 2;;
    --csv) csv=$2; shift 2;;
    --backing) backing=$2; shift 2;;
    *) echo "bench-fs: unknown argument $1" >&2; exit 1;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "bench-fs: build first: cargo build --release -p cryptkeep-cli" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench-fs: needs root (tmpfs, drop_caches)" >&2; exit 1; }
has() { [[ " ${targets[*]} " == *" $1 "* ]]; }

# Install what is missing (the benchmark's own peers and the tree), never in CI.
need=()
command -v rsync >/dev/null || need+=(rsync)
command -v xz >/dev/null || need+=(xz-utils)
has securefs && ! command -v securefs >/dev/null && need+=(securefs)
has encfs && ! command -v encfs >/dev/null && need+=(encfs)
has bindfs && ! command -v bindfs >/dev/null && need+=(bindfs)
has gocryptfs && ! command -v gocryptfs >/dev/null && need+=(gocryptfs)
compgen -G '/usr/src/linux-source-*.tar.xz' >/dev/null || need+=(linux-source)
if [ ${#need[@]} -gt 0 ]; then
  [ -z "${CI:-}" ] || { echo "bench-fs: missing ${need[*]} (not installing in CI)" >&2; exit 1; }
  echo "bench-fs: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
src_xz=$(ls /usr/src/linux-source-*.tar.xz | sort -V | tail -n1)

if [ -n "$backing" ]; then
  [ -d "$backing" ] || { echo "bench-fs: --backing $backing is not a directory" >&2; exit 1; }
  w=$(mktemp -d "$(cd "$backing" && pwd)/ck-bfs.XXXXXX")
else
  w=$(mktemp -d /tmp/ck-bfs.XXXXXX)
fi
export CRYPTKEEP_RUN_DIR=$w/run
cleanup() {
  set +e
  for m in $(awk -v w="$w" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do
    [ "$m" = "$w/tmpfs" ] && continue
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  mountpoint -q "$w/tmpfs" && umount -l "$w/tmpfs"
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$w/tmpfs" "$w/run"
mount -t tmpfs -o size=90% tmpfs "$w/tmpfs"
# tardir: the tar; t: where the backing dirs go (the tmpfs, or the work dir on --backing)
tardir=$w/tmpfs t=$w/tmpfs
if [ -n "$backing" ]; then t=$w/back; mkdir -p "$t"; fi
store="$(findmnt -n -o FSTYPE,SOURCE --target "$t" | awk '{print $1 " on " $2}')"
echo "bench-fs: backing store $t: $store" >&2
uring_param=/sys/module/fuse/parameters/enable_uring
if [ -w "$uring_param" ]; then echo Y > "$uring_param"; fi
transport=/dev/fuse
[ "$(cat "$uring_param" 2>/dev/null)" = Y ] && transport="FUSE over io_uring"
pw=bench-password
printf '%s\n' "$pw" > "$w/pass"

# The tree, decompressed once outside the targets (xz stays out of the timing).
echo "bench-fs: decompressing $src_xz" >&2
if [ $quick = 1 ]; then
  # the first 10,000 entries, re-packed into a plain tar
  python3 -c '
import sys, tarfile
with tarfile.open(sys.argv[1], "r|xz") as src, tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT) as dst:
    for i, m in enumerate(src):
        if i == 10000: break
        dst.addfile(m, src.extractfile(m) if m.isreg() else None)
' "$src_xz" "$tardir/src.tar"
else
  xz -dc "$src_xz" > "$tardir/src.tar"
fi
nfiles=$(tar -tf "$tardir/src.tar" | wc -l)

# Mount each target: mnt[target] is where the test runs, back[target] the backing dir.
declare -A mnt back ver
for target in "${targets[@]}"; do
  m=$w/mnt-$target; b=$t/back-$target
  mkdir -p "$m" "$b"
  case $target in
    plain) rmdir "$m"; m=$b; ver[$target]="$store ($(uname -r))";;
    bindfs) bindfs --multithreaded "$b" "$m"; ver[$target]="bindfs $(dpkg-query -W -f='${Version}' bindfs), --multithreaded";;
    gocryptfs)
      gocryptfs -q -init -scryptn 10 -passfile "$w/pass" "$b" >/dev/null
      gocryptfs -q -nosyslog -passfile "$w/pass" "$b" "$m"
      ver[$target]="gocryptfs $(dpkg-query -W -f='${Version}' gocryptfs), -scryptn 10, defaults";;
    cryptkeep|cryptkeep-keep|cryptkeep-devfuse|cryptkeep-base)
      keep_args=() bin=$ck
      [ "$target" = cryptkeep-keep ] && keep_args=(--keep)
      [ "$target" = cryptkeep-devfuse ] && keep_args=(--no-io-uring)
      if [ "$target" = cryptkeep-base ]; then
        bin=${CK_BASE:-}
        [ -x "$bin" ] || { echo "bench-fs: cryptkeep-base needs CK_BASE=path/to/an/earlier/cryptkeep" >&2; exit 1; }
      fi
      "$bin" fs init "$b" --scryptn 10 --passfile "$w/pass" </dev/null >/dev/null
      "$bin" fs mount "$b" "$m" --passfile "$w/pass" "${keep_args[@]}" </dev/null >/dev/null
      via=$transport; [ "$target" = cryptkeep-devfuse ] && via=/dev/fuse
      ver[$target]="$("$bin" --version) ($bin), --scryptn 10 ${keep_args[*]} ($via)";;
    securefs)
      securefs create "$b" --pass "$pw" >/dev/null 2>&1 </dev/null
      securefs mount -b --log "$w/securefs.log" "$b" "$m" --pass "$pw" >/dev/null 2>&1 </dev/null
      for _ in $(seq 50); do mountpoint -q "$m" && break; sleep 0.1; done
      fmt=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version","?"))' \
        "$(ls "$b"/.securefs.json "$b"/.config.json 2>/dev/null | head -n1)" 2>/dev/null || echo '?')
      ver[$target]="securefs $(dpkg-query -W -f='${Version}' securefs), default format $fmt (argon2id)";;
    encfs)
      printf '%s\n' "$pw" | encfs --standard --stdinpass "$b" "$m" >/dev/null 2>&1
      ver[$target]="encfs $(dpkg-query -W -f='${Version}' encfs), --standard";;
  esac
  mountpoint -q "$m" || [ "$target" = plain ] || { echo "bench-fs: $target did not mount" >&2; exit 1; }
  mnt[$target]=$m; back[$target]=$b
done

now() { date +%s.%N; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
secs() { python3 -c "print(f'{$2-$1:.2f}')"; }
declare -A res
for r in $(seq 1 "$reps"); do
  for target in "${targets[@]}"; do
    m=${mnt[$target]}
    s=$(now); dd if=/dev/zero of="$m/stream" bs=4k count=25600 conv=fdatasync status=none; e=$(now)
    res[$target,swrite]+="$(python3 -c "print(round(100/($e-$s)))") "
    drop
    s=$(now); dd if="$m/stream" of=/dev/null bs=4k status=none; e=$(now)
    res[$target,sread]+="$(python3 -c "print(round(100/($e-$s)))") "
    rm -f "$m/stream"
    mkdir -p "$m/tree"; sync
    s=$(now); tar -xf "$tardir/src.tar" -C "$m/tree"; sync; e=$(now)
    res[$target,extract]+="$(secs "$s" "$e") "
    res[$target,disk]+="$(du -sb "${back[$target]}" | cut -f1) "
    drop
    s=$(now); du -s "$m/tree" >/dev/null; e=$(now)
    res[$target,du]+="$(secs "$s" "$e") "
    rm -rf "$w/elsewhere"; mkdir -p "$w/elsewhere"
    s=$(now); rsync -an "$m/tree/" "$w/elsewhere/"; e=$(now)
    res[$target,rsync]+="$(secs "$s" "$e") "
    s=$(now); rm -rf "$m/tree"; sync; e=$(now)
    res[$target,delete]+="$(secs "$s" "$e") "
  done
  echo "bench-fs: rep $r/$reps done" >&2
done

# The plain tree's size, for the on-disk overhead.
mkdir -p "$t/ref"; tar -xf "$tardir/src.tar" -C "$t/ref"; plain_bytes=$(du -sb "$t/ref" | cut -f1); rm -rf "$t/ref"

med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
keys=(swrite sread extract du rsync delete)
declare -A md
echo "backing store: $store ($t)"
echo "| target | stream_write [MiB/s] | stream_read [MiB/s] | extract [s] | du [s] | rsync -an [s] | delete [s] | on-disk [MB] | overhead |"
echo "|---|---|---|---|---|---|---|---|---|"
[ -z "$csv" ] || echo "target,stream_write_mibs,stream_read_mibs,extract_s,du_s,rsync_s,delete_s,disk_bytes,overhead_pct,version" > "$csv"
for target in "${targets[@]}"; do
  row="| $target"; crow="$target"
  for k in "${keys[@]}" disk; do md[$target,$k]=$(echo "${res[$target,$k]}" | med); done
  for k in "${keys[@]}"; do row+=" | ${md[$target,$k]}"; crow+=",${md[$target,$k]}"; done
  ovh=$(python3 -c "print(f'{(${md[$target,disk]}-$plain_bytes)*100/$plain_bytes:+.1f}')")
  row+=" | $(python3 -c "print(round(${md[$target,disk]}/1e6))") | $ovh % |"
  echo "$row"
  [ -z "$csv" ] || echo "$crow,${md[$target,disk]},$ovh,\"${ver[$target]}\"" >> "$csv"
done
if has cryptkeep; then
  for peer in "${targets[@]}"; do
    [ "$peer" = cryptkeep ] && continue
    row="| cryptkeep / $peer"
    for k in "${keys[@]}"; do
      # >1 is better for cryptkeep: throughput ratio for MiB/s, inverse for seconds
      row+=" | $(python3 -c "
a, b = ${md[cryptkeep,$k]}, ${md[$peer,$k]}
r = (a / b if '$k' in ('swrite', 'sread') else b / a) if a and b else float('nan')
print(f'{r:.2f}x')")"
    done
    echo "$row | | |"
  done
  echo "(ratios: >1x means cryptkeep is faster)"
fi
echo "each run (in order), and the spread (max/min) of the stream tests:"
for target in "${targets[@]}"; do
  row="- $target:"
  for k in "${keys[@]}"; do row+=" $k [${res[$target,$k]% }]"; done
  for k in swrite sread; do
    row+=" $k-spread $(echo "${res[$target,$k]}" | tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.2fx", (lo > 0 ? hi/lo : 0)}')"
  done
  echo "$row"
done
echo "(medians of $reps interleaved runs; backing store: $store; $(nproc) cores; tree: $(basename "$src_xz"), $nfiles entries, $((plain_bytes / 1000000)) MB plain)"
for target in "${targets[@]}"; do echo "- $target: ${ver[$target]}"; done
