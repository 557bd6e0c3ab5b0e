#!/usr/bin/env bash
# `cryptkeep bench`, end to end with every report's real measurements at
# tiny sizes (--quick):
# - `bench all --quick` exits 0, and each report has its page, its data and
#   its charts; the driver checked that every target has every metric (a
#   missing row fails the run), so this also proves each table is complete;
# - every value in the data is a positive number and the index names every report;
# - nothing is left behind: no mount, loop device or process that points
#   into the run's work directories;
# - `bench --side-by-side RUN RUN` puts the run beside itself, one table per report;
# - Ctrl-C in the middle of a report: exit 130, and again nothing left behind.
source "$(dirname "$0")/lib/common.sh"

# The report scripts make their work directories under TMPDIR.
export TMPDIR=$W/tmp
mkdir -p "$TMPDIR"

leftovers() {
  { awk -v w="$W" 'index($2, w) == 1 {print "mount " $2}' /proc/self/mounts
    losetup -n -O NAME,BACK-FILE 2>/dev/null | awk -v w="$W" 'index($2, w) == 1 {print "loop " $0}'
    for p in /proc/[0-9]*; do
      [ "${p#/proc/}" = $$ ] && continue
      if { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -q "^TMPDIR=$W/tmp$"; then
        echo "process ${p#/proc/}: $({ tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | cut -c1-80)"
      fi
    done
  } | grep -v "^process $BASHPID:" || true
}

step "bench all --quick: every report, every row"
"$CK" bench all --quick --out "$W/res" > "$W/index-path" 2> "$W/bench.err" \
  || { cat "$W/bench.err" >&2; for l in "$W"/res/*/*/log.txt; do echo "== $l"; tail -30 "$l"; done >&2; fail "bench all --quick failed"; }
index=$(cat "$W/index-path")
[ -f "$index" ] || fail "bench printed $index, which does not exist"
run=$(dirname "$index")
grep -q "^| CPU |" "$run/machine.md" || fail "machine.md lacks the CPU"
for r in tresor encfs secgear caam integrity; do
  d=$run/$r
  [ -s "$d/report.md" ] || fail "$r: no report.md"
  grep -q "^## This machine, this run" "$d/report.md" || fail "$r: report.md lacks our tables"
  grep -q "^## As published" "$d/report.md" || fail "$r: report.md lacks the published tables"
  rows=$(tail -n +2 "$d/data.csv" | grep -c .) || true
  [ "$rows" -gt 0 ] || fail "$r: data.csv is empty"
  bad=$(tail -n +2 "$d/data.csv" | awk -F, '!($5 > 0) {print}' | head -3)
  [ -z "$bad" ] || fail "$r: values that are not positive: $bad"
  ls "$d"/chart-*.svg >/dev/null 2>&1 || fail "$r: no chart"
  for svg in "$d"/chart-*.svg; do grep -q "<svg" "$svg" || fail "$svg is not an SVG"; done
  grep -q "($r/report.md)" "$index" || fail "index.md does not link the $r report"
  grep -q "\*\*Failed:\*\*" "$index" && fail "index.md reports a failure"
  echo "ok: $r: $rows measurements, $(ls "$d"/chart-*.svg | wc -l) chart(s)"
done
[ "$(tail -n +2 "$run/data.csv" | grep -c .)" -gt 0 ] || fail "the run's data.csv is empty"
left=$(leftovers); [ -z "$left" ] || fail "left behind after bench all: $left"

step "--side-by-side: the run beside itself, one table per report"
"$CK" bench --side-by-side "$run" "$run" > "$W/both.md" 2> "$W/both.err" || { cat "$W/both.err" >&2; fail "bench --side-by-side failed"; }
grep -q "^- \*\*B\*\*: run \[\`$(basename "$run")\`\]" "$W/both.md" || { head -8 "$W/both.md" >&2; fail "the page does not name the runs"; }
for title in "The TresorSGX report" "The EncFS vs eCryptfs report"; do
  grep -q "^## $title" "$W/both.md" || fail "the side-by-side page lacks $title"
done
grep -q "^| metric | cryptkeep | A: cryptkeep | A: best peer | A: × peer | A: × baseline | B: cryptkeep" "$W/both.md" \
  || fail "the side-by-side page has no two-run table"
expect_fail 1 "2 values required" "$CK" bench --side-by-side "$run"
echo "ok: $(grep -c '^| ' "$W/both.md") table rows"

step "Ctrl-C during a report: exit 130, nothing left behind"
"$CK" bench tresor --quick --out "$W/res-int" > /dev/null 2> "$W/int.err" &
pid=$!
# Wait until the report has something set up (a loop device or a mount in its work dir).
for _ in $(seq 1 600); do
  [ -n "$(leftovers | grep -E '^(mount|loop)')" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$(leftovers | grep -E '^(mount|loop)')" ] || fail "the tresor report never set anything up"
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 130 ] || { cat "$W/int.err" >&2; fail "interrupted bench exited $rc, expected 130"; }
grep -qi "interrupted" "$W/int.err" || fail "no 'interrupted' message: $(cat "$W/int.err")"
for _ in $(seq 1 50); do [ -z "$(leftovers)" ] && break; sleep 0.2; done
left=$(leftovers); [ -z "$left" ] || fail "left behind after Ctrl-C: $left"
echo "ok: exit 130, nothing left"

step "unknown report: a clear error"
expect_fail 1 "invalid value 'nope'" "$CK" bench nope
echo "PASS"
