//! Message TTL, dead-lettering, max-length and queue expiry (semantics §1, §2), with a manual
//! clock: exact to the millisecond, no sleeps.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::Effect;
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn int(v: i64) -> FieldValue {
    FieldValue::I64(v)
}

fn text(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

fn declare_args(tb: &mut TestBroker, c: Chan, name: &str, args: &[(&str, FieldValue)]) -> Vec<Effect> {
    let arguments = FieldTable::from_entries(args.iter().cloned());
    tb.call(c, QueueDeclare { queue: short(name), arguments, ..Default::default() })
}

fn ready(tb: &TestBroker, queue: &str) -> usize {
    tb.broker.queue_stats("/", queue).map_or(0, |s| s.messages_ready)
}

fn with_expiration(ms: &str) -> BasicProperties {
    BasicProperties { expiration: Some(short(ms)), ..Default::default() }
}

/// A queue "dlq" bound to fanout exchange "dlx", and a source queue with `args` dead-lettering to it.
fn with_dlq(tb: &mut TestBroker, c: Chan, source: &str, args: &[(&str, FieldValue)]) {
    declare_exchange(tb, c, "dlx", "fanout");
    declare(tb, c, "dlq");
    bind(tb, c, "dlq", "dlx", "");
    let mut all = vec![("x-dead-letter-exchange", text("dlx"))];
    all.extend(args.iter().cloned());
    declare_args(tb, c, source, &all);
}

fn x_death(message: &hourglass_broker::Message) -> Vec<FieldTable> {
    match message.properties().headers().and_then(|h| h.get("x-death")) {
        Some(FieldValue::Array(a)) => a
            .iter()
            .filter_map(|v| match v {
                FieldValue::Table(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn get_one(tb: &mut TestBroker, c: Chan, queue: &str) -> Option<std::sync::Arc<hourglass_broker::Message>> {
    tb.call(c, BasicGet { queue: short(queue), no_ack: true }).into_iter().find_map(|e| match e {
        Effect::Send { method, content, .. } if matches!(*method, Method::BasicGetOk(_)) => content,
        _ => None,
    })
}

/// semantics §1: x-message-ttl expires a message exactly at its deadline, counted from publish.
#[test]
fn queue_ttl_expires_exactly_on_time() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-message-ttl", int(1000))]);
    tb.publish(c, "", "q", b"x");
    tb.advance(ms(999));
    assert_eq!(ready(&tb, "q"), 1);
    tb.advance(ms(1));
    assert_eq!(ready(&tb, "q"), 0);
}

/// semantics §1: when both x-message-ttl and expiration apply, the smaller wins.
#[test]
fn smaller_of_queue_and_message_ttl_wins() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-message-ttl", int(1000))]);
    tb.publish_with(c, "", "q", with_expiration("300"), b"short", false);
    tb.publish_with(c, "", "q", with_expiration("5000"), b"capped", false);
    tb.advance(ms(300));
    assert_eq!(ready(&tb, "q"), 1);
    tb.advance(ms(700));
    assert_eq!(ready(&tb, "q"), 0);
}

/// semantics §1 "Exact expiry": a short-lived message behind a long-lived head is dead-lettered at
/// its own deadline, and the broker's next wake-up is that deadline.
#[test]
fn message_behind_a_long_lived_head_expires_on_time() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[]);
    tb.publish_with(c, "", "q", with_expiration("60000"), b"head", false);
    tb.publish_with(c, "", "q", with_expiration("100"), b"behind", false);
    let start = tb.clock.now();
    assert_eq!(tb.broker.next_deadline(), Some(start.saturating_add_millis(100)));
    tb.advance(ms(100));
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (1, 1));
    let dead = get_one(&mut tb, c, "dlq").unwrap();
    assert_eq!(&dead.body[..], b"behind");
}

/// semantics §1: an expired message never reaches a consumer, even before the timer has fired.
#[test]
fn expired_message_is_never_delivered() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-message-ttl", int(50))]);
    tb.publish(c, "", "q", b"stale");
    tb.clock.advance(ms(60));
    assert!(deliveries(&consume(&mut tb, c, "q", "w", true)).is_empty());
    let ok =
        declare_with(&mut tb, c, QueueDeclare { queue: short("q"), passive: true, ..Default::default() });
    assert_eq!(ok.message_count, 0, "declare-ok never counts an expired message");
}

/// semantics §1 "TTL 0": delivered at once to a consumer that can take it, else expired at once.
#[test]
fn ttl_zero_delivers_or_expires_at_once() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[("x-message-ttl", int(0))]);
    tb.publish(c, "", "q", b"nobody");
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (0, 1));
    consume(&mut tb, c, "q", "w", true);
    let delivered = tb.publish(c, "", "q", b"taken");
    assert_eq!(bodies(&delivered), vec![b"taken".to_vec()]);
    assert_eq!(ready(&tb, "dlq"), 1);
}

/// semantics §1: an unacked message does not expire while held; back in the queue its deadline applies.
#[test]
fn unacked_message_keeps_its_deadline_when_it_comes_back() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[("x-message-ttl", int(100))]);
    tb.publish(c, "", "q", b"x");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.advance(ms(500));
    assert_eq!(ready(&tb, "dlq"), 0, "held messages do not expire");
    tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (0, 1));
}

/// semantics §1: an invalid expiration fails basic.publish with 406.
#[test]
fn invalid_expiration_is_precondition_failed() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let err = channel_error(&tb.publish_with(c, "", "q", with_expiration("soon"), b"x", false)).unwrap();
    assert_eq!(err.reply_text, "PRECONDITION_FAILED - invalid expiration 'soon': no_integer");
    let c = tb.channel();
    let err = channel_error(&tb.publish_with(c, "", "q", with_expiration("-1"), b"x", false)).unwrap();
    assert_eq!(err.reply_code, 406);
}

/// semantics §2: a rejected message goes to the DLX with x-death, x-first/last-death headers and the
/// dead-letter routing key; `expiration` becomes `original-expiration`.
#[test]
fn rejected_message_is_dead_lettered_with_x_death() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "dlx", "direct");
    declare(&mut tb, c, "dlq");
    bind(&mut tb, c, "dlq", "dlx", "failed");
    declare_args(
        &mut tb,
        c,
        "q",
        &[("x-dead-letter-exchange", text("dlx")), ("x-dead-letter-routing-key", text("failed"))],
    );
    tb.publish_with(c, "", "q", with_expiration("60000"), b"bad", false);
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.call(c, BasicReject { delivery_tag: 1, requeue: false });
    let dead = get_one(&mut tb, c, "dlq").expect("dead-lettered");
    assert_eq!((dead.exchange.as_str().as_ref(), dead.routing_key.as_str().as_ref()), ("dlx", "failed"));
    assert_eq!(dead.properties().expiration(), None);
    let deaths = x_death(&dead);
    assert_eq!(deaths.len(), 1);
    assert_eq!(deaths[0].get("reason"), Some(text("rejected")));
    assert_eq!(deaths[0].get("queue"), Some(text("q")));
    assert_eq!(deaths[0].get("exchange"), Some(text("")));
    assert_eq!(deaths[0].get("count"), Some(FieldValue::I64(1)));
    assert_eq!(deaths[0].get("original-expiration"), Some(text("60000")));
    assert_eq!(deaths[0].get("routing-keys"), Some(FieldValue::Array(FieldArray::from_values([text("q")]))));
    let headers = dead.properties().headers().unwrap();
    assert_eq!(headers.get("x-first-death-reason"), Some(text("rejected")));
    assert_eq!(headers.get("x-last-death-queue"), Some(text("q")));
}

/// semantics §2: an expired message is dead-lettered with reason expired; a missing DLX drops it
/// without error.
#[test]
fn expired_message_is_dead_lettered_and_missing_dlx_drops() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[("x-message-ttl", int(10))]);
    declare_args(
        &mut tb,
        c,
        "orphan",
        &[("x-message-ttl", int(10)), ("x-dead-letter-exchange", text("nowhere"))],
    );
    tb.publish(c, "", "q", b"a");
    tb.publish(c, "", "orphan", b"b");
    let effects = tb.advance(ms(10));
    assert!(channel_error(&effects).is_none());
    let dead = get_one(&mut tb, c, "dlq").unwrap();
    assert_eq!(x_death(&dead)[0].get("reason"), Some(text("expired")));
    assert_eq!(ready(&tb, "orphan"), 0);
}

/// semantics §2: a TTL ping-pong between two queues with no rejection is dropped once it would
/// re-enter a queue it already died in; the count grows per queue+reason meanwhile.
#[test]
fn dead_letter_cycle_without_rejection_is_dropped() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "to-a", "fanout");
    declare_exchange(&mut tb, c, "to-b", "fanout");
    declare_args(&mut tb, c, "a", &[("x-message-ttl", int(10)), ("x-dead-letter-exchange", text("to-b"))]);
    declare_args(&mut tb, c, "b", &[("x-message-ttl", int(10)), ("x-dead-letter-exchange", text("to-a"))]);
    bind(&mut tb, c, "a", "to-a", "");
    bind(&mut tb, c, "b", "to-b", "");
    tb.publish(c, "", "a", b"loop");
    tb.advance(ms(10));
    assert_eq!((ready(&tb, "a"), ready(&tb, "b")), (0, 1));
    tb.advance(ms(10));
    assert_eq!((ready(&tb, "a"), ready(&tb, "b")), (0, 0), "dropped instead of looping");
    assert_eq!(tb.broker.next_deadline(), None);
}

/// semantics §2: a cycle with a rejection in it keeps going (the consumer chose to send it back).
#[test]
fn dead_letter_cycle_with_rejection_continues() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "retry", "fanout");
    declare_exchange(&mut tb, c, "work", "fanout");
    declare_args(&mut tb, c, "jobs", &[("x-dead-letter-exchange", text("retry"))]);
    declare_args(&mut tb, c, "wait", &[("x-message-ttl", int(10)), ("x-dead-letter-exchange", text("work"))]);
    bind(&mut tb, c, "jobs", "work", "");
    bind(&mut tb, c, "wait", "retry", "");
    tb.publish(c, "work", "", b"job");
    for round in 1..=3i64 {
        tb.call(c, BasicGet { queue: short("jobs"), no_ack: false });
        let tag = round as u64;
        tb.call(c, BasicReject { delivery_tag: tag, requeue: false });
        assert_eq!(ready(&tb, "wait"), 1);
        tb.advance(ms(10));
        assert_eq!(ready(&tb, "jobs"), 1, "round {round}");
    }
    let msg = get_one(&mut tb, c, "jobs").unwrap();
    let deaths = x_death(&msg);
    let rejected = deaths.iter().find(|d| d.get("queue") == Some(text("jobs"))).unwrap();
    assert_eq!(rejected.get("count"), Some(FieldValue::I64(3)));
}

/// semantics §2 maxlen: drop-head dead-letters the oldest ready messages with reason maxlen.
#[test]
fn max_length_drop_head_dead_letters_the_oldest() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[("x-max-length", int(2))]);
    for b in [b"1", b"2", b"3"] {
        tb.publish(c, "", "q", b);
    }
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (2, 1));
    let dead = get_one(&mut tb, c, "dlq").unwrap();
    assert_eq!(&dead.body[..], b"1");
    assert_eq!(x_death(&dead)[0].get("reason"), Some(text("maxlen")));
}

/// semantics §2: reject-publish refuses the overflowing message and nacks it in confirm mode;
/// reject-publish-dlx also dead-letters it.
#[test]
fn reject_publish_nacks_and_reject_publish_dlx_dead_letters() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    with_dlq(&mut tb, c, "q", &[("x-max-length", int(1)), ("x-overflow", text("reject-publish-dlx"))]);
    tb.call(c, ConfirmSelect { nowait: false });
    let first = tb.publish(c, "", "q", b"1");
    assert!(matches!(methods(&first).as_slice(), [Method::BasicAck(_)]));
    let second = tb.publish(c, "", "q", b"2");
    assert!(matches!(methods(&second).as_slice(), [Method::BasicNack(n)] if n.delivery_tag == 2));
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (1, 1));
    declare_args(
        &mut tb,
        c,
        "strict",
        &[("x-max-length-bytes", int(4)), ("x-overflow", text("reject-publish"))],
    );
    assert!(matches!(methods(&tb.publish(c, "", "strict", b"1234")).as_slice(), [Method::BasicAck(_)]));
    assert!(matches!(methods(&tb.publish(c, "", "strict", b"5")).as_slice(), [Method::BasicNack(_)]));
}

/// semantics §1 x-expires: an unused queue is deleted after that long; consumers and basic.get
/// keep it alive.
#[test]
fn unused_queue_is_deleted_after_x_expires() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "idle", &[("x-expires", int(1000))]);
    tb.advance(ms(600));
    tb.call(c, BasicGet { queue: short("idle"), no_ack: true });
    tb.advance(ms(999));
    assert!(tb.broker.queue_stats("/", "idle").is_some(), "basic.get reset the clock");
    consume(&mut tb, c, "idle", "w", true);
    tb.advance(ms(5000));
    assert!(tb.broker.queue_stats("/", "idle").is_some(), "a consumer keeps it");
    tb.call(c, BasicCancel { consumer_tag: short("w"), nowait: false });
    tb.advance(ms(999));
    assert!(tb.broker.queue_stats("/", "idle").is_some());
    tb.advance(ms(1));
    assert!(tb.broker.queue_stats("/", "idle").is_none());
}

/// semantics §2: quorum arguments from Celery/Spring/kombu are accepted on durable queues.
#[test]
fn quorum_arguments_are_accepted() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([
        ("x-queue-type", text("quorum")),
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
    ]);
    let ok = declare_with(
        &mut tb,
        c,
        QueueDeclare { queue: short("celery"), durable: true, arguments, ..Default::default() },
    );
    assert_eq!(ok.queue, "celery");
}
