#!/usr/bin/env bash
# open --nbd: the volume exported over NBD to real clients (libnbd's nbdinfo and
# nbdcopy, qemu-img, qemu-io, qemu-storage-daemon), checked against a plaintext that
# neither cryptsetup nor cryptkeep produced (qemu's own LUKS driver):
# - nbdinfo: size, flags, block sizes, description, the base:allocation map;
# - nbdcopy both ways with sha256, four connections with multi-conn and flush;
# - qemu-io writes, zeroes and discards at odd offsets; qemu-img compare;
# - ext4 on a loop device over qemu-storage-daemon's FUSE export of the NBD export:
#   mkfs, files, e2fsck -fn; then over nbdfuse (libnbd's FUSE client): the files
#   verify, more files, e2fsck -fn; and all of them through cryptkeep's own loop device;
# - a read-only export over TCP (--no-loop) refusing writes;
# - a hostile client (lib/nbd_hostile.py), then a normal client still works;
# - --nbd-max-connections 2 (lib/nbd_cap.py): two sessions held, a third closed at once;
# - the daemon's memory holds no byte of the volume key; close removes the socket.
source "$(dirname "$0")/lib/common.sh"
LIB=$(dirname "$0")/lib
for t in nbdinfo nbdcopy nbdfuse qemu-img qemu-io qemu-storage-daemon cryptsetup python3; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done
QSD=""
nbd_cleanup() {
  local rc=$?
  set +e
  if [ -n "$QSD" ]; then kill "$QSD" 2>/dev/null; wait "$QSD" 2>/dev/null; fi
  (exit $rc)
  cleanup
}
trap nbd_cleanup EXIT

printf 'nbd export passphrase' > "$W/pass"
vol=$W/vol.img rovol=$W/ro.img sock=$W/nv.sock
truncate -s 66M "$vol"
cryptsetup luksFormat --type luks1 --batch-mode --pbkdf-force-iterations 1000 --key-file "$W/pass" "$vol" </dev/null
truncate -s 18M "$rovol"
cryptsetup luksFormat --type luks1 --batch-mode --pbkdf-force-iterations 1000 --key-file "$W/pass" "$rovol" </dev/null
size=$((64 << 20))
# qemu's LUKS driver: the plaintext, independently of cryptsetup and cryptkeep.
qplain() { # qplain IMAGE OUT
  qemu-img convert --object secret,id=s0,file="$W/pass" \
    --image-opts "driver=luks,key-secret=s0,file.filename=$1" -O raw "$2"
}

step "--nbd with --keep inline is refused"
expect_fail 1 "keep process" "$CK" open "$vol" bad --key-file "$W/pass" --keep inline --nbd "unix:$sock"

step "open --nbd unix:$sock --allow-discards: prints the loop device and the NBD URI"
"$CK" open "$vol" nv --key-file "$W/pass" --allow-discards --nbd "unix:$sock" \
  --nbd-description "nbd e2e volume" > "$W/open.out"
dev=$(sed -n 1p "$W/open.out") uri=$(sed -n 2p "$W/open.out")
[ -b "$dev" ] || fail "no loop device: $(cat "$W/open.out")"
[ "$uri" = "nbd+unix:///nv?socket=$sock" ] || fail "URI is '$uri'"
[ -S "$sock" ] && [ "$(stat -c %a "$sock")" = 600 ] || fail "socket missing or not mode 0600"
"$CK" status nv | grep -q "nbd: *$uri" || fail "status lacks the export"
# With an NBD export the keep gets smaller requests: its workers stay real-time (root).
pol=$(keep_worker_policies nv | sort -u | tr '\n' ' ')
[ "$pol" = "1 " ] || fail "the keep's workers' policies are '$pol', want SCHED_FIFO (1)"

step "nbdinfo: size, flags, block sizes, description, base:allocation"
nbdinfo --json "$uri" > "$W/info.json"
python3 - "$W/info.json" "$size" <<'PY' || { cat "$W/info.json"; fail "nbdinfo disagrees"; }
import json, sys
e = json.load(open(sys.argv[1]))["exports"][0]
want = {"export-size": int(sys.argv[2]), "is_read_only": False, "can_flush": True, "can_fua": True,
        "can_multi_conn": True, "can_trim": True, "can_zero": True, "can_cache": True, "can_df": True,
        "block_size_minimum": 512, "block_size_preferred": 4096, "block_size_maximum": 32 << 20,
        "description": "nbd e2e volume", "export-name": "nv"}
bad = {k: (e.get(k), v) for k, v in want.items() if e.get(k) != v}
assert not bad, bad
assert "base:allocation" in e.get("contexts", []), e.get("contexts")
PY
nbdinfo --map "$uri" > "$W/map0"
# The image is sparse (truncate) and --allow-discards makes holes read as zeros.
grep -q "hole,zero" "$W/map0" || { cat "$W/map0"; fail "the fresh image shows no hole in the map"; }

step "nbdcopy in (the whole export, 4 connections, flush) and out; sha256 both ways"
head -c 64M /dev/urandom > "$W/src"
nbdcopy --connections=4 --flush "$W/src" "$uri"
nbdcopy --connections=4 "$uri" "$W/back"
[ "$(stat -c %s "$W/back")" = $size ] || fail "nbdcopy out: wrong size"
cmp "$W/back" "$W/src" || fail "nbdcopy round trip differs"
nbdinfo --map "$uri" | awk -v s=$size '$1 == 0 && $2 == s && $4 == "data" {ok=1} END {exit !ok}' \
  || { nbdinfo --map "$uri"; fail "the written volume is not all data in the map"; }
step "qemu's LUKS driver reads the same plaintext from the image; qemu-img compare"
qplain "$vol" "$W/plain"
cmp "$W/plain" "$W/back" || fail "qemu's plaintext differs from the export"
qemu-img compare -f raw -F raw "$W/plain" "$uri" || fail "qemu-img compare"

step "four clients at once (qemu-io into four regions), then all read back"
for i in 0 1 2 3; do
  head -c 4M /dev/urandom > "$W/part$i"
  qemu-io -f raw -c "write -s $W/part$i $((32 + i * 4))M 4M" -c flush "$uri" >/dev/null &
done
wait
nbdcopy "$uri" "$W/back2"
for i in 0 1 2 3; do
  cmp <(tail -c +$(((32 + i * 4) * 1048576 + 1)) "$W/back2" | head -c 4M) "$W/part$i" || fail "client $i's region differs"
done

step "qemu-io: writes, zeroes and discards at odd offsets"
qemu-io -f raw "$uri" \
  -c "write -P 0xab 12345 7777" -c "read -P 0xab 12345 7777" \
  -c "write -P 0xcd 1000001 65537" -c "read -P 0xcd 1000001 65537" \
  -c "write -z 1000999 5000" -c "read -P 0 1000999 5000" -c "read -P 0xcd 1005999 59539" \
  -c "write -P 0x11 40M 2M" -c "discard 40M 2M" -c "read -P 0 40M 2M" \
  -c "flush" > "$W/qio" || { cat "$W/qio"; fail "qemu-io"; }
grep -qi "fail\|error" "$W/qio" && { cat "$W/qio"; fail "qemu-io reported a failure"; }
nbdinfo --map "$uri" > "$W/map1"
grep -q "hole,zero" "$W/map1" || { cat "$W/map1"; fail "the discarded range is no hole in the map"; }
# The discarded range reads as zeros here; qemu's LUKS driver decrypts the hole
# (as dm-crypt would): compare around it.
qplain "$vol" "$W/plain2"; nbdcopy "$uri" "$W/back3"
part() { tail -c +$(($2 + 1)) "$1" | head -c "$3"; }
cmp <(part "$W/plain2" 0 40M) <(part "$W/back3" 0 40M) || fail "qemu's plaintext differs below the discard"
cmp <(part "$W/plain2" $((42 << 20)) 22M) <(part "$W/back3" $((42 << 20)) 22M) || fail "qemu's plaintext differs above the discard"

step "ext4 through NBD: qemu-storage-daemon FUSE export, loop device, mkfs, files, e2fsck"
touch "$W/qsd.img"; mkdir -p "$W/mnt"
qemu-storage-daemon --blockdev "driver=nbd,node-name=n0,server.type=unix,server.path=$sock,export=nv" \
  --export "type=fuse,id=e0,node-name=n0,mountpoint=$W/qsd.img,writable=on" &
QSD=$!
for _ in $(seq 50); do [ "$(stat -c %s "$W/qsd.img")" = $size ] && break; sleep 0.1; done
[ "$(stat -c %s "$W/qsd.img")" = $size ] || fail "qemu-storage-daemon did not export the volume"
ldev=$(losetup -f --show "$W/qsd.img"); EXTRA_LOOPS+=("$ldev")
mkfs.ext4 -q -F "$ldev"
mount "$ldev" "$W/mnt"
make_tree "$W/mnt/tree" 300 7
manifest "$W/mnt" "$W/manifest"
umount "$W/mnt"
e2fsck -fn "$ldev" || fail "e2fsck on the NBD-backed loop device"
losetup -d "$ldev"
kill "$QSD"; wait "$QSD" 2>/dev/null || true; QSD=""
step "ext4 through nbdfuse (libnbd's FUSE client): loop device, the files verify, more files, e2fsck"
mkdir -p "$W/nf"
nbdfuse "$W/nf" "$uri" &
NBDFUSE=$!
for _ in $(seq 50); do [ "$(stat -c %s "$W/nf/nbd" 2>/dev/null)" = $size ] && break; sleep 0.1; done
[ "$(stat -c %s "$W/nf/nbd" 2>/dev/null)" = $size ] || fail "nbdfuse did not show the export"
ldev=$(losetup -f --show "$W/nf/nbd"); EXTRA_LOOPS+=("$ldev")
mount "$ldev" "$W/mnt"
(cd "$W/mnt" && sha256sum -c --quiet "$W/manifest") || fail "files differ through nbdfuse"
make_tree "$W/mnt/tree2" 100 5
manifest "$W/mnt" "$W/manifest"
umount "$W/mnt"
e2fsck -fn "$ldev" || fail "e2fsck on the nbdfuse-backed loop device"
losetup -d "$ldev"
fusermount3 -u "$W/nf"; wait "$NBDFUSE" 2>/dev/null || true
step "the same files through cryptkeep's own loop device"
blockdev --flushbufs "$dev"
e2fsck -fn "$dev" || fail "e2fsck on cryptkeep's loop device"
mount -o ro "$dev" "$W/mnt"
(cd "$W/mnt" && sha256sum -c --quiet "$W/manifest") || fail "files differ through the loop device"
umount "$W/mnt"

step "read-only export over TCP, --no-loop"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$CK" open "$rovol" nro --key-file "$W/pass" -r --no-loop --nbd "tcp:127.0.0.1:$port" --nbd-name ro > "$W/ro.out"
rouri=$(cat "$W/ro.out")
[ "$rouri" = "nbd://127.0.0.1:$port/ro" ] || fail "read-only open printed '$rouri'"
"$CK" status nro --json > "$W/ro.json"
json_has "$W/ro.json" device null
nbdinfo --json "$rouri" | python3 -c 'import json,sys; e=json.load(sys.stdin)["exports"][0]; assert e["is_read_only"] and not e["can_trim"], e' \
  || fail "the read-only export is not read-only"
rc=0; qemu-io -f raw -c "write -P 1 0 4096" "$rouri" > "$W/rowrite" 2>&1 || rc=$?
grep -qi "permission\|not permitted\|read-only\|read only" "$W/rowrite" || { cat "$W/rowrite"; fail "a write to the read-only export was not refused"; }
qplain "$rovol" "$W/roplain"; nbdcopy "$rouri" "$W/roback"
cmp "$W/roplain" "$W/roback" || fail "the read-only export differs from qemu's plaintext"
"$CK" close nro

step "a hostile client; then a normal client still works"
python3 "$LIB/nbd_hostile.py" "$sock" nv "$size" || fail "hostile client"
nbdinfo --size "$uri" | grep -qx "$size" || fail "nbdinfo after the hostile client"
"$CK" status nv | grep -q "is active" || fail "the daemon died"

step "the daemon's memory holds no byte of the volume key"
vk=$(cryptsetup luksDump --dump-volume-key --batch-mode --key-file "$W/pass" "$vol" </dev/null \
  | sed -n '/MK dump:/,$p' | sed 's/MK dump://' | tr -d ' \t\n')
[ ${#vk} = 64 ] || [ ${#vk} = 128 ] || fail "could not read the volume key ($vk)"
dpid=$(sed -n 's/^  "pid": \([0-9]*\),$/\1/p' "$CRYPTKEEP_RUN_DIR/nv/state.json")
python3 "$LIB/memscan.py" "$dpid" "$vk" || fail "the volume key is in the daemon's memory (pid $dpid)"

step "close stops the server and removes the socket"
"$CK" close nv
[ ! -e "$sock" ] || fail "close left $sock"
nbdinfo --size "$uri" >/dev/null 2>&1 && fail "the export still answers after close"

step "a stale socket at the path is replaced; a file or a symlink there is left alone"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$sock"
"$CK" open "$vol" nv2 --key-file "$W/pass" --nbd "unix:$sock" --no-loop >/dev/null
nbdinfo --size "nbd+unix:///nv2?socket=$sock" >/dev/null || fail "no export over a stale socket"
"$CK" close nv2
[ ! -e "$sock" ] || fail "close left $sock"
echo keep > "$W/victim"
ln -s "$W/victim" "$sock"
expect_fail 5 "is taken" "$CK" open "$vol" nv3 --key-file "$W/pass" --nbd "unix:$sock" --no-loop
[ -L "$sock" ] && [ "$(cat "$W/victim")" = keep ] || fail "the symlink or its target was touched"
rm "$sock"

step "--nbd-max-connections 2: two sessions held, a third client is closed at once, then served"
"$CK" open "$vol" nv4 --key-file "$W/pass" --nbd "unix:$sock" --no-loop --nbd-max-connections 2 >/dev/null
python3 "$LIB/nbd_cap.py" "$sock" nv4 || fail "the connection cap"
grep -q "refused a connection from a local client: every connection is in use" "$CRYPTKEEP_RUN_DIR/nv4/daemon.log" \
  || { cat "$CRYPTKEEP_RUN_DIR/nv4/daemon.log"; fail "the daemon's log does not say why the third client was refused"; }
"$CK" close nv4
echo "nbd_export: all passed"
