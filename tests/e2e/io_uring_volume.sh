#!/usr/bin/env bash
# `open --io-uring`: a volume's block file served over FUSE-over-io_uring queues, on a
# real loop device:
# - the daemon serves it with one io_uring queue thread per CPU, which run while fio
#   does I/O, and one /dev/fuse thread (INIT, FORGET, INTERRUPT), which does not run
#   then; without the flag it has several /dev/fuse readers;
# - fio writes random 4 KiB blocks (with fsyncs) and 1 MiB runs with checksums and
#   verifies them through the queues, with the keep as a process and inline; a discard
#   punches a hole in the image (--allow-discards); reopened over /dev/fuse, the same
#   blocks verify again and the device reads the same bytes;
# - an authenticated volume: bytes changed in the image make the reads of the
#   sectors under them fail with EIO through the queues (and only those: the rest of
#   the device reads), counted by status; put back, everything reads again.
# Where the kernel does not offer FUSE over io_uring, only open's refusal is checked.
source "$(dirname "$0")/lib/common.sh"

command -v fio >/dev/null || fail "fio missing: run scripts/install-deps.sh"
printf 'uring passphrase' > "$W/pass"
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" != Y ]; then
  echo "  (enable_uring is off here: only the refusal of --io-uring is checked)"
  mkvol "$W/off.img" 32M "$W/pass" > /dev/null
  expect_fail 1 "enable_uring" "$CK" open "$W/off.img" off --key-file "$W/pass" --io-uring
  [ ! -e "$CRYPTKEEP_RUN_DIR/off" ] || fail "a refused open left a state record"
  echo "PASS io_uring_volume"
  exit 0
fi

# threads NAME PATTERN: how many of NAME's daemon threads have a name matching PATTERN.
threads() {
  local n=0 t
  for t in /proc/"$(daemon_pid "$1")"/task/*/comm; do
    grep -qE "$2" "$t" 2>/dev/null && n=$((n + 1))
  done
  echo $n
}
# run_ns NAME PATTERN: nanoseconds NAME's daemon threads whose names match PATTERN have
# run on a CPU (/proc/PID/task/TID/schedstat).
run_ns() {
  local n=0 t ns
  for t in /proc/"$(daemon_pid "$1")"/task/*; do
    grep -qE "$2" "$t/comm" 2>/dev/null || continue
    ns=$(cut -d' ' -f1 "$t/schedstat" 2>/dev/null) || fail "no $t/schedstat (CONFIG_SCHEDSTATS)"
    n=$((n + ns))
  done
  echo $n
}
# fio_verify DEV RW BS [extra fio options]: writes (or, with --verify_only, reads) with
# crc32c checksums in every block, and verifies them; fails the test on any mismatch.
fio_verify() {
  local dev=$1 rw=$2 bs=$3; shift 3
  fio --name=v --filename="$dev" --rw="$rw" --bs="$bs" --iodepth=32 --ioengine=libaio \
    --direct=1 --size=24M --offset=4M --verify=crc32c --verify_fatal=1 --randseed=7 \
    --verify_state_save=0 --do_verify=1 "$@" --output="$W/fio.out" > /dev/null 2>&1 ||
    { cat "$W/fio.out"; fail "fio $rw bs=$bs on $dev: verification failed"; }
}

for keep in process inline; do
  vol=$W/$keep.img
  mkvol "$vol" 64M "$W/pass" > /dev/null
  step "$keep keep: served over io_uring queues"
  dev=$("$CK" open "$vol" ur --key-file "$W/pass" --keep "$keep" --io-uring --allow-discards)
  cpus=$(( $(sed 's/.*-//' /sys/devices/system/cpu/possible) + 1 ))
  [ "$(threads ur '^ck-uring-[0-9]+$')" = "$cpus" ] || { ls /proc/"$(daemon_pid ur)"/task; cat /proc/"$(daemon_pid ur)"/task/*/comm; fail "not one io_uring queue thread per CPU ($cpus)"; }
  [ "$(threads ur '^fuser-')" = 1 ] || fail "more than one /dev/fuse thread beside the io_uring queues"
  step "$keep keep: random 4 KiB and sequential 1 MiB writes verify through the queues"
  queues_before=$(run_ns ur '^ck-uring-'); devfuse_before=$(run_ns ur '^fuser-')
  fio_verify "$dev" randwrite 4k --fsync=64
  fio_verify "$dev" write 1M --offset=28M --size=8M
  # 6144 random requests and the sequential ones: milliseconds of work, all on the
  # queues; the /dev/fuse thread would have run as long had they come to it.
  [ $(( $(run_ns ur '^ck-uring-') - queues_before )) -gt 5000000 ] || fail "the io_uring queue threads did not serve the I/O"
  [ $(( $(run_ns ur '^fuser-') - devfuse_before )) -lt 2000000 ] || fail "the I/O went through /dev/fuse"
  step "$keep keep: a discard punches a hole in the image over the queues"
  dd if=/dev/urandom of="$dev" bs=1M seek=40 count=4 oflag=direct status=none
  blocks=$(stat -c %b "$vol")
  blkdiscard -o $((40 << 20)) -l $((4 << 20)) "$dev" || fail "blkdiscard over the io_uring queues failed"
  [ "$(stat -c %b "$vol")" -lt "$blocks" ] || fail "the discard punched no hole in the image"
  sha_uring=$(sha256sum < "$dev")
  "$CK" close ur
  step "$keep keep: reopened over /dev/fuse, the same blocks verify"
  # (--allow-discards again: with it a hole in the image reads as zeros, as a discarded
  # range of a device that zeroes what it discards)
  dev=$("$CK" open "$vol" ur --key-file "$W/pass" --keep "$keep" --allow-discards)
  [ "$(threads ur '^fuser-')" -gt 1 ] && [ "$(threads ur '^ck-uring-')" = 0 ] ||
    fail "without --io-uring the block file is not read from /dev/fuse"
  fio_verify "$dev" randwrite 4k --verify_only
  fio_verify "$dev" write 1M --offset=28M --size=8M --verify_only
  [ "$(sha256sum < "$dev")" = "$sha_uring" ] || fail "the device reads differently over /dev/fuse"
  "$CK" close ur
done

step "authenticated volume over io_uring: changed bytes fail their sectors with EIO"
img=$W/auth.img
mkvol "$img" 64M "$W/pass" --type luks2 -c aegis128-random --key-size 128 --integrity aead > /dev/null
dev=$("$CK" open "$img" ua --key-file "$W/pass" --io-uring)
[ "$(threads ua '^ck-uring-[0-9]+$')" -gt 0 ] || fail "the authenticated volume is not served over io_uring"
fio_verify "$dev" write 1M
mibs=$(( $(blockdev --getsize64 "$dev") / 1048576 ))
"$CK" close ua
# 64 KiB of the image, well inside the data area (the data offset is 16 MiB), saved and
# then overwritten with other bytes.
off=$(( 30 << 20 ))
dd if="$img" of="$W/orig" bs=64K skip=$((off >> 16)) count=1 status=none
head -c 65536 /dev/urandom > "$W/noise"
dd if="$W/noise" of="$img" bs=64K seek=$((off >> 16)) count=1 conv=notrunc status=none
dev=$("$CK" open "$img" ua --key-file "$W/pass" --io-uring --read-only)
dd if="$dev" of=/dev/null bs=1M iflag=direct conv=noerror 2> "$W/dd.err" || true
bad=$(grep -ci "input/output error" "$W/dd.err" || true)
[ "$bad" -ge 1 ] || { cat "$W/dd.err"; fail "no read failed over the changed bytes"; }
[ "$bad" -lt "$mibs" ] || fail "every read failed ($bad of $mibs MiB), not only those over the changed bytes"
"$CK" status ua --json > "$W/st.json"
failures=$(sed -n 's/^  "integrity_failures": \([0-9]*\),\{0,1\}$/\1/p' "$W/st.json")
[ "${failures:-0}" -ge 1 ] || { cat "$W/st.json"; fail "status counts no integrity failure"; }
"$CK" close ua
dd if="$W/orig" of="$img" bs=64K seek=$((off >> 16)) count=1 conv=notrunc status=none
dev=$("$CK" open "$img" ua --key-file "$W/pass" --io-uring)
fio_verify "$dev" write 1M --verify_only
"$CK" close ua
echo "PASS io_uring_volume"
