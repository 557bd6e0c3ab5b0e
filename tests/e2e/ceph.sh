#!/usr/bin/env bash
# cryptkeep and Ceph RBD, against a real single-host Ceph 16.2 cluster
# (scripts/ceph/cluster.sh: 1 mon, 1 mgr, 3 file-backed BlueStore OSDs,
# pool size 3 / min_size 2), with image files as the bridge:
#  a) an image formatted by librbd (`rbd encryption format luks2`) and written
#     through qemu's rbd driver (encrypt.format=luks2) is exported (`rbd export`)
#     and cryptsetup and cryptkeep read it; cryptkeep opens it and reads the same bytes;
#  b) a cryptkeep volume (LUKS2, AES-XTS, 4096-byte sectors) is imported
#     (`rbd import`), read by qemu's rbd driver with librbd's LUKS2 decryption,
#     written by it, exported again and read by cryptkeep;
#  c) the OSDs' block files hold no plaintext marker written through the
#     encrypted path (and do hold one written through an unencrypted image);
#  d) one OSD stops during writes through the encrypted path (librbd LUKS2 via
#     qemu-nbd) and comes back while they go on; the data verifies, also after recovery;
#  e) when cryptkeep opens nbd+unix:// URIs (the NBD client), a volume whose
#     ciphertext is an RBD image behind qemu-nbd: format, open, mkfs.ext4,
#     a tree, close, reopen, verify.
# Everything runs under the test's work dir; the EXIT trap closes volumes,
# stops qemu-nbd and the cluster.
source "$(dirname "$0")/lib/common.sh"
for t in ceph-mon ceph-mgr ceph-osd rbd qemu-nbd qemu-img nbdcopy nbdinfo cryptsetup; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done
ls /usr/lib/x86_64-linux-gnu/qemu/block-rbd.so >/dev/null 2>&1 || fail "qemu's rbd driver missing (package qemu-block-extra): run scripts/install-deps.sh"

CEPH_DIR=$W/ceph
export CEPH_OSD_SIZE=${CEPH_OSD_SIZE:-2G}
. "$ROOT/scripts/ceph/lib.sh"

ceph_cleanup() {
  local rc=$? d s
  set +e
  # Volumes first (an NBD-backed one needs its qemu-nbd), then qemu-nbd, then the cluster.
  if [ -d "$CRYPTKEEP_RUN_DIR" ]; then
    for d in "$CRYPTKEEP_RUN_DIR"/*/; do [ -d "$d" ] && "$CK" close "$(basename "$d")" >/dev/null 2>&1; done
  fi
  [ -n "${bg:-}" ] && kill "$bg" 2>/dev/null
  for s in "$W"/*.sock.pid; do [ -f "$s" ] && ceph_nbd_unexport "${s%.pid}"; done
  if [ -d "$CEPH_DIR" ]; then
    [ $rc = 0 ] || { echo "--- cluster state at failure:"; ceph_cli -s 2>&1 | head -30; }
    ceph_cluster stop "$CEPH_DIR"
  fi
  (exit $rc)
  cleanup
}
trap ceph_cleanup EXIT

# bytes_equal FILE1 FILE2 LEN: the first LEN bytes are equal.
bytes_equal() { cmp -n "$3" "$1" "$2" >/dev/null; }

printf 'rbd luks2 passphrase' > "$W/pass"
# Plaintext markers: 4 KiB-aligned blocks of a recognisable string, amid random data.
MARK_ENC="CRYPTKEEP-CEPH-PLAINTEXT-MARKER-$$-$RANDOM"
MARK_PLAIN="CRYPTKEEP-CEPH-CONTROL-MARKER-$$-$RANDOM"
mkdata() { # mkdata FILE MiB MARKER
  head -c "$(($2 * 1048576))" /dev/urandom > "$1"
  local blk; blk=$(perl -e 'print substr(($ARGV[0] . "\n") x 4096, 0, 4096)' "$3")
  for o in 1 100 1000 2047; do printf '%s' "$blk" | dd of="$1" bs=4096 seek="$o" conv=notrunc status=none; done
}

step "start the cluster ($CEPH_DIR)"
t0=$SECONDS
ceph_cluster start "$CEPH_DIR" || fail "the cluster did not start (logs: $CEPH_DIR/log)"
echo "cluster up in $((SECONDS - t0))s"
[[ "$(ceph_cli osd pool get rbd size)" == "size: 3" ]] || fail "pool rbd is not size 3"
[[ "$(ceph_cli osd pool get rbd min_size)" == "min_size: 2" ]] || fail "pool rbd is not min_size 2"

# ---------------------------------------------------------------- a) librbd -> cryptkeep
step "a) rbd encryption format luks2, write 16 MiB through qemu's rbd driver (encrypt.format=luks2)"
ceph_rbd create rbd/from-rbd --size 48M
ceph_rbd_luks_format from-rbd "$W/pass"
mkdata "$W/a.data" 16 "$MARK_ENC"
qemu-img convert -n --object "secret,id=s0,file=$W/pass" -f raw "$W/a.data" \
  --target-image-opts "$(ceph_image_opts from-rbd s0)"
qemu-img info --object "secret,id=s0,file=$W/pass" --image-opts "$(ceph_image_opts from-rbd s0)" > "$W/a.info"
grep -q 'virtual size: 32 MiB' "$W/a.info" || { cat "$W/a.info"; fail "librbd's LUKS2 image of 48 MiB should show 32 MiB of data (data at 16 MiB)"; }

step "a) rbd export; cryptsetup and cryptkeep read librbd's header"
ceph_rbd export --no-progress rbd/from-rbd "$W/a.img"
cryptsetup luksDump "$W/a.img" > "$W/a.csdump"
grep -Eq 'offset: *16777216' "$W/a.csdump" || { cat "$W/a.csdump"; fail "librbd's data offset is not 16 MiB"; }
grep -Eq 'sector: *4096' "$W/a.csdump" || fail "librbd's sector size is not 4096"
grep -q 'aes-xts-plain64' "$W/a.csdump" || fail "librbd's cipher is not aes-xts-plain64"
cryptsetup open --test-passphrase --key-file "$W/pass" "$W/a.img" </dev/null || fail "cryptsetup rejects the passphrase"
"$CK" dump "$W/a.img" > "$W/a.ckdump" || fail "cryptkeep dump failed on librbd's header"
grep -q 4096 "$W/a.ckdump" || { cat "$W/a.ckdump"; fail "cryptkeep dump shows no 4096-byte sectors"; }

step "a) cryptkeep open the exported image; the plaintext equals what qemu wrote"
dev=$("$CK" open "$W/a.img" from-rbd --key-file "$W/pass" --read-only)
[ -b "$dev" ] || fail "open printed '$dev'"
[ "$(blockdev --getsize64 "$dev")" = $((32 * 1048576)) ] || fail "device is $(blockdev --getsize64 "$dev") bytes, want 32 MiB"
dd if="$dev" of="$W/a.back" bs=1M count=16 iflag=direct status=none
bytes_equal "$W/a.data" "$W/a.back" $((16 * 1048576)) || fail "cryptkeep reads other bytes than qemu+librbd wrote"
"$CK" close from-rbd

# ---------------------------------------------------------------- b) cryptkeep -> librbd
for sector in 4096 512; do
  img=from-ck-$sector
  step "b) cryptkeep format (LUKS2 aes-xts-plain64 $sector-byte sectors, PBKDF2), write 16 MiB, rbd import"
  mkvol "$W/b.img" 64M "$W/pass" "${CEPH_LUKS2_OPTS[@]/4096/$sector}"
  mkdata "$W/b.data" 16 "$MARK_ENC"
  dev=$("$CK" open "$W/b.img" from-ck --key-file "$W/pass")
  dd if="$W/b.data" of="$dev" bs=1M oflag=direct status=none
  "$CK" close from-ck
  ceph_rbd import --no-progress "$W/b.img" "rbd/$img"
  rm -f "$W/b.img"

  step "b) qemu's rbd driver (librbd LUKS2) reads it equal, writes 4 MiB at 20 MiB"
  opts=$(ceph_image_opts "$img" s0)
  qemu-img convert --object "secret,id=s0,file=$W/pass" --image-opts "$opts" -O raw "$W/b.back"
  bytes_equal "$W/b.data" "$W/b.back" $((16 * 1048576)) || fail "librbd reads other bytes than cryptkeep wrote ($sector-byte sectors)"
  head -c 4M /dev/urandom > "$W/b.more"
  qemu-io --object "secret,id=s0,file=$W/pass" --image-opts "$opts" \
    -c "write -s $W/b.more $((20 * 1048576)) 4M" >/dev/null || fail "qemu-io write through librbd failed"

  step "b) rbd export; cryptkeep reads what librbd wrote"
  ceph_rbd export --no-progress "rbd/$img" "$W/b2.img"
  dev=$("$CK" open "$W/b2.img" from-ck --key-file "$W/pass" --read-only)
  dd if="$dev" of="$W/b.back" bs=1M skip=20 count=4 iflag=direct status=none
  cmp "$W/b.more" "$W/b.back" || fail "cryptkeep reads other bytes than librbd wrote ($sector-byte sectors)"
  "$CK" close from-ck
  rm -f "$W/b2.img" "$W/b.back"
done

# ---------------------------------------------------------------- c) no plaintext on the OSDs
step "c) control: a marker written to an unencrypted image is on the OSDs"
ceph_rbd create rbd/plain --size 16M
mkdata "$W/c.data" 8 "$MARK_PLAIN"
qemu-img convert -n -f raw "$W/c.data" --target-image-opts "$(ceph_image_opts plain)"
n=$(ceph_osds_holding "$MARK_PLAIN")
[ "$n" = 3 ] || fail "the control marker is on $n of 3 OSDs (size-3 pool): the scan does not work"
step "c) the marker written through the encrypted paths is on none"
n=$(ceph_osds_holding "$MARK_ENC")
[ "$n" = 0 ] || fail "plaintext written through LUKS2 found on $n OSD block files"

# ---------------------------------------------------------------- d) an OSD stops during writes
step "d) write 64 MiB through librbd's LUKS2 (qemu-nbd) in 16 chunks; osd.2 stops during chunks 4-7, is down for 8-11, restarts during 12-15"
ceph_rbd create rbd/degraded --size 96M
ceph_rbd_luks_format degraded "$W/pass"
uri=$(ceph_nbd_export degraded "$W/deg.sock" "$W/pass")
head -c 64M /dev/urandom > "$W/d.data"
# The writer signals d.atN when it reaches chunk N; it waits at chunk 8 for d.down
# (osd.2 is down) and at chunk 14 for d.up (osd.2 was started).
writer() {
  local i t
  for i in $(seq 0 15); do
    touch "$W/d.at$i"
    for w in "8 d.down" "14 d.up"; do
      set -- $w
      if [ "$i" = "$1" ]; then t=0; until [ -e "$W/$2" ]; do sleep 0.1; t=$((t + 1)); [ $t -lt 1200 ] || return 1; done; fi
    done
    dd if="$W/d.data" of="$W/d.chunk" bs=4M skip="$i" count=1 status=none
    qemu-io -f raw "$uri" -c "write -s $W/d.chunk $((i * 4194304)) 4M" -c flush >/dev/null || { echo "chunk $i failed" >&2; return 1; }
  done
}
at() { local t=0; until [ -e "$W/d.at$1" ]; do sleep 0.05; t=$((t + 1)); [ $t -lt 2400 ] || fail "writer stuck before chunk $1"; kill -0 "$bg" 2>/dev/null || fail "writer ended before chunk $1"; done; }
writer & bg=$!
at 4
ceph_cluster osd-stop "$CEPH_DIR" 2
echo "osd.2 stopped; writer at chunk $(($(ls "$W" | grep -c '^d\.at') - 1))"
touch "$W/d.down"
at 12
ceph_cli -s | grep -E 'osd:|degraded|undersized' || true
ceph_cluster osd-start "$CEPH_DIR" 2
echo "osd.2 started; writer at chunk $(($(ls "$W" | grep -c '^d\.at') - 1))"
touch "$W/d.up"
wait "$bg" || fail "writes failed while osd.2 was down or recovering (min_size 2 should keep the pool writable)"
bg=
nbdcopy "$uri" "$W/d.back" && cmp -n $((64 * 1048576)) "$W/d.back" "$W/d.data" || fail "data read back during recovery differs"
t1=$SECONDS
CEPH_WAIT=120 ceph_cluster wait "$CEPH_DIR" || fail "no HEALTH_OK after osd.2 came back"
echo "HEALTH_OK again $((SECONDS - t1))s after the writes ended"
rm -f "$W/d.back"
nbdcopy "$uri" "$W/d.back" && cmp -n $((64 * 1048576)) "$W/d.back" "$W/d.data" || fail "data read back after recovery differs"
ceph_nbd_unexport "$W/deg.sock"
ceph_cli osd pool scrub rbd >/dev/null 2>&1 || true

# ---------------------------------------------------------------- e) cryptkeep over qemu-nbd + rbd
if [[ "$("$CK" open --help 2>/dev/null)" == *"nbd+unix"* ]]; then
  step "e) cryptkeep volume whose ciphertext is the RBD image (qemu-nbd): format, open, mkfs.ext4, tree"
  ceph_rbd create rbd/ckvol --size 256M
  uri=$(ceph_nbd_export ckvol "$W/ck.sock")
  "$CK" format "$uri" "${FAST[@]}" "${CEPH_LUKS2_OPTS[@]}" --key-file "$W/pass" --batch-mode </dev/null
  mkdir -p "$W/mnt"
  dev=$("$CK" open "$uri" ckvol --key-file "$W/pass")
  mkfs.ext4 -q -F "$dev"
  "$CK" close ckvol
  "$CK" open "$uri" ckvol --key-file "$W/pass" --mount "$W/mnt" >/dev/null
  make_tree "$W/mnt/tree" 300 7
  step "e) osd.1 down while more of the tree is written through cryptkeep, then back"
  ceph_cluster osd-stop "$CEPH_DIR" 1
  make_tree "$W/mnt/tree2" 300 8
  printf '%s\n' "$MARK_ENC" > "$W/mnt/marker.txt"
  sync
  ceph_cluster osd-start "$CEPH_DIR" 1
  manifest "$W/mnt" "$W/e.manifest"
  "$CK" close ckvol
  CEPH_WAIT=120 ceph_cluster wait "$CEPH_DIR" || fail "no HEALTH_OK after osd.1 came back"
  step "e) reopen, verify; librbd opens the same image (LUKS2) and sees ext4"
  "$CK" open "$uri" ckvol --key-file "$W/pass" --mount "$W/mnt" >/dev/null
  (cd "$W/mnt" && sha256sum -c --quiet "$W/e.manifest") || fail "manifest mismatch after reopen over NBD+RBD"
  "$CK" close ckvol
  ceph_nbd_unexport "$W/ck.sock"
  qemu-img convert --object "secret,id=s0,file=$W/pass" --image-opts "$(ceph_image_opts ckvol s0)" -O raw "$W/e.plain"
  e2fsck -fn "$W/e.plain" >/dev/null || fail "librbd's view of the cryptkeep volume is not a clean ext4"
  rm -f "$W/e.plain"
  n=$(ceph_osds_holding "$MARK_ENC")
  [ "$n" = 0 ] || fail "plaintext written through cryptkeep over NBD found on $n OSD block files"
else
  echo "skip e): this cryptkeep does not open nbd+unix:// URIs yet (the NBD client)"
fi

step "stop the cluster"
ceph_cluster stop "$CEPH_DIR"
left=$(pgrep -f -- "$CEPH_DIR/ceph.conf" || true)
[ -z "$left" ] || fail "processes left after stop: $left"
echo "ok: ceph interop done in $((SECONDS - t0))s"
