#!/usr/bin/env bash
# NBD over TLS (NBD_OPT_STARTTLS), both ways, with certificates made at test time
# (lib/tls_certs.sh: a CA, a server and a client certificate; a second CA that
# signed nothing here):
# - open --nbd tcp:... --nbd-tls-cert/--nbd-tls-key/--nbd-tls-ca: the export
#   read and written by libnbd (nbdinfo, nbdcopy with nbds://...?tls-certificates=DIR)
#   and qemu (qemu-io, qemu-img with tls-creds-x509), checked against qemu's own
#   LUKS driver; a plaintext client, a client without a certificate and a client
#   that does not trust the server's CA are all refused; --nbd-tls on over a unix
#   socket serves plaintext and TLS clients;
# - cryptkeep's client (nbds://) against qemu-nbd --tls-creds and
#   nbdkit --tls=require --tls-verify-peer: format, open, write, reopen, sha256;
#   only ciphertext reaches the server; a plaintext URI is refused with a hint.
source "$(dirname "$0")/lib/common.sh"
LIB=$(dirname "$0")/lib
for t in nbdinfo nbdcopy qemu-img qemu-io qemu-nbd nbdkit cryptsetup openssl python3; do
  command -v "$t" >/dev/null || fail "$t missing: run scripts/install-deps.sh"
done
SERVERS=()
tls_cleanup() {
  local rc=$?
  set +e
  for d in "$CRYPTKEEP_RUN_DIR"/*/; do [ -d "$d" ] && "$CK" close "$(basename "$d")" >/dev/null 2>&1; done
  for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  (exit $rc)
  cleanup
}
trap tls_cleanup EXIT

pki=$W/pki
"$LIB/tls_certs.sh" "$pki"
mkdir -p "$W/ca-only" "$W/mnt"
cp "$pki/ca-cert.pem" "$W/ca-only/"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_nbd URI: until the server answers.
wait_nbd() {
  for _ in $(seq 100); do nbdinfo --size "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "no NBD server answers at $1"
}
printf 'nbd tls passphrase' > "$W/pass"
qplain() { # qplain IMAGE OUT: the plaintext by qemu's LUKS driver
  qemu-img convert --object secret,id=s0,file="$W/pass" \
    --image-opts "driver=luks,key-secret=s0,file.filename=$1" -O raw "$2"
}

# ------------------------------------------------------------ the export over TLS
vol=$W/vol.img size=$((32 << 20))
truncate -s 34M "$vol"
cryptsetup luksFormat --type luks1 --batch-mode --pbkdf-force-iterations 1000 --key-file "$W/pass" "$vol" </dev/null

step "open --nbd-tls-cert with a missing key file: a clear error naming the file"
expect_fail 1 "no-such-key.pem" "$CK" open "$vol" bad --key-file "$W/pass" --no-loop \
  --nbd "tcp:127.0.0.1:1" --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$W/no-such-key.pem"
expect_fail 1 "private key" "$CK" open "$vol" bad --key-file "$W/pass" --no-loop \
  --nbd "tcp:127.0.0.1:1" --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$pki/server-cert.pem"
mkfifo "$W/key.fifo"
expect_fail 1 "not a regular file" timeout 20 "$CK" open "$vol" bad --key-file "$W/pass" --no-loop \
  --nbd "tcp:127.0.0.1:1" --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$W/key.fifo"

port=$(free_port)
step "open --nbd tcp:127.0.0.1:$port with TLS required and client certificates verified"
"$CK" open "$vol" nt --key-file "$W/pass" --no-loop --nbd "tcp:127.0.0.1:$port" \
  --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$pki/server-key.pem" \
  --nbd-tls-ca "$pki/ca-cert.pem" > "$W/open.out" 2>"$W/open.err"
uri=$(cat "$W/open.out")
[ "$uri" = "nbds://127.0.0.1:$port/nt" ] || fail "open printed '$uri'"
grep -q "TLS required" "$CRYPTKEEP_RUN_DIR/nt/daemon.log" || fail "the daemon did not log that TLS is required"
turi="nbds://localhost:$port/nt?tls-certificates=$pki"
wait_nbd "$turi"

step "nbdinfo over TLS (by name and by address)"
[ "$(nbdinfo --size "$turi")" = $size ] || fail "nbdinfo size over TLS"
[ "$(nbdinfo --size "nbds://127.0.0.1:$port/nt?tls-certificates=$pki")" = $size ] || fail "nbdinfo by address"
nbdinfo --json "$turi" | python3 -c 'import json,sys; e=json.load(sys.stdin)["exports"][0]; assert e["can_multi_conn"] and not e["is_read_only"], e' \
  || fail "nbdinfo flags over TLS"

step "nbdcopy in and out over TLS (4 connections, flush); sha256"
head -c $size /dev/urandom > "$W/src"
nbdcopy --connections=4 --flush "$W/src" "$turi"
nbdcopy --connections=4 "$turi" "$W/back"
[ "$(sha256sum < "$W/back")" = "$(sha256sum < "$W/src")" ] || fail "nbdcopy over TLS: round trip differs"
qplain "$vol" "$W/plain"
cmp "$W/plain" "$W/src" || fail "qemu's LUKS driver reads something else than was written over TLS"

step "qemu-io and qemu-img over TLS (tls-creds-x509, endpoint=client)"
qopts="driver=nbd,server.type=inet,server.host=localhost,server.port=$port,export=nt,tls-creds=tls0"
qobj="tls-creds-x509,id=tls0,dir=$pki,endpoint=client"
qemu-io --object "$qobj" --image-opts "$qopts" \
  -c "write -P 0xab 12345 7777" -c "read -P 0xab 12345 7777" \
  -c "write -z 1000999 5000" -c "read -P 0 1000999 5000" -c "flush" > "$W/qio" 2>&1 \
  || { cat "$W/qio"; fail "qemu-io over TLS"; }
grep -qi "fail\|error" "$W/qio" && { cat "$W/qio"; fail "qemu-io reported a failure"; }
qemu-img convert --object "$qobj" --image-opts "$qopts" -O raw "$W/qback"
nbdcopy "$turi" "$W/back2"
cmp "$W/qback" "$W/back2" || fail "qemu-img and nbdcopy read different data over TLS"
qplain "$vol" "$W/plain2"
cmp "$W/plain2" "$W/back2" || fail "qemu's LUKS driver disagrees after qemu-io's writes"

step "refused: a plaintext client, a client without a certificate, a client not trusting the CA"
if nbdinfo --size "nbd://127.0.0.1:$port/nt" > "$W/plain.err" 2>&1; then fail "a plaintext client got through"; fi
grep -qi "tls" "$W/plain.err" || { cat "$W/plain.err"; fail "the plaintext client was not told TLS is required"; }
if qemu-io --image-opts "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=$port,export=nt" \
  -c "read 0 512" > "$W/qplain.err" 2>&1; then fail "qemu without TLS got through"; fi
if nbdinfo --size "nbds://localhost:$port/nt?tls-certificates=$W/ca-only" > "$W/nocert.err" 2>&1; then
  fail "a client without a certificate got through"
fi
if nbdinfo --size "nbds://localhost:$port/nt?tls-certificates=$pki/other" > "$W/noca.err" 2>&1; then
  fail "a client trusting another CA got through"
fi
echo "ok: $(head -n1 "$W/plain.err")"
"$CK" status nt | grep -q "is active" || fail "the daemon died"
"$CK" close nt
nbdinfo --size "$turi" >/dev/null 2>&1 && fail "the export still answers after close"

step "--nbd-tls-allow: a client certificate the CA signed gets in only if it names an allowed client"
# the test client's certificate names backup.example (lib/tls_certs.sh)
expect_fail 1 "is not a DNS name or an IP address" "$CK" open "$vol" na --key-file "$W/pass" --no-loop \
  --nbd "tcp:127.0.0.1:1" --nbd-tls-cert "$pki/server-cert.pem" \
  --nbd-tls-key "$pki/server-key.pem" --nbd-tls-ca "$pki/ca-cert.pem" --nbd-tls-allow 'not a name!'
expect_fail 1 "never starts TLS" "$CK" open "$vol" na --key-file "$W/pass" --no-loop \
  --nbd "tcp:127.0.0.1:1" --nbd-tls on --nbd-tls-cert "$pki/server-cert.pem" \
  --nbd-tls-key "$pki/server-key.pem" --nbd-tls-ca "$pki/ca-cert.pem" --nbd-tls-allow backup.example
for allow in laptop.example backup.example; do
  aport=$(free_port)
  "$CK" open "$vol" na --key-file "$W/pass" --no-loop --nbd "tcp:127.0.0.1:$aport" \
    --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$pki/server-key.pem" \
    --nbd-tls-ca "$pki/ca-cert.pem" --nbd-tls-allow "$allow" > /dev/null
  auri="nbds://localhost:$aport/na?tls-certificates=$pki"
  if [ $allow = laptop.example ]; then
    if nbdinfo --size "$auri" > "$W/allow.err" 2>&1; then fail "a client not named by --nbd-tls-allow got through"; fi
    grep -qi "tls" "$W/allow.err" || fail "the refused client did not fail in the TLS handshake: $(cat "$W/allow.err")"
    qemu-io --object "$qobj" -c "read 0 512" \
      --image-opts "driver=nbd,server.type=inet,server.host=localhost,server.port=$aport,export=na,tls-creds=tls0" \
      > /dev/null 2>&1 && fail "qemu with a client certificate not allowed got through"
    grep -q "TLS with 127.0.0.1 failed: .*NotValidForName" "$CRYPTKEEP_RUN_DIR/na/daemon.log" \
      || { cat "$CRYPTKEEP_RUN_DIR/na/daemon.log"; fail "the daemon's log does not say why the client was refused"; }
  else
    [ "$(nbdinfo --size "$auri")" = $size ] || fail "the allowed client was refused"
  fi
  "$CK" close na
done
echo "ok: $(head -n1 "$W/allow.err")"

step "--nbd-tls on over a unix socket: plaintext and TLS clients both served"
sock=$W/nt.sock
"$CK" open "$vol" nu --key-file "$W/pass" --no-loop --nbd "unix:$sock" --nbd-tls on \
  --nbd-tls-cert "$pki/server-cert.pem" --nbd-tls-key "$pki/server-key.pem" > "$W/open2.out"
[ "$(cat "$W/open2.out")" = "nbds+unix:///nu?socket=$sock" ] || fail "open printed '$(cat "$W/open2.out")'"
[ "$(nbdinfo --size "nbd+unix:///nu?socket=$sock")" = $size ] || fail "plaintext client with TLS offered"
nbdcopy "nbds+unix:///nu?socket=$sock&tls-certificates=$W/ca-only" "$W/back3"
cmp "$W/back3" "$W/back2" || fail "nbds+unix read differs"
"$CK" close nu

# ------------------------------------------------------------ cryptkeep's client over TLS
MARK=CRYPTKEEP-NBD-TLS-PLAINTEXT-MARKER-41d2
# client_roundtrip URI NAME IMG: format, open, write files and the marker, close,
# reopen read-only, sha256; the marker never reaches IMG (if given).
client_roundtrip() {
  local uri=$1 name=$2 img=${3:-}
  step "$name: format, open, mkfs.ext4, write over $uri"
  "$CK" format "$uri" "${FAST[@]}" --key-file "$W/pass" --batch-mode </dev/null
  dev=$("$CK" open "$uri" "$name" --key-file "$W/pass")
  mkfs.ext4 -q -F "$dev"
  mount "$dev" "$W/mnt"
  head -c 6M /dev/urandom > "$W/mnt/random.bin"
  for i in $(seq 2000); do echo "$MARK line $i"; done > "$W/mnt/marker.txt"
  (cd "$W/mnt" && sha256sum random.bin marker.txt) > "$W/sums-$name"
  umount "$W/mnt"
  "$CK" close "$name"
  step "$name: reopen read-only, sha256, e2fsck"
  dev=$("$CK" open "$uri" "$name" --key-file "$W/pass" --read-only)
  e2fsck -fn "$dev" >/dev/null || fail "$name: e2fsck"
  mount -o ro "$dev" "$W/mnt"
  (cd "$W/mnt" && sha256sum -c --quiet "$W/sums-$name") || fail "$name: checksums differ after reopen"
  umount "$W/mnt"
  "$CK" close "$name"
  if [ -n "$img" ]; then
    grep -aq "$MARK" "$img" && fail "$name: plaintext reached the server's image"
    cryptsetup isLuks "$img" || fail "$name: cryptsetup does not see LUKS in the server's image"
  fi
  return 0
}

step "qemu-nbd --tls-creds (x509, client certificates verified)"
truncate -s 64M "$W/q.img"
qport=$(free_port)
qemu-nbd -f raw -x vol -t -e 4 -b 127.0.0.1 -p "$qport" \
  --object "tls-creds-x509,id=tls0,dir=$pki,endpoint=server,verify-peer=on" --tls-creds tls0 \
  "$W/q.img" 2>>"$W/qemu-nbd.log" &
SERVERS+=($!)
quri="nbds://localhost:$qport/vol?tls-certificates=$pki"
wait_nbd "$quri"
client_roundtrip "$quri" tq "$W/q.img"
expect_fail 2 "requires TLS" "$CK" isLuks "nbd://127.0.0.1:$qport/vol"
expect_fail 2 "TLS with" "$CK" dump "nbds://localhost:$qport/vol?tls-certificates=$pki/other"

step "nbdkit --tls=require --tls-verify-peer (memory plugin)"
kport=$(free_port)
nbdkit -f -i 127.0.0.1 -p "$kport" --tls=require --tls-certificates="$pki" --tls-verify-peer \
  memory 64M 2>>"$W/nbdkit.log" &
SERVERS+=($!)
kuri="nbds://localhost:$kport/?tls-certificates=$pki"
wait_nbd "$kuri"
client_roundtrip "$kuri" tk
if "$CK" dump "nbds://localhost:$kport/?tls-certificates=$W/ca-only" > /dev/null 2>"$W/k.err"; then
  fail "nbdkit let a client without a certificate in"
fi
grep -q '^cryptkeep: .*client certificate' "$W/k.err" || fail "the refused client was not told why: $(cat "$W/k.err")"
echo "ok: $(head -n1 "$W/k.err")"
echo "nbd_tls: all passed"
