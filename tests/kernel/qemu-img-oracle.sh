#!/usr/bin/env bash
# qemu-img as a second LUKS1 oracle (qemu's own LUKS code, not cryptsetup's).
#  qemu -> cryptkeep: `qemu-img create -f luks` (three cipher/hash choices;
#    qemu puts the payload at sector 4040, not at a MiB boundary), a random
#    pattern written with `qemu-img convert -n`, 0xab and 0x5c written with
#    `qemu-io -c 'write -P ..'`; `cryptkeep open --read-only` reads the same
#    bytes, and its whole plaintext equals `qemu-img convert -O raw`'s.
#  cryptkeep -> qemu: `cryptkeep format --type luks1` (two ciphers), a pattern
#    written through cryptkeep's loop device; `qemu-io -c 'read -P ..'` and
#    `qemu-img convert -O raw` give the same plaintext, byte for byte.
# No kernel boot. Needs root, FUSE, loop devices, qemu-utils, the cryptkeep build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"

kt_require_root
kt_require qemu-img qemu-utils
kt_require qemu-io qemu-utils
kt_require openssl openssl
kt_require blockdev util-linux
CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
PASS='qemu-img oracle passphrase'
printf '%s' "$PASS" > "$W/key"
SECRET=(--object "secret,id=s0,file=$W/key")
kt_pattern "$W/pattern.bin" 4 qemu-img-oracle
MIB=$((1024 * 1024))

qopts() { echo "driver=luks,key-secret=s0,file.filename=$1"; }
# sha256 of LEN bytes at OFFSET of FILE (offsets in bytes, multiples of 512).
range_sha() { dd if="$1" bs=512 skip=$(($2 / 512)) count=$(($3 / 512)) status=none | sha256sum | cut -c1-64; }
fill_sha() { head -c "$2" /dev/zero | tr '\0' "\\$(printf '%03o' "$1")" | sha256sum | cut -c1-64; }
pat_sha=$(sha256sum < "$W/pattern.bin" | cut -c1-64)

# compare NAME IMAGE DEV: cryptkeep's plaintext (DEV) against qemu's (convert -O raw).
compare_full() {
  local name=$1 img=$2 dev=$3 qsize csize
  qemu-img convert "${SECRET[@]}" --image-opts "$(qopts "$img")" -O raw "$W/$name.qemu-plain" \
    || { kt_bad "$name: qemu-img convert -O raw failed"; return; }
  qsize=$(stat -c %s "$W/$name.qemu-plain"); csize=$(blockdev --getsize64 "$dev")
  [ "$qsize" = "$csize" ] && kt_ok "$name: plaintext size $csize bytes in both" \
    || kt_bad "$name: qemu's plaintext is $qsize bytes, cryptkeep's $csize"
  if cmp -s "$W/$name.qemu-plain" "$dev"; then kt_ok "$name: whole plaintext identical (qemu-img convert vs cryptkeep)"
  else kt_bad "$name: plaintext differs: $(cmp "$W/$name.qemu-plain" "$dev" 2>&1 | head -n 1)"; fi
  rm -f "$W/$name.qemu-plain"
}

# --- qemu writes, cryptkeep reads -------------------------------------------
# name|qemu-img create -o options|the cipher cryptkeep must report
qemu_made="
q-xts-plain64-sha256|iter-time=10|aes-xts-plain64
q-cbc-essiv-sha1|iter-time=10,cipher-alg=aes-256,cipher-mode=cbc,ivgen-alg=essiv,ivgen-hash-alg=sha256,hash-alg=sha1|aes-cbc-essiv:sha256
q-xts128-plain-sha512|iter-time=10,cipher-alg=aes-128,cipher-mode=xts,ivgen-alg=plain,hash-alg=sha512|aes-xts-plain
"
while IFS='|' read -r name o cipher; do
  [ -n "$name" ] || continue
  t=$EPOCHREALTIME
  img="$W/$name.img"
  # qemu-img's PBKDF2 benchmark fails now and then with "Unable to get accurate
  # CPU usage" when a round takes under one CPU-time tick (here 5-30 % of the
  # runs, whatever the hash, iter-time or CPU pinning, and several in a row
  # on a busy machine): try again, up to 30 times (about 20 ms each).
  for try in $(seq 30); do
    qemu-img create -q -f luks "${SECRET[@]}" -o "key-secret=s0,$o" "$img" 64M 2> "$W/create.err" && break
    grep -q 'accurate CPU usage' "$W/create.err" && [ "$try" -lt 30 ] && continue
    cat "$W/create.err" >&2; kt_die "$name: qemu-img create -f luks -o $o failed"
  done
  qemu-img convert "${SECRET[@]}" -n -f raw "$W/pattern.bin" --target-image-opts "$(qopts "$img")" \
    || kt_die "$name: qemu-img convert of the pattern into the image failed"
  qemu-io "${SECRET[@]}" --image-opts "$(qopts "$img")" -c "write -P 0xab $((8 * MIB)) $MIB" \
    -c "write -P 0x5c $((64 * MIB - 65536)) 65536" > /dev/null || kt_die "$name: qemu-io write failed"
  if ! dev=$(kt_open "$img" "$name" "$W/key" --read-only); then kt_bad "$name: cryptkeep open failed"; continue; fi
  st=$(ck status "$name" --json || true)
  grep -q "\"cipher\": *\"$cipher\"" <<< "$st" && kt_ok "$name: status says $cipher" \
    || kt_bad "$name: cryptkeep status --json does not say cipher $cipher: $st"
  [ "$(range_sha "$dev" 0 $((4 * MIB)))" = "$pat_sha" ] && kt_ok "$name: the pattern qemu-img wrote at 0" \
    || kt_bad "$name: cryptkeep reads something else than the pattern qemu-img wrote at 0"
  [ "$(range_sha "$dev" $((8 * MIB)) "$MIB")" = "$(fill_sha 0xab "$MIB")" ] && kt_ok "$name: qemu-io's 0xab at 8 MiB" \
    || kt_bad "$name: cryptkeep does not read qemu-io's 0xab at 8 MiB"
  [ "$(range_sha "$dev" $((64 * MIB - 65536)) 65536)" = "$(fill_sha 0x5c 65536)" ] \
    && kt_ok "$name: qemu-io's 0x5c in the last 64 KiB" || kt_bad "$name: cryptkeep does not read qemu-io's 0x5c at the end"
  compare_full "$name" "$img" "$dev"
  kt_close "$name" || kt_bad "$name: cryptkeep close failed"
  kt_log "$name: checked in $(kt_since "$t")s"
done <<< "$qemu_made"

# --- cryptkeep writes, qemu reads -------------------------------------------
# name|cipher|key bits
ours="
c1-xts-plain64-512|aes-xts-plain64|512
c1-cbc-essiv-256|aes-cbc-essiv:sha256|256
"
while IFS='|' read -r name cipher bits; do
  [ -n "$name" ] || continue
  t=$EPOCHREALTIME
  img="$W/$name.img"
  truncate -s 40M "$img"
  ck format "$img" --batch-mode --type luks1 --cipher "$cipher" --key-size "$bits" --key-file "$W/key" \
    --pbkdf pbkdf2 --pbkdf-force-iterations 1000 || kt_die "$name: cryptkeep format --type luks1 failed"
  if ! dev=$(kt_open "$img" "$name" "$W/key"); then kt_bad "$name: cryptkeep open failed"; continue; fi
  dd if="$W/pattern.bin" of="$dev" bs=1M conv=fsync status=none
  head -c "$MIB" /dev/zero | tr '\0' '\253' | dd of="$dev" bs=1M seek=8 conv=fsync status=none
  kt_close "$name" || kt_bad "$name: cryptkeep close failed"
  if out=$(qemu-io "${SECRET[@]}" --image-opts "$(qopts "$img")" -c "read -P 0xab $((8 * MIB)) $MIB" 2>&1) \
     && ! grep -q 'verification failed' <<< "$out"; then
    kt_ok "$name: qemu-io read -P 0xab at 8 MiB verifies"
  else kt_bad "$name: qemu-io read -P 0xab at 8 MiB: $out"; fi
  qemu-img convert "${SECRET[@]}" --image-opts "$(qopts "$img")" -O raw "$W/$name.plain" \
    || { kt_bad "$name: qemu-img convert -O raw of cryptkeep's image failed"; continue; }
  [ "$(range_sha "$W/$name.plain" 0 $((4 * MIB)))" = "$pat_sha" ] && kt_ok "$name: qemu-img convert gives the pattern at 0" \
    || kt_bad "$name: qemu-img convert does not give the pattern cryptkeep wrote at 0"
  rm -f "$W/$name.plain"
  if dev=$(kt_open "$img" "$name" "$W/key" --read-only); then
    compare_full "$name" "$img" "$dev"
    kt_close "$name" || kt_bad "$name: cryptkeep close failed"
  else kt_bad "$name: cryptkeep open --read-only failed"; fi
  kt_log "$name: checked in $(kt_since "$t")s"
done <<< "$ours"
kt_finish
