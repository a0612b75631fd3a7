#!/usr/bin/env bash
# Makes a test PKI with openssl into DIR (the same commands docs/tls.md walks through):
#   ca.pem / ca.key          a CA
#   server.pem / server.key  a server certificate for localhost and 127.0.0.1 (CN=first)
#   server2.pem / server2.key  another one (CN=second), for the reload test
#   guest.pem / guest.key / guest.p12  a client certificate with CN=guest (PKCS#12 password changeit)
set -euo pipefail
dir=$1
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=Hourglass test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
sign() { # name subject extensions
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%b' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out "$1.pem" \
    -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server "/CN=first" "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
sign server2 "/CN=second" "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
sign guest "/CN=guest" "extendedKeyUsage=clientAuth\n"
openssl pkcs12 -export -in guest.pem -inkey guest.key -out guest.p12 -passout pass:changeit
