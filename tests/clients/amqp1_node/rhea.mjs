// rhea (AMQP 1.0 for Node) against Hourglass (issue 42): SASL PLAIN, a sending link to
// /queues/:q whose messages are settled `accepted` by the broker, a receiving link with credit
// that gets them back with their application properties, a `released` message redelivered, and
// a link to a queue that does not exist detached with `amqp:not-found`. The queue is declared
// through the `/management` node, as RabbitMQ 4's clients do. Exits non-zero on any mismatch.
import rhea from "rhea";

const port = Number(process.env.AMQP_PORT);
const QUEUE = "rhea-q";
const COUNT = 10;
const deadline = setTimeout(() => fail("no result within 20 s"), 20000);

function fail(why) {
  console.error(`rhea: ${why}`);
  process.exit(1);
}

const container = rhea.create_container();
const connection = container.connect({ host: "127.0.0.1", port, username: "guest", password: "guest" });

// /management: PUT /queues/rhea-q, then start the test once it answers 200.
const requests = connection.open_sender({ target: { address: "/management" } });
const replies = connection.open_receiver({ source: { address: "/management" } });
replies.on("message", (context) => {
  const status = context.message.subject;
  if (status !== "200") fail(`PUT /queues/${QUEUE} answered ${status}`);
  publishAndConsume();
});
requests.once("sendable", () => {
  requests.send({
    message_id: "declare-1",
    to: `/queues/${QUEUE}`,
    subject: "PUT",
    reply_to: "$me",
    body: { durable: true, exclusive: false, auto_delete: false, arguments: {} },
  });
});

function publishAndConsume() {
  let accepted = 0;
  const sender = connection.open_sender({ target: { address: `/queues/${QUEUE}` } });
  sender.on("accepted", () => {
    accepted += 1;
    if (accepted === COUNT) consume();
  });
  sender.on("rejected", (context) => fail(`a message was rejected: ${JSON.stringify(context.delivery.remote_state)}`));
  sender.once("sendable", () => {
    for (let i = 0; i < COUNT; i += 1) {
      sender.send({ body: `m${i}`, application_properties: { n: i } });
    }
  });
}

function consume() {
  const seen = [];
  let released = false;
  const receiver = connection.open_receiver({ source: { address: `/queues/${QUEUE}` }, autoaccept: false, credit_window: 5 });
  receiver.on("message", (context) => {
    const { body, application_properties: props } = context.message;
    const text = typeof body === "string" ? body : Buffer.from(body.content ?? body).toString();
    if (text === "m3" && !released) {
      released = true;
      context.delivery.release();
      return;
    }
    if (props?.n === undefined) fail(`message ${text} lost its application properties`);
    context.delivery.accept();
    seen.push(text);
    if (seen.length === COUNT) missingQueue(seen);
  });
}

function missingQueue(seen) {
  const expected = Array.from({ length: COUNT }, (_, i) => `m${i}`).sort();
  if (JSON.stringify([...seen].sort()) !== JSON.stringify(expected)) fail(`received ${seen}`);
  const nowhere = connection.open_receiver({ source: { address: "/queues/rhea-nowhere" } });
  nowhere.on("receiver_error", (context) => {
    const condition = context.receiver.error?.condition;
    if (condition !== "amqp:not-found") fail(`a missing queue detached with ${condition}`);
    clearTimeout(deadline);
    console.log(`rhea ok: ${COUNT} accepted, received with one release, not-found detach`);
    connection.close();
  });
}

connection.on("connection_error", (context) => fail(`connection error ${JSON.stringify(context.connection.error)}`));
connection.on("disconnected", (context) => {
  if (context.error) fail(`disconnected: ${context.error}`);
});
