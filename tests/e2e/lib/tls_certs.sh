#!/usr/bin/env bash
# tls_certs.sh DIR: a throwaway X.509 set for NBD over TLS, made with openssl,
# in the layout qemu's tls-creds-x509, libnbd's tls-certificates= and nbdkit's
# --tls-certificates read (and cryptkeep's nbds:// client):
#   ca-cert.pem ca-key.pem          a CA (EC P-256), 2 days
#   server-cert.pem server-key.pem  signed by it, for localhost and 127.0.0.1
#   client-cert.pem client-key.pem  signed by it, for client authentication, naming
#                                   backup.example (subjectAltName)
# Also a second, unrelated CA in DIR/other/ca-cert.pem (a CA that signed nothing
# here, for "unknown issuer" tests), and in DIR/wild/ the CA and a client
# certificate it signed for the wildcard *.corp.example (for name checks that must
# not take a wildcard for a name). Keys are mode 0600.
set -euo pipefail
d=${1:?usage: tls_certs.sh DIR}
mkdir -p "$d/other" "$d/wild"
cd "$d"
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # ca DIR CN
  key "$1/ca-key.pem"
  openssl req -x509 -new -key "$1/ca-key.pem" -out "$1/ca-cert.pem" -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() { # leaf NAME CN EXTENSIONS
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -out "$1.csr" -subj "/CN=$2"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
    -out "$1-cert.pem" -days 2 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca . "cryptkeep test CA"
ca other "unrelated test CA"
leaf server localhost "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client "cryptkeep test client" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:backup.example"
leaf wild/client "wildcard test client" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:*.corp.example"
cp ca-cert.pem wild/ca-cert.pem
chmod 0644 ./*-cert.pem other/ca-cert.pem wild/*-cert.pem
