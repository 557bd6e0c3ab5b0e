#!/usr/bin/env bash
# Installs every system package cryptkeep's demo, tests and benchmarks use, on Debian.
# Idempotent: packages already present are skipped quickly. Needs root (apt-get).
set -euo pipefail
pkgs=(
  build-essential pkg-config cmake clang    # aws-lc-sys builds C code
  fuse3                                      # fusermount3, /dev/fuse users
  util-linux e2fsprogs                       # losetup, mount, mkfs.ext4, e2fsck
  cryptsetup-bin                             # oracle: luksFormat/luksDump/--test-passphrase on image files
  qemu-utils                                 # oracle: qemu-img LUKS1; qemu-nbd (NBD client tests)
  libnbd-bin nbdkit                          # NBD clients (nbdinfo, nbdcopy) and peer (tests/e2e/nbd_export.sh, scripts/bench-nbd.sh)
  qemu-system-x86 linux-image-amd64 busybox-static cpio kmod xz-utils   # the kernel harness (tests/kernel)
  gocryptfs                                  # overlay oracle
  fio bindfs hdparm openssl                  # benchmarks and their peers
  gnuplot-nox                                # scripts/bench-integrity.sh: the chart
  argon2                                     # oracle: reference Argon2 CLI (crypto tests)
  stress-ng rsync python3                    # tests/e2e/fs_stress.sh; scripts/bench-*.sh
  gdb                                        # scripts/watchdog.sh: the stacks of a hung test
  securefs encfs cryfs linux-source          # scripts/bench/encfs.sh, bench-fs.sh: the peers, the tree
  ceph-mon ceph-mgr ceph-osd ceph-common qemu-block-extra libnbd-bin   # scripts/ceph, tests/e2e/ceph.sh: a local Ceph cluster, qemu's rbd driver, nbdcopy
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
modprobe loop 2>/dev/null || true
modprobe fuse 2>/dev/null || true
# FUSE over io_uring (what `fs mount` uses when offered, and its tests) is off by default.
p=/sys/module/fuse/parameters/enable_uring
if [ -w "$p" ] && [ "$(cat "$p")" != Y ]; then
  echo Y > "$p" && echo "install-deps: turned on FUSE over io_uring ($p)" >&2
fi
