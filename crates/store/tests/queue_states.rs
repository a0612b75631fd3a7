//! Queue states in checkpoints (ADR 0019): a restart hands back the state a checkpoint took with
//! the messages that changed after it, and reads back only what the state does not hold; a state
//! that disagrees with the log, or that a purge voided, is not used. A state's kept parts are
//! written once, to packs, and named by later checkpoints (ADR 0020).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use hourglass_store::{
    Crash, MemStorage, QueueCheckpoint, RecoveredQueueState, StatePart, Storage, Store, StoreConfig,
};

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
    let (_, states, read, counts) = reopen(storage);
    (states, read, counts)
}

/// [`restart`], with the store it opened (on a copy of `storage` as the crash left it).
fn reopen(storage: &MemStorage) -> (MemStorage, Vec<RecoveredQueueState>, ReadBack, BTreeMap<u64, u64>) {
    let copy = storage.image().crash(Crash::LoseUnsynced);
    let (store, recovered) = Store::open(Arc::new(copy.clone()), config()).unwrap();
    let counts = recovered.queue_messages.clone();
    let queues = store.recovered_queues(recovered.replay).unwrap();
    let read = queues
        .into_iter()
        .map(|(queue, messages)| {
            (queue, messages.into_iter().map(|m| (m.msg_id, m.metadata.to_vec())).collect())
        })
        .collect();
    (copy, recovered.queue_states, read, counts)
}

fn state(queue: u64, covers: u64, read_back: Vec<u64>) -> QueueCheckpoint {
    QueueCheckpoint {
        queue,
        covers,
        read_back,
        parts: vec![
            StatePart::Inline(Bytes::from_static(b"qu")),
            StatePart::Kept(Bytes::from_static(b"eue")),
        ],
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
        vec![RecoveredQueueState {
            queue: 1,
            parts: vec![Bytes::from_static(b"qu"), Bytes::from_static(b"eue")],
            changed: vec![5, 6, 8]
        }]
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
    let large = QueueCheckpoint {
        parts: vec![StatePart::Inline(Bytes::from(vec![7; 8192]))],
        ..state(1, 20, vec![])
    };
    assert!(store.checkpoint_with(vec![large, state(2, 5, vec![])]));
    // Written by the commit that creates the checkpoint's segment.
    store.append_enqueue(3, 200, b"m0", &body(200)).unwrap();
    store.commit().unwrap();
    let (states, read, _) = restart(&storage);
    assert_eq!(states.iter().map(|s| s.queue).collect::<Vec<_>>(), [2], "only the small state fits");
    assert_eq!(read.get(&1).map(Vec::len), Some(20), "queue 1 is read back whole");
    assert_eq!(read.get(&2), None, "queue 2 comes from its state");
}

/// Pack files in `storage`, by name.
fn packs(storage: &MemStorage) -> Vec<String> {
    let mut names: Vec<String> =
        storage.list().unwrap().into_iter().filter(|n| n.ends_with(".states")).collect();
    names.sort();
    names
}

/// Appends `n` messages to queue 3 (enough for the next checkpoint to be due) and commits.
fn grow(store: &mut Store, first_id: u64, n: u64) {
    for id in first_id..first_id + n {
        store.append_enqueue(3, id, b"m0", &body(id)).unwrap();
    }
    store.commit().unwrap();
}

fn kept_state(queue: u64, covers: u64, kept: &[&Bytes]) -> QueueCheckpoint {
    let mut parts = vec![StatePart::Inline(Bytes::from_static(b"head"))];
    parts.extend(kept.iter().map(|bytes| StatePart::Kept((*bytes).clone())));
    QueueCheckpoint { queue, covers, read_back: Vec::new(), parts }
}

/// A kept part is written once: a later checkpoint offering the same bytes names them in their
/// pack, and a pack is deleted once no state offered holds a part of it. Each restart hands the
/// parts back as they were cut.
#[test]
fn kept_parts_are_written_once_and_their_packs_deleted_when_no_longer_offered() {
    let (storage, mut store) = filled();
    let (roster_a, roster_b) = (Bytes::from(vec![1u8; 3000]), Bytes::from(vec![2u8; 2000]));
    assert!(store.checkpoint_with(vec![kept_state(1, 20, &[&roster_a])]));
    grow(&mut store, 1000, 1);
    let first = packs(&storage);
    assert_eq!(first.len(), 1);
    grow(&mut store, 1001, 100);
    assert!(store.checkpoint_with(vec![kept_state(1, 20, &[&roster_a, &roster_b])]));
    grow(&mut store, 2000, 1);
    let second = packs(&storage);
    assert_eq!(second.len(), 2, "only the new part is written, in a pack of its own");
    assert_eq!(storage.open(&second[1]).unwrap().len_bytes().unwrap(), 2000);
    let (states, read, _) = restart(&storage);
    assert_eq!(states[0].parts, vec![Bytes::from_static(b"head"), roster_a.clone(), roster_b.clone()]);
    assert_eq!(read.get(&1), None);

    grow(&mut store, 3000, 100);
    assert!(store.checkpoint_with(vec![kept_state(1, 20, &[&roster_b])]));
    grow(&mut store, 4000, 1);
    assert_eq!(packs(&storage), second[1..], "the first pack held only what is no longer offered");
    let (states, _, _) = restart(&storage);
    assert_eq!(states[0].parts, vec![Bytes::from_static(b"head"), roster_b]);
}

/// After a restart the parts read from the packs are known again: offered by the new store's
/// first checkpoint, they are named where they lie, not written again.
#[test]
fn a_restart_names_the_parts_it_read_without_writing_them_again() {
    let (storage, mut store) = filled();
    let roster = Bytes::from(vec![5u8; 4000]);
    assert!(store.checkpoint_with(vec![kept_state(1, 20, &[&roster])]));
    grow(&mut store, 1000, 1);
    drop(store);
    let (copy, states, _, _) = reopen(&storage);
    let (mut store, recovered) = Store::open(Arc::new(copy.clone()), config()).unwrap();
    store.take_checkpoints_on_request();
    let parts = recovered.queue_states[0].parts.clone();
    assert_eq!(parts, states[0].parts);
    let offered = QueueCheckpoint {
        queue: 1,
        covers: 20,
        read_back: Vec::new(),
        parts: vec![StatePart::Inline(parts[0].clone()), StatePart::Kept(parts[1].clone())],
    };
    let before = packs(&copy);
    assert!(store.checkpoint_with(vec![offered]));
    grow(&mut store, 2000, 1);
    assert_eq!(packs(&copy), before, "no pack written, none deleted");
    let (states, read, _) = restart(&copy);
    assert_eq!(states[0].parts[1], roster);
    assert_eq!(read.get(&1), None);
}

/// A pack cut short or with a byte changed: the state it holds a part of is left out (said so
/// in the recovery report) and its queue read back whole from the log; nothing else changes.
#[test]
fn a_state_whose_pack_is_damaged_is_read_back_from_the_log() {
    for damage in ["flip", "cut", "delete"] {
        let (storage, mut store) = filled();
        let roster = Bytes::from(vec![9u8; 3000]);
        let inline_only =
            QueueCheckpoint { parts: vec![StatePart::Inline(roster.clone())], ..state(2, 5, vec![]) };
        assert!(store.checkpoint_with(vec![kept_state(1, 20, &[&roster]), inline_only]));
        grow(&mut store, 1000, 1);
        let pack = packs(&storage).remove(0);
        let file = storage.open(&pack).unwrap();
        match damage {
            "flip" => file.write_all_at(1500, &[0]).unwrap(),
            "cut" => file.set_len(2999).unwrap(),
            _ => storage.remove(&pack).unwrap(),
        }
        file.sync().unwrap();
        let copy = storage.image().crash(Crash::LoseUnsynced);
        let (store, recovered) = Store::open(Arc::new(copy), config()).unwrap();
        assert_eq!(recovered.report.checkpoint.as_ref().unwrap().states_left_out, 1, "{damage}");
        assert_eq!(recovered.queue_states.iter().map(|s| s.queue).collect::<Vec<_>>(), [2], "{damage}");
        let read = store.recovered_queues(recovered.replay).unwrap();
        let count = |queue: u64| read.iter().find(|(q, _)| **q == queue).map_or(0, |(_, m)| m.len());
        assert_eq!((count(1), count(2)), (20, 0), "{damage}");
    }
}

/// With a limit on what a checkpoint writes, a state whose new parts do not fit is left out,
/// but its parts are written ahead as far as the limit goes, so a later checkpoint takes it.
#[test]
fn a_state_too_large_for_one_checkpoint_is_written_over_several() {
    let (storage, mut store) = filled();
    store.limit_checkpoint_bytes((1 << 20) + 4500);
    let rosters: Vec<Bytes> = (0..3u8).map(|n| Bytes::from(vec![n; 3000])).collect();
    let offered = || kept_state(1, 20, &rosters.iter().collect::<Vec<_>>());
    let mut taken_at = None;
    for round in 0..4u64 {
        assert!(store.checkpoint_with(vec![offered()]), "round {round}");
        grow(&mut store, 1000 + round * 1000, 60);
        let (states, _, _) = restart(&storage);
        if !states.is_empty() {
            taken_at.get_or_insert(round);
        }
        assert_eq!(packs(&storage).len() as u64, (round + 1).min(3), "a part a checkpoint, round {round}");
    }
    assert_eq!(taken_at, Some(2), "the third checkpoint holds the state");
}
