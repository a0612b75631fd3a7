#!/usr/bin/env bash
# The RabbitMQ side of docs/benchmarks.md "TLS": the same hourglass-perf flows as
# scripts/bench_tls.sh, over amqp:// and amqps://, against a RabbitMQ 3.10.8 of its own
# (rabbitmq-ref on 127.0.0.1:5695, TLS on 5696, the same test PKI), alternating, ROUNDS times;
# JSON result lines to OUT (default /tmp/bench_tls_rabbitmq.jsonl). Stops that RabbitMQ at the end.
# usage: scripts/bench_tls_rabbitmq.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/tls_flows.sh
rounds=${1:-3}
seconds=${2:-10}
out=${OUT:-/tmp/bench_tls_rabbitmq.jsonl}
# The reference RabbitMQ's control script (start/stop, RMQ_PORT, RMQ_BASE, RMQ_EXTRA_CONF in its
# environment): $RABBITMQ_REF, else scripts/rabbitmq_ref.sh (Debian's rabbitmq-server).
ref=${RABBITMQ_REF:-scripts/rabbitmq_ref.sh}
if [ ! -x "$ref" ]; then
  echo "bench_tls_rabbitmq.sh: no reference RabbitMQ at $ref: set RABBITMQ_REF to a script that runs" \
    "start / stop for a RabbitMQ 3.x on \$RMQ_PORT with data in \$RMQ_BASE" >&2
  exit 2
fi
plain=5695
tls=5696
certs=$(mktemp -d)
export RMQ_PORT=$plain RMQ_BASE=/tmp/rmq-tls-bench
trap 'RMQ_PORT=$plain RMQ_BASE=/tmp/rmq-tls-bench "$ref" stop >/dev/null 2>&1 || true; rm -rf "$certs"' EXIT
tests/clients/tls/make_certs.sh "$certs"
chmod 755 "$certs" && chmod 644 "$certs"/*
export RMQ_EXTRA_CONF="listeners.ssl.default = 127.0.0.1:$tls
ssl_options.cacertfile = $certs/ca.pem
ssl_options.certfile = $certs/server.pem
ssl_options.keyfile = $certs/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false"
"$ref" start
pid=$(ss -Hltnp "sport = :$plain" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
run_tls_flows "rabbitmq-" "$pid" "amqp://guest:guest@127.0.0.1:$plain/%2f" \
  "amqps://guest:guest@localhost:$tls/%2f?cacertfile=$certs/ca.pem" "$rounds" "$seconds" "$out"
