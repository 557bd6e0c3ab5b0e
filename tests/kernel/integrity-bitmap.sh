#!/usr/bin/env bash
# dm-integrity bitmap mode (`--integrity-bitmap-mode`, the kernel's `B`)
# both ways between the kernel and cryptkeep.
# cryptkeep writes, the kernel reads: an image cryptkeep formatted with
# `format -B --bitmap-sectors-per-bit 8192`, one it wrote through
# `integrity open -B` and closed (both: `integritysetup dump` equals that of
# a device the kernel formatted, opened in bitmap mode and closed), and one
# left dirty by a SIGKILL of the daemon during a write (its dump equals that
# of a device the kernel left dirty): the kernel opens them with -B
# (recalculating the dirty regions), reads the data cryptkeep reads, and
# then reads every block with its tag checked in journal mode.
# The kernel writes, cryptkeep reads: a device the kernel wrote in bitmap
# mode and closed verifies in cryptkeep and gives back the pattern; a
# device the kernel left with dirty bits (a snapshot of the disk taken
# while mapped, after the write, as a power cut leaves it) reads in
# cryptkeep with its dirty regions unchecked; with a tag in a dirty region
# damaged, both cryptkeep's `open -B` and the kernel's recalculate it, and
# the two recovered images are byte for byte the same. The original, left
# mapped at `poweroff -f`, shows what the kernel's reboot notifier does.
# Two kernel boots. Needs root, cryptsetup-bin (integritysetup), qemu,
# openssl, the cryptkeep release build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"

kt_require_root
kt_require integritysetup cryptsetup-bin
kt_require openssl openssl
CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
kt_pattern "$W/pattern.bin" 2 integrity-bitmap
kt_pattern "$W/second.bin" 8 integrity-bitmap-second
pat_sha=$(sha256sum < "$W/pattern.bin" | cut -c1-64)
for n in k-bm k-off k-dirty ours-fmtb ours-bm ours-kill; do truncate -s 64M "$W/$n.img"; done
# crc32c on 64 MiB: superblock, 5 journal sections of 176 sectors, then the
# first tag run; the bitmap starts at the journal (byte 4096).
TAGS=$(((8 + 5 * 176) * 512))
bits() { od -A n -t x1 -j 4096 -N 4 "$1" | tr -d ' '; }
recalc_sector() { od -A n -t u8 -j 32 -N 8 "$1" | tr -d ' '; }
sbdump() { integritysetup dump "$1" | tail -n +2; }

"$CK" integrity format -q -B --bitmap-sectors-per-bit 8192 "$W/ours-fmtb.img" >/dev/null
"$CK" integrity format -q "$W/ours-bm.img" >/dev/null
dev=$("$CK" integrity open -B --bitmap-sectors-per-bit 8192 "$W/ours-bm.img" kt-bm) || kt_die "integrity open -B failed"
KT_OPENED+=(kt-bm)
dd if="$W/pattern.bin" of="$dev" bs=64k seek=48 oflag=direct conv=fsync status=none
grep -q dirty_bitmap <(sbdump "$W/ours-bm.img") && kt_ok "ours-bm: dirty_bitmap while open" \
  || kt_bad "ours-bm: no dirty_bitmap while open"
kt_close kt-bm
grep -q dirty_bitmap <(sbdump "$W/ours-bm.img") && kt_bad "ours-bm: dirty_bitmap left after close" \
  || kt_ok "ours-bm: close retires the bitmap"

# Killed during a write: a long flush time keeps the bits of the first write.
"$CK" integrity format -q "$W/ours-kill.img" >/dev/null
dev=$("$CK" integrity open -B --bitmap-flush-time 600000 "$W/ours-kill.img" kt-kill) || kt_die "open -B failed"
KT_OPENED+=(kt-kill)
pid=$("$CK" status kt-kill --json | sed -n 's/^  "pid": \([0-9]*\),$/\1/p')
dd if="$W/pattern.bin" of="$dev" bs=64k seek=16 oflag=direct conv=fsync status=none
dd if="$W/second.bin" of="$dev" bs=64k seek=512 oflag=direct status=none 2>/dev/null &
writer=$!
sleep 0.3
kill -9 "$pid"
wait "$writer" || true
for ((t = 0; t < 200; t++)); do
  [ -e "/proc/$pid" ] && ! grep -q ') Z' "/proc/$pid/stat" 2>/dev/null || break
  sleep 0.05
done
kt_close kt-kill >/dev/null 2>&1 || true
[ "$(bits "$W/ours-kill.img")" != 00000000 ] && grep -q dirty_bitmap <(sbdump "$W/ours-kill.img") \
  && kt_ok "ours-kill: SIGKILL left dirty bits ($(bits "$W/ours-kill.img"))" \
  || kt_bad "ours-kill: no dirty bits after SIGKILL"
out=$("$CK" integrity verify "$W/ours-kill.img" --output "$W/ours-kill.data" 2>&1) \
  && grep -q "read unchecked" <<< "$out" && kt_ok "ours-kill: verify reads the dirty regions unchecked ($out)" \
  || kt_bad "ours-kill: verify: $out"
cmp -s <(dd if="$W/ours-kill.data" bs=1M skip=1 count=2 status=none) "$W/pattern.bin" \
  && kt_ok "ours-kill: the acknowledged write reads back" || kt_bad "ours-kill: the acknowledged write is lost"
sha256sum < "$W/ours-kill.data" | cut -c1-64 > "$W/kill_sha"
cp "$W/ours-kill.img" "$W/ours-kill-dirty.img"
echo "$pat_sha" > "$W/pat_sha"

cat > "$W/guest1.sh" <<'GUEST'
. /harness/guest.sh
P=/harness/pattern.bin
all() { dd if="$1" bs=1M iflag=direct 2>/dev/null | sha256sum | cut -c1-64; }
at() { dd if="$1" bs=1M skip="$2" count=2 iflag=direct 2>/dev/null | sha256sum | cut -c1-64; }
kb=$(g_disk k-bm)
g_run "k-bm: integritysetup format" integritysetup format --batch-mode "$kb"
g_run "k-bm: open -B --bitmap-sectors-per-bit 8192" integritysetup open -B --bitmap-sectors-per-bit 8192 "$kb" k-bm
g_run "k-bm: write the pattern at 1 MiB" dd if=$P of=/dev/mapper/k-bm bs=64k seek=16 oflag=direct conv=fsync
g_run "k-bm: close" integritysetup close k-bm
if g_run "ours-bm: kernel opens -B" integritysetup open -B --bitmap-sectors-per-bit 8192 "$(g_disk ours-bm)" ob; then
  [ "$(at /dev/mapper/ob 3)" = "$(cat /harness/pat_sha)" ] && g_ok "ours-bm: the kernel reads what cryptkeep wrote in bitmap mode" \
    || g_bad "ours-bm: the kernel read other bytes"
  g_run "ours-bm: the kernel reads every block" dd if=/dev/mapper/ob of=/dev/null bs=1M iflag=direct
  g_run "ours-bm: close" integritysetup close ob
fi
ok=$(g_disk ours-kill)
if g_run "ours-kill: kernel opens -B (recalculating the dirty regions)" integritysetup open -B "$ok" ok; then
  sleep 3
  [ "$(all /dev/mapper/ok)" = "$(cat /harness/kill_sha)" ] && g_ok "ours-kill: the kernel reads what cryptkeep read (whole device)" \
    || g_bad "ours-kill: the kernel read other bytes than cryptkeep"
  g_run "ours-kill: close" integritysetup close ok
  g_run "ours-kill: kernel opens in journal mode" integritysetup open "$ok" ok
  [ "$(all /dev/mapper/ok)" = "$(cat /harness/kill_sha)" ] && g_ok "ours-kill: every tag checks in journal mode, same bytes" \
    || g_bad "ours-kill: a read failed or differs in journal mode"
  g_run "ours-kill: close" integritysetup close ok
fi
# Left mapped with dirty bits: a snapshot of the disk now is what a power
# cut leaves; the original stays mapped through poweroff -f.
ko=$(g_disk k-off)
g_run "k-off: integritysetup format" integritysetup format --batch-mode "$ko"
g_run "k-off: open -B with a long flush time" integritysetup open -B --bitmap-flush-time 600000 "$ko" k-off
g_run "k-off: write the pattern at 2 MiB" dd if=$P of=/dev/mapper/k-off bs=64k seek=32 oflag=direct conv=fsync
g_run "k-dirty: snapshot of the mapped disk" dd if="$ko" of="$(g_disk k-dirty)" bs=1M iflag=direct oflag=direct
g_finish
GUEST
kt_boot --timeout 400 --script "$W/guest1.sh" --put "$KT_LIB/guest.sh" --put "$W/pattern.bin" \
  --put "$W/pat_sha" --put "$W/kill_sha" \
  "$W/k-bm.img" "$W/ours-bm.img" "$W/ours-kill.img" "$W/k-off.img" "$W/k-dirty.img" \
  || kt_bad "the first kernel run failed (guest FAIL lines above)"

for n in ours-fmtb ours-bm; do
  diff <(sbdump "$W/$n.img") <(sbdump "$W/k-bm.img") >/dev/null \
    && kt_ok "$n: integritysetup dump equals the kernel's bitmap-mode device's" \
    || kt_bad "$n: dump differs: $(diff <(sbdump "$W/$n.img") <(sbdump "$W/k-bm.img") | tr '\n' ' ')"
done
diff <(sbdump "$W/ours-kill-dirty.img") <(sbdump "$W/k-dirty.img") >/dev/null \
  && kt_ok "ours-kill: left dirty, the same superblock as the kernel leaves ($(sbdump "$W/k-dirty.img" | tail -n 1))" \
  || kt_bad "ours-kill: dirty superblock differs: $(diff <(sbdump "$W/ours-kill-dirty.img") <(sbdump "$W/k-dirty.img") | tr '\n' ' ')"
for n in k-bm k-dirty k-off; do
  diff <("$CK" integrity dump "$W/$n.img") <(integritysetup dump "$W/$n.img") >/dev/null \
    && kt_ok "$n: cryptkeep dump equals integritysetup dump" || kt_bad "$n: dump differs"
done
out=$("$CK" integrity verify "$W/k-bm.img" --output "$W/k-bm.data" 2>&1) && kt_ok "k-bm: every tag verifies ($out)" \
  || kt_bad "k-bm: $out"
[ "$(dd if="$W/k-bm.data" bs=1M skip=1 count=2 status=none | sha256sum | cut -c1-64)" = "$pat_sha" ] \
  && kt_ok "k-bm: the pattern the kernel wrote in bitmap mode" || kt_bad "k-bm: other bytes"
# The kernel's reboot notifier flushes and clears the bits at poweroff -f;
# dirty_bitmap stays set (no close ran).
grep -q dirty_bitmap <(sbdump "$W/k-off.img") && [ "$(bits "$W/k-off.img")" = 00000000 ] \
  && kt_ok "k-off: mapped at poweroff -f: dirty_bitmap set, bits cleared by the kernel's reboot notifier" \
  || kt_bad "k-off: $(sbdump "$W/k-off.img" | tail -n 1), bits $(bits "$W/k-off.img")"
out=$("$CK" integrity verify "$W/k-off.img" 2>&1) && kt_ok "k-off: verifies ($out)" || kt_bad "k-off: $out"
[ "$(bits "$W/k-dirty.img")" != 00000000 ] && kt_ok "k-dirty: the kernel's bits are set ($(bits "$W/k-dirty.img"))" \
  || kt_bad "k-dirty: no dirty bits in the snapshot"
out=$("$CK" integrity verify "$W/k-dirty.img" --output "$W/k-dirty.data" 2>&1) && grep -q "read unchecked" <<< "$out" \
  && kt_ok "k-dirty: verifies, dirty regions unchecked ($out)" || kt_bad "k-dirty: $out"
[ "$(dd if="$W/k-dirty.data" bs=1M skip=2 count=2 status=none | sha256sum | cut -c1-64)" = "$pat_sha" ] \
  && kt_ok "k-dirty: the pattern the kernel wrote before the power cut" || kt_bad "k-dirty: other bytes"

# A torn write in a dirty region: the tag of sector 5000 damaged.
cp "$W/k-dirty.img" "$W/kd-ck.img"
printf '\x5a' | dd of="$W/kd-ck.img" bs=1 seek=$((TAGS + 5000 * 4)) conv=notrunc status=none
cp "$W/kd-ck.img" "$W/kd-k.img"
out=$("$CK" integrity verify "$W/kd-ck.img" 2>&1) && grep -q "(1 with a stale tag)" <<< "$out" \
  && kt_ok "kd: the damaged tag is in a dirty region: stale, not a failure ($out)" || kt_bad "kd: $out"
dev=$("$CK" integrity open -B "$W/kd-ck.img" kt-kd) || kt_die "kd: open -B failed"
KT_OPENED+=(kt-kd)
[ "$(dd if="$dev" bs=1M skip=2 count=2 iflag=direct status=none | sha256sum | cut -c1-64)" = "$pat_sha" ] \
  && kt_ok "kd: cryptkeep recalculated the dirty regions and reads the pattern" || kt_bad "kd: read after recovery"
kt_close kt-kd
out=$("$CK" integrity verify "$W/kd-ck.img" --output "$W/kd.data" 2>&1) && ! grep -q unchecked <<< "$out" \
  && kt_ok "kd: after cryptkeep's recovery every tag verifies ($out)" || kt_bad "kd: $out"
[ "$(recalc_sector "$W/kd-ck.img")" = 129160 ] && kt_ok "kd: recalc_sector at the end (129160)" \
  || kt_bad "kd: recalc_sector $(recalc_sector "$W/kd-ck.img")"
cp "$W/kd-ck.img" "$W/kd-ck2.img"
kd_sha=$(sha256sum < "$W/kd.data" | cut -c1-64)
echo "$kd_sha" > "$W/kd_sha"

cat > "$W/guest2.sh" <<'GUEST'
. /harness/guest.sh
all() { dd if="$1" bs=1M iflag=direct 2>/dev/null | sha256sum | cut -c1-64; }
if g_run "kd-k: kernel opens -B (recalculating)" integritysetup open -B "$(g_disk kd-k)" kdk; then
  sleep 3
  [ "$(all /dev/mapper/kdk)" = "$(cat /harness/kd_sha)" ] && g_ok "kd-k: the kernel reads what cryptkeep recovered" \
    || g_bad "kd-k: the kernel read other bytes"
  g_run "kd-k: close" integritysetup close kdk
fi
if g_run "kd-ck2: kernel opens cryptkeep's recovery in journal mode" integritysetup open "$(g_disk kd-ck2)" kdc; then
  [ "$(all /dev/mapper/kdc)" = "$(cat /harness/kd_sha)" ] && g_ok "kd-ck2: every tag cryptkeep recalculated checks in the kernel" \
    || g_bad "kd-ck2: a read failed or differs"
  g_run "kd-ck2: close" integritysetup close kdc
fi
g_finish
GUEST
kt_boot --timeout 300 --script "$W/guest2.sh" --put "$KT_LIB/guest.sh" --put "$W/kd_sha" \
  "$W/kd-k.img" "$W/kd-ck2.img" || kt_bad "the second kernel run failed (guest FAIL lines above)"
cmp "$W/kd-k.img" "$W/kd-ck.img" >/dev/null \
  && kt_ok "kd: the kernel's recovered image equals cryptkeep's, byte for byte" \
  || kt_bad "kd: recovered images differ: $(cmp -l "$W/kd-k.img" "$W/kd-ck.img" 2>/dev/null | head -n 3 | tr '\n' ' ')"
diff <(sbdump "$W/ours-kill.img") <(sbdump "$W/kd-k.img") >/dev/null \
  && kt_ok "ours-kill / kd-k: recovered by the kernel, the same superblock ($(sbdump "$W/kd-k.img" | tail -n 1))" \
  || kt_bad "ours-kill / kd-k: superblocks differ after the kernel's recovery"
kt_finish
