//! Damaged segment files (issue #12, finding 8): a bad record that valid records follow is
//! corruption, skipped and reported, never a reason to drop what follows; a bad record that
//! nothing valid follows is the last segment's torn tail and is cut quietly — where recovery
//! cannot tell how much of that segment was synced (issue 37: where it can, synced records cut
//! away are loss, `tests/loss.rs`); damage recovery cannot bound is refused unless the operator
//! asks to skip it. docs/storage.md "Recovery rules".

mod common;

use std::sync::Arc;

use hourglass_store::{Defect, Location, MemStorage, OnCorruption, OpenError, Storage, Store, StoreConfig};

const SEGMENT_1: &str = "00000000000000000001.seg";

fn config(on_corruption: OnCorruption) -> StoreConfig {
    StoreConfig { segment_bytes_target: 1 << 20, on_corruption }
}

fn open(storage: &MemStorage) -> Result<(Store, common::Reopened), OpenError> {
    Store::open(Arc::new(storage.clone()), config(OnCorruption::Refuse)).map(common::replayed)
}

fn ids(recovered: &common::Reopened, queue: u64) -> Vec<u64> {
    recovered.queues.get(&queue).map_or(Vec::new(), |m| m.iter().map(|m| m.msg_id).collect())
}

/// Nine committed enqueues of queue 1 in one segment; their locations.
fn nine_messages(storage: &MemStorage) -> Vec<Location> {
    let (mut store, _) = open(storage).unwrap();
    let locations = (0..9u64)
        .map(|id| store.append_enqueue(1, id, b"meta", &[id as u8; 100]).unwrap().location)
        .collect();
    store.commit().unwrap();
    locations
}

/// Removes the tail mark, as in a log written before it existed or a power cut that lost it: the
/// last segment's synced length is then unknown, and the torn-tail rules read all of it.
fn forget_synced_length(storage: &MemStorage) {
    storage.remove("tail.mark").unwrap();
}

fn xor_byte(storage: &MemStorage, name: &str, offset: u64, mask: u8) {
    let file = storage.open(name).unwrap();
    let mut byte = [0];
    file.read_exact_at(offset, &mut byte).unwrap();
    file.write_all_at(offset, &[byte[0] ^ mask]).unwrap();
}

/// The case: a flipped byte in the body of the middle record of the last segment loses
/// that one message, reported with its offset and size; every record after it is recovered.
#[test]
fn flipped_byte_in_middle_record_of_last_segment_loses_only_that_record() {
    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    let middle = locations[4];
    xor_byte(&storage, SEGMENT_1, u64::from(middle.offset) + 60, 0x01);
    let (_, recovered) = open(&storage).unwrap();
    assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 5, 6, 7, 8]);
    let report = &recovered.report;
    assert_eq!(report.torn_tail_bytes, 0);
    assert_eq!(report.damaged.len(), 1);
    let damage = &report.damaged[0];
    assert_eq!((damage.segment, damage.offset), (1, u64::from(middle.offset)));
    assert_eq!((damage.bytes_skipped, damage.defect), (u64::from(middle.record_bytes), Defect::Checksum));
    assert_eq!(report.damaged_bytes(), u64::from(middle.record_bytes));
}

/// Damage to a record header (its kind byte, or its length so that it claims to run past the end
/// of the file) is skipped by scanning forward to the next record that verifies.
#[test]
fn damaged_record_headers_are_skipped_by_scanning_to_the_next_valid_record() {
    for (byte_in_record, mask) in [(8, 0x40), (7, 0x10), (5, 0x80)] {
        let storage = MemStorage::new();
        let locations = nine_messages(&storage);
        xor_byte(&storage, SEGMENT_1, u64::from(locations[4].offset) + byte_in_record, mask);
        let (_, recovered) = open(&storage).unwrap();
        assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 5, 6, 7, 8], "byte {byte_in_record}");
        let damage = &recovered.report.damaged[0];
        assert_eq!(damage.bytes_skipped, u64::from(locations[4].record_bytes), "byte {byte_in_record}");
        assert_eq!(recovered.report.torn_tail_bytes, 0);
    }
}

/// Where the last segment's synced length is unknown, a torn tail — damage in the last record, or
/// a last record cut short — is still cut as before, reported only as torn tail bytes, not as
/// damage. (With the tail mark, both are synced records lost: `tests/loss.rs`.)
#[test]
fn damage_in_the_last_record_is_a_torn_tail_and_is_cut() {
    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    let last = locations[8];
    xor_byte(&storage, SEGMENT_1, u64::from(last.offset) + 100, 0x01);
    forget_synced_length(&storage);
    let (_, recovered) = open(&storage).unwrap();
    assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(recovered.report.torn_tail_bytes, u64::from(last.record_bytes));
    assert!(recovered.report.damaged.is_empty());

    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    storage.open(SEGMENT_1).unwrap().set_len(u64::from(locations[8].offset) + 50).unwrap();
    forget_synced_length(&storage);
    let (_, recovered) = open(&storage).unwrap();
    assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(recovered.report.torn_tail_bytes, 50);
    assert!(recovered.report.damaged.is_empty());
}

/// The encoded bytes of a purge of `queue`, as the store writes them.
fn purge_record(queue: u64) -> Vec<u8> {
    let scratch = MemStorage::new();
    let (mut store, _) = open(&scratch).unwrap();
    store.append_purge(queue).unwrap();
    store.commit().unwrap();
    let file = scratch.open(SEGMENT_1).unwrap();
    let mut bytes = vec![0; 28];
    file.read_exact_at(32, &mut bytes).unwrap();
    bytes
}

/// A client can put a well-formed record inside a message body. Damage to that message's record,
/// or a crash that tears it, must never make recovery take the embedded record for a real one.
#[test]
fn a_record_inside_a_body_is_never_taken_for_a_real_record() {
    let mut body = vec![0xAA; 40];
    body.extend(purge_record(7));
    body.extend([0xBB; 40]);
    for damage in ["flip in the body", "torn inside the body"] {
        let storage = MemStorage::new();
        let (mut store, _) = open(&storage).unwrap();
        store.append_enqueue(7, 1, b"", b"victim").unwrap();
        let hostile = store.append_enqueue(8, 2, b"", &body).unwrap().location;
        store.append_enqueue(7, 3, b"", b"after").unwrap();
        store.commit().unwrap();
        drop(store);
        let hostile_at = u64::from(hostile.offset);
        if damage == "flip in the body" {
            xor_byte(&storage, SEGMENT_1, hostile_at + 28 + 10, 0x01);
        } else {
            storage.open(SEGMENT_1).unwrap().set_len(hostile_at + 28 + 100).unwrap();
        }
        let (_, recovered) = open(&storage).unwrap();
        let expected: &[u64] = if damage == "flip in the body" { &[1, 3] } else { &[1] };
        assert_eq!(ids(&recovered, 7), expected, "{damage}: the embedded purge was applied");
        assert_eq!(ids(&recovered, 8), [0u64; 0], "{damage}");
    }
}

/// 600-byte segments: four 128-byte records each, refusing damage that cannot be bounded.
const SMALL: StoreConfig = StoreConfig { segment_bytes_target: 600, on_corruption: OnCorruption::Refuse };

/// Eight committed messages of queue 1 over several segments (a checkpoint written at a
/// rotation); their locations.
fn eight_messages_in_small_segments(storage: &MemStorage) -> Vec<Location> {
    let (mut store, _) = Store::open(Arc::new(storage.clone()), SMALL).unwrap();
    let locations =
        (0..8u64).map(|id| store.append_enqueue(1, id, b"", &[1; 100]).unwrap().location).collect();
    store.commit().unwrap();
    assert!(store.stats().checkpoints_written > 0);
    locations
}

/// Corruption in an older segment with valid records after it is skipped by default, like in
/// the last one (it used to refuse to start).
#[test]
fn corruption_in_an_older_segment_is_skipped_when_valid_records_follow() {
    let storage = MemStorage::new();
    let locations = eight_messages_in_small_segments(&storage);
    assert_eq!(locations[1].segment, 1);
    assert!(locations[7].segment > 1);
    xor_byte(&storage, SEGMENT_1, u64::from(locations[1].offset) + 50, 0x20);
    common::without_checkpoint(&storage);
    let (_, recovered) = common::replayed(Store::open(Arc::new(storage), SMALL).unwrap());
    assert_eq!(ids(&recovered, 1), [0, 2, 3, 4, 5, 6, 7]);
    assert_eq!(recovered.report.damaged.len(), 1);
}

/// The same damage under a checkpoint (ADR 0018), which spares the first pass that segment: the
/// second pass, which reads every live record back and checks it, leaves the damaged one out
/// and returns it as damage; every other message comes back, and the store forgets it.
#[test]
fn damage_in_a_segment_a_checkpoint_spares_is_found_by_the_second_pass() {
    let storage = MemStorage::new();
    let locations = eight_messages_in_small_segments(&storage);
    xor_byte(&storage, SEGMENT_1, u64::from(locations[1].offset) + 50, 0x20);
    let (mut store, recovered) = Store::open(Arc::new(storage.clone()), SMALL).unwrap();
    let used = recovered.report.checkpoint.clone().expect("the checkpoint is used");
    assert!(used.segments_skipped >= 1, "{used:?}");
    assert!(recovered.report.damaged.is_empty());
    let (queues, damaged) = store
        .replay(recovered.replay, |replayed| {
            replayed.map(|found| found.map(|(_, message)| message.msg_id)).collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
    assert_eq!(queues.unwrap(), [0, 2, 3, 4, 5, 6, 7]);
    assert_eq!(damaged.len(), 1);
    assert_eq!((damaged[0].segment, damaged[0].offset), (1, u64::from(locations[1].offset)));
    assert_eq!(store.drop_unreadable(&damaged), 1);
    assert!(!store.is_live(1, 1));
    assert_eq!(store.live_messages(), 7);
}

/// A damaged segment header with records behind it is refused by default; with `Skip` it is
/// reported and the records behind it (which carry their own checksums) are still read.
#[test]
fn damaged_segment_header_is_refused_or_its_records_read_with_skip() {
    let storage = MemStorage::new();
    nine_messages(&storage);
    xor_byte(&storage, SEGMENT_1, 3, 0x01);
    let err = open(&storage).unwrap_err();
    assert!(
        matches!(err, OpenError::Corrupt { segment: 1, offset: 0, defect: Defect::SegmentHeader }),
        "{err}"
    );
    let (_, recovered) =
        common::replayed(Store::open(Arc::new(storage), config(OnCorruption::Skip)).unwrap());
    assert_eq!(ids(&recovered, 1), (0..9).collect::<Vec<_>>());
    assert_eq!(recovered.report.damaged[0].bytes_skipped, 32);
}

/// After damage in the last segment the store appends to a fresh segment, so the damaged one
/// never changes; the next recovery reports the same damage and keeps the new records.
#[test]
fn appends_after_damage_go_to_a_new_segment_and_recovery_repeats_itself() {
    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    xor_byte(&storage, SEGMENT_1, u64::from(locations[2].offset) + 40, 0x04);
    let (mut store, first) = open(&storage).unwrap();
    let new = store.append_enqueue(1, 100, b"", b"new").unwrap();
    store.commit().unwrap();
    assert_eq!(new.location.segment, 2);
    drop(store);
    let (store, second) = open(&storage).unwrap();
    assert_eq!(second.report.damaged, first.report.damaged);
    assert_eq!(ids(&second, 1), [0, 1, 3, 4, 5, 6, 7, 8, 100]);
    assert_eq!(store.read_message(new.location).unwrap(), "new");
}

/// The trade-off on the last segment where its synced length is unknown: a header whose length
/// runs past the end of the file reads as a torn write. When valid records after it run cleanly to
/// the end, the length was what got damaged and they are kept; when they do not (more damage
/// further on), the tail is cut as torn. With the synced length known (the tail mark), those bytes
/// cannot be a torn write, and both stretches are skipped as damage instead.
#[test]
fn length_past_the_end_is_a_torn_tail_unless_valid_records_run_to_the_end() {
    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    xor_byte(&storage, SEGMENT_1, u64::from(locations[4].offset) + 6, 0x01);
    forget_synced_length(&storage);
    let (_, recovered) = open(&storage).unwrap();
    assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 5, 6, 7, 8]);

    for known in [false, true] {
        let storage = MemStorage::new();
        let locations = nine_messages(&storage);
        xor_byte(&storage, SEGMENT_1, u64::from(locations[4].offset) + 6, 0x01);
        xor_byte(&storage, SEGMENT_1, u64::from(locations[7].offset) + 60, 0x01);
        if !known {
            forget_synced_length(&storage);
        }
        let (_, recovered) = open(&storage).unwrap();
        let report = &recovered.report;
        if known {
            assert_eq!(ids(&recovered, 1), [0, 1, 2, 3, 5, 6, 8]);
            let skipped: Vec<u64> = report.damaged.iter().map(|d| d.offset).collect();
            assert_eq!(skipped, [4, 7].map(|i| u64::from(locations[i].offset)));
            assert_eq!((report.torn_tail_bytes, report.lost.len()), (0, 0));
        } else {
            assert_eq!(ids(&recovered, 1), [0, 1, 2, 3]);
            assert!(report.damaged.is_empty());
            assert!(report.torn_tail_bytes > 0);
        }
    }
}

/// Found by the `store_recovery` fuzz target: a later recovery repeats the earlier one's skips
/// after the earlier one cut a torn tail behind them, even where a damaged header now claims more
/// bytes than the file holds (its defect then reads `Truncated`, not `Checksum`).
#[test]
fn recovery_after_a_torn_cut_repeats_the_same_skips() {
    let storage = MemStorage::new();
    let locations = nine_messages(&storage);
    let (first_bad, next, last) = (locations[6], locations[7], locations[8]);
    // Record 6 now claims to end 10 bytes into record 8; record 8 (the last) is damaged: torn.
    let file = storage.open(SEGMENT_1).unwrap();
    let mut length = [0; 4];
    file.read_exact_at(u64::from(first_bad.offset) + 4, &mut length).unwrap();
    let claimed = u32::from_le_bytes(length) + next.record_bytes + 10;
    file.write_all_at(u64::from(first_bad.offset) + 4, &claimed.to_le_bytes()).unwrap();
    xor_byte(&storage, SEGMENT_1, u64::from(last.offset) + 50, 0x01);
    forget_synced_length(&storage);
    let (mut store, first) = open(&storage).unwrap();
    assert_eq!(ids(&first, 1), [0, 1, 2, 3, 4, 5, 7]);
    assert_eq!(first.report.torn_tail_bytes, u64::from(last.record_bytes));
    store.append_enqueue(1, 100, b"", b"new").unwrap();
    store.commit().unwrap();
    drop(store);
    let (_, second) = open(&storage).unwrap();
    let stretches = |r: &common::Reopened| -> Vec<(u64, u64, u64)> {
        r.report.damaged.iter().map(|d| (d.segment, d.offset, d.bytes_skipped)).collect()
    };
    assert_eq!(stretches(&second), stretches(&first));
    assert_eq!(stretches(&first), [(1, u64::from(first_bad.offset), u64::from(first_bad.record_bytes))]);
    assert_eq!(ids(&second, 1), [0, 1, 2, 3, 4, 5, 7, 100]);
    assert_eq!(
        (first.report.damaged[0].defect, second.report.damaged[0].defect),
        (Defect::Checksum, Defect::Truncated)
    );
}
