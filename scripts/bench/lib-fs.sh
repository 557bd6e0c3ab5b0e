# shellcheck shell=bash disable=SC2034,SC2154  # globals shared with the caller
# The overlay file-system tests (the EncFS/eCryptfs report's tests), shared by
# scripts/bench-fs.sh (a Markdown table on stdout) and scripts/bench/encfs.sh (the
# `cryptkeep bench encfs` report). Sourced, not run; the caller has `set -euo pipefail`.
#
# On one work dir (a tmpfs, or with backing=DIR a dir made in DIR), each target is mounted
# once and then, per repetition, fs_rep runs:
#   swrite   dd if=/dev/zero bs=4k count=... conv=fdatasync ($fs_stream_mib MiB in 4 KiB writes) [MiB/s]
#   sread    drop_caches, then dd bs=4k of that file to /dev/null                      [MiB/s]
#   extract  tar -xf of a Linux source tree (Debian's linux-source, pre-decompressed)  [s]
#   disk     du -sb of the backing (cipher) dir after extract                          [bytes]
#   disk_alloc  du -s --block-size=1 of it: the space allocated (what `du` shows)      [bytes]
#   du       drop_caches, then du -s of the tree                                       [s]
#   rsync    rsync -an tree/ elsewhere/ (dry run: mostly stat())                       [s]
#   delete   rm -rf of the tree, sync                                                  [s]
# and reports each value through the caller's `fs_record TARGET KEY VALUE`.
#
# Targets:
#   plain      the backing file system itself
#   bindfs     bindfs --multithreaded passthrough (unencrypted FUSE)
#   gocryptfs  gocryptfs -scryptn 10, default options
#   securefs   securefs, its default format (argon2id, --rounds 1)
#   encfs      EncFS --standard, password on stdin
#   cryfs      CryFS, its default cipher and block size, CRYFS_FRONTEND=noninteractive
#   ecryptfs   the kernel's eCryptfs (mount -t ecryptfs, AES-128, encrypted names, as the
#              EncFS/eCryptfs report mounted it); needs the module and ecryptfs-utils
#   cryptkeep  cryptkeep fs, --scryptn 10 (FUSE over io_uring when the kernel offers it)
#   cryptkeep-devfuse  the same with `fs mount --no-io-uring` (requests read from /dev/fuse)
#   cryptkeep-keep     the same with `fs mount --keep` (keys and crypto in the keep process)
#   cryptkeep-base     cryptkeep fs of the binary in CK_BASE (an earlier build)
#
# Globals the caller sets: ck (the cryptkeep binary), backing (a dir, or empty).
# Globals this file sets: w (work dir), t (where backing dirs go), tardir, store (the
# backing store, "fstype on device"), transport, pw, src_xz, nfiles, plain_bytes,
# plain_alloc, and the maps mnt[T] (where T's tests run), back[T] (its backing dir),
# ver[T] (its version and options).

. "$(dirname "${BASH_SOURCE[0]}")/lib-load.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib-stats.sh"
declare -A mnt back ver fs_pids
fs_stream_mib=100
pw=bench-password
w=

# The command a target needs, and the Debian package that has it.
fs_tool() {
  case $1 in
    bindfs|gocryptfs|securefs|encfs|cryfs) echo "$1";;
    ecryptfs) echo mount.ecryptfs;;
    *) echo true;;
  esac
}
fs_package() {
  case $1 in
    ecryptfs) echo ecryptfs-utils;;
    *) echo "$1";;
  esac
}

# The newest linux-source tarball, or nothing.
fs_find_src() { ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n1; }

# Make the work dir and its tmpfs. Sets w, t, tardir, store, transport.
fs_setup() {
  if [ -n "$backing" ]; then
    [ -d "$backing" ] || { echo "--backing $backing is not a directory" >&2; return 1; }
    w=$(mktemp -d "$(cd "$backing" && pwd)/ck-bfs.XXXXXX")
  else
    w=$(mktemp -d "${TMPDIR:-/tmp}/ck-bfs.XXXXXX")
  fi
  export CRYPTKEEP_RUN_DIR=$w/run
  mkdir -p "$w/tmpfs" "$w/run" "$w/home"
  mount -t tmpfs -o size=90% tmpfs "$w/tmpfs"
  # tardir: the tar; t: where the backing dirs go (the tmpfs, or the work dir on --backing)
  tardir=$w/tmpfs t=$w/tmpfs
  if [ -n "$backing" ]; then t=$w/back; mkdir -p "$t"; fi
  store="$(findmnt -n -o FSTYPE,SOURCE --target "$t" | awk '{print $1 " on " $2}')"
  local uring_param=/sys/module/fuse/parameters/enable_uring
  if [ -w "$uring_param" ]; then echo Y > "$uring_param"; fi
  transport=/dev/fuse
  [ "$(cat "$uring_param" 2>/dev/null)" = Y ] && transport="FUSE over io_uring"
  printf '%s\n' "$pw" > "$w/pass"
}

# Unmount everything under the work dir, end the daemons the mounts left, remove it.
fs_cleanup() {
  set +e
  bench_load_stop
  [ -n "$w" ] && [ -d "$w" ] || return 0
  local m p i
  for m in $(awk -v w="$w" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do
    [ "$m" = "$w/tmpfs" ] && continue
    fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  # The daemons exit once unmounted; give them a moment, then end the ones left, by id.
  for i in $(seq 50); do
    local alive=0
    for p in "${fs_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${fs_pids[@]}"; do kill -0 "$p" 2>/dev/null && kill "$p" 2>/dev/null; done
  for p in "${fs_pids[@]}"; do kill -0 "$p" 2>/dev/null && { sleep 0.5; kill -9 "$p" 2>/dev/null; }; done
  fs_pids=()
  [ -n "${fs_ecryptfs_sigs:-}" ] && for p in $fs_ecryptfs_sigs; do
    keyctl search @u user "$p" >/dev/null 2>&1 && keyctl unlink "$(keyctl search @u user "$p")" @u >/dev/null 2>&1
  done
  mountpoint -q "$w/tmpfs" && umount -l "$w/tmpfs"
  rm -rf "$w"
  w=
}

# The tar to extract, decompressed once outside the targets (xz stays out of the timing):
# the whole tree, or with N > 0 its first N entries. Sets src_xz, nfiles.
fs_prepare_tar() {
  local n=${1:-0}
  src_xz=$(fs_find_src)
  [ -n "$src_xz" ] || { echo "no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)" >&2; return 1; }
  echo "decompressing $src_xz${n:+ (first $n entries)}" >&2
  if [ "$n" -gt 0 ]; then
    python3 -c '
import sys, tarfile
n = int(sys.argv[3])
with tarfile.open(sys.argv[1], "r|xz") as src, tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT) as dst:
    for i, m in enumerate(src):
        if i == n: break
        dst.addfile(m, src.extractfile(m) if m.isreg() else None)
' "$src_xz" "$tardir/src.tar" "$n"
  else
    xz -dc "$src_xz" > "$tardir/src.tar"
  fi
  nfiles=$(tar -tf "$tardir/src.tar" | wc -l)
}

# Record the daemons serving a mount (their command lines name its unique paths), with
# their children (the keep), so that fs_cleanup can end any left behind.
fs_track() {
  local p c re
  re=$(printf '%s' "$1" | sed 's/[][\.*^$+?(){}|]/\\&/g')
  for p in $(pgrep -f -- "$re" 2>/dev/null); do
    [ "$p" = $$ ] && continue
    fs_pids+=([$p]=$p)
    for c in $(pgrep -P "$p" 2>/dev/null); do fs_pids+=([$c]=$c); done
  done
}

fs_pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'; }

# Create and mount TARGET. Sets mnt, back, ver. Returns non-zero (with the reason on stderr)
# when it cannot: the caller decides whether that ends the run.
fs_mount() {
  local target=$1 m=$w/mnt-$1 b=$t/back-$1
  mkdir -p "$m" "$b" || return 1
  case $target in
    plain) rmdir "$m"; m=$b; ver[$target]="$store ($(uname -r))";;
    bindfs)
      bindfs --multithreaded "$b" "$m" || return 1
      ver[$target]="bindfs $(fs_pkgver bindfs), --multithreaded";;
    gocryptfs)
      gocryptfs -q -init -scryptn 10 -passfile "$w/pass" "$b" >/dev/null || return 1
      gocryptfs -q -nosyslog -passfile "$w/pass" "$b" "$m" || return 1
      ver[$target]="gocryptfs $(fs_pkgver gocryptfs), -scryptn 10, defaults";;
    cryptkeep|cryptkeep-keep|cryptkeep-devfuse|cryptkeep-base|cryptkeep-base-keep)
      local keep_args=() bin=$ck via=$transport
      [[ "$target" = *-keep ]] && keep_args=(--keep)
      [ "$target" = cryptkeep-devfuse ] && { keep_args=(--no-io-uring); via=/dev/fuse; }
      if [[ "$target" = cryptkeep-base* ]]; then
        bin=${CK_BASE:-}
        [ -x "$bin" ] || { echo "cryptkeep-base needs CK_BASE=path/to/an/earlier/cryptkeep" >&2; return 1; }
      fi
      "$bin" fs init "$b" --scryptn 10 --passfile "$w/pass" </dev/null >/dev/null || return 1
      "$bin" fs mount "$b" "$m" --passfile "$w/pass" "${keep_args[@]}" </dev/null >/dev/null || return 1
      ver[$target]="$("$bin" --version) ($bin), --scryptn 10${keep_args[*]:+ ${keep_args[*]}} ($via)";;
    securefs)
      # one round of argon2id: the key derivation is not what is measured (as -scryptn 10)
      securefs create "$b" --pass "$pw" --rounds 1 >/dev/null 2>&1 </dev/null || return 1
      securefs mount -b --log "$w/securefs.log" "$b" "$m" --pass "$pw" >/dev/null 2>&1 </dev/null || return 1
      local fmt
      fmt=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version","?"))' \
        "$(ls "$b"/.securefs.json "$b"/.config.json 2>/dev/null | head -n1)" 2>/dev/null || echo '?')
      ver[$target]="securefs $(fs_pkgver securefs), default format $fmt (argon2id, --rounds 1)";;
    encfs)
      printf '%s\n' "$pw" | encfs --standard --stdinpass "$b" "$m" >/dev/null 2>&1 || return 1
      ver[$target]="encfs $(fs_pkgver encfs), --standard (AES-192, encrypted names)";;
    cryfs)
      # A new file system in an empty basedir, the defaults, password on stdin; its
      # local state (~/.local/share/cryfs) goes into the work dir.
      printf '%s\n' "$pw" | HOME=$w/home CRYFS_FRONTEND=noninteractive CRYFS_NO_UPDATE_CHECK=true \
        cryfs "$b" "$m" >/dev/null 2>&1 || return 1
      local cipher
      cipher=$(cryfs --help 2>&1 | tr -s ' \n' ' ' | grep -o -- '--cipher arg.*' | grep -o 'Default: [a-z0-9-]*' | head -n1 | cut -d' ' -f2)
      ver[$target]="cryfs $(fs_pkgver cryfs), defaults (${cipher:-default cipher}, 16 KiB blocks)";;
    ecryptfs)
      # As the EncFS/eCryptfs report mounted it: AES with a 128-bit key, encrypted names.
      grep -qw ecryptfs /proc/filesystems || modprobe ecryptfs 2>/dev/null || return 1
      local sig
      sig=$(printf '%s' "$pw" | ecryptfs-add-passphrase --fnek - 2>/dev/null \
        | sed -n 's/.*sig \[\([0-9a-f]*\)\].*/\1/p' | tail -n1)
      [ -n "$sig" ] || { echo "ecryptfs-add-passphrase gave no signature" >&2; return 1; }
      fs_ecryptfs_sigs="${fs_ecryptfs_sigs:-} $sig"
      mount -t ecryptfs "$b" "$m" -o "key=passphrase:passphrase_passwd=$pw,ecryptfs_cipher=aes,ecryptfs_key_bytes=16,ecryptfs_passthrough=no,ecryptfs_enable_filename_crypto=yes,ecryptfs_fnek_sig=$sig,ecryptfs_unlink_sigs,no_sig_cache" \
        </dev/null >/dev/null || return 1
      ver[$target]="eCryptfs ($(uname -r)), ecryptfs-utils $(fs_pkgver ecryptfs-utils), AES-128, encrypted names";;
    *) echo "unknown target $target" >&2; return 1;;
  esac
  if [ "$target" != plain ]; then
    local i
    for i in $(seq 100); do mountpoint -q "$m" && break; sleep 0.1; done
    fs_track "$m"; fs_track "$b"
    mountpoint -q "$m" || { echo "$target did not mount" >&2; return 1; }
  fi
  mnt[$target]=$m; back[$target]=$b
}

fs_now() { date +%s.%N; }
fs_drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fs_secs() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.4f\n", e - s }'; }
fs_mibs() { awk -v s="$1" -v e="$2" -v n="$fs_stream_mib" 'BEGIN { printf "%.2f\n", n / (e - s) }'; }

# Fails when TARGET's file system is no longer mounted (its daemon died or unmounted):
# the tests would run on the empty directory beneath.
fs_alive() {
  [ "$1" = plain ] || mountpoint -q "${mnt[$1]}" || { echo "$1 is no longer mounted" >&2; return 1; }
}

# One repetition of the tests on TARGET; each value goes to `fs_record TARGET KEY VALUE`.
fs_rep() {
  local target=$1 m=${mnt[$1]} s e
  fs_alive "$target"
  s=$(fs_now); dd if=/dev/zero of="$m/stream" bs=4k count=$((fs_stream_mib * 256)) conv=fdatasync status=none; e=$(fs_now)
  fs_record "$target" swrite "$(fs_mibs "$s" "$e")"
  fs_drop
  s=$(fs_now); dd if="$m/stream" of=/dev/null bs=4k status=none; e=$(fs_now)
  fs_record "$target" sread "$(fs_mibs "$s" "$e")"
  rm -f "$m/stream"
  mkdir -p "$m/tree"; sync
  s=$(fs_now); tar -xf "$tardir/src.tar" -C "$m/tree"; sync; e=$(fs_now)
  fs_record "$target" extract "$(fs_secs "$s" "$e")"
  fs_settle "$target"
  fs_record "$target" disk "$(du -sb "${back[$target]}" | cut -f1)"
  fs_record "$target" disk_alloc "$(du -s --block-size=1 "${back[$target]}" | cut -f1)"
  fs_drop
  s=$(fs_now); du -s "$m/tree" >/dev/null; e=$(fs_now)
  fs_record "$target" du "$(fs_secs "$s" "$e")"
  rm -rf "$w/elsewhere"; mkdir -p "$w/elsewhere"
  s=$(fs_now); rsync -an "$m/tree/" "$w/elsewhere/"; e=$(fs_now)
  fs_record "$target" rsync "$(fs_secs "$s" "$e")"
  s=$(fs_now); rm -rf "$m/tree"; sync; e=$(fs_now)
  fs_alive "$target"
  fs_record "$target" delete "$(fs_secs "$s" "$e")"
  fs_settle "$target"
}

# The plain tree's size on the backing store, for the on-disk overhead: sets plain_bytes
# (du -sb) and plain_alloc (du -s --block-size=1).
fs_plain_size() {
  mkdir -p "$t/ref"
  tar -xf "$tardir/src.tar" -C "$t/ref"; sync
  plain_bytes=$(du -sb "$t/ref" | cut -f1)
  plain_alloc=$(du -s --block-size=1 "$t/ref" | cut -f1)
  rm -rf "$t/ref"
}

# Wait until what TARGET stores has reached its backing dir. CryFS keeps written blocks in
# a cache and writes them out within a second (sync does not reach it): its backing dir
# is taken as settled once it has not changed for 1.2 s (waiting at most 30 s). The
# others write through.
fs_settle() {
  sync
  [ "$1" = cryfs ] || return 0
  local b=${back[$1]} a0 a1 i
  a0=$(du -sb "$b" | cut -f1)
  for i in $(seq 25); do
    sleep 1.2; sync; a1=$(du -sb "$b" | cut -f1)
    [ "$a1" = "$a0" ] && return 0
    a0=$a1
  done
  echo "$1: the backing dir still changes after 30 s" >&2
}

# What N files of each SIZE, in a new directory per size on TARGET, add to its backing
# dir: prints one line "SIZE APPARENT ALLOCATED" per size, in bytes (the deltas of du -sb
# and du -s --block-size=1), then removes them.
fs_files_cost() {
  local target=$1 n=$2 m=${mnt[$1]} b=${back[$1]} size a0 a1 k0 k1
  shift 2
  fs_alive "$target"
  fs_settle "$target"
  a0=$(du -sb "$b" | cut -f1); k0=$(du -s --block-size=1 "$b" | cut -f1)
  for size in "$@"; do
    python3 -c '
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.mkdir(d)
data = os.urandom(size)
for i in range(n):
    with open(os.path.join(d, f"file-with-a-name-of-this-length-{i}"), "wb") as f:
        f.write(data)
' "$m/files-$size" "$n" "$size"
    fs_settle "$target"
    a1=$(du -sb "$b" | cut -f1); k1=$(du -s --block-size=1 "$b" | cut -f1)
    echo "$size $((a1 - a0)) $((k1 - k0))"
    a0=$a1 k0=$k1
  done
  for size in "$@"; do rm -rf "${m:?}/files-$size"; done
  fs_alive "$target"
  fs_settle "$target"
}
