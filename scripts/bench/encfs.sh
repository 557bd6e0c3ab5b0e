#!/usr/bin/env bash
# `cryptkeep bench encfs`: the EncFS/eCryptfs report (user-space vs kernel encrypted file
# systems), regenerated with cryptkeep fs and today's peers in one run.
#
# What it measures, on one tmpfs (or, with --backing DIR, on the file system holding DIR),
# each target mounted once, the tests interleaved target by target, --reps times
# (scripts/bench/lib-fs.sh has the command lines; scripts/bench-fs.sh runs the same tests):
#   stream_write  dd if=/dev/zero bs=4k conv=fdatasync: 100 MiB in 4 KiB writes       [MiB/s]
#   stream_read   drop_caches, then dd bs=4k of that file to /dev/null                 [MiB/s]
#   extract       tar -xf of a Linux source tree (Debian's linux-source, pre-decompressed,
#                 by default its first 40,000 entries: about the size of the Linux 3.0
#                 tree the report extracted)                                            [s]
#   du            drop_caches, then du -s of the tree (the time)                        [s]
#   rsync         rsync -an of the tree (a dry run: mostly stat())                      [s]
#   delete        rm -rf of the tree, sync                                              [s]
# and what the encryption costs on disk (the report's "du" row and its per-file table):
#   disk_used     du of the backing (cipher) dir after extract: the space allocated     [MB]
#   file_disk     du of one 1-byte file (N files in a new directory, per file)          [B]
#   overhead_pct  disk_used against the plain tree extracted on the backing store       [%]
#   overhead_bytes_pct  the same in bytes stored (du -b) rather than space allocated    [%]
#   header_bytes_per_file  bytes stored per 1-byte file beyond what plain stores        [B]
# (the overhead metrics only for the encrypted targets; notes.md has the per-file table for
# files of 0, 1, 1024 and 4096 bytes, raw and du, as the report had it).
#
# Targets: plain (the backing store), bindfs (unencrypted FUSE passthrough): baselines;
# gocryptfs, securefs, EncFS, CryFS, eCryptfs (kernel): peers; cryptkeep fs over FUSE-over-
# io_uring, over /dev/fuse (--no-io-uring) and with the keep (--keep): ours. A peer that is
# not installed (scripts/install-deps.sh installs them) or does not mount is skipped with a
# line in skipped.txt; eCryptfs needs the kernel module and ecryptfs-utils.
#
# usage: scripts/bench/encfs.sh --out DIR [--quick] [--reps N] [--backing DIR] [--files N]
#   --quick      the first 2,000 entries of the tree, a 32 MiB stream, 1 repetition
#   --reps N     repetitions (default 3)
#   --backing DIR  the backing dirs go onto the file system holding DIR (a disk)
#   --files N    extract the first N entries of the tree (0: all of it)
#   CK=path      the cryptkeep binary (default target/release/cryptkeep)
# Writes DIR/data.csv, targets.csv, metrics.csv, pairs.csv, skipped.txt, published.md and
# notes.md (the contract in docs/design/bench.md); prints `@step I N LABEL` on stdout, the
# rest on stderr (and into DIR/log.txt). Needs root (tmpfs, mounts, drop_caches).
set -euo pipefail
out='' quick=0 reps=3 backing='' files=40000 files_set=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2;;
    --quick) quick=1; shift;;
    --reps) reps=$2; shift 2;;
    --backing) backing=$2; shift 2;;
    --files) files=$2; files_set=1; shift 2;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "encfs: unknown argument $1" >&2; exit 2;;
  esac
done
[ -n "$out" ] || { echo "encfs: --out DIR is required" >&2; exit 2; }
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "encfs: --reps wants a positive number" >&2; exit 2; }
[[ "$files" =~ ^[0-9]+$ ]] || { echo "encfs: --files wants a number" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Everything but the progress lines goes to stderr and into DIR/log.txt (unless stderr is
# that file already). The tee outlives a Ctrl-C so that the cleanup is logged too.
if [ "$(readlink -f /proc/self/fd/2)" != "$(readlink -f "$out/log.txt")" ]; then
  exec 2> >(trap '' INT TERM; exec tee -a "$out/log.txt" >&2)
fi
exec 3>&2   # the log, for the cleanup (which may run where stderr is redirected)
root=$(cd "$(dirname "$0")/../.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ "$(id -u)" = 0 ] || { echo "encfs: needs root (tmpfs, mounts, drop_caches)" >&2; exit 1; }

n_files_per_size=200
if [ $quick = 1 ]; then
  reps=1; n_files_per_size=20
  [ $files_set = 1 ] || files=2000
fi
. "$root/scripts/bench/lib-fs.sh"
[ $quick = 1 ] && fs_stream_mib=32

report=encfs
all=(plain bindfs gocryptfs securefs encfs cryfs ecryptfs cryptkeep cryptkeep-devfuse cryptkeep-keep)
encrypted=(gocryptfs securefs encfs cryfs ecryptfs cryptkeep cryptkeep-devfuse cryptkeep-keep)
declare -A role label why
for t0 in "${all[@]}"; do role[$t0]=peer; done
role[plain]=baseline; role[bindfs]=baseline
for t0 in cryptkeep cryptkeep-devfuse cryptkeep-keep; do role[$t0]=ours; done
label[bindfs]="bindfs (FUSE passthrough, no encryption)"
label[gocryptfs]="gocryptfs"
label[securefs]="securefs"
label[encfs]="EncFS"
label[cryfs]="CryFS"
label[ecryptfs]="eCryptfs (kernel)"
label[cryptkeep]="cryptkeep fs (FUSE over io_uring)"
label[cryptkeep-devfuse]="cryptkeep fs (/dev/fuse)"
label[cryptkeep-keep]="cryptkeep fs --keep"

is_encrypted() { [[ " ${encrypted[*]} " == *" $1 "* ]]; }

# Clean up on every way out: no mount, daemon or work dir left behind.
on_exit() {
  local rc=$?
  trap '' INT TERM
  # fd 3 is closed while a mount runs (its daemon must not hold the log); an
  # exec onto a closed fd would end the shell before the cleanup.
  if { true >&3; } 2>/dev/null; then exec 2>&3; fi
  fs_cleanup
  [ $rc = 0 ] || echo "encfs: stopped (exit $rc); mounts and daemons removed" >&2
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

: > "$out/skipped.txt"
skip() { # TARGET WHY INSTALL
  why[$1]=$2
  echo "$1: $2; install: $3" >> "$out/skipped.txt"
  echo "encfs: skipping $1: $2" >&2
}

# Which targets can run: a missing peer is skipped (never installed here: CI must not
# depend on the network for a benchmark).
for t0 in "${all[@]}"; do
  case $t0 in
    plain) ;;
    cryptkeep|cryptkeep-devfuse|cryptkeep-keep)
      [ -x "$ck" ] || skip "$t0" "no cryptkeep binary at $ck" "cargo build --release -p cryptkeep-cli";;
    ecryptfs)
      if ! grep -qw ecryptfs /proc/filesystems && ! modprobe ecryptfs 2>/dev/null; then
        skip ecryptfs "the kernel has no eCryptfs and its module is not available (modprobe ecryptfs failed on $(uname -r)): run on a host kernel with CONFIG_ECRYPT_FS" \
          "apt-get install ecryptfs-utils"
      elif ! command -v mount.ecryptfs >/dev/null || ! command -v ecryptfs-add-passphrase >/dev/null; then
        skip ecryptfs "mount.ecryptfs is not installed" "apt-get install ecryptfs-utils"
      fi;;
    *)
      command -v "$(fs_tool "$t0")" >/dev/null ||
        skip "$t0" "$(fs_tool "$t0") is not installed" "apt-get install $(fs_package "$t0") (or scripts/install-deps.sh)";;
  esac
done
[ -n "${why[cryptkeep-devfuse]:-}" ] || [ -e /dev/fuse ] ||
  skip cryptkeep-devfuse "no /dev/fuse" "modprobe fuse"
for tool in rsync tar du dd python3; do
  command -v "$tool" >/dev/null || { echo "encfs: $tool is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
[ -n "$(fs_find_src)" ] || {
  echo "encfs: no Linux source tree to extract (/usr/src/linux-source-*.tar.xz); install: apt-get install linux-source (scripts/install-deps.sh)" >&2
  exit 1; }
run=()
for t0 in "${all[@]}"; do [ -n "${why[$t0]:-}" ] || run+=("$t0"); done

nsteps=$((1 + ${#run[@]} + reps * ${#run[@]} + 1))
step=0
progress() {
  step=$((step + 1))
  echo "@step $step $nsteps $*"
  echo "encfs: [$SECONDS s] step $step/$nsteps: $*" >&2
}

# targets.csv: every target, in display order (the skipped ones too: skipped.txt says why).
fs_setup
label[plain]="${store%% *} (the backing store, no FUSE)"
{
  echo "target,role,label"
  for t0 in "${all[@]}"; do echo "$t0,${role[$t0]},\"${label[$t0]}\""; done
} > "$out/targets.csv"
echo "encfs: backing store $t: $store; $transport" >&2

progress "prepare the Linux tree"
fs_prepare_tar "$files"
fs_plain_size
echo "encfs: the tree: $nfiles entries, $plain_bytes bytes, $plain_alloc allocated" >&2

mounted=()
for t0 in "${run[@]}"; do
  progress "mount $t0"
  # (a daemon keeps neither the progress stream nor fd 3 open)
  if fs_mount "$t0" >&2 2>>"$w/mount-$t0.err" 3>&-; then
    mounted+=("$t0")
  else
    cat "$w/mount-$t0.err" >&2 || true
    reason=$(tail -n1 "$w/mount-$t0.err" 2>/dev/null | tr -d '\r' | tr ';' ',' | cut -c1-200)
    skip "$t0" "it did not mount${reason:+ ($reason)}; the log has the details" "scripts/install-deps.sh"
  fi
done

# data.csv: one row per measurement.
echo "report,target,metric,rep,value,unit" > "$out/data.csv"
emit() { # TARGET METRIC REP VALUE UNIT: only positive values (a zero is no measurement)
  if awk -v v="$4" 'BEGIN { exit !(v + 0 > 0) }'; then
    echo "$report,$1,$2,$3,$4,$5" >> "$out/data.csv"
  else
    echo "encfs: $1 $2 rep $3: $4 $5 is not positive, left out" >&2
    echo "- $1, $2, run $3: $4 $5, not positive: left out (the metric's targets say so)" >> "$w/left-out"
  fi
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", (a - b) * 100 / b }'; }
rep=0
fs_record() {
  local target=$1 key=$2 v=$3
  case $key in
    swrite) emit "$target" stream_write "$rep" "$v" MiB/s;;
    sread) emit "$target" stream_read "$rep" "$v" MiB/s;;
    extract|du|rsync|delete) emit "$target" "$key" "$rep" "$v" s;;
    disk)
      is_encrypted "$target" && emit "$target" overhead_bytes_pct "$rep" "$(pct "$v" "$plain_bytes")" %;;
    disk_alloc)
      emit "$target" disk_used "$rep" "$(awk -v v="$v" 'BEGIN { printf "%.2f\n", v / 1e6 }')" MB
      is_encrypted "$target" && emit "$target" overhead_pct "$rep" "$(pct "$v" "$plain_alloc")" %;;
  esac
  return 0
}
# A target that fails during a run (its daemon died, a command failed) is skipped from
# then on, with its rows: one peer does not end the report.
fail() { # TARGET WHAT
  local reason
  reason=$(grep -v '^+' "$w/run.err" 2>/dev/null | tail -n1 | tr -d '\r' | tr ';' ',' | cut -c1-200)
  skip "$1" "$2 failed${reason:+ ($reason)}; the log has the details" "scripts/install-deps.sh"
  unset "mnt[$1]"
  local m1 keep=()
  for m1 in "${mounted[@]}"; do [ "$m1" = "$1" ] || keep+=("$m1"); done
  mounted=("${keep[@]}")
}
for rep in $(seq 1 "$reps"); do
  for t0 in "${run[@]}"; do
    if [ -n "${mnt[$t0]:-}" ]; then
      progress "run $rep/$reps: $t0"
      set +e
      ( set -e; fs_rep "$t0" ) 2>"$w/run.err" 3>&-
      rc=$?
      set -e
      cat "$w/run.err" >&2
      [ $rc = 0 ] || fail "$t0" "run $rep"
    else
      step=$((step + 1))
    fi
  done
  echo "encfs: repetition $rep/$reps done" >&2
done

# The per-file cost: N files of 0, 1, 1024, 4096 bytes in a new directory of each target.
progress "per-file cost"
sizes=(0 1 1024 4096)
declare -A raw alloc
for t0 in "${mounted[@]}"; do
  while read -r s a k; do raw[$t0,$s]=$a alloc[$t0,$s]=$k; done \
    < <(fs_files_cost "$t0" "$n_files_per_size" "${sizes[@]}" 2>"$w/run.err" 3>&-)
  cat "$w/run.err" >&2
done
for t0 in "${mounted[@]}"; do
  for s in "${sizes[@]}"; do
    [ -n "${raw[$t0,$s]:-}" ] || { fail "$t0" "the per-file measurement"; break; }
  done
done
per() { awk -v a="$1" -v n="$n_files_per_size" 'BEGIN { printf "%.1f\n", a / n }'; }
for t0 in "${mounted[@]}"; do
  emit "$t0" file_disk 1 "$(per "${alloc[$t0,1]}")" B
  if is_encrypted "$t0"; then
    emit "$t0" header_bytes_per_file 1 "$(per "$((raw[$t0,1] - ${raw[plain,1]:-0}))")" B
  fi
done

# The rows of a target that failed half-way go: it is in skipped.txt.
for t0 in "${all[@]}"; do
  if [ -n "${why[$t0]:-}" ]; then
    awk -F, -v t="$t0" '$2 != t' "$out/data.csv" > "$w/data.csv" && cat "$w/data.csv" > "$out/data.csv"
  fi
done

# metrics.csv: a metric's targets are those that have a row of it (a zero overhead is no
# row, and no gap).
declare -A emitted
while IFS=, read -r _ t1 m1 _; do emitted[$m1]+=" $t1 "; done < <(tail -n +2 "$out/data.csv")
targets_of() { # METRIC DEFAULT: "*" when every target that ran has it
  local m=$1 list=() t1
  for t1 in "${all[@]}"; do [[ "${emitted[$m]:-}" == *" $t1 "* ]] && list+=("$t1"); done
  if [ "$2" = '*' ] && [ ${#list[@]} = ${#mounted[@]} ]; then echo '*'
  elif [ ${#list[@]} = 0 ]; then echo "${2/\*/${all[*]}}"
  else echo "${list[*]}"; fi
}
enc_all="${encrypted[*]}"
{
  echo "metric,label,unit,better,table,targets"
  echo "stream_write,stream write (dd 4 KiB blocks),MiB/s,higher,stream,$(targets_of stream_write '*')"
  echo "stream_read,stream read after drop_caches,MiB/s,higher,stream,$(targets_of stream_read '*')"
  echo "extract,tar -xf of the Linux tree,s,lower,tree,$(targets_of extract '*')"
  echo "du,du -s of the tree (cold cache),s,lower,tree,$(targets_of du '*')"
  echo "rsync,rsync -an of the tree (stat),s,lower,tree,$(targets_of rsync '*')"
  echo "delete,rm -rf of the tree,s,lower,tree,$(targets_of delete '*')"
  echo "disk_used,disk used by the tree (du),MB,lower,disk,$(targets_of disk_used '*')"
  echo "file_disk,disk used by a 1-byte file (du),B,lower,disk,$(targets_of file_disk '*')"
  echo "overhead_pct,space allocated beyond the plain tree (du),%,lower,overhead,$(targets_of overhead_pct "$enc_all")"
  echo "overhead_bytes_pct,bytes stored beyond the plain tree (du -b),%,lower,overhead,$(targets_of overhead_bytes_pct "$enc_all")"
  echo "header_bytes_per_file,bytes stored per file beyond its content,B,lower,overhead,$(targets_of header_bytes_per_file "$enc_all")"
} > "$out/metrics.csv"

# pairs.csv: like-for-like comparisons beside the best peer's.
{
  echo "ours,other,why"
  for p1 in "encfs:the report's user-space file system" "ecryptfs:the report's kernel file system" \
            "gocryptfs:the same on-disk format"; do
    if [[ " ${mounted[*]} " == *" ${p1%%:*} "* && " ${mounted[*]} " == *" cryptkeep "* ]]; then
      echo "cryptkeep,${p1%%:*},${p1#*:}"
    fi
  done
} > "$out/pairs.csv"

# published.md: the report's own tables.
cat > "$out/published.md" <<'EOF'
## The EncFS/eCryptfs report, as published

EncFS (user space, FUSE) against eCryptfs (in the kernel), on kernel 3.16.3, an Intel
Pentium G630 (Sandy Bridge, 2 × 2.7 GHz). EncFS with its defaults (AES with a 192-bit key,
encrypted names), eCryptfs with AES-128 and encrypted names. The tests: stream_write (100 MB
of zeros in 4 KB blocks), extract (linux-3.0.tar.gz), du (the disk space used after the
extraction), rsync (`rsync -an` of the extracted tree: mostly stat()), delete (a recursive
delete of the tree). "EncFS advantage" is how many times better EncFS is.

**Headline:** on a classic HDD, EncFS is **18.83×** faster than eCryptfs at rsync (stat()-heavy)
and 11.55× at delete, because of eCryptfs's 8 KB per-file header; on tmpfs, eCryptfs is faster
at everything but the disk space (EncFS 0.36× at extract, 0.38× at rsync, 0.21× at delete),
and EncFS uses 1.59× less space everywhere.

HDD: Seagate Barracuda 7200.9

| Test | EncFS | eCryptfs | EncFS advantage |
|---|--:|--:|--:|
| stream_write | 32 MiB/s | 38 MiB/s | 0.84 |
| extract | 28744 ms | 30027 ms | 1.04 |
| du | 495 MB | 784 MB | 1.58 |
| rsync | 3319 ms | 62486 ms | 18.83 |
| delete | 6462 ms | 74652 ms | 11.55 |

SSD: Samsung SSD 840 EVO 250GB

| Test | EncFS | eCryptfs | EncFS advantage |
|---|--:|--:|--:|
| stream_write | 53 MiB/s | 75 MiB/s | 0.71 |
| extract | 26129 ms | 9692 ms | 0.37 |
| du | 495 MB | 784 MB | 1.58 |
| rsync | 2725 ms | 8210 ms | 3.01 |
| delete | 5444 ms | 9130 ms | 1.68 |

Ramdisk: tmpfs

| Test | EncFS | eCryptfs | EncFS advantage |
|---|--:|--:|--:|
| stream_write | 82 MiB/s | 111 MiB/s | 0.74 |
| extract | 22393 ms | 8117 ms | 0.36 |
| du | 485 MB | 773 MB | 1.59 |
| rsync | 1931 ms | 740 ms | 0.38 |
| delete | 4346 ms | 907 ms | 0.21 |

The space a file takes, in bytes (EncFS: an 8-byte header, nothing for an empty file;
eCryptfs: an 8 KB header; du rounds up to the 4 KB blocks of the file system):

| plaintext size | EncFS raw | EncFS du | eCryptfs raw | eCryptfs du |
|--:|--:|--:|--:|--:|
| 0 | 0 | 0 | 8192 | 8192 |
| 1 | 9 | 4096 | 12288 | 12288 |
| 1024 | 1032 | 4096 | 12288 | 12288 |

Their "du" row is `disk_used` here (in MB, the space allocated), the per-file table is
`file_disk` and `header_bytes_per_file` (and the table in the notes); this run adds
stream_read and the time `du -s` takes on a cold cache.
EOF

# notes.md: the conditions of this run.
{
  echo "## Conditions"
  echo
  echo "- backing store: $store ($([ -n "$backing" ] && echo "a work dir in $backing" || echo "a tmpfs")), kernel $(uname -r), $(nproc) CPUs"
  echo "- FUSE transport of \`cryptkeep\` and \`cryptkeep-keep\`: $transport"
  echo "- tree: $(basename "$src_xz"), $([ "$files" -gt 0 ] && echo "its first $files entries" || echo "all of it"): $nfiles entries, $((plain_bytes / 1000000)) MB stored, $((plain_alloc / 1000000)) MB allocated on the backing store"
  echo "- stream: $fs_stream_mib MiB in 4 KiB writes; $reps repetition(s), the targets interleaved in each$([ $quick = 1 ] && echo "; --quick")"
  echo "- per-file cost: $n_files_per_size files of each size in a new directory, the change of \`du -sb\` (raw) and \`du -s\` (du) of the backing dir, per file; raw is relative to what plain stores for the same files (its directory entries), so plain's raw is the content size"
  echo
  echo "## Versions"
  echo
  for t0 in "${all[@]}"; do
    if [ -n "${why[$t0]:-}" ]; then echo "- $t0: skipped (${why[$t0]})"; else echo "- $t0: ${ver[$t0]:-}"; fi
  done
  echo
  if [ -s "$w/left-out" ]; then
    echo "## Left out"
    echo
    cat "$w/left-out"
    echo
  fi
  echo "## The space a file takes, in bytes"
  echo
  hdr="| plaintext size |" sep="|--:|"
  for t0 in "${mounted[@]}"; do hdr+=" $t0 raw | $t0 du |"; sep+="--:|--:|"; done
  echo "$hdr"; echo "$sep"
  for s in "${sizes[@]}"; do
    row="| $s |"
    for t0 in "${mounted[@]}"; do
      row+=" $(awk -v s="$s" -v a="${raw[$t0,$s]}" -v p="${raw[plain,$s]:-0}" -v k="${alloc[$t0,$s]}" -v n="$n_files_per_size" \
        'BEGIN { printf "%.0f | %.0f |", s + (a - p) / n, k / n }')"
    done
    echo "$row"
  done
} > "$out/notes.md"
echo "encfs: wrote $out" >&2
