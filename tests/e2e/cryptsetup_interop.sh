#!/usr/bin/env bash
# cryptsetup 2.6 as the oracle at the CLI, both ways: our volumes pass
# luksDump, --test-passphrase and give the same --dump-volume-key; its
# volumes open in cryptkeep with the right cipher/sector/key size; keyslot
# add/remove/change by either tool is accepted by the other.
source "$(dirname "$0")/lib/common.sh"
command -v cryptsetup >/dev/null || fail "cryptsetup missing: run scripts/install-deps.sh"

printf 'first passphrase' > "$W/p1"
printf 'second passphrase' > "$W/p2"
printf 'third passphrase' > "$W/p3"
printf 'fourth passphrase' > "$W/p4"
CS_FAST=(--pbkdf pbkdf2 --pbkdf-force-iterations 1000)
keyhex() { grep -A8 '^MK dump:' | sed -e 's/^MK dump://' | tr -d ' \t\n' | grep -Eo '^[0-9a-f]+'; }
cs_ok() { cryptsetup open --test-passphrase --key-file "$2" "$1" </dev/null; }
cs_bad() { local rc=0; cryptsetup open --test-passphrase --key-file "$2" "$1" </dev/null 2>/dev/null || rc=$?; [ $rc = 2 ] || fail "cryptsetup accepted $2 on $1 (rc $rc)"; }
ck_ok() { "$CK" dump "$1" --dump-volume-key --batch-mode --key-file "$2" >/dev/null; }
ck_bad() { expect_fail 2 passphrase "$CK" dump "$1" --dump-volume-key --batch-mode --key-file "$2"; }

for spec in "luks2 aes-xts-plain64 512 4096" "luks2 aes-cbc-essiv:sha256 256 512" "luks1 aes-xts-plain64 256 512" "luks1 aes-cbc-essiv:sha256 256 512"; do
  set -- $spec; type=$1 cipher=$2 bits=$3 sector=$4
  vol=$W/ours-$type-${cipher%%:*}.img
  step "ours -> cryptsetup: $type $cipher $bits-bit, $sector-byte sectors"
  args=(--type "$type" --cipher "$cipher" --key-size "$bits")
  [ "$type" = luks2 ] && args+=(--sector-size "$sector")
  mkvol "$vol" 40M "$W/p1" "${args[@]}"
  cryptsetup luksDump "$vol" > "$W/csdump" || fail "cryptsetup luksDump rejected our $type volume"
  grep -q "Version:.*${type#luks}" "$W/csdump" || fail "luksDump shows the wrong version"
  grep -Eq "(Cipher|cipher)( name)?:.*(${cipher}|aes)" "$W/csdump" || fail "luksDump shows the wrong cipher"
  cs_ok "$vol" "$W/p1" || fail "cryptsetup --test-passphrase rejected our passphrase"
  cs_bad "$vol" "$W/p2"
  ours=$("$CK" dump "$vol" --dump-volume-key --batch-mode --key-file "$W/p1" | keyhex)
  theirs=$(cryptsetup luksDump --dump-volume-key -q --key-file "$W/p1" "$vol" | keyhex)
  [ -n "$ours" ] && [ "$ours" = "$theirs" ] || fail "volume keys differ: ours=$ours cryptsetup=$theirs"
  [ ${#ours} = $((bits / 4)) ] || fail "volume key has ${#ours} hex digits, want $((bits / 4))"
done

for spec in "luks2 aes-xts-plain64 512 4096" "luks2 aes-xts-plain64 256 512" "luks2 aes-cbc-essiv:sha256 256 4096" "luks1 aes-xts-plain64 512 512" "luks1 aes-cbc-essiv:sha256 256 512"; do
  set -- $spec; type=$1 cipher=$2 bits=$3 sector=$4
  vol=$W/theirs.img; rm -f "$vol"; truncate -s 40M "$vol"
  step "cryptsetup -> ours: $type $cipher $bits-bit, $sector-byte sectors"
  args=(--type "$type" --cipher "$cipher" --key-size "$bits")
  [ "$type" = luks2 ] && args+=(--sector-size "$sector")
  cryptsetup luksFormat -q "${CS_FAST[@]}" "${args[@]}" --key-file "$W/p1" "$vol" </dev/null
  dev=$("$CK" open "$vol" cs --key-file "$W/p1")
  [ -b "$dev" ] || fail "open printed '$dev'"
  "$CK" status cs --json > "$W/st.json"
  json_has "$W/st.json" cipher "\"$cipher\""
  json_has "$W/st.json" key_size "$bits"
  json_has "$W/st.json" sector_size "$sector"
  json_has "$W/st.json" type "\"$type\""
  [ "$(blockdev --getss "$dev")" = "$sector" ] || fail "loop device sector size $(blockdev --getss "$dev"), want $sector"
  "$CK" close cs
  ours=$("$CK" dump "$vol" --dump-volume-key --batch-mode --key-file "$W/p1" | keyhex)
  theirs=$(cryptsetup luksDump --dump-volume-key -q --key-file "$W/p1" "$vol" | keyhex)
  [ "$ours" = "$theirs" ] || fail "volume keys differ on a cryptsetup volume"
done

for type in luks2 luks1; do
  step "$type keyslots: each tool accepts the other's changes"
  vol=$W/ks-$type.img; rm -f "$vol"
  mkvol "$vol" 40M "$W/p1" --type "$type"
  # cryptsetup adds p2 -> we open with it
  cryptsetup luksAddKey -q "${CS_FAST[@]}" --key-file "$W/p1" "$vol" "$W/p2" </dev/null
  ck_ok "$vol" "$W/p2" || fail "cryptkeep rejected a passphrase cryptsetup added"
  # we add p3 -> cryptsetup opens with it
  "$CK" keyslot add "$vol" "$W/p3" --key-file "$W/p1" "${FAST[@]}"
  cs_ok "$vol" "$W/p3" || fail "cryptsetup rejected a passphrase cryptkeep added"
  # luksAddKey alias, cryptsetup order
  "$CK" luksAddKey "$vol" "$W/p4" --key-file "$W/p3" "${FAST[@]}"
  cs_ok "$vol" "$W/p4" || fail "cryptsetup rejected a passphrase added by luksAddKey"
  # we remove p2 -> cryptsetup refuses it, keeps the rest
  "$CK" keyslot remove "$vol" --key-file "$W/p2" --batch-mode
  cs_bad "$vol" "$W/p2"; cs_ok "$vol" "$W/p1" || fail "cryptsetup lost p1"
  # cryptsetup removes p4 -> we refuse it
  cryptsetup luksRemoveKey -q "$vol" "$W/p4" </dev/null
  ck_bad "$vol" "$W/p4"; ck_ok "$vol" "$W/p3" || fail "cryptkeep lost p3"
  # we change p3 -> p2; cryptsetup follows
  "$CK" keyslot change "$vol" "$W/p2" --key-file "$W/p3" "${FAST[@]}"
  cs_ok "$vol" "$W/p2" || fail "cryptsetup rejected a passphrase cryptkeep changed to"
  cs_bad "$vol" "$W/p3"
  # cryptsetup changes p2 -> p4; we follow
  cryptsetup luksChangeKey -q "${CS_FAST[@]}" --key-file "$W/p2" "$vol" "$W/p4" </dev/null
  ck_ok "$vol" "$W/p4" || fail "cryptkeep rejected a passphrase cryptsetup changed to"
  ck_bad "$vol" "$W/p2"
  # luksKillSlot by cryptsetup (slot of p1 = 0) -> we refuse p1
  cryptsetup luksKillSlot -q --key-file "$W/p4" "$vol" 0 </dev/null
  ck_bad "$vol" "$W/p1"
  # luksKillSlot by us, checked with a remaining passphrase
  cryptsetup luksAddKey -q "${CS_FAST[@]}" --key-file "$W/p4" "$vol" "$W/p1" </dev/null
  slot=$(cryptsetup open --test-passphrase -v --key-file "$W/p1" "$vol" </dev/null 2>&1 | sed -n 's/^Key slot \([0-9]*\) unlocked.*/\1/p')
  [ -n "$slot" ] || fail "cannot find the keyslot of p1"
  "$CK" luksKillSlot "$vol" "$slot" --key-file "$W/p4"
  cs_bad "$vol" "$W/p1"; cs_ok "$vol" "$W/p4" || fail "cryptsetup lost p4 after our luksKillSlot"
  cryptsetup luksDump "$vol" >/dev/null || fail "luksDump rejected the volume after keyslot changes"
done
for kdf in argon2i argon2id; do
  step "$kdf keyslots (cheap: 4 passes, 32 KiB), both ways"
  A=(--pbkdf "$kdf" --pbkdf-force-iterations 4 --pbkdf-memory 32)
  vol=$W/$kdf.img; rm -f "$vol"; truncate -s 40M "$vol"
  cryptsetup luksFormat -q "${A[@]}" --key-file "$W/p1" "$vol" </dev/null
  ours=$("$CK" dump "$vol" --dump-volume-key --batch-mode --key-file "$W/p1" | keyhex)
  theirs=$(cryptsetup luksDump --dump-volume-key -q --key-file "$W/p1" "$vol" | keyhex)
  [ -n "$ours" ] && [ "$ours" = "$theirs" ] || fail "$kdf: volume keys differ on a cryptsetup volume"
  "$CK" keyslot add "$vol" "$W/p2" --key-file "$W/p1" "${A[@]}"
  cryptsetup luksDump "$vol" | grep -q "PBKDF:.*$kdf" || fail "$kdf: our keyslot is not $kdf"
  cs_ok "$vol" "$W/p2" || fail "$kdf: cryptsetup rejected our $kdf keyslot"
done

step "detached headers (--header), both ways"
rm -f "$W/data.img" "$W/hdr.img"; truncate -s 32M "$W/data.img"
"$CK" format "$W/data.img" --header "$W/hdr.img" "${FAST[@]}" --key-file "$W/p1" --batch-mode
cryptsetup luksDump "$W/hdr.img" | grep -q 'offset: 0 \[bytes\]' || fail "detached header: data offset is not 0"
cryptsetup open --test-passphrase --header "$W/hdr.img" --key-file "$W/p1" "$W/data.img" </dev/null || fail "cryptsetup rejected our detached header"
dev=$("$CK" open "$W/data.img" det --header "$W/hdr.img" --key-file "$W/p1")
[ "$(blockdev --getsize64 "$dev")" = $((32 << 20)) ] || fail "detached: device size $(blockdev --getsize64 "$dev"), want the whole data file"
"$CK" close det
rm -f "$W/hdr2.img"; truncate -s 32M "$W/data.img"
cryptsetup luksFormat -q "${CS_FAST[@]}" --header "$W/hdr2.img" --key-file "$W/p2" "$W/data.img" </dev/null
dev=$("$CK" open "$W/data.img" det --header "$W/hdr2.img" --key-file "$W/p2")
"$CK" status det --json > "$W/st.json"
grep -q "\"header\": \"$W/hdr2.img\"" "$W/st.json" || fail "status lacks the header"
"$CK" close det
echo "PASS cryptsetup_interop"
