//! Queue states in checkpoints (ADR 0019): a restart hands back the state a checkpoint took with
//! the messages that changed after it, and reads back only what the state does not hold; a state
//! that disagrees with the log, or that a purge voided, is not used.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use hourglass_store::{Crash, MemStorage, QueueCheckpoint, RecoveredQueueState, Store, StoreConfig};

/// 1 KiB segments: seven 132-byte records each.
fn config() -> StoreConfig {
    StoreConfig { segment_bytes_target: 1024, ..StoreConfig::default() }
}

fn body(id: u64) -> Vec<u8> {
    (0..100).map(|i| (id + i) as u8).collect()
}

/// Each queue's messages read back, as (id, metadata).
type ReadBack = BTreeMap<u64, Vec<(u64, Vec<u8>)>>;

/// What a restart after a crash (unsynced bytes lost) hands back: the queue states, the
/// messages read back, and the live count of each queue.
fn restart(storage: &MemStorage) -> (Vec<RecoveredQueueState>, ReadBack, BTreeMap<u64, u64>) {
    let copy = storage.image().crash(Crash::LoseUnsynced);
    let (store, recovered) = Store::open(Arc::new(copy), config()).unwrap();
    let counts = recovered.queue_messages.clone();
    let queues = store.recovered_queues(recovered.replay).unwrap();
    let read = queues
        .into_iter()
        .map(|(queue, messages)| {
            (queue, messages.into_iter().map(|m| (m.msg_id, m.metadata.to_vec())).collect())
        })
        .collect();
    (recovered.queue_states, read, counts)
}

fn state(queue: u64, covers: u64, read_back: Vec<u64>) -> QueueCheckpoint {
    QueueCheckpoint {
        queue,
        covers,
        read_back,
        parts: vec![Bytes::from_static(b"qu"), Bytes::from_static(b"eue")],
    }
}

/// Queue 1 holds ids 0..20, queue 2 ids 100..105, all committed.
fn filled() -> (MemStorage, Store) {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    store.take_checkpoints_on_request();
    for id in 0..20 {
        store.append_enqueue(1, id, b"m0", &body(id)).unwrap();
    }
    for id in 100..105 {
        store.append_enqueue(2, id, b"m0", &body(id)).unwrap();
    }
    store.commit().unwrap();
    (storage, store)
}

/// The state comes back with the messages it held that changed after it (settled, updated,
/// enqueued again); the second pass reads back only the changed ones still live, the state's
/// `read_back`, what came after, and every message of a queue without a state.
#[test]
fn a_restart_reads_back_only_what_the_state_does_not_hold() {
    let (storage, mut store) = filled();
    assert!(store.checkpoint_with(vec![state(1, 18, vec![3, 7])]));
    store.append_settle(1, 5).unwrap();
    store.append_update(1, 6, b"m1").unwrap();
    store.append_settle(1, 8).unwrap();
    store.append_enqueue(1, 8, b"m2", &body(8)).unwrap();
    store.append_settle(1, 3).unwrap();
    store.append_enqueue(1, 50, b"m0", &body(50)).unwrap();
    store.append_settle(1, 50).unwrap();
    store.append_enqueue(1, 51, b"m0", &body(51)).unwrap();
    store.append_enqueue(2, 106, b"m0", &body(106)).unwrap();
    store.commit().unwrap();
    let (states, read, counts) = restart(&storage);
    assert_eq!(
        states,
        vec![RecoveredQueueState { queue: 1, state: Bytes::from_static(b"queue"), changed: vec![5, 6, 8] }]
    );
    let ids = |queue: u64| read[&queue].iter().map(|(id, _)| *id).collect::<Vec<_>>();
    assert_eq!(ids(1), vec![6, 7, 8, 51], "in log order: updated, read back, enqueued again, new");
    assert_eq!(read[&1][0].1, b"m1", "with its latest metadata");
    assert_eq!(ids(2), vec![100, 101, 102, 103, 104, 106]);
    assert_eq!(counts[&1], 20 - 2 + 1, "counts are the index's, the state's messages included");
}

/// A state whose counts disagree with the log, or one for a queue purged after the checkpoint,
/// is not handed back, and its queue is read back whole; a request before the log grew enough
/// takes nothing.
#[test]
fn states_that_disagree_or_were_purged_are_not_used() {
    let (storage, mut store) = filled();
    assert!(store.checkpoint_with(vec![state(1, 19, vec![3, 7]), state(2, 5, vec![])]));
    assert!(!store.checkpoint_with(vec![state(2, 5, vec![])]), "not due: the log barely grew");
    store.append_purge(2).unwrap();
    store.append_enqueue(2, 110, b"m0", &body(110)).unwrap();
    store.commit().unwrap();
    let (states, read, _) = restart(&storage);
    assert!(states.is_empty(), "{states:?}");
    assert_eq!(read[&1].len(), 20);
    assert_eq!(read[&2].iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![110]);
}

/// A checkpoint is written once the segment it starts is created, with every record before it
/// synced: a crash before that leaves the previous one (here none), and the whole log is read.
#[test]
fn a_state_waits_for_the_commit_that_creates_its_segment() {
    let (storage, mut store) = filled();
    assert!(store.checkpoint_with(vec![state(1, 20, vec![])]));
    let (states, read, _) = restart(&storage);
    assert!(states.is_empty());
    assert_eq!(read[&1].len(), 20);
    store.append_enqueue(1, 30, b"m0", &body(30)).unwrap();
    store.commit().unwrap();
    let (states, read, _) = restart(&storage);
    assert_eq!(states.len(), 1);
    assert_eq!(read[&1].iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![30]);
}

/// Messages a state holds that were settled after the checkpoint, where compaction then
/// deleted both their segments and the settles' segment: the restart reads no settle, yet names
/// them changed (their segments are gone), so the state's owner drops them.
#[test]
fn messages_whose_segments_compaction_deleted_are_changed() {
    let storage = MemStorage::new();
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    store.take_checkpoints_on_request();
    for id in 0..60 {
        store.append_enqueue(1, id, b"m0", &body(id)).unwrap();
    }
    store.commit().unwrap();
    assert!(store.checkpoint_with(vec![state(1, 60, vec![])]));
    for id in 0..60 {
        store.append_settle(1, id).unwrap();
    }
    for id in 100..130 {
        store.append_enqueue(3, id, b"m0", &body(id)).unwrap();
    }
    let before_checkpoint = store.stats().segments;
    let compacted = store.compact().unwrap();
    // Every segment before the checkpoint, and the first after it (settles only).
    assert!(compacted.segments_removed > before_checkpoint - 2, "{compacted:?}");
    let (states, read, counts) = restart(&storage);
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].changed, (0..60).collect::<Vec<_>>());
    assert!(!read.contains_key(&1) && !counts.contains_key(&1));
    assert_eq!(read[&3].len(), 30);
}

/// A limited checkpoint (a cluster replicates the file, so keeps it small) leaves out the
/// states that do not fit, and their queues are read back whole; those that fit are kept.
#[test]
fn a_limited_checkpoint_keeps_only_the_states_that_fit() {
    let (storage, mut store) = filled();
    store.limit_checkpoint_bytes((1 << 20) + 4096);
    let large = QueueCheckpoint { parts: vec![Bytes::from(vec![7; 8192])], ..state(1, 20, vec![]) };
    assert!(store.checkpoint_with(vec![large, state(2, 5, vec![])]));
    // Written by the commit that creates the checkpoint's segment.
    store.append_enqueue(3, 200, b"m0", &body(200)).unwrap();
    store.commit().unwrap();
    let (states, read, _) = restart(&storage);
    assert_eq!(states.iter().map(|s| s.queue).collect::<Vec<_>>(), [2], "only the small state fits");
    assert_eq!(read.get(&1).map(Vec::len), Some(20), "queue 1 is read back whole");
    assert_eq!(read.get(&2), None, "queue 2 comes from its state");
}
