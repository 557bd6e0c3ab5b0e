# Shared helpers for the tests in tests/kernel/ (sourced, bash). They run on
# the host: find the tools, run the cryptkeep CLI with a private state dir,
# make test trees and patterns, report checks and timings.
# Nothing here is a test by itself.
# shellcheck disable=SC2034 # the variables are for the tests that source this

KT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
KT_HARNESS="$KT_REPO/tests/kernel/boot-kernel"
KT_LIB="$KT_REPO/tests/kernel/lib"
KT_NAME=$(basename "$0" .sh)
KT_T0=$EPOCHREALTIME
KT_FAILS=0
KT_OPENED=()

# Seconds since $1 (default: test start), one decimal.
kt_since() { awk -v a="${1:-$KT_T0}" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
kt_log() { printf '[%s %6ss] %s\n' "$KT_NAME" "$(kt_since)" "$*"; }
kt_ok() { printf '[%s %6ss] ok   %s\n' "$KT_NAME" "$(kt_since)" "$*"; }
kt_bad() { printf '[%s %6ss] FAIL %s\n' "$KT_NAME" "$(kt_since)" "$*" >&2; KT_FAILS=$((KT_FAILS + 1)); }
# Stop the whole test now: a set-up step failed, nothing after it means anything.
kt_die() { printf '[%s %6ss] FAIL %s\n' "$KT_NAME" "$(kt_since)" "$*" >&2; exit 1; }

# kt_require TOOL PACKAGE: a missing tool fails the test with the fix.
kt_require() {
  command -v "$1" >/dev/null 2>&1 || kt_die "$1 is missing: run scripts/install-deps.sh (apt-get install $2)"
}

# Root is needed for loop devices, mount and FUSE's allow_other.
kt_require_root() { [ "$(id -u)" = 0 ] || kt_die "must run as root (loop devices, mount)"; }

# The cryptkeep binary: $CRYPTKEEP_BIN, else the release build in the target dir.
kt_cryptkeep_bin() {
  local b=${CRYPTKEEP_BIN:-${CARGO_TARGET_DIR:-$KT_REPO/target}/release/cryptkeep}
  [ -x "$b" ] || kt_die "cryptkeep binary $b is missing: build it with 'cargo build --release -p cryptkeep-cli' (or set CRYPTKEEP_BIN)"
  echo "$b"
}

# kt_workdir: a fresh scratch dir under $TMPDIR, removed at exit together with
# every volume this test opened. Sets KT_W and CRYPTKEEP_RUN_DIR.
kt_workdir() {
  KT_W=$(mktemp -d "${TMPDIR:-/tmp}/kt-$KT_NAME.XXXXXX")
  export CRYPTKEEP_RUN_DIR="$KT_W/run"
  mkdir -p "$CRYPTKEEP_RUN_DIR"
  trap kt_cleanup EXIT
  trap 'exit 130' INT TERM
  # set -e would end the test silently; say which command stopped it.
  set -E
  trap 'kt_bad "stopped: \"$BASH_COMMAND\" exited $? (${BASH_SOURCE[0]##*/} line $LINENO)"' ERR
}
kt_cleanup() {
  local rc=$? n
  for n in "${KT_OPENED[@]}"; do
    [ -n "$n" ] && "$CK" close "$n" >/dev/null 2>&1 || true
  done
  # A volume left mounted would keep the scratch dir busy; never rm through a mount.
  if [ -n "${KT_W:-}" ] && ! grep -q " $KT_W/" /proc/mounts; then rm -rf "$KT_W"; fi
  exit "$rc"
}

# ck ARGS...: run cryptkeep; its stderr goes to ours.
ck() { "$CK" "$@"; }

# kt_open VOLUME NAME KEYFILE [more open args]: open, remember for cleanup,
# print the block device (the last line of cryptkeep's output).
kt_open() {
  local vol=$1 name=$2 key=$3 out
  shift 3
  KT_OPENED+=("$name")
  out=$("$CK" open "$vol" "$name" --key-file "$key" "$@") || return 1
  out=$(printf '%s\n' "$out" | tail -n 1)
  [ -b "$out" ] || { echo "cryptkeep open printed '$out', not a block device" >&2; return 1; }
  echo "$out"
}
kt_close() {
  local name=$1 i
  "$CK" close "$name" || return 1
  for i in "${!KT_OPENED[@]}"; do [ "${KT_OPENED[$i]}" = "$name" ] && KT_OPENED[i]=""; done
  return 0
}

# kt_make_tree DIR COUNT SEED: a tree of COUNT files (0 B .. 40 KiB, a few of
# 1-3 MiB) in nested dirs, content from the seed (reproducible), plus an empty
# dir and a symlink.
kt_make_tree() {
  local dir=$1 count=$2 seed=$3 i sub size
  mkdir -p "$dir"
  kt_stream "$seed" $((32 * 1024 * 1024)) > "$dir/.stream"
  for ((i = 0; i < count; i++)); do
    sub="$dir/d$((i % 7))/e$((i % 3))"
    mkdir -p "$sub"
    size=$(( (i * 7919 + 13) % 40960 ))
    [ $((i % 97)) = 5 ] && size=$(( 1048576 + i * 4099 % 2097152 ))
    [ $((i % 50)) = 0 ] && size=0
    dd if="$dir/.stream" of="$sub/f$i.bin" bs=64K iflag=skip_bytes,count_bytes status=none \
      skip=$(( (i * 104729) % (16 * 1024 * 1024) )) count="$size"
  done
  rm -f "$dir/.stream"
  mkdir -p "$dir/empty-dir"
  ln -s d0/e0/f0.bin "$dir/link-to-f0"
}

# kt_manifest DIR: write DIR/MANIFEST.sha256 (sha256sum -c format, paths
# relative to DIR) over every regular file.
kt_manifest() {
  (cd "$1" && find . -type f ! -name MANIFEST.sha256 | LC_ALL=C sort | xargs -r sha256sum > MANIFEST.sha256)
}

# kt_pattern FILE MIB SEED: MIB MiB of reproducible pseudo-random bytes.
kt_pattern() { kt_stream "$3" $(( $2 * 1024 * 1024 )) > "$1"; }

# kt_stream SEED BYTES: reproducible pseudo-random bytes on stdout
# (AES-128-CTR over zeros, keyed by the seed's SHA-256).
kt_stream() {
  local k
  k=$(printf '%s' "$1" | sha256sum | cut -c1-32)
  head -c "$2" /dev/zero | openssl enc -aes-128-ctr -K "$k" -iv 00000000000000000000000000000000
}

# kt_boot ARGS...: run the kernel harness, timing it.
kt_boot() {
  local t=$EPOCHREALTIME rc=0
  kt_log "booting the kernel: boot-kernel $*"
  "$KT_HARNESS" "$@" || rc=$?
  kt_log "kernel run took $(kt_since "$t")s, exit $rc"
  return "$rc"
}

# kt_finish: the test's verdict from the counted checks.
kt_finish() {
  if [ "$KT_FAILS" -gt 0 ]; then
    kt_log "FAILED: $KT_FAILS check(s) failed, $(kt_since)s total"
    exit 1
  fi
  kt_log "PASS in $(kt_since)s"
  exit 0
}
