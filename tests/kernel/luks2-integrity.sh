#!/usr/bin/env bash
# LUKS2 authenticated encryption (dm-crypt over dm-integrity) both ways
# between the kernel and cryptkeep, for each authenticated mode cryptsetup
# offers (aes-xts-plain64 with hmac-sha256/sha1/sha512, aegis128-random,
# chacha20-random with poly1305, aes-gcm-random) with 512- and 4096-byte
# sectors.
# cryptkeep formats (`cryptkeep format --integrity`), fills an ext4 tree
# through its loop device (journal on; one volume with
# --integrity-no-journal, one through the keep process) and closes; the
# kernel opens each with cryptsetup: e2fsck -fn clean, the manifest checks
# out. The kernel formats (`cryptsetup luksFormat --integrity`) and writes an
# ext4 tree; cryptkeep opens each read-only: e2fsck -fn clean, the manifest
# checks out; `cryptkeep dump` of cryptsetup's header equals luksDump and
# gives the same volume key, and our headers have cryptsetup's segment and
# keyslot shape. Both make the same dm-integrity superblock (integritysetup
# dump). Tampering: one byte of a data sector of a kernel-written image
# is flipped; cryptkeep fails exactly one sector (status --json names it),
# and the kernel fails that same sector and reads its neighbours.
# One kernel boot, then a short second one. Needs root, cryptsetup, qemu,
# openssl, e2fsprogs, the cryptkeep build.
set -euo pipefail
. "$(dirname "$0")/lib/host.sh"

kt_require_root
for t in cryptsetup:cryptsetup-bin openssl:openssl mkfs.ext4:e2fsprogs e2fsck:e2fsprogs; do
  kt_require "${t%%:*}" "${t#*:}"
done
CK=$(kt_cryptkeep_bin)
kt_workdir
W=$KT_W
printf 'luks2-integrity passphrase' > "$W/key"
KDF=(--pbkdf pbkdf2 --pbkdf-force-iterations 1000)

# name|cipher|integrity|encryption key bits (cryptsetup adds the MAC key)|sector|open options (cryptkeep)
matrix="
hs256-512|aes-xts-plain64|hmac-sha256|512|512|--keep inline
hs256-4k|aes-xts-plain64|hmac-sha256|512|4096|
hs1-4k|aes-xts-plain64|hmac-sha1|512|4096|--keep inline --integrity-no-journal
hs512-4k|aes-xts-plain64|hmac-sha512|512|4096|--keep inline
aegis-512|aegis128-random|aead|128|512|--keep inline
aegis-4k|aegis128-random|aead|128|4096|--keep inline --integrity-no-journal
chacha-4k|chacha20-random|poly1305|256|4096|--keep inline
gcm-4k|aes-gcm-random|aead|256|4096|--keep inline
"

# --- cryptkeep formats and writes -------------------------------------------
kt_make_tree "$W/tree" 120 luks2-integrity-tree
kt_manifest "$W/tree"
tar -C "$W/tree" -cf "$W/tree.tar" .
disks=()
: > "$W/jobs"
while IFS='|' read -r n cipher integ bits sector opts; do
  [ -n "$n" ] || continue
  truncate -s 64M "$W/ck-$n.img" "$W/k-$n.img"
  disks+=("ck-$n=$W/ck-$n.img" "k-$n=$W/k-$n.img")
  echo "$n $cipher $integ $bits $sector" >> "$W/jobs"
  t=$EPOCHREALTIME
  if ! "$CK" format -q --type luks2 --cipher "$cipher" --integrity "$integ" --key-size "$bits" \
      --sector-size "$sector" "${KDF[@]}" --key-file "$W/key" "$W/ck-$n.img"; then
    kt_bad "ck-$n: cryptkeep format --integrity $integ failed"; continue
  fi
  # shellcheck disable=SC2086
  if ! dev=$(kt_open "$W/ck-$n.img" "ck-$n" "$W/key" $opts); then
    kt_bad "ck-$n: cryptkeep open failed"; continue
  fi
  mkdir -p "$W/mnt"
  if mkfs.ext4 -q "$dev" && mount "$dev" "$W/mnt"; then
    tar -x -f "$W/tree.tar" -C "$W/mnt"
    echo "ck-$n" > "$W/mnt/VOLUME"
    umount "$W/mnt"
    e2fsck -fn "$dev" > "$W/fsck.log" 2>&1 && kt_ok "ck-$n: e2fsck -fn clean in cryptkeep" \
      || { kt_bad "ck-$n: e2fsck -fn in cryptkeep:"; tail -n 20 "$W/fsck.log" >&2; }
  else
    kt_bad "ck-$n: mkfs.ext4/mount on $dev failed"
  fi
  kt_close "ck-$n" || kt_bad "ck-$n: close failed"
  kt_log "ck-$n: formatted and filled in $(kt_since "$t")s"
done <<< "$matrix"

# --- the kernel: opens cryptkeep's, formats and writes its own ---------------
cat > "$W/guest-script.sh" <<'GUEST'
. /harness/guest.sh
while read -r job cipher integ bits sector; do
  # (the guest library's helpers use n, m and k themselves)
  c=ck-$job
  k=k-$job
  if g_run "$c: kernel opens cryptkeep's volume" cryptsetup open --key-file /harness/key "$(g_disk "$c")" "$c"; then
    g_expect_sector "$c" "$sector"
    g_run "$c: e2fsck -fn in the kernel" e2fsck -fn "/dev/mapper/$c"
    mkdir -p "/mnt/$c"
    if g_run "$c: mount -o ro" mount -t ext4 -o ro,noload "/dev/mapper/$c" "/mnt/$c"; then
      g_check_tree "/mnt/$c" "$c"
      umount "/mnt/$c"
    fi
    g_run "$c: close" cryptsetup close "$c"
  fi
  g_run "$k: cryptsetup luksFormat --integrity $integ" cryptsetup luksFormat --batch-mode --type luks2 \
    --cipher "$cipher" --integrity "$integ" --key-size "$bits" --sector-size "$sector" \
    --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file /harness/key "$(g_disk "$k")" || continue
  g_run "$k: open" cryptsetup open --key-file /harness/key "$(g_disk "$k")" "$k" || continue
  g_run "$k: mkfs.ext4" mkfs.ext4 -q "/dev/mapper/$k"
  mkdir -p "/mnt/$k"
  if g_run "$k: mount" mount -t ext4 "/dev/mapper/$k" "/mnt/$k"; then
    g_run "$k: untar the tree" tar -x -f /harness/tree.tar -C "/mnt/$k"
    echo "$k" > "/mnt/$k/VOLUME"
    g_run "$k: umount" umount "/mnt/$k"
  fi
  g_run "$k: close" cryptsetup close "$k"
done < /harness/jobs
sync
g_finish
GUEST
kt_boot --timeout 900 --script "$W/guest-script.sh" --put "$KT_LIB/guest.sh" --put "$W/key" \
  --put "$W/jobs" --put "$W/tree.tar" "${disks[@]}" \
  || kt_bad "the kernel phase failed (see the guest's FAIL lines above)"

# --- the same layout: cryptkeep's integrity superblock is the kernel's -------
# Each side gets its own copy: the two dumps run at the same time under diff.
sb_dump() { dd if="$1" bs=1M skip=16 count=1 status=none > "$1.sb" && integritysetup dump "$1.sb" | tail -n +2; }
if command -v integritysetup >/dev/null; then
  while IFS='|' read -r n _; do
    [ -n "$n" ] || continue
    if diff <(sb_dump "$W/ck-$n.img") <(sb_dump "$W/k-$n.img") > "$W/sb.diff"; then
      kt_ok "$n: cryptkeep's dm-integrity superblock equals cryptsetup's (integritysetup dump)"
    else
      kt_bad "$n: the dm-integrity superblocks differ:"; sed 's/^/    | /' "$W/sb.diff" >&2
    fi
  done <<< "$matrix"
else
  kt_bad "integritysetup is missing: run scripts/install-deps.sh (apt-get install cryptsetup-bin)"
fi

# --- cryptsetup's headers: read as cryptsetup reads them, shaped as ours ----
# The data segment section and the keyslot's key and cipher lines of a dump.
shape() { awk '/^Data segments:/{on=1} /^Keyslots:/{on=0} on; /^\t(Key|Cipher|Cipher key):/' ; }
while IFS='|' read -r n _; do
  [ -n "$n" ] || continue
  k=$W/k-$n.img
  if diff <("$CK" dump "$k") <(cryptsetup luksDump "$k") > "$W/dump.diff"; then
    kt_ok "k-$n: cryptkeep dump of cryptsetup's header equals cryptsetup luksDump"
  else kt_bad "k-$n: the dumps differ:"; sed 's/^/    | /' "$W/dump.diff" >&2; fi
  if cmp -s <("$CK" dump -q --dump-volume-key --key-file "$W/key" "$k" 2>/dev/null) \
            <(cryptsetup luksDump -q --dump-volume-key --key-file "$W/key" "$k" 2>/dev/null); then
    kt_ok "k-$n: cryptkeep unlocks cryptsetup's keyslot to the same volume key"
  else kt_bad "k-$n: the volume keys differ (or a dump failed)"; fi
  if diff <(cryptsetup luksDump "$W/ck-$n.img" | shape) <(cryptsetup luksDump "$k" | shape) > "$W/shape.diff"; then
    kt_ok "ck-$n: the data segment and keyslot shape equal cryptsetup's"
  else kt_bad "ck-$n: the header shape differs from cryptsetup's:"; sed 's/^/    | /' "$W/shape.diff" >&2; fi
done <<< "$matrix"

# --- cryptkeep reads what the kernel wrote ----------------------------------
json_field() { grep -o "\"$1\": *\"\\?[^,\"}]*" | sed 's/^"[^"]*": *"\{0,1\}//' | head -n 1; }
while IFS='|' read -r n cipher integ bits sector opts; do
  [ -n "$n" ] || continue
  k=k-$n
  # shellcheck disable=SC2086
  if ! dev=$(kt_open "$W/$k.img" "$k" "$W/key" --read-only $opts); then
    kt_bad "$k: cryptkeep open --read-only of the kernel's volume failed"; continue
  fi
  st=$("$CK" status "$k" --json)
  [ "$(json_field sector_size <<< "$st")" = "$sector" ] || kt_bad "$k: status --json sector_size is not $sector"
  if e2fsck -fn "$dev" > "$W/fsck.log" 2>&1; then kt_ok "$k: e2fsck -fn clean in cryptkeep"
  else kt_bad "$k: e2fsck -fn in cryptkeep:"; tail -n 20 "$W/fsck.log" | sed 's/^/    | /' >&2; fi
  mkdir -p "$W/mnt-$k"
  if mount -o ro,noload "$dev" "$W/mnt-$k"; then
    if (cd "$W/mnt-$k" && sha256sum -c --quiet MANIFEST.sha256 >&2); then
      kt_ok "$k: the kernel's tree checks out in cryptkeep ($(wc -l < "$W/mnt-$k/MANIFEST.sha256") files)"
    else kt_bad "$k: manifest mismatch (above)"; fi
    [ "$(cat "$W/mnt-$k/VOLUME")" = "$k" ] || kt_bad "$k: VOLUME file wrong"
    umount "$W/mnt-$k"
  else kt_bad "$k: mount -o ro of $dev failed"; fi
  [ "$(json_field integrity_failures <<< "$("$CK" status "$k" --json)")" = 0 ] \
    || kt_bad "$k: sectors failed authentication on an untouched volume"
  kt_close "$k" || kt_bad "$k: close failed"
done <<< "$matrix"

# --- tampering: cryptkeep and the kernel fail the same sector ---------------
# One byte 5 MiB before the end of the image: the data of the last
# integrity area (its tags lie before its data).
: > "$W/tamper-jobs"
tdisks=()
for n in hs256-4k aegis-512; do
  t=t-$n
  cp "$W/k-$n.img" "$W/$t.img"
  size=$(stat -c %s "$W/$t.img")
  at=$((size - 5 * 1024 * 1024 + 1234))
  byte=$(dd if="$W/$t.img" bs=1 skip=$at count=1 status=none | od -An -tu1 | tr -d ' ')
  printf "\\x$(printf %02x $(( (byte ^ 0x10) & 0xff )))" | dd of="$W/$t.img" bs=1 seek=$at conv=notrunc status=none
  sector=$(awk -v n="$n" '$1 == n { print $5 }' "$W/jobs")
  if ! dev=$(kt_open "$W/$t.img" "$t" "$W/key" --read-only --keep inline); then
    kt_bad "$t: open failed"; continue
  fi
  dd if="$dev" of=/dev/null bs="$sector" iflag=direct conv=noerror status=none 2>/dev/null || true
  st=$("$CK" status "$t" --json)
  fails=$(json_field integrity_failures <<< "$st")
  bad=$(json_field integrity_last_failure <<< "$st")
  if [ "$fails" = 1 ] && [ -n "$bad" ]; then
    kt_ok "$t: one flipped byte fails exactly one sector in cryptkeep (sector $bad)"
  else
    kt_bad "$t: a flipped byte gave $fails failing sector(s) in cryptkeep (last: '$bad')"
  fi
  kt_close "$t" || kt_bad "$t: close failed"
  echo "$t $sector ${bad:-0}" >> "$W/tamper-jobs"
  tdisks+=("$t=$W/$t.img")
done
cat > "$W/guest2.sh" <<'GUEST'
. /harness/guest.sh
# dm-crypt names a failing sector in 512-byte units; the guest's dd reads
# through the page cache, so a failing sector fails its whole 4 KiB page:
# the neighbours checked are the sectors just outside that page.
while read -r t sector bad; do
  g_run "$t: open" cryptsetup open --readonly --key-file /harness/key "$(g_disk "$t")" "$t" || continue
  m=/dev/mapper/$t
  b512=$((bad * sector / 512)); page=$((b512 / 8 * 8))
  if dd if="$m" of=/dev/null bs=512 skip="$b512" count=1 2>/dev/null; then
    g_bad "$t: the kernel read sector $bad, which cryptkeep refused"
  else
    g_ok "$t: the kernel fails sector $bad too"
  fi
  dmesg | grep -q "INTEGRITY AEAD ERROR, sector $b512\$" \
    && g_ok "$t: dm-crypt names the same sector ($b512 in 512-byte units)" \
    || g_bad "$t: dm-crypt's log does not name 512-byte sector $b512: $(dmesg | grep 'AEAD ERROR' | tail -n 1)"
  for s in $((page - 1)) $((page + 8)); do
    dd if="$m" of=/dev/null bs=512 skip="$s" count=1 2>/dev/null \
      && g_ok "$t: the kernel reads neighbour 512-byte sector $s" || g_bad "$t: the kernel fails neighbour 512-byte sector $s"
  done
  g_run "$t: close" cryptsetup close "$t"
done < /harness/tamper-jobs
g_finish
GUEST
kt_boot --timeout 300 --script "$W/guest2.sh" --put "$KT_LIB/guest.sh" --put "$W/key" \
  --put "$W/tamper-jobs" "${tdisks[@]}" || kt_bad "the kernel's tamper check failed (above)"
kt_finish
