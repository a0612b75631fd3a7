//! The firehose tracer (`trace_on`/`trace_off`): copies of publishes and deliveries on the
//! vhost's `amq.rabbitmq.trace` exchange, as RabbitMQ's (the Java client's `Firehose` test).

mod common;

use std::sync::Arc;

use common::*;
use hourglass_broker::admin::SqsOutgoing;
use hourglass_broker::{Effect, Message};
use hourglass_testkit::{deliveries, Chan, TestBroker};
use hourglass_wire::*;

/// basic.get with no-ack; the message, if there was one.
fn get(tb: &mut TestBroker, c: Chan, queue: &str) -> Option<Arc<Message>> {
    let effects = tb.call(c, BasicGet { queue: short(queue), no_ack: true });
    effects.into_iter().find_map(|effect| match effect {
        Effect::Send { method, content, .. } if matches!(*method, Method::BasicGetOk(_)) => content,
        _ => None,
    })
}

fn short(s: &str) -> ShortStr {
    hourglass_testkit::short(s)
}

fn header(message: &Message, name: &str) -> Option<FieldValue> {
    message.properties().headers()?.get(name)
}

fn text(value: Option<FieldValue>) -> String {
    match value {
        Some(FieldValue::LongStr(s)) => s.as_str().into_owned(),
        other => panic!("not a long string: {other:?}"),
    }
}

fn texts(value: Option<FieldValue>) -> Vec<String> {
    match value {
        Some(FieldValue::Array(items)) => items.iter().map(|item| text(Some(item))).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// A fanout exchange `test` into queue `q`, and a firehose queue bound to the trace exchange.
fn setup() -> (TestBroker, Chan) {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "test", "fanout");
    declare(&mut tb, c, "q");
    declare(&mut tb, c, "firehose");
    bind(&mut tb, c, "q", "test", "");
    bind(&mut tb, c, "firehose", "amq.rabbitmq.trace", "#");
    (tb, c)
}

/// Only what happens while tracing is on is traced: one copy of the publish
/// (`publish.<exchange>`) and one of the basic.get (`deliver.<queue>`), with the original body
/// and headers saying where the message went.
#[test]
fn publishes_and_deliveries_are_traced_while_tracing_is_on() {
    let (mut tb, c) = setup();
    tb.publish(c, "test", "not traced", b"before");
    assert!(get(&mut tb, c, "q").is_some());
    assert!(tb.broker.trace_on("/", "hourglass@test"));
    assert_eq!(tb.broker.traced_vhosts(), ["/"]);
    tb.publish(c, "test", "traced", b"body");
    assert!(get(&mut tb, c, "q").is_some());
    assert!(tb.broker.trace_off("/"));
    tb.publish(c, "test", "not traced", b"after");
    assert!(get(&mut tb, c, "q").is_some());

    let publish = get(&mut tb, c, "firehose").expect("the publish was traced");
    assert_eq!(publish.routing_key.as_str(), "publish.test");
    assert_eq!(publish.exchange.as_str(), "amq.rabbitmq.trace");
    assert_eq!(&publish.body[..], b"body");
    assert_eq!(text(header(&publish, "exchange_name")), "test");
    assert_eq!(texts(header(&publish, "routing_keys")), ["traced"]);
    assert_eq!(texts(header(&publish, "routed_queues")), ["q"]);
    assert_eq!(text(header(&publish, "node")), "hourglass@test");
    assert_eq!(text(header(&publish, "vhost")), "/");
    assert_eq!(text(header(&publish, "user")), "guest");

    let deliver = get(&mut tb, c, "firehose").expect("the delivery was traced");
    assert_eq!(deliver.routing_key.as_str(), "deliver.q");
    assert_eq!(&deliver.body[..], b"body");
    assert_eq!(text(header(&deliver, "exchange_name")), "test");
    assert_eq!(texts(header(&deliver, "routing_keys")), ["traced"]);
    assert_eq!(header(&deliver, "redelivered"), Some(FieldValue::I32(0)));
    assert!(get(&mut tb, c, "firehose").is_none(), "nothing else was traced");
}

/// A copy carries the message's properties as a table, and is itself transient.
#[test]
fn the_copy_carries_the_original_properties() {
    let (mut tb, c) = setup();
    tb.broker.trace_on("/", "n");
    let properties = BasicProperties {
        content_type: Some(short("text/plain")),
        delivery_mode: Some(2),
        message_id: Some(short("m-1")),
        ..Default::default()
    };
    tb.publish_with(c, "test", "k", properties, b"x", false);
    let publish = get(&mut tb, c, "firehose").expect("traced");
    let Some(FieldValue::Table(table)) = header(&publish, "properties") else {
        panic!("no properties table")
    };
    assert_eq!(text(table.get("content_type")), "text/plain");
    assert_eq!(table.get("delivery_mode"), Some(FieldValue::I32(2)));
    assert_eq!(text(table.get("message_id")), "m-1");
    assert!(!publish.is_persistent(), "the copy is transient");
}

/// Consuming the firehose while tracing is on does not trace the firehose's own deliveries,
/// so it cannot feed itself; a consumer's deliveries are traced, and a requeued one says so.
#[test]
fn the_firehose_does_not_trace_itself_and_marks_redeliveries() {
    let (mut tb, c) = setup();
    tb.broker.trace_on("/", "n");
    let watcher = tb.channel();
    consume(&mut tb, watcher, "firehose", "watch", true);
    let worker = tb.channel();
    consume(&mut tb, worker, "q", "work", false);
    let mut seen = Vec::new();
    let effects = tb.publish(c, "test", "job", b"1");
    seen.extend(deliveries(&effects));
    let effects = tb.call(worker, BasicReject { delivery_tag: 1, requeue: true });
    seen.extend(deliveries(&effects));
    let traced: Vec<(String, Option<FieldValue>)> = seen
        .iter()
        .filter(|d| d.method.consumer_tag.as_str() == "watch")
        .map(|d| (d.message.routing_key.as_str().into_owned(), header(&d.message, "redelivered")))
        .collect();
    assert_eq!(
        traced,
        [
            ("publish.test".to_owned(), None),
            ("deliver.q".to_owned(), Some(FieldValue::I32(0))),
            ("deliver.q".to_owned(), Some(FieldValue::I32(1))),
        ]
    );
}

/// Tracing is per vhost: another vhost's traffic is not traced, an unknown vhost is refused and
/// a deleted vhost is no longer traced.
#[test]
fn tracing_is_per_vhost() {
    let (mut tb, c) = setup();
    assert!(!tb.broker.trace_on("nowhere", "n"));
    assert!(tb.broker.add_vhost("other"));
    assert!(tb.broker.trace_on("other", "n"));
    tb.publish(c, "test", "k", b"x");
    assert!(get(&mut tb, c, "firehose").is_none(), "vhost / is not traced");
    assert!(tb.broker.delete_vhost("other", hourglass_broker::time::Timestamp::ZERO));
    assert!(tb.broker.traced_vhosts().is_empty());
}

/// Issue 41 (SQS's SendMessage skipped the firehose): a message sent over SQS is traced as a
/// publish through the default exchange, by the vhost's gateway connection, as an AMQP publish is.
#[test]
fn an_sqs_send_is_traced_as_a_publish() {
    let (mut tb, c) = setup();
    tb.broker.trace_on("/", "n");
    let now = tb.clock.now();
    let message = SqsOutgoing::new(BasicProperties::default(), bytes::Bytes::from_static(b"over sqs"));
    tb.broker.sqs_send("/", "q", message, now).expect("sent");
    let publish = get(&mut tb, c, "firehose").expect("the send was traced");
    assert_eq!(publish.routing_key.as_str(), "publish.");
    assert_eq!(&publish.body[..], b"over sqs");
    assert_eq!(texts(header(&publish, "routing_keys")), ["q"]);
    assert_eq!(texts(header(&publish, "routed_queues")), ["q"]);
    assert!(get(&mut tb, c, "q").is_some(), "and it is in the queue");
}
