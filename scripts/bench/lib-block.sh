# Shared by the block-device benchmarks (scripts/bench-block.sh, scripts/bench/tresor.sh,
# scripts/bench/caam.sh); source it, do not run it.
#
# It gives them one work directory (on a fresh tmpfs, or with a backing directory on the
# file system that holds it: a disk), the block targets the benchmarks compare, each a
# loop device:
#   blk_plain_loop   a plain image file, direct-I/O loop (what the backing store gives)
#   blk_bindfs       a plain file through a multithreaded bindfs FUSE passthrough, direct-I/O loop
#   blk_gocryptfs    a file inside a gocryptfs mount, loop device
#   blk_cryptkeep    `cryptkeep format` + `cryptkeep open` (its FUSE file and direct-I/O loop)
#   blk_qsd_luks     a LUKS image opened by qemu-storage-daemon's luks driver and exported
#                    as a FUSE file, direct-I/O loop
# the measurements they share (fio, hdparm, dd's own timing), and one cleanup, run on
# exit, Ctrl-C or SIGTERM, that leaves no mount, loop device or daemon of the run behind.
#
# The daemons (FUSE servers, cryptkeep's I/O daemon, qemu-storage-daemon) start with file
# descriptor 3 closed: a report script's progress stream (see rep_init) must end when the
# script does.
#
# Each blk_* setup function sets blk_dev to the device it made and returns non-zero if it
# could not (also where errexit is off, as in `if blk_bindfs ...`). Messages go to stderr.
#
# Cleanup works from what is on the system, not only from what the script noted: every
# mount under the work directory, every loop device whose backing file is under it, every
# cryptkeep volume in its run directory, so that an interrupt between a setup step and its
# bookkeeping leaves nothing behind either.

. "$(dirname "${BASH_SOURCE[0]}")/lib-load.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib-stats.sh"
blk_name=${blk_name:-bench}        # prefix of messages
blk_ck=${blk_ck:-}                 # the cryptkeep binary
blk_fio_time_based=${blk_fio_time_based:-} # non-empty: fio runs for its whole RUNTIME_S
blk_w=                             # the work directory
blk_store=                         # where the image files go (the tmpfs or a directory on the backing store)
blk_store_desc=                    # "FSTYPE on SOURCE" of the backing store
blk_backing=                       # the --backing directory, empty for a tmpfs
blk_dev=                           # the device the last blk_* setup function made
blk_ck_volumes=()                  # "BINARY NAME" of every cryptkeep volume opened
blk_qsd_pids=()                    # qemu-storage-daemon processes started
blk_loops=()                       # loop devices attached (not cryptkeep's own)

blk_log() { echo "$blk_name: $*" >&2; }
blk_die() { blk_log "$*"; exit 1; }

# blk_init BACKING_DIR TMPFS_MiB: make the work directory and the image store, and install
# the cleanup. An empty BACKING_DIR means a tmpfs of TMPFS_MiB mounted in a directory made
# under TMPDIR (default /tmp).
blk_init() {
  blk_backing=$1
  local tmpfs_mib=$2
  if [ -n "$blk_backing" ]; then
    [ -d "$blk_backing" ] || blk_die "--backing $blk_backing is not a directory"
    blk_w=$(mktemp -d "$(realpath "$blk_backing")/ck-bench.XXXXXX")
  else
    blk_w=$(mktemp -d "${TMPDIR:-/tmp}/ck-bench.XXXXXX")
  fi
  blk_w=$(realpath "$blk_w")
  trap blk_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  export CRYPTKEEP_RUN_DIR=$blk_w/run
  mkdir -p "$blk_w/run"
  if [ -n "$blk_backing" ]; then
    blk_store=$blk_w/back
    mkdir -p "$blk_store"
  else
    blk_store=$blk_w/tmpfs
    mkdir -p "$blk_store"
    mount -t tmpfs -o "size=${tmpfs_mib}M" tmpfs "$blk_store"
  fi
  blk_store_desc="$(findmnt -n -o FSTYPE,SOURCE --target "$blk_store" | awk '{print $1 " on " $2}')"
  blk_log "work directory $blk_w; image files on $blk_store_desc"
}

# The mounts under the work directory, deepest first.
blk_mounts_under_work() {
  findmnt -rn -o TARGET | awk -v w="$blk_w/" 'index($0, w) == 1' | sort -r
}

blk_cleanup() {
  local rc=$?
  trap '' INT TERM HUP
  set +e
  [ -n "$blk_w" ] && [ -d "$blk_w" ] || return $rc
  local m fstype v bin name dev file pid i
  # 0. the CPU load, so the clean-up runs at full speed
  bench_load_stop
  # 1. file systems mounted on the test devices (not the FUSE mounts under the devices)
  for m in $(blk_mounts_under_work); do
    fstype=$(findmnt -n -o FSTYPE --mountpoint "$m")
    case $fstype in fuse*|tmpfs) ;; *) umount "$m" 2>/dev/null || umount -l "$m";; esac
  done
  # 2. cryptkeep volumes: the ones opened, then any other in the run directory
  for v in "${blk_ck_volumes[@]}"; do
    read -r bin name <<< "$v"
    "$bin" close "$name" >/dev/null 2>&1
  done
  for v in "$blk_w"/run/*/; do
    [ -d "$v" ] || continue
    name=$(basename "$v")
    [ -n "$blk_ck" ] && "$blk_ck" close "$name" >/dev/null 2>&1
  done
  # 3. loop devices: the ones attached (a loop over a FUSE file whose daemon has gone
  # shows "/" as its backing file), then any other over a file of the run
  for dev in "${blk_loops[@]}"; do losetup -d "$dev" 2>/dev/null; done
  while read -r dev file; do
    [[ $file == "$blk_w"/* ]] && losetup -d "$dev" 2>/dev/null
  done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null)
  # 4. qemu-storage-daemon, nbdkit, nbdfuse
  for pid in "${blk_qsd_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${blk_qsd_pids[@]}"; do
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # 5. the FUSE mounts (bindfs, gocryptfs, exports), then the tmpfs
  for m in $(blk_mounts_under_work); do
    fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m"
  done
  if [ -n "$(blk_mounts_under_work)" ]; then
    blk_log "cleanup: still mounted under $blk_w: $(blk_mounts_under_work | tr '\n' ' ') (left in place)"
  else
    rm -rf --one-file-system "$blk_w"
  fi
  return $rc
}

blk_drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# blk_attach FILE [DIRECT]: a loop device over FILE (direct I/O unless DIRECT=off; 4096-byte
# sectors), falling back to buffered I/O where the file refuses O_DIRECT.
blk_attach() {
  local file=$1 direct=${2:-on}
  if [ "$direct" = on ]; then
    blk_dev=$(losetup --direct-io=on --sector-size 4096 -f --show "$file" 2>/dev/null) ||
      blk_dev=$(losetup --sector-size 4096 -f --show "$file")
  else
    blk_dev=$(losetup --sector-size 4096 -f --show "$file")
  fi && blk_loops+=("$blk_dev")
}

# blk_allocate FILE: allocates every block of FILE (its size unchanged, its content zeros
# where it had none), then writes the file over itself once (its content unchanged) and
# syncs it, so the first timed write does not pay for the backing store's allocation and
# later runs do not skip it. fallocate alone is not enough: a tmpfs page it allocated, or
# an ext4 extent it left unwritten, is slow to write the first time (on a tmpfs, a first
# pass of 1 MiB writes over a fallocated 1 GiB file ran at 0.55 GB/s, the next at 6.7 GB/s).
blk_allocate() {
  fallocate -l "$(stat -c %s "$1")" "$1" 2>/dev/null || true
  dd if="$1" of="$1" bs=1M conv=notrunc,fsync status=none
}

# blk_plain_loop NAME SIZE_MiB
blk_plain_loop() {
  mkdir -p "$blk_store/$1" && truncate -s "$2M" "$blk_store/$1/file" &&
    blk_allocate "$blk_store/$1/file" && blk_attach "$blk_store/$1/file"
}

# blk_bindfs NAME SIZE_MiB
blk_bindfs() {
  mkdir -p "$blk_store/$1" "$blk_w/$1" && truncate -s "$2M" "$blk_store/$1/file" &&
    blk_allocate "$blk_store/$1/file" &&
    bindfs --multithreaded "$blk_store/$1" "$blk_w/$1" 3>&- && blk_attach "$blk_w/$1/file"
}

# blk_gocryptfs NAME SIZE_MiB PASSFILE
blk_gocryptfs() {
  mkdir -p "$blk_store/$1" "$blk_w/$1" &&
    gocryptfs -q -init -scryptn 10 -passfile "$3" "$blk_store/$1" >/dev/null &&
    gocryptfs -q -nosyslog -passfile "$3" "$blk_store/$1" "$blk_w/$1" 3>&- &&
    truncate -s "$2M" "$blk_w/$1/file" && blk_attach "$blk_w/$1/file"
}

# blk_cryptkeep_format IMAGE SIZE_MiB PASSFILE [FORMAT_ARGS...]: a volume with SIZE_MiB of
# data (plus room for the header), with a cheap keyslot (the unlock is not measured).
blk_cryptkeep_format() {
  local image=$1 size=$2 pass=$3; shift 3
  "$blk_ck" format "$image" --size $((size + 16))M --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
    --key-file "$pass" --batch-mode "$@" >/dev/null && blk_allocate "$image"
}

# blk_cryptkeep_open IMAGE NAME PASSFILE [OPEN_ARGS...] (BIN=another cryptkeep binary)
blk_cryptkeep_open() {
  local image=$1 name=$2 pass=$3 bin=${BIN:-$blk_ck}; shift 3
  blk_ck_volumes+=("$bin $name")
  blk_dev=$("$bin" open "$image" "$name" --key-file "$pass" "$@" 3>&-)
}

# blk_cryptkeep NAME SIZE_MiB PASSFILE [FORMAT_ARGS...] [-- OPEN_ARGS...]: format and open
# a volume NAME.img in the image store.
blk_cryptkeep() {
  local name=$1 size=$2 pass=$3; shift 3
  local format_args=() open_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do format_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  open_args=("$@")
  blk_cryptkeep_format "$blk_store/$name.img" "$size" "$pass" "${format_args[@]}" &&
    blk_cryptkeep_open "$blk_store/$name.img" "$name" "$pass" "${open_args[@]}"
}

# blk_qsd_luks NAME IMAGE PASSFILE: qemu-storage-daemon opens the LUKS image IMAGE with
# its luks block driver and exports the plaintext as a FUSE file; a direct-I/O loop device
# (512-byte sectors, as LUKS1's) over that file. The daemon runs in this script's process
# group, so a signal to the group reaches it too.
blk_qsd_luks() {
  local name=$1 image=$2 pass=$3 export_file=$blk_w/$1.export i
  : > "$export_file"
  qemu-storage-daemon \
    --object "secret,id=${name}-key,file=$pass" \
    --blockdev "driver=file,node-name=${name}-file,filename=$image" \
    --blockdev "driver=luks,node-name=${name}-luks,file=${name}-file,key-secret=${name}-key" \
    --export "type=fuse,id=${name}-export,node-name=${name}-luks,mountpoint=$export_file,writable=on" \
    >&2 3>&- &
  blk_qsd_pids+=($!)
  for i in $(seq 100); do
    mountpoint -q "$export_file" && break
    kill -0 "${blk_qsd_pids[-1]}" 2>/dev/null || { blk_log "qemu-storage-daemon exited before exporting $image"; return 1; }
    sleep 0.1
  done
  mountpoint -q "$export_file" || { blk_log "qemu-storage-daemon did not export $image within 10 s"; return 1; }
  { blk_dev=$(losetup --direct-io=on -f --show "$export_file" 2>/dev/null) ||
    blk_dev=$(losetup -f --show "$export_file"); } && blk_loops+=("$blk_dev")
}

# blk_nbdkit_luks NAME IMAGE PASS: nbdkit's luks filter over IMAGE (file plugin) on a unix
# socket, reached through nbdfuse (libnbd's FUSE client, its default connections); a
# direct-I/O loop device over nbdfuse's file in blk_dev. nbdkit runs the image's KDF once per
# connection.
blk_nbdkit_luks() {
  local name=$1 image=$2 pass=$3 sock=$blk_w/$1.sock mnt=$blk_w/$1.nbdfuse i
  local uri="nbd+unix:///?socket=$sock"
  nbdkit -f -U "$sock" --filter=luks file "$image" passphrase="+$pass" >&2 3>&- &
  blk_qsd_pids+=($!)
  for i in $(seq 100); do nbdinfo --size "$uri" >/dev/null 2>&1 && break; sleep 0.1; done
  nbdinfo --size "$uri" >/dev/null 2>&1 || { blk_log "nbdkit did not serve $image within 10 s"; return 1; }
  mkdir -p "$mnt"
  nbdfuse "$mnt" "$uri" >&2 3>&- &
  blk_qsd_pids+=($!)
  for i in $(seq 300); do [ -f "$mnt/nbd" ] && break; sleep 0.1; done
  [ -f "$mnt/nbd" ] || { blk_log "nbdfuse did not show nbdkit's export of $image within 30 s"; return 1; }
  blk_attach "$mnt/nbd"
}

# blk_wait CMD...: runs CMD in the background and waits for it. A SIGINT, SIGTERM or SIGHUP
# meanwhile is passed on to CMD and waited out before this shell exits. The measurements run
# inside command substitutions, whose subshell would otherwise die at once and leave CMD
# running on a device that the clean-up then tears down under it.
blk_wait() {
  "$@" &
  local p=$!
  trap "kill -TERM $p 2>/dev/null; wait $p; exit 130" INT
  trap "kill -TERM $p 2>/dev/null; wait $p; exit 143" TERM
  trap "kill -TERM $p 2>/dev/null; wait $p; exit 129" HUP
  local rc=0
  wait $p || rc=$?
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  return $rc
}

# blk_fio DEV read|write|randread|randwrite SIZE_MiB RUNTIME_S [durable]: read and write are
# sequential 1 MiB blocks, randread and randwrite random 4 KiB blocks; iodepth 64, libaio,
# direct, two jobs on the two halves of the device; prints MiB/s. With "durable", a write
# ends with an fsync of the device that the time includes (--end_fsync=1): what a target
# kept in a page cache below the device must then reach the disk within the time.
# By default fio stops after one pass over the device (well under a second on a tmpfs for
# 1 MiB blocks); with blk_fio_time_based set it goes over it again until RUNTIME_S have
# passed, which averages out a busy machine's swings. A random test always stops at
# RUNTIME_S (a pass of 4 KiB requests takes far longer than one of 1 MiB ones).
blk_fio() {
  local durable=() timed=() bs=1M dir=$2 out=$blk_w/fio.$BASHPID.json
  case $2 in
    randread|randwrite) bs=4k dir=${2#rand}; timed=(--time_based --randrepeat=0);;
    read|write) [ -n "$blk_fio_time_based" ] && timed=(--time_based);;
    *) blk_die "blk_fio: unknown test $2";;
  esac
  [ "${5:-}" = durable ] && [ "$dir" = write ] && durable=(--end_fsync=1)
  blk_wait fio --name=b --filename="$1" --rw="$2" --bs=$bs --iodepth=64 --ioengine=libaio --direct=1 \
    --numjobs=2 --offset_increment=$(($3 / 2))M --size=$(($3 / 2))M --runtime="$4" --group_reporting \
    "${timed[@]}" "${durable[@]}" --output-format=json --output="$out" 2>/dev/null >/dev/null ||
    { rm -f "$out"; return 1; }
  python3 -c "import json, sys; print(round(json.load(sys.stdin)['jobs'][0]['$dir']['bw_bytes'] / 1048576, 2))" < "$out"
  rm -f "$out"
}

# blk_hdparm -t|-T DEV: hdparm's timing of buffered device reads (-t, the caches flushed
# first) or of reads from the buffer cache (-T); prints hdparm's figure in its MB/s (2^20 bytes).
blk_hdparm() {
  local out=$blk_w/hdparm.$BASHPID.txt
  blk_wait env LC_ALL=C hdparm "$1" "$2" > "$out"
  awk '/Timing/ {
    v = $(NF-1); u = $NF
    if (u ~ /^kB/) v /= 1024; else if (u ~ /^GB/) v *= 1024
    print v }' "$out"
  rm -f "$out"
}

# blk_dd_rate DD_ARGS...: runs dd and prints its rate from dd's own count and time, in
# MB/s (10^6 bytes, as dd reports).
blk_dd_rate() {
  local out=$blk_w/dd.$BASHPID.txt
  blk_wait env LC_ALL=C dd "$@" 2> "$out" >/dev/null
  awk '/bytes .* copied/ {
    s = $0; sub(/.*copied, /, "", s); split(s, t, " ")
    if (t[1] > 0) printf "%.2f\n", $1 / t[1] / 1e6 }' "$out"
  rm -f "$out"
}

# blk_positive VALUE: is VALUE a positive decimal number?
blk_positive() { [[ $1 =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v v="$1" 'BEGIN { exit !(v > 0) }'; }

# ---------------------------------------------------------------------------------------
# The files a report script writes for `cryptkeep bench` (docs/design/bench.md): data.csv,
# targets.csv, metrics.csv, skipped.txt, and the `@step I N LABEL` progress lines, which
# go to file descriptor 3 (rep_init points it at stdout and stdout at stderr, so that
# nothing else a command prints reaches the driver's progress stream).

rep_report=; rep_out=; rep_step_i=0; rep_step_n=1
declare -A rep_unit=() rep_skipped=()

# rep_init REPORT OUT_DIR
rep_init() {
  rep_report=$1 rep_out=$2
  exec 3>&1 1>&2
  mkdir -p "$rep_out"
  echo "report,target,metric,rep,value,unit" > "$rep_out/data.csv"
  echo "target,role,label" > "$rep_out/targets.csv"
  echo "metric,label,unit,better,table,targets" > "$rep_out/metrics.csv"
  : > "$rep_out/skipped.txt"
}

# rep_target TARGET ROLE LABEL (role: ours, peer or baseline; in display order)
rep_target() { echo "$1,$2,$(rep_quote "$3")" >> "$rep_out/targets.csv"; }
# rep_quote TEXT: TEXT as one CSV field
rep_quote() { local q=\"; echo "\"${1//$q/$q$q}\""; }

# rep_pair OURS OTHER WHY: a like-for-like comparison (pairs.csv)
rep_pair() {
  [ -f "$rep_out/pairs.csv" ] || echo "ours,other,why" > "$rep_out/pairs.csv"
  echo "$1,$2,$(rep_quote "$3")" >> "$rep_out/pairs.csv"
}

# rep_metric METRIC LABEL UNIT BETTER TABLE TARGETS ("*" or space-separated targets)
rep_metric() {
  rep_unit[$1]=$3
  echo "$1,$(rep_quote "$2"),$3,$4,$5,$6" >> "$rep_out/metrics.csv"
}

# rep_skip TARGET WHY INSTALL_COMMAND
rep_skip() {
  rep_skipped[$1]=1
  echo "$1: $2; install: $3" >> "$rep_out/skipped.txt"
  blk_log "skipping $1: $2"
}
rep_is_skipped() { [ -n "${rep_skipped[$1]:-}" ]; }

# rep_value TARGET METRIC REP VALUE: one data.csv row; a value that is not a positive
# number is logged and left out (the driver then reports the missing row).
rep_value() {
  if blk_positive "$4"; then
    echo "$rep_report,$1,$2,$3,$4,${rep_unit[$2]}" >> "$rep_out/data.csv"
  else
    blk_log "no valid value for $1 $2 (rep $3): '${4}'"
  fi
}

rep_steps() { rep_step_n=$1; }
rep_step() { rep_step_i=$((rep_step_i + 1)); echo "@step $rep_step_i $rep_step_n $*" >&3; }

# rep_rotated OFFSET ITEMS...: ITEMS starting at index OFFSET mod count (one rep's order,
# so that no target is always the first or the last of a rep)
rep_rotated() {
  local off=$1; shift
  local items=("$@") n=$# i
  for ((i = 0; i < n; i++)); do echo "${items[(off + i) % n]}"; done
}
