#!/usr/bin/env bash
# cryptkeep fs under two third-party suites, installed from crates.io here (never vendored):
# - pjdfstest (the Rust port of pjd's POSIX file-system test suite): every test, as root
#   with the two dummy users it switches to, on a mount of each transport (FUSE over
#   io_uring, /dev/fuse with --no-io-uring, --keep); a failure that is not in
#   EXPECTED_FAILURES below fails this script, and listed tests that now pass are printed;
# - fsx (fsx-rs, the file-system exerciser): FSX_OPS operations (100,000) with a fixed
#   seed on one file, on each transport (each on its own mount, cipher dir on a tmpfs so
#   that fsync measures the overlay, not the disk); then gocryptfs -fsck on the cipher dir.
# The tools go to target/e2e-tools (CK_E2E_TOOLS), built once per checkout (~4 min of CPU).
# Runs against $CK (lib/common.sh), e.g. CK=/path/to/cryptkeep bash tests/e2e/fs_posix_suites.sh
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
for t in cargo gocryptfs flock timeout getent useradd groupadd; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done

PJDFSTEST_VERSION=0.2.2
FSX_VERSION=0.3.2
FSX_OPS=${FSX_OPS:-100000}
FSX_SEED=${FSX_SEED:-1234567}
TOOLS=${CK_E2E_TOOLS:-$ROOT/target/e2e-tools}

# pjdfstest tests expected to fail on cryptkeep fs, one per line: name, then why. Only
# what the gocryptfs format itself cannot store may be listed here; pjdfstest 0.2.2 hits
# none of it (its symlink tests use short targets, and its NAME_MAX names become
# gocryptfs.longname.* entries), so the list is empty. Its ENAMETOOLONG tests build
# PATH_MAX-1 paths whose cipher paths are ~1.4x longer: they pass because the daemon
# resolves every name relative to its parent's directory descriptor.
EXPECTED_FAILURES=$(cat <<'EOF'
EOF
)
# The 12 *::erofs_* tests are skipped (allow_remount = false: remounting a FUSE mount
# read-only would only test the kernel's EROFS, and a failed test would leave it ro);
# link::link_count_max is skipped because FUSE reports no LINK_MAX. Anything else skipped
# means a guard or the config went wrong.
MAX_SKIPPED=14

# --- tools ---------------------------------------------------------------------------
# install_tool NAME VERSION: cargo install into $TOOLS unless that version is there.
install_tool() {
  local name=$1 version=$2 start=$SECONDS
  mkdir -p "$TOOLS"
  (
    flock 9
    if ! "$TOOLS/bin/$name" --version 2>/dev/null | grep -qx "$name $version"; then
      step "cargo install $name $version (into $TOOLS)"
      cargo install --locked --force --quiet --version "$version" --root "$TOOLS" "$name" \
        || fail "cargo install $name $version failed"
      echo "  installed in $((SECONDS - start)) s"
    fi
  ) 9>"$TOOLS/.lock"
  "$TOOLS/bin/$name" --version | grep -qx "$name $version" || fail "$TOOLS/bin/$name is not $version"
}
install_tool pjdfstest "$PJDFSTEST_VERSION"
install_tool fsx "$FSX_VERSION"
PJD=$TOOLS/bin/pjdfstest FSX=$TOOLS/bin/fsx

# --- users: pjdfstest switches its euid/egid to two dummy users with their own groups --
getent passwd nobody >/dev/null || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nobody
getent group tests >/dev/null || groupadd --system tests
getent passwd tests >/dev/null \
  || useradd --system --gid tests --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tests
cat > "$W/pjdfstest.toml" <<EOF
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "$(id -gn nobody)"], ["tests", "$(id -gn tests)"]]
EOF

# fsx: every operation the overlay supports (not hole punching: gocryptfs has none), with
# mapread at weight 1 because fsx 0.3.2 never unmaps a mapread mapping: at the sample's
# weight 10, 100,000 operations leave ~16,000 mappings that every ftruncate then walks
# (quadratic: 90 s on tmpfs alone); mapwrite (which unmaps) still faults pages in by mmap.
cat > "$W/fsx.toml" <<'EOF'
flen = 262144
[opsize]
max = 65536
min = 0
align = 1
[weights]
close_open = 1
read = 10
write = 10
mapread = 1
mapwrite = 10
invalidate = 1
truncate = 10
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 0
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF

# --- mounts ----------------------------------------------------------------------------
# pjdfstest works as nobody/tests below $W: let them traverse it (not list it).
chmod 711 "$W"
echo posix-suites-pw > "$W/pf"
chmod 600 "$W/pf"
mkdir -p "$W/secondary" "$W/tmpfs"   # secondary: another fs (ext4) for the EXDEV tests
mount -t tmpfs -o size=512m,mode=0711 ck-e2e-fsx "$W/tmpfs"

# Transports: label and mount options. Over io_uring only when the kernel offers it.
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
  TRANSPORTS=("uring:--io-uring" "dev-fuse:--no-io-uring" "keep:--keep")
else
  echo "note: the fuse module's enable_uring is off (scripts/install-deps.sh turns it on):"
  echo "      the io_uring transport is not tested, the default mount reads /dev/fuse"
  TRANSPORTS=("default:" "dev-fuse:--no-io-uring" "keep:--keep")
fi

# ck_mount CIPHERDIR MOUNTPOINT [options]: a fresh cipher dir, mounted for every user.
ck_mount() {
  local c=$1 m=$2; shift 2
  mkdir -p "$c" "$m"
  chmod 755 "$c"   # the mount's root has the cipher dir's mode; the dummy users enter it
  "$CK" fs init "$c" --scryptn 10 --passfile "$W/pf" </dev/null >/dev/null
  "$CK" fs mount "$c" "$m" --passfile "$W/pf" --allow-other "$@" </dev/null >/dev/null
  grep -q " $m fuse" /proc/self/mounts || fail "$m is not mounted"
}

# ck_umount MOUNTPOINT: fs umount; if that fails (a dead daemon), say so and detach it.
ck_umount() {
  "$CK" fs umount "$1" && return 0
  echo "FAIL: fs umount $1 failed" >&2
  fusermount3 -uz "$1" 2>/dev/null || true
  return 1
}

# --- pjdfstest -------------------------------------------------------------------------
expected_names=$(awk 'NF && $1 !~ /^#/ {print $1}' <<<"$EXPECTED_FAILURES" | sort -u)
pjd_bad=0
# run_pjdfstest LABEL DIR: runs the whole suite in DIR, checks its failures against the list.
run_pjdfstest() {
  local label=$1 dir=$2 out=$W/pjdfstest-$1.out rc=0 start=$SECONDS
  NO_COLOR=1 RUST_BACKTRACE=0 timeout --kill-after=10 300 \
    "$PJD" -c "$W/pjdfstest.toml" -p "$dir" -s "$W/secondary" >"$out" 2>&1 </dev/null || rc=$?
  sed -i 's/\x1b\[[0-9;]*m//g' "$out"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    tail -n 20 "$out"; fail "pjdfstest ($label) hung for 300 s; the test after the last one printed above"
  fi
  local summary
  summary=$(grep -E '^Summary: ' "$out") || { tail -n 40 "$out"; fail "pjdfstest ($label) exited $rc without a summary"; }
  awk '$NF == "FAILED" {print $1}' "$out" | sort -u > "$W/pjd-$label.failed"
  awk '$NF == "ok" {print $1}' "$out" | sort -u > "$W/pjd-$label.passed"
  local failed passed skipped total
  failed=$(wc -l < "$W/pjd-$label.failed")
  passed=$(wc -l < "$W/pjd-$label.passed")
  skipped=$(awk '$NF == "skipped"' "$out" | wc -l)
  total=$(sed -E 's/.* ([0-9]+) total.*/\1/' <<<"$summary")
  echo "  pjdfstest $label: $passed passed, $failed failed, $skipped skipped of $total ($((SECONDS - start)) s)"
  local unexpected now_passing
  unexpected=$(comm -23 "$W/pjd-$label.failed" <(echo "$expected_names"))
  now_passing=$(comm -12 "$W/pjd-$label.passed" <(echo "$expected_names"))
  if [ -n "$now_passing" ]; then
    echo "  listed as expected failures but now pass ($label) — remove them from EXPECTED_FAILURES:"
    sed 's/^/    /' <<<"$now_passing"
  fi
  if [ -n "$unexpected" ]; then
    echo "FAIL: pjdfstest ($label): failures not in EXPECTED_FAILURES:" >&2
    while read -r t; do
      echo "  $t" >&2
      # the assertion printed under the test's FAILED line
      awk -v t="$t" '$1 == t && $NF == "FAILED" {p = 1; next} p && /^\t|^  / {print "      " $0; next} {p = 0}' "$out" | head -n 6 >&2
    done <<<"$unexpected"
    pjd_bad=1
  fi
  if [ "$skipped" -gt "$MAX_SKIPPED" ] || [ $((passed + failed + skipped)) != "$total" ]; then
    grep -A1 'skipped$' "$out" | head -n 60
    echo "FAIL: pjdfstest ($label): $skipped skipped (at most $MAX_SKIPPED expected), or results do not add up to $total" >&2
    pjd_bad=1
  fi
}

for tr in "${TRANSPORTS[@]}"; do
  label=${tr%%:*} opts=${tr#*:}
  step "pjdfstest $PJDFSTEST_VERSION on cryptkeep fs ($label${opts:+, $opts}, cipher dir on ext4)"
  # shellcheck disable=SC2086
  ck_mount "$W/c-pjd-$label" "$W/m-pjd-$label" $opts
  run_pjdfstest "$label" "$W/m-pjd-$label"
  ck_umount "$W/m-pjd-$label" || pjd_bad=1
done

# --- fsx ---------------------------------------------------------------------------------
fsx_bad=()
for tr in "${TRANSPORTS[@]}"; do
  label=${tr%%:*} opts=${tr#*:}
  step "fsx $FSX_VERSION: $FSX_OPS operations, seed $FSX_SEED ($label${opts:+, $opts}, cipher dir on tmpfs)"
  c=$W/tmpfs/c-fsx-$label m=$W/m-fsx-$label
  # shellcheck disable=SC2086
  ck_mount "$c" "$m" $opts
  mkdir -p "$m/fsx" "$W/fsx-$label"
  start=$SECONDS rc=0
  NO_COLOR=1 timeout --kill-after=10 600 "$FSX" -f "$W/fsx.toml" -N "$FSX_OPS" -S "$FSX_SEED" \
    -P "$W/fsx-$label" "$m/fsx/file" >"$W/fsx-$label.log" 2>&1 </dev/null || rc=$?
  if [ "$rc" = 0 ] && grep -q 'All operations completed A-OK!' "$W/fsx-$label.log"; then
    echo "  fsx $label: A-OK in $((SECONDS - start)) s"
  else
    # fsx prints the operations leading to a miscompare (and keeps file.fsxgood in -P)
    tail -n 60 "$W/fsx-$label.log"
    [ "$rc" = 124 ] && why="did not finish in 600 s" || why="exited $rc"
    echo "FAIL: fsx ($label) $why after $((SECONDS - start)) s; reproduce with: fsx -f fsx.toml -S $FSX_SEED -N $FSX_OPS FILE" >&2
    fsx_bad+=("$label")
  fi
  ck_umount "$m" || fsx_bad+=("$label (umount)")
  gocryptfs -fsck -q -nosyslog -passfile "$W/pf" "$c" 2> >(grep -v SwitchLoggerToSyslog >&2) \
    || { echo "FAIL: gocryptfs -fsck found problems in the cipher dir fsx wrote ($label)" >&2; fsx_bad+=("$label (fsck)"); }
done

[ "$pjd_bad" = 0 ] || fail "pjdfstest: failures that are not on the expected list (see above)"
[ ${#fsx_bad[@]} = 0 ] || fail "fsx: ${fsx_bad[*]}"
echo "PASS fs_posix_suites"
