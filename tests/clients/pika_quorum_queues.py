"""pika with quorum queues as RabbitMQ 4.x serves them (issue 39): without `x-max-priority`,
priorities 1, 9, 3, 31, 0 come out 31, 9, 3, 1, 0 (32 strict levels), and the HTTP API counts the
ready messages per priority; without `x-delivery-limit`, a message rejected with requeue is
dead-lettered on its 21st failure (RabbitMQ 4.0's default limit of 20). Needs HTTP_PORT."""
import base64
import json
import os
import sys
import urllib.request

import pika

port = int(sys.argv[1])
API = f"http://127.0.0.1:{os.environ['HTTP_PORT']}"
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def api(path):
    request = urllib.request.Request(API + path, headers={"Authorization": AUTH})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
ch = conn.channel()
ch.confirm_delivery()
quorum = {"x-queue-type": "quorum"}
for name in ["pika-qq-priorities", "pika-qq-poison", "pika-qq-dead"]:
    ch.queue_delete(name)
ch.queue_declare(queue="pika-qq-priorities", durable=True, arguments=quorum)
for priority in [1, 9, 3, 31, 0]:
    ch.basic_publish(exchange="", routing_key="pika-qq-priorities", body=str(priority).encode(),
                     properties=pika.BasicProperties(priority=priority, delivery_mode=2))
stats = api("/api/queues/%2F/pika-qq-priorities")
assert stats["messages_by_priority"] == {"31": 1, "9": 1, "3": 1, "1": 1, "0": 1}, stats["messages_by_priority"]
assert stats["messages_active_priorities"] == 5, stats
order = []
while True:
    method, _, body = ch.basic_get("pika-qq-priorities", auto_ack=True)
    if method is None:
        break
    order.append(int(body))
assert order == [31, 9, 3, 1, 0], order

ch.queue_declare(queue="pika-qq-dead", durable=True)
ch.queue_declare(queue="pika-qq-poison", durable=True, arguments={
    **quorum, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pika-qq-dead"})
ch.basic_publish(exchange="", routing_key="pika-qq-poison", body=b"poison",
                 properties=pika.BasicProperties(delivery_mode=2))
deliveries = 0
while deliveries < 60:
    method, _, _ = ch.basic_get("pika-qq-poison", auto_ack=False)
    if method is None:
        break
    deliveries += 1
    ch.basic_reject(method.delivery_tag, requeue=True)
assert deliveries == 21, f"{deliveries} deliveries: the default limit is 20 failures"
method, properties, body = ch.basic_get("pika-qq-dead", auto_ack=True)
assert method is not None and body == b"poison", "dead-lettered"
assert properties.headers["x-death"][0]["reason"] == "delivery_limit", properties.headers
for name in ["pika-qq-priorities", "pika-qq-poison", "pika-qq-dead"]:
    ch.queue_delete(name)
conn.close()
print("pika quorum queues ok: priorities", order, "dead-lettered after", deliveries, "deliveries")
