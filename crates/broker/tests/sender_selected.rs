//! Sender-selected distribution: the `CC` and `BCC` headers add routing keys (RabbitMQ's
//! extension, rabbit_basic:header_routes/1); `BCC` never reaches a consumer.

mod common;

use common::*;
use hourglass_broker::{Effect, Message};
use hourglass_testkit::{short, Chan, TestBroker};
use hourglass_wire::*;

fn text(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

fn keys(values: &[&str]) -> FieldValue {
    FieldValue::Array(FieldArray::from_values(values.iter().map(|v| text(v))))
}

fn with_headers(headers: Vec<(&str, FieldValue)>) -> BasicProperties {
    BasicProperties { headers: Some(FieldTable::from_entries(headers)), ..Default::default() }
}

fn ready(tb: &TestBroker, queue: &str) -> usize {
    tb.broker.queue_stats("/", queue).map_or(0, |s| s.messages_ready)
}

fn get_one(tb: &mut TestBroker, c: Chan, queue: &str) -> Option<std::sync::Arc<Message>> {
    tb.call(c, BasicGet { queue: short(queue), no_ack: true }).into_iter().find_map(|e| match e {
        Effect::Send { method, content, .. } if matches!(*method, Method::BasicGetOk(_)) => content,
        _ => None,
    })
}

/// Three queues bound to a direct exchange by k1, k2, k3.
fn three_queues(tb: &mut TestBroker, c: Chan, exchange: &str, kind: &str) {
    declare_exchange(tb, c, exchange, kind);
    for (queue, key) in [("q1", "k1"), ("q2", "k2"), ("q3", "k3")] {
        declare(tb, c, queue);
        bind(tb, c, queue, exchange, key);
    }
}

/// A direct exchange routes with the routing key and every CC and BCC key; a queue matched by
/// several keys gets the message once, and what it stores keeps CC but has no BCC.
#[test]
fn cc_and_bcc_keys_route_once_each_and_bcc_is_removed() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    three_queues(&mut tb, c, "x", "direct");
    let properties =
        with_headers(vec![("CC", keys(&["k2", "k1"])), ("BCC", keys(&["k3"])), ("n", text("v"))]);
    tb.publish_with(c, "x", "k1", properties, b"m", false);
    assert_eq!((ready(&tb, "q1"), ready(&tb, "q2"), ready(&tb, "q3")), (1, 1, 1));
    for queue in ["q1", "q2", "q3"] {
        let message = get_one(&mut tb, c, queue).expect("routed");
        assert_eq!(message.routing_key, "k1", "the routing key is the published one");
        let headers = message.properties().headers().expect("headers kept");
        assert_eq!(headers.get("CC"), Some(keys(&["k2", "k1"])));
        assert_eq!(headers.get("n"), Some(text("v")));
        assert!(!headers.contains_key("BCC"), "BCC is stripped before the message is stored");
    }
}

/// Topic patterns and the default exchange route with CC keys too.
#[test]
fn topic_and_default_exchange_use_cc_keys() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "t", "topic");
    declare(&mut tb, c, "eu");
    declare(&mut tb, c, "us");
    bind(&mut tb, c, "eu", "t", "orders.eu.*");
    tb.publish_with(c, "t", "orders.us.1", with_headers(vec![("BCC", keys(&["orders.eu.2"]))]), b"m", false);
    assert_eq!(ready(&tb, "eu"), 1);
    tb.publish_with(c, "", "eu", with_headers(vec![("CC", keys(&["us", "eu"]))]), b"m", false);
    assert_eq!((ready(&tb, "eu"), ready(&tb, "us")), (2, 1));
}

/// A message routed only by a CC key is routed: no basic.return for mandatory.
#[test]
fn mandatory_message_routed_by_cc_is_not_returned() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    three_queues(&mut tb, c, "x", "direct");
    let effects = tb.publish_with(c, "x", "nowhere", with_headers(vec![("CC", keys(&["k3"]))]), b"m", true);
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::Send { method, .. } if matches!(**method, Method::BasicReturn(_)))));
    assert_eq!(ready(&tb, "q3"), 1);
}

/// A CC or BCC header that is not an array closes the channel with RabbitMQ's 406; elements of
/// other types inside the array are skipped.
#[test]
fn non_array_cc_is_precondition_failed_and_odd_elements_are_skipped() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    three_queues(&mut tb, c, "x", "direct");
    let mixed = FieldValue::Array(FieldArray::from_values([FieldValue::I32(5), text("k2")]));
    tb.publish_with(c, "x", "k1", with_headers(vec![("CC", mixed)]), b"m", false);
    assert_eq!((ready(&tb, "q1"), ready(&tb, "q2")), (1, 1));
    let effects = tb.publish_with(c, "x", "k1", with_headers(vec![("BCC", text("k2"))]), b"m", false);
    let error = channel_error(&effects).expect("channel closed");
    assert_eq!(error.reply_code, reply_code::PRECONDITION_FAILED);
    assert_eq!(
        error.reply_text,
        "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"BCC\",longstr}"
    );
    assert_eq!(ready(&tb, "q1"), 1, "nothing routed");

    // In a transaction the publish itself is refused, not the commit.
    let tx = tb.channel();
    tb.call(tx, TxSelect {});
    let effects = tb.publish_with(tx, "x", "k1", with_headers(vec![("CC", FieldValue::I32(1))]), b"m", false);
    let error = channel_error(&effects).expect("refused at publish");
    assert!(error.reply_text.ends_with("{unacceptable_type_in_header,\"CC\",signedint}"));
}

/// Dead-lettering without a dead-letter routing key routes again with the CC keys and records
/// them in x-death; a dead-letter routing key replaces them and drops the CC header.
#[test]
fn dead_lettering_keeps_cc_keys_unless_a_routing_key_replaces_them() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    three_queues(&mut tb, c, "dlx", "direct");
    let dead_letter_to = |key: Option<&str>| {
        let mut args = vec![("x-dead-letter-exchange", text("dlx"))];
        if let Some(key) = key {
            args.push(("x-dead-letter-routing-key", text(key)));
        }
        FieldTable::from_entries(args)
    };
    tb.call(c, QueueDeclare { queue: short("src"), arguments: dead_letter_to(None), ..Default::default() });
    bind(&mut tb, c, "src", "amq.direct", "k1");
    let cc = with_headers(vec![("CC", keys(&["k2"]))]);
    tb.publish_with(c, "amq.direct", "k1", cc.clone(), b"m", false);
    tb.call(c, BasicGet { queue: short("src"), no_ack: false });
    tb.call(c, BasicReject { delivery_tag: 1, requeue: false });
    assert_eq!((ready(&tb, "q1"), ready(&tb, "q2"), ready(&tb, "q3")), (1, 1, 0));
    let dead = get_one(&mut tb, c, "q2").expect("dead-lettered by CC");
    let Some(FieldValue::Array(deaths)) = dead.properties().headers().and_then(|h| h.get("x-death")) else {
        panic!("x-death")
    };
    let Some(FieldValue::Table(death)) = deaths.iter().next() else { panic!("one death") };
    assert_eq!(death.get("routing-keys"), Some(keys(&["k1", "k2"])));
    get_one(&mut tb, c, "q1");

    tb.call(
        c,
        QueueDeclare { queue: short("src2"), arguments: dead_letter_to(Some("k3")), ..Default::default() },
    );
    tb.publish_with(c, "", "src2", cc, b"m", false);
    tb.call(c, BasicGet { queue: short("src2"), no_ack: false });
    // Tags 2 and 3 went to the no-ack gets above.
    tb.call(c, BasicReject { delivery_tag: 4, requeue: false });
    assert_eq!((ready(&tb, "q1"), ready(&tb, "q2"), ready(&tb, "q3")), (0, 0, 1));
    let dead = get_one(&mut tb, c, "q3").expect("dead-lettered by the routing key");
    assert!(!dead.properties().headers().unwrap().contains_key("CC"));
}
