#!/usr/bin/env bash
# A read-only open refuses writes at every layer; a header backup restores
# a destroyed header (ours and cryptsetup's backups, both directions).
source "$(dirname "$0")/lib/common.sh"
command -v cryptsetup >/dev/null || fail "cryptsetup missing: run scripts/install-deps.sh"

printf 'ro passphrase' > "$W/pass"
vol=$W/vol.img mnt=$W/mnt
mkdir -p "$mnt"
mkvol "$vol" 48M "$W/pass"
dev=$("$CK" open "$vol" ro --key-file "$W/pass")
mkfs.ext4 -q -F "$dev"
"$CK" close ro
dev=$("$CK" open "$vol" ro --key-file "$W/pass" --mount "$mnt")
head -c 3000000 /dev/urandom > "$mnt/data.bin"
(cd "$mnt" && sha256sum data.bin) > "$W/sum"
"$CK" close ro

before=$(sha256sum < "$vol")
step "read-only open: status, file system, loop device and FUSE file refuse writes"
dev=$("$CK" open "$vol" ro --key-file "$W/pass" --read-only --mount "$mnt")
"$CK" status ro --json > "$W/st.json"
json_has "$W/st.json" read_only true
[ "$(blockdev --getro "$dev")" = 1 ] || fail "loop device $dev is writable"
(cd "$mnt" && sha256sum -c --quiet "$W/sum") || fail "data unreadable read-only"
if touch "$mnt/new" 2>/dev/null; then fail "wrote a file on a read-only open"; fi
if dd if=/dev/zero of="$dev" bs=4096 count=1 conv=notrunc oflag=direct 2>/dev/null; then fail "wrote to the read-only loop device"; fi
file=$(sed -n 's/^ *"file": "\(.*\)",\?$/\1/p' "$W/st.json")
[ -f "$file" ] || fail "status names no FUSE file ($file)"
if dd if=/dev/zero of="$file" bs=4096 count=1 conv=notrunc 2>/dev/null; then fail "wrote to the read-only FUSE file"; fi
"$CK" close ro
step "the read-only open left the volume byte for byte unchanged"
[ "$(sha256sum < "$vol")" = "$before" ] || fail "volume changed"

step "header backup; a second backup to the same file is refused (exit 5)"
"$CK" header backup "$vol" --header-backup-file "$W/hdr.bak"
[ -s "$W/hdr.bak" ] || fail "empty backup"
[ "$(stat -c %a "$W/hdr.bak")" = 400 ] || fail "backup mode $(stat -c %a "$W/hdr.bak"), want 400"
expect_fail 5 'exists' "$CK" luksHeaderBackup "$vol" --header-backup-file "$W/hdr.bak"
cryptsetup luksDump "$W/hdr.bak" >/dev/null || fail "cryptsetup cannot read our header backup"

step "destroy the header: open fails with exit 4"
dd if=/dev/zero of="$vol" bs=1M count=16 conv=notrunc status=none
expect_fail 4 'not a LUKS' "$CK" open "$vol" ro --key-file "$W/pass"

step "restore our backup: the data is back"
"$CK" header restore "$vol" --header-backup-file "$W/hdr.bak"
"$CK" open "$vol" ro --key-file "$W/pass" --mount "$mnt" >/dev/null
(cd "$mnt" && sha256sum -c --quiet "$W/sum") || fail "data differs after header restore"
"$CK" close ro

step "restoring over a live LUKS header needs confirmation (exit 1 without a terminal)"
expect_fail 1 'confirm|batch-mode' "$CK" header restore "$vol" --header-backup-file "$W/hdr.bak"

step "cryptsetup's backup restored by us, ours restored by cryptsetup"
cryptsetup luksHeaderBackup "$vol" --header-backup-file "$W/cs.bak"
dd if=/dev/zero of="$vol" bs=1M count=16 conv=notrunc status=none
"$CK" luksHeaderRestore "$vol" --header-backup-file "$W/cs.bak" --batch-mode
"$CK" dump "$vol" --dump-volume-key --batch-mode --key-file "$W/pass" >/dev/null || fail "passphrase lost after restoring cryptsetup's backup"
dd if=/dev/zero of="$vol" bs=1M count=16 conv=notrunc status=none
cryptsetup luksHeaderRestore -q "$vol" --header-backup-file "$W/hdr.bak" </dev/null
"$CK" open "$vol" ro --key-file "$W/pass" --mount "$mnt" >/dev/null
(cd "$mnt" && sha256sum -c --quiet "$W/sum") || fail "data differs after cryptsetup restored our backup"
"$CK" close ro
echo "PASS readonly_header"
