#!/usr/bin/env bash
# Smoke tests with real third-party clients (pika, kombu, python-qpid-proton over AMQP 1.0, boto3
# and Celery over the SQS endpoint, old boto3 and the AWS CLI over its Query protocol, Java)
# against the built binary, on loopback.
# Installs what it needs; starts the broker on a free port; stops only the process it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }
if ! python3 -c 'import pika, kombu, boto3, celery, pycurl, proton, rabbitmq_amqp_python_client' 2>/dev/null; then
  # pycurl (kombu's SQS transport, for celery_sqs.py) has manylinux wheels; where none fits it is
  # built, against libcurl's and OpenSSL's headers.
  if ! pip_install --only-binary pycurl 'pycurl==7.49.0' 2>/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libcurl4-openssl-dev libssl-dev) >/dev/null
  fi
  # python-qpid-proton (AMQP 1.0: amqp1_proton.py, and under RabbitMQ's own 1.0 client in
  # amqp1_rabbitmq_client.py) builds its C core from the sdist.
  pip_install 'pika==1.3.2' 'kombu==5.7.0' 'boto3==1.43.11' 'botocore==1.43.11' 'celery==5.7.0' 'pycurl==7.49.0' \
    'python-qpid-proton==0.40.0' 'rabbitmq-amqp-python-client==1.0.1'
fi
java_cp=/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar
if [ ! -f /usr/share/java/amqp-client.jar ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q librabbitmq-client-java) >/dev/null
fi
java_out=$(mktemp -d)
javac -d "$java_out" -cp "$java_cp" tests/clients/JavaClientFlows.java
. tests/clients/start_broker.sh
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
SQS_PORT=$(free_port)
HTTP_PORT=$(free_port)
# The key that seals access keys' secrets, outside the data directory (docs/sqs.md).
SECRETS_KEY_FILE=$(mktemp -u /tmp/hourglass-secrets.XXXXXX)
export SQS_PORT HTTP_PORT SECRETS_KEY_FILE
start_broker --sqs-port "$SQS_PORT" --secrets-key-file "$SECRETS_KEY_FILE"
export DATA_DIR="$data"
failed=0
for script in tests/clients/*.py; do
  if timeout 60 python3 "$script" "$port"; then echo "ok   $script"; else echo "FAIL $script"; failed=$((failed+1)); fi
done
# SQS code of the Query protocol's time: botocore 1.31.80 and the AWS CLI v1 of that release, in a
# venv of their own made from tests/clients/sqs_query/requirements.txt (remade when it changes).
query_venv="$(pwd)/${CARGO_TARGET_DIR:-target}/sqs-query-venv"
query_lock=tests/clients/sqs_query/requirements.txt
if ! cmp -s "$query_lock" "$query_venv/requirements.txt"; then
  rm -rf "$query_venv"
  python3 -m venv "$query_venv"
  "$query_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$query_lock"
  cp "$query_lock" "$query_venv/requirements.txt"
fi
if timeout 90 "$query_venv/bin/python" tests/clients/sqs_query/sqs_query.py "$port"; then echo "ok   sqs_query/sqs_query.py"; else echo "FAIL sqs_query/sqs_query.py"; failed=$((failed+1)); fi
if timeout 60 java -cp "$java_out:$java_cp" JavaClientFlows "$port"; then echo "ok   JavaClientFlows"; else echo "FAIL JavaClientFlows"; failed=$((failed+1)); fi
rm -rf "$java_out"
rm -f "$SECRETS_KEY_FILE"
total=$(( $(ls tests/clients/*.py | wc -l) + 2 ))
echo "$((total-failed)) passed, $failed failed"
[ "$failed" -eq 0 ] || { cat "$data/broker.log"; exit 1; }
