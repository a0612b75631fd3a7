use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::storage::{Crash, MemStorage};

fn open(storage: &MemStorage, compact_min_bytes: u64) -> (Catalog, CatalogOpened) {
    Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig { compact_min_bytes }).unwrap()
}

/// A catalog's map as plain bytes, to compare.
type Map = BTreeMap<Vec<u8>, Vec<u8>>;

fn map(catalog: &Catalog) -> Map {
    catalog.entries().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Puts, deletes and prefix deletes survive a reopen; a put of the value a key already holds and
/// a delete of an absent key write nothing.
#[test]
fn changes_survive_a_reopen_and_no_ops_write_nothing() {
    let storage = MemStorage::new();
    let (mut catalog, opened) = open(&storage, 1 << 20);
    assert_eq!(opened, CatalogOpened { pristine: true, ..CatalogOpened::default() });
    catalog.put(b"q/a", b"1").unwrap();
    catalog.put(b"q/b", b"2").unwrap();
    catalog.put(b"x/a", b"3").unwrap();
    catalog.put(b"q/a", b"4").unwrap();
    assert!(catalog.commit().unwrap().bytes > 0);
    catalog.put(b"q/a", b"4").unwrap();
    catalog.delete(b"nothing").unwrap();
    catalog.delete_prefix(b"nothing/").unwrap();
    assert_eq!(catalog.commit().unwrap(), CatalogCommitted::default(), "no-ops write nothing");
    catalog.delete_prefix(b"q/").unwrap();
    catalog.put(b"q/c", b"5").unwrap();
    catalog.delete(b"x/a").unwrap();
    catalog.put(b"v", b"").unwrap();
    catalog.commit().unwrap();
    let expected = map(&catalog);
    drop(catalog);
    let (catalog, opened) = open(&storage, 1 << 20);
    assert_eq!(map(&catalog), expected);
    assert_eq!(expected.keys().cloned().collect::<Vec<_>>(), vec![b"q/c".to_vec(), b"v".to_vec()]);
    assert_eq!(opened.records, 8);
    assert_eq!(catalog.get(b"q/c").map(|v| &v[..]), Some(&b"5"[..]));
}

/// Once the log outgrows the snapshot it is folded into a new snapshot: the log stays small, and
/// a reopen reads the same map from the snapshot and the short log after it.
#[test]
fn a_grown_log_is_folded_into_a_snapshot() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 256);
    let mut compactions = 0;
    for i in 0..200u32 {
        catalog.put(format!("queue/{}", i % 50).as_bytes(), &i.to_le_bytes()).unwrap();
        compactions += u32::from(catalog.commit().unwrap().compacted);
    }
    assert!(compactions >= 3, "{compactions} compactions");
    let log = storage.open("catalog.log").unwrap().len_bytes().unwrap();
    assert!(log < 2048, "the log was reset by the compactions ({log} bytes)");
    let expected = map(&catalog);
    assert_eq!(expected.len(), 50);
    drop(catalog);
    let (catalog, opened) = open(&storage, 256);
    assert_eq!(map(&catalog), expected);
    assert!(opened.records < 50, "most of the map came from the snapshot");
}

/// A crash at any sync point of any commit (compactions included), losing or tearing what was
/// not synced, reopens to the map as it was just before that commit or just after it: never a
/// mix, never an older state, never an error.
#[test]
fn a_crash_at_any_point_reopens_to_the_state_before_or_after_that_commit() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 96);
    let mut history = vec![map(&catalog)];
    let mut images = Vec::new();
    storage.record_sync_points();
    for i in 0..40u32 {
        catalog.put(format!("k{}", i % 7).as_bytes(), format!("value {i}").as_bytes()).unwrap();
        if i % 5 == 4 {
            catalog.delete_prefix(b"k1").unwrap();
        }
        if i % 9 == 8 {
            catalog.delete(b"k3").unwrap();
        }
        catalog.commit().unwrap();
        history.push(map(&catalog));
        // Every sync point of this commit: the crash may keep the commit or lose it, no more.
        images.extend(storage.take_images().into_iter().map(|image| (i as usize, image)));
    }
    assert!(images.len() > 40);
    for (commit, image) in images {
        for crash in [Crash::LoseUnsynced, Crash::KeepUnsynced, Crash::Torn { bytes: 7, garbled: true }] {
            let after = image.crash(crash);
            let (mut reopened, _) = open(&after, 96);
            let state = map(&reopened);
            assert!(
                state == history[commit] || state == history[commit + 1],
                "commit {commit}, {crash:?}: {state:?}"
            );
            // And it goes on from there.
            reopened.put(b"next", b"1").unwrap();
            reopened.commit().unwrap();
            let (again, _) = open(&after, 96);
            assert_eq!(again.get(b"next").map(|v| &v[..]), Some(&b"1"[..]));
        }
    }
}

/// Discarding drops every change since the last commit, from the map and from the log.
#[test]
fn discarded_changes_are_gone() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 1 << 20);
    catalog.put(b"kept", b"1").unwrap();
    catalog.commit().unwrap();
    catalog.put(b"dropped", b"1").unwrap();
    catalog.delete(b"kept").unwrap();
    catalog.discard();
    assert_eq!(map(&catalog), BTreeMap::from([(b"kept".to_vec(), b"1".to_vec())]));
    assert_eq!(catalog.commit().unwrap(), CatalogCommitted::default(), "nothing left to write");
    drop(catalog);
    assert_eq!(map(&open(&storage, 1 << 20).0), BTreeMap::from([(b"kept".to_vec(), b"1".to_vec())]));
}

/// A torn tail is cut and reported; the records before it stay.
#[test]
fn a_torn_tail_is_cut_and_reported() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 1 << 20);
    catalog.put(b"a", b"1").unwrap();
    catalog.commit().unwrap();
    drop(catalog);
    let log = storage.open("catalog.log").unwrap();
    let end = log.len_bytes().unwrap();
    log.write_all_at(end, &[9, 0, 0, 0, 1, 2]).unwrap();
    let (catalog, opened) = open(&storage, 1 << 20);
    assert_eq!((opened.records, opened.torn_bytes), (1, 6));
    assert_eq!(catalog.get(b"a").map(|v| &v[..]), Some(&b"1"[..]));
    assert_eq!(storage.open("catalog.log").unwrap().len_bytes().unwrap(), end);
}

/// A damaged log header or snapshot is refused (an error naming it), never read as empty.
#[test]
fn a_damaged_header_or_snapshot_is_refused() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 1 << 20);
    catalog.put(b"a", b"1").unwrap();
    catalog.commit().unwrap();
    drop(catalog);
    storage.open("catalog.log").unwrap().write_all_at(3, b"X").unwrap();
    let error = Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig::default()).unwrap_err();
    assert!(matches!(error, CatalogError::Corrupt { .. }), "{error}");

    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 8);
    catalog.put(b"a", b"a value long enough to fold the log").unwrap();
    assert!(catalog.commit().unwrap().compacted);
    drop(catalog);
    storage.open("catalog.snap").unwrap().write_all_at(30, b"X").unwrap();
    let error = Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig::default()).unwrap_err();
    assert!(matches!(error, CatalogError::Snapshot(SnapshotError::Corrupt { .. })), "{error}");
}

/// A commit whose sync fails leaves the map as it was before the uncommitted changes, and the
/// next commit writes only what came after: the failed records are cut from the log, even when
/// the next record covers exactly the first of them (the rest would otherwise read as valid).
#[test]
fn a_failed_commit_drops_its_changes() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 1 << 20);
    catalog.put(b"kept", b"1").unwrap();
    catalog.put(b"gone", b"1").unwrap();
    catalog.commit().unwrap();
    catalog.put(b"kept", b"2").unwrap();
    catalog.delete(b"gone").unwrap();
    catalog.put(b"new", b"1").unwrap();
    storage.inject(crate::storage::Fault::SyncFails);
    assert!(catalog.commit().is_err());
    storage.inject(crate::storage::Fault::None);
    let before = BTreeMap::from([(b"gone".to_vec(), b"1".to_vec()), (b"kept".to_vec(), b"1".to_vec())]);
    assert_eq!(map(&catalog), before);
    catalog.put(b"kepu", b"3").unwrap();
    catalog.commit().unwrap();
    drop(catalog);
    let (reopened, _) = open(&storage, 1 << 20);
    let mut expected = before;
    expected.insert(b"kepu".to_vec(), b"3".to_vec());
    assert_eq!(map(&reopened), expected);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever bytes of the log are damaged (flipped, or cut short), opening never panics and
    /// never invents data: it is refused, or it gives the map as of some prefix of the records
    /// written (damage ends the log where it starts).
    #[test]
    fn a_damaged_log_reads_as_a_prefix_of_what_was_written(
        damage in proptest::collection::vec((0usize..4096, 1u8..=255), 1..4),
        cut in proptest::option::of(0usize..4096),
    ) {
        let storage = MemStorage::new();
        let (mut catalog, _) = open(&storage, 1 << 20);
        let mut prefixes = vec![map(&catalog)];
        for i in 0..30u32 {
            let key = format!("k{}", i % 9);
            if i % 7 == 6 {
                catalog.delete(key.as_bytes()).unwrap();
            } else {
                catalog.put(key.as_bytes(), format!("value {i}").as_bytes()).unwrap();
            }
            // One record per commit, so each prefix of records is a state to compare with.
            catalog.commit().unwrap();
            prefixes.push(map(&catalog));
        }
        drop(catalog);
        let log = storage.open("catalog.log").unwrap();
        let len = log.len_bytes().unwrap() as usize;
        let mut bytes = vec![0; len];
        log.read_exact_at(0, &mut bytes).unwrap();
        for (at, xor) in damage {
            let at = at % len;
            bytes[at] ^= xor;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % len);
        }
        log.set_len(0).unwrap();
        log.write_all_at(0, &bytes).unwrap();
        log.sync().unwrap();
        drop(log);
        if let Ok((reopened, _)) = Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig::default()) {
            let state = map(&reopened);
            proptest::prop_assert!(prefixes.contains(&state), "{state:?}");
        }
    }
}

/// Five commits as the identity store writes them (a user with its permission, a vhost, a user
/// deleted as three records in one commit...): each change a key and its new value (`None`: a
/// delete).
const FIVE_STEPS: [&[(&str, Option<&str>)]; 5] = [
    &[("iUguest", Some("admin")), ("iH/", Some("{}")), ("iP/guest", Some(".*"))],
    &[("iUops", Some("admin")), ("iP/ops", Some(".*"))],
    &[("iHprod", Some("{}")), ("qprod/q1", Some("durable"))],
    &[("iUguest", None), ("iP/guest", None), ("iT/guest", None)],
    &[("qprod/q2", Some("durable"))],
];

/// [`FIVE_STEPS`] committed one by one: the map after each commit, and the log's bytes.
fn five_commits(storage: &MemStorage) -> (Vec<Map>, Vec<u8>) {
    let (mut catalog, _) = open(storage, 1 << 20);
    let mut history = vec![map(&catalog)];
    for step in FIVE_STEPS {
        for (key, value) in step {
            match value {
                Some(value) => catalog.put(key.as_bytes(), value.as_bytes()).unwrap(),
                None => catalog.delete(key.as_bytes()).unwrap(),
            }
        }
        catalog.commit().unwrap();
        history.push(map(&catalog));
    }
    drop(catalog);
    let log = storage.open("catalog.log").unwrap();
    let mut bytes = vec![0; log.len_bytes().unwrap() as usize];
    log.read_exact_at(0, &mut bytes).unwrap();
    (history, bytes)
}

/// Where `needle` first occurs in `bytes`.
fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes.windows(needle.len()).position(|w| w == needle).expect("present")
}

fn rewrite_log(storage: &MemStorage, bytes: &[u8]) {
    let log = storage.open("catalog.log").unwrap();
    log.set_len(0).unwrap();
    log.write_all_at(0, bytes).unwrap();
    log.sync().unwrap();
}

fn reopen(storage: &MemStorage) -> Result<(Catalog, CatalogOpened), CatalogError> {
    Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig { compact_min_bytes: 1 << 20 })
}

/// Issue 22, finding 1: one flipped bit in the first, a middle or the last change record,
/// with whole commits after it, is damage: opening fails, naming it. It is never taken for a
/// torn tail, which would drop every later commit (and bring back the deleted guest).
#[test]
fn a_flipped_bit_with_commits_after_it_is_damage_not_a_torn_tail() {
    let storage = MemStorage::new();
    let (_, bytes) = five_commits(&storage);
    let body = LOG_HEADER_BYTES;
    // The first record's key, a record of the third commit, the last commit's record.
    let last_change = bytes.len() - 2 * log_scan::TRAILER_BYTES - 4;
    for at in [body + 9, body + 3, find(&bytes, b"qprod/q1"), last_change] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x04;
        rewrite_log(&storage, &flipped);
        let error = reopen(&storage).map(|_| ()).unwrap_err();
        assert!(matches!(error, CatalogError::Damaged { .. }), "flip at {at}: {error}");
        assert!(error.to_string().contains("damage, not a torn tail"), "{error}");
        // Refusing changed nothing on disk.
        let log = storage.open("catalog.log").unwrap();
        assert_eq!(log.len_bytes().unwrap() as usize, flipped.len());
    }
}

/// A flip in a commit's trailer is covered by the trailer's second copy: every commit reads.
#[test]
fn a_flipped_trailer_copy_is_covered_by_its_twin() {
    let storage = MemStorage::new();
    let (history, bytes) = five_commits(&storage);
    for back in [1, log_scan::TRAILER_BYTES + 1] {
        let mut flipped = bytes.clone();
        flipped[bytes.len() - back] ^= 0x80;
        rewrite_log(&storage, &flipped);
        let (catalog, opened) = reopen(&storage).unwrap();
        assert_eq!(map(&catalog), history[5], "flip {back} bytes from the end");
        assert_eq!((opened.commits, opened.repaired_copies), (5, 1));
    }
}

/// Issue 22, finding 2: a commit is applied whole or not at all. Cut at every byte (every
/// record boundary among them), the log reopens to the map as of a whole commit: the user
/// deletion's three records are never applied in part, and the catalog goes on from there.
#[test]
fn a_cut_anywhere_reopens_to_a_whole_commit() {
    let storage = MemStorage::new();
    let (history, bytes) = five_commits(&storage);
    let mut last = 0;
    for cut in LOG_HEADER_BYTES..=bytes.len() {
        rewrite_log(&storage, &bytes[..cut]);
        let (mut catalog, _) = reopen(&storage).unwrap();
        let state = map(&catalog);
        let commit =
            history.iter().position(|h| *h == state).unwrap_or_else(|| panic!("cut {cut}: {state:?}"));
        assert!(commit >= last, "a longer log never reads as an older state");
        last = commit;
        catalog.put(b"next", b"1").unwrap();
        catalog.commit().unwrap();
        let (again, _) = reopen(&storage).unwrap();
        assert_eq!(again.get(b"next").map(|v| &v[..]), Some(&b"1"[..]), "cut {cut}");
    }
    assert_eq!(last, 5);
}

/// Issue 37, finding 7: salvage (for `--set-aside-damaged-definitions`) skips the damaged
/// commit and applies the whole commits after it: guest, deleted after the damage, stays deleted,
/// and what only the damaged commit wrote (vhost `prod`, queue q1) falls back to what it was
/// before (absent). Before, salvage stopped at the damage and guest came back.
#[test]
fn salvage_applies_the_whole_commits_after_the_damage() {
    let storage = MemStorage::new();
    let (history, bytes) = five_commits(&storage);
    let mut flipped = bytes.clone();
    flipped[find(&bytes, b"qprod/q1")] ^= 0x04;
    rewrite_log(&storage, &flipped);
    assert!(matches!(reopen(&storage), Err(CatalogError::Damaged { .. })));
    let salvaged = Catalog::salvage(&storage, "catalog");
    let entries: Map = salvaged.entries.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    let mut expected = history[5].clone();
    expected.remove(b"iHprod".as_slice());
    expected.remove(b"qprod/q1".as_slice());
    assert_eq!(entries, expected, "commits 1, 2, 4 and 5 applied, commit 3 skipped");
    assert!(!entries.contains_key(b"iUguest".as_slice()), "guest stays deleted");
    assert_eq!(salvaged.lost, Some(Lost { first_commit: 3, commits: 1, rest_of_log: false }));
    assert_eq!((salvaged.commits, salvaged.snapshot_read), (4, true));
}

/// The catalog-level rule the server's withholding of credentials rests on: after a loss, only
/// the entries a commit after it wrote are current; every entry written before may have been
/// changed or deleted by the lost commit (here ops, written before the damaged commit 3).
#[test]
fn after_a_loss_only_entries_written_after_it_are_current() {
    let storage = MemStorage::new();
    let (_, bytes) = five_commits(&storage);
    let mut flipped = bytes.clone();
    flipped[find(&bytes, b"qprod/q1")] ^= 0x04;
    rewrite_log(&storage, &flipped);
    let salvaged = Catalog::salvage(&storage, "catalog");
    assert!(salvaged.is_current(b"qprod/q2"), "written after the damage");
    for before in ["iUops", "iP/ops", "iH/"] {
        assert!(salvaged.entries.contains_key(before.as_bytes()), "{before} kept");
        assert!(!salvaged.is_current(before.as_bytes()), "{before} written before the damage");
    }

    // Nothing lost: every entry is current.
    let whole = MemStorage::new();
    five_commits(&whole);
    let salvaged = Catalog::salvage(&whole, "catalog");
    assert_eq!(salvaged.lost, None);
    assert!(salvaged.entries.keys().all(|key| salvaged.is_current(key)));
}

/// Whichever commit is damaged, salvage gives every other commit applied in order: each change
/// is a key's whole value, so the later commits end every key they touch as it was.
#[test]
fn salvage_of_any_damaged_commit_is_every_other_commit_applied() {
    for (damaged, step) in FIVE_STEPS.iter().enumerate() {
        let storage = MemStorage::new();
        let (_, bytes) = five_commits(&storage);
        let mut flipped = bytes.clone();
        // The commit's first change record: its key is the step's first (commit 4's is guest's
        // last record, its deletion).
        let key = step[0].0.as_bytes();
        let at = if damaged == 3 {
            bytes.windows(key.len()).rposition(|w| w == key).unwrap()
        } else {
            find(&bytes, key)
        };
        flipped[at] ^= 0x01;
        rewrite_log(&storage, &flipped);
        let salvaged = Catalog::salvage(&storage, "catalog");
        let mut expected = Map::new();
        for (_, applied) in FIVE_STEPS.iter().enumerate().filter(|(i, _)| *i != damaged) {
            for (key, value) in *applied {
                match value {
                    Some(value) => expected.insert(key.as_bytes().to_vec(), value.as_bytes().to_vec()),
                    None => expected.remove(key.as_bytes()),
                };
            }
        }
        let entries: Map = salvaged.entries.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(entries, expected, "commit {} damaged", damaged + 1);
        let lost = Lost { first_commit: damaged as u64 + 1, commits: 1, rest_of_log: false };
        assert_eq!(salvaged.lost, Some(lost));
    }
}

/// A log whose header does not read is lost whole: the snapshot's entries are kept, none of
/// them current (the log may have changed or deleted any of them).
#[test]
fn a_log_whose_header_does_not_read_is_lost_whole() {
    let storage = MemStorage::new();
    let (mut catalog, _) = open(&storage, 8);
    catalog.put(b"iUguest", b"a value long enough to fold the log").unwrap();
    assert!(catalog.commit().unwrap().compacted);
    catalog.delete(b"iUguest").unwrap();
    assert!(!catalog.commit().unwrap().compacted, "the deletion stays in the log");
    drop(catalog);
    storage.open("catalog.log").unwrap().write_all_at(3, b"X").unwrap();
    let salvaged = Catalog::salvage(&storage, "catalog");
    assert!(salvaged.entries.contains_key(b"iUguest".as_slice()), "the snapshot's entry");
    assert!(!salvaged.is_current(b"iUguest"), "the log it may have been deleted in is lost");
    assert_eq!(salvaged.lost, Some(Lost { first_commit: 1, commits: 0, rest_of_log: true }));
}

/// A log of format 1 (records without commit trailers, before issue 22) reads as it was
/// written and is folded into a snapshot at once, so that only format 2 is appended to.
#[test]
fn a_format_1_log_is_read_and_folded() {
    let storage = MemStorage::new();
    let mut log = b"HGLSCLOG".to_vec();
    log.extend_from_slice(&1u32.to_le_bytes());
    log.extend_from_slice(&0u64.to_le_bytes());
    log.extend_from_slice(&crc32c::crc32c(&log).to_le_bytes());
    for (key, value) in [("a", "1"), ("b", "2")] {
        let mut body = vec![OP_PUT];
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(key.as_bytes());
        body.extend_from_slice(value.as_bytes());
        log.extend_from_slice(&(body.len() as u32).to_le_bytes());
        log.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        log.extend_from_slice(&body);
    }
    storage.create("catalog.log").unwrap().write_all_at(0, &log).unwrap();
    let (mut catalog, opened) = reopen(&storage).unwrap();
    assert_eq!((opened.records, catalog.len()), (2, 2));
    assert!(storage.open("catalog.snap").is_ok(), "folded into a snapshot");
    catalog.put(b"c", b"3").unwrap();
    catalog.commit().unwrap();
    drop(catalog);
    let (again, _) = reopen(&storage).unwrap();
    assert_eq!(again.len(), 3);
}

/// Only a catalog where nothing was ever committed is pristine (a first start).
#[test]
fn only_a_never_committed_catalog_is_pristine() {
    let storage = MemStorage::new();
    let (mut catalog, opened) = open(&storage, 1 << 20);
    assert!(opened.pristine);
    catalog.put(b"a", b"1").unwrap();
    catalog.commit().unwrap();
    catalog.delete(b"a").unwrap();
    catalog.commit().unwrap();
    drop(catalog);
    let (catalog, opened) = open(&storage, 1 << 20);
    assert!(catalog.is_empty() && !opened.pristine, "empty now, but not new");
}
