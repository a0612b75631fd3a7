#!/usr/bin/env bash
# Durable declares as definitions grow (docs/benchmarks.md "Durable declares"): N durable queues,
# each declared and bound one at a time, against a fresh Hourglass and, when given, a RabbitMQ
# node. Prints the load tool's result lines (one JSON line per broker).
# usage: scripts/bench_declares.sh [QUEUES] [RABBITMQ_PORT RABBITMQ_PID] [HOURGLASS_BINARY]
# (build first: cargo build --release -p hourglass -p hourglass-perf)
set -euo pipefail
cd "$(dirname "$0")/.."
queues=${1:-20000}
rmq_port=${2:-}
rmq_pid=${3:-}
binary=${4:-target/release/hourglass}
perf=target/release/hourglass-perf
port=5800
data=$(mktemp -d /tmp/hourglass-declares.XXXXXX)
"$binary" --bind 127.0.0.1 --amqp-port $port --http-port 15800 --metrics-port 15801 \
  --data-dir "$data" > "$data.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
"$perf" --url "amqp://guest:guest@127.0.0.1:$port/%2f" --broker-pid $pid --label hourglass \
  declares --queues "$queues" --step 2000 --timeout-s 600
if [ -n "$rmq_port" ]; then
  "$perf" --url "amqp://guest:guest@127.0.0.1:$rmq_port/%2f" --broker-pid "$rmq_pid" --label rabbitmq \
    declares --queues "$queues" --step 2000 --timeout-s 600
fi
