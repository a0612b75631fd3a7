//! Issue 37, finding 3: a spill file of the far tier (ADR 0013) that does not read back, or that
//! cannot be written, must not hide confirmed delayed messages. Over the broker core on the manual
//! clock, with in-memory spill files damaged the ways a disk or an operator damages them (bytes
//! flipped, a file cut short or deleted, the directory replaced by a plain file): every message
//! still fires once, at its due time and never before, and the queue's counts, its next due time,
//! its listing, lookups and cancels stay right meanwhile.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::disk::Disk;
use common::*;
use hourglass_broker::queue::{MemorySpillFiles, NEAR_HORIZON_MS};
use hourglass_broker::{BrokerConfig, PagingLimits, Timestamp};
use hourglass_testkit::{short, Chan, TestBroker};
use hourglass_wire::*;

const HOUR_MS: u64 = 3_600_000;
/// More than one spill run (16,384 records), so a run file exists beside the write buffer.
const MESSAGES: usize = 17_000;
/// A spill record's size (`far_delays.rs`): damage aimed at record 8,000 lands inside the run.
const RECORD_BYTES: usize = 80;

/// A queue delaying by an hour, holding `count` confirmed persistent messages (`body 0`, …) that
/// wait in the far tier's spill files `files`; their due time.
fn far_queue(files: &Arc<MemorySpillFiles>, count: usize) -> (TestBroker, Chan, Disk, Timestamp) {
    let mut disk = Disk::default();
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    tb.broker.set_message_source(disk.source.clone());
    tb.broker.set_paging_limits(PagingLimits { max_resident_messages: 2, max_resident_bytes: 1 << 20 });
    tb.broker.set_spill_files(files.clone());
    let c = tb.channel();
    let arguments = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(HOUR_MS as i64))]);
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, arguments, ..Default::default() });
    publish(&mut tb, c, &mut disk, 0..count);
    let due = tb.clock.now().saturating_add_millis(HOUR_MS);
    (tb, c, disk, due)
}

fn publish(tb: &mut TestBroker, c: Chan, disk: &mut Disk, numbers: std::ops::Range<usize>) {
    let persistent = BasicProperties { delivery_mode: Some(2), ..Default::default() };
    for i in numbers {
        tb.publish_with(c, "", "q", persistent.clone(), format!("body {i}").as_bytes(), false);
    }
    disk.sync(tb);
}

fn stats(tb: &TestBroker) -> (usize, Option<Timestamp>) {
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    (stats.messages_delayed, stats.next_due)
}

/// What every damage must leave true: the count, next due time and listing stay exact, a message
/// in the damaged run can be cancelled, and the rest are loaded a horizon ahead and delivered at
/// their due time, none before, each once, in order.
fn all_fire_on_time_after(damage: impl FnOnce(&MemorySpillFiles)) {
    let files = Arc::new(MemorySpillFiles::default());
    let (mut tb, _, mut disk, due) = far_queue(&files, MESSAGES);
    assert_eq!(files.file_count(), 1, "one run written, the rest buffered");
    damage(&files);
    assert_eq!(stats(&tb), (MESSAGES, Some(due)));
    let listed = tb.broker.list_delayed("/", "q", MESSAGES + 1).unwrap();
    assert_eq!(listed.len(), MESSAGES, "the listing shows every waiting message");
    // Message 8,000 waits in the damaged run: a cancel finds it.
    let cancelled = listed[8_000].seq;
    tb.broker.cancel_delayed("/", "q", cancelled).unwrap();
    disk.sync(&mut tb);
    assert_eq!(stats(&tb), (MESSAGES - 1, Some(due)));

    let consumer = tb.channel();
    assert!(body_texts(&consume(&mut tb, consumer, "q", "ctag", true)).is_empty());
    let load_at = Duration::from_millis(HOUR_MS - NEAR_HORIZON_MS);
    assert!(body_texts(&tb.advance(load_at)).is_empty());
    assert_eq!(stats(&tb), (MESSAGES - 1, Some(due)), "loaded a horizon ahead, nothing hidden");
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_delayed_on_disk, 0);
    let early = tb.advance(Duration::from_millis(NEAR_HORIZON_MS - 1));
    assert!(body_texts(&early).is_empty(), "never early");
    let mut want = numbered_bodies(0..MESSAGES);
    want.remove(8_000);
    let delivered = deliveries_from_due(&mut tb, want.len());
    assert!(delivered == want, "each once, in order, from the due time");
    assert_eq!(stats(&tb), (0, None));
}

/// What is delivered from now (the due time) on, over a few turns of a millisecond each.
fn deliveries_from_due(tb: &mut TestBroker, count: usize) -> Vec<String> {
    let mut delivered = body_texts(&tb.advance(Duration::from_millis(1)));
    for _ in 0..count / 1_000 + 10 {
        delivered.extend(body_texts(&tb.advance(Duration::from_millis(1))));
    }
    assert_eq!(delivered.len(), count);
    delivered
}

/// 50 bytes flipped inside the run (measured: 15,314 of 17,000 stranded, `next_due_ms` garbage).
#[test]
fn flipped_bytes_in_a_spill_run_hide_no_delayed_message() {
    all_fire_on_time_after(|files| files.damage_bytes(RECORD_BYTES * 8_000 + 3, 50));
}

/// The due time of the run's first record flipped: its head must never show a garbage due time.
#[test]
fn a_damaged_due_time_in_a_spill_run_is_never_shown_or_trusted() {
    all_fire_on_time_after(|files| files.damage_bytes(5, 1));
}

/// The run file cut to half its length (measured: 8,192 stranded, `messages_delayed` 0).
#[test]
fn a_truncated_spill_run_hides_no_delayed_message() {
    all_fire_on_time_after(MemorySpillFiles::truncate_to_half);
}

/// The run file deleted (measured: 16,384 stranded, `messages_delayed` 0).
#[test]
fn a_deleted_spill_run_hides_no_delayed_message() {
    all_fire_on_time_after(MemorySpillFiles::delete_all);
}

/// The spill directory replaced by a plain file: the run is gone and no file can be written
/// again (measured: 16,384 stranded, invisible).
#[test]
fn a_spill_directory_replaced_by_a_file_hides_no_delayed_message() {
    all_fire_on_time_after(|files| {
        files.delete_all();
        files.refuse_writes(true);
    });
}

/// Runs that cannot be written (the directory replaced by a plain file before they were) keep
/// their messages reachable and counted; once the files can be written again, new runs are.
#[test]
fn far_messages_whose_run_cannot_be_written_stay_counted_and_fire_on_time() {
    let files = Arc::new(MemorySpillFiles::default());
    files.refuse_writes(true);
    let (mut tb, _, mut disk, due) = far_queue(&files, MESSAGES);
    let c = tb.channel();
    assert_eq!(files.file_count(), 0, "the write failed");
    assert_eq!(stats(&tb), (MESSAGES, Some(due)));
    files.refuse_writes(false);
    publish(&mut tb, c, &mut disk, MESSAGES..2 * MESSAGES);
    assert!(files.file_count() >= 1, "writable again: a run is written");
    assert_eq!(stats(&tb), (2 * MESSAGES, Some(due)));
    assert_eq!(tb.broker.list_delayed("/", "q", 3 * MESSAGES).unwrap().len(), 2 * MESSAGES);

    let consumer = tb.channel();
    consume(&mut tb, consumer, "q", "ctag", true);
    assert!(body_texts(&tb.advance(Duration::from_millis(HOUR_MS - 1))).is_empty(), "never early");
    let delivered = deliveries_from_due(&mut tb, 2 * MESSAGES);
    assert!(delivered == numbered_bodies(0..2 * MESSAGES), "each once, in order");
    assert_eq!(stats(&tb), (0, None));
}

/// Transient messages never reach the far tier (the log could not bring them back): published
/// with a far delay into a durable queue past its resident limits, they all wait in memory.
#[test]
fn transient_delayed_messages_never_go_to_spill_files() {
    let files = Arc::new(MemorySpillFiles::default());
    let (mut tb, c, mut disk, _) = far_queue(&files, 0);
    for i in 0..MESSAGES {
        tb.publish_with(c, "", "q", BasicProperties::default(), format!("body {i}").as_bytes(), false);
    }
    disk.sync(&mut tb);
    let stats = tb.broker.queue_stats("/", "q").unwrap();
    assert_eq!((stats.messages_delayed, stats.messages_delayed_on_disk), (MESSAGES, 0));
    assert_eq!(files.file_count(), 0);
}
