#!/usr/bin/env bash
# End to end through the FUSE file and the loop device, LUKS2 and LUKS1:
# format, open, mkfs.ext4, open --mount, write ~3000 files + a sha256
# manifest, close, reopen, verify the manifest, e2fsck -fn clean, close.
source "$(dirname "$0")/lib/common.sh"

printf 'correct horse battery staple' > "$W/pass"
for type in luks2 luks1; do
  vol=$W/$type.img name=rt-$type mnt=$W/mnt-$type
  mkdir -p "$mnt"
  step "$type: format"
  mkvol "$vol" 256M "$W/pass" --type "$type"
  step "$type: open, mkfs.ext4"
  dev=$("$CK" open "$vol" "$name" --key-file "$W/pass")
  [ -b "$dev" ] || fail "open printed '$dev', not a block device"
  mkfs.ext4 -q -F "$dev"
  "$CK" close "$name"
  [ ! -e "$CRYPTKEEP_RUN_DIR/$name" ] || fail "close left $CRYPTKEEP_RUN_DIR/$name"
  step "$type: open --mount, write the tree"
  dev=$("$CK" open "$vol" "$name" --key-file "$W/pass" --mount "$mnt")
  mountpoint -q "$mnt" || fail "$mnt not mounted"
  make_tree "$mnt/tree" 3000 42
  manifest "$mnt" "$W/manifest-$type"
  n=$(wc -l < "$W/manifest-$type")
  [ "$n" -ge 3000 ] || fail "manifest has $n entries"
  "$CK" status "$name" --json > "$W/status.json"
  json_has "$W/status.json" type "\"$type\""
  json_has "$W/status.json" daemon_alive true
  json_has "$W/status.json" device "\"$dev\""
  step "$type: close"
  "$CK" close "$name"
  mountpoint -q "$mnt" && fail "$mnt still mounted after close"
  losetup "$dev" >/dev/null 2>&1 && [ -n "$(losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep "$CRYPTKEEP_RUN_DIR" || true)" ] && fail "$dev still attached"
  # Written with the accelerated backend, read back with the portable one.
  step "$type: reopen (--crypto-backend portable), verify $n files"
  dev=$("$CK" open "$vol" "$name" --key-file "$W/pass" --mount "$mnt" --crypto-backend portable)
  (cd "$mnt" && sha256sum -c --quiet "$W/manifest-$type") || fail "manifest mismatch after reopen"
  umount "$mnt"
  step "$type: e2fsck -fn $dev"
  e2fsck -fn "$dev" || fail "e2fsck found problems"
  "$CK" close "$name"
  rm -f "$vol"
done
echo "PASS roundtrip"
