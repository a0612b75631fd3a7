"""The in-flight test and the screenshots (UI_SCREENSHOTS=1): takes COUNT deliveries from QUEUE
with manual ack and holds them unsettled, so the queue's page shows deliveries in flight. Stops after 60 s at most."""
import sys
import time

import pika

port, queue, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
channel = connection.channel()
channel.basic_qos(prefetch_count=count)
taken = []
channel.basic_consume(queue, lambda ch, method, props, body: taken.append(method.delivery_tag))
deadline = time.monotonic() + 60
while len(taken) < count and time.monotonic() < deadline:
    connection.process_data_events(time_limit=0.1)
print("holding", flush=True)
while time.monotonic() < deadline:
    connection.process_data_events(time_limit=1)
