#!/usr/bin/env bash
# Crash rounds: an integrity device served by `cryptkeep integrity open`,
# a writer doing synchronous 64 KiB writes (each a distinct pattern), and
# the daemon killed with SIGKILL at a random moment, ROUNDS times (100 by
# default), with the journal on, then off, then in bitmap mode. After every kill: every
# block's tag verifies (journal on: never a torn block; journal off: a torn
# block may only fail its tag, it never reads as wrong data; bitmap mode:
# the reopen recalculates the dirty regions, so every tag verifies), and every
# block of every slot holds what the last acknowledged write put there or
# what a later, unacknowledged one did (a write cut by the crash may land
# in part, block by block, as on any disk), after a reopen that replays
# the journal.
source "$(dirname "$0")/lib/common.sh"

ROUNDS=${CRYPTKEEP_CRASH_ROUNDS:-100}
img=$W/crash.img
truncate -s 24M "$img"
"$CK" integrity format -q "$img" >/dev/null
CHUNK=65536
SLOTS=256   # 16 MiB of the device, in 64 KiB slots
# chunk SEED: the 64 KiB written for SEED (its number repeated).
chunk() { yes "$1" | head -c $CHUNK; }
set +o pipefail   # chunk's `yes` always ends on SIGPIPE
declare -A want=()   # slot -> seeds allowed there: the last acknowledged, then later attempts

daemon_pid() { "$CK" status crash-int --json | sed -n 's/^  "pid": \([0-9]*\),$/\1/p'; }

for mode in journal direct bitmap; do
  opts=(); [ "$mode" = direct ] && opts=(--integrity-no-journal)
  [ "$mode" = bitmap ] && opts=(--integrity-bitmap-mode)
  step "$ROUNDS rounds of SIGKILL during synchronous writes ($mode)"
  for ((r = 1; r <= ROUNDS; r++)); do
    dev=$("$CK" integrity open "${opts[@]}" "$img" crash-int) || fail "round $r: open failed"
    pid=$(daemon_pid)
    [ -n "$pid" ] || fail "round $r: no daemon pid"
    : > "$W/acks"
    : > "$W/tries"
    (
      for ((i = 0; i < 40; i++)); do
        seed=$((r * 1000 + i)); slot=$(( (seed * 7919) % SLOTS ))
        chunk "$seed" > "$W/chunk" || true   # (yes ends on SIGPIPE)
        echo "$slot $seed" >> "$W/tries"
        dd if="$W/chunk" of="$dev" bs=$CHUNK seek="$slot" oflag=direct,dsync conv=notrunc status=none 2>/dev/null \
          || exit 0
        echo "$slot $seed" >> "$W/acks"
      done
    ) &
    writer=$!
    sleep "0.0$((RANDOM % 9))$((RANDOM % 10))"
    kill -9 "$pid" 2>/dev/null || true
    wait "$writer" || true
    # Until the killed daemon has finished exiting (gone, or a zombie):
    # what this test checks is the data, not how fast a dying process ends.
    for ((t = 0; t < 200; t++)); do
      [ -e "/proc/$pid" ] && ! grep -q ') Z' "/proc/$pid/stat" 2>/dev/null || break
      sleep 0.05
    done
    "$CK" close crash-int >/dev/null 2>"$W/close.err" || cat "$W/close.err" >&2
    # An acknowledged write replaces what a slot may hold; an attempt adds.
    while read -r slot seed; do
      if grep -qx "$slot $seed" "$W/acks"; then want[$slot]=$seed; else want[$slot]="${want[$slot]:-zero} $seed"; fi
    done < "$W/tries"
    # Reopen (replays the journal in place), then check everything.
    "$CK" integrity open "${opts[@]}" "$img" crash-int >/dev/null || fail "round $r: reopen failed"
    "$CK" close crash-int >/dev/null || fail "round $r: close after reopen failed"
    rc=0; "$CK" integrity verify "$img" --output "$W/data" > "$W/v.out" 2> "$W/v.err" || rc=$?
    if [ "$mode" != direct ] && [ "$rc" != 0 ]; then
      fail "round $r ($mode): blocks fail their tags after a crash: $(cat "$W/v.err")"
    fi
    [ "$rc" = 0 ] || [ "$rc" = 6 ] || fail "round $r: verify exit $rc: $(cat "$W/v.err")"
    for slot in "${!want[@]}"; do echo "$slot ${want[$slot]}"; done > "$W/allowed"
    python3 - "$W/data" "$W/allowed" "$CHUNK" "$mode" "$r" <<'PY' || fail "round $r ($mode): a block holds neither an acknowledged nor an attempted write"
import sys
data = open(sys.argv[1], 'rb').read()
chunk, mode, rnd = int(sys.argv[3]), sys.argv[4], sys.argv[5]
def content(seed):
    if seed == 'zero':
        return bytes(chunk)
    line = (seed + '\n').encode()
    return (line * (chunk // len(line) + 1))[:chunk]
for row in open(sys.argv[2]):
    slot, *seeds = row.split()
    got = data[int(slot) * chunk:(int(slot) + 1) * chunk]
    options = [content(s) for s in seeds]
    for b in range(0, chunk, 512):
        blk = got[b:b + 512]
        if any(blk == o[b:b + 512] for o in options):
            continue
        # Journal off: a torn block fails its tag (verify wrote zeros).
        if mode == 'direct' and blk == bytes(512):
            continue
        print(f"round {rnd} ({mode}): slot {slot} block {b // 512} holds none of {seeds}", file=sys.stderr)
        sys.exit(1)
PY
  done
  echo "  $ROUNDS rounds, ${#want[@]} slots checked"
  # The next mode starts from a device every tag of which verifies.
  "$CK" integrity format -q "$img" >/dev/null
  unset want
  declare -A want=()
done
echo "PASS integrity_crash"
