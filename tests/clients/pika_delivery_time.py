"""pika publishing as RabbitMQ 4.4 users do (issue 39): an `x-opt-delivery-time` header (epoch
milliseconds) on a message through the default exchange holds it in the queue until then; a
basic.get before it is due finds nothing; the message arrives no earlier than its time, with the
header as published. `x-opt-delivery-delay` (ms) holds a message that long."""
import sys
import time

import pika

port = int(sys.argv[1])
conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue="pika-delivery-time", durable=True)
due_ms = int(time.time() * 1000) + 1500
ch.basic_publish(exchange="", routing_key="pika-delivery-time", body=b"at",
                 properties=pika.BasicProperties(delivery_mode=2, headers={"x-opt-delivery-time": due_ms}))
ch.basic_publish(exchange="", routing_key="pika-delivery-time", body=b"after",
                 properties=pika.BasicProperties(headers={"x-opt-delivery-delay": 700}))
sent = time.monotonic()
method, _, _ = ch.basic_get("pika-delivery-time", auto_ack=True)
assert method is None, "nothing is ready before it is due"
got = []
for method, props, body in ch.consume("pika-delivery-time", auto_ack=True, inactivity_timeout=5):
    if method is None:
        break
    got.append((body, time.time() * 1000, time.monotonic() - sent, props.headers))
    if len(got) == 2:
        break
ch.cancel()
assert [g[0] for g in got] == [b"after", b"at"], got
assert got[0][2] >= 0.7 - 0.01 and got[0][2] < 0.7 + 0.5, got[0]
assert got[1][1] >= due_ms - 10, (got[1][1], due_ms)
assert got[1][1] < due_ms + 500, (got[1][1], due_ms)
assert got[1][3] == {"x-opt-delivery-time": due_ms}, got[1][3]
conn.close()
print("pika delivery time ok", [(b.decode(), round(e, 3)) for b, _, e, _ in got])
