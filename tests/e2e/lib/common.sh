# Shared helpers of the end-to-end CLI tests (sourced, not run).
# Each test gets its own work dir under /tmp and its own CRYPTKEEP_RUN_DIR,
# so tests run in parallel; the EXIT trap closes every volume it opened,
# unmounts, detaches loop devices and removes the work dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
CK=${CK:-$ROOT/target/release/cryptkeep}
[ -x "$CK" ] || { echo "FAIL: $CK missing: build first (cargo build --release -p cryptkeep-cli)" >&2; exit 1; }
for t in losetup mount umount mkfs.ext4 e2fsck sha256sum fusermount3; do
  command -v "$t" >/dev/null || { echo "FAIL: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "FAIL: the e2e tests need root (loop devices, mount)" >&2; exit 1; }

W=$(mktemp -d /tmp/ck-e2e.XXXXXX)
export CRYPTKEEP_RUN_DIR=$W/run
# Cheap KDF for tests (cryptsetup's minimum PBKDF2 cost).
FAST=(--pbkdf pbkdf2 --pbkdf-force-iterations 1000)
EXTRA_LOOPS=()

cleanup() {
  local rc=$?
  set +e
  if [ -d "$CRYPTKEEP_RUN_DIR" ]; then
    for d in "$CRYPTKEEP_RUN_DIR"/*/; do
      [ -d "$d" ] || continue
      "$CK" close "$(basename "$d")" >/dev/null 2>&1
    done
  fi
  for m in $(awk -v w="$W" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null
  done
  for l in "${EXTRA_LOOPS[@]}"; do losetup -d "$l" 2>/dev/null; done
  # Loop devices still pointing into the work dir.
  losetup -n -O NAME,BACK-FILE 2>/dev/null | awk -v w="$W" 'index($2, w) == 1 {print $1}' | xargs -r -n1 losetup -d 2>/dev/null
  rm -rf "$W"
  exit $rc
}
trap cleanup EXIT

step() { echo "--- $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_fail CODE REGEX cmd... : runs cmd, checks its exit code is CODE and
# its stderr matches REGEX (grep -E, case-insensitive).
expect_fail() {
  local want=$1 re=$2; shift 2
  local rc=0
  "$@" >"$W/out" 2>"$W/err" </dev/null || rc=$?
  if [ "$rc" != "$want" ]; then
    echo "stderr was:" >&2; cat "$W/err" >&2
    fail "expected exit $want, got $rc: $*"
  fi
  grep -Eqi -- "$re" "$W/err" || { echo "stderr was:" >&2; cat "$W/err" >&2; fail "stderr of '$*' does not match /$re/"; }
  grep -q '^cryptkeep: ' "$W/err" || fail "stderr of '$*' lacks the 'cryptkeep: ' prefix"
  echo "ok: exit $rc, $(head -n1 "$W/err")"
}

# A file-backed LUKS volume: mkvol PATH SIZE PASSFILE [format options...]
mkvol() {
  local p=$1 size=$2 pass=$3; shift 3
  "$CK" format "$p" --size "$size" "${FAST[@]}" --key-file "$pass" --batch-mode "$@" </dev/null
}

# make_tree DIR COUNT SEED: COUNT files of varying sizes (0 B .. 128 KiB, ~26 KiB on average,
# a few of 1-3 MiB) in nested directories, content from /dev/urandom.
make_tree() {
  perl -e '
    my ($dir, $n, $seed) = @ARGV; srand($seed);
    open(my $r, "<", "/dev/urandom") or die "urandom: $!";
    for my $i (0 .. $n - 1) {
      my $d = sprintf("%s/d%02d/s%d", $dir, $i % 37, $i % 5);
      unless (-d $d) { system("mkdir", "-p", $d) == 0 or die "mkdir $d"; }
      my $size = int(rand() ** 4 * 131072);
      $size = 1048576 + int(rand(2097152)) if $i % 997 == 0;
      my $buf = ""; read($r, $buf, $size) if $size;
      open(my $f, ">", "$d/f$i.bin") or die "$d/f$i.bin: $!";
      print $f $buf; close($f) or die "write $d/f$i.bin: $!";
    }' "$1" "$2" "$3"
}

# manifest DIR OUT: sha256 of every file, sorted, paths relative to DIR.
manifest() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$2"
}

# json_has FILE KEY VALUE: the pretty JSON in FILE has "KEY": VALUE.
json_has() {
  grep -Eq "\"$2\": *$3[,]?\$" "$1" || { cat "$1" >&2; fail "$1 lacks \"$2\": $3"; }
}

# daemon_pid NAME: the pid of the daemon serving open volume NAME, from its state record.
daemon_pid() { sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/$1/state.json"; }

# keep_pid NAME: the pid of volume NAME's keep process, from its state record.
keep_pid() { sed -n 's/.*"keep": {.*"pid": \([0-9]*\).*/\1/p' <(tr -d '\n' < "$CRYPTKEEP_RUN_DIR/$1/state.json"); }

# keep_worker_policies NAME: the scheduling policy of each keep-worker thread of volume
# NAME's keep process (0 ordinary, 1 SCHED_FIFO), one per line (field 41 of
# /proc/PID/task/TID/stat, counted after the command name).
keep_worker_policies() {
  local kp t
  kp=$(keep_pid "$1")
  [ -n "$kp" ] || return 1
  for t in /proc/"$kp"/task/*; do
    [[ "$(cat "$t/comm")" == keep-worker* ]] || continue
    sed 's/.*) //' "$t/stat" | awk '{print $39}'
  done
}
