#!/usr/bin/env bash
# Real clients over TLS (pika, the RabbitMQ Java client, python-qpid-proton over AMQP 1.0)
# against the release binary: a test PKI made with openssl (make_certs.sh), AMQPS with peer
# verification and EXTERNAL on, certificate
# reload on SIGHUP. Called by .ci/run after tests/clients/run.sh (which installs pika and Java).
set -euo pipefail
cd "$(dirname "$0")/../../.."
java_cp=/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar
if ! command -v openssl >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl) >/dev/null
fi
certs=$(mktemp -d)
java_out=$(mktemp -d)
data=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; rm -rf "$certs" "$java_out" "$data"' EXIT
tests/clients/tls/make_certs.sh "$certs"
cp "$certs/server.pem" "$certs/live.pem"
cp "$certs/server.key" "$certs/live.key"
javac -d "$java_out" -cp "$java_cp" tests/clients/tls/JavaTlsFlows.java
cargo build --release --locked --quiet
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
port=$(free_port)
target/release/hourglass --bind 127.0.0.1 --amqp-port 0 --http-port 0 --metrics-port 0 \
  --amqps-port "$port" --https-port 0 --metrics-tls-port 0 \
  --tls-cert "$certs/live.pem" --tls-key "$certs/live.key" --tls-ca "$certs/ca.pem" \
  --tls-verify-peer true --tls-external-auth true --data-dir "$data" > "$data/broker.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),timeout=0.2)" 2>/dev/null && break
  sleep 0.1
done
failed=0
if timeout 60 java -cp "$java_out:$java_cp" JavaTlsFlows "$port" "$certs"; then echo "ok   JavaTlsFlows"; else echo "FAIL JavaTlsFlows"; failed=$((failed+1)); fi
if timeout 60 python3 tests/clients/tls/proton_tls.py "$port" "$certs"; then echo "ok   proton_tls.py"; else echo "FAIL proton_tls.py"; failed=$((failed+1)); fi
# Last: it reloads the broker's certificate.
if timeout 60 python3 tests/clients/tls/pika_tls.py "$port" "$certs" "$pid"; then echo "ok   pika_tls.py"; else echo "FAIL pika_tls.py"; failed=$((failed+1)); fi
echo "TLS clients: $((3-failed)) passed, $failed failed"
[ "$failed" -eq 0 ] || { cat "$data/broker.log"; exit 1; }
