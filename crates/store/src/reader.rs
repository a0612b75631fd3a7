//! Reading enqueue records from another thread than the store's (ADR 0007): a [`SegmentReader`]
//! opens its own handles on the segment files and reads with positioned reads, so it never
//! waits for the store thread. It reads only durable records: recovered ones, and ones whose
//! commit was reported; a segment holding a live message is never compacted away. Readers made
//! by one [`crate::Store`] share their handles with it, and compaction drops the handles of the
//! segments it deletes (an open handle would keep a deleted file's space allocated).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::ReadError;
use crate::record::{segment_name, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::storage::{Storage, StorageFile};
use crate::store::check_enqueue;
use crate::types::Location;

/// Open handles kept at most; past this the cache is emptied (reads walk the log mostly in
/// order, so few segments are read at a time).
const MAX_OPEN_SEGMENTS: usize = 64;

/// Bytes one positioned read of records in a row covers at most (`read_messages`).
const SPAN_MAX_BYTES: u64 = 256 << 10;

/// A gap between two records (other records: acks, other queues' messages) that one read still
/// covers rather than starting another.
const GAP_MAX_BYTES: u64 = 4096;

/// Segment handles opened for reading, by segment sequence; shared with the store.
pub(crate) type OpenSegments = Arc<Mutex<HashMap<u64, Arc<dyn StorageFile>>>>;

/// Reads enqueue records by location, independently of the [`crate::Store`].
#[derive(Debug, Clone)]
pub struct SegmentReader {
    storage: Arc<dyn Storage>,
    open: OpenSegments,
}

impl SegmentReader {
    /// A reader of `storage` with a handle cache of its own (`Store::reader` shares the store's).
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        SegmentReader { storage, open: Arc::default() }
    }

    pub(crate) fn sharing(storage: Arc<dyn Storage>, open: OpenSegments) -> Self {
        SegmentReader { storage, open }
    }

    /// Drops the handle of a deleted segment.
    pub(crate) fn forget(open: &OpenSegments, segment: u64) {
        open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&segment);
    }

    /// The body (properties + content) of the durable enqueue record at `location`, checksum
    /// verified.
    pub fn read_message(&self, location: Location) -> Result<Bytes, ReadError> {
        let record_bytes = could_be_a_record(location)?;
        let file = self.file(location)?;
        let mut buf = vec![0; record_bytes];
        file.read_exact_at(u64::from(location.offset), &mut buf)
            .map_err(|source| ReadError::Io { location, source })?;
        let body_at = check_enqueue(&buf, location)?;
        Ok(Bytes::from(buf).slice(body_at..))
    }

    /// [`Self::read_message`] for each of `locations`, in order. Records that lie in a row in one
    /// segment (ascending, gaps of at most 4 KiB, 256 KiB in all) are read with one positioned
    /// read: a backlog published in order is read back with a read per batch, not per message.
    /// Each body is copied out, so no message keeps the others' bytes alive.
    pub fn read_messages(&self, locations: &[Location]) -> Vec<Result<Bytes, ReadError>> {
        let mut out = Vec::with_capacity(locations.len());
        let mut at = 0;
        while at < locations.len() {
            let first = locations[at];
            let (start, mut end) = (u64::from(first.offset), record_end(first));
            let mut next = at + 1;
            while let Some(&location) = locations.get(next) {
                let offset = u64::from(location.offset);
                let in_row =
                    location.segment == first.segment && offset >= end && offset - end <= GAP_MAX_BYTES;
                if !in_row || record_end(location) - start > SPAN_MAX_BYTES {
                    break;
                }
                end = record_end(location);
                next += 1;
            }
            match next - at {
                1 => out.push(self.read_message(first)),
                _ => out.extend(self.read_span(&locations[at..next], start, end)),
            }
            at = next;
        }
        out
    }

    /// The records at `run`, all within `[start, end)` of one segment, read at once; if that
    /// read fails, each is read alone (and fails with its own error).
    fn read_span(&self, run: &[Location], start: u64, end: u64) -> Vec<Result<Bytes, ReadError>> {
        let mut buf = vec![0; (end - start) as usize];
        let read = self.file(run[0]).and_then(|file| {
            file.read_exact_at(start, &mut buf).map_err(|source| ReadError::Io { location: run[0], source })
        });
        if read.is_err() {
            return run.iter().map(|&location| self.read_message(location)).collect();
        }
        let record = |location: Location| {
            let record_bytes = could_be_a_record(location)?;
            let from = (u64::from(location.offset) - start) as usize;
            let bytes = &buf[from..from + record_bytes];
            let body_at = check_enqueue(bytes, location)?;
            Ok(Bytes::copy_from_slice(&bytes[body_at..]))
        };
        run.iter().map(|&location| record(location)).collect()
    }

    fn file(&self, location: Location) -> Result<Arc<dyn StorageFile>, ReadError> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = open.get(&location.segment) {
            return Ok(file.clone());
        }
        let file: Arc<dyn StorageFile> = self
            .storage
            .open(&segment_name(location.segment))
            .map_err(|source| ReadError::Io { location, source })?
            .into();
        if open.len() >= MAX_OPEN_SEGMENTS {
            open.clear();
        }
        open.insert(location.segment, file.clone());
        Ok(file)
    }
}

/// `location`'s record size, if a record could lie there (past the segment header, at least a
/// record header long).
fn could_be_a_record(location: Location) -> Result<usize, ReadError> {
    let record_bytes = location.record_bytes as usize;
    if record_bytes < RECORD_HEADER_BYTES || (location.offset as usize) < SEGMENT_HEADER_BYTES {
        return Err(ReadError::NoSuchRecord { location });
    }
    Ok(record_bytes)
}

/// The offset just past the record at `location`.
fn record_end(location: Location) -> u64 {
    u64::from(location.offset) + u64::from(location.record_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemStorage, Store, StoreConfig};

    /// A committed record reads back through a reader of its own; a location that is no
    /// enqueue record is refused, not misread.
    #[test]
    fn reads_committed_records() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let (mut store, _) = Store::open(storage.clone(), StoreConfig::default()).unwrap();
        let first = store.append_enqueue(1, 1, b"meta", b"first body").unwrap();
        let second = store.append_enqueue(1, 2, b"", b"second").unwrap();
        store.commit().unwrap();
        let reader = SegmentReader::new(storage);
        assert_eq!(&reader.read_message(second.location).unwrap()[..], b"second");
        assert_eq!(&reader.read_message(first.location).unwrap()[..], b"first body");
        let wrong = Location { offset: first.location.offset + 1, ..first.location };
        assert!(reader.read_message(wrong).is_err());
    }

    /// Records read together (in a row, across a gap, out of order, with a location that is no
    /// record among them) read back as each would alone: the bad location fails alone.
    #[test]
    fn records_read_together_read_as_alone() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let (mut store, _) = Store::open(storage.clone(), StoreConfig::default()).unwrap();
        let bodies: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let mut at = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            at.push(store.append_enqueue(1, i as u64 + 1, b"m", body).unwrap().location);
            if i == 2 {
                store.append_settle(1, 1).unwrap(); // a gap between records 2 and 3
            }
        }
        store.commit().unwrap();
        let reader = SegmentReader::new(storage);
        let bad = Location { record_bytes: at[4].record_bytes + 1, ..at[4] };
        // Past the end of the file: its run's read fails, and each of the run is read alone.
        let past_the_end = Location { offset: at[5].offset + at[5].record_bytes, record_bytes: 100, ..at[5] };
        let asked = [at[0], at[1], at[2], at[3], bad, at[5], past_the_end, at[1], at[0]];
        let read = reader.read_messages(&asked);
        assert_eq!(read.len(), asked.len());
        for (location, got) in asked.iter().zip(&read) {
            let alone = reader.read_message(*location);
            match (got, alone) {
                (Ok(got), Ok(alone)) => assert_eq!(got, &alone),
                (Err(_), Err(_)) => {}
                (got, alone) => panic!("{location:?}: together {got:?}, alone {alone:?}"),
            }
        }
        assert!(read[4].is_err() && read[6].is_err(), "the bad locations fail");
        assert_eq!(read.iter().filter(|r| r.is_ok()).count(), 7, "and no other");
        assert_eq!(&read[3].as_ref().unwrap()[..], &bodies[3][..], "across the gap");
    }

    /// Compaction closes the reader's handle of a segment it deletes, and a live message in a
    /// later segment still reads.
    #[test]
    fn compaction_closes_handles_of_deleted_segments() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let config =
            StoreConfig { segment_bytes_target: crate::limits::SEGMENT_BYTES_MIN, ..StoreConfig::default() };
        let (mut store, _) = Store::open(storage, config).unwrap();
        let first = store.append_enqueue(1, 1, b"", &[7; 100]).unwrap();
        let second = store.append_enqueue(1, 2, b"", &[8; 100]).unwrap();
        store.commit().unwrap();
        assert_ne!(first.location.segment, second.location.segment, "one record per segment");
        let reader = store.reader();
        assert_eq!(reader.read_message(first.location).unwrap().len(), 100);
        assert!(reader.open.lock().unwrap().contains_key(&first.location.segment));
        store.append_settle(1, 1).unwrap();
        store.append_enqueue(1, 3, b"", &[9; 100]).unwrap();
        assert!(store.compact().unwrap().segments_removed > 0);
        assert!(!reader.open.lock().unwrap().contains_key(&first.location.segment));
        assert_eq!(&reader.read_message(second.location).unwrap()[..], &[8; 100][..]);
    }
}
