#!/usr/bin/env bash
# The cryptkeep demo on a 256 MiB file-backed LUKS2 volume: installs what it
# needs, builds, then format, open, mkfs, open --mount, write a tree and its
# checksums, close, reopen, verify, close — printing each step.
# Needs root (loop devices, mount). Everything lives in a temp dir that is
# removed on exit, whatever happens.
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
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$w/mnt"
printf 'demo passphrase' > "$w/passphrase"

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
for d in $(seq 1 10); do
  mkdir -p "$w/mnt/dir$d"
  for f in $(seq 1 50); do head -c $(( (d * 7919 + f * 104729) % 200000 )) /dev/urandom > "$w/mnt/dir$d/file$f"; done
done
(cd "$w/mnt" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS)
cp "$w/mnt/SHA256SUMS" "$w/SHA256SUMS"
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
say "done"
