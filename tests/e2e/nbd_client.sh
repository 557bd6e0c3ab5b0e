#!/usr/bin/env bash
# A volume whose ciphertext lives on an NBD server: qemu-nbd (image file,
# Unix socket), nbdkit's memory and file plugins. Format, open, mkfs.ext4,
# write, close, reopen, verify; cryptsetup reads the image file; dump and
# keyslot verbs over NBD; an export of a volume on nbdkit's memory plugin
# mapping the server's holes (block status); the server killed mid-write
# and restarted (fsync'd data verifies, e2fsck clean); EIO after
# --nbd-timeout while it stays down; only ciphertext reaches the server;
# clear errors.
source "$(dirname "$0")/lib/common.sh"
for t in qemu-nbd nbdkit cryptsetup; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done

SERVERS=()
kill_servers() {
  for p in "${SERVERS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  return 0
}
trap 'rc=$?; set +e; for d in "$CRYPTKEEP_RUN_DIR"/*/; do [ -d "$d" ] && "$CK" close "$(basename "$d")" >/dev/null 2>&1; done; kill_servers; (exit $rc); cleanup' EXIT

printf 'correct horse battery staple' > "$W/pass"
printf 'another passphrase' > "$W/pass2"
MARK=CRYPTKEEP-NBD-PLAINTEXT-MARKER-7f3a9c
mkdir -p "$W/mnt"

# wait_sock PATH: until a server listens there.
wait_sock() {
  for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.05; done
  fail "no server on $1"
}
# qemu_nbd IMG SOCK [opts...]: starts qemu-nbd; its pid in QPID.
qemu_nbd() {
  local img=$1 sock=$2; shift 2
  rm -f "$sock"
  qemu-nbd -f raw -x vol -t -e 4 -k "$sock" "$@" "$img" 2>>"$W/qemu-nbd.log" &
  QPID=$!; SERVERS+=("$QPID")
  wait_sock "$sock"
}

# roundtrip URI NAME: format, open, mkfs, write files with the marker,
# close, reopen, verify; dump and keyslot verbs.
roundtrip() {
  local uri=$1 name=$2
  step "$name: format $uri"
  "$CK" format "$uri" "${FAST[@]}" --key-file "$W/pass" --batch-mode </dev/null
  "$CK" isLuks "$uri" || fail "isluks over NBD"
  "$CK" dump "$uri" > "$W/dump.txt"
  grep -q '^Version:' "$W/dump.txt" || fail "dump over NBD"
  step "$name: open, mkfs.ext4, write"
  dev=$("$CK" open "$uri" "$name" --key-file "$W/pass")
  mkfs.ext4 -q -F "$dev"
  mount "$dev" "$W/mnt"
  head -c 3M /dev/urandom > "$W/mnt/random.bin"
  for i in $(seq 2000); do echo "$MARK line $i"; done > "$W/mnt/marker.txt"
  make_tree "$W/mnt/tree" 200 7
  sync
  manifest "$W/mnt" "$W/manifest-$name"
  umount "$W/mnt"
  "$CK" close "$name"
  step "$name: keyslot add/list/change/remove over NBD"
  "$CK" keyslot add "$uri" "$W/pass2" --key-file "$W/pass" "${FAST[@]}" </dev/null
  "$CK" keyslot list "$uri" > "$W/slots.txt"
  [ -s "$W/slots.txt" ] || fail "keyslot list over NBD"
  "$CK" keyslot change "$uri" "$W/pass2" --key-file "$W/pass2" "${FAST[@]}" </dev/null
  "$CK" keyslot remove "$uri" --key-file "$W/pass2" --batch-mode </dev/null
  step "$name: reopen, verify"
  dev=$("$CK" open "$uri" "$name" --key-file "$W/pass" --mount "$W/mnt")
  (cd "$W/mnt" && sha256sum -c --quiet "$W/manifest-$name") || fail "$name: manifest mismatch after reopen"
  umount "$W/mnt"
  e2fsck -fn "$dev" >/dev/null || fail "$name: e2fsck found problems"
  "$CK" close "$name"
}

# only_ciphertext IMG: the plaintext marker never reached the server.
only_ciphertext() {
  if grep -aq "$MARK" "$1"; then fail "plaintext marker found in $1"; fi
  echo "ok: no plaintext in $(basename "$1")"
}

# --- qemu-nbd over a Unix socket, image file
truncate -s 96M "$W/q.img"
QSOCK=$W/q.sock
qemu_nbd "$W/q.img" "$QSOCK"
QURI="nbd+unix:///vol?socket=$QSOCK"
roundtrip "$QURI" nbdq
only_ciphertext "$W/q.img"
step "qemu-nbd: cryptsetup reads the image file"
cryptsetup isLuks "$W/q.img" || fail "cryptsetup isLuks"
cryptsetup luksDump "$W/q.img" >/dev/null || fail "cryptsetup luksDump"
cryptsetup open --test-passphrase "$W/q.img" --key-file "$W/pass" || fail "cryptsetup --test-passphrase"
step "qemu-nbd: header backup over NBD"
"$CK" header backup "$QURI" --header-backup-file "$W/hdr.bak"
cryptsetup luksDump "$W/hdr.bak" >/dev/null || fail "cryptsetup cannot read the header backup"
step "qemu-nbd: header restore over NBD, open with the key inline"
"$CK" header restore "$QURI" --header-backup-file "$W/hdr.bak" --batch-mode </dev/null
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass" --keep inline --read-only --mount "$W/mnt")
(cd "$W/mnt" && sha256sum -c --quiet "$W/manifest-nbdq") || fail "manifest mismatch after header restore"
umount "$W/mnt"
"$CK" close nbdq

step "qemu-nbd: killed mid-write and restarted: fsync'd data survives, nothing torn"
head -c 24M /dev/urandom > "$W/big.src"
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass" --mount "$W/mnt" --nbd-timeout 30)
dd if="$W/big.src" of="$W/mnt/before.bin" bs=1M conv=fsync status=none
dd if="$W/big.src" of="$W/mnt/during.bin" bs=256K oflag=dsync conv=fsync status=none &
ddpid=$!
sleep 0.3
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true
sleep 2
qemu_nbd "$W/q.img" "$QSOCK"
wait "$ddpid" || fail "the write across the restart failed"
sync
grep -q "reconnected to the NBD server" "$CRYPTKEEP_RUN_DIR/nbdq/daemon.log" || fail "the daemon did not reconnect"
umount "$W/mnt"
"$CK" close nbdq
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass")
e2fsck -fn "$dev" >/dev/null || fail "e2fsck found problems after the restart"
mount "$dev" "$W/mnt"
cmp "$W/big.src" "$W/mnt/before.bin" || fail "data written before the kill differs"
cmp "$W/big.src" "$W/mnt/during.bin" || fail "data written across the restart differs"
umount "$W/mnt"
"$CK" close nbdq

step "qemu-nbd: stays down: I/O fails with EIO after --nbd-timeout, then recovers"
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass" --nbd-timeout 2)
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true
t0=$(date +%s)
if dd if=/dev/zero of="$dev" bs=4k count=1 seek=100 oflag=direct status=none 2>"$W/dd.err"; then
  fail "a write with the server down succeeded"
fi
t1=$(date +%s)
grep -qi "input/output error" "$W/dd.err" || { cat "$W/dd.err" >&2; fail "the failed write is not EIO"; }
[ $((t1 - t0)) -le 20 ] || fail "the write failed only after $((t1 - t0)) s"
echo "ok: write failed with EIO after $((t1 - t0)) s"
qemu_nbd "$W/q.img" "$QSOCK"
dd if="$dev" of=/dev/null bs=64k count=16 iflag=direct status=none || fail "I/O did not recover after the server came back"
"$CK" close nbdq

step "qemu-nbd serving one client at a time (its default): open, read, write, close"
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true
rm -f "$QSOCK"
qemu-nbd -f raw -x vol -t -k "$QSOCK" "$W/q.img" 2>>"$W/qemu-nbd.log" &
QPID=$!; SERVERS+=("$QPID")
wait_sock "$QSOCK"
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass" --mount "$W/mnt")
cmp "$W/big.src" "$W/mnt/before.bin" || fail "data differs over one connection"
echo one-client > "$W/mnt/one.txt"
umount "$W/mnt"
"$CK" close nbdq

step "errors: unknown export, unreachable server, TLS refused, read-only export, bad URI, too small"
expect_fail 4 'no export' "$CK" dump "nbd+unix:///nope?socket=$QSOCK"
expect_fail 4 'cannot reach' "$CK" dump "nbd+unix:///vol?socket=$W/none.sock"
expect_fail 4 'cannot reach' "$CK" dump "nbd://127.0.0.1:1/vol"
expect_fail 1 'pre-shared' "$CK" dump "nbds://127.0.0.1/vol?tls-psk-file=$W/psk"
expect_fail 1 'needs TLS' "$CK" dump "nbd://127.0.0.1/vol?tls-certificates=$W"
expect_fail 2 'refused TLS' "$CK" dump "nbds+unix:///vol?socket=$QSOCK&tls-verify-peer=false"
expect_fail 1 'socket' "$CK" dump "nbd+unix:///vol"
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true
qemu_nbd "$W/q.img" "$QSOCK" -r
expect_fail 2 'read-only' "$CK" open "$QURI" nbdq --key-file "$W/pass"
dev=$("$CK" open "$QURI" nbdq --key-file "$W/pass" --read-only)
"$CK" close nbdq
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true
truncate -s 1M "$W/small.img"
qemu_nbd "$W/small.img" "$W/small.sock"
expect_fail 4 'too small' "$CK" format "nbd+unix:///vol?socket=$W/small.sock" "${FAST[@]}" --key-file "$W/pass" --batch-mode
kill -9 "$QPID"; wait "$QPID" 2>/dev/null || true

# --- nbdkit: memory plugin (TCP) and file plugin (Unix socket)
step "nbdkit memory plugin over TCP"
port=$((20000 + RANDOM % 20000))
nbdkit -f -i 127.0.0.1 -p "$port" memory 96M 2>>"$W/nbdkit.log" &
SERVERS+=($!)
for _ in $(seq 100); do nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1 && break; sleep 0.05; done
roundtrip "nbd://127.0.0.1:$port/" nbdmem

step "nbdkit memory: the export of a volume on NBD shows the server's holes"
nbdkit -f -U "$W/m.sock" memory 96M 2>>"$W/nbdkit.log" &
SERVERS+=($!)
wait_sock "$W/m.sock"
MURI="nbd+unix:///?socket=$W/m.sock"
"$CK" format "$MURI" --type luks1 "${FAST[@]}" --key-file "$W/pass" --batch-mode </dev/null
"$CK" open "$MURI" nbdmap --key-file "$W/pass" --allow-discards --no-loop --nbd "unix:$W/e.sock" > "$W/map.out"
euri=$(sed -n 1p "$W/map.out")
esize=$(nbdinfo --size "$euri")
# map URI: "start length kind" per run, adjacent runs alike merged by nbdinfo.
map() { nbdinfo --map "$1" | awk '{print $1, $2, $4}' | paste -sd ' '; }
want="0 $esize hole,zero"
[ "$(map "$euri")" = "$want" ] || fail "fresh volume on nbdkit: map '$(map "$euri")', want '$want'"
qemu-io -f raw -c "write -P 0x5a 8M 1M" -c flush "$euri" >/dev/null || fail "qemu-io write"
want="0 $((8 << 20)) hole,zero $((8 << 20)) $((1 << 20)) data $((9 << 20)) $((esize - (9 << 20))) hole,zero"
[ "$(map "$euri")" = "$want" ] || fail "after a write: map '$(map "$euri")', want '$want'"
qemu-io -f raw -c "read -P 0x5a 8M 1M" -c "discard 8M 512K" -c "read -P 0 8M 512K" "$euri" > "$W/qio" \
  || fail "qemu-io read/discard"
grep -qi "fail\|error" "$W/qio" && { cat "$W/qio"; fail "qemu-io reported a failure"; }
want="0 $(((8 << 20) + (512 << 10))) hole,zero $(((8 << 20) + (512 << 10))) $((512 << 10)) data $((9 << 20)) $((esize - (9 << 20))) hole,zero"
[ "$(map "$euri")" = "$want" ] || fail "after a discard: map '$(map "$euri")', want '$want'"
"$CK" close nbdmap

step "nbdkit file plugin over a Unix socket"
truncate -s 96M "$W/k.img"
nbdkit -f -U "$W/k.sock" file "$W/k.img" 2>>"$W/nbdkit.log" &
SERVERS+=($!)
wait_sock "$W/k.sock"
roundtrip "nbd+unix:///?socket=$W/k.sock" nbdfile
only_ciphertext "$W/k.img"
cryptsetup open --test-passphrase "$W/k.img" --key-file "$W/pass" || fail "cryptsetup --test-passphrase (nbdkit file)"

echo "PASS nbd_client"
