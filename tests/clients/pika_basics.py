"""pika (BlockingConnection), as a new user would write it: declare, publish with confirms,
consume with acks, basic.get, mandatory return, a channel error that leaves the connection open."""
import sys

import pika

port = int(sys.argv[1])
params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=10,
                                   credentials=pika.PlainCredentials("guest", "guest"))
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue="pika-work", durable=False)
for i in range(50):
    ch.basic_publish(exchange="", routing_key="pika-work", body=f"msg-{i}".encode())

# basic.get sees the count of messages left
method, props, body = ch.basic_get(queue="pika-work", auto_ack=False)
assert body == b"msg-0", body
assert method.message_count == 49, method.message_count
ch.basic_ack(method.delivery_tag)

# consume the rest with prefetch and acks
ch.basic_qos(prefetch_count=5)
received = []
for method, props, body in ch.consume("pika-work", inactivity_timeout=5):
    if method is None:
        break
    received.append(body)
    ch.basic_ack(method.delivery_tag)
    if len(received) == 49:
        break
ch.cancel()
assert received == [f"msg-{i}".encode() for i in range(1, 50)], received[:3]

# mandatory + unroutable -> UnroutableError with confirms on
try:
    ch.basic_publish(exchange="amq.direct", routing_key="nobody", body=b"x", mandatory=True)
    raise AssertionError("expected UnroutableError")
except pika.exceptions.UnroutableError as e:
    assert e.messages[0].method.reply_code == 312

# a channel error closes the channel, not the connection
bad = conn.channel()
try:
    bad.queue_declare(queue="does-not-exist", passive=True)
    raise AssertionError("expected 404")
except pika.exceptions.ChannelClosedByBroker as e:
    assert e.reply_code == 404, e
    assert "NOT_FOUND - no queue 'does-not-exist' in vhost '/'" == e.reply_text, e.reply_text
assert conn.is_open

# RabbitMQ 4.0's x-local-random exchange: each message to one bound queue; a keyed binding is
# refused with RabbitMQ's 406
lr = conn.channel()
lr.exchange_declare(exchange="pika-rpc", exchange_type="x-local-random", auto_delete=True)
workers = [lr.queue_declare(queue="", exclusive=True).method.queue for _ in range(3)]
for worker in workers:
    lr.queue_bind(queue=worker, exchange="pika-rpc", routing_key="")  # pika binds with the queue name by default
for i in range(60):
    lr.basic_publish(exchange="pika-rpc", routing_key="ignored", body=f"call-{i}".encode())
counts = [lr.queue_declare(queue=w, passive=True).method.message_count for w in workers]
assert sum(counts) == 60 and all(c > 0 for c in counts), counts
try:
    lr.queue_bind(queue=workers[0], exchange="pika-rpc", routing_key="k")
    raise AssertionError("expected 406")
except pika.exceptions.ChannelClosedByBroker as e:
    assert (e.reply_code, e.reply_text) == (406, "PRECONDITION_FAILED - Non empty binding 'k' key not permitted"), e

conn.channel().queue_delete("pika-work")
conn.close()
print("pika basics ok")
