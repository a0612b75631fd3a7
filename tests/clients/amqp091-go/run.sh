#!/usr/bin/env bash
# amqp091-go's own integration tests (build tag `integration`, broker at AMQP_URL) against the
# release binary on loopback. Everything comes from Debian: golang-go, the client's source with its
# tests (golang-github-rabbitmq-amqp091-go-dev, 1.5.0) and goleak, built in GOPATH mode, so no Go
# module proxy is needed. All of them run, the three that act only for `product: RabbitMQ` too (it is
# what Hourglass announces, ADR 0009). Newer versions of the suite (and pika's, aio-pika's):
# docs/client-test-suites.md.
# Stops only the broker it started.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
src=/usr/share/gocode/src/github.com/rabbitmq/amqp091-go
if ! command -v go >/dev/null || [ ! -d "$src" ] || [ ! -d /usr/share/gocode/src/go.uber.org/goleak ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go \
    golang-github-rabbitmq-amqp091-go-dev golang-uber-goleak-dev) >/dev/null
fi
. tests/clients/start_broker.sh
start_broker
export GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$data/go-cache"
tests=$(cd "$src" && go test -tags integration -list '.*' . | grep -E '^(Test|Example)' | paste -sd '|')
# The suite takes ~5 s; a broker that loses an answer makes a test wait, so bound the run.
SUITE_TIMEOUT_SECS=300
if (cd "$src" && AMQP_URL="amqp://guest:guest@127.0.0.1:$port/" \
  timeout "$SUITE_TIMEOUT_SECS" go test -tags integration -count=1 -run "^($tests)\$" . > "$data/go-test.log" 2>&1); then
  echo "ok   amqp091-go integration tests ($(echo "$tests" | tr '|' '\n' | wc -l) tests and examples)"
else
  echo "FAIL amqp091-go integration tests"
  cat "$data/go-test.log" "$data/broker.log"
  exit 1
fi
