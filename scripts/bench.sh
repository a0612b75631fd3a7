#!/usr/bin/env bash
# The standard Hourglass-vs-RabbitMQ matrix; writes docs/benchmarks.md. See scripts/bench.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/bench.py "$@"
