//! Recovery's second pass: the live messages read back from the segments one at a time, in log
//! order (so each queue's in enqueue order), with their latest metadata.
//!
//! The first pass verified every record and left behind the live index, which says where each
//! live message's enqueue record lies. This pass takes those offsets per segment, sorted (one
//! walk over the index's tables, 4 B per message: `LiveIndex::live_offsets`), and reads the
//! header and metadata at each in file order (a body is never read, nor any other record), handing
//! each live message out as it finds it: nothing else is held per message, so recovering 100M
//! waiting messages needs little more memory than running with them (issue 23).

use std::collections::HashMap;

use bytes::Bytes;

use super::Window;
use crate::error::{Defect, ReadError};
use crate::index::{IdBuild, LiveIndex};
use crate::record::{RecordHeader, RecordKind, RECORD_HEADER_BYTES};
use crate::storage::StorageFile;
use crate::types::{Location, RecoveredMessage};

/// What the second pass needs from the first: hand it to [`crate::Store::replay`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    segments: Vec<ReplaySegment>,
    updates: Updates,
}

/// A segment the first pass kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplaySegment {
    pub(crate) seq: u64,
    /// Records end here (a torn tail is cut, damage to the end left out).
    pub(crate) valid_bytes: u64,
}

/// The latest metadata of each live message that an update record changed, per queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Updates(HashMap<u64, HashMap<u64, Bytes, IdBuild>, IdBuild>);

impl Updates {
    pub(crate) fn set(&mut self, queue: u64, msg_id: u64, metadata: Bytes) {
        self.0.entry(queue).or_default().insert(msg_id, metadata);
    }

    pub(crate) fn forget(&mut self, queue: u64, msg_id: u64) {
        self.take(queue, msg_id);
    }

    pub(crate) fn forget_queue(&mut self, queue: u64) {
        self.0.remove(&queue);
    }

    fn take(&mut self, queue: u64, msg_id: u64) -> Option<Bytes> {
        let messages = self.0.get_mut(&queue)?;
        let metadata = messages.remove(&msg_id);
        if messages.is_empty() {
            self.0.remove(&queue);
        }
        metadata
    }
}

impl Replay {
    pub(crate) fn new(segments: Vec<ReplaySegment>, updates: Updates) -> Self {
        Self { segments, updates }
    }

    /// Pairs each segment that holds live messages now with its file and their offsets.
    pub(crate) fn over<'a>(
        self,
        index: &LiveIndex,
        file_of: impl Fn(u64) -> Option<&'a dyn StorageFile>,
    ) -> Replayed<'a> {
        let mut offsets = index.live_offsets();
        let segments: Vec<_> = self
            .segments
            .into_iter()
            .filter_map(|segment| Some((file_of(segment.seq)?, offsets.remove(&segment.seq)?, segment)))
            .collect();
        Replayed { updates: self.updates, segments: segments.into_iter(), at: None, failed: false }
    }
}

/// The live messages, `(queue, message)` in log order; see the module doc. After an error (a
/// segment that changed under the store since the first pass read it) it ends.
pub struct Replayed<'a> {
    updates: Updates,
    segments: std::vec::IntoIter<(&'a dyn StorageFile, Vec<u32>, ReplaySegment)>,
    at: Option<Cursor<'a>>,
    failed: bool,
}

impl std::fmt::Debug for Replayed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayed").field("segments_left", &self.segments.len()).finish_non_exhaustive()
    }
}

impl Iterator for Replayed<'_> {
    type Item = Result<(u64, RecoveredMessage), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let cursor = match &mut self.at {
                Some(cursor) => cursor,
                None => {
                    let (file, offsets, segment) = self.segments.next()?;
                    self.at.insert(Cursor::new(file, offsets, segment))
                }
            };
            match cursor.next_live(&mut self.updates) {
                Ok(Some(found)) => return Some(Ok(found)),
                Ok(None) => self.at = None,
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }
}

/// A walk through one segment's live enqueue records.
struct Cursor<'a> {
    window: Window<'a>,
    seq: u64,
    offsets: std::vec::IntoIter<u32>,
}

impl<'a> Cursor<'a> {
    fn new(file: &'a dyn StorageFile, mut offsets: Vec<u32>, segment: ReplaySegment) -> Self {
        // Past the valid length: appended since the open, not recovered.
        offsets.truncate(offsets.partition_point(|offset| u64::from(*offset) < segment.valid_bytes));
        let window = Window::new(file, segment.valid_bytes);
        Self { window, seq: segment.seq, offsets: offsets.into_iter() }
    }

    /// The next live enqueue in this segment, or `None` at its end.
    fn next_live(&mut self, updates: &mut Updates) -> Result<Option<(u64, RecoveredMessage)>, ReadError> {
        let Some(offset) = self.offsets.next() else {
            return Ok(None);
        };
        let mut location = Location { segment: self.seq, offset, record_bytes: 0 };
        let header = self.header_at(location)?;
        location.record_bytes = header.record_bytes() as u32;
        if header.kind != RecordKind::Enqueue {
            return Err(ReadError::NotAnEnqueue { location });
        }
        let metadata = match updates.take(header.queue, header.msg_id) {
            Some(metadata) => metadata,
            None => {
                let metadata_at = u64::from(offset) + RECORD_HEADER_BYTES as u64;
                Bytes::copy_from_slice(self.read(
                    location,
                    metadata_at,
                    usize::from(header.metadata_bytes),
                )?)
            }
        };
        let message =
            RecoveredMessage { msg_id: header.msg_id, location, body_bytes: header.body_bytes(), metadata };
        Ok(Some((header.queue, message)))
    }

    /// The header of the record at `location`, which the first pass verified.
    fn header_at(&mut self, location: Location) -> Result<RecordHeader, ReadError> {
        let bytes = self.read(location, u64::from(location.offset), RECORD_HEADER_BYTES)?;
        let mut header = [0; RECORD_HEADER_BYTES];
        header.copy_from_slice(bytes);
        RecordHeader::decode(&header)
            .map_err(|defect| ReadError::Corrupt { location, defect: Defect::RecordHeader(defect) })
    }

    fn read(&mut self, location: Location, at: u64, len: usize) -> Result<&[u8], ReadError> {
        match self.window.bytes(at, len) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(ReadError::NoSuchRecord { location }),
            Err(source) => Err(ReadError::Io { location, source }),
        }
    }
}
