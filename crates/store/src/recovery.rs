//! Recovery: read every segment in sequence order, verify each record's checksum, cut the torn
//! tail of the last segment, and rebuild the live set (per queue, in enqueue order, with the
//! latest metadata) and the live index.
//!
//! Rules (docs/storage.md has the full list):
//! - the last segment's tail after its last valid record is cut (truncate + sync): those bytes
//!   were never covered by a commit, because a segment is synced whole before the next is created;
//! - a last segment whose header never completed (shorter than a header, or exactly a header that
//!   does not check) is removed: it was created, and the crash came before its header was synced;
//! - any other bad record or header is corruption, handled as [`OnCorruption`] says;
//! - a segment with another format version is refused whatever the policy.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Defect, OpenError};
use crate::index::{IdBuild, LiveIndex};
use crate::limits::RECOVERY_READ_BYTES;
use crate::record::{
    check_segment_header, parse_segment_name, segment_name, RecordHeader, RecordKind, SegmentHeaderDefect,
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_SUFFIX,
};
use crate::storage::{Storage, StorageFile};
use crate::types::{Damage, Location, OnCorruption, Recovered, RecoveredMessage, RecoveryReport};

/// A segment file found on disk, with the length of its valid prefix.
#[derive(Debug)]
pub(crate) struct OpenSegment {
    pub(crate) file: Box<dyn StorageFile>,
    /// Bytes up to the end of the last valid record; reads beyond are refused.
    pub(crate) valid_bytes: u64,
}

/// What the store starts from.
pub(crate) struct RecoveredState {
    pub(crate) segments: BTreeMap<u64, OpenSegment>,
    pub(crate) index: LiveIndex,
    pub(crate) recovered: Recovered,
}

pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    on_corruption: OnCorruption,
) -> Result<RecoveredState, OpenError> {
    let sequences = list_segments(storage.as_ref())?;
    let mut scan = Scan {
        index: LiveIndex::default(),
        live: LiveSet::default(),
        report: RecoveryReport::default(),
        on_corruption,
    };
    let mut segments = BTreeMap::new();
    let last = sequences.last().copied();
    for seq in sequences {
        let file = storage.open(&segment_name(seq)).map_err(io_err("opening a segment"))?;
        let is_last = Some(seq) == last;
        match scan.segment(seq, file.as_ref(), is_last)? {
            Some(valid_bytes) => {
                segments.insert(seq, OpenSegment { file, valid_bytes });
            }
            None => {
                drop(file);
                scan.index.remove_segment(seq);
                storage.remove(&segment_name(seq)).map_err(io_err("removing a torn segment"))?;
                scan.report.torn_segment_removed = Some(seq);
            }
        }
    }
    let recovered = Recovered { queues: scan.live.into_queues(), report: scan.report };
    Ok(RecoveredState { segments, index: scan.index, recovered })
}

/// Segment sequence numbers on disk, ascending.
fn list_segments(storage: &dyn Storage) -> Result<Vec<u64>, OpenError> {
    let mut sequences = Vec::new();
    for name in storage.list().map_err(io_err("listing the data directory"))? {
        if !name.ends_with(SEGMENT_SUFFIX) {
            continue;
        }
        match parse_segment_name(&name) {
            Some(seq) => sequences.push(seq),
            None => return Err(OpenError::StrayFile { name }),
        }
    }
    sequences.sort_unstable();
    Ok(sequences)
}

struct Scan {
    index: LiveIndex,
    live: LiveSet,
    report: RecoveryReport,
    on_corruption: OnCorruption,
}

/// Where a segment's scan stopped early.
struct Stop {
    offset: u64,
    defect: Defect,
}

impl Scan {
    /// Scans one segment; returns its valid length, or `None` if it is a torn new segment.
    fn segment(&mut self, seq: u64, file: &dyn StorageFile, is_last: bool) -> Result<Option<u64>, OpenError> {
        let file_bytes = file.len_bytes().map_err(io_err("sizing a segment"))?;
        let mut window = Window::new(file, file_bytes);
        self.report.segments += 1;
        self.index.add_segment(seq);
        let header = match window.bytes(0, SEGMENT_HEADER_BYTES) {
            Ok(Some(bytes)) => {
                let mut header = [0; SEGMENT_HEADER_BYTES];
                header.copy_from_slice(bytes);
                Some(check_segment_header(&header, seq))
            }
            Ok(None) => None,
            Err(e) => return Err(io_err("reading a segment header")(e)),
        };
        let stop = match header {
            Some(Ok(())) => self.records(seq, &mut window)?,
            Some(Err(SegmentHeaderDefect::UnsupportedVersion(version))) => {
                return Err(OpenError::UnsupportedVersion { segment: seq, version })
            }
            Some(Err(SegmentHeaderDefect::WrongSequence(found))) => {
                Some(Stop { offset: 0, defect: Defect::WrongSequence(found) })
            }
            // A header that never completed: written but not synced when the machine stopped.
            None | Some(Err(SegmentHeaderDefect::Damaged))
                if is_last && file_bytes <= SEGMENT_HEADER_BYTES as u64 =>
            {
                return Ok(None)
            }
            _ => Some(Stop { offset: 0, defect: Defect::SegmentHeader }),
        };
        let Some(Stop { offset, defect }) = stop else {
            return Ok(Some(file_bytes));
        };
        if is_last && offset >= SEGMENT_HEADER_BYTES as u64 {
            file.set_len(offset).map_err(io_err("cutting a torn tail"))?;
            file.sync().map_err(io_err("syncing a cut tail"))?;
            self.report.torn_tail_bytes += file_bytes - offset;
            return Ok(Some(offset));
        }
        match self.on_corruption {
            OnCorruption::Refuse => Err(OpenError::Corrupt { segment: seq, offset, defect }),
            OnCorruption::SkipRestOfSegment => {
                self.report.damaged.push(Damage {
                    segment: seq,
                    offset,
                    bytes_skipped: file_bytes - offset,
                    defect,
                });
                Ok(Some(offset))
            }
        }
    }

    /// Reads records until the end of the file (`None`) or the first bad one.
    fn records(&mut self, seq: u64, window: &mut Window<'_>) -> Result<Option<Stop>, OpenError> {
        let mut offset = SEGMENT_HEADER_BYTES as u64;
        while offset < window.file_bytes {
            match self.record(seq, window, offset) {
                Ok(Ok(record_bytes)) => {
                    offset += record_bytes;
                    self.report.records += 1;
                }
                Ok(Err(defect)) => return Ok(Some(Stop { offset, defect })),
                Err(e) => return Err(io_err("reading a segment")(e)),
            }
        }
        Ok(None)
    }

    /// Checks and applies the record at `offset`; returns its length.
    fn record(&mut self, seq: u64, window: &mut Window<'_>, offset: u64) -> io::Result<Result<u64, Defect>> {
        let Some(header_bytes) = window.bytes(offset, RECORD_HEADER_BYTES)? else {
            return Ok(Err(Defect::Truncated));
        };
        let mut header_array = [0; RECORD_HEADER_BYTES];
        header_array.copy_from_slice(header_bytes);
        let header = match RecordHeader::decode(&header_array) {
            Ok(header) => header,
            Err(defect) => return Ok(Err(Defect::RecordHeader(defect))),
        };
        let end = offset + header.record_bytes();
        // Offsets are u32 in a Location; a longer segment is not one we wrote.
        if end > window.file_bytes || end > u64::from(u32::MAX) {
            return Ok(Err(Defect::Truncated));
        }
        let mut crc = crc32c::crc32c(&header_array[4..]);
        let metadata_at = offset + RECORD_HEADER_BYTES as u64;
        let metadata_bytes = usize::from(header.metadata_bytes);
        let metadata = match window.bytes(metadata_at, metadata_bytes)? {
            Some(metadata) => metadata,
            None => return Ok(Err(Defect::Truncated)),
        };
        crc = crc32c::crc32c_append(crc, metadata);
        let metadata = Bytes::copy_from_slice(metadata);
        let mut at = metadata_at + metadata_bytes as u64;
        while at < end {
            let n = (end - at).min(RECOVERY_READ_BYTES as u64) as usize;
            let Some(chunk) = window.bytes(at, n)? else {
                return Ok(Err(Defect::Truncated));
            };
            crc = crc32c::crc32c_append(crc, chunk);
            at += n as u64;
        }
        if crc != header.crc {
            return Ok(Err(Defect::Checksum));
        }
        // In range: end <= u32::MAX was checked above.
        let location =
            Location { segment: seq, offset: offset as u32, record_bytes: header.record_bytes() as u32 };
        self.apply(&header, location, metadata);
        Ok(Ok(header.record_bytes()))
    }

    fn apply(&mut self, header: &RecordHeader, location: Location, metadata: Bytes) {
        let (queue, msg_id, seq) = (header.queue, header.msg_id, location.segment);
        match header.kind {
            RecordKind::Enqueue => {
                // Appends refuse a live id, so a repeat means the later record wins.
                if self.index.settle(queue, msg_id, seq).is_some() {
                    self.live.remove(queue, msg_id);
                }
                // Cannot fail: the id was just settled if it was live.
                let _ = self.index.enqueue(queue, msg_id, seq);
                self.live.push(
                    queue,
                    RecoveredMessage { msg_id, location, body_bytes: header.body_bytes(), metadata },
                );
            }
            RecordKind::Settle => {
                if self.index.settle(queue, msg_id, seq).is_some() {
                    self.live.remove(queue, msg_id);
                }
            }
            RecordKind::Update => {
                if self.index.update(queue, msg_id, seq).is_some() {
                    self.live.set_metadata(queue, msg_id, metadata);
                }
            }
            RecordKind::Purge => {
                self.index.purge(queue, seq);
                self.live.queues.remove(&queue);
            }
        }
    }
}

/// Live messages per queue in enqueue order, with removal by id: a vector with holes, compacted
/// when the holes outnumber the messages.
#[derive(Default)]
struct LiveSet {
    queues: HashMap<u64, QueueLive, IdBuild>,
}

#[derive(Default)]
struct QueueLive {
    order: Vec<Option<RecoveredMessage>>,
    position: HashMap<u64, usize, IdBuild>,
    holes: usize,
}

impl LiveSet {
    fn push(&mut self, queue: u64, message: RecoveredMessage) {
        let q = self.queues.entry(queue).or_default();
        q.position.insert(message.msg_id, q.order.len());
        q.order.push(Some(message));
    }

    fn remove(&mut self, queue: u64, msg_id: u64) {
        let Some(q) = self.queues.get_mut(&queue) else {
            return;
        };
        if let Some(at) = q.position.remove(&msg_id) {
            q.order[at] = None;
            q.holes += 1;
        }
        if q.position.is_empty() {
            self.queues.remove(&queue);
        } else if q.holes > q.order.len() / 2 {
            q.compact();
        }
    }

    fn set_metadata(&mut self, queue: u64, msg_id: u64, metadata: Bytes) {
        let q = self.queues.get_mut(&queue);
        let at = q.as_ref().and_then(|q| q.position.get(&msg_id).copied());
        if let (Some(q), Some(at)) = (q, at) {
            if let Some(Some(message)) = q.order.get_mut(at) {
                message.metadata = metadata;
            }
        }
    }

    fn into_queues(self) -> BTreeMap<u64, Vec<RecoveredMessage>> {
        self.queues.into_iter().map(|(queue, q)| (queue, q.order.into_iter().flatten().collect())).collect()
    }
}

impl QueueLive {
    fn compact(&mut self) {
        self.order.retain(Option::is_some);
        self.holes = 0;
        for (at, message) in self.order.iter().enumerate() {
            if let Some(message) = message {
                self.position.insert(message.msg_id, at);
            }
        }
    }
}

/// Sequential reads through a buffer of [`RECOVERY_READ_BYTES`].
struct Window<'a> {
    file: &'a dyn StorageFile,
    file_bytes: u64,
    buf: Vec<u8>,
    start: u64,
}

impl<'a> Window<'a> {
    fn new(file: &'a dyn StorageFile, file_bytes: u64) -> Self {
        Self { file, file_bytes, buf: Vec::new(), start: 0 }
    }

    /// `len` bytes at `offset`, or `None` if the file ends first.
    fn bytes(&mut self, offset: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let end = offset.saturating_add(len as u64);
        if end > self.file_bytes {
            return Ok(None);
        }
        if offset < self.start || end > self.start + self.buf.len() as u64 {
            let want = (len.max(RECOVERY_READ_BYTES) as u64).min(self.file_bytes - offset);
            self.buf.resize(want as usize, 0);
            self.file.read_exact_at(offset, &mut self.buf)?;
            self.start = offset;
        }
        let from = (offset - self.start) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }
}

fn io_err(doing: &'static str) -> impl Fn(io::Error) -> OpenError {
    move |source| OpenError::Io { doing, source }
}
