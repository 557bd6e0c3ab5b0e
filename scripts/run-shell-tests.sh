#!/usr/bin/env bash
# Runs shell test scripts two at a time, each with its own log (printed when
# it fails) and a time limit; ends with 'e2e: N passed, N failed' and exits
# non-zero if any failed.
# usage: scripts/run-shell-tests.sh [-j N] [-t SECONDS] test.sh...
set -uo pipefail
jobs=2 limit=1200
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=$2; shift 2;;
    -t) limit=$2; shift 2;;
    *) break;;
  esac
done
logs=$(mktemp -d /tmp/ck-tests.XXXXXX)
trap 'rm -rf "$logs"' EXIT

run_one() {
  local t=$1 id=$2 start=$SECONDS rc=0
  timeout --kill-after=30 "$limit" bash "$t" >"$logs/$id.log" 2>&1 </dev/null || rc=$?
  echo "$rc $((SECONDS - start))" > "$logs/$id.rc"
}

tests=("$@")
i=0
for t in "${tests[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  echo "e2e: start $t"
  run_one "$t" "$i" &
  i=$((i + 1))
done
wait

passed=0 failed=0 i=0
for t in "${tests[@]}"; do
  read -r rc secs < "$logs/$i.rc" || { rc=99; secs=0; }
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1)); echo "e2e: PASS $t (${secs}s)"
  else
    failed=$((failed + 1))
    [ "$rc" = 124 ] && why="timed out after ${limit}s" || why="exit $rc"
    echo "e2e: FAIL $t ($why, ${secs}s) — its log:"
    sed 's/^/    | /' "$logs/$i.log"
  fi
  i=$((i + 1))
done
echo "e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
