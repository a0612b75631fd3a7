"""pika using rabbitmq-delayed-message-exchange's interface unchanged: an x-delayed-message
exchange with x-delayed-type, messages carrying an x-delay header; they arrive in due order, no
earlier than their delay, with x-delay negated."""
import sys
import time

import pika

port = int(sys.argv[1])
conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = conn.channel()
ch.exchange_declare(exchange="my-delayed", exchange_type="x-delayed-message",
                    arguments={"x-delayed-type": "direct"})
ch.queue_declare(queue="pika-delayed")
ch.queue_bind(queue="pika-delayed", exchange="my-delayed", routing_key="jobs")
sent = time.monotonic()
for body, delay in [(b"third", 900), (b"first", 300), (b"second", 600)]:
    ch.basic_publish(exchange="my-delayed", routing_key="jobs", body=body,
                     properties=pika.BasicProperties(headers={"x-delay": delay}))
got = []
for method, props, body in ch.consume("pika-delayed", auto_ack=True, inactivity_timeout=5):
    if method is None:
        break
    got.append((body, time.monotonic() - sent, props.headers.get("x-delay")))
    if len(got) == 3:
        break
ch.cancel()
assert [g[0] for g in got] == [b"first", b"second", b"third"], got
for (body, elapsed, header), delay in zip(got, [300, 600, 900]):
    assert elapsed >= delay / 1000 - 0.01, (body, elapsed)
    assert elapsed < delay / 1000 + 0.5, (body, elapsed)
    assert header == -delay, header
conn.close()
print("pika delayed ok", [(b.decode(), round(e, 3)) for b, e, _ in got])
