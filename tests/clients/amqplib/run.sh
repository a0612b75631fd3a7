#!/usr/bin/env bash
# amqplib's own tests of its channel (promise) and callback APIs against the release binary on
# loopback: 63 tests that pass on RabbitMQ 3.10.8. amqplib comes from npm, pinned in
# package-lock.json. Its connect tests are left out: they dial both 127.0.0.1 and [::1], and a test
# broker listens on 127.0.0.1 only (bound to `::`, all 12 pass). Stops only the broker it started.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm) >/dev/null
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
. tests/clients/start_broker.sh
start_broker --loopback-users none
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
