#!/usr/bin/env bash
# The keep's lifecycle, on a real loop device and ext4:
# - open starts a keep (default --keep process) that status reports, in the daemon's session
#   (one scheduler autogroup for the pair); close makes it exit;
# - the keep killed during a write load: every later request fails with EIO, status says
#   the keep is gone, and after reopening every file whose fsync had returned is intact;
# - the I/O daemon killed: the keep notices and exits.
source "$(dirname "$0")/lib/common.sh"

printf 'keep passphrase' > "$W/pass"
vol=$W/vol.img
mkvol "$vol" 96M "$W/pass"
mkdir -p "$W/mnt"

alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
wait_gone() { # wait_gone PID SECONDS
  local n=$(( $2 * 10 ))
  while alive "$1"; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done
}

step "open starts a keep; status shows it; the daemon and the keep are different processes"
dev=$("$CK" open "$vol" kv --key-file "$W/pass")
mkfs.ext4 -q "$dev"
mount "$dev" "$W/mnt"
kp=$(keep_pid kv); dp=$(daemon_pid kv)
[ -n "$kp" ] && [ -n "$dp" ] && [ "$kp" != "$dp" ] || { cat "$CRYPTKEEP_RUN_DIR/kv/state.json"; fail "no separate keep pid"; }
alive "$kp" || fail "keep $kp not running"
"$CK" status kv > "$W/st.txt"
grep -q "keep: *process (pid $kp, key in memfd_secret)" "$W/st.txt" || { cat "$W/st.txt"; fail "status lacks the keep"; }
grep -q "sandbox: .*seccomp" "$W/st.txt" || { cat "$W/st.txt"; fail "status lacks the sandbox"; }
grep -q "^Seccomp:[[:space:]]*2" "/proc/$kp/status" || fail "keep has no seccomp filter"
# The keep stays in the detached daemon's session: the scheduler's autogroup is per
# session, and the pair must share one (a keep in a group of its own loses CPU time on a
# busy machine at each hand-off).
[ "$(ps -o sid= -p "$kp" | tr -d ' ')" = "$dp" ] || { ps -o pid,ppid,pgid,sid,args -p "$kp,$dp"; fail "the keep is not in the daemon's session"; }
if [ -r "/proc/$kp/autogroup" ]; then
  [ "$(cut -d' ' -f1 < "/proc/$kp/autogroup")" = "$(cut -d' ' -f1 < "/proc/$dp/autogroup")" ] || fail "the keep and the daemon are in different autogroups"
fi
# A plain volume served only through its loop device: ordinary workers (open passes
# --ordinary-workers; a root keep would get SCHED_FIFO otherwise).
pol=$(keep_worker_policies kv | sort -u | tr '\n' ' ')
[ "$pol" = "0 " ] || fail "the keep's workers' policies are '$pol', want ordinary (0)"

step "write load, then SIGKILL the keep"
head -c 4M /dev/urandom > "$W/src"
for i in $(seq 0 15); do dd if="$W/src" bs=256K skip=$i count=1 status=none | sha256sum | cut -d' ' -f1 > "$W/sum.$i"; done
: > "$W/acked"
(
  i=0
  while :; do
    dd if="$W/src" of="$W/mnt/f$i" bs=256K skip=$((i % 16)) count=1 conv=fsync status=none 2>/dev/null || exit 0
    echo "$i" >> "$W/acked"
    i=$((i + 1))
  done
) &
load=$!
sleep 2
[ "$(wc -l < "$W/acked")" -gt 3 ] || fail "the write load made no progress"
kill -9 "$kp"
# The load must stop with an error (EIO) soon: it never hangs.
n=200; while kill -0 $load 2>/dev/null; do n=$((n - 1)); [ $n -gt 0 ] || { kill $load; fail "writes still succeed 20 s after the keep died"; }; sleep 0.1; done
acked=$(wc -l < "$W/acked")
echo "acknowledged before the kill: $acked files"

step "after the kill: reads fail with EIO, status says the keep is gone"
echo 3 > /proc/sys/vm/drop_caches
rc=0; dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct 2> "$W/dd.err" || rc=$?
[ $rc -ne 0 ] && grep -qi "input/output error" "$W/dd.err" || { cat "$W/dd.err"; fail "read after the keep died did not fail with EIO"; }
"$CK" status kv > "$W/st.txt" || true
grep -q "GONE" "$W/st.txt" || { cat "$W/st.txt"; fail "status does not say the keep is gone"; }
"$CK" status kv --json > "$W/st.json" || true
json_has "$W/st.json" keep_alive false
umount "$W/mnt" 2>/dev/null || umount -l "$W/mnt"
"$CK" close kv
alive "$dp" && fail "daemon $dp still running after close"

step "reopen: every acknowledged file is intact"
dev=$("$CK" open "$vol" kv --key-file "$W/pass")
mount "$dev" "$W/mnt"
while read -r i; do
  got=$(sha256sum "$W/mnt/f$i" | cut -d' ' -f1)
  [ "$got" = "$(cat "$W/sum.$((i % 16))")" ] || fail "acknowledged file f$i changed or was lost"
done < "$W/acked"
echo "ok: $acked acknowledged files intact"
umount "$W/mnt"
e2fsck -fn "$dev" > "$W/fsck.out" 2>&1 || { cat "$W/fsck.out"; fail "ext4 damaged after the keep was killed"; }
kp=$(keep_pid kv)

step "close makes the keep exit"
"$CK" close kv
wait_gone "$kp" 5 || fail "keep $kp still running after close"

step "the I/O daemon killed: the keep exits"
"$CK" open "$vol" kv --key-file "$W/pass" > /dev/null
kp=$(keep_pid kv); dp=$(daemon_pid kv)
kill -9 "$dp"
wait_gone "$kp" 5 || fail "keep $kp outlived its I/O daemon"
"$CK" close kv 2>/dev/null || true
echo "keep: all ok"
