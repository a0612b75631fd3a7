//! Recovery's second pass: the live messages read back from the segments one at a time, in log
//! order (so each queue's in enqueue order), with their latest metadata.
//!
//! The first pass verified every record and left behind only where each segment's valid records
//! are (its valid length and the damaged stretches it skipped) and the live index, which says
//! where each live message's enqueue record lies. This pass walks the same records, reading only
//! headers and the metadata of live enqueues (a body is never read), and hands each live message
//! out as it finds it: nothing is held per message, so recovering 100M waiting messages needs no
//! more memory than running with them (issue 23).

use std::collections::HashMap;

use bytes::Bytes;

use super::Window;
use crate::error::{Defect, ReadError};
use crate::index::{IdBuild, LiveIndex};
use crate::record::{RecordHeader, RecordKind, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::storage::StorageFile;
use crate::types::{Location, RecoveredMessage};

/// What the second pass needs from the first: hand it to [`crate::Store::replay`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    segments: Vec<ReplaySegment>,
    updates: Updates,
}

/// One segment's valid records, as the first pass found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplaySegment {
    pub(crate) seq: u64,
    /// Records end here (a torn tail is cut, damage to the end left out).
    pub(crate) valid_bytes: u64,
    /// Damaged stretches between records: `(start, next valid record)`, in order.
    pub(crate) skips: Vec<(u64, u64)>,
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

    /// Pairs each segment with its file; a segment without one (deleted since, so it held
    /// nothing live) is left out.
    pub(crate) fn over<'a>(
        self,
        index: &'a LiveIndex,
        file_of: impl Fn(u64) -> Option<&'a dyn StorageFile>,
    ) -> Replayed<'a> {
        let segments: Vec<_> =
            self.segments.into_iter().filter_map(|segment| Some((file_of(segment.seq)?, segment))).collect();
        Replayed { index, updates: self.updates, segments: segments.into_iter(), at: None, failed: false }
    }
}

/// The live messages, `(queue, message)` in log order; see the module doc. After an error (a
/// segment that changed under the store since the first pass read it) it ends.
pub struct Replayed<'a> {
    index: &'a LiveIndex,
    updates: Updates,
    segments: std::vec::IntoIter<(&'a dyn StorageFile, ReplaySegment)>,
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
                    let (file, segment) = self.segments.next()?;
                    self.at.insert(Cursor::new(file, segment))
                }
            };
            match cursor.next_live(self.index, &mut self.updates) {
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

/// A walk through one segment's valid records.
struct Cursor<'a> {
    window: Window<'a>,
    segment: ReplaySegment,
    offset: u64,
    next_skip: usize,
}

impl<'a> Cursor<'a> {
    fn new(file: &'a dyn StorageFile, segment: ReplaySegment) -> Self {
        let window = Window::new(file, segment.valid_bytes);
        Self { window, segment, offset: SEGMENT_HEADER_BYTES as u64, next_skip: 0 }
    }

    /// The next live enqueue in this segment, or `None` at its end.
    fn next_live(
        &mut self,
        index: &LiveIndex,
        updates: &mut Updates,
    ) -> Result<Option<(u64, RecoveredMessage)>, ReadError> {
        let seq = self.segment.seq;
        while self.offset < self.segment.valid_bytes {
            if let Some(&(start, next)) = self.segment.skips.get(self.next_skip) {
                if start == self.offset {
                    self.offset = next;
                    self.next_skip += 1;
                    continue;
                }
            }
            let at = self.offset;
            // The first pass kept no record ending past u32::MAX.
            let mut location = Location { segment: seq, offset: at as u32, record_bytes: 0 };
            let header = self.header_at(location)?;
            location.record_bytes = header.record_bytes() as u32;
            self.offset += header.record_bytes();
            if header.kind != RecordKind::Enqueue
                || !index.is_live_at(header.queue, header.msg_id, seq, location.offset)
            {
                continue;
            }
            let metadata = match updates.take(header.queue, header.msg_id) {
                Some(metadata) => metadata,
                None => {
                    let metadata_at = at + RECORD_HEADER_BYTES as u64;
                    let bytes = self.read(location, metadata_at, usize::from(header.metadata_bytes))?;
                    Bytes::copy_from_slice(bytes)
                }
            };
            let message = RecoveredMessage {
                msg_id: header.msg_id,
                location,
                body_bytes: header.body_bytes(),
                metadata,
            };
            return Ok(Some((header.queue, message)));
        }
        Ok(None)
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
