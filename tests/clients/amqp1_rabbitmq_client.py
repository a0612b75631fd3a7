"""RabbitMQ's own AMQP 1.0 client for Python (rabbitmq-amqp-python-client, issue 42), as its
getting-started example uses it: it checks the server announces RabbitMQ 4, declares a quorum
queue, an exchange and a binding through the `/management` node, publishes through an exchange
address (each message `accepted`), consumes and accepts, hands a message back with an
`x-opt-delivery-time` (the `modified` outcome with annotations: redelivered then, never earlier,
as RabbitMQ 4.3 holds it, carrying the other annotation it was handed back with), reads the queue's info (this node as its leader and replica), purges, unbinds and deletes. A request the broker refuses gets its status (404 for a queue that does not exist).
Then an RPC over direct reply-to (RabbitMQ 4.2): a `DirectReplyTo` consumer is given its reply
address, a responder on another connection sends replies there (`accepted`), the requester gets
them, and the address answers `GET /queues/...` while the requester is there and 404 after."""
import sys
import time

from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    ConsumerOptions,
    ConsumerSettleStrategy,
    Converter,
    Environment,
    Event,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    Message,
    OutcomeState,
    QuorumQueueSpecification,
    ValidationCodeException,
)

port = int(sys.argv[1])
MESSAGES = 20
QUEUE, EXCHANGE, KEY = "amqp1-client-q", "amqp1-client-x", "amqp1.key"


class Done(BaseException):
    """Raised from the handler to end `consumer.run()`, as the client's own tests do."""


class Handler(AMQPMessagingHandler):
    """Collects `expected` bodies, accepting each unless they come settled (direct replies)."""

    def __init__(self, expected=MESSAGES, accept=True):
        super().__init__()
        self.bodies, self.expected, self.accept = [], expected, accept

    def on_amqp_message(self, event: Event):
        self.bodies.append(Converter.bytes_to_string(event.message.body))
        if self.accept:
            self.delivery_context.accept(event)
        if len(self.bodies) == self.expected:
            raise Done()


environment = Environment(uri=f"amqp://guest:guest@127.0.0.1:{port}/")
connection = environment.connection()
connection.dial()
management = connection.management()
management.declare_exchange(ExchangeSpecification(name=EXCHANGE))
management.declare_queue(QuorumQueueSpecification(name=QUEUE))
binding = management.bind(ExchangeToQueueBindingSpecification(
    source_exchange=EXCHANGE, destination_queue=QUEUE, binding_key=KEY))
management.purge_queue(QUEUE)

publisher = connection.publisher(AddressHelper.exchange_address(EXCHANGE, KEY))
for i in range(MESSAGES):
    status = publisher.publish(Message(body=Converter.string_to_bytes(f"message {i}")))
    assert status.remote_state == OutcomeState.ACCEPTED, status.remote_state
publisher.close()

info = management.queue_info(QUEUE)
assert info.message_count == MESSAGES, info.message_count
assert info.queue_type.value == "quorum", info.queue_type
# The node serving the queue is its leader and the replica to consume from (queue locality).
members = list(getattr(info.members, "elements", info.members))  # proton's Array, as RabbitMQ's
assert info.leader.startswith("hourglass@") and members == [info.leader], (info.leader, members)

handler = Handler()
consumer = connection.consumer(AddressHelper.queue_address(QUEUE), message_handler=handler)
try:
    consumer.run()
except Done:
    pass
consumer.close()
assert handler.bodies == [f"message {i}" for i in range(MESSAGES)], handler.bodies

class Retry(AMQPMessagingHandler):
    """Hands the first delivery back with an `x-opt-delivery-time` 1.5 s ahead (the `modified`
    outcome with annotations; RabbitMQ 4.3 holds the message until then) and a reason, accepts
    the second, which carries the reason (RabbitMQ 4.0 merges a modified outcome's annotations)."""

    def __init__(self):
        super().__init__()
        self.due_ms = None
        self.again_ms = None
        self.reason = None

    def on_amqp_message(self, event: Event):
        now_ms = int(time.time() * 1000)
        if self.due_ms is None:
            self.due_ms = now_ms + 1500
            annotations = {"x-opt-delivery-time": self.due_ms, "x-opt-retry-reason": "busy"}
            self.delivery_context.requeue_with_annotations(event, annotations)
            return
        self.again_ms = now_ms
        self.reason = (event.message.annotations or {}).get("x-opt-retry-reason")
        self.delivery_context.accept(event)
        raise Done()


publisher = connection.publisher(AddressHelper.queue_address(QUEUE))
assert publisher.publish(Message(body=Converter.string_to_bytes("retry-me"))).remote_state == OutcomeState.ACCEPTED
publisher.close()
retry = Retry()
consumer = connection.consumer(AddressHelper.queue_address(QUEUE), message_handler=retry)
try:
    consumer.run()
except Done:
    pass
consumer.close()
assert retry.again_ms >= retry.due_ms, f"redelivered {retry.due_ms - retry.again_ms} ms early"
assert retry.again_ms - retry.due_ms < 1000, f"redelivered {retry.again_ms - retry.due_ms} ms late"
assert retry.reason == "busy", f"the annotation handed back with it: {retry.reason!r}"

management = connection.management()
assert management.purge_queue(QUEUE) == 0
management.unbind(binding)
management.delete_queue(QUEUE)
management.delete_exchange(EXCHANGE)
try:
    management.queue_info(QUEUE)
    raise AssertionError("the queue was deleted")
except ValidationCodeException as refused:
    assert "404" in str(refused), refused

requester = environment.connection()
requester.dial()
handler = Handler(expected=3, accept=False)
replies = requester.consumer(
    message_handler=handler,
    credit=10,
    consumer_options=ConsumerOptions(settle_strategy=ConsumerSettleStrategy.DirectReplyTo),
)
reply_address = replies.address
assert reply_address.startswith("/queues/amq.rabbitmq.reply-to."), reply_address
reply_queue = reply_address[len("/queues/"):]
# Asked over the requester's own connection, which also sends its link credit before any reply
# comes (a reply past the requester's credit is dropped, as RabbitMQ drops it).
asked = requester.management()
assert asked.queue_info(reply_queue).consumer_count == 1, "the requester is there"
asked.close()
responder = connection.publisher(reply_address)
for i in range(3):
    sent = responder.publish(Message(body=Converter.string_to_bytes(f"reply {i}")))
    assert sent.remote_state == OutcomeState.ACCEPTED, sent.remote_state
responder.close()
try:
    replies.run()
except Done:
    pass
assert handler.bodies == ["reply 0", "reply 1", "reply 2"], handler.bodies
replies.close()
requester.close()
try:
    management.queue_info(reply_queue)
    raise AssertionError("the requester is gone")
except ValidationCodeException as refused:
    assert "404" in str(refused), refused

management.close()
environment.close()
print("amqp1_rabbitmq_client ok")
