#!/usr/bin/env bash
# The TresorSGX report, measured again: a disk cipher kept away from the kernel (in an
# enclave there, in cryptkeep's keep process here) against a plain partition and an
# in-kernel AES partition. The report timed
#   dd if=/dev/zero of=FILE bs=100M count=1 conv=fdatasync,notrunc   (on ext2 on the device)
#   hdparm -t DEVICE    (buffered device reads, caches flushed first)
#   hdparm -T DEVICE    (reads from the buffer cache)
# 24 times each and took the median. This script does the same on loop devices, plus fio
# sequential write and read in 1 MiB blocks, for these targets:
#   loop             a plain image file, direct-I/O loop                      (baseline)
#   bindfs           a plain file through a bindfs FUSE passthrough, loop     (baseline)
#   cryptkeep        `cryptkeep open` of a LUKS2 volume, the key in the keep process (ours)
#   cryptkeep-inline the same with --keep inline: the key in the I/O daemon     (ours)
#   gocryptfs        a file inside a gocryptfs mount, loop                    (peer)
#   cryptkeep-luks1  `cryptkeep open` of a LUKS1 image                        (ours)
#   qsd-luks         the same LUKS1 image through qemu-storage-daemon's luks driver,
#                    exported as a FUSE file, direct-I/O loop                 (peer)
#   nbdkit-luks      the same LUKS1 image through nbdkit's luks filter, reached over
#                    nbdfuse (libnbd's FUSE client), direct-I/O loop          (peer)
# The image files are on a fresh tmpfs (or, with --backing DIR, in a work directory made
# in DIR; there fio writes are timed until durable, --end_fsync=1). Every rep measures every
# target once, in an order rotated from rep to rep.
# Writes the files of docs/design/bench.md into --out DIR.
#
# usage: scripts/bench/tresor.sh --out DIR [--quick] [--reps N] [--backing DIR] [--size MiB]
#   --quick: 1 rep, 64 MiB devices, a 16 MB dd block, fio for at most 2 s
#   --reps N: reps (default 5)   --size MiB: device size (default 512)
# CK=PATH: the cryptkeep binary (default target/release/cryptkeep). Needs root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out='' quick=0 reps=5 size_mib=512 backing=''
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2;;
    --quick) quick=1; shift;;
    --reps) reps=$2; shift 2;;
    --backing) backing=$2; shift 2;;
    --size) size_mib=$2; shift 2;;
    *) echo "tresor: unknown argument $1" >&2; exit 1;;
  esac
done
[ -n "$out" ] || { echo "tresor: --out DIR is required" >&2; exit 1; }
if [ $quick = 1 ]; then reps=1 size_mib=64 dd_block=16M fio_runtime=2
else dd_block=100M fio_runtime=10; fi
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "tresor: $ck is not an executable: cargo build --release, or set CK" >&2; exit 1; }
for t in fio hdparm losetup mkfs.ext2 python3; do
  command -v $t >/dev/null || { echo "tresor: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
out=$(mkdir -p "$out" && cd "$out" && pwd)

blk_name=tresor blk_ck=$ck
. "$root/scripts/bench/lib-block.sh"
rep_init tresor "$out"

# ---- targets and metrics (display order)
targets=(loop bindfs cryptkeep cryptkeep-inline gocryptfs cryptkeep-luks1 qsd-luks nbdkit-luks)
rep_target loop baseline "plain loop device (image file on the backing store)"
rep_target bindfs baseline "bindfs FUSE passthrough + loop (no encryption)"
rep_target cryptkeep ours "cryptkeep LUKS2 (key in the keep process)"
rep_target cryptkeep-inline ours "cryptkeep LUKS2 --keep inline (key in the I/O daemon)"
rep_target gocryptfs peer "file in a gocryptfs mount + loop"
rep_target cryptkeep-luks1 ours "cryptkeep LUKS1"
rep_target qsd-luks peer "qemu-storage-daemon luks driver + FUSE export + loop (same LUKS1 image)"
rep_target nbdkit-luks peer "nbdkit luks filter + nbdfuse + loop (same LUKS1 image)"
rep_pair cryptkeep-luks1 qsd-luks "the same LUKS1 image, user space both"
rep_pair cryptkeep-luks1 nbdkit-luks "the same LUKS1 image, user space both"
rep_pair cryptkeep cryptkeep-inline "the keep process against the key in the I/O daemon"
rep_metric dd-write "dd bs=${dd_block} count=1 conv=fdatasync into a file on ext2" MB/s higher dd-hdparm '*'
rep_metric hdparm-t "hdparm -t (buffered device reads)" MiB/s higher dd-hdparm '*'
rep_metric hdparm-T "hdparm -T (reads from the buffer cache)" MiB/s higher dd-hdparm '*'
rep_metric fio-write "fio sequential write 1 MiB blocks" MiB/s higher fio-seq '*'
rep_metric fio-read "fio sequential read 1 MiB blocks" MiB/s higher fio-seq '*'

# ---- the peers that cannot run here
command -v bindfs >/dev/null || rep_skip bindfs "bindfs is not installed" "apt-get install bindfs"
command -v gocryptfs >/dev/null || rep_skip gocryptfs "gocryptfs is not installed" "apt-get install gocryptfs"
command -v qemu-storage-daemon >/dev/null ||
  rep_skip qsd-luks "qemu-storage-daemon is not installed" "apt-get install qemu-system-common"
command -v nbdkit >/dev/null && command -v nbdfuse >/dev/null ||
  rep_skip nbdkit-luks "nbdkit or nbdfuse is not installed" "apt-get install nbdkit libnbd-bin"

# ---- set-up
active=(); for t in "${targets[@]}"; do rep_is_skipped $t || active+=($t); done
rep_steps $((1 + reps * ${#active[@]} + quick))
rep_step "setting up ${#active[@]} devices of $size_mib MiB"
# every image file once, the LUKS1 one twice, and room for gocryptfs' overhead
blk_init "$backing" $((size_mib * 10 + 256))
pass=$blk_w/pass; printf 'bench' > "$pass"
declare -A dev=()
blk_plain_loop loop $size_mib; dev[loop]=$blk_dev
blk_cryptkeep cryptkeep $size_mib "$pass"; dev[cryptkeep]=$blk_dev
blk_cryptkeep cryptkeep-inline $size_mib "$pass" -- --keep inline; dev[cryptkeep-inline]=$blk_dev
# One LUKS1 image, three byte-identical copies so that cryptkeep, qemu-storage-daemon and
# nbdkit can each hold it open for the whole run.
blk_cryptkeep_format "$blk_store/luks1.img" $size_mib "$pass" --type luks1
cp --sparse=always "$blk_store/luks1.img" "$blk_store/luks1-qsd.img"
cp --sparse=always "$blk_store/luks1.img" "$blk_store/luks1-nbdkit.img"
blk_cryptkeep_open "$blk_store/luks1.img" cryptkeep-luks1 "$pass"; dev[cryptkeep-luks1]=$blk_dev
if ! rep_is_skipped bindfs; then
  if blk_bindfs bindfs $size_mib; then dev[bindfs]=$blk_dev
  else rep_skip bindfs "the bindfs mount failed (see log.txt)" "apt-get install bindfs fuse3"; fi
fi
if ! rep_is_skipped gocryptfs; then
  if blk_gocryptfs gocryptfs $size_mib "$pass"; then dev[gocryptfs]=$blk_dev
  else rep_skip gocryptfs "the gocryptfs mount failed (see log.txt)" "apt-get install gocryptfs fuse3"; fi
fi
if ! rep_is_skipped qsd-luks; then
  if blk_qsd_luks qsd-luks "$blk_store/luks1-qsd.img" "$pass"; then dev[qsd-luks]=$blk_dev
  else rep_skip qsd-luks "qemu-storage-daemon could not export the LUKS1 image over FUSE (see log.txt)" \
    "apt-get install qemu-system-common fuse3"; fi
fi
if ! rep_is_skipped nbdkit-luks; then
  if blk_nbdkit_luks nbdkit-luks "$blk_store/luks1-nbdkit.img" "$pass"; then dev[nbdkit-luks]=$blk_dev
  else rep_skip nbdkit-luks "nbdkit's luks filter could not be reached through nbdfuse (see log.txt)" \
    "apt-get install nbdkit libnbd-bin fuse3"; fi
fi
active=(); for t in "${targets[@]}"; do rep_is_skipped $t || active+=($t); done
rep_steps $((1 + reps * ${#active[@]} + quick))
for t in "${active[@]}"; do blk_log "$t: ${dev[$t]}"; done
blk_log "set up (${SECONDS} s)"

# ---- the measurements
dd_into_ext2() { # DEV: the report's timed dd, MB/s
  local m=$blk_w/mnt-dd rate
  mkfs.ext2 -q -F -E nodiscard "$1" && mkdir -p "$m" && mount "$1" "$m" || return 1
  # the report's file existed after its first run: write it once, time the overwrite
  dd if=/dev/zero of="$m/tempfile" bs=$dd_block count=1 conv=fdatasync,notrunc 2>/dev/null
  rate=$(blk_dd_rate if=/dev/zero of="$m/tempfile" bs=$dd_block count=1 conv=fdatasync,notrunc)
  umount "$m"
  echo "$rate"
}
measure() { # TARGET REP
  local t=$1 r=$2 d=${dev[$1]}
  rep_value $t fio-write $r "$(blk_fio "$d" write $size_mib $fio_runtime ${backing:+durable})"
  blk_drop_caches
  rep_value $t fio-read $r "$(blk_fio "$d" read $size_mib $fio_runtime)"
  rep_value $t dd-write $r "$(dd_into_ext2 "$d")"
  [ $quick = 1 ] && return
  blk_drop_caches
  rep_value $t hdparm-t $r "$(blk_hdparm -t "$d")"
  rep_value $t hdparm-T $r "$(blk_hdparm -T "$d")"
}
# hdparm sleeps 3 s before -t and spends ~7 s on -T, whatever the device: --quick, a test
# of the whole pipeline in well under two minutes, runs them on every device at once.
hdparm_every_device_at_once() {
  local t pids=()
  rep_step "hdparm -t and -T on every device at once"
  blk_drop_caches
  for t in "${active[@]}"; do blk_hdparm -t "${dev[$t]}" > "$blk_w/hdparm-t.$t" & pids+=($!); done
  wait "${pids[@]}"; pids=()
  for t in "${active[@]}"; do blk_hdparm -T "${dev[$t]}" > "$blk_w/hdparm-T.$t" & pids+=($!); done
  wait "${pids[@]}"
  for t in "${active[@]}"; do
    rep_value $t hdparm-t 1 "$(cat "$blk_w/hdparm-t.$t")"
    rep_value $t hdparm-T 1 "$(cat "$blk_w/hdparm-T.$t")"
  done
}
for r in $(seq 1 $reps); do
  for t in $(rep_rotated $((r - 1)) "${active[@]}"); do
    rep_step "rep $r/$reps: $t"
    measure $t $r
    blk_log "rep $r/$reps: $t measured (${SECONDS} s)"
  done
done
[ $quick = 1 ] && hdparm_every_device_at_once

# ---- the published tables and the conditions of this run
cat > "$out/published.md" <<'EOF'
## The TresorSGX report: hdparm and dd

Three partitions on one hard disk (Seagate ST1000LM024 HN-M) of a Dell Inspiron 7559
(Intel Core i7-6700HQ, 16 GiB, Ubuntu 15.10, Linux 4.4.7): plain, `cryptsetup create
--cipher aes --key-size 128` (the kernel's AES), and `--cipher tresorsgx --key-size 128`
(the cipher in an SGX enclave, reached from the kernel over Netlink through a user-space
daemon). ext2 on each; every test run 24 times, the median shown.

| Test Results in MB/s | Plain | AES | TresorSGX |
|------|-------|-----|-----------|
| dd 100mb block write | 107 | 104.5 | 1.1 |
| hdparm uncached read | 110.14 | 113.7 | 1.125 |
| hdparm cached read | 13289.53 | 12004.325 | 1576.69 |

Headline: "TresorSGX achieves about 1% of the read / write performance on disk and about
10% the read performance from the buffer cache." From the table, TresorSGX / Plain:

| test | TresorSGX / Plain | AES / Plain |
|---|---|---|
| dd 100mb block write | 1.1 / 107 = 1.0 % | 104.5 / 107 = 97.7 % |
| hdparm uncached read | 1.125 / 110.14 = 1.0 % | 113.7 / 110.14 = 103.2 % |
| hdparm cached read | 1576.69 / 13289.53 = 11.9 % | 12004.325 / 13289.53 = 90.3 % |

The report puts the cost in the path of every block: the kernel module sends it over
Netlink to the daemon, the daemon enters the enclave, the enclave encrypts it with AES-NI
and the block travels back; it expects SYS V message queues and shared memory to do much
better.
EOF

versions() {
  echo "- cryptkeep: $("$ck" --version)"
  echo "- fio: $(fio --version); hdparm: $(hdparm -V 2>&1 | head -1)"
  command -v bindfs >/dev/null && echo "- bindfs: $(bindfs --version 2>&1 | head -1)"
  command -v gocryptfs >/dev/null && echo "- gocryptfs: $(gocryptfs -version 2>&1 | head -1)"
  command -v qemu-storage-daemon >/dev/null && echo "- qemu-storage-daemon: $(qemu-storage-daemon --version | head -1)"
  command -v nbdkit >/dev/null && echo "- nbdkit: $(nbdkit --version 2>&1 | head -1); nbdfuse: $(nbdfuse --version 2>&1 | head -1)"
  echo "- kernel: $(uname -r)"
}
{
  cat <<EOF
## Conditions of this run

- $reps rep(s); every rep measures every target once, in an order rotated by one target
  from rep to rep; devices of $size_mib MiB; image files on $blk_store_desc$([ -n "$backing" ] && echo " (in $backing)").
- Per target and rep: fio sequential write then read (1 MiB blocks, libaio, iodepth 64,
  two jobs on the two halves of the device, O_DIRECT, at most $fio_runtime s each$([ -n "$backing" ] && echo "; on a
  disk each write ends with an fsync of the device inside its time (fio --end_fsync=1), so a
  target that writes its image through the page cache is timed until its data is on the disk,
  as the direct-I/O plain loop's is")); then
  \`mkfs.ext2 -E nodiscard\`, a mount, \`dd if=/dev/zero of=FILE bs=$dd_block count=1
  conv=fdatasync,notrunc\` once untimed and once timed (the report's 24 runs overwrote one
  file; the timed run here is such an overwrite), rate from dd's own byte count and time in
  MB/s (10^6 bytes/s, as dd and the report print it); then \`hdparm -t\` and \`hdparm -T\`
  (hdparm's MB are 2^20 bytes: the unit is MiB/s). Page caches dropped before the reads.
$([ $quick = 1 ] && echo "- --quick: a test of the pipeline, not a measurement: tiny devices, one rep, and
  hdparm run on every device at the same time.")
- cryptkeep and cryptkeep-inline: LUKS2, aes-xts-plain64, 512-bit key, 4096-byte sectors
  (cryptkeep's defaults for an image file), the loop device \`cryptkeep open\` makes.
- cryptkeep-luks1, qsd-luks and nbdkit-luks: one LUKS1 image (aes-xts-plain64, 512-bit
  key, sha256, 512-byte sectors) made by \`cryptkeep format --type luks1\`, copied byte for
  byte so that all three can stay open for the whole run; qemu-storage-daemon opens its
  copy with \`--blockdev driver=file\` and \`--blockdev driver=luks,key-secret=...\` and
  exports the plaintext with \`--export type=fuse\`; nbdkit serves its copy with
  \`--filter=luks file IMAGE\` on a unix socket, which nbdfuse (libnbd's FUSE client, in
  Debian's libnbd-bin) shows as a file; a direct-I/O loop device over each file.
- bindfs is a baseline, not a peer: it encrypts nothing. It is a FUSE file system passing
  the image file through (multithreaded) under a direct-I/O loop device: the same path
  as cryptkeep's (kernel loop -> FUSE -> user-space daemon -> image file) without the
  cipher, so the gap from loop to bindfs is what serving a block device from user space
  costs, and the gap from bindfs to cryptkeep is what the encryption and the keep cost.
- gocryptfs: a file in a gocryptfs mount (its file-content encryption, AES-256-GCM),
  under a loop device (direct I/O where gocryptfs takes O_DIRECT).
- The report's "AES" column (dm-crypt in the kernel) has no counterpart here: device-
  mapper is not used; its "TresorSGX" column corresponds to cryptkeep (the key outside
  the process serving the I/O). The report expected shared memory to do much better than
  its Netlink round trip per block; the keep is reached that way: the I/O daemon and the
  keep share a memory area with rings and a data slot, one request carries a whole FUSE
  request's sectors, and no system call or kernel copy is made per request.

## Versions

EOF
  versions
} > "$out/notes.md"
blk_log "done: $out"
