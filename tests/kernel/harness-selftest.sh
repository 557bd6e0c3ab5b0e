#!/usr/bin/env bash
# The kernel harness itself (tests/kernel/boot-kernel) must be able to fail:
#  1. the guest script's exit code (3) and its stdout and stderr reach the host;
#     a disk attached as NAME is /dev/disk/by-name/NAME, and what the guest
#     writes to it is in the image file afterwards; --put files arrive.
#  2. a guest that crashes (kernel panic) is exit 126, not a pass;
#  3. a guest that hangs is killed at --timeout and is exit 124.
# Three short boots. Needs qemu and the kernel (scripts/install-deps.sh).
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"
kt_workdir
W=$KT_W

truncate -s 1M "$W/scratch.img"
echo "put-me-$$" > "$W/putfile"
cat > "$W/exit3.sh" <<'EOF'
echo "to-stdout-marker"
echo "to-stderr-marker" >&2
[ "$(cat /harness/putfile)" = "$(cat /harness/putfile-expect)" ] || { echo "putfile wrong"; exit 9; }
[ -b /dev/disk/by-name/named-disk ] || { echo "no /dev/disk/by-name/named-disk"; exit 8; }
printf 'written-by-the-guest' | dd of=/dev/disk/by-name/named-disk bs=512 seek=1 conv=sync,fsync 2>/dev/null
exit 3
EOF
cp "$W/putfile" "$W/putfile-expect"
rc=0
out=$(kt_boot --timeout 120 --script "$W/exit3.sh" --put "$W/putfile" --put "$W/putfile-expect" \
  "named-disk=$W/scratch.img" 2>&1) || rc=$?
printf '%s\n' "$out" | sed 's/^/    | /'
[ "$rc" = 3 ] && kt_ok "guest exit 3 is the harness's exit code" || kt_bad "harness exit $rc, expected the guest's 3"
grep -q '^to-stdout-marker' <<< "$out" && kt_ok "guest stdout reaches the host" || kt_bad "guest stdout missing"
grep -q '^to-stderr-marker' <<< "$out" && kt_ok "guest stderr reaches the host" || kt_bad "guest stderr missing"
[ "$(dd if="$W/scratch.img" bs=512 skip=1 count=1 status=none | tr -d '\0')" = written-by-the-guest ] \
  && kt_ok "the guest's write to the named disk is in the image" || kt_bad "the guest's write is not in the image"

printf 'echo about-to-panic; echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger; sleep 30\n' > "$W/panic.sh"
rc=0; out=$(kt_boot --timeout 120 --script "$W/panic.sh" 2>&1) || rc=$?
printf '%s\n' "$out" | tail -n 4 | sed 's/^/    | /'
[ "$rc" = 126 ] && kt_ok "a kernel panic is exit 126" || kt_bad "a kernel panic gave exit $rc, expected 126"
grep -q 'without an exit code' <<< "$out" && kt_ok "a panic is explained" || kt_bad "a panic is not explained"

printf 'echo hanging; sleep 1000\n' > "$W/hang.sh"
rc=0; out=$(kt_boot --timeout 8 --script "$W/hang.sh" 2>&1) || rc=$?
printf '%s\n' "$out" | tail -n 3 | sed 's/^/    | /'
[ "$rc" = 124 ] && kt_ok "a hung guest is killed at --timeout, exit 124" || kt_bad "a hung guest gave exit $rc, expected 124"
kt_finish
