//! Reading enqueue records from another thread than the store's (ADR 0007): a [`SegmentReader`]
//! opens its own handles on the segment files and reads with positioned reads, so it never
//! waits for the store thread. It reads only durable records: recovered ones, and ones whose
//! commit was reported; a segment holding a live message is never compacted away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::ReadError;
use crate::record::{segment_name, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::storage::{Storage, StorageFile};
use crate::store::check_enqueue;
use crate::types::Location;

/// Open handles kept at most; past this the cache is emptied (segments come and go with
/// compaction, and reads walk the log mostly in order).
const MAX_OPEN_SEGMENTS: usize = 64;

/// Reads enqueue records by location, independently of the [`crate::Store`].
#[derive(Debug, Clone)]
pub struct SegmentReader {
    storage: Arc<dyn Storage>,
    open: Arc<Mutex<HashMap<u64, Arc<dyn StorageFile>>>>,
}

impl SegmentReader {
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        SegmentReader { storage, open: Arc::default() }
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
}
