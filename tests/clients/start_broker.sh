# Sourced by the client scripts: builds the release binary, starts it on a free loopback port with
# a fresh data directory (extra flags: the arguments), and waits until it accepts connections.
# Sets `port`, `data` (its log is "$data/broker.log") and `pid`; an EXIT trap stops only that
# broker and removes the directory. The HTTP API listens on `HTTP_PORT` when set (else any free
# port). Run from the repository root.
start_broker() {
  cargo build --release --locked --quiet
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  data=$(mktemp -d)
  "${CARGO_TARGET_DIR:-target}/release/hourglass" --bind 127.0.0.1 --amqp-port "$port" --http-port "${HTTP_PORT:-0}" \
    --metrics-port 0 --data-dir "$data" "$@" > "$data/broker.log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"' EXIT
  for _ in $(seq 1 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),timeout=0.2)" 2>/dev/null && break
    sleep 0.1
  done
}
