//! Message deduplication (semantics §8), LavinMQ's interface, with a manual clock: a queue
//! declared with `x-message-deduplication` drops a message whose `x-deduplication-header` it
//! holds, confirms it all the same, holds ids for `x-cache-ttl` (or a message's own), at most
//! `x-cache-size` of them, and does not hold the id of a message it refused.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::admin::{SqsOutgoing, SqsSent};
use hourglass_testkit::{methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn dedup_queue(tb: &mut TestBroker, c: Chan, name: &str, extra: &[(&str, FieldValue)]) {
    let mut args = vec![("x-message-deduplication", FieldValue::Bool(true))];
    args.extend(extra.iter().cloned());
    let arguments = FieldTable::from_entries(args);
    declare_with(tb, c, QueueDeclare { queue: short(name), arguments, ..Default::default() });
}

fn with_headers(entries: &[(&str, FieldValue)]) -> BasicProperties {
    BasicProperties { headers: Some(FieldTable::from_entries(entries.iter().cloned())), ..Default::default() }
}

fn id(value: &str) -> BasicProperties {
    with_headers(&[("x-deduplication-header", FieldValue::LongStr(value.into()))])
}

fn ready(tb: &TestBroker, queue: &str) -> usize {
    tb.broker.queue_stats("/", queue).unwrap().messages_ready
}

#[test]
fn a_duplicate_is_dropped_and_still_confirmed() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dedup_queue(&mut tb, c, "q", &[]);
    tb.call(c, ConfirmSelect { nowait: false });
    for (tag, value) in [(1, "a"), (2, "a"), (3, "b")] {
        let effects = tb.publish_with(c, "", "q", id(value), b"x", false);
        assert!(
            matches!(methods(&effects).as_slice(), [Method::BasicAck(a)] if a.delivery_tag == tag),
            "{effects:?}"
        );
    }
    tb.publish(c, "", "q", b"no id: never a duplicate");
    tb.publish(c, "", "q", b"no id: never a duplicate");
    assert_eq!(ready(&tb, "q"), 4);
    // A queue without the argument keeps both.
    declare(&mut tb, c, "plain");
    tb.publish_with(c, "", "plain", id("a"), b"x", false);
    tb.publish_with(c, "", "plain", id("a"), b"x", false);
    assert_eq!(ready(&tb, "plain"), 2);
}

#[test]
fn ids_are_held_for_the_cache_ttl_or_the_messages_own() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dedup_queue(&mut tb, c, "q", &[("x-cache-ttl", FieldValue::I32(1_000))]);
    tb.publish_with(c, "", "q", id("a"), b"x", false);
    let own_ttl = with_headers(&[
        ("x-deduplication-header", FieldValue::LongStr("b".into())),
        ("x-cache-ttl", FieldValue::I32(5_000)),
    ]);
    tb.publish_with(c, "", "q", own_ttl, b"x", false);
    tb.advance(Duration::from_millis(999));
    tb.publish_with(c, "", "q", id("a"), b"dropped", false);
    assert_eq!(ready(&tb, "q"), 2);
    tb.advance(Duration::from_millis(1));
    tb.publish_with(c, "", "q", id("a"), b"taken: a's second lapsed", false);
    tb.publish_with(c, "", "q", id("b"), b"dropped: b holds for 5 s", false);
    assert_eq!(ready(&tb, "q"), 3);
    tb.advance(Duration::from_millis(4_000));
    tb.publish_with(c, "", "q", id("b"), b"taken", false);
    assert_eq!(ready(&tb, "q"), 4);
}

#[test]
fn the_cache_holds_at_most_its_size_and_a_named_header() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let name = FieldValue::LongStr("order-id".into());
    dedup_queue(&mut tb, c, "q", &[("x-cache-size", FieldValue::I32(2)), ("x-deduplication-header", name)]);
    let order = |n: i32| with_headers(&[("order-id", FieldValue::I32(n))]);
    for n in [1, 2, 3] {
        tb.publish_with(c, "", "q", order(n), b"x", false);
    }
    tb.publish_with(c, "", "q", order(3), b"dropped", false);
    tb.publish_with(c, "", "q", order(1), b"taken: 1 was pushed out", false);
    tb.publish_with(c, "", "q", id("x"), b"not the queue's header", false);
    tb.publish_with(c, "", "q", id("x"), b"not the queue's header", false);
    assert_eq!(ready(&tb, "q"), 6);
}

#[test]
fn a_refused_message_leaves_no_id_behind() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let overflow = FieldValue::LongStr("reject-publish".into());
    dedup_queue(&mut tb, c, "q", &[("x-max-length", FieldValue::I32(1)), ("x-overflow", overflow)]);
    tb.call(c, ConfirmSelect { nowait: false });
    tb.publish_with(c, "", "q", id("first"), b"x", false);
    let refused = tb.publish_with(c, "", "q", id("second"), b"x", false);
    assert!(matches!(methods(&refused).as_slice(), [Method::BasicNack(_)]), "{refused:?}");
    tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    let retried = tb.publish_with(c, "", "q", id("second"), b"x", false);
    assert!(matches!(methods(&retried).as_slice(), [Method::BasicAck(_)]), "{retried:?}");
    assert_eq!(ready(&tb, "q"), 1, "the retry was taken, not dropped as a duplicate");
}

#[test]
fn bad_deduplication_arguments_are_refused() {
    let mut tb = TestBroker::new();
    for (key, value) in [
        ("x-message-deduplication", FieldValue::LongStr("yes".into())),
        ("x-cache-size", FieldValue::I32(0)),
        ("x-cache-size", FieldValue::I64(1_000_001)),
        // Issue 37, finding 6: 10M ids a queue (about 3.9 GB) was allowed to anyone who may
        // configure a queue.
        ("x-cache-size", FieldValue::I64(10_000_000)),
        ("x-cache-ttl", FieldValue::I32(-1)),
        ("x-deduplication-header", FieldValue::I32(1)),
    ] {
        let c = tb.channel();
        let arguments = FieldTable::from_entries([(key, value)]);
        let effects = tb.call(c, QueueDeclare { queue: short("bad"), arguments, ..Default::default() });
        assert_eq!(channel_error(&effects).map(|e| e.reply_code), Some(406), "{key}");
    }
}

/// An SQS send to a deduplicating queue learns of the duplicate and the first message's id.
#[test]
fn an_sqs_send_is_told_of_its_duplicate() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dedup_queue(&mut tb, c, "q", &[]);
    let now = tb.clock.now();
    let message_id = |m: &str| BasicProperties {
        message_id: Some(short(m)),
        headers: Some(FieldTable::from_entries([(
            "x-deduplication-header",
            FieldValue::LongStr("d".into()),
        )])),
        ..Default::default()
    };
    let send = |tb: &mut TestBroker, m: &str| {
        tb.broker.sqs_send("/", "q", SqsOutgoing::new(message_id(m), "x".into()), now).unwrap()
    };
    assert_eq!(send(&mut tb, "first"), SqsSent::Stored { sequence_number: None });
    let duplicate = SqsSent::Duplicate { original: Some(short("first")), sequence_number: None };
    assert_eq!(send(&mut tb, "second"), duplicate);
    assert_eq!(ready(&tb, "q"), 1);
}
