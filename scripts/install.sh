#!/usr/bin/env bash
# Builds cryptkeep and installs it: the binary to $PREFIX/bin and one man
# page per verb (cryptkeep.1, cryptkeep-open.1, cryptkeep-fs-mount.1, ...)
# to $PREFIX/share/man/man1, the scripts of `cryptkeep bench` to
# $PREFIX/share/cryptkeep/scripts and the example programs they run to
# $PREFIX/libexec/cryptkeep/examples. PREFIX defaults to /usr/local; DESTDIR is
# prepended to both, for packaging. Installs the system packages it needs
# first (scripts/install-deps.sh) unless --no-deps is given.
# usage: scripts/install.sh [--no-deps]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}
if [ "${1:-}" != --no-deps ]; then
  scripts/install-deps.sh
fi
cargo build --release -p cryptkeep-cli -p cryptkeep-keep --bins --examples
bin=$dest$prefix/bin
man1=$dest$prefix/share/man/man1
install -d "$bin" "$man1"
install -m 0755 target/release/cryptkeep "$bin/cryptkeep"
pages=$(mktemp -d)
trap 'rm -rf "$pages"' EXIT
target/release/cryptkeep __man "$pages" >/dev/null
install -m 0644 "$pages"/*.1 "$man1/"
# The report scripts of `cryptkeep bench`, in the layout they expect
# (scripts/bench/*.sh calling scripts/bench-*.sh).
share=$dest$prefix/share/cryptkeep/scripts
install -d "$share/bench"
install -m 0755 scripts/bench-*.sh "$share/"
install -m 0755 scripts/bench/*.sh "$share/bench/"
# The secGear report's example programs (scripts/bench/secgear.sh).
libexec=$dest$prefix/libexec/cryptkeep/examples
install -d "$libexec"
install -m 0755 target/release/examples/{hello,crypto}_{host,keep} "$libexec/"
echo "installed $bin/cryptkeep, $(ls "$pages" | wc -l) man pages in $man1 and the benchmark scripts in $share"
if [ -z "$dest" ] && command -v mandb >/dev/null; then
  mandb -q 2>/dev/null || true
fi
