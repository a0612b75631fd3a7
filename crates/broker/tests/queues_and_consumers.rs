//! Queues, consumers, acknowledgements and prefetch, driven through the broker core.

mod common;

use common::*;
use hourglass_broker::Effect;
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// A message published to the default exchange reaches the queue named by its routing key and is
/// delivered to its consumer with delivery tag 1.
#[test]
fn default_exchange_routes_by_queue_name() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    consume(&mut tb, c, "jobs", "worker", false);
    let effects = tb.publish(c, "", "jobs", b"hello");
    let d = deliveries(&effects);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].body(), b"hello");
    assert_eq!(d[0].method.delivery_tag, 1);
    assert_eq!(d[0].method.consumer_tag, "worker");
    assert!(!d[0].method.redelivered);
}

/// Messages are spread round robin across a queue's consumers.
#[test]
fn consumers_receive_round_robin() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    consume(&mut tb, c, "q", "a", true);
    consume(&mut tb, c, "q", "b", true);
    let tags: Vec<String> = (0..4)
        .flat_map(|i| deliveries(&tb.publish(c, "", "q", &[i])))
        .map(|d| d.method.consumer_tag.to_string())
        .collect();
    assert_eq!(tags, ["a", "b", "a", "b"]);
}

/// basic.qos prefetch-count (per consumer) stops deliveries until an ack frees credit.
#[test]
fn prefetch_limits_unacked_deliveries() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(c, BasicQos { prefetch_count: 2, ..Default::default() });
    consume(&mut tb, c, "q", "w", false);
    let delivered: usize = (0..5).map(|i| deliveries(&tb.publish(c, "", "q", &[i])).len()).sum();
    assert_eq!(delivered, 2);
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 3);
    let after_ack = ack(&mut tb, c, 1, false);
    assert_eq!(bodies(&after_ack), vec![vec![2u8]]);
}

/// basic.qos global=true shares one limit among all consumers of the channel.
#[test]
fn global_prefetch_is_shared_by_the_channel() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q1");
    declare(&mut tb, c, "q2");
    tb.call(c, BasicQos { prefetch_count: 1, global: true, ..Default::default() });
    consume(&mut tb, c, "q1", "a", false);
    consume(&mut tb, c, "q2", "b", false);
    assert_eq!(deliveries(&tb.publish(c, "", "q1", b"1")).len(), 1);
    assert_eq!(deliveries(&tb.publish(c, "", "q2", b"2")).len(), 0);
    let freed = ack(&mut tb, c, 1, false);
    assert_eq!(bodies(&freed), vec![b"2".to_vec()]);
}

/// A quorum queue refuses a consumer on a channel with a global prefetch, as RabbitMQ's do (540,
/// a connection error); a global prefetch of 0 (none) is fine, and so is a classic queue.
#[test]
fn quorum_queues_refuse_a_global_prefetch() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let quorum = FieldTable::from_entries([("x-queue-type", FieldValue::LongStr("quorum".into()))]);
    declare_with(
        &mut tb,
        c,
        QueueDeclare { queue: short("qq"), durable: true, arguments: quorum, ..Default::default() },
    );
    declare(&mut tb, c, "classic");
    tb.call(c, BasicQos { prefetch_count: 0, global: true, ..Default::default() });
    assert!(methods(&consume(&mut tb, c, "qq", "unlimited", false))
        .contains(&Method::BasicConsumeOk(BasicConsumeOk { consumer_tag: short("unlimited") })));
    tb.call(c, BasicQos { prefetch_count: 5, global: true, ..Default::default() });
    assert!(connection_error(&consume(&mut tb, c, "classic", "fine", false)).is_none());
    let refused = connection_error(&consume(&mut tb, c, "qq", "limited", false)).expect("540");
    assert_eq!(refused.reply_code, 540);
    assert_eq!(refused.reply_text, "NOT_IMPLEMENTED - queue 'qq' in vhost '/' does not support global qos");
}

/// A channel at its global prefetch holds its no-ack consumers too (rabbit_limiter; the Java
/// client's `QosTests#noAckObeysLimit`); once credit is freed the no-ack consumer is served.
#[test]
fn global_prefetch_holds_no_ack_consumers_at_the_limit() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "acked");
    declare(&mut tb, c, "auto");
    tb.call(c, BasicQos { prefetch_count: 1, global: true, ..Default::default() });
    consume(&mut tb, c, "acked", "a", false);
    assert_eq!(deliveries(&tb.publish(c, "", "acked", b"1")).len(), 1);
    consume(&mut tb, c, "auto", "b", true);
    assert!(deliveries(&tb.publish(c, "", "auto", b"2")).is_empty(), "held at the channel's limit");
    let freed = ack(&mut tb, c, 1, false);
    assert_eq!(bodies(&freed), vec![b"2".to_vec()]);
}

/// Freed channel-wide credit goes to the channel's queues in turn, so one consumer per queue
/// under global prefetch 1 drains every queue, not only the one it acks (`QosTests#fairness`).
#[test]
fn global_prefetch_credit_goes_to_the_queues_in_turn() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.call(c, BasicQos { prefetch_count: 1, global: true, ..Default::default() });
    for q in ["q1", "q2", "q3"] {
        declare(&mut tb, c, q);
        for _ in 0..10 {
            tb.publish(c, "", q, q.as_bytes());
        }
    }
    let mut next = Vec::new();
    for (q, tag) in [("q1", "a"), ("q2", "b"), ("q3", "c")] {
        next.extend(
            deliveries(&consume(&mut tb, c, q, tag, false)).into_iter().map(|d| d.method.delivery_tag),
        );
    }
    let mut served = std::collections::BTreeMap::new();
    for _ in 0..9 {
        let tag = next.pop().expect("one delivery in flight");
        let freed = ack(&mut tb, c, tag, false);
        for d in deliveries(&freed) {
            *served.entry(d.body().to_vec()).or_insert(0) += 1;
            next.push(d.method.delivery_tag);
        }
    }
    for q in ["q1", "q2", "q3"] {
        assert!(served.get(q.as_bytes()).copied().unwrap_or(0) >= 2, "{q} starved: {served:?}");
    }
}

/// A nack with requeue puts the message back at its original place, marked redelivered.
#[test]
fn nacked_message_is_requeued_in_place_and_redelivered() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    for b in [b"1", b"2", b"3"] {
        tb.publish(c, "", "q", b);
    }
    let first = tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    assert!(matches!(&methods(&first)[0], Method::BasicGetOk(ok) if ok.message_count == 2));
    tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    let again = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    match &methods(&again)[0] {
        Method::BasicGetOk(ok) => {
            assert!(ok.redelivered);
            assert_eq!(ok.message_count, 2);
        }
        other => panic!("{other:?}"),
    }
    let Effect::Send { content: Some(message), .. } = &again[0] else { panic!() };
    assert_eq!(&message.body[..], b"1");
}

/// Acking an unknown or already acked delivery tag closes the channel with 406.
#[test]
fn unknown_delivery_tag_is_precondition_failed() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.publish(c, "", "q", b"x");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    assert!(channel_error(&ack(&mut tb, c, 1, false)).is_none());
    let c2 = tb.open_channel(c.conn, 2);
    declare(&mut tb, c2, "q");
    let err = channel_error(&ack(&mut tb, c2, 7, false)).expect("channel error");
    assert_eq!(err.reply_code, 406);
    assert_eq!(err.reply_text, "PRECONDITION_FAILED - unknown delivery tag 7");
    assert_eq!((err.class_id, err.method_id), (60, 80));
}

/// ack with multiple=true settles every delivery up to the tag; tag 0 settles all.
#[test]
fn multiple_ack_settles_a_prefix() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    consume(&mut tb, c, "q", "w", false);
    for i in 0..5u8 {
        tb.publish(c, "", "q", &[i]);
    }
    ack(&mut tb, c, 3, true);
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_unacked, 2);
    ack(&mut tb, c, 0, true);
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_unacked, 0);
}

/// Closing a channel requeues its unacked messages in their original order, redelivered.
#[test]
fn channel_close_requeues_unacked_in_order() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    consume(&mut tb, c, "q", "w", false);
    for i in 0..3u8 {
        tb.publish(c, "", "q", &[i]);
    }
    let closed = tb.call(c, ChannelClose::default());
    assert!(matches!(methods(&closed).last(), Some(Method::ChannelCloseOk(_))));
    let c2 = tb.open_channel(c.conn, 2);
    let redelivered = consume(&mut tb, c2, "q", "w2", true);
    let d = deliveries(&redelivered);
    assert_eq!(d.iter().map(|d| d.body()[0]).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(d.iter().all(|d| d.method.redelivered));
}

/// basic.recover requeue=true returns every unacked delivery of the channel.
#[test]
fn recover_requeues_unacked() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.publish(c, "", "q", b"x");
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    let effects = tb.call(c, BasicRecover { requeue: true });
    assert!(matches!(methods(&effects).as_slice(), [Method::BasicRecoverOk(_)]));
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 1);
    let err = connection_error(&tb.call(c, BasicRecover { requeue: false })).expect("540");
    assert_eq!(err.reply_text, "NOT_IMPLEMENTED - requeue=false");
}

/// basic.get answers get-empty on an empty queue, and get-ok counts the messages left.
#[test]
fn get_reports_remaining_messages() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let empty = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    assert!(matches!(methods(&empty).as_slice(), [Method::BasicGetEmpty(_)]));
    tb.publish(c, "", "q", b"a");
    tb.publish(c, "", "q", b"b");
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    assert!(
        matches!(&methods(&got)[0], Method::BasicGetOk(ok) if ok.message_count == 1 && ok.delivery_tag == 1)
    );
}

/// Closing the owning connection deletes its exclusive queue; others get 405 meanwhile.
#[test]
fn exclusive_queue_is_locked_to_its_connection_and_deleted_with_it() {
    let mut tb = TestBroker::new();
    let owner = tb.channel();
    let other = tb.channel();
    tb.call(owner, QueueDeclare { queue: short("mine"), exclusive: true, ..Default::default() });
    let err = channel_error(
        &tb.call(other, QueueDeclare { queue: short("mine"), passive: true, ..Default::default() }),
    )
    .expect("locked");
    assert_eq!(err.reply_code, 405);
    assert!(err
        .reply_text
        .starts_with("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost '/'"));
    tb.close_connection(owner.conn);
    assert!(tb.broker.queue_stats("/", "mine").is_none());
}

/// Redeclaring a queue with another durable flag fails with RabbitMQ's 406 text.
#[test]
fn inequivalent_redeclare_names_the_field() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, ..Default::default() });
    let err = channel_error(&declare(&mut tb, c, "q")).expect("inequivalent");
    assert_eq!(
        err.reply_text,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': received 'false' but current is 'true'"
    );
}

/// A passive declare of a missing queue is 404 with RabbitMQ's text; of an existing one, its counts.
#[test]
fn passive_declare_reports_or_fails() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(
        &tb.call(c, QueueDeclare { queue: short("nope"), passive: true, ..Default::default() }),
    )
    .expect("404");
    assert_eq!(err.reply_text, "NOT_FOUND - no queue 'nope' in vhost '/'");
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.publish(c, "", "q", b"1");
    consume(&mut tb, c, "q", "w", false);
    tb.publish(c, "", "q", b"2");
    let ok =
        declare_with(&mut tb, c, QueueDeclare { queue: short("q"), passive: true, ..Default::default() });
    assert_eq!((ok.message_count, ok.consumer_count), (0, 1));
}

/// An empty queue name gets a server-generated `amq.gen-` name; `amq.` names are reserved.
#[test]
fn server_named_queues_and_reserved_prefix() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let ok = declare_with(&mut tb, c, QueueDeclare::default());
    assert!(ok.queue.as_str().starts_with("amq.gen-"));
    let err = channel_error(&declare(&mut tb, c, "amq.mine")).expect("403");
    assert_eq!(err.reply_text, "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'");
}

/// purge returns the number of ready messages removed; delete honours if-unused and if-empty.
#[test]
fn purge_and_conditional_delete() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.publish(c, "", "q", b"1");
    tb.publish(c, "", "q", b"2");
    let err =
        channel_error(&tb.call(c, QueueDelete { queue: short("q"), if_empty: true, ..Default::default() }));
    assert_eq!(err.unwrap().reply_text, "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty");
    let c = tb.open_channel(c.conn, 2);
    let purged = tb.call(c, QueuePurge { queue: short("q"), nowait: false });
    assert!(matches!(methods(&purged).as_slice(), [Method::QueuePurgeOk(ok)] if ok.message_count == 2));
    consume(&mut tb, c, "q", "w", true);
    let err =
        channel_error(&tb.call(c, QueueDelete { queue: short("q"), if_unused: true, ..Default::default() }));
    assert_eq!(err.unwrap().reply_text, "PRECONDITION_FAILED - queue 'q' in vhost '/' in use");
}

/// An auto-delete queue goes when its last consumer cancels, not before it had one.
#[test]
fn auto_delete_queue_goes_with_its_last_consumer() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("ad"), auto_delete: true, ..Default::default() });
    consume(&mut tb, c, "ad", "a", true);
    consume(&mut tb, c, "ad", "b", true);
    tb.call(c, BasicCancel { consumer_tag: short("a"), nowait: false });
    assert!(tb.broker.queue_stats("/", "ad").is_some());
    tb.call(c, BasicCancel { consumer_tag: short("b"), nowait: false });
    assert!(tb.broker.queue_stats("/", "ad").is_none());
}

/// Deleting a queue tells its consumers with a server-sent basic.cancel.
#[test]
fn deleting_a_queue_cancels_its_consumers() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    consume(&mut tb, c, "q", "w", true);
    let other = tb.channel();
    let effects = tb.call(other, QueueDelete { queue: short("q"), ..Default::default() });
    let cancel = effects.iter().find_map(|e| match e {
        Effect::Send { conn, method, .. } if *conn == c.conn => match method.as_ref() {
            Method::BasicCancel(m) => Some(m.clone()),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(cancel.expect("basic.cancel").consumer_tag, "w");
}

/// Reusing a consumer tag on a channel is a 530 connection error; an exclusive consumer locks
/// the queue against others (403).
#[test]
fn consumer_tag_reuse_and_exclusive_consumers() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(
        c,
        BasicConsume { queue: short("q"), consumer_tag: short("x"), exclusive: true, ..Default::default() },
    );
    let other = tb.channel();
    let err = channel_error(&consume(&mut tb, other, "q", "y", false)).expect("403");
    assert_eq!(err.reply_text, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use");
    let err = connection_error(&consume(&mut tb, c, "q", "x", false)).expect("530");
    assert_eq!(err.reply_code, 530);
}

/// A connection whose socket is behind gets no deliveries until it catches up; the messages wait
/// in the queue meanwhile (bounded memory for slow no-ack consumers).
#[test]
fn paused_connection_gets_no_deliveries_until_resumed() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    consume(&mut tb, c, "q", "fast-but-unread", true);
    tb.command(hourglass_broker::Command::DeliveryPaused { conn: c.conn, paused: true });
    assert!(deliveries(&tb.publish(c, "", "q", b"1")).is_empty());
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 1);
    let resumed = tb.command(hourglass_broker::Command::DeliveryPaused { conn: c.conn, paused: false });
    assert_eq!(bodies(&resumed), vec![b"1".to_vec()]);
}

/// Consumer priorities (x-priority, advertised as the consumer_priorities capability): the
/// highest-priority consumer with credit gets messages; lower ones only when it has none.
#[test]
fn higher_priority_consumer_gets_messages_first() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(c, BasicQos { prefetch_count: 2, ..Default::default() });
    for (tag, priority) in [("low", 1), ("high", 5)] {
        let arguments = FieldTable::from_entries([("x-priority", FieldValue::I32(priority))]);
        tb.call(
            c,
            BasicConsume { queue: short("q"), consumer_tag: short(tag), arguments, ..Default::default() },
        );
    }
    let tags: Vec<String> = (0..4u8)
        .flat_map(|i| deliveries(&tb.publish(c, "", "q", &[i])))
        .map(|d| d.method.consumer_tag.to_string())
        .collect();
    assert_eq!(tags, ["high", "high", "low", "low"], "low gets messages only once high is out of credit");
}

/// Declares queue `name` with `x-single-active-consumer`.
fn declare_single_active(tb: &mut TestBroker, chan: Chan, name: &str) {
    let arguments = FieldTable::from_entries([("x-single-active-consumer", FieldValue::Bool(true))]);
    tb.call(chan, QueueDeclare { queue: short(name), arguments, ..Default::default() });
}

/// x-single-active-consumer: only the first consumer gets messages; when it goes, the next one does.
#[test]
fn single_active_consumer_gets_everything_until_it_leaves() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_single_active(&mut tb, c, "sac");
    consume(&mut tb, c, "sac", "first", true);
    consume(&mut tb, c, "sac", "second", true);
    let tags: Vec<String> = (0..3u8)
        .flat_map(|i| deliveries(&tb.publish(c, "", "sac", &[i])))
        .map(|d| d.method.consumer_tag.to_string())
        .collect();
    assert_eq!(tags, ["first", "first", "first"]);
    tb.call(c, BasicCancel { consumer_tag: short("first"), nowait: false });
    let next = deliveries(&tb.publish(c, "", "sac", b"x"));
    assert_eq!(next[0].method.consumer_tag, "second");
    let c2 = tb.channel();
    let bad = FieldTable::from_entries([("x-single-active-consumer", FieldValue::LongStr("true".into()))]);
    let err = channel_error(
        &tb.call(c2, QueueDeclare { queue: short("sac2"), arguments: bad, ..Default::default() }),
    );
    assert_eq!(err.unwrap().reply_code, 406);
}

/// When the single active consumer is cancelled with ready messages waiting behind its
/// prefetch, the next consumer gets them at once, not at the next publish or ack.
#[test]
fn the_next_single_active_consumer_gets_the_waiting_messages_at_once() {
    let mut tb = TestBroker::new();
    let c1 = tb.channel();
    declare_single_active(&mut tb, c1, "sac");
    tb.call(c1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    consume(&mut tb, c1, "sac", "first", false);
    let c2 = tb.channel();
    consume(&mut tb, c2, "sac", "second", false);
    for i in 0..3u8 {
        tb.publish(c1, "", "sac", &[i]);
    }
    let cancelled = tb.call(c1, BasicCancel { consumer_tag: short("first"), nowait: false });
    let tags: Vec<String> =
        deliveries(&cancelled).iter().map(|d| d.method.consumer_tag.to_string()).collect();
    assert_eq!(tags, ["second", "second"], "the two waiting behind first's prefetch");
}

/// x-max-priority: higher-priority messages are delivered first, equal ones in order; a priority
/// above the maximum counts as the maximum and none as 0 (RabbitMQ's priority queues).
#[test]
fn priority_queue_delivers_highest_priority_first() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-max-priority", FieldValue::I32(10))]);
    tb.call(c, QueueDeclare { queue: short("pq"), arguments, ..Default::default() });
    for (body, priority) in [
        ("p1", Some(1)),
        ("p9", Some(9)),
        ("p5", Some(5)),
        ("none", None),
        ("p20", Some(20)),
        ("p9b", Some(9)),
    ] {
        let props = BasicProperties { priority, ..Default::default() };
        tb.publish_with(c, "", "pq", props, body.as_bytes(), false);
    }
    let order: Vec<String> = (0..6)
        .filter_map(|_| {
            tb.call(c, BasicGet { queue: short("pq"), no_ack: true }).into_iter().find_map(|e| match e {
                Effect::Send { content: Some(m), .. } => Some(String::from_utf8_lossy(&m.body).into_owned()),
                _ => None,
            })
        })
        .collect();
    assert_eq!(order, ["p20", "p9", "p9b", "p5", "p1", "none"]);
}

/// A queue query (the AMQP 1.0 management node's `GET /queues/:queue`) answers with the queue's
/// declaration and counts; a queue that does not exist is a 404 on the channel.
#[test]
fn a_queue_query_answers_the_declaration_and_counts() {
    use hourglass_broker::{Answer, Command, Query};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-queue-type", FieldValue::LongStr("quorum".into()))]);
    tb.call(
        c,
        QueueDeclare {
            queue: short("asked"),
            durable: true,
            arguments: arguments.clone(),
            ..Default::default()
        },
    );
    tb.publish(c, "", "asked", b"one");
    let query =
        |name: &str| Command::Query { conn: c.conn, channel: c.channel, query: Query::Queue(short(name)) };
    let effects = tb.command(query("asked"));
    match &effects[..] {
        [Effect::Answer { answer, .. }] => {
            let Answer::Queue(queue) = answer.as_ref() else { panic!("{answer:?}") };
            assert_eq!(queue.name, "asked");
            assert!(queue.durable && !queue.exclusive && !queue.auto_delete);
            assert_eq!(queue.arguments, arguments);
            assert_eq!((queue.messages, queue.consumers), (1, 0));
        }
        other => panic!("{other:?}"),
    }
    match &tb.command(query("missing"))[..] {
        [Effect::ChannelError { error, .. }] => assert_eq!(error.reply_code, 404),
        other => panic!("{other:?}"),
    }
}

/// An existing consumer's prefetch changed in place (an AMQP 1.0 link's credit): more credit
/// delivers what waited at once, without a new consumer.
#[test]
fn a_consumer_prefetch_raised_in_place_delivers_what_waited() {
    use hourglass_broker::Command;
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(c, BasicQos { prefetch_count: 1, ..Default::default() });
    consume(&mut tb, c, "q", "link", false);
    let delivered: usize = (0..3).map(|i| deliveries(&tb.publish(c, "", "q", &[i])).len()).sum();
    assert_eq!(delivered, 1);
    let raised = tb.command(Command::ConsumerPrefetch {
        conn: c.conn,
        channel: c.channel,
        consumer_tag: short("link"),
        prefetch: 3,
    });
    assert_eq!(bodies(&raised), vec![vec![1u8], vec![2u8]]);
    let unknown = tb.command(Command::ConsumerPrefetch {
        conn: c.conn,
        channel: c.channel,
        consumer_tag: short("nobody"),
        prefetch: 9,
    });
    assert!(unknown.is_empty());
}
