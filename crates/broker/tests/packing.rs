//! Packing (ADR 0015) without I/O: a queue past its resident limits keeps small transient
//! messages as their record bytes, and they behave exactly as messages kept whole: delivered in
//! order with their bytes, expired and dead-lettered with their content, purged, and counted as
//! in memory by the management figures.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::PagingLimits;
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn setup(arguments: FieldTable) -> (TestBroker, Chan) {
    let mut tb = TestBroker::new();
    tb.broker.set_paging_limits(PagingLimits { max_resident_messages: 2, max_resident_bytes: 1 << 20 });
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("q"), arguments, ..Default::default() });
    (tb, c)
}

fn properties(n: usize) -> BasicProperties {
    BasicProperties {
        content_type: Some(short("text/plain")),
        message_id: Some(short(&format!("m{n}"))),
        headers: Some(FieldTable::from_entries([("n", FieldValue::I64(n as i64))])),
        ..Default::default()
    }
}

fn publish_n(tb: &mut TestBroker, c: Chan, n: usize) {
    for i in 0..n {
        tb.publish_with(c, "", "q", properties(i), format!("body {i}").as_bytes(), false);
    }
}

/// Every message, packed or not, is delivered in order with its properties and routing, and the
/// management figures count all of them in memory and none paged out.
#[test]
fn packed_messages_are_delivered_exactly_and_counted_in_memory() {
    let (mut tb, c) = setup(FieldTable::new());
    publish_n(&mut tb, c, 8);
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram, stats.messages_paged_out()), (8, 8, 0));
    assert_eq!(stats.message_bytes_ready_ram, numbered_bodies(0..8).iter().map(String::len).sum::<usize>());
    let effects = consume(&mut tb, c, "q", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(0..8));
    for (i, d) in deliveries(&effects).iter().enumerate() {
        let sent: EncodedProperties = properties(i).into();
        assert_eq!(d.message.properties().decode(), sent.decode());
        assert_eq!((d.method.routing_key.as_bytes(), d.method.exchange.as_bytes()), (&b"q"[..], &b""[..]));
    }
}

/// Packed messages expire on time and are dead-lettered with their content and x-death.
#[test]
fn packed_messages_expire_and_are_dead_lettered() {
    let (mut tb, c) = setup(FieldTable::from_entries([
        ("x-message-ttl", FieldValue::I64(1000)),
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]));
    tb.call(c, QueueDeclare { queue: short("dlq"), ..Default::default() });
    publish_n(&mut tb, c, 6);
    tb.advance(Duration::from_millis(999));
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 6);
    tb.advance(Duration::from_millis(1));
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 0);
    let effects = consume(&mut tb, c, "dlq", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(0..6));
    for d in deliveries(&effects) {
        let headers = d.message.properties().decode().headers.unwrap();
        assert!(matches!(headers.get("x-death"), Some(FieldValue::Array(deaths)) if deaths.len() == 1));
    }
}

/// Requeued messages go back to their place among packed ones; a purge counts packed ones.
#[test]
fn requeue_and_purge_with_packed_messages() {
    let (mut tb, c) = setup(FieldTable::new());
    publish_n(&mut tb, c, 5);
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    assert!(matches!(methods(&got).as_slice(), [Method::BasicGetOk(_)]));
    tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    let effects = consume(&mut tb, c, "q", "ctag", false);
    assert_eq!(body_texts(&effects), numbered_bodies(0..5));
    let redelivered: Vec<bool> = deliveries(&effects).iter().map(|d| d.method.redelivered).collect();
    assert_eq!(redelivered, [true, false, false, false, false]);
    tb.call(c, BasicCancel { consumer_tag: short("ctag"), ..Default::default() });
    ack(&mut tb, c, 6, true);
    publish_n(&mut tb, c, 5);
    let purged = tb.call(c, QueuePurge { queue: short("q"), ..Default::default() });
    assert!(matches!(methods(&purged).as_slice(), [Method::QueuePurgeOk(ok)] if ok.message_count == 5));
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram, stats.message_bytes_ready_ram), (0, 0, 0));
}
