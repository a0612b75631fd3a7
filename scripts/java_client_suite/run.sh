#!/usr/bin/env bash
# Runs the RabbitMQ Java client's functional and server tests (built by build.sh) against a fresh
# Hourglass on 127.0.0.1, with hg-rabbitmqctl standing in for rabbitmqctl.
#
# usage: run.sh SUITE_DIR HOURGLASS_BIN HOURGLASS_CTL_BIN [junit console launcher args...]
# Env: AMQP_PORT (5692), HTTP_PORT (15692), WORK (/tmp/hg-java-suite), CLASSES (a launcher selection;
# default: the functional and server packages and NoAutoRecoveryWhenTcpWindowIsFullTest).
# Left out of the default run: MemoryAlarms (sets alarms through rabbitmqctl eval, and hangs in its
# tear-down without them) and Bug19219Test (its 100 publishers never stop and fill the broker for
# every later test; run it alone with CLASSES=--select-class=com.rabbitmq.client.test.server.Bug19219Test).
set -euo pipefail
SUITE=$(realpath "$1"); BIN=$(realpath "$2"); CTLBIN=$(realpath "$3"); shift 3
AMQP_PORT=${AMQP_PORT:-5692}; HTTP_PORT=${HTTP_PORT:-15692}; WORK=${WORK:-/tmp/hg-java-suite}
HERE=$(dirname "$(realpath "$0")")
if ss -ltn | grep -qE "127.0.0.1:($AMQP_PORT|$HTTP_PORT|$((HTTP_PORT + 1))) "; then
  echo "port $AMQP_PORT, $HTTP_PORT or $((HTTP_PORT + 1)) is taken" >&2; exit 1
fi
rm -rf "$WORK" && mkdir -p "$WORK"
export HG_DIR=$WORK HG_AMQP=$AMQP_PORT HG_HTTP=$HTTP_PORT HG_BIN=$BIN HG_CTL=$CTLBIN
"$HERE/hg-rabbitmqctl" start_app
trap '"$HERE/hg-rabbitmqctl" stop_app || true' EXIT
cat > "$WORK/logback.xml" <<XML
<configuration><appender name="F" class="ch.qos.logback.core.FileAppender"><file>$WORK/client.log</file>
<encoder><pattern>%d %-5level %logger{20} %msg%n</pattern></encoder></appender>
<logger name="com.rabbitmq.client.AmqpClientTestExtension" level="INFO"/>
<root level="WARN"><appender-ref ref="F"/></root></configuration>
XML
CLASSES=${CLASSES:-"--select-package=com.rabbitmq.client.test.functional --select-package=com.rabbitmq.client.test.server --select-class=com.rabbitmq.client.test.NoAutoRecoveryWhenTcpWindowIsFullTest --exclude-classname=.*Suite.* --exclude-classname=.*MemoryAlarms --exclude-classname=.*Bug19219Test"}
cd "$SUITE"
# shellcheck disable=SC2086
timeout 3000 java -Drabbitmqctl.bin="$HERE/hg-rabbitmqctl" -Dsuite.amqp.port="$AMQP_PORT" \
  -Dlogback.configurationFile="$WORK/logback.xml" \
  -jar /usr/share/java/junit-platform-console-standalone.jar -cp "out/test:$(cat tcp.txt)" \
  --exclude-engine=junit-platform-suite --exclude-engine=junit-vintage \
  --config=junit.jupiter.execution.timeout.default=180s --include-classname='.*' \
  --details=tree --disable-banner --reports-dir="$WORK/reports" $CLASSES "$@"
