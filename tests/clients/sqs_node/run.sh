#!/usr/bin/env bash
# The AWS SDK for JavaScript v3 (@aws-sdk/client-sqs, pinned in package-lock.json) against the
# release binary's SQS endpoint on loopback (docs/sqs.md). Stops only the broker it started.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm) >/dev/null
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
. tests/clients/start_broker.sh
SQS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
start_broker --sqs-port "$SQS_PORT"
if SQS_PORT="$SQS_PORT" timeout 120 node "$here/sqs_sdk_v3.mjs"; then
  echo "ok   @aws-sdk/client-sqs"
else
  echo "FAIL @aws-sdk/client-sqs"
  cat "$data/broker.log"
  exit 1
fi
