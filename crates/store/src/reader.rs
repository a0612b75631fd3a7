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
        let record_bytes = location.record_bytes as usize;
        if record_bytes < RECORD_HEADER_BYTES || (location.offset as usize) < SEGMENT_HEADER_BYTES {
            return Err(ReadError::NoSuchRecord { location });
        }
        let file = self.file(location)?;
        let mut buf = vec![0; record_bytes];
        file.read_exact_at(u64::from(location.offset), &mut buf)
            .map_err(|source| ReadError::Io { location, source })?;
        let body_at = check_enqueue(&buf, location)?;
        Ok(Bytes::from(buf).slice(body_at..))
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
