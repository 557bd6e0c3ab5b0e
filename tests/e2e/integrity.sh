#!/usr/bin/env bash
# Standalone integrity devices through the command line: format, open (a
# loop device), ext4 and files through it, close, verify; a byte changed in
# the image under a file makes reading that file an I/O error through the
# loop device, `status` counts and names the block, and `verify` names the
# sector (exit 6); a wrong algorithm or
# key fails every block; bad input gets a clear error and changes nothing.
source "$(dirname "$0")/lib/common.sh"

img=$W/int.img
truncate -s 48M "$img"
step "format refuses without confirmation when stdin is not a terminal"
rc=0; "$CK" integrity format "$img" </dev/null 2>"$W/err" || rc=$?
[ "$rc" = 1 ] && grep -q "batch-mode" "$W/err" || fail "format without -q: exit $rc: $(cat "$W/err")"
[ "$(head -c 8 "$img" | tr -d '\0')" = "" ] || fail "a refused format wrote to the image"

step "format, open, mkfs.ext4, files, close, verify"
"$CK" integrity format -q --integrity sha256 "$img" >/dev/null
dev=$("$CK" integrity open --integrity sha256 "$img" e2e-int)
[ -b "$dev" ] || fail "integrity open printed '$dev'"
"$CK" status e2e-int | grep -q "INTEGRITY" || fail "status does not show the integrity device"
mkfs.ext4 -q -b 4096 "$dev"
mkdir -p "$W/mnt"
mount "$dev" "$W/mnt"
head -c 3M /dev/urandom > "$W/mnt/victim"
cp -r "$ROOT/docs" "$W/mnt/"
sync
(cd "$W/mnt" && find . -type f ! -name victim | sort | xargs sha256sum) > "$W/manifest"
umount "$W/mnt"
# After umount: the journal is checkpointed, so the inode's block map on
# disk is the final one (a mounted ext4 may still hold it in the journal).
victim_block=$(debugfs -R "bmap /victim 5" "$dev" 2>/dev/null)
"$CK" integrity close e2e-int
"$CK" integrity verify --integrity sha256 "$img" > "$W/verify.out" || fail "verify after close: $(cat "$W/verify.out")"

step "reopen read-only: the files are there"
dev=$("$CK" integrity open -r --integrity sha256 "$img" e2e-int)
mount -o ro "$dev" "$W/mnt"
(cd "$W/mnt" && sha256sum -c --quiet "$W/manifest") || fail "files differ after reopening"
umount "$W/mnt"
"$CK" close e2e-int

step "a changed byte under a file: I/O error through the device, verify names the sector"
[[ "$victim_block" =~ ^[1-9][0-9]*$ ]] || fail "debugfs found no block for the file: '$victim_block'"
# The ext4 block (4 KiB) is 8 sectors of the provided data; its device
# sector comes from the layout: superblock + journal, then tags, then data.
sector=$(( victim_block * 8 ))
off=$(python3 - "$img" "$sector" <<'PY'
import struct, sys
sb = open(sys.argv[1], 'rb').read(64)
tag, sections = struct.unpack_from('<HI', sb, 10)
L = sb[9]
entry = (8 + 8 + tag + 7) // 8 * 8
per = 504 // entry * 8
section_sectors = per + 8
initial = 8 + sections * section_sectors
run = -(-(tag << L) // 4096) * 4096 // 512
s = int(sys.argv[2])
area, offset = s >> L, s & ((1 << L) - 1)
print(((area << L) + (area + 1) * run + initial + offset) * 512 + 100)
PY
)
# Flip bits of the byte there (writing a fixed value would change nothing when the
# byte already has it: one run in 256 with random file contents).
orig=$(dd if="$img" bs=1 skip="$off" count=1 status=none | od -An -tx1 | tr -d ' \n')
printf "\\x$(printf %02x $(( 0x$orig ^ 0x5a )))" | dd of="$img" bs=1 seek="$off" conv=notrunc status=none
[ "$(dd if="$img" bs=1 skip="$off" count=1 status=none | od -An -tx1 | tr -d ' \n')" != "$orig" ] || fail "the byte at $off did not change"
rc=0; "$CK" integrity verify --integrity sha256 "$img" > "$W/v.out" 2> "$W/v.err" || rc=$?
[ "$rc" = 6 ] && grep -q "first at sector $sector " "$W/v.err" || fail "verify: exit $rc: $(cat "$W/v.err")"
dev=$("$CK" integrity open -r --integrity sha256 "$img" e2e-int)
mount -o ro "$dev" "$W/mnt"
if cat "$W/mnt/victim" > /dev/null 2> "$W/cat.err"; then fail "reading the tampered file succeeded"; fi
grep -qi "input/output error" "$W/cat.err" || fail "expected an I/O error: $(cat "$W/cat.err")"
(cd "$W/mnt" && sha256sum -c --quiet "$W/manifest") || fail "untouched files became unreadable"
st=$("$CK" integrity status e2e-int --json)
grep -q '"integrity_failures": [1-9]' <<< "$st" || fail "status does not count the failed block: $st"
grep -q "\"integrity_last_failure\": $sector\$" <<< "$st" \
  || fail "status does not name sector $sector: $st"
"$CK" integrity status e2e-int | grep -q "failed authentication" || fail "status text says nothing of the failure"
umount "$W/mnt"
"$CK" close e2e-int

step "a wrong algorithm fails every block; a non-integrity file is refused"
rc=0; "$CK" integrity verify "$img" > /dev/null 2> "$W/e" || rc=$?
[ "$rc" = 6 ] && grep -q "check --integrity" "$W/e" || fail "wrong algorithm: exit $rc: $(cat "$W/e")"
head -c 1M /dev/zero > "$W/plain.img"
rc=0; "$CK" integrity open "$W/plain.img" e2e-plain 2> "$W/e" || rc=$?
[ "$rc" = 4 ] && grep -q "integrt" "$W/e" || fail "non-integrity open: exit $rc: $(cat "$W/e")"
[ ! -e "$CRYPTKEEP_RUN_DIR/e2e-plain" ] || fail "a refused open left a state record"
echo "PASS integrity"
