#!/usr/bin/env bash
# The kernel writes, cryptkeep reads. cryptsetup formats LUKS1/LUKS2 image
# files on the host (each cipher cryptkeep supports, 512- and 4096-byte sectors,
# pbkdf2 with sha1/sha256/sha512, argon2i, argon2id); one boot of Debian's
# kernel opens every image with dm-crypt and writes through it: a
# pseudo-random pattern (most images; two at the 2^32-sector boundary where
# plain and plain64 IVs part; two with a non-zero LUKS2 iv_tweak, written
# through dm-crypt's iv_offset) or an ext4 tree with a manifest. Then the
# host opens each image with `cryptkeep open --read-only` and checks the
# plaintext (the pattern's SHA-256, or e2fsck -fn plus the manifest) and the
# `cryptkeep status --json` fields.
# One kernel boot. Needs root, cryptsetup, qemu, openssl, the cryptkeep build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"
# shellcheck source=lib/luks2-tweak.sh
. "$KT_LIB/luks2-tweak.sh"

kt_require_root
for t in cryptsetup:cryptsetup-bin openssl:openssl mkfs.ext4:e2fsprogs e2fsck:e2fsprogs blockdev:util-linux; do
  kt_require "${t%%:*}" "${t#*:}"
done
phase_only=${KT_KERNEL_PHASE_ONLY:-0}   # developers: stop after the kernel phase (never a pass)
[ "$phase_only" = 1 ] || CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
printf 'kernel-to-cryptkeep passphrase' > "$W/key"
PAT_MIB=2
kt_pattern "$W/pattern.bin" "$PAT_MIB" kernel-to-cryptkeep
pat_sha=$(sha256sum < "$W/pattern.bin" | cut -c1-64)

# name|type|cipher|key bits|sector|pbkdf|hash|kind|seek MiB (pattern) or iv_tweak
# kind: pat = pattern at data offset seek MiB; big = pattern across the 2^32
# 512-byte-sector boundary of a 2 TiB+ sparse image; tweak = pattern at 0 of a
# LUKS2 volume whose iv_tweak the host set; ext4 = kernel mkfs.ext4 + tree.
matrix="
k2-xts64-512-pb|luks2|aes-xts-plain64|512|512|pbkdf2|sha256|pat|0
k2-xts64-4k-a2id|luks2|aes-xts-plain64|512|4096|argon2id|sha256|pat|3
k2-xts64k256-512-a2i|luks2|aes-xts-plain64|256|512|argon2i|sha256|pat|1
k2-xts64k256-4k-pb|luks2|aes-xts-plain64|256|4096|pbkdf2|sha512|pat|0
k2-xtsp-512-a2id|luks2|aes-xts-plain|512|512|argon2id|sha256|pat|0
k2-xtsp-4k-pb1|luks2|aes-xts-plain|512|4096|pbkdf2|sha1|pat|2
k2-essiv-512-a2i|luks2|aes-cbc-essiv:sha256|256|512|argon2i|sha256|pat|0
k2-essiv-4k-a2id|luks2|aes-cbc-essiv:sha256|256|4096|argon2id|sha256|pat|1
k2-cbc64-512-pb|luks2|aes-cbc-plain64|256|512|pbkdf2|sha256|pat|0
k2-cbc64-4k-a2i|luks2|aes-cbc-plain64|256|4096|argon2i|sha256|pat|0
k1-xts64-512|luks1|aes-xts-plain64|512|512|pbkdf2|sha256|pat|0
k1-xts64k256-sha1|luks1|aes-xts-plain64|256|512|pbkdf2|sha1|pat|1
k1-xtsp-sha512|luks1|aes-xts-plain|512|512|pbkdf2|sha512|pat|0
k1-essiv|luks1|aes-cbc-essiv:sha256|256|512|pbkdf2|sha256|pat|0
k1-cbc64|luks1|aes-cbc-plain64|256|512|pbkdf2|sha256|pat|2
k2-big-xtsp-512|luks2|aes-xts-plain|512|512|pbkdf2|sha256|big|0
k2-big-xts64-4k|luks2|aes-xts-plain64|512|4096|pbkdf2|sha256|big|0
k2-tweak-xts64-4k|luks2|aes-xts-plain64|512|4096|pbkdf2|sha256|tweak|8000
k2-tweak-essiv-512|luks2|aes-cbc-essiv:sha256|256|512|pbkdf2|sha256|tweak|12345
k2-ext4-xts64-4k|luks2|aes-xts-plain64|512|4096|argon2id|sha256|ext4|0
k1-ext4-essiv|luks1|aes-cbc-essiv:sha256|256|512|pbkdf2|sha256|ext4|0
"
BIG_SIZE=$(( (2 << 40) + (64 << 20) ))   # 2 TiB + 64 MiB: sector 2^32 is at 2 TiB
TWO_TIB_MIB=$(( 2 << 20 ))

# --- host: cryptsetup formats every image --------------------------------
kt_log "host: cryptsetup luksFormat $(grep -c . <<< "$matrix") images in $W"
disks=(); puts=(); : > "$W/jobs"
while IFS='|' read -r name type cipher bits sector pbkdf hash kind arg; do
  [ -n "$name" ] || continue
  img="$W/$name.img"
  case "$kind" in big) truncate -s "$BIG_SIZE" "$img";; *) truncate -s 48M "$img";; esac
  opts=(--batch-mode --type "$type" --cipher "$cipher" --key-size "$bits" --hash "$hash" --key-file "$W/key")
  if [ "$type" = luks2 ]; then
    opts+=(--sector-size "$sector" --pbkdf "$pbkdf")
    case "$pbkdf" in
      pbkdf2) opts+=(--pbkdf-force-iterations 1000);;
      *) opts+=(--pbkdf-force-iterations 4 --pbkdf-memory 32 --pbkdf-parallel 1);;
    esac
  else
    opts+=(--pbkdf-force-iterations 1000)
  fi
  cryptsetup luksFormat "${opts[@]}" "$img" || kt_die "$name: cryptsetup luksFormat ${opts[*]} failed"
  tweak_args=""
  if [ "$kind" = tweak ]; then
    # cryptsetup 2.6 `open` of a one-segment LUKS2 volume ignores iv_tweak
    # (crypt_get_iv_offset() is 0 for LUKS; only its reencryption code sets
    # dm-crypt's iv_offset from it), so the kernel writes through a plain
    # dm-crypt mapping with the volume key, the data offset and
    # iv_offset = iv_tweak (--skip, 512-byte units), which is what the field
    # means; cryptkeep must read that through the LUKS2 header.
    kt_luks2_set_iv_tweak "$img" "$arg" || kt_die "$name: could not set iv_tweak $arg"
    cryptsetup luksDump --dump-json-metadata "$img" | grep -q "\"iv_tweak\":\"$arg\"" \
      || kt_die "$name: cryptsetup does not read back iv_tweak $arg"
    cryptsetup luksDump --dump-volume-key --batch-mode --key-file "$W/key" \
      --volume-key-file "$W/$name.vk" "$img" > /dev/null || kt_die "$name: luksDump --dump-volume-key failed"
    off=$(cryptsetup luksDump "$img" | sed -n 's/^[[:space:]]*offset: *\([0-9]*\) \[bytes\].*/\1/p' | head -n 1)
    [ -n "$off" ] || kt_die "$name: no data offset in luksDump"
    tweak_args="$cipher $bits $((off / 512)) $arg"
    puts+=(--put "$W/$name.vk")
  fi
  # Where the kernel writes: MiB into the data segment.
  case "$kind" in
    pat) seek=$arg;; tweak) seek=0;; big) seek=$((TWO_TIB_MIB - PAT_MIB / 2));; ext4) seek=-;;
  esac
  echo "$name $kind $sector $seek $tweak_args" >> "$W/jobs"
  disks+=("$name=$img")
done <<< "$matrix"
kt_log "host: formatted ${#disks[@]} images"

# The tree the kernel writes into the ext4 volumes.
kt_make_tree "$W/tree" 300 kernel-to-cryptkeep-tree
kt_manifest "$W/tree"
tar -C "$W/tree" -cf "$W/tree.tar" .

# --- kernel: dm-crypt writes ---------------------------------------------
cat > "$W/guest-script.sh" <<'EOF'
. /harness/guest.sh
while read -r name kind sector seek cipher bits offset tweak; do
  if [ "$kind" = tweak ]; then
    g_run "$name: kernel plain dm-crypt, offset $offset, iv_offset $tweak" cryptsetup open --type plain \
      --cipher "$cipher" --key-size "$bits" --key-file "/harness/$name.vk" --offset "$offset" \
      --skip "$tweak" --sector-size "$sector" "$(g_disk "$name")" "$name" || continue
  else
    g_open "$name" /harness/key || continue
  fi
  g_expect_sector "$name" "$sector"
  dev=/dev/mapper/$name
  if [ "$kind" = ext4 ]; then
    g_run "$name: mkfs.ext4" mkfs.ext4 -q "$dev"
    mkdir -p "/mnt/$name"
    if g_run "$name: mount" mount -t ext4 "$dev" "/mnt/$name"; then
      g_run "$name: untar the tree" tar -x -f /harness/tree.tar -C "/mnt/$name"
      echo "$name" > "/mnt/$name/VOLUME"
      g_run "$name: umount" umount "/mnt/$name"
      g_run "$name: e2fsck -fn after writing" e2fsck -fn "$dev"
    fi
  else
    g_run "$name: write the pattern at MiB $seek" dd if=/harness/pattern.bin of="$dev" bs=1M seek="$seek" conv=fsync
  fi
  g_run "$name: cryptsetup close" cryptsetup close "$name"
done < /harness/jobs
sync
g_finish
EOF
kt_boot --timeout 400 --script "$W/guest-script.sh" --put "$KT_LIB/guest.sh" --put "$W/key" \
  --put "$W/jobs" --put "$W/pattern.bin" --put "$W/tree.tar" "${puts[@]}" "${disks[@]}" \
  || kt_die "the kernel phase failed (see the guest's FAIL lines above)"

if [ "$phase_only" = 1 ]; then
  kt_log "KT_KERNEL_PHASE_ONLY=1: stopping before the cryptkeep phase: NOT a pass"
  exit 2
fi

# --- host: cryptkeep reads --------------------------------------------------
# The value of a top-level string/number/bool field of cryptkeep's JSON.
json_field() { grep -o "\"$1\": *\"\\?[^,\"}]*" | sed 's/^"[^"]*": *"\{0,1\}//' | head -n 1; }
while IFS='|' read -r name type cipher bits sector pbkdf hash kind arg; do
  [ -n "$name" ] || continue
  img="$W/$name.img"
  t=$EPOCHREALTIME
  if ! dev=$(kt_open "$img" "$name" "$W/key" --read-only); then
    kt_bad "$name: cryptkeep open --read-only failed"; continue
  fi
  st=$(ck status "$name" --json) || kt_bad "$name: cryptkeep status --json failed"
  for f in type:"$type" cipher:"$cipher" key_size:"$bits" sector_size:"$sector" read_only:true; do
    got=$(json_field "${f%%:*}" <<< "$st")
    [ "$got" = "${f#*:}" ] || kt_bad "$name: status --json ${f%%:*} is '$got', expected '${f#*:}'"
  done
  case "$kind" in
    ext4)
      if e2fsck -fn "$dev" > "$W/fsck.log" 2>&1; then kt_ok "$name: e2fsck -fn clean"
      else kt_bad "$name: e2fsck -fn:"; tail -n 20 "$W/fsck.log" | sed 's/^/    | /' >&2; fi
      mkdir -p "$W/mnt-$name"
      if mount -o ro,noload "$dev" "$W/mnt-$name"; then
        if (cd "$W/mnt-$name" && sha256sum -c --quiet MANIFEST.sha256 >&2); then
          kt_ok "$name: manifest checks out ($(wc -l < "$W/mnt-$name/MANIFEST.sha256") files)"
        else kt_bad "$name: manifest mismatch (above)"; fi
        [ "$(cat "$W/mnt-$name/VOLUME")" = "$name" ] || kt_bad "$name: VOLUME file wrong"
        umount "$W/mnt-$name"
      else kt_bad "$name: mount -o ro of $dev failed"; fi
      ;;
    *)
      case "$kind" in
        pat) seek=$arg;; tweak) seek=0;; big) seek=$((TWO_TIB_MIB - PAT_MIB / 2));;
      esac
      got=$(dd if="$dev" bs=1M skip="$seek" count="$PAT_MIB" status=none | sha256sum | cut -c1-64)
      if [ "$got" = "$pat_sha" ]; then kt_ok "$name: plaintext at MiB $seek is the pattern the kernel wrote"
      else kt_bad "$name: plaintext at MiB $seek differs from the pattern the kernel wrote ($kind, $cipher, sector $sector)"; fi
      ;;
  esac
  kt_close "$name" || kt_bad "$name: cryptkeep close failed"
  kt_log "$name: checked in $(kt_since "$t")s"
done <<< "$matrix"
kt_finish
