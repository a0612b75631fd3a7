//! Crash tests over the in-memory backend: run a workload, capture the storage image before every
//! durability event (sync, create, remove, rename), crash there — losing unsynced bytes, keeping
//! them, or tearing them at many byte counts, garbled or not — recover, and check:
//! the recovered queues equal the workload's state after some prefix of its records that
//! includes every record committed before the crash, and no record not yet appended. So:
//! everything committed is there exactly once, nothing settled-and-committed comes back, and each
//! queue keeps its order, bodies and latest metadata. Then the recovered store must keep working.
//! A crash only ever tears what no sync covered: it is never reported as synced records lost
//! (the tail mark and the segment headers never claim more than was synced; issue 37).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hourglass_store::{Crash, MemImage, MemStorage, Store, StoreConfig};
use proptest::prelude::*;

/// A queue's messages in order: id, metadata, body.
type Queues = BTreeMap<u64, Vec<(u64, Vec<u8>, Vec<u8>)>>;

#[derive(Clone, Debug)]
enum Op {
    Enqueue { queue: u64, meta: u8, body_bytes: usize },
    Settle { pick: usize },
    Update { pick: usize, meta: u8 },
    Purge { queue: u64 },
    Commit,
    Compact,
}

/// A record the store accepted, as the model applies it.
#[derive(Clone, Debug)]
enum Applied {
    Enqueue(u64, u64, Vec<u8>, Vec<u8>),
    Settle(u64, u64),
    Update(u64, u64, Vec<u8>),
    Purge(u64),
}

/// A crash point: an image and the range of record prefixes it may recover to.
struct Point {
    image: MemImage,
    durable_min: usize,
    appended_max: usize,
}

fn apply(state: &mut Queues, record: &Applied) {
    match record {
        Applied::Enqueue(q, id, meta, body) => {
            state.entry(*q).or_default().push((*id, meta.clone(), body.clone()))
        }
        Applied::Settle(q, id) => {
            if let Some(messages) = state.get_mut(q) {
                messages.retain(|m| m.0 != *id);
            }
        }
        Applied::Update(q, id, meta) => {
            for m in state.get_mut(q).into_iter().flatten() {
                if m.0 == *id {
                    m.1 = meta.clone();
                }
            }
        }
        Applied::Purge(q) => {
            state.remove(q);
        }
    }
    state.retain(|_, messages| !messages.is_empty());
}

/// Runs `ops`, returning the crash points and the records applied, in order.
fn run(ops: &[Op], segment_bytes_target: u64) -> (Vec<Point>, Vec<Applied>) {
    let storage = MemStorage::new();
    let config = StoreConfig { segment_bytes_target, ..StoreConfig::default() };
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config).unwrap();
    storage.record_sync_points();
    let mut records = Vec::new();
    let mut state = Queues::new();
    let mut points = Vec::new();
    let mut next_id = 0u64;
    for op in ops {
        let durable_before = store.durable_through().0 as usize;
        if let Some(record) = step(&mut store, &state, op, &mut next_id) {
            apply(&mut state, &record);
            records.push(record);
        }
        assert_eq!(store.stats().last_appended.0 as usize, records.len());
        for image in storage.take_images() {
            points.push(Point { image, durable_min: durable_before, appended_max: records.len() });
        }
    }
    store.commit().unwrap();
    let durable = store.durable_through().0 as usize;
    points.extend(storage.take_images().into_iter().map(|image| Point {
        image,
        durable_min: 0,
        appended_max: durable,
    }));
    points.push(Point { image: storage.image(), durable_min: durable, appended_max: durable });
    (points, records)
}

fn step(store: &mut Store, state: &Queues, op: &Op, next_id: &mut u64) -> Option<Applied> {
    let live: Vec<(u64, u64)> =
        state.iter().flat_map(|(q, messages)| messages.iter().map(|m| (*q, m.0))).collect();
    let pick = |n: usize| live.get(n % live.len().max(1)).copied();
    match *op {
        Op::Enqueue { queue, meta, body_bytes } => {
            *next_id += 1;
            let id = *next_id;
            let body: Vec<u8> = (0..body_bytes).map(|i| (id as usize + i) as u8).collect();
            let meta = vec![meta; usize::from(meta % 5)];
            store.append_enqueue(queue, id, &meta, &body).unwrap();
            Some(Applied::Enqueue(queue, id, meta, body))
        }
        Op::Settle { pick: n } => {
            let (q, id) = pick(n)?;
            store.append_settle(q, id).unwrap();
            Some(Applied::Settle(q, id))
        }
        Op::Update { pick: n, meta } => {
            let (q, id) = pick(n)?;
            let meta = vec![meta; 3];
            store.append_update(q, id, &meta).unwrap();
            Some(Applied::Update(q, id, meta))
        }
        Op::Purge { queue } => {
            store.append_purge(queue).unwrap();
            Some(Applied::Purge(queue))
        }
        Op::Commit => {
            store.commit().unwrap();
            None
        }
        Op::Compact => {
            store.compact().unwrap();
            None
        }
    }
}

/// The queues a crashed image recovers to, bodies read back through `read_message`, and whether
/// the recovery started from a checkpoint.
fn recover(storage: &MemStorage, segment_bytes_target: u64) -> (Store, Queues, bool) {
    let config = StoreConfig { segment_bytes_target, ..StoreConfig::default() };
    let (store, recovered) = common::replayed(
        Store::open(Arc::new(storage.clone()), config).unwrap_or_else(|e| panic!("recovery failed: {e}")),
    );
    assert!(recovered.report.lost.is_empty(), "a crash reported as loss: {:?}", recovered.report);
    let queues = recovered
        .queues
        .iter()
        .map(|(q, messages)| {
            let messages = messages
                .iter()
                .map(|m| {
                    let body = store.read_message(m.location).unwrap();
                    (m.msg_id, m.metadata.to_vec(), body.to_vec())
                })
                .collect();
            (*q, messages)
        })
        .collect();
    (store, queues, recovered.report.checkpoint.is_some())
}

fn crash_modes(image: &MemImage, every_byte: bool) -> Vec<Crash> {
    let mut modes = vec![Crash::LoseUnsynced, Crash::KeepUnsynced];
    let unsynced = image.unsynced_bytes_max();
    let cuts: Vec<usize> = if every_byte {
        (1..unsynced).collect()
    } else {
        let mut cuts = vec![1, 27, 28, 29, 33, unsynced / 2, unsynced.saturating_sub(1)];
        cuts.retain(|&c| c > 0 && c < unsynced);
        cuts
    };
    for bytes in cuts {
        modes.push(Crash::Torn { bytes, garbled: false });
        modes.push(Crash::Torn { bytes, garbled: true });
    }
    modes
}

/// Crashes at every point in every mode and checks the recovered state against the model.
/// Returns how many recoveries ran, and how many of them started from a checkpoint.
fn check_all_points(ops: &[Op], segment_bytes_target: u64, every_byte: bool) -> (usize, usize) {
    let (points, records) = run(ops, segment_bytes_target);
    let mut prefixes = vec![Queues::new()];
    for record in &records {
        let mut next = prefixes.last().cloned().unwrap_or_default();
        apply(&mut next, record);
        prefixes.push(next);
    }
    let (mut recoveries, mut from_checkpoint) = (0, 0);
    for (at, point) in points.iter().enumerate() {
        for crash in crash_modes(&point.image, every_byte) {
            let crashed = point.image.crash(crash);
            let (mut store, queues, checkpointed) = recover(&crashed, segment_bytes_target);
            from_checkpoint += usize::from(checkpointed);
            let allowed = point.durable_min..=point.appended_max;
            assert!(
                prefixes[allowed.clone()].contains(&queues),
                "point {at} {crash:?}: recovered {queues:?}\nnot a prefix state in {allowed:?}"
            );
            recoveries += 1;
            // The recovered store keeps working: a new message survives the next restart.
            store.append_enqueue(u64::MAX, 1, b"", b"after").unwrap();
            store.commit().unwrap();
            drop(store);
            let (_, again, _) = recover(&crashed.crash(Crash::LoseUnsynced), segment_bytes_target);
            let mut expected = queues.clone();
            expected.insert(u64::MAX, vec![(1, Vec::new(), b"after".to_vec())]);
            assert_eq!(again, expected, "point {at} {crash:?}: second restart");
        }
    }
    (recoveries, from_checkpoint)
}

fn enqueue(queue: u64, body_bytes: usize) -> Op {
    Op::Enqueue { queue, meta: 3, body_bytes }
}

/// A workload with rotations, settles far from their enqueues, updates, a purge and
/// compactions, crashed at every sync point and torn at every byte of every in-flight write.
#[test]
fn every_sync_point_and_every_torn_byte_recovers_a_committed_prefix() {
    let ops = vec![
        enqueue(1, 40),
        enqueue(1, 10),
        enqueue(2, 60),
        Op::Commit,
        Op::Settle { pick: 1 },
        Op::Update { pick: 0, meta: 9 },
        enqueue(1, 80),
        Op::Commit,
        enqueue(3, 5),
        enqueue(3, 5),
        Op::Settle { pick: 1 },
        Op::Commit,
        Op::Compact,
        Op::Purge { queue: 3 },
        enqueue(2, 120),
        Op::Settle { pick: 0 },
        Op::Update { pick: 1, meta: 4 },
        Op::Commit,
        Op::Settle { pick: 0 },
        Op::Settle { pick: 0 },
        Op::Compact,
        enqueue(1, 7),
        Op::Commit,
    ];
    let (recoveries, from_checkpoint) = check_all_points(&ops, 200, true);
    assert!(recoveries > 500, "{recoveries} recoveries");
    // Most points follow a rotation, and with it a checkpoint (ADR 0018).
    assert!(from_checkpoint * 2 > recoveries, "{from_checkpoint} of {recoveries} from a checkpoint");
}

/// Group commit: a crash between appends and their commit never loses a committed record and may
/// keep any prefix of the batch in flight.
#[test]
fn a_large_batch_torn_anywhere_keeps_a_prefix() {
    let mut ops: Vec<Op> = (0..30).map(|i| enqueue(i % 3, 20)).collect();
    ops.push(Op::Commit);
    ops.extend((0..10).map(|i| Op::Settle { pick: i * 2 }));
    ops.push(Op::Commit);
    check_all_points(&ops, 1 << 20, true);
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..4, any::<u8>(), 0usize..150)
            .prop_map(|(queue, meta, body_bytes)| Op::Enqueue { queue, meta, body_bytes }),
        4 => any::<usize>().prop_map(|pick| Op::Settle { pick }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(pick, meta)| Op::Update { pick, meta }),
        1 => (0u64..4).prop_map(|queue| Op::Purge { queue }),
        3 => Just(Op::Commit),
        1 => Just(Op::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random workloads over tiny and larger segments recover a committed prefix at every
    /// sync point and at sampled torn tails.
    #[test]
    fn random_workloads_recover_a_committed_prefix_at_every_sync_point(
        ops in proptest::collection::vec(op(), 1..60),
        segment_bytes_target in prop_oneof![Just(128u64), Just(300), Just(4096)],
    ) {
        check_all_points(&ops, segment_bytes_target, false);
    }
}
