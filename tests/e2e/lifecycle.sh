#!/usr/bin/env bash
# The daemon's life: --foreground serves until SIGTERM/SIGINT and cleans
# up; a daemon killed with SIGTERM cleans up after itself; one killed with
# SIGKILL leaves a stale record that status reports and close (or the next
# open) cleans; key files follow cryptsetup's semantics.
source "$(dirname "$0")/lib/common.sh"

printf 'life passphrase' > "$W/pass"
vol=$W/vol.img
mkvol "$vol" 40M "$W/pass"

wait_for() { # wait_for SECONDS CMD...: polls CMD until it succeeds
  local n=$(( $1 * 10 )); shift
  while [ $n -gt 0 ]; do "$@" && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}
state_has_device() { grep -q '"device": "/dev/' "$CRYPTKEEP_RUN_DIR/$1/state.json" 2>/dev/null; }
gone() { [ ! -e "$CRYPTKEEP_RUN_DIR/$1" ]; }

for sig in TERM INT; do
  step "--foreground serves until SIG$sig, then cleans up"
  "$CK" open "$vol" fg --key-file "$W/pass" --foreground > "$W/fg.out" 2> "$W/fg.err" &
  pid=$!
  wait_for 20 state_has_device fg || { cat "$W/fg.err"; fail "foreground open never attached a device"; }
  dev=$(head -n1 "$W/fg.out")
  [ -b "$dev" ] || fail "foreground open printed '$dev'"
  "$CK" status fg --json > "$W/st.json"
  json_has "$W/st.json" pid "$pid"
  kill -s "$sig" "$pid"
  wait "$pid" || fail "foreground open exited $? after SIG$sig"
  gone fg || fail "foreground open left its state after SIG$sig"
  [ -z "$(losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep "$W" || true)" ] || fail "$dev still attached"
done

step "close stops a --foreground open too"
"$CK" open "$vol" fg --key-file "$W/pass" --foreground > "$W/fg.out" 2> "$W/fg.err" &
pid=$!
wait_for 20 state_has_device fg || fail "foreground open never attached a device"
"$CK" close fg
wait "$pid" || fail "foreground open exited $? after close"
gone fg || fail "close left the state"

step "SIGTERM to the daemon: it detaches and removes its state"
dev=$("$CK" open "$vol" d1 --key-file "$W/pass")
pid=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/d1/state.json")
[ -n "$pid" ] && kill -0 "$pid" || fail "no daemon pid in the state"
kill -TERM "$pid"
wait_for 20 gone d1 || fail "daemon did not clean up after SIGTERM"
[ -z "$(losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep "$W" || true)" ] || fail "$dev still attached after SIGTERM"

step "SIGKILL leaves a stale record: status says so, close cleans up"
dev=$("$CK" open "$vol" d2 --key-file "$W/pass")
pid=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/d2/state.json")
kill -KILL "$pid"
wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || fail "daemon survived SIGKILL"
"$CK" status d2 --json > "$W/st.json"
json_has "$W/st.json" daemon_alive false
"$CK" close d2 || fail "close of a stale volume failed"
gone d2 || fail "close left the stale state"
[ -z "$(losetup -n -O BACK-FILE "$dev" 2>/dev/null | grep "$W" || true)" ] || fail "$dev still attached after close"

step "SIGKILL, then open under the same name cleans up and reopens"
"$CK" open "$vol" d3 --key-file "$W/pass" >/dev/null
pid=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/d3/state.json")
kill -KILL "$pid"
wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || fail "daemon survived SIGKILL"
"$CK" open "$vol" d3 --key-file "$W/pass" >/dev/null 2>"$W/err" || { cat "$W/err"; fail "reopen after a dead daemon failed"; }
grep -q 'died' "$W/err" || fail "reopen did not say it cleaned up a dead daemon"
"$CK" close d3

step "discards reach the image only with --allow-discards"
dvol=$W/disc.img
mkvol "$dvol" 48M "$W/pass"
for mode in off on; do
  extra=(); [ $mode = on ] && extra=(--allow-discards)
  dev=$("$CK" open "$dvol" disc --key-file "$W/pass" "${extra[@]}")
  dd if=/dev/urandom of="$dev" bs=1M seek=4 count=8 oflag=direct status=none
  sync
  before=$(du -k "$dvol" | cut -f1)
  blkdiscard -o $((4 << 20)) -l $((8 << 20)) "$dev" 2>/dev/null || true
  after=$(du -k "$dvol" | cut -f1)
  if [ $mode = on ]; then
    [ $((before - after)) -ge 7000 ] || fail "--allow-discards: image went from ${before}K to ${after}K"
    zeros=$(dd if="$dev" bs=1M skip=4 count=8 iflag=direct status=none | tr -d '\0' | wc -c)
    [ "$zeros" = 0 ] || fail "discarded sectors do not read back as zeros"
  else
    [ "$after" -ge "$((before - 64))" ] || fail "without --allow-discards the image shrank (${before}K -> ${after}K)"
  fi
  "$CK" close disc
done

step "key files: binary, whole, offset/size; piped lines lose their newline"
printf 'line passphrase\n' > "$W/nl"
kvol=$W/kf.img
"$CK" format "$kvol" --size 40M "${FAST[@]}" --key-file - --batch-mode < "$W/nl"   # key = 16 bytes incl. newline
cryptsetup open --test-passphrase --key-file "$W/nl" "$kvol" </dev/null || fail "cryptsetup disagrees on the key-file bytes"
"$CK" dump "$kvol" --dump-volume-key -q --key-file "$W/nl" >/dev/null || fail "key file with newline refused"
rc=0; printf 'line passphrase\n' | "$CK" dump "$kvol" --dump-volume-key -q >/dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "a piped line kept its newline (exit $rc)"
printf 'XXXXline passphrase\nYYYY' > "$W/padded"
"$CK" dump "$kvol" --dump-volume-key -q --key-file "$W/padded" --keyfile-offset 4 --keyfile-size 16 >/dev/null \
  || fail "--keyfile-offset/--keyfile-size not honoured"
cryptsetup open --test-passphrase --key-file "$W/padded" --keyfile-offset 4 --keyfile-size 16 "$kvol" </dev/null \
  || fail "cryptsetup disagrees on --keyfile-offset/--keyfile-size"
"$CK" keyslot add "$kvol" "$W/padded" --new-keyfile-offset 4 --new-keyfile-size 4 --key-file "$W/nl" "${FAST[@]}" 2>/dev/null
printf 'line' > "$W/four"
cryptsetup open --test-passphrase --key-file "$W/four" "$kvol" </dev/null || fail "--new-keyfile-offset/size not honoured"
echo "PASS lifecycle"
