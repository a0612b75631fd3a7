//! Quorum queues as RabbitMQ 4.x serves them (issue 39): 32 strict priorities without
//! `x-max-priority`, and a delivery limit of 20 unless an argument or policy sets one.

mod common;

use common::*;
use hourglass_broker::Effect;
use hourglass_testkit::{short, Chan, TestBroker};
use hourglass_wire::*;

fn quorum(tb: &mut TestBroker, c: Chan, name: &str, args: &[(&str, FieldValue)]) {
    let mut entries = vec![("x-queue-type", FieldValue::LongStr("quorum".into()))];
    entries.extend(args.iter().cloned());
    let arguments = FieldTable::from_entries(entries);
    declare_with(tb, c, QueueDeclare { queue: short(name), durable: true, arguments, ..Default::default() });
}

fn publish_priority(tb: &mut TestBroker, c: Chan, queue: &str, priority: Option<u8>, body: &str) {
    let properties = BasicProperties { priority, ..Default::default() };
    tb.publish_with(c, "", queue, properties, body.as_bytes(), false);
}

/// basic.get: the delivery tag and the message, or `None` on get-empty.
fn get(
    tb: &mut TestBroker,
    c: Chan,
    queue: &str,
) -> Option<(u64, std::sync::Arc<hourglass_broker::Message>)> {
    let effects = tb.call(c, BasicGet { queue: short(queue), no_ack: false });
    effects.into_iter().find_map(|e| match e {
        Effect::Send { method, content: Some(message), .. } => match method.as_ref() {
            Method::BasicGetOk(ok) => Some((ok.delivery_tag, message)),
            _ => None,
        },
        _ => None,
    })
}

/// RabbitMQ 4.3: priorities 1, 9, 3, 31, 0 come out 31, 9, 3, 1, 0 on a quorum queue without
/// `x-max-priority`; a message without a priority sits at 4, one above 31 counts as 31; the API
/// counts ready messages per priority. A classic queue without `x-max-priority` stays FIFO.
#[test]
fn a_quorum_queue_delivers_by_32_strict_priorities() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    quorum(&mut tb, c, "qq", &[]);
    declare(&mut tb, c, "classic");
    let sent = [
        (Some(1), "p1"),
        (Some(9), "p9"),
        (Some(3), "p3"),
        (Some(31), "p31"),
        (Some(0), "p0"),
        (None, "none"),
        (Some(200), "p200"),
    ];
    for (priority, body) in sent {
        publish_priority(&mut tb, c, "qq", priority, body);
        publish_priority(&mut tb, c, "classic", priority, body);
    }
    let stats = tb.broker.queue_stats("/", "qq").unwrap();
    assert_eq!(stats.messages_by_priority, vec![(31, 2), (9, 1), (4, 1), (3, 1), (1, 1), (0, 1)]);
    assert!(tb.broker.queue_stats("/", "classic").unwrap().messages_by_priority.is_empty());
    let order = |tb: &mut TestBroker, queue: &str| {
        let got = std::iter::from_fn(|| get(tb, c, queue))
            .map(|(_, m)| String::from_utf8_lossy(&m.body).into_owned());
        got.collect::<Vec<_>>()
    };
    assert_eq!(order(&mut tb, "qq"), ["p31", "p200", "p9", "none", "p3", "p1", "p0"]);
    assert_eq!(order(&mut tb, "classic"), ["p1", "p9", "p3", "p31", "p0", "none", "p200"]);
}

/// RabbitMQ 4.0+: a quorum queue without `x-delivery-limit` dead-letters a message on its 21st
/// failed delivery (reason `delivery_limit`); a negative limit, as argument or policy, lifts it;
/// a policy lowers the argument's limit, and a negative one gives way to the other; a classic
/// queue has no default.
#[test]
fn a_quorum_queue_has_a_default_delivery_limit_of_20() {
    let rejects_until_gone = |args: &[(&str, FieldValue)], policy: Option<i64>, classic: bool| -> usize {
        let mut tb = TestBroker::new();
        let c = tb.channel();
        declare(&mut tb, c, "dlq");
        declare_exchange(&mut tb, c, "dlx", "fanout");
        bind(&mut tb, c, "dlq", "dlx", "");
        let mut all = vec![("x-dead-letter-exchange", FieldValue::LongStr("dlx".into()))];
        all.extend(args.iter().cloned());
        if classic {
            tb.call(
                c,
                QueueDeclare {
                    queue: short("q"),
                    arguments: FieldTable::from_entries(all),
                    ..Default::default()
                },
            );
        } else {
            quorum(&mut tb, c, "q", &all);
        }
        if let Some(limit) = policy {
            set_queue_policy(&mut tb, "limit", "^q$", &[("delivery-limit", FieldValue::I64(limit))])
                .expect("policy accepted");
        }
        tb.publish(c, "", "q", b"poison");
        for rejects in 0..60 {
            let Some((tag, _)) = get(&mut tb, c, "q") else { return rejects };
            tb.call(c, BasicReject { delivery_tag: tag, requeue: true });
        }
        60
    };
    assert_eq!(rejects_until_gone(&[], None, false), 21, "dead-lettered on the 21st failure");
    assert_eq!(
        rejects_until_gone(&[("x-delivery-limit", FieldValue::I64(-1))], None, false),
        60,
        "-1: no limit"
    );
    assert_eq!(rejects_until_gone(&[], Some(-1), false), 60, "a policy lifts the default");
    assert_eq!(rejects_until_gone(&[], Some(3), false), 4, "a policy sets it");
    assert_eq!(
        rejects_until_gone(&[("x-delivery-limit", FieldValue::I64(10))], Some(3), false),
        4,
        "the lower wins"
    );
    // RabbitMQ 4.x's resolve_delivery_limit: with a negative one, the higher of the two.
    assert_eq!(
        rejects_until_gone(&[("x-delivery-limit", FieldValue::I64(-1))], Some(3), false),
        4,
        "a negative gives way"
    );
    assert_eq!(rejects_until_gone(&[], None, true), 60, "a classic queue has no default");
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "dlq");
    declare_exchange(&mut tb, c, "dlx", "fanout");
    bind(&mut tb, c, "dlq", "dlx", "");
    quorum(&mut tb, c, "q", &[("x-dead-letter-exchange", FieldValue::LongStr("dlx".into()))]);
    tb.publish(c, "", "q", b"poison");
    while let Some((tag, _)) = get(&mut tb, c, "q") {
        tb.call(c, BasicReject { delivery_tag: tag, requeue: true });
    }
    let (_, dead) = get(&mut tb, c, "dlq").expect("dead-lettered");
    let deaths = match dead.properties().headers().and_then(|h| h.get("x-death")) {
        Some(FieldValue::Array(deaths)) => deaths,
        other => panic!("{other:?}"),
    };
    let Some(FieldValue::Table(first)) = deaths.iter().next() else { panic!("{deaths:?}") };
    assert_eq!(first.get("reason"), Some(FieldValue::LongStr("delivery_limit".into())));
}

/// RabbitMQ 3.10 and 4.3 refuse `x-max-priority` on a quorum queue, in these words (measured on
/// 3.10.8): accepting it would ignore it, since a quorum queue's levels are fixed.
#[test]
fn x_max_priority_on_a_quorum_queue_is_refused_by_name() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([
        ("x-queue-type", FieldValue::LongStr("quorum".into())),
        ("x-max-priority", FieldValue::I64(10)),
    ]);
    let effects =
        tb.call(c, QueueDeclare { queue: short("qq"), durable: true, arguments, ..Default::default() });
    let err = channel_error(&effects).expect("406");
    assert_eq!(
        (err.reply_code, err.reply_text.as_str()),
        (406, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'qq' in vhost '/' of queue type rabbit_quorum_queue")
    );
}
