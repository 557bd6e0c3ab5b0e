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
# on each target, all in the same run, interleaved (the order reversed in every second run),
# REPS times; prints the medians as a Markdown table and cryptkeep's ratio to each peer:
#   plain      - the backing file system itself (baseline)
#   bindfs     - bindfs --multithreaded passthrough (the FUSE ceiling; as in bench-block.sh)
#   gocryptfs  - Debian's gocryptfs, -scryptn 10, default options
#   cryptkeep  - cryptkeep fs, --scryptn 10
#   cryptkeep-devfuse - the same with `fs mount --no-io-uring` (requests read from /dev/fuse,
#                  what a kernel without enable_uring gets)
#   cryptkeep-keep - the same with `fs mount --keep` (keys and crypto in the keep process)
#   cryptkeep-base - `cryptkeep fs` of the binary in CK_BASE (an earlier build), for a
#                  before/after comparison measured in the same run
#   cryptkeep-base-keep - the same with `fs mount --keep`
# The fuse module's enable_uring is turned on first (as scripts/install-deps.sh does), so the
# cryptkeep targets without --no-io-uring use per-CPU FUSE-over-io_uring queues.
#   securefs   - Debian's securefs, its default format (printed below), one round of argon2id
#   encfs      - Debian's EncFS, --standard, password on stdin
#   cryfs      - Debian's CryFS, its defaults (cipher, 16 KiB blocks), CRYFS_FRONTEND=noninteractive,
#                password on stdin
#   ecryptfs   - the kernel's eCryptfs (not in the default list: --only ...,ecryptfs; needs the
#                module and ecryptfs-utils)
# The mounts and the tests are in scripts/bench/lib-fs.sh (shared with scripts/bench/encfs.sh).
# Missing peers are installed with apt-get (not in CI: this is a benchmark, not a test).
# usage: scripts/bench-fs.sh [--reps N] [--quick] [--only t1,t2] [--csv FILE] [--load cpu]
#   (cryptkeep-base and cryptkeep-base-keep are not in the default list: --only
#   ...,cryptkeep-base with CK_BASE set)
#   --quick: only the first 10,000 files of the tar (a fast check)
#   --backing DIR: the backing dirs (and the plain target) go into a work dir made in DIR,
#     removed afterwards, instead of onto a tmpfs; the tar being extracted stays on a tmpfs.
#     The header names the backing store (file system type and device).
#   --load cpu: one busy process per CPU (stress-ng --cpu $(nproc)) runs through all the
#     measurements (started after the mounts and the tar are ready): the file systems on a
#     machine busy with other work. What the keep process costs under contention:
#       scripts/bench-fs.sh --only cryptkeep,cryptkeep-keep --load cpu --reps 5
#   CK=path overrides the cryptkeep binary (default target/release/cryptkeep)
set -euo pipefail
reps=3; quick=0; csv=; backing=; load=
targets=(plain bindfs gocryptfs cryptkeep cryptkeep-devfuse cryptkeep-keep securefs encfs cryfs)
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --quick) quick=1; shift;;
    --only) IFS=, read -r -a targets <<< "$2"; shift 2;;
    --csv) csv=$2; shift 2;;
    --backing) backing=$2; shift 2;;
    --load) [ "${2:-}" = cpu ] || { echo "bench-fs: --load takes 'cpu'" >&2; exit 1; }
            load=$2; shift 2;;
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
has ecryptfs && ! command -v mount.ecryptfs >/dev/null && need+=(ecryptfs-utils)
has cryfs && ! command -v cryfs >/dev/null && need+=(cryfs)
compgen -G '/usr/src/linux-source-*.tar.xz' >/dev/null || need+=(linux-source)
if [ ${#need[@]} -gt 0 ]; then
  [ -z "${CI:-}" ] || { echo "bench-fs: missing ${need[*]} (not installing in CI)" >&2; exit 1; }
  echo "bench-fs: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
. "$root/scripts/bench/lib-fs.sh"
trap fs_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fs_setup
echo "bench-fs: backing store $t: $store" >&2

n=0; [ $quick = 1 ] && n=10000   # --quick: the first 10,000 entries, re-packed into a plain tar
fs_prepare_tar "$n"

# Mount each target, then REPS interleaved runs of the tests (scripts/bench/lib-fs.sh).
for target in "${targets[@]}"; do
  fs_mount "$target" || { echo "bench-fs: $target did not mount" >&2; exit 1; }
done
declare -A res
fs_record() {
  case $2 in
    swrite|sread) res[$1,$2]+="$(printf '%.0f' "$3") ";;
    extract|du|rsync|delete) res[$1,$2]+="$(printf '%.2f' "$3") ";;
    disk) res[$1,$2]+="$3 ";;
  esac
}
if [ -n "$load" ]; then bench_load_start "$load"; sleep 1; fi
for r in $(seq 1 "$reps"); do
  for target in $(rep_order "$r" "${targets[@]}"); do fs_rep "$target"; done
  echo "bench-fs: rep $r/$reps done" >&2
done
bench_load_stop

# The plain tree's size, for the on-disk overhead.
fs_plain_size

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
    row="| cryptkeep / $peer, paired"
    for k in "${keys[@]}"; do
      kind=time; [[ $k == swrite || $k == sread ]] && kind=rate
      row+=" | $(paired_ratio "${res[cryptkeep,$k]}" "${res[$peer,$k]}" $kind)"
    done
    echo "$row | | |"
  done
  echo "(ratios: >1x means cryptkeep is faster; paired: the median of the runs' own ratios)"
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
echo "(medians of $reps interleaved runs, the order reversed in every second one; backing store: $store; $(nproc) cores; tree: $(basename "$src_xz"), $nfiles entries, $((plain_bytes / 1000000)) MB plain${load:+; under load: stress-ng --cpu $(nproc)})"
for target in "${targets[@]}"; do echo "- $target: ${ver[$target]}"; done
