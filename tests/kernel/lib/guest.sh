# Helpers for scripts that run inside the boot-kernel guest (busybox sh).
# Shipped with `boot-kernel --put tests/kernel/lib/guest.sh` and sourced as
# `. /harness/guest.sh`. Every check prints one line; g_finish exits non-zero
# if any failed.

G_FAILS=0
G_CHECKS=0
g_now() { cut -d' ' -f1 /proc/uptime; }
g_log() { echo "[guest $(g_now)s] $*"; }
g_ok() { G_CHECKS=$((G_CHECKS + 1)); echo "[guest $(g_now)s] ok   $*"; }
g_bad() { G_CHECKS=$((G_CHECKS + 1)); G_FAILS=$((G_FAILS + 1)); echo "[guest $(g_now)s] FAIL $*"; }

# g_run WHAT CMD...: run CMD; ok/FAIL line with WHAT; on failure show its output.
g_run() {
  what=$1; shift
  if out=$("$@" 2>&1); then g_ok "$what"; return 0; fi
  g_bad "$what: $* failed:"
  printf '%s\n' "$out" | tail -n 15 | sed 's/^/    | /'
  return 1
}

# g_disk NAME: the device of the disk the host attached as NAME.
g_disk() { echo "/dev/disk/by-name/$1"; }

# g_open NAME KEYFILE [cryptsetup options]: open disk NAME as /dev/mapper/NAME.
g_open() {
  n=$1; k=$2; shift 2
  g_run "$n: kernel cryptsetup open" cryptsetup open --key-file "$k" "$@" "$(g_disk "$n")" "$n"
}

# g_expect_sector NAME SIZE: dm-crypt's sector size for NAME is SIZE.
g_expect_sector() {
  got=$(cryptsetup status "$1" | sed -n 's/^ *sector size: *\([0-9]*\).*/\1/p')
  if [ "$got" = "$2" ]; then g_ok "$1: dm-crypt sector size $got"
  else g_bad "$1: dm-crypt sector size is '${got}', expected $2"; fi
}

# g_check_tree MOUNTPOINT NAME: the manifest checks out, VOLUME names the
# volume, the symlink and the empty dir survived.
g_check_tree() {
  m=$1; n=$2
  if (cd "$m" && sha256sum -c -s MANIFEST.sha256); then
    g_ok "$n: sha256sum -c MANIFEST.sha256 ($(wc -l < "$m/MANIFEST.sha256") files)"
  else
    g_bad "$n: sha256sum -c MANIFEST.sha256:"
    (cd "$m" && sha256sum -c MANIFEST.sha256 2>&1 | grep -v ': OK$' | head -n 10 | sed 's/^/    | /')
  fi
  [ "$(cat "$m/VOLUME" 2>/dev/null)" = "$n" ] && g_ok "$n: VOLUME file names this volume" \
    || g_bad "$n: VOLUME file says '$(cat "$m/VOLUME" 2>/dev/null)', expected '$n' (images mixed up?)"
  [ "$(readlink "$m/link-to-f0")" = d0/e0/f0.bin ] && [ -d "$m/empty-dir" ] \
    && g_ok "$n: symlink and empty dir present" || g_bad "$n: symlink or empty dir missing"
}

# g_finish: summary line and exit status.
g_finish() {
  if [ "$G_FAILS" -gt 0 ]; then g_log "$G_FAILS of $G_CHECKS checks FAILED"; exit 1; fi
  g_log "all $G_CHECKS checks passed"; exit 0
}
