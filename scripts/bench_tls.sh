#!/usr/bin/env bash
# TLS next to plaintext on one Hourglass process (docs/benchmarks.md, "TLS"): the same
# hourglass-perf scenarios over amqp:// and amqps://, alternating, ROUNDS times; JSON result lines
# to OUT (default /tmp/bench_tls.jsonl). Needs release builds of hourglass and hourglass-perf.
# usage: scripts/bench_tls.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/tls_flows.sh
rounds=${1:-3}
seconds=${2:-10}
out=${OUT:-/tmp/bench_tls.jsonl}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; rm -rf "$work"' EXIT
tests/clients/tls/make_certs.sh "$work"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
plain=$(free_port)
tls=$(free_port)
target/release/hourglass --bind 127.0.0.1 --amqp-port "$plain" --http-port 0 --metrics-port 0 \
  --amqps-port "$tls" --https-port 0 --metrics-tls-port 0 \
  --tls-cert "$work/server.pem" --tls-key "$work/server.key" --data-dir "$work/data" > "$work/broker.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$tls),timeout=0.2)" 2>/dev/null && break
  sleep 0.1
done
run_tls_flows "" "$pid" "amqp://guest:guest@127.0.0.1:$plain/%2f" \
  "amqps://guest:guest@localhost:$tls/%2f?cacertfile=$work/ca.pem" "$rounds" "$seconds" "$out"
