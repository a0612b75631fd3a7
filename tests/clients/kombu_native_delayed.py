"""kombu's native delayed delivery (what Celery 5.5+ uses for countdown/eta on quorum queues),
declared by kombu itself: 28 levels of TTL + dead-letter quorum queues with reject-publish and
at-least-once dead-lettering. A message with a 3 s countdown must reach its queue on time."""
import sys
import time

from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange,
    calculate_routing_key,
    declare_native_delayed_delivery_exchanges_and_queues,
    level_name,
)

port = int(sys.argv[1])
COUNTDOWN = 3

with Connection(f"amqp://guest:guest@127.0.0.1:{port}//") as conn:
    declare_native_delayed_delivery_exchanges_and_queues(conn, "quorum")
    # Native delayed delivery needs a topic exchange (kombu skips direct ones with a warning).
    tasks_exchange = Exchange("kombu-tasks", type="topic")
    tasks = Queue("kombu-tasks", tasks_exchange, routing_key="kombu-tasks",
                  queue_arguments={"x-queue-type": "quorum"})
    tasks.bind(conn.channel()).declare()
    bind_queue_to_native_delayed_delivery_exchange(conn, tasks)

    producer = conn.Producer()
    sent = time.monotonic()
    producer.publish({"task": "add", "args": [2, 2]}, exchange=level_name(27),
                     routing_key=calculate_routing_key(COUNTDOWN, "kombu-tasks"), serializer="json")

    received = []
    with conn.Consumer(tasks, callbacks=[lambda body, msg: (received.append((body, time.monotonic() - sent)), msg.ack())]):
        deadline = time.monotonic() + COUNTDOWN + 5
        while not received and time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                pass
            except OSError:
                pass
    assert received, "the countdown task never arrived"
    body, elapsed = received[0]
    assert body == {"task": "add", "args": [2, 2]}, body
    assert COUNTDOWN - 0.01 <= elapsed <= COUNTDOWN + 0.25, f"arrived after {elapsed:.3f} s, due at {COUNTDOWN} s"
    print(f"kombu native delayed delivery ok: {COUNTDOWN} s countdown arrived after {elapsed:.3f} s")
