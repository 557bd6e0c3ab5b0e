#!/usr/bin/env bash
# cryptkeep writes, the kernel reads. On the host, `cryptkeep format` makes
# LUKS2 aes-xts-plain64 512-bit 4096-byte sectors, LUKS2 aes-cbc-essiv:sha256
# 512-byte sectors, LUKS1 aes-xts-plain64, LUKS2 aes-xts-plain64 256-bit
# 512-byte sectors, LUKS2 aes-xts-plain with an argon2id keyslot, LUKS1
# aes-cbc-plain64; `cryptkeep open` + mkfs.ext4 on the loop device it prints,
# `open --mount` + a tree of ~300 files + a SHA-256 manifest, `close`; then
# the SHA-256 of the whole plaintext through `open --read-only`. One boot of
# Debian's kernel then opens each image with dm-crypt (cryptsetup open
# --key-file): the sector size is the one asked for, e2fsck -fn is clean, the
# whole plaintext has the same SHA-256, and the manifest checks out. Two
# 2 TiB sparse volumes check cryptkeep's writes across 512-byte sector 2^32.
# One kernel boot. Needs root, FUSE, loop devices, qemu, the cryptkeep build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"

kt_require_root
for t in cryptsetup:cryptsetup-bin openssl:openssl mkfs.ext4:e2fsprogs mountpoint:util-linux; do
  kt_require "${t%%:*}" "${t#*:}"
done
CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
printf 'cryptkeep-to-kernel passphrase' > "$W/key"

# name|type|cipher|key bits|sector size|pbkdf (the last two rows cover the
# remaining ciphers and an Argon2 keyslot the kernel's cryptsetup opens)
volumes="
c2-xts64-512k-4k|luks2|aes-xts-plain64|512|4096|pbkdf2
c2-essiv-512|luks2|aes-cbc-essiv:sha256|256|512|pbkdf2
c1-xts64-512k|luks1|aes-xts-plain64|512|512|pbkdf2
c2-xts64-256k-512|luks2|aes-xts-plain64|256|512|pbkdf2
c2-xtsp-4k-a2id|luks2|aes-xts-plain|512|4096|argon2id
c1-cbc64-256k|luks1|aes-cbc-plain64|256|512|pbkdf2
"
kt_make_tree "$W/tree" 300 cryptkeep-to-kernel-tree
kt_log "host: test tree of $(find "$W/tree" -type f | wc -l) files, $(du -sh "$W/tree" | cut -f1)"

disks=(); : > "$W/volumes"
while IFS='|' read -r name type cipher bits sector pbkdf; do
  [ -n "$name" ] || continue
  t=$EPOCHREALTIME
  img="$W/$name.img"
  truncate -s 48M "$img"
  opts=(--batch-mode --type "$type" --cipher "$cipher" --key-size "$bits" --key-file "$W/key" --pbkdf "$pbkdf")
  case "$pbkdf" in
    pbkdf2) opts+=(--pbkdf-force-iterations 1000);;
    *) opts+=(--pbkdf-force-iterations 4 --pbkdf-memory 32 --pbkdf-parallel 1);;
  esac
  [ "$type" = luks2 ] && opts+=(--sector-size "$sector")
  ck format "$img" "${opts[@]}" || kt_die "$name: cryptkeep format ${opts[*]} failed"
  cryptsetup isLuks "$img" || kt_die "$name: cryptsetup isLuks says cryptkeep's image is not LUKS"

  dev=$(kt_open "$img" "$name" "$W/key") || kt_die "$name: cryptkeep open failed"
  mkfs.ext4 -q -F "$dev" || kt_die "$name: mkfs.ext4 on $dev (cryptkeep's loop device) failed"
  kt_close "$name" || kt_die "$name: cryptkeep close failed"

  mnt="$W/mnt-$name"; mkdir -p "$mnt"
  kt_open "$img" "$name" "$W/key" --mount "$mnt" > /dev/null || kt_die "$name: cryptkeep open --mount failed"
  mountpoint -q "$mnt" || kt_die "$name: cryptkeep open --mount $mnt did not mount anything there"
  cp -a "$W/tree/." "$mnt/"
  echo "$name" > "$mnt/VOLUME"
  kt_manifest "$mnt"
  kt_close "$name" || kt_die "$name: cryptkeep close (with a mounted file system) failed"
  mountpoint -q "$mnt" && kt_die "$name: $mnt is still mounted after cryptkeep close"

  dev=$(kt_open "$img" "$name" "$W/key" --read-only) || kt_die "$name: cryptkeep open --read-only failed"
  sum=$(sha256sum < "$dev" | cut -c1-64)
  size=$(blockdev --getsize64 "$dev")
  kt_close "$name" || kt_die "$name: cryptkeep close failed"
  echo "$name $sector $size $sum" >> "$W/volumes"
  disks+=("$name=$img")
  kt_log "host: $name ($type $cipher $bits-bit, sector $sector) formatted and filled in $(kt_since "$t")s"
done <<< "$volumes"

# Two 2 TiB + 64 MiB sparse volumes: cryptkeep writes a pattern across
# 512-byte sector 2^32 (2 TiB into the data), where aes-xts-plain's 32-bit IV
# wraps and plain64's does not.
# name|type|cipher|key bits|sector size
bigvols="
c2-big-xtsp-512|luks2|aes-xts-plain|512|512
c1-big-xts64|luks1|aes-xts-plain64|256|512
"
kt_pattern "$W/pattern.bin" 4 cryptkeep-to-kernel-big
pat_sha=$(sha256sum < "$W/pattern.bin" | cut -c1-64)
big_seek=$(( (2 << 20) - 2 ))   # MiB: the pattern spans 2 TiB - 2 MiB .. 2 TiB + 2 MiB
: > "$W/bigvols"
while IFS='|' read -r name type cipher bits sector; do
  [ -n "$name" ] || continue
  t=$EPOCHREALTIME
  img="$W/$name.img"
  truncate -s $(( (2 << 40) + (64 << 20) )) "$img"
  opts=(--batch-mode --type "$type" --cipher "$cipher" --key-size "$bits" --key-file "$W/key"
        --pbkdf pbkdf2 --pbkdf-force-iterations 1000)
  [ "$type" = luks2 ] && opts+=(--sector-size "$sector")
  ck format "$img" "${opts[@]}" || kt_die "$name: cryptkeep format ${opts[*]} failed"
  dev=$(kt_open "$img" "$name" "$W/key") || kt_die "$name: cryptkeep open failed"
  dd if="$W/pattern.bin" of="$dev" bs=1M seek="$big_seek" conv=fsync status=none \
    || kt_die "$name: writing the pattern at MiB $big_seek of $dev failed"
  kt_close "$name" || kt_die "$name: cryptkeep close failed"
  echo "$name $sector $big_seek $pat_sha" >> "$W/bigvols"
  disks+=("$name=$img")
  kt_log "host: $name ($type $cipher $bits-bit) pattern written at MiB $big_seek in $(kt_since "$t")s"
done <<< "$bigvols"

cat > "$W/guest-script.sh" <<'EOF'
. /harness/guest.sh
while read -r name sector seek sum; do
  g_open "$name" /harness/key --readonly || continue
  g_expect_sector "$name" "$sector"
  got=$(dd if="/dev/mapper/$name" bs=1M skip="$seek" count=4 2>/dev/null | sha256sum | cut -c1-64)
  [ "$got" = "$sum" ] && g_ok "$name: the pattern cryptkeep wrote across sector 2^32" \
    || g_bad "$name: dm-crypt reads something else at MiB $seek than the pattern cryptkeep wrote"
  g_run "$name: cryptsetup close" cryptsetup close "$name"
done < /harness/bigvols
while read -r name sector size sum; do
  g_open "$name" /harness/key --readonly || continue
  dev=/dev/mapper/$name
  g_expect_sector "$name" "$sector"
  got=$(blockdev --getsize64 "$dev")
  [ "$got" = "$size" ] && g_ok "$name: plaintext size $got bytes, as cryptkeep's" \
    || g_bad "$name: dm-crypt plaintext is $got bytes, cryptkeep's $size"
  g_run "$name: e2fsck -fn" e2fsck -fn "$dev"
  got=$(sha256sum < "$dev" | cut -c1-64)
  [ "$got" = "$sum" ] && g_ok "$name: whole plaintext SHA-256 equals cryptkeep's" \
    || g_bad "$name: whole plaintext SHA-256 $got, cryptkeep read $sum"
  mkdir -p "/mnt/$name"
  if g_run "$name: mount -o ro" mount -t ext4 -o ro,noload "$dev" "/mnt/$name"; then
    g_check_tree "/mnt/$name" "$name"
    umount "/mnt/$name"
  fi
  g_run "$name: cryptsetup close" cryptsetup close "$name"
done < /harness/volumes
g_finish
EOF
kt_boot --timeout 400 --script "$W/guest-script.sh" --put "$KT_LIB/guest.sh" --put "$W/key" \
  --put "$W/volumes" --put "$W/bigvols" "${disks[@]}" || kt_die "the kernel did not read what cryptkeep wrote (guest FAIL lines above)"
kt_finish
