//! Direct reply-to (`amq.rabbitmq.reply-to`): RPC replies delivered straight to a no-ack
//! consumer, no queue involved, as RabbitMQ does it.

mod common;

use common::*;
use hourglass_broker::{Answer, Command, Effect, Query};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::reply_code::{NOT_FOUND, PRECONDITION_FAILED};
use hourglass_wire::*;

const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";

/// Starts the reply consumer on `chan`; returns its consumer tag.
fn consume_replies(tb: &mut TestBroker, chan: Chan, tag: &str) -> String {
    let effects = consume(tb, chan, REPLY_QUEUE, tag, true);
    match methods(&effects).as_slice() {
        [Method::BasicConsumeOk(ok)] => ok.consumer_tag.to_string(),
        other => panic!("expected basic.consume-ok, got {other:?}"),
    }
}

/// Publishes a request on `chan` to queue `queue` asking for a direct reply.
fn request(tb: &mut TestBroker, chan: Chan, queue: &str, body: &[u8]) -> Vec<Effect> {
    let properties = BasicProperties {
        reply_to: Some(short(REPLY_QUEUE)),
        correlation_id: Some(short("corr-1")),
        ..Default::default()
    };
    tb.publish_with(chan, "", queue, properties, body, false)
}

/// The reply address a responder sees on the request it got from `queue`.
fn reply_address(tb: &mut TestBroker, responder: Chan, queue: &str) -> String {
    let effects = tb.call(responder, BasicGet { queue: short(queue), no_ack: true });
    let message = effects
        .iter()
        .find_map(|e| match e {
            Effect::Send { method, content: Some(m), .. } if matches!(**method, Method::BasicGetOk(_)) => {
                Some(m.clone())
            }
            _ => None,
        })
        .expect("basic.get-ok");
    message.properties().reply_to().expect("reply_to set").to_string()
}

/// A full RPC round trip: the requester's reply_to is rewritten, the responder on another
/// connection publishes to it, and the reply reaches the requester's consumer unqueued.
#[test]
fn rpc_round_trip_between_connections() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    declare(&mut tb, responder, "rpc");
    let tag = consume_replies(&mut tb, requester, "");
    assert!(tag.starts_with("amq.ctag-"));
    request(&mut tb, requester, "rpc", b"ping");
    let address = reply_address(&mut tb, responder, "rpc");
    let reply = BasicProperties { correlation_id: Some(short("corr-1")), ..Default::default() };
    let effects = tb.publish_with(responder, "", &address, reply, b"pong", false);
    let d = deliveries(&effects);
    assert_eq!(d.len(), 1);
    assert!(matches!(&effects[0], Effect::Deliver { conn, channel, .. }
        if *conn == requester.conn && *channel == requester.channel));
    assert_eq!(d[0].body(), b"pong");
    assert_eq!(d[0].method.consumer_tag, tag.as_str());
    assert_eq!(d[0].method.exchange, "");
    assert_eq!(d[0].method.routing_key, address.as_str());
    assert_eq!(d[0].message.properties().decode().correlation_id, Some(short("corr-1")));
    assert_eq!(tb.broker.queue_stats("/", &address), None, "no queue is involved");
}

/// Consuming from the pseudo-queue with acknowledgements is RabbitMQ's 406.
#[test]
fn reply_consumer_must_be_no_ack() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let error = channel_error(&consume(&mut tb, c, REPLY_QUEUE, "", false)).expect("channel error");
    assert_eq!(error.reply_code, PRECONDITION_FAILED);
    assert_eq!(error.reply_text, "PRECONDITION_FAILED - reply consumer cannot acknowledge");
}

/// A channel has at most one reply consumer.
#[test]
fn second_reply_consumer_on_a_channel_is_refused() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    consume_replies(&mut tb, c, "first");
    let error = channel_error(&consume(&mut tb, c, REPLY_QUEUE, "second", true)).expect("channel error");
    assert_eq!(error.reply_text, "PRECONDITION_FAILED - reply consumer already set");
}

/// reply_to = amq.rabbitmq.reply-to is rewritten to a per-channel address that differs between
/// channels and carries a random part.
#[test]
fn reply_to_is_rewritten_per_channel() {
    let mut tb = TestBroker::new();
    let a = tb.channel();
    let b = tb.channel();
    declare(&mut tb, a, "rpc");
    consume_replies(&mut tb, a, "ra");
    consume_replies(&mut tb, b, "rb");
    request(&mut tb, a, "rpc", b"1");
    request(&mut tb, b, "rpc", b"2");
    let first = reply_address(&mut tb, a, "rpc");
    let second = reply_address(&mut tb, a, "rpc");
    assert!(first.starts_with("amq.rabbitmq.reply-to."), "{first}");
    assert!(first.len() > "amq.rabbitmq.reply-to.".len() + 20, "{first}");
    assert_ne!(first, second);
}

/// Asking for a direct reply on a channel without a reply consumer is RabbitMQ's 406.
#[test]
fn reply_to_without_reply_consumer_is_refused() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "rpc");
    let error = channel_error(&request(&mut tb, c, "rpc", b"x")).expect("channel error");
    assert_eq!(error.reply_text, "PRECONDITION_FAILED - fast reply consumer does not exist");
    assert_eq!(tb.broker.queue_stats("/", "rpc").unwrap().messages_ready, 0);
}

/// Once the requester's channel is closed, a reply to its address is dropped; mandatory returns
/// it 312 NO_ROUTE; in confirm mode it is still acked.
#[test]
fn reply_to_a_gone_consumer_is_dropped_or_returned() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    declare(&mut tb, responder, "rpc");
    consume_replies(&mut tb, requester, "");
    request(&mut tb, requester, "rpc", b"ping");
    let address = reply_address(&mut tb, responder, "rpc");
    tb.call(requester, ChannelClose::default());

    let dropped = tb.publish(responder, "", &address, b"late");
    assert!(dropped.is_empty(), "{dropped:?}");

    tb.call(responder, ConfirmSelect { nowait: false });
    let effects = tb.publish_with(responder, "", &address, BasicProperties::default(), b"late", true);
    match methods(&effects).as_slice() {
        [Method::BasicReturn(r), Method::BasicAck(ack)] => {
            assert_eq!(r.reply_code, 312);
            assert_eq!(r.routing_key, address.as_str());
            assert_eq!(ack.delivery_tag, 1);
        }
        other => panic!("expected basic.return then basic.ack, got {other:?}"),
    }
}

/// Cancelling the reply consumer ends it: cancel-ok, then replies to it are unroutable and the
/// channel may start a new one.
#[test]
fn cancelled_reply_consumer_gets_no_replies() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    declare(&mut tb, responder, "rpc");
    consume_replies(&mut tb, requester, "replies");
    request(&mut tb, requester, "rpc", b"ping");
    let address = reply_address(&mut tb, responder, "rpc");
    let effects = tb.call(requester, BasicCancel { consumer_tag: short("replies"), nowait: false });
    assert!(
        matches!(methods(&effects).as_slice(), [Method::BasicCancelOk(ok)] if ok.consumer_tag == "replies")
    );
    let effects = tb.publish_with(responder, "", &address, BasicProperties::default(), b"pong", true);
    assert!(matches!(methods(&effects).as_slice(), [Method::BasicReturn(_)]), "{effects:?}");
    consume_replies(&mut tb, requester, "again");
}

/// In confirm mode a delivered reply is acked to the responder like a routed publish.
#[test]
fn delivered_reply_is_confirmed() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    declare(&mut tb, responder, "rpc");
    consume_replies(&mut tb, requester, "");
    request(&mut tb, requester, "rpc", b"ping");
    let address = reply_address(&mut tb, responder, "rpc");
    tb.call(responder, ConfirmSelect { nowait: false });
    let effects = tb.publish_with(responder, "", &address, BasicProperties::default(), b"pong", true);
    assert_eq!(deliveries(&effects).len(), 1);
    assert!(methods(&effects).iter().any(|m| matches!(m, Method::BasicAck(a) if a.delivery_tag == 1)));
    assert!(!methods(&effects).iter().any(|m| matches!(m, Method::BasicReturn(_))));
}

/// A passive declare of amq.rabbitmq.reply-to succeeds with RabbitMQ's counts (0 messages,
/// 1 consumer), with or without a reply consumer (Spring's RabbitTemplate probes this).
#[test]
fn passive_declare_of_reply_queue_succeeds() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let ok = declare_with(
        &mut tb,
        c,
        QueueDeclare { queue: short(REPLY_QUEUE), passive: true, ..Default::default() },
    );
    assert_eq!((ok.queue.to_string().as_str(), ok.message_count, ok.consumer_count), (REPLY_QUEUE, 0, 1));
}

/// A declare of a live reply address succeeds; of an unknown one is 404.
#[test]
fn declare_of_reply_address_checks_the_consumer() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    declare(&mut tb, responder, "rpc");
    consume_replies(&mut tb, requester, "");
    request(&mut tb, requester, "rpc", b"ping");
    let address = reply_address(&mut tb, responder, "rpc");
    let passive = |name: &str| QueueDeclare { queue: short(name), passive: true, ..Default::default() };
    assert_eq!(declare_with(&mut tb, responder, passive(&address)).consumer_count, 1);
    let forged = format!("{address}x");
    let error = channel_error(&tb.call(responder, passive(&forged))).expect("channel error");
    assert_eq!(error.reply_code, NOT_FOUND);
}

/// An AMQP 1.0 requester learns its reply address by asking (`Query::ReplyAddress`, RabbitMQ
/// 4.2's dynamic source), and a responder can ask whether the address is still there, as
/// RabbitMQ 4.2's `GET /queues/:queue` answers: 200 with one consumer while it is, 404 after.
#[test]
fn a_reply_address_is_told_to_its_channel_and_answers_while_its_consumer_lives() {
    let mut tb = TestBroker::new();
    let requester = tb.channel();
    let responder = tb.channel();
    let ask = |chan: Chan, query: Query| Command::Query { conn: chan.conn, channel: chan.channel, query };
    match &tb.command(ask(requester, Query::ReplyAddress))[..] {
        [Effect::ChannelError { error, .. }] => assert_eq!(error.reply_code, PRECONDITION_FAILED),
        other => panic!("no reply consumer yet: {other:?}"),
    }
    let requester = tb.open_channel(requester.conn, 2);
    consume_replies(&mut tb, requester, "");
    let address = match &tb.command(ask(requester, Query::ReplyAddress))[..] {
        [Effect::Answer { answer, .. }] => match answer.as_ref() {
            Answer::ReplyAddress(address) => address.to_string(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert!(address.starts_with("amq.rabbitmq.reply-to."), "{address}");
    declare(&mut tb, responder, "rpc");
    request(&mut tb, requester, "rpc", b"ping");
    assert_eq!(reply_address(&mut tb, responder, "rpc"), address, "the address requests carry");
    match &tb.command(ask(responder, Query::Queue(short(&address))))[..] {
        [Effect::Answer { answer, .. }] => match answer.as_ref() {
            Answer::Queue(queue) => assert_eq!((queue.messages, queue.consumers), (0, 1)),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    tb.call(requester, ChannelClose::default());
    match &tb.command(ask(responder, Query::Queue(short(&address))))[..] {
        [Effect::ChannelError { error, .. }] => assert_eq!(error.reply_code, NOT_FOUND),
        other => panic!("the requester is gone: {other:?}"),
    }
}
