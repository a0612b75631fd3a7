# Sourced by scripts/bench_tls.sh and scripts/bench_tls_rabbitmq.sh: the same hourglass-perf
# flows over amqp:// and amqps://, alternating, ROUNDS times, JSON result lines appended to OUT.
# usage: run_tls_flows LABEL_PREFIX PID PLAIN_URL TLS_URL ROUNDS SECONDS OUT
run_tls_flows() {
  local prefix=$1 pid=$2 plain_url=$3 tls_url=$4 rounds=$5 seconds=$6 out=$7 round proto url
  : > "$out"
  for round in $(seq 1 "$rounds"); do
    for proto in amqp amqps; do
      if [ "$proto" = amqp ]; then url=$plain_url; else url=$tls_url; fi
      echo "round $round: $proto" >&2
      for flow in "throughput --size 16 --auto-ack --duration-s $seconds" \
                  "throughput --size 1024 --prefetch 1000 --ack-every 10 --duration-s $seconds" \
                  "idle-connections --connections 500 --hold-s 0.5"; do
        # shellcheck disable=SC2086
        target/release/hourglass-perf --url "$url" --broker-pid "$pid" --label "$prefix$proto" $flow \
          2>/dev/null | grep '^{' >> "$out"
      done
    done
  done
  echo "results in $out" >&2
}
