#!/usr/bin/env bash
# cryptkeep fs against gocryptfs 2.3 as the oracle: trees written through a
# `cryptkeep fs mount` read back identically through gocryptfs (and the
# reverse), for each format variant; `gocryptfs -fsck` is clean on what we
# wrote; fs passwd/info/fsck; wrong passwords change nothing; a flipped
# ciphertext byte is found by `fs fsck`; reverse mode decrypts with gocryptfs.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
for t in gocryptfs diff cmp python3; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done

echo pw-one > "$W/pf"
echo pw-two > "$W/pf2"
echo wrong > "$W/bad"

# tree_snapshot DIR OUT: every path with type and mode, symlink targets, content hashes.
tree_snapshot() {
  (cd "$1" && find . -mindepth 1 ! -type l -printf '%y %m %p\n' | sort
   cd "$1" && find . -type l -printf '%y %p -> %l\n' | sort
   cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) > "$2"
}

# The plaintext tree: small, empty, >4 KiB, multi-block and sparse-ish files,
# a subdir, a symlink, a long name, an odd name.
SRC=$W/src
mkdir -p "$SRC/sub/deeper"
echo hello > "$SRC/small.txt"
: > "$SRC/empty"
head -c 10000 /dev/urandom > "$SRC/ten-k.bin"
head -c 300000 /dev/urandom > "$SRC/sub/big.bin"
head -c 4096 /dev/zero > "$SRC/sub/zero-block"
LONG=$(printf 'L%.0s' $(seq 1 200))
echo long > "$SRC/sub/$LONG"
echo odd > "$SRC/sub/deeper/name with spaces & ü"
ln -s ../small.txt "$SRC/sub/link"
ln "$SRC/ten-k.bin" "$SRC/sub/hardlink"
tree_snapshot "$SRC" "$W/src.snap"

# ck_write CIPHERDIR: mount with cryptkeep, copy the tree in, unmount.
ck_write() {
  local mp=$W/mnt-ck
  mkdir -p "$mp"
  "$CK" fs mount "$1" "$mp" --passfile "$W/pf" </dev/null
  cp -a "$SRC/." "$mp/"
  python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.note", b"kept\x00value")' "$mp/small.txt"
  "$CK" fs umount "$mp"
  ! grep -q " $mp " /proc/self/mounts || fail "$mp still mounted after fs umount"
}

# go_check CIPHERDIR PASSFILE: gocryptfs mounts it read-only; the tree matches.
go_check() {
  local mp=$W/mnt-go
  mkdir -p "$mp"
  gocryptfs -q -nosyslog -ro -passfile "$2" "$1" "$mp"
  tree_snapshot "$mp" "$W/go.snap"
  [ "$(stat -c %h "$mp/ten-k.bin")" = 2 ] || { fusermount3 -u "$mp"; fail "hard link lost in $1"; }
  x=$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.note"))' "$mp/small.txt" 2>&1) || true
  fusermount3 -u "$mp"
  [ "$x" = "b'kept\\x00value'" ] || fail "xattr not readable by gocryptfs in $1: $x"
  diff -u "$W/src.snap" "$W/go.snap" || fail "gocryptfs sees a different tree in $1"
}

step "init shows the master key and the config; info prints the flags"
"$CK" fs init "$W/c" --scryptn 10 --passfile "$W/pf" </dev/null > "$W/init.out"
grep -q 'gocryptfs.conf' "$W/init.out" || fail "fs init does not say where the config is"
MK=$(awk '/master key is/ {getline; getline; print $1}' "$W/init.out")
[ "${#MK}" = 71 ] || fail "no master key in fs init output: $(cat "$W/init.out")"
"$CK" fs info "$W/c" > "$W/info"
grep -Eq '^FeatureFlags: HKDF GCMIV128 DirIV EMENames LongNames Raw64$' "$W/info" || { cat "$W/info"; fail "fs info flags"; }
grep -Eq 'N=1024 R=8 P=1 KeyLen=32' "$W/info" || { cat "$W/info"; fail "fs info scrypt"; }
grep -Eq '^Version: +2$' "$W/info" || fail "fs info version"
expect_fail 5 'not empty' "$CK" fs init "$W/c" --scryptn 10 --passfile "$W/pf"

step "cryptkeep writes, gocryptfs reads; gocryptfs -fsck is clean"
ck_write "$W/c"
go_check "$W/c" "$W/pf"
gocryptfs -fsck -q -passfile "$W/pf" "$W/c" || fail "gocryptfs -fsck found problems in what cryptkeep wrote"
"$CK" fs fsck "$W/c" --passfile "$W/pf" > "$W/fsck.out" || fail "fs fsck on a clean dir"
grep -q 'no problems' "$W/fsck.out" || fail "fs fsck on a clean dir says: $(cat "$W/fsck.out")"

step "mount with --masterkey and --ro"
mkdir -p "$W/mnt-mk"
"$CK" fs mount "$W/c" "$W/mnt-mk" --masterkey "$MK" --ro </dev/null
cmp "$SRC/sub/big.bin" "$W/mnt-mk/sub/big.bin"
if touch "$W/mnt-mk/new" 2>/dev/null; then fail "--ro mount accepted a write"; fi
expect_fail 5 'already mounted' "$CK" fs mount "$W/c" "$W/mnt-mk" --passfile "$W/pf"
"$CK" fs umount "$W/mnt-mk"
expect_fail 4 'nothing is mounted' "$CK" fs umount "$W/mnt-mk"

for v in --aessiv --xchacha --plaintextnames --deterministic-names "--longnamemax 62"; do
  step "variant $v: cryptkeep writes, gocryptfs reads, -fsck clean"
  d=$W/c$(echo "$v" | tr -dc 'a-z0-9')
  # shellcheck disable=SC2086
  "$CK" fs init "$d" --scryptn 10 --passfile "$W/pf" $v </dev/null >/dev/null
  ck_write "$d"
  go_check "$d" "$W/pf"
  gocryptfs -fsck -q -passfile "$W/pf" "$d" || fail "gocryptfs -fsck ($v)"
done
"$CK" fs info "$W/cplaintextnames" > "$W/info"
grep -q '^FeatureFlags:.*PlaintextNames' "$W/info" || fail "fs info lacks PlaintextNames"

step "gocryptfs writes, cryptkeep reads"
mkdir -p "$W/g"
gocryptfs -q -init -scryptn 10 -passfile "$W/pf" "$W/g" >/dev/null
mkdir -p "$W/mnt-go" "$W/mnt-ck"
gocryptfs -q -nosyslog -passfile "$W/pf" "$W/g" "$W/mnt-go"
cp -a "$SRC/." "$W/mnt-go/"
fusermount3 -u "$W/mnt-go"
"$CK" fs mount "$W/g" "$W/mnt-ck" --ro --extpass "cat $W/pf" </dev/null
tree_snapshot "$W/mnt-ck" "$W/ck.snap"
"$CK" fs umount "$W/mnt-ck"
diff -u "$W/src.snap" "$W/ck.snap" || fail "cryptkeep sees a different tree in gocryptfs's dir"
"$CK" fs fsck "$W/g" --passfile "$W/pf" >/dev/null || fail "fs fsck on gocryptfs's clean dir"

step "foreground mount: SIGTERM unmounts; a busy umount is exit 5"
"$CK" fs mount --foreground "$W/c" "$W/mnt-ck" --passfile "$W/pf" </dev/null 2>"$W/fg.err" &
fg=$!
for _ in $(seq 100); do grep -q " $W/mnt-ck " /proc/self/mounts && break; sleep 0.1; done
cmp "$SRC/small.txt" "$W/mnt-ck/small.txt"
kill -TERM "$fg"
wait "$fg" || fail "foreground mount exited $? after SIGTERM: $(cat "$W/fg.err")"
! grep -q " $W/mnt-ck " /proc/self/mounts || fail "still mounted after SIGTERM"
"$CK" fs mount "$W/c" "$W/mnt-ck" --passfile "$W/pf" </dev/null >/dev/null
exec 9<"$W/mnt-ck/small.txt"
expect_fail 5 'busy' "$CK" fs umount "$W/mnt-ck"
exec 9<&-
"$CK" fs umount "$W/mnt-ck"
[ -z "$(ls "$CRYPTKEEP_RUN_DIR/fs")" ] || fail "run files left: $(ls "$CRYPTKEEP_RUN_DIR/fs")"

step "wrong password: exit 2, nothing changed"
manifest "$W/c" "$W/before"
cp "$W/c/gocryptfs.conf" "$W/conf.before"
expect_fail 2 'password does not unlock' "$CK" fs mount "$W/c" "$W/mnt-ck" --passfile "$W/bad"
! grep -q " $W/mnt-ck " /proc/self/mounts || fail "mounted with a wrong password"
expect_fail 2 'password does not unlock' "$CK" fs fsck "$W/c" --passfile "$W/bad"
expect_fail 2 'password does not unlock' "$CK" fs passwd "$W/c" --passfile "$W/bad" --new-passfile "$W/pf2"
expect_fail 2 'password does not unlock' "$CK" fs mount "$W/c" "$W/mnt-ck" --foreground --passfile "$W/bad"
manifest "$W/c" "$W/after"
cmp "$W/before" "$W/after" || fail "a wrong password changed the cipher dir"
cmp "$W/conf.before" "$W/c/gocryptfs.conf" || fail "a wrong password changed the config"
expect_fail 4 'not an existing directory' "$CK" fs mount "$W/nope" "$W/mnt-ck" --passfile "$W/pf"
expect_fail 4 'gocryptfs.conf' "$CK" fs info "$W/src"

step "passwd: the new password works in gocryptfs, the old one no longer does"
"$CK" fs passwd "$W/c" --passfile "$W/pf" --new-passfile "$W/pf2" </dev/null >/dev/null
go_check "$W/c" "$W/pf2"
expect_fail 2 'password' "$CK" fs fsck "$W/c" --passfile "$W/pf"
"$CK" fs passwd "$W/c" --passfile "$W/pf2" --new-passfile "$W/pf" </dev/null >/dev/null

step "fs fsck finds a flipped ciphertext byte, names the file, changes nothing"
victim=$(find "$W/c" -type f -size +100k | head -n1)
[ -n "$victim" ] || fail "no big cipher file found"
# invert the byte (writing a constant would change nothing 1 time in 256)
old_byte=$(od -An -tu1 -j5000 -N1 "$victim" | tr -d ' ')
printf "\\x$(printf %02x $((old_byte ^ 0xff)))" | dd of="$victim" bs=1 seek=5000 conv=notrunc status=none
[ "$(od -An -tu1 -j5000 -N1 "$victim" | tr -d ' ')" != "$old_byte" ] || fail "the byte flip did not take"
sha_before=$(sha256sum "$victim")
expect_fail 6 "$(basename "$victim")" "$CK" fs fsck "$W/c" --passfile "$W/pf"
grep -q 'block 1 .*plaintext path: sub/big.bin' "$W/err" || { cat "$W/err"; fail "fs fsck does not name the damaged block and file"; }
[ "$(sha256sum "$victim")" = "$sha_before" ] || fail "fs fsck changed the damaged file"
if gocryptfs -fsck -q -passfile "$W/pf" "$W/c" 2>/dev/null; then fail "gocryptfs -fsck missed the flipped byte"; fi

step "fs fsck reports a deleted gocryptfs.diriv; a bad config is exit 6"
cp -a "$W/c" "$W/cbad"
sub=$(find "$W/cbad" -mindepth 2 -name gocryptfs.diriv | head -n1)
rm "$sub"
expect_fail 6 'gocryptfs.diriv' "$CK" fs fsck "$W/cbad" --passfile "$W/pf"
grep -q "gocryptfs.diriv.*plaintext path: sub" "$W/err" || fail "fs fsck does not report the missing diriv"
sed -i 's/"HKDF",/"HKDF",\n\t\t"NoSuchFlag",/' "$W/cbad/gocryptfs.conf"
expect_fail 6 'unknown feature flag' "$CK" fs mount "$W/cbad" "$W/mnt-ck" --passfile "$W/pf"
echo '{ broken' > "$W/cbad/gocryptfs.conf"
expect_fail 6 'not a valid gocryptfs config' "$CK" fs info "$W/cbad"

step "reverse mode: cryptkeep's ciphertext view decrypts with gocryptfs"
cp -a "$SRC" "$W/plain"
"$CK" fs init --reverse "$W/plain" --scryptn 10 --passfile "$W/pf" </dev/null >/dev/null
"$CK" fs info --reverse "$W/plain" > "$W/info"
grep -q '^FeatureFlags:.*AESSIV' "$W/info" || fail "reverse config is not AES-SIV"
mkdir -p "$W/rv" "$W/mnt-go"
"$CK" fs mount --reverse "$W/plain" "$W/rv" --passfile "$W/pf" </dev/null
rm "$W/plain/.gocryptfs.reverse.conf.bak" 2>/dev/null || true
if [ -f "$W/rv/gocryptfs.conf" ]; then
  gocryptfs -q -nosyslog -ro -passfile "$W/pf" "$W/rv" "$W/mnt-go"
else
  gocryptfs -q -nosyslog -ro -passfile "$W/pf" -config "$W/plain/.gocryptfs.reverse.conf" "$W/rv" "$W/mnt-go"
fi
tree_snapshot "$W/mnt-go" "$W/rgo.snap"
fusermount3 -u "$W/mnt-go"
"$CK" fs umount "$W/rv"
grep -v 'gocryptfs.reverse.conf' "$W/rgo.snap" > "$W/rgo2.snap" || true
diff -u "$W/src.snap" "$W/rgo2.snap" || fail "gocryptfs decrypts cryptkeep's reverse view differently"

step "reverse mode: gocryptfs -reverse's view decrypts with cryptkeep"
cp -a "$SRC" "$W/plain2"
gocryptfs -q -init -reverse -scryptn 10 -passfile "$W/pf" "$W/plain2" >/dev/null
mkdir -p "$W/rv2"
gocryptfs -q -nosyslog -reverse -passfile "$W/pf" "$W/plain2" "$W/rv2"
"$CK" fs mount "$W/rv2" "$W/mnt-ck" --passfile "$W/pf" </dev/null >/dev/null
tree_snapshot "$W/mnt-ck" "$W/rck.snap"
"$CK" fs umount "$W/mnt-ck"
fusermount3 -u "$W/rv2"
grep -v 'gocryptfs.reverse.conf' "$W/rck.snap" > "$W/rck2.snap" || true
diff -u "$W/src.snap" "$W/rck2.snap" || fail "cryptkeep decrypts gocryptfs's reverse view differently"

step "passwd on a reverse config (made by gocryptfs); the view still mounts"
"$CK" fs passwd --reverse "$W/plain2" --passfile "$W/pf" --new-passfile "$W/pf2" </dev/null >/dev/null
"$CK" fs mount --reverse "$W/plain2" "$W/rv2" --passfile "$W/pf2" </dev/null >/dev/null
gocryptfs -q -nosyslog -ro -passfile "$W/pf2" "$W/rv2" "$W/mnt-go"
cmp "$SRC/sub/big.bin" "$W/mnt-go/sub/big.bin" || { fusermount3 -u "$W/mnt-go"; fail "reverse view after passwd"; }
fusermount3 -u "$W/mnt-go"
"$CK" fs umount "$W/rv2"

step "transport: FUSE over io_uring when the kernel offers it, /dev/fuse with --no-io-uring"
# uring_queues MOUNTPOINT: how many io_uring queue threads its daemon runs.
uring_queues() {
  local pid
  pid=$(cat "$CRYPTKEEP_RUN_DIR/fs/${1//\//%2F}.pid") || fail "no pid file for $1"
  grep -lx 'ck-uring-[0-9]*' /proc/"$pid"/task/*/comm 2>/dev/null | wc -l
}
C=$W/c-transport
mkdir -p "$C" "$W/mnt-t"
"$CK" fs init "$C" --scryptn 10 --passfile "$W/pf" </dev/null >/dev/null
"$CK" fs mount "$C" "$W/mnt-t" --passfile "$W/pf" --no-io-uring </dev/null >/dev/null
[ "$(uring_queues "$W/mnt-t")" = 0 ] || fail "--no-io-uring still runs io_uring queues"
cp "$SRC/sub/big.bin" "$W/mnt-t/"
"$CK" fs umount "$W/mnt-t"
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
  "$CK" fs mount "$C" "$W/mnt-t" --passfile "$W/pf" </dev/null >/dev/null
  [ "$(uring_queues "$W/mnt-t")" -ge 1 ] || fail "the kernel offers io_uring but the mount reads /dev/fuse"
  cmp "$SRC/sub/big.bin" "$W/mnt-t/big.bin" || fail "a file written over /dev/fuse reads back differently over io_uring"
  "$CK" fs umount "$W/mnt-t"
else
  echo "  (enable_uring is off here: only the refusal of --io-uring is checked)"
  ! "$CK" fs mount "$C" "$W/mnt-t" --passfile "$W/pf" --io-uring </dev/null 2>"$W/err" || fail "--io-uring mounted without enable_uring"
  grep -q enable_uring "$W/err" || { cat "$W/err"; fail "--io-uring refusal does not say how to turn it on"; }
fi
! "$CK" fs mount "$C" "$W/mnt-t" --passfile "$W/pf" --io-uring --no-io-uring </dev/null 2>/dev/null \
  || fail "--io-uring with --no-io-uring was accepted"

echo "PASS fs_gocryptfs"
