#!/usr/bin/env bash
# fio sequential 1 MiB reads and writes through cryptkeep's loop device with
# the ciphertext on qemu-nbd (Unix socket, image on tmpfs) against the same
# with the ciphertext in a local file on that tmpfs; prints MiB/s and the
# NBD/local ratio. Needs root, qemu-nbd, fio; the release binary.
# usage: scripts/bench-nbd-client.sh [SIZE_MIB]
# QEMU_NBD_SHARED=N: qemu-nbd's -e (default 4; 1 gives no multi-conn, so
# cryptkeep uses one connection).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CK=${CK:-$ROOT/target/release/cryptkeep}
MIB=${1:-512}
D=$(mktemp -d /dev/shm/ck-nbd-bench.XXXXXX)
export CRYPTKEEP_RUN_DIR=$D/run
QPID=
cleanup() {
  set +e
  "$CK" close ckbench-nbd >/dev/null 2>&1
  "$CK" close ckbench-file >/dev/null 2>&1
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
printf 'bench' > "$D/pass"
FAST=(--pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file "$D/pass" --batch-mode)
size=$(( (MIB + 64) ))M

truncate -s "$size" "$D/nbd.img"
qemu-nbd -f raw -x vol -t -e "${QEMU_NBD_SHARED:-4}" -k "$D/sock" "$D/nbd.img" &
QPID=$!
for _ in $(seq 100); do [ -S "$D/sock" ] && break; sleep 0.05; done
uri="nbd+unix:///vol?socket=$D/sock"
"$CK" format "$uri" "${FAST[@]}"
"$CK" format "$D/file.img" --size "$size" "${FAST[@]}"

# run NAME DEV RW: MiB/s of one fio job.
run() {
  fio --name="$1" --filename="$2" --rw="$3" --bs=1M --size="${MIB}M" --direct=1 \
      --ioengine=libaio --iodepth=4 --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; k="read" if j["read"]["bw"] else "write"; print(round(j[k]["bw"]/1024,1))'
}
declare -A r
for t in nbd file; do
  src=$uri; [ "$t" = file ] && src=$D/file.img
  dev=$("$CK" open "$src" "ckbench-$t" --key-file "$D/pass")
  r[$t-write]=$(run w "$dev" write)
  r[$t-read]=$(run r "$dev" read)
  "$CK" close "ckbench-$t"
done
printf '%-6s %12s %12s %7s\n' op "nbd MiB/s" "file MiB/s" ratio
for op in write read; do
  printf '%-6s %12s %12s %7s\n' "$op" "${r[nbd-$op]}" "${r[file-$op]}" \
    "$(python3 -c "print(round(${r[nbd-$op]}/${r[file-$op]},2))")"
done
