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
conn.channel().queue_delete("pika-work")
conn.close()
print("pika basics ok")
