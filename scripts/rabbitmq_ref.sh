#!/usr/bin/env bash
# The reference broker the benchmarks compare with: Debian's rabbitmq-server, one private node on
# loopback, installed with apt-get when missing.
#   scripts/rabbitmq_ref.sh start|stop|status
# RMQ_PORT (5673) is its AMQP port, RMQ_BASE (/tmp/rmq-ref) holds its data and logs, and
# RMQ_EXTRA_CONF is appended to its rabbitmq.conf. Its Erlang distribution port is RMQ_PORT ± 20000,
# so several can run side by side. Benchmark scripts use it unless RABBITMQ_REF names another.
set -euo pipefail
port=${RMQ_PORT:-5673}
base=${RMQ_BASE:-/tmp/rmq-ref}
dist=$((port + 20000))
if [ "$dist" -gt 65535 ]; then dist=$((port - 20000)); fi
loopback="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_NODENAME="ref$port@localhost" RABBITMQ_USE_LONGNAME=false
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$port RABBITMQ_DIST_PORT=$dist
export RABBITMQ_MNESIA_BASE="$base/mnesia" RABBITMQ_LOG_BASE="$base/log"
export RABBITMQ_CONFIG_FILE="$base/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins"
export ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="$loopback" RABBITMQ_CTL_ERL_ARGS="$loopback"

start() {
  if ! command -v rabbitmq-server >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server >/dev/null
  fi
  if [ "$(id -u)" = 0 ]; then
    # Root's `su rabbitmq` in the server wrapper caps open files at 1024 through PAM: run the
    # whole script as the rabbitmq user, with the hard limit, instead.
    mkdir -p "$base"
    chown -R rabbitmq:rabbitmq "$base"
    ulimit -n "$(ulimit -Hn)"
    exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups env HOME=/var/lib/rabbitmq \
      RMQ_PORT="$port" RMQ_BASE="$base" RMQ_EXTRA_CONF="${RMQ_EXTRA_CONF:-}" "$0" start
  fi
  mkdir -p "$base/log" "$base/mnesia"
  echo '[].' > "$base/enabled_plugins"
  printf 'listeners.tcp.1 = 127.0.0.1:%s\nloopback_users = none\n%s\n' "$port" "${RMQ_EXTRA_CONF:-}" \
    > "$base/rabbitmq.conf"
  setsid nohup rabbitmq-server > "$base/log/console.out" 2>&1 < /dev/null &
  local waited
  for waited in $(seq 60); do
    if rabbitmqctl -q await_startup >/dev/null 2>&1; then
      echo "reference RabbitMQ up on 127.0.0.1:$port"
      return 0
    fi
    sleep 1
  done
  echo "reference RabbitMQ did not start in ${waited} s; see $base/log" >&2
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) rabbitmqctl -q shutdown || true ;;
  status) rabbitmqctl -q status | head -20 ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
