#!/usr/bin/env bash
# LUKS2 authenticated volumes (format --integrity, as cryptsetup luksFormat
# --integrity) through the command line, for each cipher (aes-xts-plain64
# with hmac-sha256, aegis128-random, chacha20-random, aes-gcm-random; 512-
# and 4096-byte sectors; the keep as a process and inline):
# - format, open, ext4 and a tree of files, close; reopened read-only the
#   files match their sha256 manifest and e2fsck -fn is clean;
# - one byte changed in the image under a file (the offset computed from
#   the dm-integrity layout at the segment offset): exactly that sector
#   fails (reading the whole device, status --json counts one failure at
#   that sector, the daemon log names it), reading the file is EIO, the
#   other files still read; the byte put back, everything reads again;
# - cryptsetup luksDump accepts the image and shows its integrity mode.
# Then: a wrong passphrase is refused (exit 2) and writes nothing;
# --allow-discards is refused with a clear message; with
# --integrity-no-wipe a never-written sector is EIO until written; a
# header whose integrity superblock (magic "integrt" at the data offset)
# is damaged is refused at open with a one-line error, writing nothing.
source "$(dirname "$0")/lib/common.sh"

command -v cryptsetup >/dev/null || fail "cryptsetup missing: run scripts/install-deps.sh"
command -v debugfs >/dev/null || fail "debugfs missing: run scripts/install-deps.sh"
printf 'integrity passphrase' > "$W/pass"
printf 'not the passphrase' > "$W/wrong"
mkdir -p "$W/mnt"
DATA_OFFSET=$((16 << 20))   # the LUKS2 data offset cryptkeep (and cryptsetup) use

status_json() { "$CK" status "$1" --json > "$W/st.json" || fail "status $1 failed"; }
# json_num KEY: the number (or null) after "KEY": in $W/st.json.
json_num() { sed -n "s/^  \"$1\": \\([0-9a-z]*\\),\\{0,1\\}\$/\\1/p" "$W/st.json"; }

# image_offset IMG SECTOR: the byte of IMG holding byte 0 of 512-byte data
# sector SECTOR of the integrity device at DATA_OFFSET (docs/format/integrity.md).
image_offset() {
  python3 - "$1" "$2" "$DATA_OFFSET" <<'PY'
import struct, sys
f = open(sys.argv[1], 'rb'); base = int(sys.argv[3]); f.seek(base)
sb = f.read(64)
assert sb[:8] == b'integrt\0', sb[:8]
L = sb[9]
tag, sections = struct.unpack_from('<HI', sb, 10)
spb = 1 << sb[28]
entry = (8 + 8 * spb + tag + 7) // 8 * 8
per = 504 // entry * 8
initial = 8 + sections * (8 + per * spb)
run = -(-(tag * ((1 << L) // spb)) // 4096) * 4096 // 512
s = int(sys.argv[2])
area, offset = s >> L, s & ((1 << L) - 1)
print(base + ((area << L) + (area + 1) * run + initial + offset) * 512)
PY
}

# read_all DEV: reads the whole device with direct I/O; prints how many reads failed.
read_all() {
  # (status=none would also hide the read errors)
  dd if="$1" of=/dev/null bs=1M iflag=direct conv=noerror 2> "$W/dd.err" || true
  grep -ci "input/output error" "$W/dd.err" || true
}

# check_mode LABEL KEEP SECTOR FORMAT-OPTIONS...
check_mode() {
  local label=$1 keep=$2 ss=$3; shift 3
  local img=$W/$label.img name=ck-$label
  step "$label ($*, $ss-byte sectors, keep $keep): format, open, ext4, files"
  mkvol "$img" 64M "$W/pass" --type luks2 --sector-size "$ss" "$@" > /dev/null
  cryptsetup luksDump "$img" > "$W/dump" 2>&1 || { cat "$W/dump"; fail "$label: cryptsetup luksDump refused the image"; }
  grep -Eq "^[[:space:]]+integrity: +[a-z]" "$W/dump" || { cat "$W/dump"; fail "$label: luksDump shows no integrity"; }
  grep -Eq "^[[:space:]]+sector: +$ss " "$W/dump" || { cat "$W/dump"; fail "$label: luksDump shows no $ss-byte sectors"; }
  dev=$("$CK" open "$img" "$name" --key-file "$W/pass" --keep "$keep")
  [ -b "$dev" ] || fail "$label: open printed '$dev'"
  status_json "$name"
  json_has "$W/st.json" integrity '"[a-z0-9()]+"'
  json_has "$W/st.json" integrity_failures 0
  [ "$(blockdev --getss "$dev")" = "$ss" ] || fail "$label: the loop device has $(blockdev --getss "$dev")-byte sectors, not $ss"
  mkfs.ext4 -q -b 4096 "$dev"
  mount "$dev" "$W/mnt"
  make_tree "$W/mnt/tree" 60 "$ss"
  head -c 1M /dev/urandom > "$W/mnt/victim"
  sync
  manifest "$W/mnt" "$W/all.sha"
  grep -v ' ./victim$' "$W/all.sha" > "$W/others.sha"
  [ "$(wc -l < "$W/others.sha")" -ge 60 ] || fail "$label: the manifest lists too few files"
  block=$(debugfs -R "bmap /victim 100" "$dev" 2>/dev/null)
  [[ "$block" =~ ^[0-9]+$ ]] && [ "$block" -gt 0 ] || fail "$label: debugfs found no block of /victim: '$block'"
  umount "$W/mnt"
  "$CK" close "$name"

  step "$label: reopen read-only: the manifest checks out, e2fsck is clean"
  dev=$("$CK" open "$img" "$name" --key-file "$W/pass" --keep "$keep" --read-only)
  mount -o ro "$dev" "$W/mnt"
  (cd "$W/mnt" && sha256sum -c --quiet "$W/all.sha") || fail "$label: files differ after reopening"
  umount "$W/mnt"
  e2fsck -fn "$dev" > "$W/fsck.out" 2>&1 || { cat "$W/fsck.out"; fail "$label: e2fsck found errors"; }
  "$CK" close "$name"

  # The last writes are still in the journal, whose copy wins over the one
  # in place (read-only opens read through it, read-write opens replay it);
  # a read-write open replays it and starts a fresh one, so /victim's data
  # then lives only in place.
  "$CK" open "$img" "$name" --key-file "$W/pass" --keep "$keep" > /dev/null
  "$CK" close "$name"

  step "$label: one byte changed under /victim: that sector fails, nothing else"
  local byte=$(( block * 4096 + 1000 ))        # in the decrypted data
  local sector=$(( byte / ss ))                 # in sector-size units
  local off; off=$(image_offset "$img" $(( byte / 512 )))
  off=$(( off + byte % 512 ))
  orig=$(dd if="$img" bs=1 skip="$off" count=1 status=none | od -An -tx1 | tr -d ' ')
  before=$(sha256sum < "$img")
  printf "\\x$(printf %02x $(( 0x$orig ^ 0x5a )))" | dd of="$img" bs=1 seek="$off" conv=notrunc status=none
  [ "$(sha256sum < "$img")" != "$before" ] || fail "$label: the byte did not change"
  dev=$("$CK" open "$img" "$name" --key-file "$W/pass" --keep "$keep" --read-only)
  errs=$(read_all "$dev")
  [ "$errs" = 1 ] || { cat "$W/dd.err"; fail "$label: reading the device failed $errs times, expected once"; }
  status_json "$name"
  [ "$(json_num integrity_failures)" = 1 ] || { cat "$W/st.json"; fail "$label: expected exactly one failing sector"; }
  [ "$(json_num integrity_last_failure)" = "$sector" ] || { cat "$W/st.json"; fail "$label: the failing sector is not $sector"; }
  grep -q "first at sector $sector " "$CRYPTKEEP_RUN_DIR/$name/daemon.log" \
    || { cat "$CRYPTKEEP_RUN_DIR/$name/daemon.log"; fail "$label: the daemon log does not name sector $sector"; }
  mount -o ro "$dev" "$W/mnt"
  if cat "$W/mnt/victim" > /dev/null 2> "$W/cat.err"; then fail "$label: reading the changed file succeeded"; fi
  grep -qi "input/output error" "$W/cat.err" || fail "$label: expected EIO: $(cat "$W/cat.err")"
  (cd "$W/mnt" && sha256sum -c --quiet "$W/others.sha") || fail "$label: untouched files became unreadable"
  umount "$W/mnt"
  status_json "$name"
  [ "$(json_num integrity_failures)" -ge 2 ] || { cat "$W/st.json"; fail "$label: reading the file counted no failure"; }
  "$CK" close "$name"

  step "$label: the byte put back: everything reads again"
  printf "\\x$orig" | dd of="$img" bs=1 seek="$off" conv=notrunc status=none
  [ "$(sha256sum < "$img")" = "$before" ] || fail "$label: the image differs after putting the byte back"
  dev=$("$CK" open "$img" "$name" --key-file "$W/pass" --keep "$keep" --read-only)
  errs=$(read_all "$dev")
  [ "$errs" = 0 ] || { cat "$W/dd.err"; fail "$label: reads still fail after the byte was put back"; }
  mount -o ro "$dev" "$W/mnt"
  (cd "$W/mnt" && sha256sum -c --quiet "$W/all.sha") || fail "$label: files differ after the byte was put back"
  umount "$W/mnt"
  status_json "$name"
  json_has "$W/st.json" integrity_failures 0
  "$CK" close "$name"
  cryptsetup luksDump "$img" > /dev/null 2>&1 || fail "$label: cryptsetup luksDump refuses the image after use"
}

check_mode hmac process 512 -c aes-xts-plain64 --integrity hmac-sha256
check_mode aegis process 4096 -c aegis128-random --key-size 128 --integrity aead
check_mode chacha inline 4096 -c chacha20-random --integrity poly1305
check_mode gcm process 512 -c aes-gcm-random --integrity aead

img=$W/gcm.img
step "a wrong passphrase is refused (exit 2) and writes nothing"
before=$(sha256sum < "$img")
for keep in process inline; do
  expect_fail 2 "passphrase|key" "$CK" open "$img" ck-wrong --key-file "$W/wrong" --keep "$keep"
  [ ! -e "$CRYPTKEEP_RUN_DIR/ck-wrong" ] || fail "a refused open ($keep) left a state record"
done
[ "$(sha256sum < "$img")" = "$before" ] || fail "a refused open changed the image"

step "--allow-discards is refused for an authenticated volume"
expect_fail 1 "authenticated volume cannot pass discards" "$CK" open "$img" ck-disc --key-file "$W/pass" --allow-discards
[ ! -e "$CRYPTKEEP_RUN_DIR/ck-disc" ] || fail "a refused open left a state record"
[ "$(sha256sum < "$img")" = "$before" ] || fail "a refused open changed the image"

step "--integrity-no-wipe: a never-written sector is EIO until written"
nw=$W/nowipe.img
mkvol "$nw" 32M "$W/pass" --type luks2 -c aes-xts-plain64 --integrity hmac-sha256 --integrity-no-wipe > /dev/null
dev=$("$CK" open "$nw" ck-nw --key-file "$W/pass")
rc=0; dd if="$dev" of=/dev/null bs=4096 skip=100 count=1 iflag=direct status=none 2> "$W/dd.err" || rc=$?
[ $rc -ne 0 ] && grep -qi "input/output error" "$W/dd.err" || fail "reading a never-written sector: exit $rc: $(cat "$W/dd.err")"
status_json ck-nw
[ "$(json_num integrity_failures)" -ge 1 ] || { cat "$W/st.json"; fail "the never-written sector was not counted"; }
head -c 4096 /dev/urandom > "$W/blk"
dd if="$W/blk" of="$dev" bs=4096 seek=100 oflag=direct,sync conv=notrunc status=none || fail "writing a never-written sector failed"
dd if="$dev" of="$W/blk.back" bs=4096 skip=100 count=1 iflag=direct status=none || fail "reading a written sector failed"
cmp -s "$W/blk" "$W/blk.back" || fail "a written sector reads back different"
"$CK" close ck-nw
dev=$("$CK" open "$nw" ck-nw --key-file "$W/pass" --read-only)
dd if="$dev" of="$W/blk.back" bs=4096 skip=100 count=1 iflag=direct status=none || fail "reading a written sector after reopening failed"
cmp -s "$W/blk" "$W/blk.back" || fail "a written sector reads back different after reopening"
"$CK" close ck-nw

step "a damaged integrity superblock is refused at open, writing nothing"
m=$(dd if="$img" bs=1 skip="$DATA_OFFSET" count=8 status=none | tr -d '\0')
[ "$m" = integrt ] || fail "no integrity superblock at byte $DATA_OFFSET: '$m'"
printf 'I' | dd of="$img" bs=1 seek="$DATA_OFFSET" conv=notrunc status=none
before=$(sha256sum < "$img")
for keep in process inline; do
  # Exit 6 (corrupt), naming where the superblock was looked for.
  expect_fail 6 "integrt.* at byte $DATA_OFFSET" "$CK" open "$img" ck-sb --key-file "$W/pass" --keep "$keep"
  [ "$(wc -l < "$W/err")" = 1 ] || { cat "$W/err"; fail "open with a damaged integrity superblock ($keep): not a one-line error"; }
  [ ! -e "$CRYPTKEEP_RUN_DIR/ck-sb" ] || fail "a refused open left a state record"
done
[ "$(sha256sum < "$img")" = "$before" ] || fail "a refused open changed the image"
echo "PASS luks2_integrity"
