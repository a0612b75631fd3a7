//! Recovery's second pass checks what it reads (issue 37, finding 9): a live record whose bytes
//! changed after the first pass indexed it — its checksum no longer matches, or it is a valid
//! record of another queue or message — is reported as damage and left out, never handed to the
//! broker under the queue its changed header names. Before, the second pass trusted the header:
//! a changed queue id moved messages from one queue to another, with no damage reported.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use hourglass_store::{
    Damage, Defect, Location, MemStorage, OnCorruption, Recovered, Storage, Store, StoreConfig,
};

const SEGMENT_1: &str = "00000000000000000001.seg";
const QUEUE_ID_AT: u64 = 12;

fn config() -> StoreConfig {
    StoreConfig { segment_bytes_target: 1 << 20, on_corruption: OnCorruption::Refuse }
}

/// Ten committed enqueues of queue 1 (ids 0..10) in one segment; their locations.
fn ten_messages(storage: &MemStorage) -> Vec<Location> {
    let (mut store, _) = Store::open(Arc::new(storage.clone()), config()).unwrap();
    let locations = (0..10u64)
        .map(|id| store.append_enqueue(1, id, b"meta", &[id as u8; 100]).unwrap().location)
        .collect();
    store.commit().unwrap();
    locations
}

/// The first pass only: the store and what it found.
fn first_pass(storage: &MemStorage) -> (Store, Recovered) {
    Store::open(Arc::new(storage.clone()), config()).unwrap()
}

/// The second pass: `(queue, msg_id)` in the order handed out, and the damage it reported.
fn second_pass(store: &Store, recovered: Recovered) -> (Vec<(u64, u64)>, Vec<Damage>) {
    let (found, damaged) = store
        .replay(recovered.replay, |replayed| {
            let found: Result<Vec<(u64, u64)>, _> =
                replayed.map(|found| found.map(|(q, m)| (q, m.msg_id))).collect();
            found
        })
        .unwrap_or_else(|e| panic!("the second pass did not start: {e}"));
    let found = found.unwrap_or_else(|e| panic!("the second pass failed: {e}"));
    (found, damaged)
}

fn queue_1_except(left_out: &[u64]) -> Vec<(u64, u64)> {
    (0..10).filter(|id| !left_out.contains(id)).map(|id| (1, id)).collect()
}

/// The case: the queue id in three records' headers changed between the passes. Those
/// records fail their checksum: reported as damage at their offsets, not handed out under queue 2;
/// every other message comes back in its own queue, in order.
#[test]
fn queue_ids_changed_between_the_passes_are_damage_not_a_move() {
    let storage = MemStorage::new();
    let locations = ten_messages(&storage);
    let (store, recovered) = first_pass(&storage);
    let file = storage.open(SEGMENT_1).unwrap();
    for id in [2, 4, 5] {
        file.write_all_at(u64::from(locations[id].offset) + QUEUE_ID_AT, &2u64.to_le_bytes()).unwrap();
    }
    let (found, damaged) = second_pass(&store, recovered);
    assert_eq!(found, queue_1_except(&[2, 4, 5]), "nothing handed out under queue 2");
    let expected: Vec<Damage> = [2, 4, 5]
        .iter()
        .map(|&id| Damage {
            segment: 1,
            offset: u64::from(locations[id].offset),
            bytes_skipped: u64::from(locations[id].record_bytes),
            defect: Defect::Checksum,
        })
        .collect();
    assert_eq!(damaged, expected);
}

/// A record that verifies but is not the one the first pass indexed at that offset (here: the same
/// message rewritten, checksum and all, as an enqueue of queue 2) is left out as damage too.
#[test]
fn a_valid_record_of_another_queue_at_an_indexed_offset_is_not_handed_out() {
    let storage = MemStorage::new();
    let locations = ten_messages(&storage);
    let (store, recovered) = first_pass(&storage);
    let at = u64::from(locations[6].offset);
    let file = storage.open(SEGMENT_1).unwrap();
    let mut record = vec![0; locations[6].record_bytes as usize];
    file.read_exact_at(at, &mut record).unwrap();
    record[QUEUE_ID_AT as usize..QUEUE_ID_AT as usize + 8].copy_from_slice(&2u64.to_le_bytes());
    let crc = crc32c::crc32c(&record[4..]);
    record[..4].copy_from_slice(&crc.to_le_bytes());
    file.write_all_at(at, &record).unwrap();
    let (found, damaged) = second_pass(&store, recovered);
    assert_eq!(found, queue_1_except(&[6]));
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!((damaged[0].offset, damaged[0].defect), (at, Defect::NotTheIndexedRecord));
}

/// A segment cut between the passes: the records past the cut are damage (`Truncated`), the ones
/// before it all come back (the read-ahead past the new end does not fail them).
#[test]
fn a_segment_cut_between_the_passes_loses_only_the_records_past_the_cut() {
    let storage = MemStorage::new();
    let locations = ten_messages(&storage);
    let (store, recovered) = first_pass(&storage);
    storage.open(SEGMENT_1).unwrap().set_len(u64::from(locations[8].offset) + 40).unwrap();
    let (found, damaged) = second_pass(&store, recovered);
    assert_eq!(found, queue_1_except(&[8, 9]));
    let cut: Vec<(u64, Defect)> = damaged.iter().map(|d| (d.offset, d.defect)).collect();
    let expected = [8, 9].map(|id| (u64::from(locations[id].offset), Defect::Truncated));
    assert_eq!(cut, expected);
}

/// The store forgets what the second pass could not read (as if the first pass had found the
/// damage): not live, not counted, its segment not pinned by it; and the next recovery's first
/// pass reports the same record as a damaged stretch.
#[test]
fn the_store_forgets_records_the_second_pass_left_out() {
    let storage = MemStorage::new();
    let locations = ten_messages(&storage);
    let (mut store, recovered) = first_pass(&storage);
    let at = u64::from(locations[3].offset) + QUEUE_ID_AT;
    storage.open(SEGMENT_1).unwrap().write_all_at(at, &7u64.to_le_bytes()).unwrap();
    let (_, damaged) = second_pass(&store, recovered);
    assert_eq!(store.drop_unreadable(&damaged), 1);
    assert!(!store.is_live(1, 3));
    assert_eq!(store.live_messages(), 9);
    assert_eq!(store.queue_messages(1), 9);
    drop(store);
    let (_, again) = common::replayed(first_pass(&storage));
    let ids: Vec<u64> = again.queues[&1].iter().map(|m| m.msg_id).collect();
    assert_eq!(ids, [0, 1, 2, 4, 5, 6, 7, 8, 9]);
    assert_eq!(again.queues.keys().copied().collect::<Vec<_>>(), [1]);
    let stretches: BTreeMap<u64, u64> =
        again.report.damaged.iter().map(|d| (d.offset, d.bytes_skipped)).collect();
    assert_eq!(
        stretches,
        BTreeMap::from([(u64::from(locations[3].offset), u64::from(locations[3].record_bytes))])
    );
}

/// The same over real files: the queue id rewritten in place with `std::fs` between the passes.
#[test]
fn on_real_files_a_queue_id_changed_between_the_passes_is_damage() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(hourglass_store::FsStorage::open(dir.path()).unwrap());
    let (mut store, _) = Store::open(Arc::clone(&storage), config()).unwrap();
    let locations: Vec<Location> =
        (0..10u64).map(|id| store.append_enqueue(1, id, b"meta", &[7; 100]).unwrap().location).collect();
    store.commit().unwrap();
    drop(store);
    let (store, recovered) = Store::open(Arc::clone(&storage), config()).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(dir.path().join(SEGMENT_1)).unwrap();
    file.write_all_at(&2u64.to_le_bytes(), u64::from(locations[7].offset) + QUEUE_ID_AT).unwrap();
    let (found, damaged) = second_pass(&store, recovered);
    assert_eq!(found, queue_1_except(&[7]));
    assert_eq!(
        damaged.iter().map(|d| (d.offset, d.defect)).collect::<Vec<_>>(),
        [(u64::from(locations[7].offset), Defect::Checksum)]
    );
}
