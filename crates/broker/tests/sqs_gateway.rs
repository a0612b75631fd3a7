//! The SQS endpoint's gateway (issue 26): messages received over SQS stay invisible for their
//! visibility timeout, come back counted when it runs out, and go when deleted by handle; with a
//! manual clock.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::admin::{MoveStopped, MoveTarget, SqsGatewayError, SqsOutgoing};
use hourglass_broker::queue::QueueStats;
use hourglass_broker::Notice;
use hourglass_testkit::{deliveries, TestBroker};

/// A message SendMessage sends with `body` and nothing else.
fn outgoing(body: &'static [u8]) -> SqsOutgoing {
    SqsOutgoing::new(hourglass_wire::BasicProperties::default(), bytes::Bytes::from_static(body))
}

fn stats(tb: &TestBroker, queue: &str) -> QueueStats {
    tb.broker.queue_stats("/", queue).unwrap()
}

/// A received message is invisible for its timeout, then received again with its receive count
/// one up; deleted by its newest handle it is gone, and deleting again is no error.
#[test]
fn received_messages_come_back_after_their_timeout_until_deleted() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    tb.publish(c, "", "jobs", b"one");
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "jobs", 10, Some(30_000), now).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!((&first[0].message.body[..], first[0].receive_count), (&b"one"[..], 1));
    assert!(tb.broker.sqs_receive("/", "jobs", 10, Some(30_000), now).unwrap().is_empty(), "invisible");
    assert_eq!((stats(&tb, "jobs").messages_ready, stats(&tb, "jobs").messages_unacked), (0, 1));

    tb.advance(Duration::from_millis(30_000));
    let now = tb.clock.now();
    let second = tb.broker.sqs_receive("/", "jobs", 10, Some(30_000), now).unwrap();
    assert_eq!((second.len(), second[0].receive_count), (1, 2));
    assert_eq!(second[0].entry_id, first[0].entry_id, "the same message");
    tb.broker.sqs_delete("/", "jobs", &first[0].receipt_handle, now).unwrap();
    assert_eq!(stats(&tb, "jobs").messages_unacked, 1, "the first, stale handle deletes nothing");
    tb.broker.sqs_delete("/", "jobs", &second[0].receipt_handle, now).unwrap();
    tb.broker.sqs_delete("/", "jobs", &second[0].receipt_handle, now).unwrap();
    assert_eq!(stats(&tb, "jobs").messages(), 0);
    tb.advance(Duration::from_millis(60_000));
    let now = tb.clock.now();
    assert!(
        tb.broker.sqs_receive("/", "jobs", 10, Some(30_000), now).unwrap().is_empty(),
        "deleted for good"
    );
}

/// A late delete (issue 40, item 1): once a delivery's visibility timeout has run out, its
/// handle still deletes the message while it waits in the queue, not received again, as AWS
/// does; a slow worker does not make it processed twice. Persisted, the delete is a settle in
/// the store too.
#[test]
fn a_late_delete_removes_a_message_not_yet_received_again() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    for body in [b"slow", b"next"] {
        tb.publish(c, "", "jobs", body);
    }
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "jobs", 1, Some(1_000), now).unwrap();
    tb.advance(Duration::from_millis(1_001));
    let now = tb.clock.now();
    assert_eq!(stats(&tb, "jobs").messages_ready, 2, "back in the queue");
    tb.broker.sqs_delete("/", "jobs", &first[0].receipt_handle, now).unwrap();
    assert_eq!(stats(&tb, "jobs").messages(), 1, "deleted all the same");
    let left = tb.broker.sqs_receive("/", "jobs", 10, Some(30_000), now).unwrap();
    assert_eq!(left.iter().map(|r| &r.message.body[..]).collect::<Vec<_>>(), [&b"next"[..]]);
}

/// SQS's purge takes the messages SQS received and has not deleted too (issue 40, item 4);
/// an AMQP consumer's unacked delivery stays its own to settle.
#[test]
fn an_sqs_purge_takes_what_sqs_holds_in_flight() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    for body in [b"one", b"two", b"six"] {
        tb.publish(c, "", "jobs", body);
    }
    let worker = tb.channel();
    tb.call(worker, hourglass_wire::BasicQos { prefetch_count: 1, ..Default::default() });
    consume(&mut tb, worker, "jobs", "w", false);
    let now = tb.clock.now();
    assert_eq!(tb.broker.sqs_receive("/", "jobs", 1, Some(30_000), now).unwrap().len(), 1);
    assert_eq!(tb.broker.sqs_purge_in_flight("/", "jobs", now), Ok(1));
    let left = stats(&tb, "jobs");
    assert_eq!(
        (left.messages_ready, left.messages_unacked),
        (1, 1),
        "the AMQP delivery and the ready one stay"
    );
    tb.advance(Duration::from_millis(60_000));
    assert_eq!(stats(&tb, "jobs").messages_ready, 1, "the purged delivery never comes back");
}

/// At most `max` messages a receive, in order; with a timeout of 0 a message is ready again at
/// once, for AMQP consumers too.
#[test]
fn receives_take_at_most_max_and_a_zero_timeout_returns_the_message_at_once() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    for body in [b"a", b"b", b"c"] {
        tb.publish(c, "", "q", body);
    }
    let now = tb.clock.now();
    let two = tb.broker.sqs_receive("/", "q", 2, Some(0), now).unwrap();
    let bodies: Vec<&[u8]> = two.iter().map(|r| &r.message.body[..]).collect();
    assert_eq!(bodies, [&b"a"[..], b"b"]);
    assert_eq!(stats(&tb, "q").messages_ready, 3, "visible again at once");
    let consumer = tb.channel();
    let delivered = deliveries(&consume(&mut tb, consumer, "q", "amqp", true));
    assert_eq!(delivered.len(), 3, "an AMQP consumer gets them all");
}

/// Handles are the gateway's own for the queue: another queue's and a made-up one are refused;
/// a missing queue is named.
#[test]
fn only_the_gateway_handles_of_the_queue_delete() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "a");
    declare(&mut tb, c, "b");
    tb.publish(c, "", "a", b"x");
    let now = tb.clock.now();
    let got = tb.broker.sqs_receive("/", "a", 1, Some(30_000), now).unwrap().remove(0);
    let refused = Err(SqsGatewayError::ReceiptHandleInvalid);
    assert_eq!(tb.broker.sqs_delete("/", "b", &got.receipt_handle, now), refused);
    assert_eq!(tb.broker.sqs_delete("/", "a", "1.2.1.1", now), refused);
    assert_eq!(
        tb.broker.sqs_receive("/", "nope", 1, Some(30_000), now).unwrap_err(),
        SqsGatewayError::QueueNotFound
    );
    assert_eq!(tb.broker.sqs_delete("/", "a", &got.receipt_handle, now), Ok(()));
}

/// A message sent with its own delay waits it out, over the queue's `x-delivery-delay`; one sent
/// without waits the queue's.
#[test]
fn sent_messages_wait_their_own_delay_or_the_queues() {
    use hourglass_wire::{FieldTable, FieldValue, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(10_000))]);
    tb.call(c, QueueDeclare { queue: hourglass_testkit::short("d"), arguments, ..Default::default() });
    let now = tb.clock.now();
    let own = SqsOutgoing { delay_ms: Some(2_000), ..outgoing(b"own") };
    tb.broker.sqs_send("/", "d", own, now).unwrap();
    tb.broker.sqs_send("/", "d", outgoing(b"queue's"), now).unwrap();
    assert_eq!(stats(&tb, "d").messages_delayed, 2);
    tb.advance(Duration::from_millis(2_000));
    let now = tb.clock.now();
    let got = tb.broker.sqs_receive("/", "d", 10, Some(30_000), now).unwrap();
    assert_eq!(got.iter().map(|r| &r.message.body[..]).collect::<Vec<_>>(), [&b"own"[..]]);
    tb.advance(Duration::from_millis(8_000));
    let now = tb.clock.now();
    let got = tb.broker.sqs_receive("/", "d", 10, Some(30_000), now).unwrap();
    assert_eq!(got.iter().map(|r| &r.message.body[..]).collect::<Vec<_>>(), [&b"queue's"[..]]);
    assert_eq!(tb.broker.sqs_send("/", "none", outgoing(b""), now), Err(SqsGatewayError::QueueNotFound));
}

/// A long poll is woken once, when its queue has a ready message: published, due after a delay
/// (by the timer, no job of its own), or there already; one taken back is not woken.
#[test]
fn long_polls_are_woken_when_their_queue_has_a_ready_message() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.broker.sqs_wait("/", "q", 1).unwrap();
    tb.broker.sqs_wait("/", "q", 2).unwrap();
    tb.broker.sqs_unwait(2);
    assert_eq!(notices(&mut tb), [Notice::SqsWithdrawn { ticket: 2 }], "nothing to receive yet");
    tb.publish(c, "", "q", b"now");
    assert_eq!(
        notices(&mut tb),
        [Notice::SqsReady { ticket: 1 }],
        "woken by the publish, the one taken back not"
    );
    tb.publish(c, "", "q", b"again");
    assert_eq!(notices(&mut tb), [], "woken once");
    tb.broker.sqs_wait("/", "q", 3).unwrap();
    assert_eq!(notices(&mut tb), [Notice::SqsReady { ticket: 3 }], "a ready message wakes at once");

    let now = tb.clock.now();
    tb.broker.sqs_receive("/", "q", 10, Some(30_000), now).unwrap();
    tb.broker.sqs_wait("/", "q", 4).unwrap();
    let later = SqsOutgoing { delay_ms: Some(5_000), ..outgoing(b"later") };
    tb.broker.sqs_send("/", "q", later, now).unwrap();
    assert_eq!(notices(&mut tb), [], "a delayed message is not ready yet");
    tb.advance(Duration::from_millis(5_000));
    assert_eq!(notices(&mut tb), [Notice::SqsReady { ticket: 4 }], "woken when it is due");
    tb.broker.sqs_unwait(4);
    assert_eq!(notices(&mut tb), [], "one already woken is not taken back");
    assert_eq!(tb.broker.sqs_wait("/", "nope", 5).unwrap_err(), SqsGatewayError::QueueNotFound);
}

/// The notices the broker has for its driver.
fn notices(tb: &mut TestBroker) -> Vec<Notice> {
    std::iter::from_fn(|| tb.broker.poll_notice()).collect()
}

/// A message wakes one waiting poll, the longest waiting, not all of them.
#[test]
fn a_message_wakes_one_long_poll_not_the_herd() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    for poll in 0..3 {
        tb.broker.sqs_wait("/", "q", poll).unwrap();
    }
    tb.publish(c, "", "q", b"one");
    assert_eq!(notices(&mut tb), [Notice::SqsReady { ticket: 0 }]);
    let now = tb.clock.now();
    assert_eq!(
        tb.broker.sqs_receive("/", "q", 10, Some(30_000), now).unwrap().len(),
        1,
        "the woken poll takes it"
    );
    tb.publish(c, "", "q", b"two");
    assert_eq!(notices(&mut tb), [Notice::SqsReady { ticket: 1 }], "the next message: the next poll");
}

/// SetQueueAttributes' arguments change in place: a queue's delay removed applies to the next
/// message; an argument queue.declare refuses is refused, and the queue stays as it was.
#[test]
fn arguments_change_in_place_for_what_comes_next() {
    use hourglass_wire::{FieldTable, FieldValue, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(10_000))]);
    tb.call(c, QueueDeclare { queue: hourglass_testkit::short("d"), arguments, ..Default::default() });
    let now = tb.clock.now();
    let refused = tb.broker.sqs_set_arguments(
        "/",
        "d",
        vec![("x-visibility-timeout".into(), Some(FieldValue::I64(5)))],
        now,
    );
    assert!(
        matches!(refused, Err(SqsGatewayError::InvalidArguments(why)) if why.contains("x-visibility-timeout"))
    );
    tb.broker.sqs_set_arguments("/", "d", vec![("x-delivery-delay".into(), None)], now).unwrap();
    tb.broker.sqs_send("/", "d", outgoing(b"now"), now).unwrap();
    assert_eq!(tb.broker.sqs_receive("/", "d", 10, Some(30_000), now).unwrap().len(), 1, "no delay any more");
    let details = tb.broker.queue_details_named("/", "d").unwrap();
    assert_eq!(details.arguments.get("x-delivery-delay"), None);
}

/// A move takes dead-lettered messages back to the queue each came from, or to a destination;
/// one that came from nowhere stops it and stays.
#[test]
fn moves_take_dead_letters_back_to_their_source() {
    use hourglass_wire::{BasicNack, FieldTable, FieldValue, LongStr, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "dlq");
    declare(&mut tb, c, "elsewhere");
    let arguments = FieldTable::from_entries([
        ("x-dead-letter-exchange", FieldValue::LongStr(LongStr::from(String::new()))),
        ("x-dead-letter-routing-key", FieldValue::LongStr(LongStr::from("dlq".to_owned()))),
    ]);
    tb.call(c, QueueDeclare { queue: hourglass_testkit::short("src"), arguments, ..Default::default() });
    let worker = tb.channel();
    consume(&mut tb, worker, "src", "w", false);
    for body in [b"one", b"two"] {
        let delivered = deliveries(&tb.publish(c, "", "src", body)).remove(0);
        let nack = BasicNack { delivery_tag: delivered.method.delivery_tag, multiple: false, requeue: false };
        tb.call(worker, nack);
    }
    tb.call(
        worker,
        hourglass_wire::BasicCancel { consumer_tag: hourglass_testkit::short("w"), ..Default::default() },
    );
    assert_eq!(stats(&tb, "dlq").messages_ready, 2);
    let now = tb.clock.now();
    let step = tb.broker.sqs_move("/", "dlq", MoveTarget::Origin, &anywhere, 1, now).unwrap();
    assert_eq!((step.moved, step.left, step.stopped), (1, 1, None));
    assert_eq!(stats(&tb, "src").messages_ready, 1, "back where it came from");
    let elsewhere = MoveTarget::Queue { vhost: "/", name: "elsewhere" };
    let step = tb.broker.sqs_move("/", "dlq", elsewhere, &anywhere, 10, now).unwrap();
    assert_eq!((step.moved, step.left), (1, 0));
    assert_eq!(stats(&tb, "elsewhere").messages_ready, 1);

    tb.publish(c, "", "dlq", b"never dead-lettered");
    let step = tb.broker.sqs_move("/", "dlq", MoveTarget::Origin, &anywhere, 10, now).unwrap();
    assert_eq!((step.moved, step.stopped), (0, Some(MoveStopped::NoOrigin)));
    assert_eq!(stats(&tb, "dlq").messages_ready, 1, "left where it was");
}

fn anywhere(_vhost: &str, _queue: &str) -> bool {
    true
}

/// A move writes only where its user may (issue 37, finding 2): a message whose forged
/// `x-first-death-queue` names a queue the user may not write to stops the move and stays; a
/// destination in another vhost receives the messages there, not in the source's vhost.
#[test]
fn moves_write_only_where_the_user_may_and_into_the_destinations_vhost() {
    use hourglass_wire::{BasicProperties, FieldTable, FieldValue, LongStr, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    for queue in ["m-dlq", "protected"] {
        declare(&mut tb, c, queue);
    }
    let now = tb.clock.now();
    assert!(tb.broker.add_vhost("B"));
    tb.broker
        .with_admin_channel("guest", "B", now, |ch| {
            ch.call(QueueDeclare { queue: hourglass_testkit::short("protected"), ..Default::default() })
        })
        .unwrap();
    let forged = FieldTable::from_entries([(
        "x-first-death-queue",
        FieldValue::LongStr(LongStr::from("protected".to_owned())),
    )]);
    let properties = BasicProperties { headers: Some(forged), ..Default::default() };
    tb.publish_with(c, "", "m-dlq", properties, b"forged", false);
    let mallory = |vhost: &str, queue: &str| vhost == "B" || queue.starts_with("m-");

    let step = tb.broker.sqs_move("/", "m-dlq", MoveTarget::Origin, &mallory, 10, now).unwrap();
    let denied = MoveStopped::WriteDenied { vhost: "/".into(), queue: "protected".into() };
    assert_eq!((step.moved, step.stopped), (0, Some(denied)));
    assert_eq!((stats(&tb, "m-dlq").messages_ready, stats(&tb, "protected").messages_ready), (1, 0));

    let into_b = MoveTarget::Queue { vhost: "B", name: "protected" };
    let step = tb.broker.sqs_move("/", "m-dlq", into_b, &mallory, 10, now).unwrap();
    assert_eq!((step.moved, step.stopped), (1, None));
    assert_eq!(stats(&tb, "protected").messages_ready, 0, "nothing lands in / ");
    assert_eq!(tb.broker.queue_stats("B", "protected").unwrap().messages_ready, 1);
}

/// An SQS FIFO queue (`x-sqs-fifo`, issue 40, item 19): a receive takes the messages of groups
/// with nothing in flight, as many of one group as it has before the next group's; a group
/// waits while one of its messages is in flight, and a message back from its timeout is first
/// in its group again. Groups are worked on in parallel, as on AWS; before, nothing was received
/// while any message of the queue was in flight. A long poll is woken once a group is free.
#[test]
fn fifo_groups_are_received_in_parallel_each_in_order() {
    use hourglass_wire::{BasicProperties, FieldTable, FieldValue};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-sqs-fifo", FieldValue::Bool(true))]);
    declare_with(
        &mut tb,
        c,
        hourglass_wire::QueueDeclare {
            queue: hourglass_testkit::short("f.fifo"),
            arguments,
            ..Default::default()
        },
    );
    for (group, body) in [("g1", "a"), ("g1", "b"), ("g2", "c"), ("g1", "d"), ("g3", "e")] {
        let properties = BasicProperties { headers: Some(group_headers(group)), ..Default::default() };
        tb.publish_with(c, "", "f.fifo", properties, body.as_bytes(), false);
    }
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "f.fifo", 1, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&first), ["a"]);
    let others = tb.broker.sqs_receive("/", "f.fifo", 10, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&others), ["c", "e"], "g1 waits for a; g2 and g3 are free");
    assert!(tb.broker.sqs_receive("/", "f.fifo", 10, Some(30_000), now).unwrap().is_empty());

    tb.broker.sqs_wait("/", "f.fifo", 1).unwrap();
    tb.broker.sqs_delete("/", "f.fifo", &others[0].receipt_handle, now).unwrap();
    assert_eq!(notices(&mut tb), [], "g2 has nothing more; g1 still waits for a");
    tb.broker.sqs_delete("/", "f.fifo", &first[0].receipt_handle, now).unwrap();
    assert_eq!(notices(&mut tb), [Notice::SqsReady { ticket: 1 }], "a is deleted: g1 is free");
    let next = tb.broker.sqs_receive("/", "f.fifo", 10, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&next), ["b", "d"], "one group's messages in order");

    // b, d and e come back when their timeout runs out: b is g1's first again.
    tb.advance(Duration::from_millis(30_000));
    let now = tb.clock.now();
    let again = tb.broker.sqs_receive("/", "f.fifo", 1, Some(30_000), now).unwrap();
    assert_eq!((received_texts(&again), again[0].receive_count), (vec!["b".to_owned()], 2));
    let rest = tb.broker.sqs_receive("/", "f.fifo", 10, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&rest), ["e"], "g1 waits for b again");
    assert_eq!(stats(&tb, "f.fifo").messages_unacked, 2);
    // A standard queue hands out more while some are in flight, whatever their groups.
    declare(&mut tb, c, "s");
    tb.publish(c, "", "s", b"a");
    tb.publish(c, "", "s", b"b");
    assert_eq!(tb.broker.sqs_receive("/", "s", 1, Some(30_000), now).unwrap().len(), 1);
    assert_eq!(tb.broker.sqs_receive("/", "s", 1, Some(30_000), now).unwrap().len(), 1);
}

/// An SQS standard queue is fair (issue 40, SQS's fair queues): a tenant (a `MessageGroupId`)
/// holding more than a tenth of the messages in flight, and at least 30, is noisy, and the
/// quiet tenants' messages, those without a group among them, are received before its older
/// ones; with no quiet message left the noisy tenant's come again. An AMQP consumer of the same
/// queue is served in the same order. Before, the queue handed out strictly oldest first.
#[test]
fn a_noisy_tenant_is_received_after_the_quiet_ones() {
    use hourglass_wire::{BasicGet, BasicProperties, FieldTable, FieldValue};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    // Any `x-sqs-*` argument marks a queue made over SQS; a standard one is fair.
    let arguments = FieldTable::from_entries([("x-sqs-created-timestamp", FieldValue::I64(1))]);
    let spec = hourglass_wire::QueueDeclare {
        queue: hourglass_testkit::short("tenants"),
        arguments,
        ..Default::default()
    };
    declare_with(&mut tb, c, spec);
    let publish = |tb: &mut TestBroker, group: Option<&str>, body: String| {
        let properties = BasicProperties { headers: group.map(group_headers), ..Default::default() };
        tb.publish_with(c, "", "tenants", properties, body.as_bytes(), false);
    };
    for i in 0..40 {
        publish(&mut tb, Some("A"), format!("a{i}"));
    }
    publish(&mut tb, Some("B"), "b0".into());
    publish(&mut tb, None, "u0".into());
    publish(&mut tb, Some("B"), "b1".into());
    let now = tb.clock.now();
    let mut received = Vec::new();
    for _ in 0..3 {
        received
            .extend(received_texts(&tb.broker.sqs_receive("/", "tenants", 10, Some(30_000), now).unwrap()));
    }
    assert_eq!(
        received,
        (0..30).map(|i| format!("a{i}")).collect::<Vec<_>>(),
        "A is quiet up to 30 in flight"
    );
    let next = tb.broker.sqs_receive("/", "tenants", 4, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&next), ["b0", "u0", "b1", "a30"], "A (30 of 30 in flight) after B and u0");

    // An AMQP consumer of the queue: A still holds 31 of 33 in flight; a new quiet message
    // goes before A's older ones, and A's again once nothing quiet is left.
    publish(&mut tb, Some("C"), "c0".into());
    let got = |tb: &mut TestBroker| {
        got_texts(&tb.call(c, BasicGet { queue: hourglass_testkit::short("tenants"), no_ack: false }))
    };
    assert_eq!(got(&mut tb), ["c0"]);
    assert_eq!(got(&mut tb), ["a31"]);
    // A standard queue declared over AMQP keeps RabbitMQ's order, groups or not.
    declare(&mut tb, c, "plain");
    for (group, body) in [("A", "p0"), ("A", "p1"), ("B", "p2")] {
        let properties = BasicProperties { headers: Some(group_headers(group)), ..Default::default() };
        tb.publish_with(c, "", "plain", properties, body.as_bytes(), false);
    }
    let all = tb.broker.sqs_receive("/", "plain", 10, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&all), ["p0", "p1", "p2"]);
}

/// Issue 41 (a receive read the raw `x-visibility-timeout`): a receive without a
/// `VisibilityTimeout` of its own holds the message for the queue's visibility timeout as it runs,
/// a policy's included; SQS's 30 s only where nothing sets one.
#[test]
fn a_receive_without_a_timeout_takes_the_queues_as_policies_make_it() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    declare(&mut tb, c, "plain");
    let definition = [("visibility-timeout", hourglass_wire::FieldValue::I64(1_000))];
    set_queue_policy(&mut tb, "vis", "^jobs$", &definition).unwrap();
    tb.publish(c, "", "jobs", b"one");
    tb.publish(c, "", "plain", b"two");
    let now = tb.clock.now();
    assert_eq!(tb.broker.sqs_receive("/", "jobs", 1, None, now).unwrap().len(), 1);
    assert_eq!(tb.broker.sqs_receive("/", "plain", 1, None, now).unwrap().len(), 1);
    tb.advance(Duration::from_millis(1_000));
    let now = tb.clock.now();
    assert_eq!(
        tb.broker.sqs_receive("/", "jobs", 1, None, now).unwrap().len(),
        1,
        "back after the policy's 1 s"
    );
    tb.advance(Duration::from_millis(28_999));
    let now = tb.clock.now();
    assert!(tb.broker.sqs_receive("/", "plain", 1, None, now).unwrap().is_empty(), "SQS's 30 s");
    tb.advance(Duration::from_millis(1));
    let now = tb.clock.now();
    assert_eq!(tb.broker.sqs_receive("/", "plain", 1, None, now).unwrap().len(), 1);
}

/// Issue 40, item 23: a `MessageRetentionPeriod` changed by SetQueueAttributes applies to the
/// messages already in the queue, as on AWS, counted from when each was sent: shortened, the
/// messages now past it go at once and the rest at their new time.
#[test]
fn a_changed_retention_applies_to_the_messages_already_queued() {
    use hourglass_wire::{FieldTable, FieldValue, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-message-ttl", FieldValue::I64(3_600_000))]);
    tb.call(c, QueueDeclare { queue: hourglass_testkit::short("kept"), arguments, ..Default::default() });
    let start = tb.clock.now();
    for body in [&b"t0"[..], b"t10", b"t20"] {
        let now = tb.clock.now();
        tb.broker.sqs_send("/", "kept", outgoing(body), now).unwrap();
        tb.advance(Duration::from_millis(10_000));
    }
    // At 30 s: the retention becomes 15 s; the messages sent at 0 s and 10 s are past it.
    let now = tb.clock.now();
    let shorter = vec![("x-message-ttl".to_owned(), Some(FieldValue::I64(15_000)))];
    tb.broker.sqs_set_arguments("/", "kept", shorter, now).unwrap();
    let after = stats(&tb, "kept");
    assert_eq!((after.messages_ready, after.messages_with_ttl), (1, 1));
    assert_eq!(after.next_expiry, Some(start.saturating_add_millis(35_000)), "sent at 20 s, kept 15 s");
    assert!(tb.advance(Duration::from_millis(4_999)).is_empty());
    assert_eq!(stats(&tb, "kept").messages_ready, 1);
    tb.advance(Duration::from_millis(1));
    assert_eq!(stats(&tb, "kept").messages_ready, 0, "gone at 35 s");
}

/// Issue 40, item 21: a message an SQS queue's redrive policy moves to its dead-letter queue
/// keeps counting receives there (AWS: `maxReceiveCount` 2, then the first receive from the
/// dead-letter queue says 3); a move task's redrive makes it a new message, counted from 1
/// again. A queue SQS never touched dead-letters as RabbitMQ does, with no header of ours.
#[test]
fn receive_counts_go_on_in_the_dead_letter_queue_until_a_redrive() {
    use hourglass_wire::{FieldTable, FieldValue, LongStr, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "dlq");
    let redrive = |sqs: bool| {
        let mut entries = vec![
            ("x-dead-letter-exchange", FieldValue::LongStr(LongStr::from(String::new()))),
            ("x-dead-letter-routing-key", FieldValue::LongStr(LongStr::from("dlq".to_owned()))),
            // maxReceiveCount 2 (docs/sqs.md: the limit counts failed deliveries).
            ("x-delivery-limit", FieldValue::I64(1)),
        ];
        if sqs {
            entries.push(("x-sqs-created-timestamp", FieldValue::I64(1_700_000_000)));
        }
        FieldTable::from_entries(entries)
    };
    for (name, sqs) in [("src", true), ("amqp", false)] {
        let declare = QueueDeclare {
            queue: hourglass_testkit::short(name),
            arguments: redrive(sqs),
            ..Default::default()
        };
        tb.call(c, declare);
        tb.publish(c, "", name, name.as_bytes());
        for _ in 0..2 {
            let now = tb.clock.now();
            assert_eq!(tb.broker.sqs_receive("/", name, 1, Some(1_000), now).unwrap().len(), 1);
            tb.advance(Duration::from_millis(1_000));
        }
    }
    assert_eq!(stats(&tb, "dlq").messages_ready, 2, "both received twice, then dead-lettered");
    let now = tb.clock.now();
    let got = tb.broker.sqs_receive("/", "dlq", 10, Some(1_000), now).unwrap();
    let counts: Vec<(String, u32)> = got
        .iter()
        .map(|r| (String::from_utf8_lossy(&r.message.body).into_owned(), r.receive_count))
        .collect();
    assert_eq!(counts, [("src".to_owned(), 3), ("amqp".to_owned(), 1)]);
    let headers = got[1].message.properties().decode().headers.unwrap();
    assert!(headers.get("x-sqs-earlier-receives").is_none(), "{headers:?}");

    tb.advance(Duration::from_millis(1_000));
    let now = tb.clock.now();
    let step = tb.broker.sqs_move("/", "dlq", MoveTarget::Origin, &anywhere, 10, now).unwrap();
    assert_eq!(step.moved, 2);
    let again = tb.broker.sqs_receive("/", "src", 1, Some(1_000), now).unwrap();
    assert_eq!(again[0].receive_count, 1, "redriven: a new message");
}

/// Issue 40, item 20: a visibility change by a handle whose delivery is over. While its message
/// waits in the queue, not received again, the handle is expired (SQS answers a success that
/// changes nothing, as AWS does); once the message is received again under a newer handle, or
/// deleted, it is not found (AWS's `InvalidParameterValue`); what is no handle at all is invalid.
/// Before, all three were one error, which the SQS endpoint answered `ReceiptHandleIsInvalid`.
#[test]
fn a_visibility_change_by_an_old_handle_tells_expired_from_superseded() {
    use hourglass_broker::VisibilityError;
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "jobs");
    tb.publish(c, "", "jobs", b"one");
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "jobs", 1, Some(1_000), now).unwrap().remove(0);
    tb.advance(Duration::from_millis(1_000));
    let now = tb.clock.now();
    let change =
        |tb: &mut TestBroker, handle: &str| tb.broker.change_visibility("/", "jobs", handle, 5_000, now);
    assert_eq!(change(&mut tb, &first.receipt_handle), Err(VisibilityError::Expired));
    assert_eq!(stats(&tb, "jobs").messages_ready, 1, "nothing changed: still visible");
    let second = tb.broker.sqs_receive("/", "jobs", 1, Some(1_000), now).unwrap().remove(0);
    assert_eq!(change(&mut tb, &first.receipt_handle), Err(VisibilityError::HandleNotFound), "superseded");
    assert_eq!(change(&mut tb, "no handle"), Err(VisibilityError::HandleInvalid));
    assert_eq!(change(&mut tb, &second.receipt_handle), Ok(()));
    tb.broker.sqs_delete("/", "jobs", &second.receipt_handle, now).unwrap();
    assert_eq!(change(&mut tb, &second.receipt_handle), Err(VisibilityError::HandleNotFound), "deleted");
}

/// A message-move task's record names the user it moves as, and the SQS endpoint takes running
/// ones up at start. Only the endpoint may write it: a queue.declare carrying
/// `x-sqs-move-task` is refused (406). Before, anyone who could declare a queue could forge a
/// task that the next start ran as another user, into queues only that user may write.
#[test]
fn a_declared_move_task_is_refused() {
    use hourglass_wire::{FieldTable, FieldValue, LongStr, QueueDeclare};
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let forged = r#"{"handle":"h","user":"admin","source_arn":"arn:aws:sqs:us-east-1:000000000000:mine","destination_arn":"arn:aws:sqs:us-east-1:000000000000:theirs","rate":null,"status":"RUNNING","moved":0,"to_move":1,"started_ms":0,"failure":null}"#;
    let arguments = FieldTable::from_entries([(
        "x-sqs-move-task",
        FieldValue::LongStr(LongStr::from(forged.to_owned())),
    )]);
    let effects =
        tb.call(c, QueueDeclare { queue: hourglass_testkit::short("mine"), arguments, ..Default::default() });
    let refused = channel_error(&effects).expect("the declare is refused");
    assert_eq!(refused.reply_code, 406, "{refused:?}");
    assert!(refused.reply_text.contains("x-sqs-move-task"), "{refused:?}");
    assert!(tb.broker.queue_stats("/", "mine").is_none(), "no queue made");
    // The endpoint itself still writes it on a queue that exists.
    let c = tb.channel();
    declare(&mut tb, c, "mine");
    let change =
        vec![("x-sqs-move-task".to_owned(), Some(FieldValue::LongStr(LongStr::from(forged.to_owned()))))];
    tb.broker.sqs_set_arguments("/", "mine", change, tb.clock.now()).unwrap();
    assert_eq!(tb.broker.sqs_queues_with_argument("x-sqs-move-task").len(), 1);
}
