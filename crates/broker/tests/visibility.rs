//! Visibility timeouts, delivery limits and redelivery back-off (semantics §4, §5), with a manual clock.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::consumer_timeout::{ConsumerTimeoutConfig, TimeoutResponse};
use hourglass_broker::{BrokerConfig, ClientCapabilities, Command, Effect, VisibilityError};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn int(v: i64) -> FieldValue {
    FieldValue::I64(v)
}

fn declare_args(tb: &mut TestBroker, c: Chan, name: &str, args: &[(&str, FieldValue)]) -> Vec<Effect> {
    let arguments = FieldTable::from_entries(args.iter().cloned());
    tb.call(c, QueueDeclare { queue: short(name), arguments, ..Default::default() })
}

/// A 1.0 `modified` outcome that asks only for a time to be delivered again at.
fn return_at(
    conn: hourglass_broker::ConnectionId,
    channel: hourglass_broker::ChannelId,
    delivery_tag: u64,
    failed: bool,
    ready_at: hourglass_broker::Timestamp,
) -> Command {
    Command::Modify(Box::new(hourglass_broker::Modification {
        conn,
        channel,
        delivery_tag,
        failed,
        undeliverable_here: false,
        ready_at: Some(ready_at),
        annotations: FieldTable::new(),
    }))
}

fn stats(tb: &TestBroker, queue: &str) -> hourglass_broker::queue::QueueStats {
    tb.broker.queue_stats("/", queue).unwrap()
}

fn header(d: &hourglass_testkit::Delivery, key: &str) -> Option<FieldValue> {
    d.message.properties().headers().and_then(|h| h.get(key))
}

fn receipt(d: &hourglass_testkit::Delivery) -> String {
    match header(d, "x-receipt-handle") {
        Some(FieldValue::LongStr(s)) => s.as_str().into_owned(),
        other => panic!("no receipt handle: {other:?}"),
    }
}

/// semantics §4: an unsettled delivery becomes ready again after the timeout, redelivered, while
/// its channel stays open; the consumer's prefetch credit comes back so it gets it again.
#[test]
fn unsettled_delivery_comes_back_after_the_timeout() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(30_000))]);
    tb.call(c, BasicQos { prefetch_count: 1, ..Default::default() });
    consume(&mut tb, c, "q", "w", false);
    let first = deliveries(&tb.publish(c, "", "q", b"job"));
    assert!(!first[0].method.redelivered);
    assert!(deliveries(&tb.advance(ms(29_999))).is_empty());
    let again = deliveries(&tb.advance(ms(1)));
    assert_eq!(again.len(), 1, "back and delivered to the consumer whose credit was returned");
    assert!(again[0].method.redelivered);
    assert_eq!(again[0].method.delivery_tag, 2);
    assert_eq!(stats(&tb, "q").counters.visibility_expired, 1);
}

/// semantics §4: late acks of a timed-out delivery are ignored — no channel error, no double ack.
#[test]
fn late_ack_is_ignored() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(1_000))]);
    tb.publish(c, "", "q", b"job");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.advance(ms(1_000));
    let late = ack(&mut tb, c, 1, false);
    assert!(channel_error(&late).is_none());
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked), (1, 0), "still there, exactly once");
    // every later settle of the same stale tag is ignored too (issue 13), not an unknown tag
    assert!(channel_error(&ack(&mut tb, c, 1, false)).is_none(), "a second late ack is ignored");
    let nack = tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    assert!(channel_error(&nack).is_none(), "a late nack after it is ignored");
    assert_eq!(stats(&tb, "q").messages_ready, 1, "still there, exactly once");
}

/// semantics §4 (issue 5): ack multiple=true spanning live and timed-out tags settles the live
/// ones and ignores the stale ones.
#[test]
fn multiple_ack_spanning_live_and_stale_tags() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(1_000))]);
    for b in [b"1", b"2"] {
        tb.publish(c, "", "q", b);
    }
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.advance(ms(500));
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.advance(ms(500));
    // tag 1 timed out (its message is ready again); tag 2 is live.
    assert_eq!((stats(&tb, "q").messages_ready, stats(&tb, "q").messages_unacked), (1, 1));
    let effects = ack(&mut tb, c, 2, true);
    assert!(channel_error(&effects).is_none());
    assert_eq!((stats(&tb, "q").messages_ready, stats(&tb, "q").messages_unacked), (1, 0));
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    assert!(channel_error(&ack(&mut tb, c, 3, false)).is_none(), "tags keep counting after stale ones");
}

/// semantics §4: a basic.get poller that takes a message and stalls leaves it to come back after
/// the timeout, exactly once.
#[test]
fn stalled_poller_message_comes_back_exactly_once() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(5_000))]);
    tb.publish(c, "", "q", b"job");
    let stalled = tb.channel();
    tb.call(stalled, BasicGet { queue: short("q"), no_ack: false });
    let worker = tb.channel();
    assert!(matches!(
        methods(&tb.call(worker, BasicGet { queue: short("q"), no_ack: false }))[0],
        Method::BasicGetEmpty(_)
    ));
    tb.advance(ms(5_000));
    let got = tb.call(worker, BasicGet { queue: short("q"), no_ack: false });
    assert!(matches!(&methods(&got)[0], Method::BasicGetOk(ok) if ok.redelivered && ok.message_count == 0));
    ack(&mut tb, worker, 1, false);
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked), (0, 0));
}

/// semantics §4: a consumer can set its own timeout on a queue without one; an invalid one is 406.
#[test]
fn consumer_override_and_its_validation() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let arguments = FieldTable::from_entries([("x-visibility-timeout", int(2_000))]);
    tb.call(c, BasicConsume { queue: short("q"), consumer_tag: short("w"), arguments, ..Default::default() });
    tb.publish(c, "", "q", b"job");
    assert_eq!(deliveries(&tb.advance(ms(2_000))).len(), 1);
    let c2 = tb.channel();
    let bad = FieldTable::from_entries([("x-visibility-timeout", int(10))]);
    let err =
        channel_error(&tb.call(c2, BasicConsume { queue: short("q"), arguments: bad, ..Default::default() }));
    let err = err.expect("406");
    assert_eq!(err.reply_code, 406);
    assert!(err.reply_text.contains("'x-visibility-timeout'"), "{}", err.reply_text);
}

/// Issue 40, item 8 (SQS): a delivery stays invisible at most 12 hours in all from when it was
/// made; a change past that is refused and leaves the timeout as it was.
#[test]
fn visibility_changes_stop_at_twelve_hours_from_the_receive() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(1_000))]);
    consume(&mut tb, c, "q", "w", false);
    let d = deliveries(&tb.publish(c, "", "q", b"job")).remove(0);
    let handle = receipt(&d);
    tb.advance(ms(500));
    let now = tb.clock.now();
    tb.broker
        .change_visibility("/", "q", &handle, 43_200_000, now)
        .expect("12 h counted in whole seconds gone");
    tb.advance(ms(3_600_000));
    let now = tb.clock.now();
    assert_eq!(
        tb.broker.change_visibility("/", "q", &handle, 43_200_000, now),
        Err(VisibilityError::BeyondLimit)
    );
    tb.broker.change_visibility("/", "q", &handle, 39_600_000, now).expect("11 more hours: 12 in all");
    assert!(deliveries(&tb.advance(ms(39_599_999))).is_empty());
    assert_eq!(deliveries(&tb.advance(ms(1))).len(), 1, "back at 12 h");
}

/// semantics §4: deliveries carry x-receipt-handle; the handle extends or ends the invisibility of
/// that one message; a stale or unknown handle is not found.
#[test]
fn receipt_handle_changes_visibility() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-visibility-timeout", int(1_000))]);
    consume(&mut tb, c, "q", "w", false);
    let d = deliveries(&tb.publish(c, "", "q", b"job")).remove(0);
    let handle = receipt(&d);
    let now = tb.clock.now();
    tb.broker.change_visibility("/", "q", &handle, 10_000, now).unwrap();
    assert!(deliveries(&tb.advance(ms(9_999))).is_empty(), "extended");
    let now = tb.clock.now();
    tb.broker.change_visibility("/", "q", &handle, 0, now).unwrap();
    let effects: Vec<Effect> = std::iter::from_fn(|| tb.broker.poll_effect()).collect();
    assert_eq!(deliveries(&effects).len(), 1, "visible at once with 0");
    assert_eq!(tb.broker.change_visibility("/", "q", &handle, 5, now), Err(VisibilityError::HandleNotFound));
    assert_eq!(tb.broker.change_visibility("/", "q", "garbage", 5, now), Err(VisibilityError::HandleInvalid));
    assert_eq!(
        tb.broker.change_visibility("/", "nope", &handle, 5, now),
        Err(VisibilityError::QueueNotFound)
    );
}

/// issue 26: a receipt handle cannot be made from what others can see of a delivery (its
/// connection, channel number and delivery tag are in the channel listings), and a handle of a
/// closed channel does not act on the delivery with the same tag on the channel reopened under
/// its number. Before, handles were `queue.connection.channel.tag`.
#[test]
fn receipt_handles_cannot_be_forged_or_outlive_their_channel() {
    let mut tb = TestBroker::new();
    let admin = tb.channel();
    declare_args(&mut tb, admin, "q", &[("x-visibility-timeout", int(60_000))]);
    let victim = tb.channel();
    consume(&mut tb, victim, "q", "v", false);
    let first = deliveries(&tb.publish(admin, "", "q", b"a")).remove(0);
    let now = tb.clock.now();
    for queue_id in 0..16 {
        let guess =
            format!("{queue_id}.{}.{}.{}", victim.conn.0, victim.channel.0, first.method.delivery_tag);
        assert_eq!(
            tb.broker.change_visibility("/", "q", &guess, 0, now),
            Err(VisibilityError::HandleInvalid),
            "{guess}"
        );
    }
    let effects: Vec<Effect> = std::iter::from_fn(|| tb.broker.poll_effect()).collect();
    assert!(deliveries(&effects).is_empty(), "no guessed handle made the message visible");

    let stale = receipt(&first);
    tb.call(victim, ChannelClose { reply_code: 200, ..Default::default() });
    let reopened = tb.open_channel(victim.conn, victim.channel.0);
    let again = deliveries(&consume(&mut tb, reopened, "q", "v2", false)).remove(0);
    assert_eq!(again.method.delivery_tag, first.method.delivery_tag, "the same tag on the reopened channel");
    let now = tb.clock.now();
    assert_eq!(
        tb.broker.change_visibility("/", "q", &stale, 0, now),
        Err(VisibilityError::HandleNotFound),
        "the closed channel's handle"
    );
    tb.broker.change_visibility("/", "q", &receipt(&again), 0, now).unwrap();
}

/// semantics §5: each nack with requeue counts a failed delivery, shown as x-delivery-count; past
/// x-delivery-limit the message is dead-lettered with reason delivery_limit.
#[test]
fn delivery_limit_dead_letters_with_reason_delivery_limit() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "dlx", "fanout");
    declare(&mut tb, c, "dlq");
    bind(&mut tb, c, "dlq", "dlx", "");
    declare_args(
        &mut tb,
        c,
        "q",
        &[("x-delivery-limit", int(2)), ("x-dead-letter-exchange", FieldValue::LongStr("dlx".into()))],
    );
    consume(&mut tb, c, "q", "w", false);
    let mut delivered = deliveries(&tb.publish(c, "", "q", b"poison"));
    let mut counts = Vec::new();
    for _ in 0..3 {
        let d = delivered.remove(0);
        counts.push(header(&d, "x-delivery-count"));
        delivered = deliveries(
            &tb.call(c, BasicNack { delivery_tag: d.method.delivery_tag, multiple: false, requeue: true }),
        );
    }
    assert_eq!(counts, vec![None, Some(int(1)), Some(int(2))]);
    assert!(delivered.is_empty());
    assert_eq!(stats(&tb, "dlq").messages_ready, 1);
    let c2 = tb.channel();
    let got = tb.call(c2, BasicGet { queue: short("dlq"), no_ack: true });
    let Effect::Send { content: Some(dead), .. } = &got[0] else { panic!("{got:?}") };
    let Some(FieldValue::Array(deaths)) = dead.properties().headers().unwrap().get("x-death") else {
        panic!()
    };
    let Some(FieldValue::Table(first)) = deaths.iter().next() else { panic!() };
    assert_eq!(first.get("reason"), Some(FieldValue::LongStr("delivery_limit".into())));
}

/// semantics §5 (issue 40, item 18): `x-delivery-limit` 0, which RabbitMQ accepts, dead-letters a
/// message on its first return: SQS's `maxReceiveCount` 1.
#[test]
fn delivery_limit_zero_dead_letters_on_the_first_return() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "dlq", &[]);
    let dead_letter = [
        ("x-delivery-limit", int(0)),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text("dlq")),
    ];
    declare_args(&mut tb, c, "q", &dead_letter);
    tb.publish(c, "", "q", b"once");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.call(c, BasicReject { delivery_tag: 1, requeue: true });
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.counters.dead_lettered_delivery_limit), (0, 0, 1));
    assert_eq!(stats(&tb, "dlq").messages_ready, 1);
}

/// semantics §5: a closed channel counts as a failed delivery; without a DLX an over-limit message is dropped.
#[test]
fn channel_close_counts_and_over_limit_without_dlx_drops() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-delivery-limit", int(1))]);
    tb.publish(c, "", "q", b"x");
    for _ in 0..2 {
        let worker = tb.channel();
        tb.call(worker, BasicGet { queue: short("q"), no_ack: false });
        tb.close_connection(worker.conn);
    }
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.messages_delayed), (0, 0, 0));
}

/// semantics §5: a returning message waits min(delay * 2^(count-1), max), counted as delayed.
#[test]
fn redelivery_backoff_doubles_up_to_the_max() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-redelivery-delay", int(100)), ("x-redelivery-delay-max", int(300))]);
    consume(&mut tb, c, "q", "w", false);
    let mut tag = deliveries(&tb.publish(c, "", "q", b"x"))[0].method.delivery_tag;
    for wait in [100u64, 200, 300, 300] {
        assert!(deliveries(&tb.call(c, BasicNack { delivery_tag: tag, multiple: false, requeue: true }))
            .is_empty());
        assert_eq!(stats(&tb, "q").messages_delayed, 1);
        assert!(deliveries(&tb.advance(ms(wait - 1))).is_empty(), "waits {wait} ms");
        let back = deliveries(&tb.advance(ms(1)));
        assert_eq!(back.len(), 1);
        assert!(back[0].method.redelivered);
        tag = back[0].method.delivery_tag;
    }
}

/// semantics §4, §5: argument validation with 406 naming the argument.
#[test]
fn argument_validation() {
    let mut tb = TestBroker::new();
    for (args, name) in [
        (vec![("x-visibility-timeout", int(999))], "x-visibility-timeout"),
        (vec![("x-visibility-timeout", int(43_200_001))], "x-visibility-timeout"),
        (vec![("x-delivery-limit", text("ten"))], "x-delivery-limit"),
        (vec![("x-redelivery-delay-max", int(100))], "x-redelivery-delay-max"),
        (
            vec![("x-redelivery-delay", int(200)), ("x-redelivery-delay-max", int(100))],
            "x-redelivery-delay-max",
        ),
    ] {
        let c = tb.channel();
        let err = channel_error(&declare_args(&mut tb, c, "q", &args)).expect("406");
        assert_eq!(err.reply_code, 406);
        assert!(err.reply_text.contains(&format!("'{name}'")), "{}", err.reply_text);
    }
}

fn text(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

/// Issue 39 (RabbitMQ 4.3's delayed retry): with `x-delayed-retry-type` `all`, min 600 and max
/// 1000, a message rejected with requeue three times comes back after 600, 1000 and 1000 ms
/// (`min × returns`, capped), counted as delayed meanwhile.
#[test]
fn delayed_retry_waits_min_times_returns_up_to_max() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let args = [
        ("x-delayed-retry-type", text("all")),
        ("x-delayed-retry-min", int(600)),
        ("x-delayed-retry-max", int(1_000)),
    ];
    declare_args(&mut tb, c, "q", &args);
    consume(&mut tb, c, "q", "w", false);
    let mut tag = deliveries(&tb.publish(c, "", "q", b"x"))[0].method.delivery_tag;
    for wait in [600u64, 1_000, 1_000] {
        assert!(deliveries(&tb.call(c, BasicReject { delivery_tag: tag, requeue: true })).is_empty());
        assert_eq!(stats(&tb, "q").messages_delayed, 1);
        assert!(deliveries(&tb.advance(ms(wait - 1))).is_empty(), "waits {wait} ms");
        let back = deliveries(&tb.advance(ms(1)));
        assert_eq!(back.len(), 1, "back after {wait} ms");
        assert!(back[0].method.redelivered);
        tag = back[0].method.delivery_tag;
    }
}

/// Issue 39: `failed` holds back only what basic.reject returns (RabbitMQ 4.3's failures);
/// `returned` only the other returns: basic.nack with requeue, recover, a closed channel. The
/// maximum defaults to the minimum.
#[test]
fn delayed_retry_failed_and_returned_tell_reject_from_nack() {
    for (kind, reject_waits, nack_waits) in [("failed", true, false), ("returned", false, true)] {
        let mut tb = TestBroker::new();
        let c = tb.channel();
        declare_args(
            &mut tb,
            c,
            "q",
            &[("x-delayed-retry-type", text(kind)), ("x-delayed-retry-min", int(500))],
        );
        consume(&mut tb, c, "q", "w", false);
        let tag = deliveries(&tb.publish(c, "", "q", b"x"))[0].method.delivery_tag;
        let back = deliveries(&tb.call(c, BasicReject { delivery_tag: tag, requeue: true }));
        assert_eq!(back.is_empty(), reject_waits, "{kind}: reject");
        let tag = if reject_waits {
            assert!(deliveries(&tb.advance(ms(499))).is_empty());
            deliveries(&tb.advance(ms(1)))[0].method.delivery_tag
        } else {
            back[0].method.delivery_tag
        };
        let back = deliveries(&tb.call(c, BasicNack { delivery_tag: tag, multiple: false, requeue: true }));
        assert_eq!(back.is_empty(), nack_waits, "{kind}: nack");
        if nack_waits {
            // Two returns so far: 2 × 500, capped by the maximum, which defaulted to 500.
            assert!(deliveries(&tb.advance(ms(499))).is_empty());
            assert_eq!(deliveries(&tb.advance(ms(1))).len(), 1, "{kind}: back after 500 ms");
        }
    }
}

/// Issue 39: a delivery whose channel closes is a failure to RabbitMQ 4.3: `failed` holds it
/// back, `returned` does not.
#[test]
fn delayed_retry_counts_a_closed_channel_as_a_failure() {
    for (kind, waits) in [("failed", true), ("returned", false)] {
        let mut tb = TestBroker::new();
        let c = tb.channel();
        declare_args(
            &mut tb,
            c,
            "q",
            &[("x-delayed-retry-type", text(kind)), ("x-delayed-retry-min", int(400))],
        );
        let holder = tb.channel();
        consume(&mut tb, holder, "q", "w", false);
        assert_eq!(deliveries(&tb.publish(c, "", "q", b"x")).len(), 1);
        tb.call(holder, ChannelClose::default());
        assert_eq!(stats(&tb, "q").messages_delayed, usize::from(waits), "{kind}");
        if waits {
            tb.advance(ms(399));
            assert_eq!(stats(&tb, "q").messages_ready, 0);
            tb.advance(ms(1));
        }
        assert_eq!(stats(&tb, "q").messages_ready, 1, "{kind}");
    }
}

/// Issue 39: the delayed-retry arguments are checked as RabbitMQ 4.3 checks them, with a 406
/// naming the argument.
#[test]
fn delayed_retry_arguments_are_validated() {
    let mut tb = TestBroker::new();
    for (args, name) in [
        (
            vec![("x-delayed-retry-type", text("sometimes")), ("x-delayed-retry-min", int(5))],
            "x-delayed-retry-type",
        ),
        (vec![("x-delayed-retry-type", text("all"))], "x-delayed-retry-min"),
        (vec![("x-delayed-retry-type", text("all")), ("x-delayed-retry-min", int(0))], "x-delayed-retry-min"),
        (
            vec![
                ("x-delayed-retry-type", text("all")),
                ("x-delayed-retry-min", int(500)),
                ("x-delayed-retry-max", int(100)),
            ],
            "x-delayed-retry-max",
        ),
    ] {
        let c = tb.channel();
        let err = channel_error(&declare_args(&mut tb, c, "q", &args)).expect("406");
        assert_eq!(err.reply_code, 406);
        assert!(err.reply_text.contains(&format!("'{name}'")), "{}", err.reply_text);
    }
    let c = tb.channel();
    assert!(channel_error(&declare_args(&mut tb, c, "q", &[("x-delayed-retry-type", text("disabled"))]))
        .is_none());
}

fn cancels(effects: &[Effect]) -> Vec<BasicCancel> {
    methods(effects)
        .into_iter()
        .filter_map(|m| match m {
            Method::BasicCancel(cancel) => Some(cancel),
            _ => None,
        })
        .collect()
}

fn consume_args(
    tb: &mut TestBroker,
    c: Chan,
    queue: &str,
    tag: &str,
    args: &[(&str, FieldValue)],
) -> Vec<Effect> {
    let arguments = FieldTable::from_entries(args.iter().cloned());
    tb.call(
        c,
        BasicConsume { queue: short(queue), consumer_tag: short(tag), arguments, ..Default::default() },
    )
}

/// The 406 RabbitMQ closes a channel with when a delivery's ack timed out.
fn timed_out_text(channel: u16, ms: u64) -> String {
    format!(
        "PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. Timeout value used: {ms} ms. \
         This timeout value can be configured, see consumers doc guide to learn more"
    )
}

/// Issue 39 (RabbitMQ 4.3's consumer timeout): a delivery not acked within the queue's
/// `x-consumer-timeout` comes back to the queue, the consumer gets basic.cancel (its client
/// announced consumer_cancel_notify) and the channel stays open; a late ack is ignored, and the
/// message goes to the next consumer.
#[test]
fn consumer_timeout_returns_the_delivery_and_cancels_the_consumer() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(1_000))]);
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"job");
    let early = tb.advance(ms(999));
    assert!(cancels(&early).is_empty() && channel_error(&early).is_none());
    let due = tb.advance(ms(1));
    assert_eq!(cancels(&due), vec![BasicCancel { consumer_tag: short("w"), nowait: true }]);
    assert!(channel_error(&due).is_none(), "the channel stays open");
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.consumers), (1, 0, 0));
    assert!(channel_error(&ack(&mut tb, c, 1, false)).is_none(), "a late ack is ignored");
    // The client's cancel-ok (RabbitMQ 4.4's accept_consumer_cancel_ok) is accepted, not an error.
    let ok = tb.call(c, BasicCancelOk { consumer_tag: short("w") });
    assert!(channel_error(&ok).is_none() && connection_error(&ok).is_none());
    let next = deliveries(&consume(&mut tb, c, "q", "w2", false));
    assert_eq!(next.len(), 1);
    assert!(next[0].method.redelivered);
    assert_eq!(next[0].body(), b"job");
    assert!(header(&next[0], "x-receipt-handle").is_none(), "no receipt handle: not a visibility timeout");
}

/// Issue 42 (RabbitMQ 4.3 for AMQP 1.0): on a channel of an AMQP 1.0 connection (a link) a
/// timed-out delivery comes back to the queue and the link is told which (`Effect::TimedOut`,
/// which it turns into a `released` disposition); the consumer is not cancelled and the channel
/// stays open, so the message comes back to the same consumer.
#[test]
fn an_amqp1_consumer_is_told_of_its_timed_out_delivery_and_goes_on() {
    let mut tb = TestBroker::new();
    let conn = tb.connect_amqp1();
    let c = tb.open_channel(conn, 1);
    declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(1_000))]);
    consume(&mut tb, c, "q", "link", false);
    tb.publish(c, "", "q", b"job");
    assert!(tb.advance(ms(999)).iter().all(|e| !matches!(e, Effect::TimedOut { .. })));
    let due = tb.advance(ms(1));
    let timed_out: Vec<u64> = due
        .iter()
        .filter_map(|e| match e {
            Effect::TimedOut { channel, delivery_tag, .. } if *channel == c.channel => Some(*delivery_tag),
            _ => None,
        })
        .collect();
    assert_eq!(timed_out, [1]);
    assert!(cancels(&due).is_empty() && channel_error(&due).is_none());
    let again = deliveries(&due);
    assert_eq!(again.len(), 1, "back to the same consumer at once: {due:?}");
    assert!(again[0].method.redelivered);
    assert_eq!(again[0].method.delivery_tag, 2);
    assert!(channel_error(&ack(&mut tb, c, 1, false)).is_none(), "the stale tag is ignored");
    ack(&mut tb, c, 2, false);
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.consumers), (0, 0, 1));
}

/// Issue 42 (RabbitMQ 4.3): a delivery handed back with a time of its own (`Command::Modify`,
/// an AMQP 1.0 `modified` outcome naming `x-opt-delivery-time`) waits until then, counted as
/// delayed, whatever the queue's back-off says, and comes back redelivered; over the delivery
/// limit it is dead-lettered at once; a time already past is none.
#[test]
fn a_delivery_returned_with_a_ready_time_waits_for_it() {
    let mut tb = TestBroker::new();
    let conn = tb.connect_amqp1();
    let c = tb.open_channel(conn, 1);
    declare_args(&mut tb, c, "q", &[("x-delivery-limit", int(1))]);
    consume(&mut tb, c, "q", "link", false);
    tb.publish(c, "", "q", b"job");
    let ready_at = hourglass_broker::Timestamp::from_millis(tb.clock.now().as_millis() + 5_000);
    let back = tb.command(return_at(conn, c.channel, 1, true, ready_at));
    assert!(deliveries(&back).is_empty() && channel_error(&back).is_none());
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.messages_delayed), (0, 0, 1));
    assert!(deliveries(&tb.advance(ms(4_999))).is_empty(), "never early");
    let again = deliveries(&tb.advance(ms(1)));
    assert_eq!(again.len(), 1);
    assert!(again[0].method.redelivered);
    // A second failure is over the limit of 1: dead-lettered (dropped here) at once, not held.
    let later = hourglass_broker::Timestamp::from_millis(tb.clock.now().as_millis() + 5_000);
    let gone = tb.command(return_at(conn, c.channel, 2, true, later));
    assert!(channel_error(&gone).is_none());
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.messages_delayed), (0, 0, 0));
    // An unknown tag is basic.reject's channel error.
    let unknown = tb.command(return_at(conn, c.channel, 9, false, ready_at));
    assert_eq!(channel_error(&unknown).map(|e| e.reply_code), Some(406));
}

/// Issue 39: a consumer's `x-consumer-timeout` beats the queue's; without
/// consumer_cancel_notify the channel is closed with RabbitMQ's 406, and the message is back.
#[test]
fn consumer_argument_beats_the_queue_and_a_client_without_cancel_notify_loses_the_channel() {
    let mut tb = TestBroker::new();
    let conn =
        tb.connect_with(ClientCapabilities { consumer_cancel_notify: false, connection_blocked: true });
    let c = tb.open_channel(conn, 1);
    declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(60_000))]);
    consume_args(&mut tb, c, "q", "w", &[("x-consumer-timeout", int(2_000))]);
    tb.publish(c, "", "q", b"job");
    assert!(channel_error(&tb.advance(ms(1_999))).is_none());
    let due = tb.advance(ms(1));
    assert!(cancels(&due).is_empty());
    let err = channel_error(&due).expect("406");
    assert_eq!((err.reply_code, err.reply_text.as_str()), (406, timed_out_text(1, 2_000).as_str()));
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked, s.consumers), (1, 0, 0));
}

/// Issue 39: a basic.get delivery under the queue's consumer timeout closes the channel when it
/// runs out, as RabbitMQ's (its consumer tag is no consumer to cancel).
#[test]
fn a_timed_out_get_closes_the_channel() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(1_000))]);
    tb.publish(c, "", "q", b"job");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    let err = channel_error(&tb.advance(ms(1_000))).expect("406");
    assert_eq!(err.reply_text, timed_out_text(c.channel.0, 1_000));
    assert_eq!(stats(&tb, "q").messages_ready, 1);
}

/// Issue 39: without a timeout of its own a delivery has the broker's, RabbitMQ's 30 minutes,
/// counted from each delivery; the consumer is cancelled once, and its later deliveries come back
/// quietly. Switched off, deliveries wait for ever.
#[test]
fn the_broker_default_times_out_each_delivery_after_thirty_minutes() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[]);
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"one");
    tb.advance(ms(10_000));
    tb.publish(c, "", "q", b"two");
    let early = tb.advance(ms(1_800_000 - 10_001));
    assert!(cancels(&early).is_empty());
    assert_eq!(stats(&tb, "q").messages_unacked, 2);
    let first = tb.advance(ms(1));
    assert_eq!(cancels(&first).len(), 1);
    assert!(channel_error(&first).is_none());
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_unacked), (1, 1), "only the first ran out");
    let second = tb.advance(ms(10_000));
    assert!(cancels(&second).is_empty() && channel_error(&second).is_none(), "told once");
    assert_eq!(stats(&tb, "q").messages_ready, 2);

    let config = ConsumerTimeoutConfig { default_ms: None, ..Default::default() };
    let mut tb = TestBroker::with_config(BrokerConfig { consumer_timeout: config, ..Default::default() });
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[]);
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"job");
    assert_eq!(tb.broker.next_deadline(), None, "nothing to time out");
    assert!(cancels(&tb.advance(ms(86_400_000))).is_empty());
    assert_eq!(stats(&tb, "q").messages_unacked, 1);
}

/// Issue 39 (RabbitMQ 4.4's consumer_timeout_response = close_channel, 3.x's behaviour): the
/// channel is closed even for a client that takes basic.cancel.
#[test]
fn close_channel_response_closes_the_channel() {
    let config = ConsumerTimeoutConfig { default_ms: Some(5_000), response: TimeoutResponse::CloseChannel };
    let mut tb = TestBroker::with_config(BrokerConfig { consumer_timeout: config, ..Default::default() });
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[]);
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"job");
    let due = tb.advance(ms(5_000));
    assert!(cancels(&due).is_empty());
    assert_eq!(channel_error(&due).expect("406").reply_text, timed_out_text(c.channel.0, 5_000));
}

/// Issue 39: a consumer timeout is a return, not a failure (RabbitMQ 4.3): delayed retry of type
/// `returned` holds it back, of type `failed` does not.
#[test]
fn a_consumer_timeout_is_a_return_to_delayed_retry() {
    for (kind, back_after) in [("returned", 500), ("failed", 0)] {
        let mut tb = TestBroker::new();
        let c = tb.channel();
        declare_args(
            &mut tb,
            c,
            "q",
            &[
                ("x-consumer-timeout", int(1_000)),
                ("x-delayed-retry-type", FieldValue::LongStr(kind.into())),
                ("x-delayed-retry-min", int(500)),
            ],
        );
        consume(&mut tb, c, "q", "w", false);
        tb.publish(c, "", "q", b"job");
        tb.advance(ms(1_000));
        let c2 = tb.channel();
        let at_once = deliveries(&consume(&mut tb, c2, "q", "w2", false));
        if back_after == 0 {
            assert_eq!(at_once.len(), 1, "{kind}: back at once");
        } else {
            assert!(at_once.is_empty(), "{kind}: held back");
            assert!(deliveries(&tb.advance(ms(back_after - 1))).is_empty());
            assert_eq!(deliveries(&tb.advance(ms(1))).len(), 1, "{kind}: back after {back_after} ms");
        }
    }
}

/// A delivery the broker's default consumer timeout takes back quietly (its consumer was already
/// cancelled by an earlier one) into a back-off comes back when the back-off ends. The sweep
/// returned it without filing its queue's timer, so it stayed delayed until some other event
/// touched the queue.
#[test]
fn a_quiet_default_timeout_into_a_back_off_comes_back_when_it_ends() {
    let config = ConsumerTimeoutConfig { default_ms: Some(1_000), ..Default::default() };
    let mut tb = TestBroker::with_config(BrokerConfig { consumer_timeout: config, ..Default::default() });
    let c = tb.channel();
    let retry =
        [("x-delayed-retry-type", FieldValue::LongStr("returned".into())), ("x-delayed-retry-min", int(500))];
    declare_args(&mut tb, c, "q", &retry);
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"one");
    tb.advance(ms(500));
    tb.publish(c, "", "q", b"two");
    assert_eq!(cancels(&tb.advance(ms(500))).len(), 1, "the first timeout cancels the consumer");
    tb.advance(ms(500));
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_delayed), (1, 1), "one is back, two in its back-off");
    tb.advance(ms(500));
    let s = stats(&tb, "q");
    assert_eq!((s.messages_ready, s.messages_delayed), (2, 0), "two is back once its back-off ends");
}

/// Issue 39: `x-consumer-timeout` is a non-negative integer, as a queue and as a consumer
/// argument, refused in RabbitMQ's words otherwise.
#[test]
fn consumer_timeout_arguments_are_validated() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(&declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(-1))])).expect("406");
    assert_eq!(
        (err.reply_code, err.reply_text.as_str()),
        (406, "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/': {value_negative,-1}")
    );
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[]);
    let bad =
        consume_args(&mut tb, c, "q", "w", &[("x-consumer-timeout", FieldValue::LongStr("soon".into()))]);
    let err = channel_error(&bad).expect("406");
    assert_eq!(err.reply_code, 406);
    assert!(
        err.reply_text.contains("invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/'"),
        "{}",
        err.reply_text
    );
}

/// Issue 39: RabbitMQ 4.3 counts failures only toward `x-delivery-limit` (basic.nack with
/// requeue and basic.recover do not count); 3.x and 4.0–4.2 count every return, which stays the
/// default. A visibility timeout counts in both (SQS counts every receive).
#[test]
fn delivery_counting_every_return_or_failures_only() {
    use hourglass_broker::queue::DeliveryCounting;
    let nacks_until_gone = |counting: DeliveryCounting, requeue_with: &str| -> usize {
        let mut tb =
            TestBroker::with_config(BrokerConfig { delivery_counting: counting, ..Default::default() });
        let c = tb.channel();
        declare_args(&mut tb, c, "q", &[("x-delivery-limit", int(3))]);
        tb.publish(c, "", "q", b"job");
        for returns in 0..50 {
            let got = tb.call(c, BasicGet { queue: short("q"), no_ack: false });
            let Some(tag) = methods(&got).iter().find_map(|m| match m {
                Method::BasicGetOk(ok) => Some(ok.delivery_tag),
                _ => None,
            }) else {
                return returns;
            };
            match requeue_with {
                "nack" => tb.call(c, BasicNack { delivery_tag: tag, multiple: false, requeue: true }),
                "reject" => tb.call(c, BasicReject { delivery_tag: tag, requeue: true }),
                _ => tb.call(c, BasicRecover { requeue: true }),
            };
        }
        50
    };
    assert_eq!(nacks_until_gone(DeliveryCounting::EveryReturn, "nack"), 4, "3.x: every nack counts");
    assert_eq!(nacks_until_gone(DeliveryCounting::EveryReturn, "recover"), 4);
    assert_eq!(nacks_until_gone(DeliveryCounting::FailuresOnly, "nack"), 50, "4.3: nacks do not count");
    assert_eq!(nacks_until_gone(DeliveryCounting::FailuresOnly, "recover"), 50);
    assert_eq!(nacks_until_gone(DeliveryCounting::FailuresOnly, "reject"), 4, "4.3: a reject is a failure");

    let config = BrokerConfig { delivery_counting: DeliveryCounting::FailuresOnly, ..Default::default() };
    let mut tb = TestBroker::with_config(config);
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-delivery-limit", int(1)), ("x-visibility-timeout", int(1_000))]);
    tb.publish(c, "", "q", b"job");
    for _ in 0..2 {
        tb.call(c, BasicGet { queue: short("q"), no_ack: false });
        tb.advance(ms(1_000));
    }
    assert_eq!(stats(&tb, "q").messages_ready, 0, "the second visibility timeout is over the limit");
}

/// Issue 39 ("no silent ignore"): RabbitMQ 4.x's `x-consumer-disconnected-timeout` is refused by
/// name as a queue argument, and `consumer-disconnected-timeout` as a policy key, never accepted
/// and ignored.
#[test]
fn consumer_disconnected_timeout_is_refused_by_name() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err =
        channel_error(&declare_args(&mut tb, c, "q", &[("x-consumer-disconnected-timeout", int(60_000))]))
            .expect("406");
    assert_eq!(err.reply_code, 406);
    assert!(
        err.reply_text.contains("invalid arg 'x-consumer-disconnected-timeout' for queue 'q'"),
        "{}",
        err.reply_text
    );
    let refused = set_queue_policy(&mut tb, "p", ".*", &[("consumer-disconnected-timeout", int(60_000))]);
    assert!(
        matches!(&refused, Err(hourglass_broker::policy::PolicyError::Invalid(why)) if why.contains("consumer-disconnected-timeout")),
        "{refused:?}"
    );
}

/// Issue 39 (LavinMQ's automatic retries): `x-delayed-retry-min` alone switches retries on for
/// rejects and nacks, linear without a maximum; `x-delayed-retry-multiplier` 2 doubles the wait
/// (capped by `x-delayed-retry-max`), 1 keeps it constant; and such a queue has a delivery limit
/// of 20, as LavinMQ's.
#[test]
fn lavinmq_retries_min_alone_and_the_multiplier() {
    for (args, waits) in [
        (vec![("x-delayed-retry-min", int(100))], vec![100u64, 200, 300, 400]),
        (
            vec![
                ("x-delayed-retry-min", int(100)),
                ("x-delayed-retry-multiplier", int(2)),
                ("x-delayed-retry-max", int(500)),
            ],
            vec![100, 200, 400, 500],
        ),
        (
            vec![("x-delayed-retry-min", int(100)), ("x-delayed-retry-multiplier", int(1))],
            vec![100, 100, 100],
        ),
        (
            vec![
                ("x-delayed-retry-type", text("all")),
                ("x-delayed-retry-min", int(100)),
                ("x-delayed-retry-multiplier", int(3)),
                ("x-delayed-retry-max", int(10_000)),
            ],
            vec![100, 300, 900],
        ),
    ] {
        let mut tb = TestBroker::new();
        let c = tb.channel();
        declare_args(&mut tb, c, "q", &args);
        consume(&mut tb, c, "q", "w", false);
        let mut tag = deliveries(&tb.publish(c, "", "q", b"x"))[0].method.delivery_tag;
        for (at, wait) in waits.iter().enumerate() {
            // Nacks and rejects alike.
            let returned = if at % 2 == 0 {
                tb.call(c, BasicReject { delivery_tag: tag, requeue: true })
            } else {
                tb.call(c, BasicNack { delivery_tag: tag, multiple: false, requeue: true })
            };
            assert!(deliveries(&returned).is_empty(), "{args:?}: held back");
            assert!(deliveries(&tb.advance(ms(wait - 1))).is_empty(), "{args:?}: waits {wait} ms");
            let back = deliveries(&tb.advance(ms(1)));
            assert_eq!(back.len(), 1, "{args:?}: back after {wait} ms");
            tag = back[0].method.delivery_tag;
        }
    }
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-delayed-retry-min", int(1))]);
    tb.publish(c, "", "q", b"x");
    let mut deliveries_made = 0;
    for _ in 0..40 {
        let got = tb.call(c, BasicGet { queue: short("q"), no_ack: false });
        let tag = methods(&got).iter().find_map(|m| match m {
            Method::BasicGetOk(ok) => Some(ok.delivery_tag),
            _ => None,
        });
        if let Some(tag) = tag {
            deliveries_made += 1;
            tb.call(c, BasicReject { delivery_tag: tag, requeue: true });
        }
        tb.advance(ms(100));
    }
    assert_eq!(deliveries_made, 21, "LavinMQ's delivery limit of 20 with retries on");
    let err = channel_error(&declare_args(&mut tb, c, "bad", &[("x-delayed-retry-multiplier", int(0))]))
        .expect("406");
    assert!(err.reply_text.contains("'x-delayed-retry-multiplier'"), "{}", err.reply_text);
}
