//! Paging (ADR 0007) without I/O: durable queues past their paging limits keep only the store
//! location of messages behind their head, and read them back through the injected
//! `MessageSource` (here a map standing in for the segment files) when they are needed.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::disk::{paging_broker, Disk};
use common::*;
use hourglass_broker::queue::{MemorySpillFiles, ReadPurpose, SpillFiles, NEAR_HORIZON_MS};
use hourglass_broker::{Command, PagingLimits, Permissions, Publish, StoredBody, Timestamp};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// Two messages stay in memory per queue; the rest are paged once stored.
fn two_resident() -> PagingLimits {
    PagingLimits { max_resident_messages: 2, max_resident_bytes: 1 << 20 }
}

fn setup(arguments: FieldTable) -> (TestBroker, Chan, Disk) {
    setup_with(arguments, two_resident())
}

/// `setup` with the paging limits `limits`.
fn setup_with(arguments: FieldTable, limits: PagingLimits) -> (TestBroker, Chan, Disk) {
    let mut disk = Disk::default();
    let mut tb = paging_broker(&disk.source, limits);
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, arguments, ..Default::default() });
    disk.sync(&mut tb);
    (tb, c, disk)
}

/// `setup` of a plain queue holding `n` persistent messages (`body 0`, …), stored: all but the
/// first few paged out.
fn paged_backlog(n: usize) -> (TestBroker, Chan, Disk) {
    let (mut tb, c, mut disk) = setup(FieldTable::new());
    publish_n(&mut tb, c, "q", n);
    disk.sync(&mut tb);
    (tb, c, disk)
}

/// `setup` of a queue whose messages expire after 1 s into the durable queue `dlq`.
fn setup_expiring_into_dlq() -> (TestBroker, Chan, Disk) {
    let arguments = FieldTable::from_entries([
        ("x-message-ttl", FieldValue::I64(1000)),
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]);
    let (mut tb, c, mut disk) = setup(arguments);
    tb.call(c, QueueDeclare { queue: short("dlq"), durable: true, ..Default::default() });
    disk.sync(&mut tb);
    (tb, c, disk)
}

fn properties(n: usize) -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(2),
        content_type: Some(short("text/plain")),
        message_id: Some(short(&format!("m{n}"))),
        headers: Some(FieldTable::from_entries([("n", FieldValue::I64(n as i64))])),
        ..Default::default()
    }
}

fn publish_n(tb: &mut TestBroker, c: Chan, routing_key: &str, n: usize) {
    for i in 0..n {
        tb.publish_with(c, "", routing_key, properties(i), format!("body {i}").as_bytes(), false);
    }
}

/// Messages past the limit are paged once stored and read back in batches as the head reaches
/// them: each is delivered with its exact bytes, properties and routing, in order.
#[test]
fn paged_messages_are_delivered_exactly() {
    let (mut tb, c, mut disk) = paged_backlog(6);
    assert_eq!(disk.reads(), 0);
    let effects = consume(&mut tb, c, "q", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(0..6));
    // Messages 3..6 (past two resident plus the one that tipped the limit) were read back,
    // in batches of the read-ahead (two here).
    assert_eq!(disk.reads(), 3);
    for (i, d) in deliveries(&effects).iter().enumerate() {
        let sent: EncodedProperties = properties(i).into();
        assert_eq!(d.message.properties().decode(), sent.decode());
        assert_eq!((d.method.routing_key.as_bytes(), d.method.redelivered), (&b"q"[..], false));
    }
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 0, "no-ack deliveries settled every message");
}

/// A paged message comes back requeued with redelivered set, and after a restart every message
/// comes back as a location and is read only when delivered; only the one delivered before the
/// restart is marked redelivered.
#[test]
fn requeued_and_restored_paged_messages() {
    let (mut tb, c, mut disk) = paged_backlog(5);
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    assert!(matches!(methods(&got).as_slice(), [Method::BasicGetOk(_)]));
    tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    disk.sync(&mut tb);
    let mut restored = disk.restart(&tb, two_resident());
    let reads = disk.reads();
    let c2 = restored.channel();
    let effects = consume(&mut restored, c2, "q", "ctag", false);
    assert_eq!(body_texts(&effects), numbered_bodies(0..5));
    // only the message delivered before the restart comes back redelivered
    let redelivered: Vec<bool> = deliveries(&effects).iter().map(|d| d.method.redelivered).collect();
    assert_eq!(redelivered, [true, false, false, false, false]);
    assert_eq!(disk.reads() - reads, 5, "each restored message read once, at delivery");
    assert_eq!(
        deliveries(&effects)[0].message.properties().decode().headers.unwrap().get("x-delivery-count"),
        Some(FieldValue::I64(1))
    );
    ack(&mut restored, c2, 5, true);
    disk.sync(&mut restored);
    assert_eq!(disk.live(), 0);
}

/// Paged messages expire on time and are dead-lettered with their content and x-death.
#[test]
fn paged_messages_expire_and_are_dead_lettered() {
    let (mut tb, c, mut disk) = setup_expiring_into_dlq();
    publish_n(&mut tb, c, "q", 5);
    disk.sync(&mut tb);
    tb.advance(Duration::from_millis(1000));
    disk.sync(&mut tb);
    let effects = consume(&mut tb, c, "dlq", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(0..5));
    for d in deliveries(&effects) {
        let headers = d.message.properties().decode().headers.unwrap();
        let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
            panic!("no x-death: {headers:?}")
        };
        assert_eq!(deaths.len(), 1);
    }
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 0);
}

/// Paged messages that expire are dead-lettered through reads the driver performs, in order
/// with the messages in memory before and after them: the expiry reads no record on the broker's
/// thread, and a later dead-lettering from the queue waits behind the read. Before, the expiry
/// read each paged record itself, through the injected `MessageSource`.
#[test]
fn expired_paged_messages_are_dead_lettered_through_reads_the_driver_performs() {
    let (mut tb, c, mut disk) = setup_expiring_into_dlq();
    publish_n(&mut tb, c, "q", 6);
    disk.sync(&mut tb);
    let now = tb.clock.advance(Duration::from_millis(1000));
    tb.broker.handle_timeout(now);
    assert_eq!(disk.reads(), 0, "the expiry read no record");
    assert_eq!(depth_unanswered(&mut tb, c, "dlq"), 3, "the ones in memory left at once");
    let read = tb.broker.poll_message_read().expect("a read for the paged ones");
    let batch = two_resident().consumer_read();
    assert_eq!(
        (read.locations.len(), read.purpose),
        (batch, ReadPurpose::DeadLettering),
        "3 paged, read 2 at a time"
    );
    assert!(tb.broker.poll_message_read().is_none(), "one read out per queue");
    // A message in memory that expires meanwhile waits behind the read.
    publish_unanswered(&mut tb, c, BasicProperties::default(), b"later");
    let now = tb.clock.advance(Duration::from_millis(1000));
    tb.broker.handle_timeout(now);
    assert_eq!(depth_unanswered(&mut tb, c, "dlq"), 3, "nothing overtakes the read");
    let messages = read.perform(tb.broker.message_source().as_deref());
    tb.broker.handle_message_read(read, messages, now);
    disk.sync(&mut tb);
    let effects = consume(&mut tb, c, "dlq", "ctag", true);
    let mut expected = numbered_bodies(0..6);
    expected.push("later".to_owned());
    assert_eq!(body_texts(&effects), expected);
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 0, "each message settled once");
}

/// While paged messages wait for their dead-lettering read, a rejected delivery of the same
/// queue leaves at once (it is no longer stored as queued: waiting, a crash would have put it
/// back as ready); and a queue deleted meanwhile takes its waiting messages with it, its read's
/// answer dropped.
#[test]
fn a_rejection_does_not_wait_behind_a_dead_lettering_read_and_a_deleted_queue_drops_it() {
    let (mut tb, c, mut disk) = setup_expiring_into_dlq();
    publish_n(&mut tb, c, "q", 6);
    disk.sync(&mut tb);
    tb.call(c, BasicQos { prefetch_count: 1, ..Default::default() });
    assert_eq!(body_texts(&consume(&mut tb, c, "q", "ctag", false)), ["body 0"]);
    let now = tb.clock.advance(Duration::from_millis(1000));
    tb.broker.handle_timeout(now);
    let read = tb.broker.poll_message_read().expect("a dead-lettering read");
    assert_eq!(depth_unanswered(&mut tb, c, "dlq"), 2, "1 and 2 left; 3, 4 and 5 wait");
    let reject = BasicReject { delivery_tag: 1, requeue: false };
    tb.broker
        .handle_command(Command::Method { conn: c.conn, channel: c.channel, method: reject.into() }, now);
    assert_eq!(depth_unanswered(&mut tb, c, "dlq"), 3, "the rejected one left at once");
    let delete = QueueDelete { queue: short("q"), ..Default::default() };
    tb.broker
        .handle_command(Command::Method { conn: c.conn, channel: c.channel, method: delete.into() }, now);
    disk.sync(&mut tb); // the delete-ok, and the channel's later replies, wait for it
    let messages = read.perform(tb.broker.message_source().as_deref());
    tb.broker.handle_message_read(read, messages, now);
    assert!(tb.broker.poll_message_read().is_none(), "nothing more is read for the deleted queue");
    assert_eq!(depth_unanswered(&mut tb, c, "dlq"), 3);
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 3, "the deleted queue's messages are gone from the store");
}

/// A queue at its max-length drops its paged head without reading it when it has no
/// dead-letter exchange. Before, dropping the head read it back on the broker's thread.
#[test]
fn a_paged_head_dropped_at_max_length_is_not_read() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-max-length", FieldValue::I64(5))]));
    publish_n(&mut tb, c, "q", 5);
    disk.sync(&mut tb);
    for i in 5..10 {
        tb.publish_with(c, "", "q", properties(i), format!("body {i}").as_bytes(), false);
    }
    disk.sync(&mut tb);
    assert_eq!(disk.reads(), 0, "the dropped heads were not read");
    let effects = consume(&mut tb, c, "q", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(5..10));
}

/// An expired paged message without a dead-letter exchange is dropped without being read.
#[test]
fn expired_paged_messages_without_dlx_are_not_read() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-message-ttl", FieldValue::I64(1000))]));
    publish_n(&mut tb, c, "q", 5);
    disk.sync(&mut tb);
    tb.advance(Duration::from_millis(1000));
    disk.sync(&mut tb);
    assert_eq!((disk.reads(), disk.live()), (0, 0));
}

/// Delayed messages past the limit are paged; the admin peek reads none of them on the broker's
/// thread (issue 41: before, it read them in place), its caller reads their records, and they
/// fall due and are delivered in order.
#[test]
fn delayed_paged_messages_fall_due() {
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(5000))]));
    publish_n(&mut tb, c, "q", 5);
    disk.sync(&mut tb);
    assert_eq!(disk.reads(), 0);
    let peek = tb.broker.peek_delayed("/", "q", 10).unwrap();
    assert_eq!(disk.reads(), 0, "the peek read no record");
    assert_eq!(peeked_bodies(peek), numbered_bodies(0..5));
    assert_eq!(disk.reads(), 3, "its caller read the 3 paged ones");
    assert!(body_texts(&consume(&mut tb, c, "q", "ctag", true)).is_empty());
    let effects = tb.advance(Duration::from_millis(5000));
    assert_eq!(body_texts(&effects), numbered_bodies(0..5));
}

/// A delayed listing reads the records of paged messages up to a bound of bytes, the first
/// always: a record is read whole (its whole body), however little of it a listing shows, so
/// 1,000 large delayed messages would otherwise be read into memory for one response. Before,
/// the listing read every record it found.
#[test]
fn a_delayed_listing_reads_stored_records_up_to_its_bound() {
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(5000))]));
    for i in 0..6 {
        tb.publish_with(c, "", "q", properties(i), &vec![b'x'; 100_000], false);
    }
    disk.sync(&mut tb);
    let peek = tb.broker.peek_delayed("/", "q", 10).unwrap();
    assert_eq!(peek.read_stored(usize::MAX).len(), 6);
    assert_eq!(disk.reads(), 4, "four are paged");
    let peek = tb.broker.peek_delayed("/", "q", 10).unwrap();
    let listed = peek.read_stored(250_000);
    assert_eq!((listed.len(), disk.reads()), (4, 6), "the resident two, then two records of 100 kB");
    let peek = tb.broker.peek_delayed("/", "q", 10).unwrap();
    assert_eq!(peek.read_stored(1).len(), 3, "the first record is read whatever the bound");
}

/// A slice of a search by `message_id` hands out paged messages' records up to a bound of
/// bytes, the first always (each is read whole to learn its `message_id`); the next slice goes
/// on from there, and every match is found. Before, a slice's only bound was the number of
/// records (128 in the HTTP API: up to 16 GB of the largest messages).
#[test]
fn a_search_by_message_id_reads_stored_records_up_to_a_bound_per_slice() {
    use hourglass_broker::admin::DelayedSlice;
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(5000))]));
    for i in 0..6 {
        tb.publish_with(c, "", "q", properties(i % 2), &vec![b'x'; 100_000], false);
    }
    disk.sync(&mut tb);
    let slice = DelayedSlice { examined: 100, reads: 100, read_bytes: 150_000 };
    let (mut found, mut cursor, mut slices) = (Vec::new(), None, 0);
    loop {
        let page = tb.broker.delayed_with_message_id("/", "q", "m1", cursor, slice).unwrap();
        let read = disk.reads();
        let (matches, next) = page.found();
        found.extend(matches);
        assert!(disk.reads() - read <= 1, "one record of 100 kB a slice");
        slices += 1;
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(slices < 10, "the search ends");
    }
    assert_eq!((found.len(), slices), (3, 4), "m1 thrice; the resident two and one record, then one each");
}

/// `setup` of a queue with priorities 0 ..= 5 holding a persistent message (`body 0`, …) of
/// each of `priorities` in turn, stored: all but the first few paged out.
fn paged_priorities(priorities: &[u8]) -> (TestBroker, Chan, Disk) {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-max-priority", FieldValue::I64(5))]));
    for (i, &priority) in priorities.iter().enumerate() {
        let props = BasicProperties { priority: Some(priority), ..properties(i) };
        tb.publish_with(c, "", "q", props, format!("body {i}").as_bytes(), false);
    }
    disk.sync(&mut tb);
    (tb, c, disk)
}

/// Priorities still order paged messages.
#[test]
fn priorities_order_paged_messages() {
    let (mut tb, c, disk) = paged_priorities(&[1, 5, 1, 5, 1, 5]);
    let effects = consume(&mut tb, c, "q", "ctag", true);
    assert_eq!(body_texts(&effects), ["body 1", "body 3", "body 5", "body 0", "body 2", "body 4"]);
    assert!(disk.reads() > 0);
}

/// Purge and delete settle paged messages without reading them.
#[test]
fn purge_and_delete_settle_paged_messages() {
    let (mut tb, c, mut disk) = paged_backlog(5);
    let mut purged = tb.call(c, QueuePurge { queue: short("q"), ..Default::default() });
    purged.extend(disk.sync(&mut tb));
    assert!(matches!(methods(&purged).as_slice(), [Method::QueuePurgeOk(ok)] if ok.message_count == 5));
    assert_eq!(disk.live(), 0);
    publish_n(&mut tb, c, "q", 5);
    disk.sync(&mut tb);
    tb.call(c, QueueDelete { queue: short("q"), ..Default::default() });
    disk.sync(&mut tb);
    assert_eq!((disk.live(), disk.reads()), (0, 0));
}

/// A paged message whose record cannot be read is dropped, counted and settled; the consumer
/// gets the next one instead of waiting.
#[test]
fn an_unreadable_paged_message_is_dropped() {
    let (mut tb, c, mut disk) = paged_backlog(5);
    let lost = disk.stored.queues.values().next().unwrap()[3].clone();
    let StoredBody::At(location) = lost.body else { unreachable!() };
    disk.source.records.lock().unwrap().remove(&location);
    let effects = consume(&mut tb, c, "q", "ctag", true);
    assert_eq!(body_texts(&effects), ["body 0", "body 1", "body 2", "body 4"]);
    assert_eq!(tb.broker.unreadable_messages(), 1);
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 0, "the unreadable message was settled too");
}

/// A message stored before paging (version-1 metadata: no priority, expiration or size) is read
/// whole at restore, then delivered as before.
#[test]
fn version_1_metadata_is_read_at_restore() {
    use hourglass_broker::persist::MessageMeta;
    let (tb, _, mut disk) = paged_backlog(3);
    for m in disk.stored.queues.values_mut().flatten() {
        let meta = MessageMeta::decode(&m.metadata).expect("version 2");
        assert!(meta.facts.is_some());
        m.metadata = MessageMeta { facts: None, ..meta }.encode();
    }
    let mut restored = disk.restart(&tb, two_resident());
    assert_eq!(disk.reads(), 3, "each version-1 message read at restore");
    let c2 = restored.channel();
    let effects = consume(&mut restored, c2, "q", "ctag", true);
    assert_eq!(body_texts(&effects), numbered_bodies(0..3));
    assert_eq!(disk.reads(), 3, "and not again");
}

/// A consumer of a deep paged queue is fed one read-ahead per read, and the broker reads no
/// record itself: it asks the driver for the paged head and a batch behind it, and each answer
/// delivers that batch and asks for the next. Before, the deliveries read the records on the
/// broker's thread, through the injected `MessageSource`, during the command.
#[test]
fn paged_messages_reach_a_consumer_through_reads_the_driver_performs() {
    let (mut tb, c, disk) = paged_backlog(3000);
    consume_unanswered(&mut tb, c, "ctag");
    assert_eq!(disk.reads(), 0, "the broker read no record");
    let mut got = body_texts(&tb.poll_effects());
    assert_eq!(got, numbered_bodies(0..3), "the resident ones at once");
    let read_ahead = two_resident().consumer_read();
    while let Some(read) = tb.broker.poll_message_read() {
        let batch = read_ahead.min(3000 - got.len());
        assert_eq!(read.locations.len(), batch, "a read-ahead per read");
        assert!(tb.broker.poll_message_read().is_none(), "one read out at a time");
        let reads_before = disk.reads();
        let messages = read.perform(tb.broker.message_source().as_deref());
        tb.broker.handle_message_read(read, messages, tb.clock.now());
        let delivered = body_texts(&tb.poll_effects());
        assert_eq!((delivered.len(), disk.reads()), (batch, reads_before + batch));
        got.extend(delivered);
    }
    assert_eq!(got, numbered_bodies(0..3000));
}

/// basic.get on a queue whose head is paged out reads no record on the broker's thread: it
/// waits for the read it asked for, and later gets (another channel's too) wait behind it; the
/// answer serves them in the order they came, and the channels' other traffic goes on meanwhile.
/// A waiting get whose channel closes is forgotten, its message left for the next get. Before,
/// the get read the head and a read-ahead behind it in place.
#[test]
fn a_basic_get_on_a_paged_head_waits_for_a_read_the_driver_performs() {
    let (mut tb, c, disk) = paged_backlog(6);
    let (second, closing) = (tb.channel(), tb.channel());
    let get = || BasicGet { queue: short("q"), ..Default::default() };
    let resident: Vec<_> = (0..3).flat_map(|_| gotten(&tb.call(c, get()))).collect();
    assert_eq!(resident.len(), 3, "the resident ones at once");
    for chan in [c, closing, second] {
        get_unanswered(&mut tb, chan);
    }
    assert_eq!(disk.reads(), 0, "the broker read no record");
    assert!(tb.broker.poll_effect().is_none(), "no get answered yet");
    assert_eq!(depth_unanswered(&mut tb, second, "q"), 3, "other methods are answered meanwhile");
    unanswered(&mut tb, closing, ChannelClose::default());
    let closed = tb.poll_effects();
    assert_eq!(methods(&closed), [Method::ChannelCloseOk(ChannelCloseOk {})]);
    let read = tb.broker.poll_message_read().expect("the gets asked for the head");
    assert!(tb.broker.poll_message_read().is_none(), "one read for them all");
    let messages = read.perform(tb.broker.message_source().as_deref());
    tb.broker.handle_message_read(read, messages, tb.clock.now());
    let effects = tb.poll_effects();
    let answered: Vec<_> = effects.iter().map(|effect| effect.channel_key()).collect();
    assert_eq!(answered, [Some((c.conn, c.channel)), Some((second.conn, second.channel))], "in order");
    let bodies: Vec<_> =
        gotten(&effects).iter().map(|m| String::from_utf8_lossy(&m.body).into_owned()).collect();
    assert_eq!(bodies, numbered_bodies(3..5), "the closed channel's get took nothing");
}

/// The HTTP API's get (its requests) reads no record on the broker's thread (issue 41). While a
/// read of the queue is out it takes nothing and says it awaits a read; the wait it then sends
/// is woken once the read is answered, which serves the clients' gets waiting there first. The
/// next get asks for the paged ones among the messages it would take, in one read whatever the
/// queue's resident limits (2 here), and once that is answered takes them all in order. Before,
/// the get read the paged ones in place.
#[test]
fn the_http_api_s_get_waits_for_the_read_of_the_paged_messages_it_takes() {
    use hourglass_broker::requests::{Job, ReadWait};
    use hourglass_broker::Notice;
    let (mut tb, c, disk) = paged_backlog(9);
    for _ in 0..3 {
        tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    }
    get_unanswered(&mut tb, c);
    assert!(tb.broker.poll_effect().is_none(), "the client's get waits for a read");
    let mut ticket = 0;
    let mut wait_and_answer = |tb: &mut TestBroker| {
        ticket += 1;
        Job::wait_for_read(ReadWait { vhost: "/".into(), queue: "q".into() }).run(
            &mut tb.broker,
            tb.clock.now(),
            ticket,
        );
        assert_eq!(tb.broker.poll_notice(), None, "the wait waits");
        tb.answer_reads();
        assert_eq!(tb.broker.poll_notice(), Some(Notice::ReadAnswered { ticket }), "woken by the answer");
    };
    let gotten = http_get(&mut tb, 5);
    assert!(gotten.messages.is_empty() && gotten.awaits_read, "it took nothing and awaits the read");
    assert_eq!(disk.reads(), 0, "no record read on the broker's thread");
    wait_and_answer(&mut tb);
    assert_eq!(body_texts_of_gets(&tb.poll_effects()), numbered_bodies(3..4), "the client's get first");
    let gotten = http_get(&mut tb, 5);
    assert!(gotten.messages.is_empty() && gotten.awaits_read, "it asked for 5 to 8");
    let read = disk.reads();
    wait_and_answer(&mut tb);
    assert_eq!(disk.reads(), read + 4, "one read of the four paged ones");
    let gotten = http_get(&mut tb, 5);
    assert_eq!((gotten_bodies(&gotten), gotten.awaits_read), (numbered_bodies(4..9), false));
    Job::wait_for_read(ReadWait { vhost: "/".into(), queue: "q".into() }).run(
        &mut tb.broker,
        tb.clock.now(),
        99,
    );
    assert_eq!(tb.broker.poll_notice(), Some(Notice::ReadAnswered { ticket: 99 }), "no read out: at once");
}

/// A record the HTTP API's get asked for and could not be read is not asked for again: the next
/// get drops it (counted as unreadable) and takes the messages around it. Before, every get
/// asked for it again and took nothing, until the API's last get.
#[test]
fn the_http_api_s_get_drops_a_record_its_read_could_not_read() {
    let (mut tb, _, mut disk) = paged_backlog(6);
    let lost = disk.stored.queues.values().next().unwrap()[3].clone();
    let StoredBody::At(location) = lost.body else { unreachable!() };
    disk.source.records.lock().unwrap().remove(&location);
    let gotten = http_get(&mut tb, 6);
    assert!(gotten.messages.is_empty() && gotten.awaits_read);
    tb.answer_reads();
    assert_eq!(disk.reads(), 3, "the three paged ones, one of them unreadable");
    let gotten = http_get(&mut tb, 6);
    assert_eq!(gotten_bodies(&gotten), ["body 0", "body 1", "body 2", "body 4", "body 5"]);
    assert!(!gotten.awaits_read);
    assert_eq!((disk.reads(), tb.broker.unreadable_messages()), (3, 1), "not asked for again; dropped");
    disk.sync(&mut tb);
    assert_eq!(disk.live(), 0, "the unreadable one was settled too");
}

/// In a queue with priorities the HTTP API's get reads the paged messages of the highest level
/// holding messages; at a paged one of a lower level it stops with what it took (acknowledged
/// here), awaiting the read its take asked for, and the next get takes from there.
#[test]
fn the_http_api_s_get_stops_at_a_paged_message_of_a_lower_priority() {
    let (mut tb, _, _disk) = paged_priorities(&[1, 1, 1, 1, 5, 5]);
    let mut rounds = Vec::new();
    let mut got = Vec::new();
    for _ in 0..4 {
        let gotten = http_get(&mut tb, 6 - got.len() as u64);
        got.extend(gotten_bodies(&gotten));
        rounds.push((gotten.messages.len(), gotten.awaits_read));
        if !gotten.awaits_read {
            break;
        }
        tb.answer_reads();
    }
    // The first asks for the paged priority-5 messages and takes nothing; the second takes them
    // and the resident priority-1 ones, and stops at the paged priority-1 one its take asked
    // for; the third takes it.
    assert_eq!(rounds, [(0, true), (5, true), (1, false)]);
    assert_eq!(got, ["body 4", "body 5", "body 0", "body 1", "body 2", "body 3"]);
}

/// In a fair queue (SQS standard) the HTTP API's get takes a noisy tenant's messages until the
/// quiet tenant's, paged out, comes first; it stops there and says it awaits that read, though
/// its own acknowledgement leaves the noisy tenant quiet again (which a check after the
/// settlement would see: before, it answered that nothing was awaited and the API stopped
/// short). The next get takes the rest.
#[test]
fn the_http_api_s_get_of_a_fair_queue_stops_at_the_quiet_tenant_s_paged_message() {
    let sqs_made =
        FieldTable::from_entries([("x-sqs-receive-message-wait-time-seconds", FieldValue::I32(0))]);
    let limits = PagingLimits { max_resident_messages: 40, max_resident_bytes: 1 << 20 };
    let (mut tb, c, mut disk) = setup_with(sqs_made, limits);
    let tenants: Vec<&str> = std::iter::repeat_n("busy", 41).chain(["quiet"]).collect();
    publish_grouped(&mut tb, c, &tenants);
    disk.sync(&mut tb);
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready_ram, 41, "the quiet one is paged");
    let gotten = http_get(&mut tb, 50);
    assert_eq!(gotten_bodies(&gotten), numbered_bodies(0..30), "busy is noisy after 30");
    assert!(gotten.awaits_read, "it stopped at the quiet tenant's paged message");
    tb.answer_reads();
    let mut rest = gotten_bodies(&http_get(&mut tb, 20));
    rest.sort();
    let mut expected = numbered_bodies(30..42);
    expected.sort();
    assert_eq!(rest, expected);
}

/// A wait of the HTTP API's get is woken when its queue is deleted, not left for a read
/// answer that the queue will never take.
#[test]
fn the_http_api_s_wait_for_a_read_is_woken_by_its_queue_s_delete() {
    use hourglass_broker::requests::{Job, ReadWait};
    use hourglass_broker::Notice;
    let (mut tb, c, _disk) = paged_backlog(4);
    let took_resident = (0..10).take_while(|_| !http_get(&mut tb, 1).awaits_read).count();
    assert!(took_resident < 10, "a get reached the paged messages");
    Job::wait_for_read(ReadWait { vhost: "/".into(), queue: "q".into() }).run(
        &mut tb.broker,
        tb.clock.now(),
        3,
    );
    assert_eq!(tb.broker.poll_notice(), None, "the wait waits");
    tb.call(c, QueueDelete { queue: short("q"), ..Default::default() });
    assert_eq!(tb.broker.poll_notice(), Some(Notice::ReadAnswered { ticket: 3 }), "woken by the delete");
}

/// The bodies of the messages an HTTP API get took, in order.
fn gotten_bodies(gotten: &hourglass_broker::requests::Gotten) -> Vec<String> {
    gotten.messages.iter().map(|(_, m)| String::from_utf8_lossy(&m.body).into_owned()).collect()
}

/// The bodies of the delayed messages `peek` found, its paged ones read.
fn peeked_bodies(peek: hourglass_broker::admin::DelayedPeek) -> Vec<String> {
    let listed = peek.read_stored(usize::MAX);
    listed.iter().map(|m| String::from_utf8_lossy(&m.message.body).into_owned()).collect()
}

/// The HTTP API's get (a request of its) of up to `count` messages of `q`, acked, as guest.
fn http_get(tb: &mut TestBroker, count: u64) -> hourglass_broker::requests::Gotten {
    use hourglass_broker::requests::{AsUser, GetMessages, GetSettlement, Request};
    let who = AsUser { user: "guest".into(), vhost: "/".into(), permissions: Permissions::full() };
    let get = GetMessages {
        who,
        queue: short("q"),
        count,
        body_bytes_max: 1 << 20,
        settlement: GetSettlement::Ack,
        wait_for_reads: true,
    };
    get.apply(&mut tb.broker, tb.clock.now()).expect("the get is allowed")
}

/// A client that sends basic.gets without waiting for their replies may have 1,000 waiting on a
/// channel for a paged head: the next closes the channel with 406, and the other channels' gets
/// are answered when the read is.
#[test]
fn a_channel_may_have_a_bounded_number_of_gets_waiting() {
    let (mut tb, _, _disk) = paged_backlog(4);
    let (greedy, other) = (tb.channel(), tb.channel());
    get_resident(&mut tb, other);
    for _ in 0..1_000 {
        get_unanswered(&mut tb, greedy);
    }
    get_unanswered(&mut tb, other);
    assert!(tb.broker.poll_effect().is_none(), "all of them wait");
    get_unanswered(&mut tb, greedy);
    let effects = tb.poll_effects();
    match effects.as_slice() {
        [hourglass_broker::Effect::ChannelError { conn, channel, error }] => {
            assert_eq!((*conn, *channel), (greedy.conn, greedy.channel));
            assert_eq!(error.reply_code, 406);
            let text = error.reply_text.as_str();
            assert_eq!(text, "PRECONDITION_FAILED - more than 1000 basic.get waiting on this channel");
        }
        other => panic!("expected the channel closed, got {other:?}"),
    }
    tb.answer_reads();
    let effects = tb.poll_effects();
    let answered: Vec<_> = effects.iter().map(|effect| effect.channel_key()).collect();
    assert_eq!(answered, [Some((other.conn, other.channel))], "the closed channel's gets were forgotten");
    assert_eq!(gotten(&effects).len(), 1);
}

/// A get waiting for its queue's paged head is answered with get-empty when the queue is deleted.
#[test]
fn a_get_waiting_on_a_deleted_queue_is_answered_empty() {
    let (mut tb, _, _disk) = paged_backlog(4);
    let (getter, deleter) = (tb.channel(), tb.channel());
    get_resident(&mut tb, getter);
    get_unanswered(&mut tb, getter);
    unanswered(&mut tb, deleter, QueueDelete { queue: short("q"), ..Default::default() });
    let effects = tb.poll_effects();
    assert!(
        effects.iter().any(|e| e.channel_key() == Some((getter.conn, getter.channel))
            && methods(std::slice::from_ref(e)) == [Method::BasicGetEmpty(BasicGetEmpty {})]),
        "get-empty for the waiting get: {effects:?}"
    );
    tb.answer_reads();
    assert!(gotten(&tb.poll_effects()).is_empty());
}

/// Takes with no-ack basic.gets on `c` the three messages `paged_backlog` leaves in memory.
fn get_resident(tb: &mut TestBroker, c: Chan) {
    for _ in 0..3 {
        tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    }
}

/// A basic.get of `q` awaiting an ack, with the reads it asks for left unanswered.
fn get_unanswered(tb: &mut TestBroker, c: Chan) {
    unanswered(tb, c, BasicGet { queue: short("q"), ..Default::default() });
}

/// `method` on channel `c`, with the reads it asks for left unanswered and its effects left to
/// poll.
fn unanswered(tb: &mut TestBroker, c: Chan, method: impl Into<Method>) {
    let now = tb.clock.now();
    tb.broker
        .handle_command(Command::Method { conn: c.conn, channel: c.channel, method: method.into() }, now);
}

/// A no-ack basic.consume of `q` as `tag`, with the reads it asks for left unanswered.
fn consume_unanswered(tb: &mut TestBroker, c: Chan, tag: &str) {
    unanswered(
        tb,
        c,
        BasicConsume { queue: short("q"), consumer_tag: short(tag), no_ack: true, ..Default::default() },
    );
}

/// The ready count of `queue` (a passive queue.declare), with the reads the broker asked for
/// left unanswered.
fn depth_unanswered(tb: &mut TestBroker, c: Chan, queue: &str) -> u32 {
    unanswered(tb, c, QueueDeclare { queue: short(queue), passive: true, ..Default::default() });
    let effects = tb.poll_effects();
    match methods(&effects).as_slice() {
        [Method::QueueDeclareOk(ok)] => ok.message_count,
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
}

/// A publish to `q`, with the reads it asks for left unanswered.
fn publish_unanswered(tb: &mut TestBroker, c: Chan, properties: BasicProperties, body: &'static [u8]) {
    let publish = Publish {
        exchange: short(""),
        routing_key: short("q"),
        mandatory: false,
        properties: properties.into(),
        body: bytes::Bytes::from_static(body),
    };
    let now = tb.clock.now();
    tb.broker.handle_command(
        Command::Publish { conn: c.conn, channel: c.channel, publish: Box::new(publish) },
        now,
    );
}

/// A message with TTL 0 published while the consumer waits for its queue's paged head to be
/// read does not overtake the messages ahead of it: it expires (semantics §1) and the consumer
/// gets the backlog, in order, once the read is answered.
#[test]
fn a_ttl_0_message_does_not_overtake_a_paged_head_being_read() {
    let (mut tb, c, _disk) = paged_backlog(6);
    consume_unanswered(&mut tb, c, "ctag");
    publish_unanswered(
        &mut tb,
        c,
        BasicProperties { expiration: Some(short("0")), ..Default::default() },
        b"ttl 0",
    );
    let mut got = body_texts(&tb.poll_effects());
    assert_eq!(got, numbered_bodies(0..3), "the resident ones, and not the TTL 0 one");
    got.extend(body_texts(&tb.advance(Duration::ZERO)));
    assert_eq!(got, numbered_bodies(0..6), "and never the TTL 0 one: it expired");
}

/// Consumers keep their turns while their queue waits for a read of its paged head: commands
/// that run the queue meanwhile (here publishes) deliver nothing and spend no one's turn, so the
/// read's messages go round robin from the consumer whose turn it was. Before, each such run
/// moved the rotation on.
#[test]
fn consumers_keep_their_turns_while_a_paged_head_is_read() {
    let (mut tb, c, _disk) = paged_backlog(7);
    for tag in ["a", "b"] {
        consume_unanswered(&mut tb, c, tag);
    }
    for _ in 0..2 {
        publish_unanswered(&mut tb, c, BasicProperties::default(), b"late");
    }
    let effects = tb.poll_effects();
    let mut tags: Vec<String> =
        deliveries(&effects).iter().map(|d| d.method.consumer_tag.as_str().to_string()).collect();
    tags.extend(
        deliveries(&tb.advance(Duration::ZERO)).iter().map(|d| d.method.consumer_tag.as_str().to_string()),
    );
    assert_eq!(
        tags,
        ["a", "a", "a", "a", "b", "a", "b", "a", "b"],
        "a took 0..3 alone, then turns alternate"
    );
}

/// Publishes `n` persistent messages alike but for their bodies (`body 0000`, … all of one
/// size, so that paged out they make runs), `gap` apart.
fn publish_alike(tb: &mut TestBroker, c: Chan, n: usize, gap: Duration) {
    let alike = BasicProperties { delivery_mode: Some(2), ..Default::default() };
    for i in 0..n {
        tb.publish_with(c, "", "q", alike.clone(), format!("body {i:04}").as_bytes(), false);
        tb.advance(gap);
    }
}

fn alike_bodies(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("body {i:04}")).collect()
}

/// Consumes `q` as `tag` and takes what `turns` more milliseconds bring (a deep paged queue is
/// read back in slices, one per dispatch).
fn consume_in_slices(tb: &mut TestBroker, c: Chan, tag: &str, no_ack: bool, turns: usize) -> Vec<String> {
    let mut got = body_texts(&consume(tb, c, "q", tag, no_ack));
    for _ in 0..turns {
        got.extend(body_texts(&tb.advance(Duration::from_millis(1))));
    }
    got
}

/// `got` is `expected`; the message says how many came and whether those were in order.
fn assert_in_order(got: &[String], expected: &[String], what: &str) {
    let prefix = &expected[..got.len().min(expected.len())];
    assert!(got == expected, "{what}: {} delivered, in order: {}", got.len(), got == prefix);
}

/// Issue 38: a deep backlog of alike messages (kept in runs once paged out, ready_run.rs) is
/// delivered exactly, before and after a restart, with requeues going back to their places
/// among them and every message settled once.
#[test]
fn a_deep_backlog_of_alike_messages_is_delivered_exactly_across_a_restart() {
    let (mut tb, c, mut disk) = setup(FieldTable::new());
    publish_alike(&mut tb, c, 3000, Duration::ZERO);
    disk.sync(&mut tb);
    // Take 1,500 unacked (read back in slices), give back every third: they return to their
    // places.
    tb.call(c, BasicQos { prefetch_count: 1500, ..Default::default() });
    let first = consume_in_slices(&mut tb, c, "ctag", false, 5);
    assert_in_order(&first, &alike_bodies(0..1500), "before the restart");
    for tag in (1..=1500u64).filter(|tag| tag % 3 == 0) {
        tb.call(c, BasicNack { delivery_tag: tag, multiple: false, requeue: true });
    }
    tb.call(c, BasicCancel { consumer_tag: short("ctag"), nowait: false });
    disk.sync(&mut tb);

    let mut restored = disk.restart(&tb, two_resident());
    let c2 = restored.channel();
    // Everything not acked before the restart (the channel's unacked came back too), in order.
    let got = consume_in_slices(&mut restored, c2, "again", true, 10);
    assert_in_order(&got, &alike_bodies(0..3000), "after the restart");
    disk.sync(&mut restored);
    assert_eq!(disk.live(), 0, "each message settled once");
}

/// Issue 38: a deep TTL'd backlog (in runs once paged out, each run with one TTL-index key)
/// expires message by message on time, before and after a restart: at each step exactly the
/// messages whose deadline has come are gone, and the rest are delivered in order.
#[test]
fn a_deep_ttl_backlog_expires_on_time_across_a_restart() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-message-ttl", FieldValue::I64(60_000))]));
    // One message a millisecond: message i expires 60 s + i ms after the first publish.
    publish_alike(&mut tb, c, 3000, Duration::from_millis(1));
    disk.sync(&mut tb);
    let ready = |tb: &TestBroker| tb.broker.queue_stats("/", "q").unwrap().messages_ready;
    // 60 s after the first publish, less the 3 s of publishing: the first 500 are due.
    tb.advance(Duration::from_millis(57_500));
    assert_eq!(ready(&tb), 2_499, "message 0 ..= 500 expired");
    disk.sync(&mut tb);

    let mut restored = disk.restart(&tb, two_resident());
    assert_eq!(ready(&restored), 2_499);
    let stats = restored.broker.queue_stats("/", "q").unwrap();
    assert_eq!(stats.messages_with_ttl, 2_499);
    let first = stats.next_expiry.expect("a next expiry");
    assert_eq!(stats.last_expiry, Some(first.saturating_add_millis(2_498)), "one a millisecond");
    restored.advance(Duration::from_millis(999));
    assert_eq!(ready(&restored), 1_500, "a second later, a thousand more");
    let c2 = restored.channel();
    // The rest in slices, a millisecond apart (the next deadline is 23 ms away).
    let got = consume_in_slices(&mut restored, c2, "ctag", true, 5);
    assert_in_order(&got, &alike_bodies(1500..3000), "after the restart");
    disk.sync(&mut restored);
    assert_eq!(disk.live(), 0, "each message settled once");
}

/// Delayed messages are found by their `message_id` property slice by slice, paged ones handed
/// out within each slice's read budget and read by the caller, not on the broker's thread (issue
/// 41), and cancelled or rescheduled by where they wait (issue 23: the delayed-message plugin's
/// users cancel by message id).
#[test]
fn delayed_messages_are_found_by_message_id_in_slices_and_steered() {
    use hourglass_broker::admin::{DelayedKey, DelayedSlice};
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(5000))]));
    publish_n(&mut tb, c, "q", 6);
    // A second message with the id m4, published later.
    tb.publish_with(c, "", "q", properties(4), b"again 4", false);
    disk.sync(&mut tb);
    let search = |tb: &TestBroker, id: &str| {
        let (mut found, mut cursor, mut slices) = (Vec::new(), None, 0);
        loop {
            let slice = DelayedSlice { examined: 3, reads: 2, read_bytes: 1 << 20 };
            let read = disk.reads();
            let page = tb.broker.delayed_with_message_id("/", "q", id, cursor, slice).unwrap();
            assert_eq!(disk.reads(), read, "a slice reads no record on the broker's thread");
            let (matches, next) = page.found();
            found.extend(matches);
            slices += 1;
            match next {
                Some(next) => cursor = Some(next),
                None => return (found, slices),
            }
        }
    };
    let reads_before = disk.reads();
    let (found, slices): (Vec<DelayedKey>, usize) = search(&tb, "m4");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(slices >= 3, "7 messages, at most 3 (and 2 reads) a slice: {slices} slices");
    assert!(disk.reads() > reads_before, "paged ones were read back");
    assert!(search(&tb, "nobody").0.is_empty());

    // Cancelled by where they wait: both m4 go, the others stay.
    for key in &found {
        tb.broker.cancel_delayed_at("/", "q", *key).unwrap();
    }
    assert_eq!(
        tb.broker.cancel_delayed_at("/", "q", found[0]),
        Err(hourglass_broker::admin::DelayedError::MessageNotFound)
    );
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_delayed, 5);
    // m1 rescheduled to now: ready at once, the rest still wait.
    let (m1, _) = search(&tb, "m1");
    let now = tb.clock.now();
    tb.broker.reschedule_delayed_at("/", "q", m1[0], now, now).unwrap();
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_delayed), (1, 4));
    let effects = tb.advance(Duration::from_millis(5000));
    let mut delivered = body_texts(&consume(&mut tb, c, "q", "ctag", true));
    delivered.extend(body_texts(&effects));
    assert_eq!(delivered, ["body 1", "body 0", "body 2", "body 3", "body 5"]);
}

/// A broker keeping two messages of a queue resident, with spill files, and its durable queue
/// `q` delaying every message an hour; 40 messages published and stored. Also their due time.
fn forty_delayed_an_hour(disk: &mut Disk) -> (TestBroker, Timestamp) {
    delayed_an_hour_in(disk, Arc::new(MemorySpillFiles::default()), 40)
}

/// [`forty_delayed_an_hour`], `count` messages, with the spill files given.
fn delayed_an_hour_in(
    disk: &mut Disk,
    spill: Arc<MemorySpillFiles>,
    count: usize,
) -> (TestBroker, Timestamp) {
    const HOUR_MS: u64 = 3_600_000;
    let mut tb = paging_broker(&disk.source, two_resident());
    tb.broker.set_spill_files(spill);
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(HOUR_MS as i64))]);
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, arguments, ..Default::default() });
    publish_n(&mut tb, c, "q", count);
    let due = tb.clock.now().saturating_add_millis(HOUR_MS);
    disk.sync(&mut tb);
    (tb, due)
}

/// Queue `q`'s delayed messages waiting in spill files.
fn delayed_on_disk(tb: &TestBroker) -> usize {
    tb.broker.queue_stats("/", "q").unwrap().messages_delayed_on_disk
}

/// How long from now until messages due at `due` are loaded: a horizon before it.
fn until_loaded(tb: &TestBroker, due: Timestamp) -> Duration {
    due.saturating_duration_since(tb.clock.now()) - Duration::from_millis(NEAR_HORIZON_MS)
}

/// From a horizon before their due time: nothing fires before it, a new consumer of `q` gets
/// nothing early, and the messages fire at it, in order.
fn fire_at_their_due_time(tb: &mut TestBroker, bodies: Vec<String>) {
    assert!(body_texts(&tb.advance(Duration::from_millis(NEAR_HORIZON_MS - 1))).is_empty(), "never early");
    let c = tb.channel();
    assert_eq!(body_texts(&consume(tb, c, "q", "ctag", true)).len(), 0);
    assert_eq!(body_texts(&tb.advance(Duration::from_millis(1))), bodies);
}

/// The HTTP API's delayed listings read no spill file and no record on the broker's thread
/// (issue 41): a peek and a search slice take the far tier's listing (no read), and their caller
/// reads the spill files and the records, finding every message in due order. Before, the
/// broker's thread read the spill runs of every listing.
#[test]
fn delayed_listings_read_no_spill_file_on_the_broker_s_thread() {
    use hourglass_broker::admin::DelayedSlice;
    let mut disk = Disk::default();
    let spill = Arc::new(MemorySpillFiles::with_run_records(10));
    let (tb, _) = delayed_an_hour_in(&mut disk, spill.clone(), 40);
    assert_eq!((delayed_on_disk(&tb), spill.file_count()), (38, 3), "three runs of 10 written");
    let (spill_reads, reads) = (spill.reads(), disk.reads());
    let peek = tb.broker.peek_delayed("/", "q", 100).unwrap();
    let slice = DelayedSlice { examined: 100, reads: 100, read_bytes: 1 << 20 };
    let search = tb.broker.delayed_with_message_id("/", "q", "m7", None, slice).unwrap();
    assert_eq!((spill.reads(), disk.reads()), (spill_reads, reads), "nothing read on the broker's thread");
    assert_eq!(peeked_bodies(peek), numbered_bodies(0..40));
    assert!(
        spill.reads() > spill_reads && disk.reads() == reads + 38,
        "the caller read the runs and records"
    );
    let (found, next) = search.found();
    assert_eq!((found.len(), next), (1, None));
}

/// Far-future delayed messages (ADR 0013, issue 23): once stored and paged out they wait on
/// disk only, come back into memory a horizon before they are due and fire on time, in order;
/// a restore puts them back on disk with their ids, and a search by `message_id` and a cancel
/// find them there.
#[test]
fn far_future_delayed_messages_wait_on_disk_and_fire_on_time() {
    use hourglass_broker::admin::DelayedSlice;
    let mut disk = Disk::default();
    let (tb, due) = forty_delayed_an_hour(&mut disk);
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_delayed, stats.next_due), (40, Some(due)));
    let on_disk = delayed_on_disk;
    assert_eq!(
        (on_disk(&tb), tb.broker.damaged_spill_runs()),
        (38, 0),
        "all but the two resident ones wait on disk"
    );
    let listed: Vec<u64> = tb.broker.list_delayed("/", "q", 100).unwrap().iter().map(|d| d.seq).collect();
    assert_eq!(listed.len(), 40);

    // Restored: back on disk, the same ids, the count exact.
    let spill = Arc::new(MemorySpillFiles::default());
    let mut tb = disk.restart_spilling(&tb, two_resident(), Some(spill));
    assert_eq!((on_disk(&tb), tb.broker.damaged_spill_runs()), (40, 0));
    let relisted: Vec<u64> = tb.broker.list_delayed("/", "q", 100).unwrap().iter().map(|d| d.seq).collect();
    assert_eq!(relisted, listed, "ids are stable across the restore");

    // Found by message_id on disk, and cancelled there.
    let page = tb.broker.delayed_with_message_id(
        "/",
        "q",
        "m7",
        None,
        DelayedSlice { examined: 100, reads: 100, read_bytes: 1 << 20 },
    );
    let (found, _) = page.unwrap().found();
    assert_eq!(found.len(), 1);
    tb.broker.cancel_delayed_at("/", "q", found[0]).unwrap();
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_delayed, 39);
    disk.sync(&mut tb);

    // Loaded a horizon ahead, never fired early, all delivered at their due time in order.
    let c = tb.channel();
    assert!(body_texts(&consume(&mut tb, c, "q", "ctag", true)).is_empty());
    let horizon = NEAR_HORIZON_MS;
    let to_load = until_loaded(&tb, due);
    tb.advance(to_load - Duration::from_millis(1));
    assert_eq!(on_disk(&tb), 39);
    tb.advance(Duration::from_millis(1));
    assert_eq!(on_disk(&tb), 0, "loaded a horizon before the due time");
    assert!(body_texts(&tb.advance(Duration::from_millis(horizon - 1))).is_empty(), "never early");
    let delivered = body_texts(&tb.advance(Duration::from_millis(1)));
    let mut want = numbered_bodies(0..40);
    want.retain(|body| body != "body 7");
    assert_eq!(delivered, want);
}

/// Delayed messages that go far when the store reports them stored (after the last event that
/// filed their queue's timer) are still loaded a horizon ahead of their due time. The queue kept
/// the deadline it was filed at while they were near, their due time, so they were read back
/// from disk only then: the real binary's `spill_damage` test saw 16,950 still on disk 10 s
/// past the horizon.
#[test]
fn delayed_messages_that_go_far_on_being_stored_load_a_horizon_ahead() {
    let mut disk = Disk::default();
    let (mut tb, due) = forty_delayed_an_hour(&mut disk);
    let on_disk = delayed_on_disk;
    assert_eq!(on_disk(&tb), 38, "paged out and gone far once stored");
    tb.advance(until_loaded(&tb, due));
    assert_eq!(on_disk(&tb), 0, "loaded a horizon before the due time");
    fire_at_their_due_time(&mut tb, numbered_bodies(0..40));
}

/// A load of far-future delayed messages from spill run files reads nothing on the broker's
/// thread (ARCHITECTURE.md, rule 1; issue 41): the broker asks its driver for each run's chunk,
/// and the messages come near, and then fire on time, once the driver hands the reads back.
/// Before, the load read the files itself, through the injected `SpillFiles`.
#[test]
fn far_loads_ask_the_driver_to_read_their_run_files() {
    let mut disk = Disk::default();
    let spill = Arc::new(MemorySpillFiles::with_run_records(10));
    let (mut tb, due) = delayed_an_hour_in(&mut disk, spill.clone(), 40);
    assert_eq!((delayed_on_disk(&tb), spill.file_count()), (38, 3), "three runs of 10, 8 buffered");
    let now = tb.clock.advance(until_loaded(&tb, due));
    tb.broker.handle_timeout(now);
    assert_eq!(spill.reads(), 0, "the broker read no file");
    assert_eq!(delayed_on_disk(&tb), 30, "the buffered ones are in memory: near at once");
    let reads: Vec<_> = std::iter::from_fn(|| tb.broker.poll_spill_read()).collect();
    assert_eq!(reads.len(), 3, "one read asked for each run");
    // The buffered ones are due as early as the runs' and wait for them (due order).
    assert_eq!(tb.broker.next_deadline(), None, "no deadline while the reads are out");
    for read in reads {
        let chunk = spill.read_at(&read.file, read.offset, read.len);
        tb.broker.handle_spill_read(read, chunk, now);
    }
    assert_eq!((delayed_on_disk(&tb), spill.file_count()), (0, 0), "loaded, the runs read through");
    fire_at_their_due_time(&mut tb, numbered_bodies(0..40));
}

/// More run files due at once than a far tier asks reads for at a time: the broker asks for
/// some, files the queue for no work it cannot do (before, it filed the queue as due at once
/// for the runs it could not ask for yet, and `handle_timeout` ran it again and again, for
/// ever), and asks for the rest as the answers come; all fire on time.
#[test]
fn more_due_run_files_than_reads_at_once_load_as_answers_come() {
    let mut disk = Disk::default();
    let spill = Arc::new(MemorySpillFiles::with_run_records(10));
    let (mut tb, due) = delayed_an_hour_in(&mut disk, spill.clone(), 200);
    assert_eq!((delayed_on_disk(&tb), spill.file_count()), (198, 19), "19 runs of 10, 8 buffered");
    let now = tb.clock.advance(until_loaded(&tb, due));
    tb.broker.handle_timeout(now);
    let mut asked = 0;
    let mut out: Vec<_> = std::iter::from_fn(|| tb.broker.poll_spill_read()).collect();
    assert!((1..19).contains(&out.len()), "some runs asked for, not all: {}", out.len());
    let deadline = tb.broker.next_deadline();
    assert!(deadline.is_none_or(|at| at > now), "no work filed that the broker cannot do now");
    while let Some(read) = out.pop() {
        asked += 1;
        let chunk = spill.read_at(&read.file, read.offset, read.len);
        tb.broker.handle_spill_read(read, chunk, now);
        out.extend(std::iter::from_fn(|| tb.broker.poll_spill_read()));
    }
    assert_eq!((asked, delayed_on_disk(&tb), spill.file_count()), (19, 0, 0), "each run read once, through");
    fire_at_their_due_time(&mut tb, numbered_bodies(0..200));
}

/// An SQS receive from a queue whose head is paged out reads no record on the broker's thread:
/// it takes what is in memory, asks for the head, and says so (`sqs_awaits_read`); a wait
/// registered meanwhile is woken only once the read is answered, and the receives after it take
/// the messages read, in order. Before, the receive read the head and 255 behind it in place.
#[test]
fn an_sqs_receive_of_a_paged_head_asks_for_a_read_and_its_wait_is_woken_by_the_answer() {
    use hourglass_broker::Notice;
    let (mut tb, c, disk) = paged_backlog(8);
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "q", 5, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&first), numbered_bodies(0..3), "the resident ones");
    assert_eq!(disk.reads(), 0, "the broker read no record");
    assert!(tb.broker.sqs_awaits_read("/", "q"));
    tb.broker.sqs_wait("/", "q", 7).unwrap();
    publish_unanswered(&mut tb, c, properties(8), b"body 8");
    assert_eq!(tb.broker.poll_notice(), None, "not woken while the read is out, a publish neither");
    tb.answer_reads();
    assert_eq!(tb.broker.poll_notice(), Some(Notice::SqsReady { ticket: 7 }), "woken by the answer");
    let mut got = received_texts(&first);
    for _ in 0..8 {
        let taken = tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap();
        assert!(!taken.is_empty(), "each answer brings messages to take");
        got.extend(received_texts(&taken));
        if got.len() == 9 {
            break;
        }
        assert!(tb.broker.sqs_awaits_read("/", "q"), "the next read is out");
        tb.answer_reads();
    }
    assert_eq!(got, numbered_bodies(0..9));
}

/// An SQS receive that waited for its queue's paged head to be read is woken by the answer even
/// when nothing is left for it (here the queue was purged meanwhile), so that it answers at once
/// instead of waiting out its time; so is one waiting on a queue that is deleted.
#[test]
fn a_receive_waiting_for_a_read_is_woken_when_nothing_is_left_or_the_queue_goes() {
    use hourglass_broker::Notice;
    let (mut tb, c, _disk) = paged_backlog(6);
    assert_eq!(tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap().len(), 3);
    tb.broker.sqs_wait("/", "q", 1).unwrap();
    unanswered(&mut tb, c, QueuePurge { queue: short("q"), ..Default::default() });
    assert_eq!(tb.broker.poll_notice(), None);
    tb.answer_reads();
    assert_eq!(tb.broker.poll_notice(), Some(Notice::SqsReady { ticket: 1 }), "woken by the answer");
    assert!(tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap().is_empty());
    assert!(!tb.broker.sqs_awaits_read("/", "q"));
    tb.broker.sqs_wait("/", "q", 2).unwrap();
    tb.call(c, QueueDelete { queue: short("q"), ..Default::default() });
    assert_eq!(tb.broker.poll_notice(), Some(Notice::SqsReady { ticket: 2 }), "woken by the delete");
}

/// An SQS FIFO queue's paged messages (issue 40, item 19): after a restart the queue keeps only
/// their locations, and their groups come back from their stored metadata without a read (before
/// metadata version 3, each was read back at restore, on the broker's thread), so each group is
/// still received in order and groups in parallel.
#[test]
fn paged_fifo_messages_keep_their_groups_across_a_restart() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-sqs-fifo", FieldValue::Bool(true))]));
    for (n, group) in ["g1", "g2", "g1", "g2", "g1", "g3"].into_iter().enumerate() {
        let mut properties = properties(n);
        properties.headers = Some(group_headers(group));
        tb.publish_with(c, "", "q", properties, format!("body {n}").as_bytes(), false);
    }
    disk.sync(&mut tb);
    let now = tb.clock.now();
    let first = tb.broker.sqs_receive("/", "q", 1, Some(30_000), now).unwrap();
    assert_eq!(received_texts(&first), ["body 0"]);
    let reads = disk.reads();
    // Room for the whole backlog in memory: one read brings it back.
    let limits = PagingLimits { max_resident_messages: 100, ..two_resident() };
    let mut restored = disk.restart(&tb, limits);
    assert_eq!(disk.reads(), reads, "no record read to learn the groups at restore");
    let got = receive_when_read(&mut restored, 2);
    assert_eq!(
        received_texts(&got),
        ["body 0", "body 2"],
        "g1's first is back at its place after the restart"
    );
    let got = receive_when_read(&mut restored, 10);
    assert_eq!(received_texts(&got), ["body 1", "body 3", "body 5"], "g1 waits; g2 then g3");
    assert!(receive_when_read(&mut restored, 10).is_empty());
}

/// An SQS receive of up to `max` from queue `q` as the endpoint makes it: one that takes nothing
/// while a read it needs is out is made again once the read is answered.
fn receive_when_read(tb: &mut TestBroker, max: usize) -> Vec<hourglass_broker::admin::SqsReceived> {
    let got = tb.broker.sqs_receive("/", "q", max, Some(30_000), tb.clock.now()).unwrap();
    if !got.is_empty() || !tb.broker.sqs_awaits_read("/", "q") {
        return got;
    }
    tb.answer_reads();
    tb.broker.sqs_receive("/", "q", max, Some(30_000), tb.clock.now()).unwrap()
}

/// A fair queue's paged messages keep their tenants across a restart (their groups come back
/// from their stored metadata): a noisy tenant's messages are still received after a quiet
/// tenant's. Before, restored paged messages counted as without a group, so the noisy tenant's
/// went first.
#[test]
fn paged_messages_of_a_fair_queue_keep_their_tenants_across_a_restart() {
    let sqs_made =
        FieldTable::from_entries([("x-sqs-receive-message-wait-time-seconds", FieldValue::I32(0))]);
    let (mut tb, c, mut disk) = setup(sqs_made);
    let tenants = std::iter::repeat_n("busy", 40).chain(["quiet"]);
    for (n, tenant) in tenants.enumerate() {
        let mut properties = properties(n);
        properties.headers = Some(group_headers(tenant));
        tb.publish_with(c, "", "q", properties, format!("body {n}").as_bytes(), false);
    }
    disk.sync(&mut tb);
    let mut restored = disk.restart(&tb, two_resident());
    assert_eq!(
        receive_n(&mut restored, 30),
        numbered_bodies(0..30),
        "in queue order while no tenant is noisy"
    );
    assert_eq!(
        receive_n(&mut restored, 2),
        ["body 40", "body 30"],
        "the quiet tenant first, then the noisy one"
    );
}

/// The bodies of `n` messages received from queue `q` (bounded: each receive asks for what is
/// missing, and the reads the receives ask for are answered between them).
fn receive_n(tb: &mut TestBroker, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    for _ in 0..n + 10 {
        let want = (n - got.len()).min(10);
        let taken = tb.broker.sqs_receive("/", "q", want, Some(30_000), tb.clock.now()).unwrap();
        got.extend(received_texts(&taken));
        if got.len() == n {
            break;
        }
        tb.answer_reads();
    }
    got
}

/// Publishes persistent messages `body 0`, `body 1`, … to `q` on `c`, each with the
/// `MessageGroupId` `groups` gives it.
fn publish_grouped(tb: &mut TestBroker, c: Chan, groups: &[&str]) {
    publish_grouped_from(tb, c, 0, groups);
}

/// An SQS FIFO queue's receives read no record on the broker's thread (issue 41): a receive
/// whose next message is paged out asks for it with a batch behind it and takes nothing more
/// until the answer, wherever in the queue its group's message sits. Each group is still
/// received in order. Before, each paged message a receive chose was read in place.
#[test]
fn sqs_fifo_receives_ask_for_the_paged_messages_they_choose() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-sqs-fifo", FieldValue::Bool(true))]));
    let groups = ["g1", "g2", "g3", "g4", "g1", "g2", "g3", "g4", "g1", "g2"];
    publish_grouped(&mut tb, c, &groups);
    disk.sync(&mut tb);
    let mut got: Vec<(String, String)> = Vec::new();
    for _ in 0..40 {
        let performed = disk.reads();
        let taken = tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap();
        assert_eq!(disk.reads(), performed, "a receive reads no record itself");
        for received in &taken {
            tb.broker.sqs_delete("/", "q", &received.receipt_handle, tb.clock.now()).unwrap();
        }
        got.extend(received_texts(&taken).into_iter().map(|body| {
            let n: usize = body.trim_start_matches("body ").parse().unwrap();
            (groups[n].to_owned(), body)
        }));
        if got.len() == groups.len() {
            break;
        }
        tb.answer_reads();
    }
    assert_eq!(got.len(), groups.len(), "every message received: {got:?}");
    for group in ["g1", "g2", "g3", "g4"] {
        let of_group: Vec<_> = got.iter().filter(|(g, _)| g == group).map(|(_, body)| body.clone()).collect();
        let sent: Vec<_> = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| **g == group)
            .map(|(n, _)| format!("body {n}"))
            .collect();
        assert_eq!(of_group, sent, "group {group} in order");
    }
}

/// A fair queue's AMQP consumer and basic.get read no record on the broker's thread (issue 41):
/// the message the tenants choose (here a quiet tenant's, behind a noisy tenant's paged
/// backlog) is asked for, and delivered when the read is answered. Before, it was read in place.
#[test]
fn a_fair_queue_s_consumers_and_gets_ask_for_the_paged_messages_chosen() {
    let sqs_made =
        FieldTable::from_entries([("x-sqs-receive-message-wait-time-seconds", FieldValue::I32(0))]);
    let (mut tb, c, mut disk) = setup(sqs_made);
    let tenants: Vec<&str> = std::iter::repeat_n("busy", 40).chain(["quiet", "quiet"]).collect();
    publish_grouped(&mut tb, c, &tenants);
    disk.sync(&mut tb);
    assert_eq!(receive_n(&mut tb, 30), numbered_bodies(0..30), "busy is noisy now");
    let performed = disk.reads();
    get_unanswered(&mut tb, c);
    assert_eq!(disk.reads(), performed, "the get read no record");
    assert!(tb.broker.poll_effect().is_none(), "it waits for its read");
    let read = tb.broker.poll_message_read().expect("the get asked for the quiet tenant's message");
    let resident = tb.broker.queue_stats("/", "q").unwrap().messages_ready_ram;
    assert_eq!(resident, 1, "room for one more within the queue's limit (2)");
    assert_eq!(
        read.locations.len(),
        1,
        "a read from the middle asks for no more than the limits have room for"
    );
    let messages = read.perform(tb.broker.message_source().as_deref());
    tb.broker.handle_message_read(read, messages, tb.clock.now());
    let effects = tb.poll_effects();
    assert_eq!(body_texts_of_gets(&effects), ["body 40"], "the quiet tenant's first");
    let performed = disk.reads();
    consume_unanswered(&mut tb, c, "ctag");
    assert_eq!(disk.reads(), performed, "the consumer's delivery read no record");
    let first = tb.poll_effects();
    let delivered = deliver_answering_reads(&mut tb, first, 20);
    let expected: Vec<_> = ["body 41"].into_iter().map(String::from).chain(numbered_bodies(30..40)).collect();
    assert_eq!(delivered, expected, "the other quiet one, then the noisy tenant's");
}

/// The bodies of the basic.get-oks among `effects`.
fn body_texts_of_gets(effects: &[hourglass_broker::Effect]) -> Vec<String> {
    gotten(effects).iter().map(|m| String::from_utf8_lossy(&m.body).into_owned()).collect()
}

/// An SQS FIFO queue's delayed messages that wait paged out keep their groups (issue 41): they
/// become ready in them without a record read on the broker's thread, before and after a
/// restart, and each group is received in order. Before, each one's record was read in place
/// as it fell due, to learn its group.
#[test]
fn paged_delayed_fifo_messages_fall_due_in_their_groups_without_a_read() {
    let arguments = FieldTable::from_entries([
        ("x-sqs-fifo", FieldValue::Bool(true)),
        ("x-delivery-delay", FieldValue::I64(5000)),
    ]);
    let (mut tb, c, mut disk) = setup(arguments);
    let groups = ["g1", "g2", "g1", "g2", "g1", "g3"];
    publish_grouped(&mut tb, c, &groups[..3]);
    disk.sync(&mut tb);
    let mut restored = disk.restart(&tb, two_resident());
    let c = restored.channel();
    publish_grouped_from(&mut restored, c, 3, &groups[3..]);
    disk.sync(&mut restored);
    let performed = disk.reads();
    restored.advance(Duration::from_millis(5000));
    assert_eq!(disk.reads(), performed, "no record read as they fell due");
    let mut got = Vec::new();
    for _ in 0..10 {
        let taken = receive_when_read(&mut restored, 10);
        for received in &taken {
            restored.broker.sqs_delete("/", "q", &received.receipt_handle, restored.clock.now()).unwrap();
        }
        got.extend(received_texts(&taken));
        if got.len() == groups.len() {
            break;
        }
    }
    let of = |group: &str| -> Vec<String> {
        got.iter().filter(|body| groups[body[5..].parse::<usize>().unwrap()] == group).cloned().collect()
    };
    assert_eq!(got.len(), groups.len(), "{got:?}");
    assert_eq!(of("g1"), ["body 0", "body 2", "body 4"]);
    assert_eq!(of("g2"), ["body 1", "body 3"]);
}

/// `publish_grouped` of messages numbered from `first` on.
fn publish_grouped_from(tb: &mut TestBroker, c: Chan, first: usize, groups: &[&str]) {
    for (n, group) in groups.iter().enumerate() {
        let mut properties = properties(first + n);
        properties.headers = Some(group_headers(group));
        tb.publish_with(c, "", "q", properties, format!("body {}", first + n).as_bytes(), false);
    }
}

/// An SQS message-move task's steps read no record on the broker's thread (issue 41): a step
/// moves what is in memory and asks for the paged head; the task's next step (its next tick)
/// moves what the answer brought. Every message arrives once, in order. Before, a step read the
/// head and 255 behind it in place.
#[test]
fn sqs_move_steps_ask_for_the_paged_messages() {
    use hourglass_broker::admin::MoveTarget;
    let (mut tb, c, mut disk) = paged_backlog(8);
    tb.call(c, QueueDeclare { queue: short("t"), durable: true, ..Default::default() });
    disk.sync(&mut tb);
    let target = MoveTarget::Queue { vhost: "/", name: "t" };
    let anywhere = |_: &str, _: &str| true;
    let mut moved = 0;
    for _ in 0..10 {
        let performed = disk.reads();
        let step = tb.broker.sqs_move("/", "q", target, &anywhere, 10, tb.clock.now()).unwrap();
        assert_eq!(disk.reads(), performed, "a step reads no record itself");
        moved += step.moved;
        if step.left == 0 {
            break;
        }
        tb.answer_reads();
    }
    assert_eq!(moved, 8);
    let c2 = tb.channel();
    assert_eq!(body_texts(&consume(&mut tb, c2, "t", "ctag", true)), numbered_bodies(0..8));
}

/// A delayed message with TTL 0 that waited paged out goes to a waiting consumer only if it is
/// in memory when it falls due (semantics §1: delivered at once or expired); one still paged out
/// cannot be delivered at once and expires (here into `dlq`, read there off the broker's
/// thread). Before, it was delivered as it was, paged: an empty message (a debug assertion).
#[test]
fn a_paged_delayed_message_with_ttl_0_expires_rather_than_goes_out_empty() {
    let arguments = FieldTable::from_entries([
        ("x-delivery-delay", FieldValue::I64(5000)),
        ("x-message-ttl", FieldValue::I64(0)),
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]);
    let (mut tb, c, mut disk) = setup(arguments);
    tb.call(c, QueueDeclare { queue: short("dlq"), durable: true, ..Default::default() });
    publish_n(&mut tb, c, "q", 4);
    disk.sync(&mut tb);
    let consumer = tb.channel();
    assert!(body_texts(&consume(&mut tb, consumer, "q", "ctag", true)).is_empty());
    let mut delivered = body_texts(&tb.advance(Duration::from_millis(5000)));
    tb.answer_reads();
    delivered.extend(body_texts(&tb.poll_effects()));
    assert_eq!(delivered, numbered_bodies(0..2), "the two in memory, whole");
    let c2 = tb.channel();
    assert_eq!(
        body_texts(&consume(&mut tb, c2, "dlq", "dead", true)),
        numbered_bodies(2..4),
        "the paged ones expired"
    );
}

/// An SQS FIFO queue under a random mix of what its users and the driver do (issue 41): sends
/// in five groups, receives of up to four, deletes, visibility timeouts running out, the store
/// syncing (paging messages out), reads answered late or at once, and restarts. Whatever the
/// order, a receive takes each group's oldest undeleted messages, never one of a group that has
/// a message in flight, and every message is received and deleted in the end: no stall, no
/// loss, no duplicate.
#[test]
fn a_paged_fifo_queue_keeps_group_order_under_any_interleaving() {
    for seed in [0x2545_F491_4F6C_DD1D, 0x9E37_79B9_7F4A_7C15, 0xD1B5_4A32_D192_ED03, 7, 42, 1 << 40] {
        fifo_under_an_interleaving(seed);
    }
}

/// One run of `a_paged_fifo_queue_keeps_group_order_under_any_interleaving`, its choices drawn
/// from `seed`.
fn fifo_under_an_interleaving(mut seed: u64) {
    use std::collections::{HashMap, VecDeque};
    let (mut tb, mut c, mut disk) = setup(FieldTable::from_entries([("x-sqs-fifo", FieldValue::Bool(true))]));
    let mut roll = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut undeleted: Vec<VecDeque<usize>> = vec![VecDeque::new(); 5];
    let mut in_flight: HashMap<String, (usize, usize)> = HashMap::new();
    let mut sent = 0;
    let check_receive = |taken: &[hourglass_broker::admin::SqsReceived],
                         undeleted: &Vec<VecDeque<usize>>,
                         in_flight: &mut HashMap<String, (usize, usize)>| {
        let mut taken_of: Vec<Vec<usize>> = vec![Vec::new(); 5];
        for received in taken {
            let body = String::from_utf8_lossy(&received.message.body).into_owned();
            let (group, n) = body.split_once('-').unwrap();
            let (group, n): (usize, usize) = (group[1..].parse().unwrap(), n.parse().unwrap());
            taken_of[group].push(n);
            in_flight.insert(received.receipt_handle.clone(), (group, n));
        }
        for (group, taken) in taken_of.iter().enumerate() {
            let busy_before = in_flight.values().filter(|(g, _)| *g == group).count() - taken.len();
            if taken.is_empty() {
                continue;
            }
            assert_eq!(busy_before, 0, "group {group} received while one of its messages was in flight");
            let oldest: Vec<usize> = undeleted[group].iter().take(taken.len()).copied().collect();
            assert_eq!(*taken, oldest, "group {group} received out of order");
        }
    };
    for _ in 0..1500 {
        match roll(100) {
            0..=34 => {
                let group = roll(5) as usize;
                let n = sent;
                sent += 1;
                let mut properties = properties(n);
                properties.headers = Some(group_headers(&format!("g{group}")));
                tb.publish_with(c, "", "q", properties, format!("g{group}-{n}").as_bytes(), false);
                undeleted[group].push_back(n);
            }
            35..=59 => {
                let max = 1 + roll(4) as usize;
                let taken = tb.broker.sqs_receive("/", "q", max, Some(30_000), tb.clock.now()).unwrap();
                check_receive(&taken, &undeleted, &mut in_flight);
            }
            60..=74 => {
                let receipts: Vec<String> = in_flight.keys().cloned().collect();
                if let Some(receipt) = receipts.get(roll(receipts.len().max(1) as u64) as usize) {
                    let (group, n) = in_flight.remove(receipt).unwrap();
                    tb.broker.sqs_delete("/", "q", receipt, tb.clock.now()).unwrap();
                    undeleted[group].retain(|&m| m != n);
                }
            }
            75..=84 => tb.answer_reads(),
            85..=92 => {
                disk.sync(&mut tb);
            }
            93..=96 => {
                tb.advance(Duration::from_millis(30_001));
                in_flight.clear();
            }
            _ => {
                disk.sync(&mut tb);
                tb = disk.restart(&tb, two_resident());
                c = tb.channel();
                in_flight.clear();
            }
        }
    }
    for _ in 0..2000 {
        if undeleted.iter().all(VecDeque::is_empty) {
            break;
        }
        tb.answer_reads();
        let taken = tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap();
        check_receive(&taken, &undeleted, &mut in_flight);
        if taken.is_empty() && !tb.broker.sqs_awaits_read("/", "q") {
            tb.advance(Duration::from_millis(30_001));
            in_flight.clear();
        }
        for received in &taken {
            let (group, n) = in_flight.remove(&received.receipt_handle).unwrap();
            tb.broker.sqs_delete("/", "q", &received.receipt_handle, tb.clock.now()).unwrap();
            undeleted[group].retain(|&m| m != n);
        }
    }
    assert!(undeleted.iter().all(VecDeque::is_empty), "left undeleted: {undeleted:?}");
    assert!(sent > 300, "{sent} sent");
}

/// A fair (SQS standard) queue with tenants under a random mix (issue 41): sends of five
/// tenants (one sending half of them, noisy while it holds 30 or more in flight), SQS receives
/// whose messages are deleted at once or held in flight, deletes, visibility timeouts running
/// out, no-ack basic.gets left to wait for their reads, the store syncing, reads answered late or
/// at once, and restarts. Every message is handed out for good (got, or received and deleted)
/// exactly once in the end: the reads from wherever the tenants choose neither lose nor repeat
/// one, and no get or receive is stranded.
#[test]
fn a_paged_fair_queue_hands_out_each_message_once_under_any_interleaving() {
    for seed in [0x2545_F491_4F6C_DD1D, 0x9E37_79B9_7F4A_7C15, 3, 1 << 33] {
        fair_under_an_interleaving(seed);
    }
}

/// One run of `a_paged_fair_queue_hands_out_each_message_once_under_any_interleaving`, its
/// choices drawn from `seed`.
fn fair_under_an_interleaving(mut seed: u64) {
    use std::collections::HashMap;
    let sqs_made =
        FieldTable::from_entries([("x-sqs-receive-message-wait-time-seconds", FieldValue::I32(0))]);
    // Room for a receive's worth in memory, far less than the backlog.
    let limits = PagingLimits { max_resident_messages: 40, ..two_resident() };
    let (mut tb, mut c, mut disk) = setup_with(sqs_made, limits);
    let mut roll = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut sent, mut done, mut noisy_choices) = (0usize, Vec::new(), 0usize);
    let mut in_flight: HashMap<String, String> = HashMap::new();
    let delete = |tb: &mut TestBroker, receipt: &str| {
        tb.broker.sqs_delete("/", "q", receipt, tb.clock.now()).unwrap();
    };
    let gets_answered = |tb: &mut TestBroker, done: &mut Vec<String>| {
        done.extend(body_texts_of_gets(&tb.poll_effects()));
    };
    for _ in 0..2500 {
        match roll(1000) {
            0..=399 => {
                for _ in 0..3 {
                    let tenant = if roll(2) == 0 { 0 } else { roll(5) };
                    let mut properties = properties(sent);
                    properties.headers = Some(group_headers(&format!("t{tenant}")));
                    // The harness answers reads on each command: a waiting get may be answered
                    // here.
                    let body = format!("m{sent}");
                    done.extend(body_texts_of_gets(&tb.publish_with(
                        c,
                        "",
                        "q",
                        properties,
                        body.as_bytes(),
                        false,
                    )));
                    sent += 1;
                }
            }
            400..=599 => {
                let taken =
                    tb.broker.sqs_receive("/", "q", 1 + roll(10) as usize, Some(30_000), tb.clock.now());
                for received in taken.unwrap() {
                    let body = String::from_utf8_lossy(&received.message.body).into_owned();
                    noisy_choices += usize::from(in_flight.len() >= 30 && !body.is_empty());
                    if roll(4) == 0 {
                        delete(&mut tb, &received.receipt_handle);
                        done.push(body);
                    } else {
                        in_flight.insert(received.receipt_handle, body);
                    }
                }
            }
            600..=659 => {
                let receipts: Vec<String> = in_flight.keys().cloned().collect();
                for receipt in receipts.iter().take(1 + roll(3) as usize) {
                    delete(&mut tb, receipt);
                    done.push(in_flight.remove(receipt).unwrap());
                }
            }
            660..=739 => {
                unanswered(&mut tb, c, BasicGet { queue: short("q"), no_ack: true });
                gets_answered(&mut tb, &mut done);
            }
            740..=859 => {
                tb.answer_reads();
                gets_answered(&mut tb, &mut done);
            }
            // A no-ack get's reply waits for its settle to be stored: the sync releases it.
            860..=979 => done.extend(body_texts_of_gets(&disk.sync(&mut tb))),
            980..=991 => {
                done.extend(body_texts_of_gets(&tb.advance(Duration::from_millis(30_001))));
                in_flight.clear();
            }
            _ => {
                tb.answer_reads();
                gets_answered(&mut tb, &mut done);
                done.extend(body_texts_of_gets(&disk.sync(&mut tb)));
                tb = disk.restart(&tb, limits);
                c = tb.channel();
                in_flight.clear();
            }
        }
    }
    drain_by_receives(&mut tb, &mut disk, &mut done, sent);
    let mut once = done.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), done.len(), "a message handed out for good twice");
    let missing: Vec<usize> = (0..sent).filter(|n| !done.contains(&format!("m{n}"))).collect();
    assert!(missing.is_empty(), "not handed out: {missing:?}");
    assert!(sent > 600 && noisy_choices > 50, "{sent} sent, {noisy_choices} receives with a noisy tenant");
}

/// Receives (and deletes) what is left of `q` until `done` holds `sent` messages, answering
/// reads, collecting gets' replies and letting visibility timeouts run out between (bounded).
fn drain_by_receives(tb: &mut TestBroker, disk: &mut Disk, done: &mut Vec<String>, sent: usize) {
    for _ in 0..3000 {
        if done.len() >= sent {
            break;
        }
        tb.answer_reads();
        done.extend(body_texts_of_gets(&tb.poll_effects()));
        done.extend(body_texts_of_gets(&disk.sync(tb)));
        let taken = tb.broker.sqs_receive("/", "q", 10, Some(30_000), tb.clock.now()).unwrap();
        for received in &taken {
            tb.broker.sqs_delete("/", "q", &received.receipt_handle, tb.clock.now()).unwrap();
        }
        done.extend(received_texts(&taken));
        if taken.is_empty() && !tb.broker.sqs_awaits_read("/", "q") {
            done.extend(body_texts_of_gets(&tb.advance(Duration::from_millis(30_001))));
        }
    }
}

/// A delay queue's ready backlog stays within the paging limits when its messages wait in
/// memory (fewer waiting than the limits) and the store reports them while they wait: they are
/// paged out as they wait once the ready ones in memory fill the limits, and become ready paged.
/// Before, only the waiting messages were counted, none was paged out, and every one stayed in
/// memory once ready, whatever the limits.
#[test]
fn a_delay_queue_s_ready_backlog_stays_within_the_paging_limits() {
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(1000))]));
    for batch in 0..5 {
        for i in batch * 2..batch * 2 + 2 {
            tb.publish_with(c, "", "q", properties(i), format!("body {i}").as_bytes(), false);
        }
        disk.sync(&mut tb);
        tb.advance(Duration::from_millis(1000));
    }
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram), (10, 2), "the limit (2) in memory");
    let delivered = consume_answering_reads(&mut tb, 10);
    assert_eq!(delivered, numbered_bodies(0..10));
}

/// A delayed message that becomes ready before the store reports where it wrote it (a delay
/// shorter than the write) is paged out as the ready message it is then, like any other past
/// the limits, and still delivered whole and in order. Before, the report looked for it among
/// the waiting messages, found nothing, and it stayed in memory for good: a delay queue's ready
/// backlog ignored the paging limits.
#[test]
fn a_message_ready_before_its_write_is_reported_is_paged_out_as_ready() {
    let (mut tb, c, mut disk) = setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(1))]));
    publish_n(&mut tb, c, "q", 10);
    tb.advance(Duration::from_millis(1));
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram), (10, 10), "ready, not written yet");
    disk.sync(&mut tb);
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram), (10, 2), "paged out past the limit (2)");
    let delivered = consume_answering_reads(&mut tb, 10);
    assert_eq!(delivered, numbered_bodies(0..10));
}

/// A waiting message an operator reschedules before the store reports where it wrote it is
/// paged out at its new due time like the others past the limits, and delivered whole in its
/// new order. Before, the report looked for it at its old due time, found nothing, and it
/// stayed in memory (3 in memory, not 2).
#[test]
fn a_message_rescheduled_before_its_write_is_reported_is_paged_out() {
    let (mut tb, c, mut disk) =
        setup(FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(10_000))]));
    publish_n(&mut tb, c, "q", 10);
    let now = tb.clock.now();
    let fifth = tb.broker.list_delayed("/", "q", 100).unwrap()[5].seq;
    tb.broker.reschedule_delayed("/", "q", fifth, now.saturating_add_millis(20_000), now).unwrap();
    disk.sync(&mut tb);
    tb.advance(Duration::from_millis(20_000));
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_ready, stats.messages_ready_ram), (10, 2), "the limit (2) in memory");
    let delivered = consume_answering_reads(&mut tb, 10);
    let expected: Vec<String> =
        numbered_bodies(0..10).into_iter().filter(|b| b != "body 5").chain(["body 5".into()]).collect();
    assert_eq!(delivered, expected);
}

/// What a no-ack consumer of `q` on a new channel is delivered, answering the reads its
/// deliveries wait for, `rounds` times at most.
fn consume_answering_reads(tb: &mut TestBroker, rounds: usize) -> Vec<String> {
    let c = tb.channel();
    let first = consume(tb, c, "q", "ctag", true);
    deliver_answering_reads(tb, first, rounds)
}

/// The bodies delivered in `effects` and then as the reads they wait for are answered, `rounds`
/// times at most (bounded: each answer delivers what it brought).
fn deliver_answering_reads(
    tb: &mut TestBroker,
    effects: Vec<hourglass_broker::Effect>,
    rounds: usize,
) -> Vec<String> {
    let mut delivered = body_texts(&effects);
    for _ in 0..rounds {
        tb.answer_reads();
        delivered.extend(body_texts(&tb.poll_effects()));
    }
    delivered
}
