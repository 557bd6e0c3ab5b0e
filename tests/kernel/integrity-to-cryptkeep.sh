#!/usr/bin/env bash
# dm-integrity both ways between the kernel and cryptkeep.
# cryptkeep formats, the kernel reads and writes: `cryptkeep integrity
# format` images (crc32c, sha256 with 4096-byte blocks, hmac-sha256, and one
# with --no-wipe) dump as the kernel's do, open in the kernel, read as zeros
# (wiped ones), take a pattern, and cryptkeep verifies what the kernel wrote.
# cryptkeep's journal: a pattern written through the library's journal
# (several laps of the journal ring), and one more write "lost" right after
# its journal commit: the kernel replays both and reads exactly them.
# cryptkeep's block device: `cryptkeep integrity open` serves an image,
# mkfs.ext4 and a tree go in through the loop device; the kernel opens the
# image with integritysetup, e2fsck -fn passes, and the manifest checks out.
# The kernel's dm-integrity writes, cryptkeep reads. One boot formats four
# standalone integrity images with integritysetup (crc32c / 512-byte blocks,
# sha256 / 4096-byte blocks, hmac-sha256 with a key file, and one whose last
# writes are left committed in the journal by a power-off without close) and
# writes a pattern through dm-integrity. On the host, `cryptkeep integrity
# dump` must print what `integritysetup dump` prints, and `cryptkeep integrity
# verify` must pass every tag and give back the pattern, replaying the
# journal in memory. Tampered copies (a data byte, a tag byte) and a wrong
# key must be caught (exit 6, the sector named). A second boot lets the
# kernel replay the crashed image and read everything: the same bytes
# cryptkeep read; and the kernel fails the read of the tampered copy too.
# Two kernel boots. Needs root, cryptsetup-bin (integritysetup), qemu,
# openssl, the cryptkeep build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"

kt_require_root
kt_require integritysetup cryptsetup-bin
kt_require openssl openssl
CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
MIB=$((1024 * 1024))
kt_pattern "$W/pattern.bin" 2 integrity-to-cryptkeep
pat_sha=$(sha256sum < "$W/pattern.bin" | cut -c1-64)
head -c 32 /dev/urandom > "$W/hkey"
for n in crc sha4k hmac crash ours-crc ours-sha4k ours-hmac ours-nowipe ours-journal ours-ext4; do truncate -s 64M "$W/$n.img"; done
"$CK" integrity format -q --integrity sha256 "$W/ours-ext4.img" >/dev/null
dev=$("$CK" integrity open --integrity sha256 "$W/ours-ext4.img" kt-ours-ext4) || kt_die "integrity open failed"
KT_OPENED+=(kt-ours-ext4)
mkfs.ext4 -q "$dev" && mkdir -p "$W/mnt" && mount "$dev" "$W/mnt" || kt_die "mkfs/mount on $dev failed"
kt_make_tree "$W/mnt" 120 ours-ext4
echo ours-ext4 > "$W/mnt/VOLUME"
kt_manifest "$W/mnt"
umount "$W/mnt"
"$CK" close kt-ours-ext4 || kt_die "close failed"
out=$("$CK" integrity verify --integrity sha256 "$W/ours-ext4.img" 2>&1) \
  && kt_ok "ours-ext4: the tree cryptkeep's block device wrote verifies ($out)" || kt_bad "ours-ext4: $out"
IW=${CARGO_TARGET_DIR:-$KT_REPO/target}/release/examples/integrity_write
[ -x "$IW" ] || kt_die "$IW is missing: build it with 'cargo build --release -p cryptkeep-integrity --examples'"
kt_pattern "$W/second.bin" 1 integrity-second
"$CK" integrity format -q "$W/ours-journal.img" >/dev/null
"$IW" "$W/ours-journal.img" 0 "$W/pattern.bin" || kt_die "integrity_write failed"
"$IW" "$W/ours-journal.img" $((8 * MIB)) "$W/second.bin" --crash-after-commit || kt_die "integrity_write failed"
second_sha=$(sha256sum < "$W/second.bin" | cut -c1-64)
jv=$("$CK" integrity verify "$W/ours-journal.img" 2>&1) || kt_bad "ours-journal: cryptkeep cannot read its own journal: $jv"
grep -q "([1-9][0-9]* from the journal)" <<< "$jv" && kt_ok "ours-journal: cryptkeep reads the lost write from its journal ($jv)" \
  || kt_bad "ours-journal: expected blocks from the journal: $jv"
cmp -s <("$CK" integrity verify "$W/ours-journal.img" --output /dev/stdout 2>/dev/null | dd bs=1M skip=8 count=1 iflag=fullblock status=none) "$W/second.bin" \
  && kt_ok "ours-journal: cryptkeep reads back the lost write" || kt_bad "ours-journal: cryptkeep lost its own committed write"
"$CK" integrity format -q "$W/ours-crc.img" >/dev/null
"$CK" integrity format -q --integrity sha256 --sector-size 4096 "$W/ours-sha4k.img" >/dev/null
"$CK" integrity format -q --integrity hmac-sha256 --integrity-key-file "$W/hkey" --integrity-key-size 32 "$W/ours-hmac.img" >/dev/null
"$CK" integrity format -q --no-wipe "$W/ours-nowipe.img" >/dev/null

cat > "$W/guest-script.sh" <<'GUEST'
. /harness/guest.sh
P=/harness/pattern.bin
# name|algorithm options|format-only options|MiB the pattern goes at
while IFS='|' read -r n alg fmt seek; do
  [ -n "$n" ] || continue
  # shellcheck disable=SC2086
  g_run "$n: integritysetup format" integritysetup format --batch-mode $alg $fmt "$(g_disk "$n")" || continue
  # shellcheck disable=SC2086
  g_run "$n: integritysetup open" integritysetup open $alg "$(g_disk "$n")" "$n" || continue
  g_run "$n: write the pattern" dd if=$P of="/dev/mapper/$n" bs=64k seek=$((seek * 16)) oflag=direct conv=fsync
  g_run "$n: integritysetup close" integritysetup close "$n"
done <<'LIST'
crc|||1
sha4k|--integrity sha256|--sector-size 4096|3
hmac|--integrity hmac-sha256 --integrity-key-file /harness/hkey --integrity-key-size 32||0
LIST
# Formatted by cryptkeep: the kernel opens them, reads zeros, writes.
while IFS='|' read -r n alg wiped; do
  [ -n "$n" ] || continue
  # shellcheck disable=SC2086
  g_run "$n: kernel opens cryptkeep's format" integritysetup open $alg "$(g_disk "$n")" "$n" || continue
  m=/dev/mapper/$n
  if [ "$wiped" = 1 ]; then
    z=$(head -c "$(blockdev --getsize64 "$m")" /dev/zero | sha256sum | cut -c1-64)
    [ "$(sha256sum < "$m" | cut -c1-64)" = "$z" ] && g_ok "$n: the kernel reads zeros everywhere" \
      || g_bad "$n: the kernel read something else than zeros"
  fi
  g_run "$n: kernel writes the pattern" dd if=$P of="$m" bs=64k seek=32 oflag=direct conv=fsync
  [ "$(dd if="$m" bs=64k skip=32 count=32 iflag=direct 2>/dev/null | sha256sum)" = "$(sha256sum < $P)" ] \
    && g_ok "$n: the kernel reads its pattern back" || g_bad "$n: the kernel read other bytes back"
  g_run "$n: integritysetup close" integritysetup close "$n"
done <<'LIST'
ours-crc||1
ours-sha4k|--integrity sha256|1
ours-hmac|--integrity hmac-sha256 --integrity-key-file /harness/hkey --integrity-key-size 32|1
ours-nowipe||0
LIST
# Written by cryptkeep's journal, the last write never copied in place.
j=$(g_disk ours-journal)
if g_run "ours-journal: kernel opens (replaying cryptkeep's journal)" integritysetup open "$j" oj; then
  [ "$(dd if=/dev/mapper/oj bs=1M count=2 iflag=direct 2>/dev/null | sha256sum | cut -c1-64)" = "$(cat /harness/pat_sha)" ] \
    && g_ok "ours-journal: the kernel reads the pattern cryptkeep wrote through its journal" \
    || g_bad "ours-journal: the kernel read other bytes at 0"
  [ "$(dd if=/dev/mapper/oj bs=1M skip=8 count=1 iflag=direct 2>/dev/null | sha256sum | cut -c1-64)" = "$(cat /harness/second_sha)" ] \
    && g_ok "ours-journal: the kernel replayed the write cryptkeep lost after its commit" \
    || g_bad "ours-journal: the kernel did not replay the committed write"
  g_run "ours-journal: the kernel reads the whole device" dd if=/dev/mapper/oj of=/dev/null bs=1M iflag=direct
  g_run "ours-journal: close" integritysetup close oj
fi
# ext4 written through cryptkeep's integrity block device.
if g_run "ours-ext4: kernel opens" integritysetup open --integrity sha256 "$(g_disk ours-ext4)" oe; then
  g_run "ours-ext4: e2fsck -fn" e2fsck -fn /dev/mapper/oe
  mkdir -p /mnt/oe
  if g_run "ours-ext4: mount -o ro" mount -t ext4 -o ro,noload /dev/mapper/oe /mnt/oe; then
    g_check_tree /mnt/oe ours-ext4
    umount /mnt/oe
  fi
  g_run "ours-ext4: close" integritysetup close oe
fi
# Left open: committed to the journal (fsync), never copied in place.
c=$(g_disk crash)
g_run "crash: integritysetup format" integritysetup format --batch-mode "$c"
g_run "crash: open with a lazy journal" integritysetup open --journal-watermark 99 --journal-commit-time 600000 "$c" crash
g_run "crash: write the pattern" dd if=$P of=/dev/mapper/crash bs=64k seek=16 oflag=direct conv=fsync
g_finish
GUEST
echo "$pat_sha" > "$W/pat_sha"; echo "$second_sha" > "$W/second_sha"
kt_boot --timeout 400 --script "$W/guest-script.sh" --put "$KT_LIB/guest.sh" --put "$W/pattern.bin" \
  --put "$W/hkey" "$W/crc.img" "$W/sha4k.img" "$W/hmac.img" "$W/crash.img" \
  "$W/ours-crc.img" "$W/ours-sha4k.img" "$W/ours-hmac.img" "$W/ours-nowipe.img" "$W/ours-journal.img" "$W/ours-ext4.img" \
  --put "$W/pat_sha" --put "$W/second_sha" \
  || kt_die "the kernel could not make the integrity images (guest FAIL lines above)"

# check NAME MIB ALG [options]: dump as integritysetup, verify, pattern at MIB.
check() {
  local n=$1 at=$2 out
  shift 2
  if diff <("$CK" integrity dump "$W/$n.img") <(integritysetup dump "$W/$n.img") >/dev/null; then
    kt_ok "$n: dump equals integritysetup dump"
  else kt_bad "$n: dump differs from integritysetup dump"; fi
  if out=$("$CK" integrity verify "$W/$n.img" "$@" --output "$W/$n.data" 2>&1); then
    kt_ok "$n: every tag verifies ($out)"
  else kt_bad "$n: verify failed: $out"; fi
  local got
  got=$(dd if="$W/$n.data" bs=1M skip="$at" count=2 status=none | sha256sum | cut -c1-64)
  [ "$got" = "$pat_sha" ] && kt_ok "$n: the pattern the kernel wrote at $at MiB" \
    || kt_bad "$n: cryptkeep read other bytes at $at MiB than the kernel wrote"
}
check crc 1
check sha4k 3 --integrity sha256
check hmac 0 --integrity hmac-sha256 --integrity-key-file "$W/hkey" --integrity-key-size 32
check crash 1
for n in ours-crc ours-sha4k ours-hmac; do
  diff <(integritysetup dump "$W/$n.img" | tail -n +2) <(integritysetup dump "$W/${n#ours-}.img" | tail -n +2) >/dev/null \
    && kt_ok "$n: cryptkeep's format has the kernel's superblock (integritysetup dump)" \
    || kt_bad "$n: cryptkeep's superblock differs from the kernel's"
done
check ours-crc 2
check ours-sha4k 2 --integrity sha256
check ours-hmac 2 --integrity hmac-sha256 --integrity-key-file "$W/hkey" --integrity-key-size 32
rc=0; out=$("$CK" integrity verify "$W/ours-nowipe.img" 2>&1) || rc=$?
[ "$rc" = 6 ] && kt_ok "ours-nowipe: never-written blocks fail their tags, as in the kernel (exit 6)" \
  || kt_bad "ours-nowipe: exit $rc: $out"
jout=$("$CK" integrity verify "$W/crash.img")
grep -q "([1-9][0-9]* from the journal)" <<< "$jout" \
  && kt_ok "crash: the pattern came from the journal" \
  || kt_bad "crash: nothing was read from the journal (the test wrote nothing there?)"

# Tampering: a data byte of sector 2048 (1 MiB in), then a byte of the tag of sector 77.
sb_journal=$(( 8 + 5 * 176 ))   # crc: superblock + 5 journal sections of 176 sectors
cp "$W/crc.img" "$W/td.img"; cp "$W/crc.img" "$W/tt.img"
printf '\x5a' | dd of="$W/td.img" bs=1 seek=$(( (sb_journal + 256 + 2048) * 512 + 100 )) conv=notrunc status=none
printf '\x5a' | dd of="$W/tt.img" bs=1 seek=$(( sb_journal * 512 + 77 * 4 )) conv=notrunc status=none
for t in td:2048 tt:77; do
  n=${t%%:*} s=${t#*:} rc=0
  out=$("$CK" integrity verify "$W/$n.img" 2>&1) || rc=$?
  if [ "$rc" = 6 ] && grep -q "first at sector $s " <<< "$out"; then
    kt_ok "$n: tampering caught at sector $s (exit 6)"
  else kt_bad "$n: tampering at sector $s not reported (exit $rc): $out"; fi
done
[ "$(integritysetup dump "$W/crc.img" | grep -c fix_padding)" = 1 ] || kt_bad "crc: layout assumption (fix_padding) broken"
rc=0; out=$("$CK" integrity verify "$W/hmac.img" --integrity hmac-sha256 --integrity-key-file "$W/pattern.bin" --integrity-key-size 32 2>&1) || rc=$?
[ "$rc" = 6 ] && kt_ok "hmac: a wrong key fails every tag (exit 6)" || kt_bad "hmac: wrong key gave exit $rc: $out"

ours=$(sha256sum < "$W/crash.data" | cut -c1-64)
cat > "$W/guest2.sh" <<GUEST
. /harness/guest.sh
g_run "crash: kernel replays and opens" integritysetup open "\$(g_disk crash)" crash || g_finish
got=\$(sha256sum < /dev/mapper/crash | cut -c1-64)
[ "\$got" = "$ours" ] && g_ok "crash: the kernel reads what cryptkeep read (whole device)" \
  || g_bad "crash: kernel read \$got, cryptkeep $ours"
g_run "crash: close" integritysetup close crash
g_run "td: open" integritysetup open "\$(g_disk td)" td || g_finish
if dd if=/dev/mapper/td of=/dev/null bs=512 skip=2048 count=1 iflag=direct 2>/dev/null; then
  g_bad "td: the kernel read the tampered sector"
else g_ok "td: the kernel refuses the tampered sector too"; fi
g_run "td: close" integritysetup close td
g_finish
GUEST
kt_boot --timeout 300 --script "$W/guest2.sh" --put "$KT_LIB/guest.sh" "$W/crash.img" "$W/td.img" \
  || kt_bad "the kernel disagreed (guest FAIL lines above)"
out=$("$CK" integrity verify "$W/crash.img" --output "$W/crash2.data" 2>&1) || kt_bad "crash: verify after the kernel's replay: $out"
cmp -s "$W/crash.data" "$W/crash2.data" && kt_ok "crash: same bytes after the kernel replayed the journal in place" \
  || kt_bad "crash: the kernel's replay changed what cryptkeep reads"
kt_finish
