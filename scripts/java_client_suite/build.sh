#!/usr/bin/env bash
# Builds the RabbitMQ Java client's own test suite without Maven (Maven Central is not reachable
# here), from Debian's jars. Not run by CI: it needs the client's sources, which the repository
# does not carry.
#
# usage: build.sh SUITE_DIR CODEGEN_DIR
#   SUITE_DIR    a checkout of rabbitmq-java-client at v5.21.0 (it is patched in place, see below)
#   CODEGEN_DIR  a checkout of rabbitmq-codegen (amqp-rabbitmq-0.9.1.json, amqp_codegen.py)
#
# The patches made to the working copy (never to be committed anywhere):
#   - ConnectionFactory's default port reads the `suite.amqp.port` system property, and the tests
#     that open raw sockets on 5672 use it, so the suite can target any port;
#   - JacksonJsonRpcMapper catches IOException (Debian's jackson 2.14 signature);
#   - the suites (FunctionalTestSuite, SslTestSuite) lose the classes left out below.
# Left out (libraries Debian lacks: micrometer, dropwizard metrics, opentelemetry, netcrusher,
# mockito-junit-jupiter): MicrometerMetricsCollector, OpenTelemetryMetricsCollector,
# StandardMetricsCollector, observation/micrometer/*; tests Metrics, MetricsCollectorTest,
# MicrometerMetricsCollectorTest, MicrometerObservationCollectorMetrics,
# OAuth2ClientCredentialsGrantCredentialsProviderTest, NioTlsUnverifiedConnection, ClientTestSuite,
# FrameBuilderTest, DefaultRetryHandlerTest, ConnectionTest, DefaultCredentialsRefreshServiceTest,
# AMQConnectionRefreshCredentialsTest.
set -euo pipefail
SUITE=$(realpath "$1"); CODEGEN=$(realpath "$2")
PKGS="junit5 libmockito-java libassertj-core-java libslf4j-java libbyte-buddy-java libobjenesis-java
  libjackson2-databind-java liblogback-java libgoogle-gson-java libbcpkix-java openjdk-17-jdk-headless"
# shellcheck disable=SC2086
dpkg -s $PKGS >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS >/dev/null; }
cd "$SUITE"
J=/usr/share/java
main_cp="$J/slf4j-api.jar:$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar"
test_cp="out/main:$main_cp"
for jar in junit-jupiter-api junit-jupiter-params junit-platform-commons junit-platform-suite-api \
  junit-platform-engine junit-platform-launcher opentest4j apiguardian-api mockito-core assertj-core \
  byte-buddy objenesis logback-classic logback-core gson bcpkix bcprov bcutil; do
  test_cp="$test_cp:$J/$jar.jar"
done
echo "$test_cp" > tcp.txt

# the generated protocol classes
mkdir -p gen/com/rabbitmq/client/impl
for kind in header:gen/com/rabbitmq/client/AMQP.java body:gen/com/rabbitmq/client/impl/AMQImpl.java; do
  PYTHONPATH="$CODEGEN" python3 codegen.py "${kind%%:*}" "$CODEGEN/amqp-rabbitmq-0.9.1.json" "${kind#*:}"
done

# the patches
cf=src/main/java/com/rabbitmq/client/ConnectionFactory.java
grep -q suite.amqp.port "$cf" || sed -i 's/DEFAULT_AMQP_PORT = AMQP.PROTOCOL.PORT;/DEFAULT_AMQP_PORT = Integer.getInteger("suite.amqp.port", AMQP.PROTOCOL.PORT);/' "$cf"
sed -i 's/catch (JsonProcessingException e) {\(\s*\)$/catch (IOException e) {\1/' src/main/java/com/rabbitmq/tools/jsonrpc/JacksonJsonRpcMapper.java
sed -i 's/AMQP\.PROTOCOL\.PORT/com.rabbitmq.client.ConnectionFactory.DEFAULT_AMQP_PORT/' \
  src/test/java/com/rabbitmq/client/test/server/ChannelLimitNegotiation.java \
  src/test/java/com/rabbitmq/client/test/functional/ConnectionOpen.java \
  src/test/java/com/rabbitmq/client/test/CloseInMainLoop.java
sed -i 's/new Address("127.0.0.1", 5672)/new Address("127.0.0.1", com.rabbitmq.client.ConnectionFactory.DEFAULT_AMQP_PORT)/' \
  src/test/java/com/rabbitmq/client/test/functional/ConnectionRecovery.java
sed -i 's/? 5672 :/? com.rabbitmq.client.ConnectionFactory.DEFAULT_AMQP_PORT :/' src/test/java/com/rabbitmq/tools/Host.java
sed -i '/Metrics\.class,/d' src/test/java/com/rabbitmq/client/test/functional/FunctionalTestSuite.java
sed -i '/NioTlsUnverifiedConnection\.class,/d' src/test/java/com/rabbitmq/client/test/ssl/SslTestSuite.java

find src/main/java gen -name '*.java' \
  | grep -vE 'MicrometerMetricsCollector|OpenTelemetryMetricsCollector|StandardMetricsCollector|observation/micrometer/' > main.txt
find src/test/java -name '*.java' \
  | grep -vE 'OAuth2ClientCredentialsGrantCredentialsProviderTest|test/MetricsCollectorTest|MicrometerMetricsCollectorTest|MicrometerObservationCollectorMetrics|functional/Metrics.java|NioTlsUnverifiedConnection|ClientTestSuite|FrameBuilderTest|DefaultRetryHandlerTest|test/ConnectionTest.java|DefaultCredentialsRefreshServiceTest|AMQConnectionRefreshCredentialsTest' > test.txt
rm -rf out && mkdir -p out/main out/test
javac -nowarn -encoding UTF-8 -d out/main -cp "$main_cp" @main.txt
cp -r src/main/resources/* out/main/
sed -i 's/\${project.version}/5.21.0/' out/main/rabbitmq-amqp-client.properties out/main/version.properties
javac -nowarn -encoding UTF-8 -d out/test -cp "$test_cp" @test.txt
cp -r src/test/resources/* out/test/
echo "built: $(find out/test -name '*.class' | wc -l) test classes in $SUITE/out"
