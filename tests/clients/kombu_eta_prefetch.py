"""Celery's countdown/ETA pattern through kombu, as Celery's task consumer does it: the worker
holds deliveries whose ETA is in the future (unacked) and raises its prefetch by one for each
(`QoS.increment_eventually`), so that other tasks keep coming. kombu chooses basic.qos's global
flag from the server's product and version (`qos_semantics_matches_spec`): for RabbitMQ 3.3 to
3.x it sends global=true, a channel-wide limit that a later basic.qos changes at once. On a broker
whose raise does not reach the consumer, a few far-off ETA tasks starve the worker."""
import socket
import sys
import time

from kombu import Connection, Consumer, Queue
from kombu.common import QoS

port = int(sys.argv[1])
PREFETCH = 2
STEP_S = 5


def drain_until(conn, done, seconds):
    """Handles deliveries until done() or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        try:
            conn.drain_events(timeout=max(0.01, deadline - time.monotonic()))
        except socket.timeout:
            pass


with Connection(f"amqp://guest:guest@127.0.0.1:{port}//") as conn:
    conn.connect()
    apply_global = not conn.transport.qos_semantics_matches_spec(conn.connection)
    assert apply_global, "kombu should see RabbitMQ's qos semantics (global=true for a channel-wide limit)"
    channel = conn.channel()
    queue = Queue("kombu-eta", channel=channel, auto_delete=True)
    queue.declare()
    producer = conn.Producer(channel)
    for n in range(PREFETCH + 1):
        producer.publish({"task": "later", "n": n}, routing_key="kombu-eta", serializer="json")

    held = []
    consumer = Consumer(channel, [queue], callbacks=[lambda body, message: held.append(message)])
    qos = QoS(lambda prefetch_count: channel.basic_qos(0, prefetch_count, apply_global), PREFETCH)
    qos.update()
    consumer.consume()
    drain_until(conn, lambda: len(held) == PREFETCH, STEP_S)
    assert len(held) == PREFETCH, f"the first {PREFETCH} tasks arrive, got {len(held)}"
    drain_until(conn, lambda: len(held) > PREFETCH, 0.5)
    assert len(held) == PREFETCH, "the prefetch window holds the rest back"

    # Both held tasks have a future ETA: Celery raises the prefetch by one for each.
    qos.increment_eventually()
    qos.update()
    drain_until(conn, lambda: len(held) > PREFETCH, STEP_S)
    assert len(held) == PREFETCH + 1, "after the raise the next task arrives"
    for message in held:
        message.ack()
print(f"kombu ETA prefetch: {PREFETCH} held, raised to {qos.value}, the next task arrived")
