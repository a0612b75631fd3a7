//! Synced records cut from the log are loss, not a torn tail (issue 37, finding 10). A torn tail
//! is what a crash mid-write leaves: bytes no sync covered. Bytes that a sync covered and that are
//! gone — the file cut, or unreadable to its end — are reported in `RecoveryReport::lost` with the
//! count of records lost, never cut quietly. What tells them apart: the length and record count of
//! each segment at its last sync, in the next segment's header (a segment is synced whole before
//! the next one exists) or, for the last segment, in the tail mark written after each sync.
//! docs/storage.md "Recovery rules".

mod common;

use std::sync::Arc;

use hourglass_store::{Location, Loss, MemStorage, OnCorruption, OpenError, Storage, Store, StoreConfig};

const SEGMENT_1: &str = "00000000000000000001.seg";
const SEGMENT_2: &str = "00000000000000000002.seg";
const TAIL_MARK: &str = "tail.mark";

fn config(segment_bytes_target: u64) -> StoreConfig {
    StoreConfig { segment_bytes_target, on_corruption: OnCorruption::Refuse }
}

fn open(storage: &MemStorage, target: u64) -> Result<(Store, common::Reopened), OpenError> {
    Store::open(Arc::new(storage.clone()), config(target)).map(common::replayed)
}

fn ids(recovered: &common::Reopened) -> Vec<u64> {
    recovered.queues.get(&1).map_or(Vec::new(), |m| m.iter().map(|m| m.msg_id).collect())
}

/// `n` enqueues of queue 1 (ids 0..n, 132-byte records), each committed on its own (each one
/// confirmed); their locations.
fn confirmed_one_by_one(storage: &MemStorage, n: u64, target: u64) -> Vec<Location> {
    let (mut store, _) = open(storage, target).unwrap();
    (0..n)
        .map(|id| {
            let location = store.append_enqueue(1, id, b"meta", &[id as u8; 100]).unwrap().location;
            store.commit().unwrap();
            location
        })
        .collect()
}

fn cut(storage: &MemStorage, name: &str, bytes: u64) {
    let file = storage.open(name).unwrap();
    let len = file.len_bytes().unwrap();
    file.set_len(len - bytes).unwrap();
}

fn loss(segment: u64, offset: u32, bytes_lost: u64, records_lost: u64) -> Loss {
    Loss { segment, offset: u64::from(offset), bytes_lost, records_lost }
}

/// The case: 1,000 bytes cut from the end of the last segment after every record was
/// confirmed. Before: the partial record at the new end was cut as a 56-byte "torn tail" at INFO
/// and the records behind it were never mentioned. Now: reported as 8 records lost from where
/// the readable records end, no torn tail.
#[test]
fn a_cut_at_the_end_of_the_last_segment_after_confirms_is_loss_not_a_torn_tail() {
    let storage = MemStorage::new();
    let locations = confirmed_one_by_one(&storage, 100, 1 << 20);
    cut(&storage, SEGMENT_1, 1_000);
    let (_, recovered) = open(&storage, 1 << 20).unwrap();
    assert_eq!(ids(&recovered), (0..92).collect::<Vec<_>>());
    assert_eq!(recovered.report.torn_tail_bytes, 0);
    assert!(recovered.report.damaged.is_empty());
    assert_eq!(recovered.report.lost, [loss(1, locations[92].offset, 8 * 132, 8)]);
    assert_eq!(recovered.report.lost_records(), 8);
}

/// A cut at a record boundary of a segment that is not the last leaves nothing unreadable; it
/// used to go unnoticed. The next segment's header says how long that segment was when it was
/// sealed: the missing records are loss.
#[test]
fn a_cut_at_a_record_boundary_of_an_older_segment_is_loss() {
    let storage = MemStorage::new();
    // 600-byte segments: four 132-byte records each.
    let locations = confirmed_one_by_one(&storage, 12, 600);
    assert_eq!((locations[4].segment, locations[8].segment), (2, 3));
    cut(&storage, SEGMENT_2, 2 * 132);
    let (_, recovered) = open(&storage, 600).unwrap();
    assert_eq!(ids(&recovered), [0, 1, 2, 3, 4, 5, 8, 9, 10, 11]);
    assert_eq!(recovered.report.lost, [loss(2, locations[6].offset, 2 * 132, 2)]);
    assert!(recovered.report.damaged.is_empty());
}

/// 1,000 bytes cut from an older segment end inside a record: before, damage to the end of an
/// older segment, refused at start; its extent is known now (the next segment's header), so the
/// start goes on and reports the records lost.
#[test]
fn a_cut_inside_a_record_of_an_older_segment_is_loss_not_a_refusal() {
    let storage = MemStorage::new();
    // 4,096-byte segments: thirty 132-byte records each.
    let locations = confirmed_one_by_one(&storage, 70, 4096);
    assert_eq!((locations[29].segment, locations[30].segment, locations[60].segment), (1, 2, 3));
    cut(&storage, SEGMENT_2, 1_000);
    let (_, recovered) = open(&storage, 4096).unwrap();
    let expected: Vec<u64> = (0..52).chain(60..70).collect();
    assert_eq!(ids(&recovered), expected);
    assert_eq!(recovered.report.lost, [loss(2, locations[52].offset, 8 * 132, 8)]);
    assert_eq!(recovered.report.torn_tail_bytes, 0);
}

/// A flipped byte in the last record of the last segment, below its synced length: that record
/// was confirmed, so it is one record lost (before: cut as a torn tail at INFO).
#[test]
fn a_damaged_last_record_that_was_synced_is_loss() {
    let storage = MemStorage::new();
    let locations = confirmed_one_by_one(&storage, 10, 1 << 20);
    let file = storage.open(SEGMENT_1).unwrap();
    let at = u64::from(locations[9].offset) + 70;
    let mut byte = [0];
    file.read_exact_at(at, &mut byte).unwrap();
    file.write_all_at(at, &[byte[0] ^ 0x08]).unwrap();
    let (_, recovered) = open(&storage, 1 << 20).unwrap();
    assert_eq!(ids(&recovered), (0..9).collect::<Vec<_>>());
    assert_eq!(recovered.report.lost, [loss(1, locations[9].offset, 132, 1)]);
    assert_eq!(recovered.report.torn_tail_bytes, 0);
}

/// A genuine torn tail — part of a record written after the last sync, as a crash mid-write
/// leaves it — is still a torn tail: cut, reported as `torn_tail_bytes`, nothing lost.
#[test]
fn a_partial_record_after_the_last_sync_is_still_a_torn_tail() {
    let storage = MemStorage::new();
    let locations = confirmed_one_by_one(&storage, 10, 1 << 20);
    let end = u64::from(locations[9].offset + locations[9].record_bytes);
    let mut partial = vec![0; 50];
    storage.open(SEGMENT_1).unwrap().read_exact_at(u64::from(locations[9].offset), &mut partial).unwrap();
    storage.open(SEGMENT_1).unwrap().write_all_at(end, &partial).unwrap();
    let (mut store, recovered) = open(&storage, 1 << 20).unwrap();
    assert_eq!(ids(&recovered), (0..10).collect::<Vec<_>>());
    assert_eq!(recovered.report.torn_tail_bytes, 50);
    assert!(recovered.report.lost.is_empty());
    // Appends go on in the same segment, after the cut.
    let next = store.append_enqueue(1, 10, b"", b"after").unwrap().location;
    store.commit().unwrap();
    assert_eq!((next.segment, u64::from(next.offset)), (1, end));
}

/// After a loss the store appends to a new segment and never changes the one that lost records,
/// so every later recovery reports the same loss (until compaction deletes that segment).
#[test]
fn a_loss_is_reported_again_by_every_later_recovery() {
    let storage = MemStorage::new();
    confirmed_one_by_one(&storage, 20, 1 << 20);
    cut(&storage, SEGMENT_1, 300);
    let (mut store, first) = open(&storage, 1 << 20).unwrap();
    assert_eq!(first.report.lost.len(), 1);
    let new = store.append_enqueue(1, 100, b"", b"new").unwrap().location;
    store.commit().unwrap();
    assert_eq!(new.segment, 2);
    drop(store);
    let (store, second) = open(&storage, 1 << 20).unwrap();
    assert_eq!(second.report.lost, first.report.lost);
    let mut expected = ids(&first);
    expected.push(100);
    assert_eq!(ids(&second), expected);
    assert_eq!(store.read_message(new).unwrap(), "new");
}

/// The last segment deleted whole: the tail mark still names it, so its records are loss.
#[test]
fn a_last_segment_deleted_whole_is_loss() {
    let storage = MemStorage::new();
    let locations = confirmed_one_by_one(&storage, 6, 600);
    assert_eq!(locations[5].segment, 2);
    storage.remove(SEGMENT_2).unwrap();
    let (_, recovered) = open(&storage, 600).unwrap();
    assert_eq!(ids(&recovered), [0, 1, 2, 3]);
    assert_eq!(
        recovered.report.lost,
        [Loss { segment: 2, offset: 0, bytes_lost: 32 + 2 * 132, records_lost: 2 }]
    );
}

/// What the store cannot tell: without the tail mark (a log written before it existed, or a mark
/// the power cut before the kernel wrote it back), a cut of the last segment reads as a torn tail,
/// as before. Older segments keep their sealed length in the next segment's header either way.
#[test]
fn without_a_tail_mark_a_cut_of_the_last_segment_reads_as_a_torn_tail() {
    let storage = MemStorage::new();
    confirmed_one_by_one(&storage, 10, 1 << 20);
    storage.remove(TAIL_MARK).unwrap();
    cut(&storage, SEGMENT_1, 100);
    let (_, recovered) = open(&storage, 1 << 20).unwrap();
    assert_eq!(ids(&recovered), (0..9).collect::<Vec<_>>());
    assert_eq!(recovered.report.torn_tail_bytes, 32);
    assert!(recovered.report.lost.is_empty());
}

/// Found by the `store_recovery` fuzz target: a segment cut short below its synced length, with
/// damage before the cut, is read the same way by every later recovery (the segment that lost
/// records is never changed, not even cut at its last whole record: a record before the cut whose
/// damaged length now reached past a new end would be read by other rules).
#[test]
fn a_cut_segment_with_damage_before_the_cut_reads_the_same_at_every_recovery() {
    let storage = MemStorage::new();
    let locations = confirmed_one_by_one(&storage, 20, 1 << 20);
    let file = storage.open(SEGMENT_1).unwrap();
    // Record 3 claims to end 42 bytes into record 18; record 10's body is damaged.
    let claimed_payload =
        u32::try_from(u64::from(locations[18].offset) + 42 - u64::from(locations[3].offset) - 28).unwrap();
    file.write_all_at(u64::from(locations[3].offset) + 4, &claimed_payload.to_le_bytes()).unwrap();
    file.write_all_at(u64::from(locations[10].offset) + 60, &[0xEE; 4]).unwrap();
    cut(&storage, SEGMENT_1, 200);
    let (mut store, first) = open(&storage, 1 << 20).unwrap();
    let skipped = |r: &common::Reopened| -> Vec<u64> { r.report.damaged.iter().map(|d| d.offset).collect() };
    assert_eq!(skipped(&first), [3, 10].map(|i| u64::from(locations[i].offset)));
    assert_eq!(first.report.lost, [loss(1, locations[18].offset, 2 * 132, 4)]);
    store.append_enqueue(1, 100, b"", b"new").unwrap();
    store.commit().unwrap();
    drop(store);
    let (_, second) = open(&storage, 1 << 20).unwrap();
    assert_eq!((skipped(&second), &second.report.lost), (skipped(&first), &first.report.lost));
    let mut expected = ids(&first);
    expected.push(100);
    assert_eq!(ids(&second), expected);
}
