#!/usr/bin/env bash
# The cryptkeep demo: installs what it needs, builds, then
# - a 256 MiB file-backed LUKS2 volume: format, open, mkfs, open --mount,
#   write a tree and its checksums, close, reopen, verify, close;
# - an encrypted directory (`cryptkeep fs`, gocryptfs's format): init, mount,
#   write a tree and its checksums, umount, remount with the keys in the
#   keep, verify, umount, and gocryptfs itself reads it back;
# printing each step. Needs root (loop devices, mount). Everything lives in
# a temp dir that is removed on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

say "installing system packages (scripts/install-deps.sh)"
scripts/install-deps.sh
say "building cryptkeep (cargo build --release)"
cargo build --release -p cryptkeep-cli
ck=$root/target/release/cryptkeep

w=$(mktemp -d /tmp/cryptkeep-demo.XXXXXX)
export CRYPTKEEP_RUN_DIR=$w/run
cleanup() {
  set +e
  "$ck" close demo >/dev/null 2>&1
  mountpoint -q "$w/mnt" && umount "$w/mnt"
  for m in "$w/plain" "$w/gocryptfs"; do
    mountpoint -q "$m" && { "$ck" fs umount "$m" || fusermount3 -u "$m" || umount -l "$m"; } >/dev/null 2>&1
  done
  rm -rf "$w"
}
trap cleanup EXIT
# write_tree DIR SUMS: 500 files of random data in 10 directories, and the
# checksums of all of them in DIR/SHA256SUMS and SUMS.
write_tree() {
  local d f
  for d in $(seq 1 10); do
    mkdir -p "$1/dir$d"
    for f in $(seq 1 50); do head -c $(( (d * 7919 + f * 104729) % 200000 )) /dev/urandom > "$1/dir$d/file$f"; done
  done
  (cd "$1" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS)
  cp "$1/SHA256SUMS" "$2"
}
mkdir -p "$w/mnt" "$w/cipher" "$w/plain" "$w/gocryptfs"
printf 'demo passphrase' > "$w/passphrase"
printf 'demo password\n' > "$w/password"

say "format: a new 256 MiB image, LUKS2, aes-xts-plain64 512-bit, 4096-byte sectors"
echo "(the demo uses a cheap argon2id — 4 passes, 64 MiB — so it is quick;"
echo " without --pbkdf-* options cryptkeep calibrates argon2id to 2 s and 1 GiB like cryptsetup)"
run "$ck" format "$w/volume.img" --size 256M --pbkdf argon2id --pbkdf-force-iterations 4 \
  --pbkdf-memory 65536 --key-file "$w/passphrase" --batch-mode
run "$ck" dump "$w/volume.img" > "$w/dump.txt"
head -n 25 "$w/dump.txt"

say "open: the decrypted data becomes a FUSE file on a loop device"
dev=$("$ck" open "$w/volume.img" demo --key-file "$w/passphrase")
echo "device: $dev"
run "$ck" status demo
say "mkfs.ext4 on $dev, then close"
run mkfs.ext4 -q "$dev"
run "$ck" close demo

say "open --mount: the file system appears on $w/mnt"
run "$ck" open "$w/volume.img" demo --key-file "$w/passphrase" --mount "$w/mnt"
say "write a tree of 500 files and their checksums"
write_tree "$w/mnt" "$w/SHA256SUMS"
du -sh "$w/mnt"
say "close: unmount, detach, stop the daemon, wipe the key"
run "$ck" close demo
run "$ck" status

say "the image holds only ciphertext: searching it for a known file name finds nothing"
if grep -q 'SHA256SUMS' "$w/volume.img"; then echo "found plaintext!"; exit 1; else echo "not found (good)"; fi

say "reopen and verify every checksum"
run "$ck" open "$w/volume.img" demo --key-file "$w/passphrase" --mount "$w/mnt"
(cd "$w/mnt" && sha256sum -c --quiet "$w/SHA256SUMS") && echo "all $(wc -l < "$w/SHA256SUMS") files verified"
run "$ck" close demo

say "cryptkeep fs: an encrypted directory in gocryptfs's format"
echo "(the demo uses scrypt cost 2^10 so it is quick; the default, like gocryptfs's, is 2^16)"
run "$ck" fs init "$w/cipher" --scryptn 10 --passfile "$w/password"
run "$ck" fs info "$w/cipher"
say "fs mount: the plaintext view appears on $w/plain"
run "$ck" fs mount "$w/cipher" "$w/plain" --passfile "$w/password"
say "write a tree of 500 files and their checksums"
write_tree "$w/plain" "$w/FS_SHA256SUMS"
du -sh "$w/plain"
say "fs umount: unmount and wait for the daemon to exit"
run "$ck" fs umount "$w/plain"
say "the cipher directory holds only encrypted names and contents"
ls "$w/cipher" | sed -n 1,5p
if grep -rq 'SHA256SUMS' "$w/cipher"; then echo "found plaintext!"; exit 1; else echo "no plaintext name found (good)"; fi

say "remount with --keep: the keys live in a separate, sandboxed key process"
run "$ck" fs mount "$w/cipher" "$w/plain" --passfile "$w/password" --keep
say "verify every checksum"
(cd "$w/plain" && sha256sum -c --quiet "$w/FS_SHA256SUMS") && echo "all $(wc -l < "$w/FS_SHA256SUMS") files verified"
run "$ck" fs umount "$w/plain"

say "gocryptfs reads the same directory"
run gocryptfs -q -nosyslog -ro -passfile "$w/password" "$w/cipher" "$w/gocryptfs"
(cd "$w/gocryptfs" && sha256sum -c --quiet "$w/FS_SHA256SUMS") && echo "all $(wc -l < "$w/FS_SHA256SUMS") files verified through gocryptfs"
run fusermount3 -u "$w/gocryptfs"
say "done"
