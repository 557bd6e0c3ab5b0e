#!/usr/bin/env bash
# cryptkeep fs under stress, every check a content comparison:
# fio random writes with crc32c verify (then a verify-only pass after a remount);
# stress-ng file stressors with --verify; concurrent writers on one file (disjoint
# 4 KiB-aligned blocks and unaligned 1000-byte pieces that share blocks) against the
# same writes done on tmpfs; untar + md5sum -c, again after a remount, twice;
# finally gocryptfs -fsck on the cipher dir must be clean. About 60 s on 2 cores.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
for t in gocryptfs fio stress-ng md5sum tar cmp python3 perl; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done

echo stress-pw > "$W/pf"
C=$W/cipher M=$W/mnt
mkdir -p "$M"
"$CK" fs init "$C" --scryptn 10 --passfile "$W/pf" </dev/null >/dev/null
mount_ck() { "$CK" fs mount "$C" "$M" --passfile "$W/pf" </dev/null >/dev/null; }
remount_ck() { "$CK" fs umount "$M"; mount_ck; }
mount_ck

step "fio: 2 jobs of random writes, 4k-64k, with crc32c verify; verify-only pass after a remount"
fio_args=(--name=v --filename="$M/fio.dat" --rw=randwrite --bsrange=4k-64k --size=32M
  --numjobs=2 --offset_increment=32M --ioengine=psync --verify=crc32c --verify_fatal=1
  --randseed=4242 --group_reporting --verify_state_save=0)
fio "${fio_args[@]}" --output="$W/fio1.out" || { cat "$W/fio1.out"; fail "fio write+verify found a mismatch"; }
remount_ck
fio "${fio_args[@]}" --verify_only --output="$W/fio2.out" || { cat "$W/fio2.out"; fail "fio verify after remount found a mismatch"; }
grep -Eq 'READ: bw=' "$W/fio2.out" || { cat "$W/fio2.out"; fail "fio verify pass read nothing"; }
rm "$M/fio.dat"

step "stress-ng file stressors with --verify"
mkdir -p "$M/sng"
sng=(--hdd 2 --hdd-opts "wr-rnd,rd-rnd" --hdd-bytes 16M --dentry 1 --dir 1 --link 1 --rename 1)
# fallocate(2): the fs supports mode 0 (as gocryptfs does); stress-ng's stressor also
# tries other modes and copes with EOPNOTSUPP itself. It works on an unlinked open file,
# so it also checks that ftruncate(fd) works after unlink (POSIX; gocryptfs does it).
if python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_CREAT|os.O_RDWR); os.posix_fallocate(fd, 0, 65536)' "$M/fa" 2>/dev/null; then
  sng+=(--fallocate 1 --fallocate-bytes 16M)
else
  echo "note: fallocate unsupported, --fallocate skipped"
fi
rm -f "$M/fa"
rc=0
(cd "$M/sng" && stress-ng --temp-path "$M/sng" "${sng[@]}" --verify -t 10s --metrics-brief) > "$W/sng.out" 2>&1 || rc=$?
grep -iE 'fail' "$W/sng.out" | grep -vE 'failed: 0\b' > "$W/sng.fail" || true
if [ "$rc" != 0 ] || [ -s "$W/sng.fail" ]; then cat "$W/sng.out"; fail "stress-ng exit $rc or failures reported"; fi
grep -E 'successful run completed|passed:' "$W/sng.out" | head -n2
rm -rf "$M/sng"

step "concurrent writers on one file, compared with the same writes on tmpfs"
cat > "$W/writer.py" <<'EOF'
# writer.py FILE I N: writer I of N writes its own regions of FILE, in a shuffled order:
# 4 KiB-aligned blocks b with b % N == I (first 4 MiB), then 1000-byte pieces
# (unaligned, several per 4 KiB block, so writers share blocks) p with p % N == I.
import os, random, sys
path, i, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def data(tag, k, size):
    return random.Random(tag * 1000003 + k).randbytes(size)
jobs = [(b * 4096, data(1, b, 4096)) for b in range(1024) if b % n == i]
jobs += [((4 << 20) + 123 + p * 1000, data(2, p, 1000)) for p in range(3000) if p % n == i]
random.Random(i).shuffle(jobs)
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
for off, buf in jobs:
    assert os.pwrite(fd, buf, off) == len(buf)
os.fsync(fd)
os.close(fd)
EOF
N=8
for i in $(seq 0 $((N - 1))); do python3 "$W/writer.py" "$W/expected" "$i" "$N"; done
: > "$M/shared"
pids=()
for i in $(seq 0 $((N - 1))); do python3 "$W/writer.py" "$M/shared" "$i" "$N" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "writer $p failed"; done
cmp "$W/expected" "$M/shared" || fail "concurrent writes: the file differs from the expected one"
remount_ck
cmp "$W/expected" "$M/shared" || fail "concurrent writes: the file differs after a remount"
rm "$M/shared"

step "untar + md5sum -c, again after a remount; 2 iterations"
make_tree "$W/tree" 2500 7
(cd "$W/tree" && find . -type f -print0 | sort -z | xargs -0 md5sum) > "$W/tree.md5"
tar -cf "$W/tree.tar" -C "$W/tree" .
for it in 1 2; do
  mkdir "$M/u$it"
  tar -xf "$W/tree.tar" -C "$M/u$it"
  (cd "$M/u$it" && md5sum -c --quiet "$W/tree.md5") || fail "iteration $it: md5 mismatch right after untar"
  remount_ck
  (cd "$M/u$it" && md5sum -c --quiet "$W/tree.md5") || fail "iteration $it: md5 mismatch after remount"
done
[ "$(find "$M/u1" -type f | wc -l)" = 2500 ] || fail "untar lost files"

step "gocryptfs -fsck on the cipher dir is clean"
"$CK" fs umount "$M"
gocryptfs -fsck -q -passfile "$W/pf" "$C" || fail "gocryptfs -fsck found problems after the stress run"

echo "PASS fs_stress"
