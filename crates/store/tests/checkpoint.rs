//! Checkpoints of the live index (ADR 0018): a restart reads the checkpoint and the log after it,
//! and recovers exactly what reading the whole log recovers; a checkpoint it cannot trust is
//! ignored and the whole log read. (Crashes at every sync point, checkpoint writes included, are
//! in `crash.rs`.)

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hourglass_store::{Crash, MemStorage, RecoveryReport, Storage, Store, StoreConfig, CHECKPOINT_FILE};

/// 1 KiB segments: seven 132-byte records each.
const SEGMENT: u64 = 1024;

fn config() -> StoreConfig {
    StoreConfig { segment_bytes_target: SEGMENT, ..StoreConfig::default() }
}

/// Each queue's messages as recovered: id, metadata, body.
type Queues = BTreeMap<u64, Vec<(u64, Vec<u8>, Vec<u8>)>>;

fn reopen(storage: &MemStorage) -> (Store, Queues, RecoveryReport) {
    let (store, reopened) = common::replayed(Store::open(Arc::new(storage.clone()), config()).unwrap());
    let queues = reopened
        .queues
        .iter()
        .map(|(queue, messages)| {
            let messages = messages
                .iter()
                .map(|m| (m.msg_id, m.metadata.to_vec(), store.read_message(m.location).unwrap().to_vec()))
                .collect();
            (*queue, messages)
        })
        .collect();
    (store, queues, reopened.report)
}

/// What reading the whole log recovers, from a copy of `storage` without its checkpoint.
fn whole_log(storage: &MemStorage) -> Queues {
    let copy = storage.image().crash(Crash::KeepUnsynced);
    common::without_checkpoint(&copy);
    let (_, queues, report) = reopen(&copy);
    assert_eq!(report.checkpoint, None);
    queues
}

fn body(id: u64) -> Vec<u8> {
    (0..100).map(|i| (id + i) as u8).collect()
}

fn file_bytes(storage: &MemStorage, name: &str) -> Vec<u8> {
    let file = storage.open(name).unwrap();
    let mut bytes = vec![0; file.len_bytes().unwrap() as usize];
    file.read_exact_at(0, &mut bytes).unwrap();
    bytes
}

fn put_file(storage: &MemStorage, name: &str, bytes: &[u8]) {
    let _ = storage.remove(name);
    let file = storage.create(name).unwrap();
    file.write_all_at(0, bytes).unwrap();
    file.sync().unwrap();
}

/// A log of many segments with settles, updates and a purge: the restart reads only the
/// segments from the checkpoint's on (and none before it), and recovers what the whole log does,
/// bodies and latest metadata included; the store then goes on, and checkpoints again.
#[test]
fn a_restart_reads_the_log_after_the_checkpoint_and_recovers_the_same() {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    for id in 0..200 {
        store.append_enqueue(id % 3, id, b"m0", &body(id)).unwrap();
        if id % 5 == 4 {
            store.append_settle(id % 3, id - 3).unwrap();
        }
        if id % 40 == 39 {
            store.commit().unwrap();
        }
    }
    store.append_purge(2).unwrap();
    store.commit().unwrap();
    store.compact().unwrap();
    assert!(store.stats().checkpoints_written >= 3, "{:?}", store.stats());
    assert_eq!(store.stats().checkpoints_failed, 0);
    let segments = store.stats().segments;
    drop(store);
    let expected = whole_log(&storage);
    let (mut store, queues, report) = reopen(&storage);
    assert_eq!(queues, expected);
    let used = report.checkpoint.clone().expect("a checkpoint is used");
    assert!(report.segments <= 2, "{report:?}");
    assert_eq!(used.segments_skipped + report.segments, segments, "{report:?}");
    assert_eq!(used.segments_reread, 0);
    // The store keeps working on the recovered index: a settle of a message the checkpoint
    // held, and new records, survive the next restart, which checkpoints again.
    let (queue, first) = (0, queues[&0][0].0);
    store.append_settle(queue, first).unwrap();
    for id in 1_000..1_020 {
        store.append_enqueue(1, id, b"", &body(id)).unwrap();
    }
    store.commit().unwrap();
    assert!(store.stats().checkpoints_written >= 1);
    drop(store);
    let expected = whole_log(&storage);
    let (_, queues, report) = reopen(&storage);
    assert_eq!(queues, expected);
    assert!(!queues[&0].iter().any(|m| m.0 == first));
    assert!(report.checkpoint.is_some());
}

/// An update record in a segment before the checkpoint is read again for its metadata (the
/// index keeps none), but only for the enqueue it updated: a message settled and enqueued again
/// under the same id after the update keeps its new enqueue's metadata.
#[test]
fn updates_before_the_checkpoint_are_read_again_for_the_enqueue_they_updated() {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    store.append_enqueue(1, 1, b"first", &body(1)).unwrap();
    store.append_enqueue(1, 2, b"first", &body(2)).unwrap();
    store.append_update(1, 1, b"updated").unwrap();
    store.append_update(1, 2, b"updated").unwrap();
    store.append_settle(1, 2).unwrap();
    store.append_enqueue(1, 2, b"again", &body(2)).unwrap();
    for id in 10..40 {
        store.append_enqueue(2, id, b"", &body(id)).unwrap();
    }
    store.commit().unwrap();
    drop(store);
    let (_, queues, report) = reopen(&storage);
    let used = report.checkpoint.expect("a checkpoint is used");
    assert_eq!(used.segments_reread, 1, "the segment holding the updates");
    assert!(used.segments_skipped >= 1);
    let metadata: Vec<_> = queues[&1].iter().map(|m| (m.0, m.1.as_slice())).collect();
    assert_eq!(metadata, [(1, &b"updated"[..]), (2, &b"again"[..])]);
    assert_eq!(queues, whole_log(&storage));
}

/// A checkpoint older than the log's last compactions (later writes of it failed, say) names
/// segments that are gone, and a message whose settle went with them: it does not come back.
#[test]
fn segments_deleted_after_the_checkpoint_take_their_messages() {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    for id in 0..10 {
        store.append_enqueue(1, id, b"", &body(id)).unwrap();
    }
    store.commit().unwrap();
    let early = file_bytes(&storage, CHECKPOINT_FILE);
    // Every one of them settled, and enough written after that compaction deletes both their
    // segments and those holding the settles.
    for id in 0..10 {
        store.append_settle(1, id).unwrap();
    }
    for id in 100..160 {
        store.append_enqueue(2, id, b"", &body(id)).unwrap();
        store.append_settle(2, id).unwrap();
    }
    store.append_enqueue(3, 1, b"", &body(1)).unwrap();
    store.commit().unwrap();
    let removed = store.compact().unwrap().segments_removed;
    assert!(removed >= 3, "{removed} segments removed");
    drop(store);
    put_file(&storage, CHECKPOINT_FILE, &early);
    let (_, queues, report) = reopen(&storage);
    let used = report.checkpoint.expect("the early checkpoint is used");
    assert!(used.messages_in_deleted_segments > 0, "{used:?}");
    assert_eq!(queues.keys().copied().collect::<Vec<_>>(), [3]);
    assert_eq!(queues, whole_log(&storage));
}

/// A damaged checkpoint, one of an unknown schema, and one whose segments were cut short since
/// are ignored (the report says why) and the whole log is read.
#[test]
fn a_checkpoint_that_cannot_be_trusted_is_ignored() {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    for id in 0..40 {
        store.append_enqueue(1, id, b"", &body(id)).unwrap();
    }
    store.commit().unwrap();
    drop(store);
    let expected = whole_log(&storage);
    let good = file_bytes(&storage, CHECKPOINT_FILE);

    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    put_file(&storage, CHECKPOINT_FILE, &flipped);
    let (_, queues, report) = reopen(&storage);
    assert_eq!(queues, expected);
    assert_eq!(report.checkpoint, None);
    assert!(report.checkpoint_ignored.as_deref().is_some_and(|why| why.contains("checksum")), "{report:?}");

    put_file(&storage, CHECKPOINT_FILE, &good);
    let segment_1 = storage.open("00000000000000000001.seg").unwrap();
    let length = segment_1.len_bytes().unwrap();
    segment_1.set_len(length - 1).unwrap();
    segment_1.sync().unwrap();
    let (_, _, report) = reopen(&storage);
    assert_eq!(report.checkpoint, None);
    assert!(report.checkpoint_ignored.as_deref().is_some_and(|why| why.contains("shorter")), "{report:?}");
    // The whole log's rules count the cut record as lost.
    assert_eq!(report.lost.len(), 1);
}
