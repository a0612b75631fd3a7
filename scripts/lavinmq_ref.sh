#!/usr/bin/env bash
# The second reference broker of scripts/bench.py: LavinMQ (CloudAMQP's AMQP 0-9-1 broker), one
# node on loopback, from a `lavinmq` binary you provide: CloudAMQP's packages
# (https://lavinmq.com/documentation/installation-guide) or a build of its source (Crystal).
#   LAVINMQ_BIN=/path/to/lavinmq scripts/lavinmq_ref.sh start|stop|status
# LAVINMQ_BIN defaults to `lavinmq` on PATH. LAV_PORT (5674) is its AMQP port, its HTTP port is
# LAV_PORT + 10000, LAV_BASE (/tmp/lavinmq-ref) holds its data and log. Settings are LavinMQ's
# defaults (publisher confirms wait for the disk, one worker thread). Extra arguments after `start`
# go to lavinmq. Use it with LAVINMQ_REF=scripts/lavinmq_ref.sh python3 scripts/bench.py.
set -euo pipefail
port=${LAV_PORT:-5674}
base=${LAV_BASE:-/tmp/lavinmq-ref}
bin=${LAVINMQ_BIN:-lavinmq}

case "${1:-}" in
start)
  shift
  if ! command -v "$bin" >/dev/null; then
    echo "no lavinmq binary: set LAVINMQ_BIN to one (see the comment at the top of $0)" >&2
    exit 1
  fi
  mkdir -p "$base/data"
  nohup "$bin" -D "$base/data" --bind=127.0.0.1 --amqp-port="$port" --http-port=$((port + 10000)) \
    --mqtt-port=-1 --metrics-http-port=-1 --control-unix-path="$base/data/lavinmqctl.sock" "$@" \
    > "$base/lavinmq.log" 2>&1 &
  echo $! > "$base/pid"
  for _ in $(seq 1 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      echo "reference LavinMQ up on 127.0.0.1:$port, pid $(cat "$base/pid")"
      exit 0
    fi
    kill -0 "$(cat "$base/pid")" 2>/dev/null || { tail -5 "$base/lavinmq.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "lavinmq did not listen on $port; see $base/lavinmq.log" >&2
  exit 1 ;;
stop)
  if [ -f "$base/pid" ]; then
    kill -TERM "$(cat "$base/pid")" 2>/dev/null || true
    rm -f "$base/pid"
  fi ;;
status)
  if [ -f "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null; then
    echo "running, pid $(cat "$base/pid")"
  else
    echo "not running"
  fi ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
