#!/usr/bin/env bash
# Installs what the tests need, then runs every test in two tiers:
#   1 quick: formatting, clippy, module cycles, and the unit tests
#            (`cargo test --lib --bins`);
#   2 full:  the integration tests (one binary per crate) and doc tests with
#            CRYPTKEEP_TEST_ALL=1 (a test whose requirement is missing fails
#            instead of skipping), then the shell tests under tests/e2e (CLI
#            end to end) and tests/kernel (the QEMU kernel oracle).
# A failure in tier 1 does not stop tier 2 (both are reported), unless the
# build itself failed. Each test step runs under scripts/watchdog.sh: a step
# past its time limit is taken for hung, what it waits on is printed, and it
# is stopped and counted as failed. Exits non-zero if anything failed. Needs
# root (apt, loop devices, mount).
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
failures=()
section() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

section "install-deps"
scripts/install-deps.sh || { echo "test.sh: scripts/install-deps.sh failed" >&2; exit 1; }

# rustfmt and clippy come with rustup's default profile; add them if missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy || true
fi

# ---------------------------------------------------------------- tier 1
section "tier 1 (quick): cargo fmt --check"
cargo fmt --all -- --check || failures+=("cargo fmt --check (run: cargo fmt)")

section "tier 1 (quick): cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings || failures+=("cargo clippy")

section "tier 1 (quick): module cycles"
python3 scripts/check-module-cycles.py || failures+=("module cycles (scripts/check-module-cycles.py)")

section "tier 1 (quick): build the binaries, examples and unit tests"
# The shell tests run the binaries and examples (the kernel oracle writes
# through crates/integrity/examples/integrity_write).
{ cargo build --release --workspace --bins --examples && cargo test --release --workspace --lib --bins --no-run; } ||
  { echo "test.sh: build failed" >&2; exit 1; }

section "tier 1 (quick): cargo test --lib --bins"
scripts/watchdog.sh 900 cargo test --release --workspace --no-fail-fast --lib --bins || failures+=("unit tests (cargo test --lib --bins)")

tier1=${#failures[@]}
section "tier 1 done: ${tier1} failed"

# ---------------------------------------------------------------- tier 2
export CRYPTKEEP_TEST_ALL=1

section "tier 2 (full): build the integration tests"
cargo test --release --workspace --no-fail-fast --test '*' --no-run || { echo "test.sh: build failed" >&2; exit 1; }

section "tier 2 (full): cargo test --test '*' (CRYPTKEEP_TEST_ALL=1)"
scripts/watchdog.sh 1800 cargo test --release --workspace --no-fail-fast --test '*' || failures+=("integration tests (cargo test --test '*')")

section "tier 2 (full): cargo test --doc"
scripts/watchdog.sh 900 cargo test --release --workspace --no-fail-fast --doc || failures+=("doc tests (cargo test --doc)")

section "tier 2 (full): shell tests (tests/e2e, tests/kernel)"
shopt -s nullglob
shell_tests=(tests/e2e/*.sh tests/kernel/*.sh)
if [ ${#shell_tests[@]} -gt 0 ]; then
  scripts/run-shell-tests.sh "${shell_tests[@]}" || failures+=("shell tests")
fi

echo
echo "test.sh: tier 1 (quick): ${tier1} failed; tier 2 (full): $(( ${#failures[@]} - tier1 )) failed"
if [ ${#failures[@]} -gt 0 ]; then
  echo "test.sh: FAILED: ${failures[*]}"
  exit 1
fi
echo "test.sh: all passed"
