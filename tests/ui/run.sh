#!/usr/bin/env bash
# Browser tests of the management UI: installs Debian's chromium if missing and the pinned
# playwright-core (npm ci), builds the binary, and runs tests/ui/*.test.mjs with node's test
# runner. UI_SCREENSHOTS=1 also refreshes docs/ui-*.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x /usr/bin/chromium ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null
fi
command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm) >/dev/null
(cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
# The in-flight test holds a delivery with a pika consumer (hold_deliveries.py), pinned as in
# tests/clients/run.sh.
python3 -c 'import pika' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check 'pika==1.3.2'
profile=${UI_PROFILE:-release}
if [ "$profile" = release ]; then
  cargo build --release --locked --quiet --bin hourglass
  export HOURGLASS_BIN=target/release/hourglass
else
  cargo build --locked --quiet --bin hourglass
  export HOURGLASS_BIN=target/debug/hourglass
fi
timeout 600 node --test --test-concurrency=1 tests/ui/
