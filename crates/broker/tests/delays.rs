//! Delayed messages: the delayed exchange and delay queues (semantics §3), with a manual clock.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::{BrokerConfig, Effect};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn text(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

fn delayed_exchange(tb: &mut TestBroker, c: Chan, name: &str, routing: &str) -> Vec<Effect> {
    let arguments = FieldTable::from_entries([("x-delayed-type", text(routing))]);
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short(name),
            kind: short("x-delayed-message"),
            arguments,
            ..Default::default()
        },
    )
}

fn with_delay(delay: FieldValue) -> BasicProperties {
    BasicProperties { headers: Some(FieldTable::from_entries([("x-delay", delay)])), ..Default::default() }
}

fn stats(tb: &TestBroker, queue: &str) -> (usize, usize) {
    let s = tb.broker.queue_stats("/", queue).unwrap();
    (s.messages_ready, s.messages_delayed)
}

fn declare_args(tb: &mut TestBroker, c: Chan, name: &str, args: &[(&str, FieldValue)]) -> Vec<Effect> {
    let arguments = FieldTable::from_entries(args.iter().cloned());
    tb.call(c, QueueDeclare { queue: short(name), arguments, ..Default::default() })
}

/// semantics §3: a message through a delayed exchange is invisible and counted as delayed until
/// due, then ready exactly at its due time; the queue reports the next due time.
#[test]
fn delayed_message_becomes_ready_exactly_when_due() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "direct");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "later", "k");
    tb.publish_with(c, "later", "k", with_delay(FieldValue::I32(1500)), b"x", false);
    assert_eq!(stats(&tb, "q"), (0, 1));
    let due = tb.clock.now().saturating_add_millis(1500);
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().next_due, Some(due));
    assert_eq!(tb.broker.next_deadline(), Some(due));
    assert!(methods(&tb.call(c, BasicGet { queue: short("q"), no_ack: true }))
        .iter()
        .all(|m| matches!(m, Method::BasicGetEmpty(_))));
    tb.advance(ms(1499));
    assert_eq!(stats(&tb, "q"), (0, 1));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (1, 0));
}

/// semantics §3: every x-delayed-type routes as its type; the delayed copy waits in each target.
#[test]
fn each_delayed_type_routes_as_its_type() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    for (exchange, kind, key, binding_key) in [
        ("d-direct", "direct", "k", "k"),
        ("d-fanout", "fanout", "any", ""),
        ("d-topic", "topic", "a.b", "a.*"),
    ] {
        delayed_exchange(&mut tb, c, exchange, kind);
        declare(&mut tb, c, exchange);
        bind(&mut tb, c, exchange, exchange, binding_key);
        tb.publish_with(c, exchange, key, with_delay(FieldValue::I32(10)), b"x", false);
        assert_eq!(stats(&tb, exchange), (0, 1), "{kind}");
    }
    delayed_exchange(&mut tb, c, "d-headers", "headers");
    declare(&mut tb, c, "h");
    let arguments = FieldTable::from_entries([("kind", text("a"))]);
    tb.call(
        c,
        QueueBind { queue: short("h"), exchange: short("d-headers"), arguments, ..Default::default() },
    );
    let headers = FieldTable::from_entries([("x-delay", FieldValue::I32(10)), ("kind", text("a"))]);
    tb.publish_with(
        c,
        "d-headers",
        "",
        BasicProperties { headers: Some(headers), ..Default::default() },
        b"x",
        false,
    );
    assert_eq!(stats(&tb, "h"), (0, 1));
    tb.advance(ms(10));
    for q in ["d-direct", "d-fanout", "d-topic", "h"] {
        assert_eq!(stats(&tb, q), (1, 0), "{q}");
    }
}

/// semantics §3: a missing or unknown x-delayed-type fails exchange.declare with 406 naming it.
#[test]
fn delayed_exchange_needs_a_delayed_type() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(&tb.call(
        c,
        ExchangeDeclare { exchange: short("d"), kind: short("x-delayed-message"), ..Default::default() },
    ))
    .expect("406");
    assert_eq!(
        err.reply_text,
        "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"
    );
    let c = tb.channel();
    assert_eq!(channel_error(&delayed_exchange(&mut tb, c, "d", "bogus")).unwrap().reply_code, 406);
}

/// semantics §3: on delivery the x-delay header reads the negative of the delay, as the plugin.
#[test]
fn delivered_x_delay_is_negative() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "fanout");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "later", "");
    consume(&mut tb, c, "q", "w", true);
    tb.publish_with(c, "later", "", with_delay(text("250")), b"x", false);
    let delivered = deliveries(&tb.advance(ms(250)));
    let headers = delivered[0].message.properties().headers().unwrap();
    assert_eq!(headers.get("x-delay"), Some(FieldValue::I32(-250)));
}

/// semantics §3: due messages become ready in due order, ties in publish order.
#[test]
fn due_order_and_ties_in_publish_order() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "fanout");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "later", "");
    for (body, delay) in [(b"c", 300), (b"a", 100), (b"b", 100), (b"d", 300)] {
        tb.publish_with(c, "later", "", with_delay(FieldValue::I32(delay)), body, false);
    }
    consume(&mut tb, c, "q", "w", true);
    let got = bodies(&tb.advance(ms(300)));
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
}

/// semantics §1/§3: TTL starts when a delayed message becomes ready, not at publish.
#[test]
fn ttl_starts_when_the_delay_ends() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "fanout");
    declare_args(&mut tb, c, "q", &[("x-message-ttl", FieldValue::I32(100))]);
    bind(&mut tb, c, "q", "later", "");
    tb.publish_with(c, "later", "", with_delay(FieldValue::I32(500)), b"x", false);
    tb.advance(ms(599));
    assert_eq!(stats(&tb, "q"), (1, 0));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (0, 0));
}

/// semantics §3 delay queue: x-delivery-delay holds every entering message, dead-lettered ones
/// too; a delayed exchange's own delay wins.
#[test]
fn delay_queue_holds_every_entering_message_and_exchange_delay_wins() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "slow", &[("x-delivery-delay", FieldValue::I32(1000))]);
    tb.publish(c, "", "slow", b"plain");
    assert_eq!(stats(&tb, "slow"), (0, 1));
    delayed_exchange(&mut tb, c, "later", "fanout");
    bind(&mut tb, c, "slow", "later", "");
    tb.publish_with(c, "later", "", with_delay(FieldValue::I32(200)), b"own", false);
    tb.advance(ms(200));
    assert_eq!(stats(&tb, "slow"), (1, 1));
    tb.advance(ms(800));
    assert_eq!(stats(&tb, "slow"), (2, 0));
    // Dead-lettered into a delay queue: it waits too.
    declare_exchange(&mut tb, c, "retry", "fanout");
    bind(&mut tb, c, "slow", "retry", "");
    declare_args(&mut tb, c, "work", &[("x-dead-letter-exchange", text("retry"))]);
    tb.publish(c, "", "work", b"failing");
    tb.call(c, BasicGet { queue: short("work"), no_ack: false });
    let tag = 1;
    tb.call(c, BasicReject { delivery_tag: tag, requeue: false });
    assert_eq!(stats(&tb, "slow"), (2, 1));
}

/// semantics §3: routing happens at publish: mandatory returns 312 when nothing routes now, and the
/// confirm is sent at once (every delayed copy is stored).
#[test]
fn mandatory_and_confirms_apply_at_publish() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "direct");
    tb.call(c, ConfirmSelect { nowait: false });
    let effects = tb.publish_with(c, "later", "nobody", with_delay(FieldValue::I32(100)), b"x", true);
    assert!(
        matches!(methods(&effects).as_slice(), [Method::BasicReturn(r), Method::BasicAck(_)] if r.reply_code == 312)
    );
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "later", "k");
    let effects = tb.publish_with(c, "later", "k", with_delay(FieldValue::I32(100)), b"x", true);
    assert!(matches!(methods(&effects).as_slice(), [Method::BasicAck(a)] if a.delivery_tag == 2));
}

/// semantics §3: an alternate exchange's copy waits too (the delay belongs to the message).
#[test]
fn alternate_exchange_copy_waits() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "ae", "fanout");
    declare(&mut tb, c, "unrouted");
    bind(&mut tb, c, "unrouted", "ae", "");
    let arguments =
        FieldTable::from_entries([("x-delayed-type", text("direct")), ("alternate-exchange", text("ae"))]);
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("later"),
            kind: short("x-delayed-message"),
            arguments,
            ..Default::default()
        },
    );
    tb.publish_with(c, "later", "nobody", with_delay(FieldValue::I32(100)), b"x", false);
    assert_eq!(stats(&tb, "unrouted"), (0, 1));
}

/// semantics §3: a delay beyond ten years is a channel error 406; no delay header means no delay.
#[test]
fn too_long_delay_is_refused_and_no_header_is_no_delay() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "later", "fanout");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "later", "");
    tb.publish(c, "later", "", b"now");
    assert_eq!(stats(&tb, "q"), (1, 0));
    let err = channel_error(&tb.publish_with(
        c,
        "later",
        "",
        with_delay(FieldValue::I64(315_360_000_001)),
        b"x",
        false,
    ));
    assert_eq!(err.unwrap().reply_code, 406);
}

/// semantics §3 ApsaraMQ: with the option on, a `delay` header delays on any exchange; off, it is ignored.
#[test]
fn apsaramq_delay_header_is_opt_in() {
    let headers = || BasicProperties {
        headers: Some(FieldTable::from_entries([("delay", FieldValue::I32(50))])),
        ..Default::default()
    };
    let mut off = TestBroker::new();
    let c = off.channel();
    declare(&mut off, c, "q");
    off.publish_with(c, "", "q", headers(), b"x", false);
    assert_eq!(stats(&off, "q"), (1, 0));
    let mut on =
        TestBroker::with_config(BrokerConfig { apsaramq_delay_header: true, ..BrokerConfig::default() });
    let c = on.channel();
    declare(&mut on, c, "q");
    on.publish_with(c, "", "q", headers(), b"x", false);
    assert_eq!(stats(&on, "q"), (0, 1));
    on.advance(ms(50));
    assert_eq!(stats(&on, "q"), (1, 0));
}

/// semantics §7: delayed messages can be listed and peeked without consuming, cancelled, and
/// rescheduled (to now: ready at once).
#[test]
fn delayed_messages_can_be_peeked_cancelled_and_rescheduled() {
    use hourglass_broker::admin::DelayedError;
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "slow", &[("x-delivery-delay", FieldValue::I32(60_000))]);
    for body in [b"a", b"b", b"c"] {
        tb.publish(c, "", "slow", body);
    }
    let waiting = tb.broker.peek_delayed("/", "slow", 10).unwrap().read_stored(usize::MAX);
    assert_eq!(
        waiting.iter().map(|d| d.message.body.to_vec()).collect::<Vec<_>>(),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    assert_eq!(stats(&tb, "slow"), (0, 3), "peeking consumed nothing");
    tb.broker.cancel_delayed("/", "slow", waiting[0].id).unwrap();
    assert_eq!(tb.broker.cancel_delayed("/", "slow", waiting[0].id), Err(DelayedError::MessageNotFound));
    let now = tb.clock.now();
    tb.broker.reschedule_delayed("/", "slow", waiting[2].id, now, now).unwrap();
    assert_eq!(stats(&tb, "slow"), (1, 1));
    assert_eq!(tb.broker.peek_delayed("/", "nope", 1).unwrap_err(), DelayedError::QueueNotFound);
}

/// semantics §3: `x-delay-until` (epoch ms or RFC 3339) and `x-opt-delivery-time` name when a
/// message is due: ready exactly then, its due-time header delivered as published, no `x-delay`
/// added; a time in the past is ready at once; TTL counts from the due time.
#[test]
fn a_message_due_at_a_named_time_is_ready_exactly_then() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "at", "fanout");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "at", "");
    let now = tb.clock.now().as_millis();
    let headers = |entries: Vec<(&str, FieldValue)>| BasicProperties {
        headers: Some(FieldTable::from_entries(entries)),
        ..Default::default()
    };
    tb.publish_with(
        c,
        "at",
        "",
        headers(vec![("x-delay-until", FieldValue::I64(now as i64 + 2_000))]),
        b"a",
        false,
    );
    let named = hourglass_broker::calendar::civil_from_days(((now + 3_000) / 86_400_000) as i64);
    let seconds = (now + 3_000) % 86_400_000 / 1000;
    let rfc3339 = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        named.0,
        named.1,
        named.2,
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60,
        (now + 3_000) % 1000
    );
    tb.publish_with(c, "at", "", headers(vec![("x-delay-until", text(&rfc3339))]), b"b", false);
    let delivery_time =
        vec![("x-opt-delivery-time", FieldValue::I64(now as i64 + 4_000)), ("x-ttl-probe", text("1"))];
    let mut with_ttl = headers(delivery_time);
    with_ttl.expiration = Some(short("500"));
    tb.publish_with(c, "at", "", with_ttl, b"c", false);
    tb.publish_with(
        c,
        "at",
        "",
        headers(vec![("x-delay-until", text("2001-09-09T01:46:40Z"))]),
        b"past",
        false,
    );
    assert_eq!(stats(&tb, "q"), (1, 3));
    tb.advance(ms(1_999));
    assert_eq!(stats(&tb, "q"), (1, 3));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (2, 2));
    tb.advance(ms(999));
    assert_eq!(stats(&tb, "q"), (2, 2));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (3, 1));
    tb.advance(ms(1_000));
    assert_eq!(stats(&tb, "q"), (4, 0), "c is ready at 4 s");
    tb.advance(ms(499));
    assert_eq!(stats(&tb, "q"), (4, 0), "its 500 ms TTL counts from 4 s");
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (3, 0));
    let delivered = deliveries(&consume(&mut tb, c, "q", "w", true));
    let bodies: Vec<&[u8]> = delivered.iter().map(|d| &d.message.body[..]).collect();
    assert_eq!(bodies, [&b"past"[..], b"a", b"b"]);
    let headers = delivered[1].message.properties().headers().unwrap();
    assert_eq!(headers.get("x-delay-until"), Some(FieldValue::I64(now as i64 + 2_000)));
    assert_eq!(headers.get("x-delay"), None);
}

/// semantics §3: a due time that is not a time, or is more than 10 years away, is a 406.
#[test]
fn a_due_time_that_is_not_one_is_refused() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    delayed_exchange(&mut tb, c, "at", "fanout");
    let props = BasicProperties {
        headers: Some(FieldTable::from_entries([("x-delay-until", text("next tuesday"))])),
        ..Default::default()
    };
    let error = channel_error(&tb.publish_with(c, "at", "", props, b"x", false)).expect("406");
    assert_eq!(error.reply_code, 406);
    assert!(error.reply_text.contains("invalid x-delay-until"), "{}", error.reply_text);
}

/// Issue 39 (RabbitMQ 4.4): `x-opt-delivery-time` (epoch ms) holds a message published through
/// any exchange until then, in each queue it reaches; `x-opt-delivery-delay` (ms, Tanzu and
/// Artemis) holds it that long, and the delivery time wins over it; a time not ahead is ready at
/// once; both are delivered as published; TTL counts from the due time, as for any delay.
#[test]
fn delivery_time_holds_a_message_on_any_exchange() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let now = tb.clock.now().as_millis();
    let headers = |entries: Vec<(&str, FieldValue)>| BasicProperties {
        headers: Some(FieldTable::from_entries(entries)),
        ..Default::default()
    };
    let at = |ms: u64| FieldValue::I64((now + ms) as i64);
    tb.publish_with(c, "", "q", headers(vec![("x-opt-delivery-time", at(1_500))]), b"a", false);
    tb.publish_with(c, "", "q", headers(vec![("x-opt-delivery-delay", FieldValue::I32(1_000))]), b"b", false);
    let both = vec![("x-opt-delivery-delay", FieldValue::I32(100)), ("x-opt-delivery-time", at(2_000))];
    tb.publish_with(c, "", "q", headers(both), b"c", false);
    tb.publish_with(
        c,
        "",
        "q",
        headers(vec![("x-opt-delivery-time", FieldValue::I64(1_000))]),
        b"past",
        false,
    );
    let mut with_ttl = headers(vec![("x-opt-delivery-time", at(3_000))]);
    with_ttl.expiration = Some(short("500"));
    tb.publish_with(c, "", "q", with_ttl, b"ttl", false);
    assert_eq!(stats(&tb, "q"), (1, 4), "only the one due in the past is ready");
    tb.advance(ms(999));
    assert_eq!(stats(&tb, "q"), (1, 4));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (2, 3), "b after its 1 s delay");
    tb.advance(ms(499));
    assert_eq!(stats(&tb, "q"), (2, 3));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (3, 2), "a at its delivery time");
    tb.advance(ms(499));
    assert_eq!(stats(&tb, "q"), (3, 2), "c waits for its delivery time, not its 100 ms delay");
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (4, 1));
    tb.advance(ms(1_000));
    assert_eq!(stats(&tb, "q"), (5, 0));
    tb.advance(ms(500));
    assert_eq!(stats(&tb, "q"), (4, 0), "its TTL counted from its delivery time");
    let delivered = deliveries(&consume(&mut tb, c, "q", "w", true));
    let bodies: Vec<&[u8]> = delivered.iter().map(|d| &d.message.body[..]).collect();
    assert_eq!(bodies, [&b"past"[..], b"b", b"a", b"c"]);
    let headers = delivered[2].message.properties().headers().unwrap();
    assert_eq!(headers.get("x-opt-delivery-time"), Some(at(1_500)), "delivered as published");
}

/// Issue 39: on any exchange `x-opt-delivery-time` is read as RabbitMQ 4.4 reads it: an integer
/// of epoch ms or an AMQP timestamp (seconds); a string, float or boolean is no delay, not an
/// error (an application that works with RabbitMQ works here). More than ten years ahead is a 406,
/// as through the delayed exchange (RabbitMQ sets no bound; our time tiers do).
#[test]
fn a_delivery_time_is_read_as_rabbitmq_reads_it_on_any_exchange() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let with = |value: FieldValue| BasicProperties {
        headers: Some(FieldTable::from_entries([("x-opt-delivery-time", value)])),
        ..Default::default()
    };
    let error = channel_error(&tb.publish_with(c, "", "q", with(FieldValue::I64(i64::MAX)), b"x", false))
        .expect("406");
    assert_eq!(error.reply_code, 406);
    assert!(error.reply_text.contains("invalid x-opt-delivery-time"), "{}", error.reply_text);
    let c = tb.channel();
    let now = tb.clock.now().as_millis();
    for ignored in
        [FieldValue::Bool(true), text(&(now + 5_000).to_string()), FieldValue::F64((now + 5_000) as f64)]
    {
        tb.publish_with(c, "", "q", with(ignored), b"now", false);
    }
    assert_eq!(stats(&tb, "q"), (3, 0), "not integers: no delay, no error");
    let in_seconds = now / 1000 + 3;
    tb.publish_with(c, "", "q", with(FieldValue::Timestamp(in_seconds)), b"later", false);
    assert_eq!(stats(&tb, "q"), (3, 1), "an AMQP timestamp names a second");
    tb.advance(ms(in_seconds * 1000 - now - 1));
    assert_eq!(stats(&tb, "q"), (3, 1));
    tb.advance(ms(1));
    assert_eq!(stats(&tb, "q"), (4, 0));
}
