#!/usr/bin/env bash
# rhea (AMQP 1.0 for Node, pinned in package-lock.json) against the release binary's AMQP port on
# loopback (docs/amqp1.md). Stops only the broker it started.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm) >/dev/null
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
. tests/clients/start_broker.sh
start_broker
if AMQP_PORT="$port" timeout 60 node "$here/rhea.mjs"; then
  echo "ok   rhea"
else
  echo "FAIL rhea"
  cat "$data/broker.log"
  exit 1
fi
