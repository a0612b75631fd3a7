"""python-qpid-proton (AMQP 1.0) on the AMQP port, beside pika (0-9-1), as RabbitMQ 4 serves it
(issue 42): SASL PLAIN; publishing to `/queues/:q` and `/exchanges/:x/:rk` settled `accepted`
once the broker confirms; consuming from `/queues/:q` with credit; the outcomes accepted,
rejected (dead-lettered), released and modified (requeued, redelivered); an unroutable message
settled `released`; a delivery past its consumer timeout released to the client and redelivered
on the same link (RabbitMQ 4.3); a missing queue
detaches the link with `amqp:not-found`, a deleted one with `amqp:resource-deleted`; an
`x-opt-delivery-time` annotation holds a message until it is due, never earlier; messages cross
between 1.0 and 0-9-1 with their body, properties and headers, and through SQS (application
properties as message attributes); the HTTP API lists the connection as `AMQP 1-0`."""
import base64
import json
import os
import sys
import time
import urllib.request

import pika
from proton import Disposition, Message, symbol, timestamp
from proton.utils import BlockingConnection, LinkDetached, SendException

port = int(sys.argv[1])
url = f"amqp://guest:guest@127.0.0.1:{port}"

p = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = p.channel()
ch.queue_declare("amqp1-dlq", durable=True)
ch.queue_declare("amqp1-q", durable=True,
                 arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "amqp1-dlq"})
ch.queue_declare("amqp1-bound", durable=True)
ch.queue_bind("amqp1-bound", "amq.direct", routing_key="to-bound")
ch.queue_declare("amqp1-timed", durable=True)
for q in ("amqp1-dlq", "amqp1-q", "amqp1-bound", "amqp1-timed"):
    ch.queue_purge(q)

conn = BlockingConnection(url, allowed_mechs="PLAIN", timeout=10)

# 1.0 → 0-9-1: properties and application properties arrive as 0-9-1 properties and headers.
sender = conn.create_sender("/queues/amqp1-q")
sender.send(Message(body=b"from-1.0", id="m-1", correlation_id="c-1", content_type="application/octet-stream",
                    properties={"tenant": "acme", "n": 7}))
method, props, body = ch.basic_get("amqp1-q", auto_ack=True)
assert body == b"from-1.0", body
assert props.message_id == "m-1" and props.correlation_id == "c-1", props
assert props.content_type == "application/octet-stream", props
assert props.delivery_mode == 2, "no header section: durable, as RabbitMQ 4"
assert props.headers == {"tenant": "acme", "n": 7}, props.headers

# An exchange address with a routing key.
conn.create_sender("/exchanges/amq.direct/to-bound").send(Message(body=b"routed"))
method, _, body = ch.basic_get("amqp1-bound", auto_ack=True)
assert body == b"routed", body

# A message no queue takes is settled `released`, as RabbitMQ 4 settles it (not `accepted`).
try:
    conn.create_sender("/exchanges/amq.direct/to-nowhere").send(Message(body=b"unroutable"))
    raise AssertionError("an unroutable message must not be accepted")
except SendException as refused:
    assert refused.state == Disposition.RELEASED, refused.state

# 0-9-1 → 1.0: the body as a data section, the properties, the headers as application properties,
# x-exchange / x-routing-key annotations.
ch.basic_publish("", "amqp1-q", b"from-0-9-1", pika.BasicProperties(
    delivery_mode=2, message_id="p-1", content_type="text/plain", headers={"colour": "blue"}, reply_to="replies"))
receiver = conn.create_receiver("/queues/amqp1-q", credit=5)
msg = receiver.receive(timeout=5)
assert bytes(msg.body) == b"from-0-9-1", msg.body
assert msg.id == "p-1" and msg.content_type == "text/plain", msg
assert msg.properties == {"colour": "blue"}, msg.properties
assert msg.reply_to == "/queues/replies", msg.reply_to
assert msg.annotations[symbol("x-routing-key")] == "amqp1-q", msg.annotations
assert msg.durable
receiver.accept()

# Outcomes: rejected is dead-lettered; released and modified come back redelivered.
for body in (b"reject-me", b"release-me", b"modify-me"):
    sender.send(Message(body=body))
got = receiver.receive(timeout=5)
assert bytes(got.body) == b"reject-me"
receiver.reject()
got = receiver.receive(timeout=5)
assert bytes(got.body) == b"release-me"
receiver.release(delivered=False)
got = receiver.receive(timeout=5)
assert bytes(got.body) in (b"modify-me", b"release-me"), got.body
first_again = bytes(got.body)
receiver.release(delivered=True)
seen = set()
for _ in range(2):
    got = receiver.receive(timeout=5)
    seen.add(bytes(got.body))
    assert got.first_acquirer is False or got.delivery_count >= 0
    receiver.accept()
assert seen == {b"release-me", b"modify-me"}, seen
receiver.close()
method, _, body = ch.basic_get("amqp1-dlq", auto_ack=True)
assert body == b"reject-me", "a rejected message is dead-lettered"

# A queue that does not exist: the link is detached with amqp:not-found, the connection goes on.
try:
    conn.create_receiver("/queues/amqp1-missing", credit=1).receive(timeout=3)
    raise AssertionError("a receiver on a missing queue must be refused")
except LinkDetached as detached:
    assert "not-found" in str(detached), detached

# A queue deleted under a consumer detaches its link with amqp:resource-deleted.
ch.queue_declare("amqp1-doomed")
doomed = conn.create_receiver("/queues/amqp1-doomed", credit=1)
ch.queue_delete("amqp1-doomed")
try:
    doomed.receive(timeout=5)
    raise AssertionError("a consumer of a deleted queue must be detached")
except LinkDetached as detached:
    assert "resource-deleted" in str(detached), detached

# A delivery not settled within the queue's x-consumer-timeout is released to the client (RabbitMQ
# 4.3 for AMQP 1.0) and comes back on the same link, which stays attached.
ch.queue_declare("amqp1-slow", durable=True, arguments={"x-consumer-timeout": 1000})
ch.queue_purge("amqp1-slow")
conn.create_sender("/queues/amqp1-slow").send(Message(body=b"slow-job"))
slow = conn.create_receiver("/queues/amqp1-slow", credit=2)
first = slow.receive(timeout=5)
assert bytes(first.body) == b"slow-job"
started = time.monotonic()
again = slow.receive(timeout=10)  # not settled: the timeout hands it out again
assert bytes(again.body) == b"slow-job", again.body
assert time.monotonic() - started >= 0.9, "not before the timeout"
assert again.delivery_count >= 1 or again.first_acquirer is False, (again.delivery_count, again.first_acquirer)
slow.release(delivered=False)  # settles the timed-out delivery back, as the spec asks
slow.accept()  # the redelivery
slow.close()
assert ch.basic_get("amqp1-slow", auto_ack=True)[0] is None, "settled once, gone"

# x-opt-delivery-time (RabbitMQ 4.4): held until due, never early.
due_ms = int(time.time() * 1000) + 1200
timed = conn.create_sender("/queues/amqp1-timed")
timed.send(Message(body=b"later", annotations={symbol("x-opt-delivery-time"): timestamp(due_ms)}))
assert ch.basic_get("amqp1-timed", auto_ack=True)[0] is None, "not ready before it is due"
late = conn.create_receiver("/queues/amqp1-timed", credit=1)
msg = late.receive(timeout=10)
arrived_ms = time.time() * 1000
late.accept()
assert bytes(msg.body) == b"later"
assert arrived_ms >= due_ms, f"{due_ms - arrived_ms:.0f} ms early"

# 1.0 → SQS → 1.0 (with the SQS endpoint, as tests/clients/run.sh starts it): application
# properties are SQS message attributes and back.
sqs_port = os.environ.get("SQS_PORT")
if sqs_port:
    import boto3

    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{sqs_port}", region_name="us-east-1",
                       aws_access_key_id="guest", aws_secret_access_key="guest")
    url = sqs.create_queue(QueueName="amqp1-sqs")["QueueUrl"]
    conn.create_sender("/queues/amqp1-sqs").send(
        Message(body=b"from-1.0", id="x-1", properties={"tenant": "acme"}))
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=5)["Messages"][0]
    assert got["Body"] == "from-1.0", got
    assert got["MessageAttributes"]["tenant"]["StringValue"] == "acme", got
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
    sqs.send_message(QueueUrl=url, MessageBody="from-sqs",
                     MessageAttributes={"colour": {"DataType": "String", "StringValue": "blue"}})
    back = conn.create_receiver("/queues/amqp1-sqs", credit=1)
    msg = back.receive(timeout=5)
    back.accept()
    assert bytes(msg.body) == b"from-sqs", msg.body
    assert msg.properties.get("colour") == "blue", msg.properties

# The HTTP API lists the 1.0 connection with its protocol.
http_port = os.environ.get("HTTP_PORT")
if http_port:
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/connections",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    deadline = time.monotonic() + 10
    protocols = []
    while time.monotonic() < deadline:
        with urllib.request.urlopen(request, timeout=5) as answer:
            protocols = [c["protocol"] for c in json.load(answer)]
        if "AMQP 1-0" in protocols:
            break
        time.sleep(0.2)
    assert "AMQP 1-0" in protocols, protocols

conn.close()
p.close()
print("amqp1_proton ok")
