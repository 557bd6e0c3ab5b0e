# Helpers to reach RBD images of a scripts/ceph/cluster.sh cluster over NBD
# (qemu-nbd with qemu's rbd driver, package qemu-block-extra), so that
# `cryptkeep open nbd+unix:///IMAGE?socket=SOCK NAME` keeps its ciphertext on Ceph.
# Sourced, not run:
#
#   . scripts/ceph/lib.sh
#   CEPH_DIR=/tmp/ck-ceph                    # the cluster's DIR (ceph.conf, keyring)
#   ceph_cluster start "$CEPH_DIR"
#   ceph_rbd create rbd/vol --size 1G
#   uri=$(ceph_nbd_export vol "$W/vol.sock")   # qemu-nbd serves the raw image; prints its URI
#   cryptkeep format "$uri" ... ; cryptkeep open "$uri" secret
#   ceph_nbd_unexport "$W/vol.sock"
#   ceph_cluster stop "$CEPH_DIR"
#
# CEPH_POOL (default rbd) names the pool. Every function needs CEPH_DIR.

CEPH_LIB_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CEPH_POOL=${CEPH_POOL:-rbd}

ceph_cluster() { "$CEPH_LIB_HOME/cluster.sh" "$@"; }
ceph_cli() { timeout 60 ceph -c "${CEPH_DIR:?}/ceph.conf" --connect-timeout 30 "$@"; }
# rbd against the cluster (import/export: add --no-progress).
ceph_rbd() { rbd -c "${CEPH_DIR:?}/ceph.conf" "$@"; }

# ceph_image_opts IMAGE [SECRET_ID]: qemu's --image-opts for POOL/IMAGE; with
# SECRET_ID (a qemu `--object secret,id=SECRET_ID,file=PASSFILE`), librbd's
# LUKS2 client-side encryption is opened too (encrypt.format=luks2), so the
# export is the plaintext.
ceph_image_opts() {
  local o="driver=rbd,pool=$CEPH_POOL,image=$1,conf=${CEPH_DIR:?}/ceph.conf,user=admin"
  [ -z "${2:-}" ] || o="$o,encrypt.format=luks2,encrypt.key-secret=$2"
  echo "$o"
}

# ceph_nbd_export IMAGE SOCK [PASSFILE]: starts qemu-nbd (in the background,
# pid in SOCK.pid) serving POOL/IMAGE on the unix socket SOCK, export name IMAGE,
# and prints its URI nbd+unix:///IMAGE?socket=SOCK. With PASSFILE, librbd
# decrypts (LUKS2 made by `rbd encryption format` or compatible) and the export
# is the plaintext. Discards reach RBD (--discard=unmap); qemu-nbd serves up to
# 8 connections at once and keeps serving after they disconnect (--persistent).
# It does not advertise multi-conn, but all its connections share one librbd
# image (and cache), so a client's connections see each other's writes.
# CEPH_NBD_CACHE: qemu's cache mode (writeback: librbd's cache; none: no cache).
ceph_nbd_export() {
  local image=$1 sock=$2 pass=${3:-} obj=()
  local opts
  if [ -n "$pass" ]; then
    obj=(--object "secret,id=ck_sec0,file=$pass")
    opts=$(ceph_image_opts "$image" ck_sec0)
  else
    opts=$(ceph_image_opts "$image")
  fi
  rm -f "$sock" "$sock.pid"
  qemu-nbd --fork --persistent --shared=8 --pid-file="$sock.pid" --socket="$sock" \
    --export-name="$image" --discard=unmap --cache="${CEPH_NBD_CACHE:-writeback}" \
    "${obj[@]}" --image-opts "$opts" || { echo "ceph_nbd_export: qemu-nbd failed for $CEPH_POOL/$image" >&2; return 1; }
  echo "nbd+unix:///$image?socket=$sock"
}

# ceph_nbd_unexport SOCK: stops the qemu-nbd of ceph_nbd_export (waits up to 10 s).
ceph_nbd_unexport() {
  local sock=$1 pid i
  [ -f "$sock.pid" ] || return 0
  pid=$(cat "$sock.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$sock" "$sock.pid"
}

# ceph_rbd_luks_format IMAGE PASSFILE: librbd's own LUKS2 format (`rbd encryption
# format`): aes-xts-plain64, 512-bit key, 4096-byte sectors, data at 16 MiB, argon2id.
ceph_rbd_luks_format() { ceph_rbd encryption format "$CEPH_POOL/$1" luks2 "$2"; }

# ceph_osd_blocks: the OSDs' BlueStore block files (to scan for plaintext).
ceph_osd_blocks() { ls "${CEPH_DIR:?}"/osd.*/block; }

# ceph_ck_open IMAGE NAME [cryptkeep open options...]: exports POOL/IMAGE with
# qemu-nbd on $CEPH_SOCK_DIR/IMAGE.sock (default: CEPH_DIR/run) and opens it with
# cryptkeep (CK, default cryptkeep) as NAME; prints what `cryptkeep open` prints
# (the loop device). Needs a cryptkeep that opens nbd+unix:// URIs.
ceph_ck_open() {
  local image=$1 name=$2 uri; shift 2
  uri=$(ceph_nbd_export "$image" "${CEPH_SOCK_DIR:-$CEPH_DIR/run}/$image.sock") || return 1
  "${CK:-cryptkeep}" open "$uri" "$name" "$@" || { ceph_nbd_unexport "${CEPH_SOCK_DIR:-$CEPH_DIR/run}/$image.sock"; return 1; }
}
# ceph_ck_close IMAGE NAME: closes the cryptkeep volume NAME, then its qemu-nbd.
ceph_ck_close() {
  "${CK:-cryptkeep}" close "$2" && ceph_nbd_unexport "${CEPH_SOCK_DIR:-$CEPH_DIR/run}/$1.sock"
}

# Format options for `cryptkeep format` that librbd's LUKS2 (Ceph 16.2) opens:
# AES-XTS (librbd refuses aes-cbc-essiv and other ciphers: "encryption load
# fail: Operation not supported"), 4096-byte sectors. PBKDF2 or Argon2 both load.
CEPH_LUKS2_OPTS=(--type luks2 --cipher aes-xts-plain64 --sector-size 4096)

# ceph_osds_holding STRING: how many OSD block files hold STRING. Reads only the
# files' data extents (SEEK_DATA/SEEK_HOLE): the files are sparse and mostly holes.
ceph_osds_holding() {
  python3 - "$1" $(ceph_osd_blocks) <<'PY'
import os, sys
needle = sys.argv[1].encode()
n = 0
for path in sys.argv[2:]:
    fd = os.open(path, os.O_RDONLY)
    end = os.fstat(fd).st_size
    off, hit = 0, False
    while off < end and not hit:
        try:
            off = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        stop = os.lseek(fd, off, os.SEEK_HOLE)
        tail = b""
        while off < stop:
            buf = os.pread(fd, min(8 << 20, stop - off), off)
            if not buf:
                break
            if needle in tail + buf:
                hit = True
                break
            tail = buf[-len(needle):]
            off += len(buf)
    os.close(fd)
    n += hit
print(n)
PY
}
