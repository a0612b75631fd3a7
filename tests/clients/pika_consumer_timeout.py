"""pika with RabbitMQ 4.3's consumer timeout (issue 39): a quorum queue declared with
`x-consumer-timeout` 1000 and a consumer that never acks. After the timeout pika's on_cancel
callback runs (pika announces consumer_cancel_notify), the channel stays open, and the message is
ready again, redelivered. A basic.get delivery that times out closes its channel with 406."""
import sys
import time

import pika

port = int(sys.argv[1])
queue = "pika-consumer-timeout"
conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = conn.channel()
ch.queue_delete(queue)
ch.queue_declare(queue=queue, durable=True, arguments={"x-queue-type": "quorum", "x-consumer-timeout": 1000})
ch.basic_publish(exchange="", routing_key=queue, body=b"job", properties=pika.BasicProperties(delivery_mode=2))

got, cancelled = [], []
ch.add_on_cancel_callback(lambda frame: cancelled.append((time.monotonic(), frame.method.consumer_tag)))
ch.basic_consume(queue, lambda c, m, p, b: got.append((time.monotonic(), m.delivery_tag)), consumer_tag="worker")
deadline = time.monotonic() + 5
while not cancelled and time.monotonic() < deadline:
    conn.process_data_events(time_limit=0.05)
assert got, "the message was delivered"
assert cancelled, "basic.cancel came after the timeout"
after = cancelled[0][0] - got[0][0]
assert cancelled[0][1] == "worker", cancelled
assert 0.95 <= after < 1.6, f"cancelled {after:.3f} s after the delivery"
assert ch.is_open, "the channel stays open"
ch.basic_ack(got[0][1])  # a late ack is ignored, not an error
method, _, body = ch.basic_get(queue, auto_ack=False)
assert method is not None and body == b"job" and method.redelivered, method

# The get's delivery is not acked either: its channel is closed with RabbitMQ's 406.
closed = None
try:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
        if not ch.is_open:
            break
except pika.exceptions.ChannelClosedByBroker as e:
    closed = e
if closed is None and not ch.is_open:
    closed = "closed"
assert closed is not None, "the channel of a timed-out get is closed"
if isinstance(closed, pika.exceptions.ChannelClosedByBroker):
    assert closed.reply_code == 406, closed
    assert "delivery acknowledgement on channel 1 timed out" in closed.reply_text, closed
ch = conn.channel()
method, _, body = ch.basic_get(queue, auto_ack=True)
assert method is not None and body == b"job", "still there after the channel closed"
ch.queue_delete(queue)
conn.close()
print(f"pika consumer timeout ok: cancelled after {after:.3f} s")
