#!/usr/bin/env bash
# Installs what the tests need, then runs every test: formatting and clippy
# checks, the Rust unit/integration tests, and the shell tests under
# tests/e2e (CLI end to end) and tests/kernel (the QEMU kernel oracle).
# Exits non-zero if anything failed. Needs root (apt, loop devices, mount).
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

section "cargo build --release --workspace --all-targets"
cargo build --release --workspace --all-targets || { echo "test.sh: build failed" >&2; exit 1; }

section "cargo fmt --check"
cargo fmt --all -- --check || failures+=("cargo fmt --check (run: cargo fmt)")

section "cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings || failures+=("cargo clippy")

section "module cycles"
python3 scripts/check-module-cycles.py || failures+=("module cycles (scripts/check-module-cycles.py)")

section "cargo test --release --workspace"
cargo test --release --workspace || failures+=("cargo test")

section "shell tests (tests/e2e, tests/kernel)"
shopt -s nullglob
shell_tests=(tests/e2e/*.sh tests/kernel/*.sh)
if [ ${#shell_tests[@]} -gt 0 ]; then
  scripts/run-shell-tests.sh "${shell_tests[@]}" || failures+=("shell tests")
fi

echo
if [ ${#failures[@]} -gt 0 ]; then
  echo "test.sh: FAILED: ${failures[*]}"
  exit 1
fi
echo "test.sh: all passed"
