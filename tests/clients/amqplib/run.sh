#!/usr/bin/env bash
# amqplib's own tests of its channel (promise) and callback APIs against the release binary on
# loopback: 63 tests that pass on RabbitMQ 3.10.8. amqplib comes from npm, pinned in
# package-lock.json. Its connect tests are left out: they expect `product: RabbitMQ` in
# server-properties and a broker on [::1]. Stops only the broker it started.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm) >/dev/null
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
cargo build --release --locked --quiet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
data=$(mktemp -d)
target/release/hourglass --bind 127.0.0.1 --amqp-port "$port" --http-port 0 --metrics-port 0 \
  --data-dir "$data" --loopback-users none > "$data/broker.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),timeout=0.2)" 2>/dev/null && break
  sleep 0.1
done
suite="$here/node_modules/amqplib/test"
# The two files take ~5 s; a broker that loses a close-ok makes a test wait forever, so bound the
# run (with `timeout`, not `--test-timeout`, which Debian 12's Node 18 lacks).
SUITE_TIMEOUT_SECS=120
if URL="amqp://guest:guest@127.0.0.1:$port" HOURGLASS_AMQP_PORT="$port" \
  NODE_OPTIONS="--require $here/redirect-port.cjs" \
  timeout "$SUITE_TIMEOUT_SECS" node --test "$suite/channel_api.test.js" "$suite/callback_api.test.js"; then
  echo "ok   amqplib channel and callback API tests"
else
  echo "FAIL amqplib channel and callback API tests"
  cat "$data/broker.log"
  exit 1
fi
