"""pika with RabbitMQ 4.3's delayed retry (issue 39): a queue declared with
`x-delayed-retry-type` `all`, `x-delayed-retry-min` 300 and `x-delayed-retry-max` 500; a message
rejected with requeue is not back at once, but after min × returns ms, capped at the maximum."""
import sys
import time

import pika

port = int(sys.argv[1])
conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = conn.channel()
ch.queue_declare(queue="pika-delayed-retry", durable=True, arguments={
    "x-delayed-retry-type": "all", "x-delayed-retry-min": 300, "x-delayed-retry-max": 500})
ch.basic_publish(exchange="", routing_key="pika-delayed-retry", body=b"job",
                 properties=pika.BasicProperties(delivery_mode=2))
waits = []
method = None
while method is None:
    method, _, _ = ch.basic_get("pika-delayed-retry", auto_ack=False)
tag = method.delivery_tag
for expected in [0.3, 0.5, 0.5]:
    ch.basic_reject(tag, requeue=True)
    rejected = time.monotonic()
    method, _, _ = ch.basic_get("pika-delayed-retry", auto_ack=False)
    assert method is None, "a rejected message is not back at once"
    back = None
    for method, _, _ in ch.consume("pika-delayed-retry", auto_ack=False, inactivity_timeout=3):
        if method is not None:
            back, tag = time.monotonic() - rejected, method.delivery_tag
        break
    ch.cancel()
    assert back is not None, "it came back"
    assert expected - 0.01 <= back < expected + 0.4, (expected, back)
    waits.append(round(back, 3))
ch.basic_ack(tag)
conn.close()
print("pika delayed retry ok", waits)
