#!/usr/bin/env bash
# Errors: each has its documented exit code, a stderr line that names the
# problem ('cryptkeep: what (where): hint'), and leaves the header alone.
source "$(dirname "$0")/lib/common.sh"

printf 'right passphrase' > "$W/pass"
printf 'wrong passphrase' > "$W/bad"
vol=$W/vol.img
mkvol "$vol" 40M "$W/pass"
hsum() { head -c 16777216 "$vol" | sha256sum; }
before=$(hsum)

step "wrong passphrase: exit 2, header unchanged"
expect_fail 2 'passphrase' "$CK" open "$vol" e1 --key-file "$W/bad"
expect_fail 2 'passphrase' "$CK" dump "$vol" --dump-volume-key --batch-mode --key-file "$W/bad"
expect_fail 2 'passphrase' "$CK" keyslot add "$vol" "$W/pass" --key-file "$W/bad" "${FAST[@]}"
expect_fail 2 'passphrase' "$CK" keyslot change "$vol" "$W/pass" --key-file "$W/bad" "${FAST[@]}"
expect_fail 2 'passphrase' "$CK" keyslot remove "$vol" --key-file "$W/bad" --batch-mode
[ "$(hsum)" = "$before" ] || fail "a failed command changed the header"
[ ! -e "$CRYPTKEEP_RUN_DIR/e1" ] || fail "failed open left a state dir"

step "wrong passphrase piped on stdin (one line, newline stripped)"
rc=0; printf 'wrong passphrase\n' | "$CK" open "$vol" e1 2>"$W/err" || rc=$?
[ $rc = 2 ] || { cat "$W/err"; fail "piped wrong passphrase: exit $rc"; }
dev=$(printf 'right passphrase\n' | "$CK" open "$vol" e1) || fail "piped right passphrase refused"
"$CK" close e1

step "missing volume: exit 4"
expect_fail 4 "$W/nope.img" "$CK" open "$W/nope.img" e2 --key-file "$W/pass"
expect_fail 4 'does not exist.*--size' "$CK" format "$W/nope.img" --key-file "$W/pass" --batch-mode
expect_fail 4 "$W/nokey" "$CK" open "$vol" e2 --key-file "$W/nokey"

step "not a LUKS file: exit 4"
truncate -s 20M "$W/zero.img"
expect_fail 4 'not a LUKS' "$CK" open "$W/zero.img" e3 --key-file "$W/pass"
expect_fail 4 'not a LUKS' "$CK" dump "$W/zero.img"
expect_fail 4 'not a LUKS' "$CK" isLuks "$W/zero.img"
"$CK" isLuks "$vol" || fail "isLuks refused a LUKS volume"

step "name in use / volume already open: exit 5"
dev=$("$CK" open "$vol" busy --key-file "$W/pass")
expect_fail 5 "already open.*$dev.*cryptkeep close busy" "$CK" open "$vol" busy --key-file "$W/pass"
expect_fail 5 "already open as busy" "$CK" open "$vol" other --key-file "$W/pass"
expect_fail 5 "open as busy" "$CK" format "$vol" --key-file "$W/pass" --batch-mode "${FAST[@]}"
[ "$(hsum)" = "$before" ] || fail "refused format changed the header"
"$CK" close busy

step "close while the file system is in use: exit 5, everything stays up"
mkdir -p "$W/mnt"
dev=$("$CK" open "$vol" busy --key-file "$W/pass")
mkfs.ext4 -q -F "$dev"
"$CK" close busy
"$CK" open "$vol" busy --key-file "$W/pass" --mount "$W/mnt" >/dev/null
(cd "$W/mnt" && exec sleep 60) &
holder=$!
sleep 0.3
expect_fail 5 'unmount|busy' "$CK" close busy
"$CK" status busy --json > "$W/st.json"
json_has "$W/st.json" daemon_alive true
mountpoint -q "$W/mnt" || fail "a refused close unmounted the file system"
kill "$holder"; wait "$holder" 2>/dev/null || true
"$CK" close busy
mountpoint -q "$W/mnt" && fail "close left $W/mnt mounted"
before=$(hsum)

step "existing LUKS header, no --batch-mode, no terminal: refused (exit 5)"
expect_fail 5 'already has a LUKS header' "$CK" format "$vol" --key-file "$W/pass" "${FAST[@]}"
[ "$(hsum)" = "$before" ] || fail "refused format changed the header"

step "close / status of an unknown name: exit 4 with a hint"
expect_fail 4 'cryptkeep status lists open volumes' "$CK" close nosuchname
expect_fail 4 'cryptkeep status' "$CK" status nosuchname --json
"$CK" status --json | grep -q '^\[' || fail "status --json is not an array"

step "truncated header file: exit 6"
head -c 8192 "$vol" > "$W/trunc.img"
expect_fail 6 'trunc|short|header' "$CK" open "$W/trunc.img" e4 --key-file "$W/pass"
expect_fail 6 'trunc|short|header' "$CK" dump "$W/trunc.img"
step "volume truncated after its header (data segment missing): exit 6"
head -c 16777216 "$vol" > "$W/nodata.img"
expect_fail 6 'does not fit' "$CK" open "$W/nodata.img" e5 --key-file "$W/pass"

step "usage errors: exit 1"
expect_fail 1 'unexpected argument|error' "$CK" open "$vol" --no-such-option
expect_fail 1 'invalid name' "$CK" open "$vol" 'bad/name' --key-file "$W/pass"
expect_fail 1 'sector' "$CK" format "$W/x.img" --size 40M --type luks1 --sector-size 4096 --key-file "$W/pass" --batch-mode
[ ! -e "$W/x.img" ] || fail "a refused format left a new file behind"

step "argon2 costs past cryptsetup's limits: exit 1 before calibrating"
expect_fail 1 'parallel cost 5 is above the maximum of 4' "$CK" format "$W/x.img" --size 40M --pbkdf argon2id --pbkdf-parallel 5 --key-file "$W/pass" --batch-mode
expect_fail 1 'memory cost 4194305 KiB' "$CK" format "$W/x.img" --size 40M --pbkdf argon2id --pbkdf-memory 4194305 --key-file "$W/pass" --batch-mode
expect_fail 1 'parallel cost 8' "$CK" keyslot add "$vol" "$W/pass" --key-file "$W/pass" --pbkdf argon2i --pbkdf-parallel 8
[ ! -e "$W/x.img" ] || fail "a refused format left a new file behind"

step "gocryptfs.conf with scrypt parameters gocryptfs calls too large, or a symlink: exit 6"
mkdir -p "$W/c" "$W/fsm"
printf 'fs password\n' > "$W/fspw"
"$CK" fs init "$W/c" --passfile "$W/fspw" --scryptn 10 >/dev/null
cp "$W/c/gocryptfs.conf" "$W/good.conf"
sed -E 's/"P": 1/"P": 2147483648/' "$W/good.conf" > "$W/bigp.conf"
grep -q '"P": 2147483648' "$W/bigp.conf" || fail "could not edit the scrypt P"
rm -f "$W/c/gocryptfs.conf"; cp "$W/bigp.conf" "$W/c/gocryptfs.conf"
expect_fail 6 'gocryptfs.conf.*P=2147483648' "$CK" fs fsck "$W/c" --passfile "$W/fspw"
expect_fail 6 'gocryptfs.conf.*P=2147483648' "$CK" fs passwd "$W/c" --passfile "$W/fspw" --new-passfile "$W/fspw"
expect_fail 6 'gocryptfs.conf.*P=2147483648' "$CK" fs mount "$W/c" "$W/fsm" --passfile "$W/fspw"
rm -f "$W/c/gocryptfs.conf"; ln -s "$W/good.conf" "$W/c/gocryptfs.conf"
expect_fail 6 'symbolic link' "$CK" fs mount "$W/c" "$W/fsm" --passfile "$W/fspw"
"$CK" fs info "$W/c" --config "$W/c/gocryptfs.conf" >/dev/null || fail "fs info --config refused a symlink"
mountpoint -q "$W/fsm" && fail "a refused fs mount mounted"

[ "$(hsum)" = "$before" ] || fail "header changed"
echo "PASS errors"
