//! Recovery's second pass: the live messages read back from the segments one at a time, in log
//! order (so each queue's in enqueue order), with their latest metadata.
//!
//! The first pass verified every record and left behind the live index, which says where each
//! live message's enqueue record lies. This pass takes those offsets per segment, sorted (one
//! walk over the index's tables, 8 B per message: `LiveIndex::live_records`), and reads the
//! record at each in file order (no other record), handing each live message out as it finds it:
//! nothing else is held per message, so recovering 100M waiting messages needs little more memory
//! than running with them (issue 23).
//!
//! It trusts nothing the first pass read (issue 37, finding 9: bytes changed in between moved
//! messages to another queue): each record's checksum is verified again, over its body too (read
//! through the same buffered window, mostly already in it; CRC32C runs at memory speed), and it
//! must be an enqueue of the queue and message id indexed there (`LiveRecord::is`). A record that
//! fails is left out and returned as damage, as the first pass lists damage; the caller reports
//! it and lets the store forget it ([`crate::Store::drop_unreadable`]).
//!
//! A reader thread does the walk (the index's offsets, each segment's sorted as it is reached, the
//! reads and checks) and hands the messages over in batches to the caller's `consume`, which runs
//! on the calling thread: restoring and reading overlap, and at most a few batches wait between.

use std::collections::HashMap;
use std::io;

use bytes::Bytes;

use super::pipe::{pipe, BatchReceiver};
use super::{check_record, Window};
use crate::error::{Defect, ReadError};
use crate::index::{IdBuild, LiveIndex, LiveRecord};
use crate::queue_states::Skips;
use crate::record::{RecordHeader, RecordKind, RECORD_HEADER_BYTES};
use crate::storage::StorageFile;
use crate::types::{Damage, Location, RecoveredMessage};

/// What the second pass needs from the first: hand it to [`crate::Store::replay`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    segments: Vec<ReplaySegment>,
    updates: Updates,
    /// Messages that queue states hold (`queue_states.rs`): not read back.
    skips: Skips,
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
    pub(crate) fn new(segments: Vec<ReplaySegment>, updates: Updates, skips: Skips) -> Self {
        Self { segments, updates, skips }
    }

    /// Reads every live message of `queue` back, those its state holds too: the state could not
    /// be used.
    pub fn read_whole(&mut self, queue: u64) {
        self.skips.forget(queue);
    }

    /// Hands the live messages to `consume` as [`Replayed`] while a second thread reads and
    /// verifies them (its files are `file_of`'s), a few batches ahead: a restart takes the longer
    /// of reading and restoring instead of their sum. Returns what `consume` returned and the
    /// records left out as damaged, in log order; fails only if the thread cannot be started.
    pub(crate) fn run<'a, R>(
        self,
        index: &LiveIndex,
        file_of: impl Fn(u64) -> Option<&'a dyn StorageFile> + Send,
        consume: impl FnOnce(&mut Replayed) -> R,
    ) -> Result<(R, Vec<Damage>), ReadError> {
        std::thread::scope(|scope| {
            let (mut sender, received) = pipe(REPLAY_BATCH, REPLAY_BATCHES_IN_FLIGHT);
            let reader = std::thread::Builder::new()
                .name("hg-recovery-replay".to_owned())
                .spawn_scoped(scope, move || {
                    let mut walk = self.walk(index, file_of);
                    // Until the walk ends or the consumer is gone; the last batch goes with the sender.
                    for item in walk.by_ref() {
                        if !sender.push(item) {
                            break;
                        }
                    }
                    walk.damaged
                })
                .map_err(ReadError::ReaderThread)?;
            let mut replayed = Replayed(received);
            let result = consume(&mut replayed);
            // A reader blocked on a full channel stops once the receiver is gone.
            drop(replayed);
            match reader.join() {
                Ok(damaged) => Ok((result, damaged)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Pairs each segment that holds live messages now with its file and their offsets.
    fn walk<'a>(self, index: &LiveIndex, file_of: impl Fn(u64) -> Option<&'a dyn StorageFile>) -> Walk<'a> {
        let mut records = index.live_records(&self.skips);
        let segments: Vec<_> = self
            .segments
            .into_iter()
            .filter_map(|segment| Some((file_of(segment.seq)?, records.remove(&segment.seq)?, segment)))
            .collect();
        Walk {
            updates: self.updates,
            segments: segments.into_iter(),
            at: None,
            failed: false,
            damaged: Vec::new(),
        }
    }
}

/// Messages the reader hands over at once.
const REPLAY_BATCH: usize = 1024;
/// Batches the reader may be ahead of the consumer (under a megabyte of metadata).
const REPLAY_BATCHES_IN_FLIGHT: usize = 8;

type Item = Result<(u64, RecoveredMessage), ReadError>;

/// The live messages, `(queue, message)` in log order, as [`crate::Store::replay`] hands them
/// out; see the module doc. A record that does not read back as indexed is left out (and listed
/// in the damage `replay` returns); after an I/O error it ends.
pub struct Replayed(BatchReceiver<Item>);

impl std::fmt::Debug for Replayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayed").field("buffered", &self.0.buffered()).finish_non_exhaustive()
    }
}

impl Iterator for Replayed {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        self.0.next()
    }
}

/// The walk over the live records, segment by segment; ends after an I/O error.
struct Walk<'a> {
    updates: Updates,
    segments: std::vec::IntoIter<(&'a dyn StorageFile, Vec<LiveRecord>, ReplaySegment)>,
    at: Option<Cursor<'a>>,
    failed: bool,
    /// The live records left out so far because they did not read back as the first pass indexed
    /// them (the file changed between the passes), in log order: messages lost. Each names where
    /// the record starts, its length as its header now claims (as far as it fits the segment),
    /// and what was wrong.
    damaged: Vec<Damage>,
}

impl Iterator for Walk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
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
            match cursor.next_live(&mut self.updates, &mut self.damaged) {
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
    records: std::vec::IntoIter<LiveRecord>,
}

impl<'a> Cursor<'a> {
    fn new(file: &'a dyn StorageFile, mut records: Vec<LiveRecord>, segment: ReplaySegment) -> Self {
        // Sorted here, on the reader thread, segment by segment: in file order.
        records.sort_unstable();
        // Past the valid length: appended since the open, not recovered.
        records.truncate(records.partition_point(|r| u64::from(r.offset()) < segment.valid_bytes));
        let window = Window::new(file, segment.valid_bytes);
        Self { window, seq: segment.seq, records: records.into_iter() }
    }

    /// The next live enqueue in this segment that reads back as indexed, or `None` at its end;
    /// those that do not go to `damaged`.
    fn next_live(
        &mut self,
        updates: &mut Updates,
        damaged: &mut Vec<Damage>,
    ) -> Result<Option<(u64, RecoveredMessage)>, ReadError> {
        for indexed in self.records.by_ref() {
            match read_indexed(&mut self.window, self.seq, indexed)? {
                Ok((header, metadata)) => {
                    let location = Location {
                        segment: self.seq,
                        offset: indexed.offset(),
                        // Fits: check_record refuses records ending past u32::MAX.
                        record_bytes: header.record_bytes() as u32,
                    };
                    let metadata = updates.take(header.queue, header.msg_id).unwrap_or(metadata);
                    let body_bytes = header.body_bytes();
                    let message = RecoveredMessage { msg_id: header.msg_id, location, body_bytes, metadata };
                    return Ok(Some((header.queue, message)));
                }
                Err(defect) => {
                    let offset = u64::from(indexed.offset());
                    let bytes_skipped = claimed_bytes(&mut self.window, offset);
                    damaged.push(Damage { segment: self.seq, offset, bytes_skipped, defect });
                }
            }
        }
        Ok(None)
    }
}

/// The record at `indexed`, verified: its checksum, and that it is the enqueue indexed there.
/// The inner error is the defect of a record that does not read back so (left out); the outer one
/// an I/O error (the pass fails).
fn read_indexed(
    window: &mut Window<'_>,
    seq: u64,
    indexed: LiveRecord,
) -> Result<Result<(RecordHeader, Bytes), Defect>, ReadError> {
    let offset = u64::from(indexed.offset());
    let checked = match check_record(window, offset, Some(RecordKind::Enqueue)) {
        Ok(checked) => checked,
        // The file is shorter than the first pass found it.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Err(Defect::Truncated)),
        Err(source) => {
            let location = Location { segment: seq, offset: indexed.offset(), record_bytes: 0 };
            return Err(ReadError::Io { location, source });
        }
    };
    Ok(match checked {
        Ok(record) => match record.metadata {
            // Kept only for an enqueue: `Some` says the kind is right.
            Some(metadata) if indexed.is(record.header.queue, record.header.msg_id) => {
                Ok((record.header, metadata))
            }
            _ => Err(Defect::NotTheIndexedRecord),
        },
        Err(defect) => Err(defect),
    })
}

/// The length the header at `offset` claims, as far as it fits the segment (the header alone if
/// it does not decode): how much a left-out record covers.
fn claimed_bytes(window: &mut Window<'_>, offset: u64) -> u64 {
    let room = window.file_bytes.saturating_sub(offset);
    let claimed = match window.bytes(offset, RECORD_HEADER_BYTES) {
        Ok(Some(bytes)) => {
            let mut header = [0; RECORD_HEADER_BYTES];
            header.copy_from_slice(bytes);
            RecordHeader::decode(&header).map_or(RECORD_HEADER_BYTES as u64, |h| h.record_bytes())
        }
        _ => RECORD_HEADER_BYTES as u64,
    };
    claimed.min(room)
}
