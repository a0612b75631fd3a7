//! The store: appends go into a write buffer, `commit` writes them and syncs once per touched
//! segment (group commit), `read_message` reads a body back by location, `compact` deletes
//! segments nothing live depends on.
//!
//! ```text
//!  append_* ──► pending chunks (one per segment, normally one) ──commit──► write + sync ──► durable
//!     │ (rotates when the tail segment is full: the next chunk goes to segment + 1)
//!     └──► live index (queue, msg_id → segment; per-segment pins)  ──compact──► remove dead files
//! ```
//!
//! Appends do no I/O and cannot fail on I/O; the live index moves at append time, so a settle is
//! visible at once, and compaction commits before it deletes anything, so every settle that made
//! a segment dead is on disk before the segment goes.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::Arc;

use bytes::Bytes;

use crate::checkpoint::{Checkpoints, KnownSegment};
use crate::error::{AppendError, CommitError, Defect, OpenError, ReadError};
use crate::index::LiveIndex;
use crate::limits::{
    BODY_BYTES_MAX, METADATA_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, WRITE_BUFFER_RETAIN_BYTES,
};
use crate::queue_states::QueueCheckpoint;
use crate::record::{
    encode_record, encode_segment_header, segment_name, RecordHeader, RecordKind, SegmentEnd,
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_SEQUENCE_MAX,
};
use crate::recovery::{recover, Replay, Replayed};
use crate::storage::{Storage, StorageFile};
use crate::tail_mark::TailMark;
use crate::types::{
    Appended, Committed, Compacted, Damage, Enqueued, Location, Purged, RecordSeq, Recovered,
    RecoveredMessage, StoreConfig, StoreStats,
};

/// A per-broker append-only message log. Synchronous: call it from one blocking thread.
#[derive(Debug)]
pub struct Store {
    storage: Arc<dyn Storage>,
    config: StoreConfig,
    /// Segment files on disk, by sequence.
    segments: BTreeMap<u64, Segment>,
    index: LiveIndex,
    /// Where the next record goes (the segment file may not exist until the next commit).
    tail: Tail,
    /// Records appended and not yet written, one chunk per segment, oldest first.
    pending: VecDeque<Chunk>,
    /// A cleared write buffer kept for the next chunk (no allocation per commit).
    spare: Vec<u8>,
    last_appended: u64,
    durable_through: u64,
    /// A sync failed: nothing more is written until the store is reopened.
    poisoned: bool,
    /// The handles of the readers this store made (`reader`), closed as segments are deleted.
    reader_handles: crate::reader::OpenSegments,
    /// The last segment's synced length, for recovery to tell a torn tail from lost records.
    tail_mark: TailMark,
    /// The live index as of a rotation, written for restarts (`checkpoint.rs`).
    checkpoints: Checkpoints,
}

#[derive(Debug)]
struct Segment {
    file: Box<dyn StorageFile>,
    /// Bytes written and synced (or found valid at recovery): readable.
    durable_bytes: u64,
    /// What the next segment's header records of this one (docs/storage.md "Segment format"):
    /// its synced length and records, or what it held before records were lost from it.
    end: SegmentEnd,
}

#[derive(Debug, Clone, Copy)]
struct Tail {
    segment: u64,
    end: u64,
}

#[derive(Debug)]
struct Chunk {
    segment: u64,
    /// File offset of `bytes[0]`.
    start: u64,
    bytes: Vec<u8>,
    records: u64,
    last_seq: u64,
}

impl Store {
    /// Opens (or creates) the log in `storage`, recovering what is there.
    pub fn open(storage: Arc<dyn Storage>, config: StoreConfig) -> Result<(Self, Recovered), OpenError> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&config.segment_bytes_target) {
            return Err(OpenError::Config(
                "segment_bytes_target is outside SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX",
            ));
        }
        let state = recover(&storage, config.on_corruption)?;
        let header_bytes = SEGMENT_HEADER_BYTES as u64;
        let tail = match state.segments.iter().next_back() {
            Some((&segment, s)) if s.valid_bytes >= header_bytes && !s.damaged => {
                Tail { segment, end: s.valid_bytes }
            }
            // A last segment with damage left in it: start a fresh one after it, so the damaged
            // one never changes and every later recovery reads it as this one did.
            Some((&segment, _)) => Tail { segment: segment + 1, end: header_bytes },
            None => {
                Tail { segment: state.recovered.report.torn_segment_removed.unwrap_or(1), end: header_bytes }
            }
        };
        let segments = state
            .segments
            .into_iter()
            .map(|(seq, s)| {
                let segment = Segment { file: s.file, durable_bytes: s.valid_bytes, end: s.end };
                (seq, segment)
            })
            .collect();
        let tail_mark = TailMark::open(&storage, state.tail_mark_names);
        let store = Self {
            storage,
            config,
            segments,
            index: state.index,
            tail,
            pending: VecDeque::new(),
            spare: Vec::new(),
            last_appended: 0,
            durable_through: 0,
            poisoned: false,
            reader_handles: Default::default(),
            tail_mark,
            checkpoints: Checkpoints::new(state.known_parts),
        };
        Ok((store, state.recovered))
    }

    /// Appends: `msg_id` entered `queue` with `metadata` (deadlines, counts) and `body`
    /// (properties + content, opaque). Durable after the next commit; readable at once.
    pub fn append_enqueue(
        &mut self,
        queue: u64,
        msg_id: u64,
        metadata: &[u8],
        body: &[u8],
    ) -> Result<Enqueued, AppendError> {
        self.check_writable()?;
        check_metadata(metadata)?;
        if body.len() > BODY_BYTES_MAX {
            return Err(AppendError::BodyTooLarge { bytes: body.len() });
        }
        if self.index.contains(queue, msg_id) {
            return Err(AppendError::AlreadyLive { queue, msg_id });
        }
        let (seq, location) = self.push(RecordKind::Enqueue, queue, msg_id, metadata, body);
        // Cannot fail: the id was checked not to be live just above.
        let _ = self.index.enqueue(queue, msg_id, location.segment, location.offset);
        Ok(Enqueued { seq, location })
    }

    /// Appends: `msg_id` left `queue` (acked, expired, moved). Durable after the next commit.
    pub fn append_settle(&mut self, queue: u64, msg_id: u64) -> Result<Appended, AppendError> {
        self.check_live(queue, msg_id)?;
        let (seq, location) = self.push(RecordKind::Settle, queue, msg_id, &[], &[]);
        self.index.settle(queue, msg_id, location.segment);
        Ok(Appended { seq })
    }

    /// Appends: `msg_id`'s metadata in `queue` is now `metadata`. Durable after the next commit.
    pub fn append_update(
        &mut self,
        queue: u64,
        msg_id: u64,
        metadata: &[u8],
    ) -> Result<Appended, AppendError> {
        check_metadata(metadata)?;
        self.check_live(queue, msg_id)?;
        let (seq, location) = self.push(RecordKind::Update, queue, msg_id, metadata, &[]);
        self.index.update(queue, msg_id, location.segment);
        Ok(Appended { seq })
    }

    /// Appends: every live message of `queue` left it (queue.purge, queue.delete).
    pub fn append_purge(&mut self, queue: u64) -> Result<Purged, AppendError> {
        self.check_writable()?;
        let (seq, location) = self.push(RecordKind::Purge, queue, 0, &[], &[]);
        let messages = self.index.purge(queue, location.segment);
        Ok(Purged { seq, messages })
    }

    /// From now on, checkpoints (`checkpoint.rs`) are taken only at [`Store::checkpoint_with`],
    /// with the queues' states, and no longer at rotations on the store's own account: a
    /// checkpoint without the states would void the last one's.
    pub fn take_checkpoints_on_request(&mut self) {
        self.checkpoints.on_request_only();
    }

    /// Checkpoints written from now on take at most `bytes_max` bytes; queue states that do not
    /// fit are left out (their queues are read back from the log at a restart). A cluster
    /// replicates the checkpoint as one file that every follower writes and syncs before it
    /// answers again, so there it is kept small (`docs/storage.md`).
    pub fn limit_checkpoint_bytes(&mut self, bytes_max: u64) {
        self.checkpoints.limit_bytes(bytes_max);
    }

    /// Takes a checkpoint here, in the log order of appends, with `states` (ADR 0019), if one is
    /// due: the log rotates into a new segment, and the checkpoint is written, with the states
    /// that agree with the live index, by the commit that creates it. Returns whether it was
    /// taken.
    pub fn checkpoint_with(&mut self, states: Vec<QueueCheckpoint>) -> bool {
        if !self.checkpoints.is_due() {
            return false;
        }
        if self.tail.end > SEGMENT_HEADER_BYTES as u64 || self.segments.contains_key(&self.tail.segment) {
            self.rotate(Some(states));
        } else {
            // A tail segment that holds no record yet, and is not on disk, is where the
            // checkpoint starts: the index describes exactly the records before it, and the next
            // commit that has records for it creates it.
            self.checkpoints.on_rotation(self.tail.segment, &self.index, Some(states));
        }
        true
    }

    /// Starts the next segment: the index describes exactly the records before it now, the
    /// moment for a checkpoint (with `requested` states: asked for, `Store::checkpoint_with`).
    fn rotate(&mut self, requested: Option<Vec<QueueCheckpoint>>) {
        self.tail = Tail { segment: self.tail.segment + 1, end: SEGMENT_HEADER_BYTES as u64 };
        self.checkpoints.on_rotation(self.tail.segment, &self.index, requested);
        self.index.add_segment(self.tail.segment);
    }

    /// Writes every pending record and syncs once per segment they touch (once, unless the batch
    /// crossed a segment boundary). On return every record up to `durable_through` is durable:
    /// release the publisher confirms waiting on them. With nothing pending, no I/O is done.
    pub fn commit(&mut self) -> Result<Committed, CommitError> {
        if self.poisoned {
            return Err(CommitError::Poisoned);
        }
        let (mut records, mut bytes) = (0, 0);
        while let Some(segment) = self.pending.front().map(|c| c.segment) {
            if !self.segments.contains_key(&segment) {
                self.create_segment(segment)?;
                // Every segment before it is durable now (their chunks came first).
                let known = self
                    .segments
                    .iter()
                    .map(|(seq, s)| (*seq, KnownSegment { valid_bytes: s.durable_bytes, end: s.end }));
                self.checkpoints.on_created(segment, self.storage.as_ref(), known);
            }
            self.flush_front()?;
            if let Some(chunk) = self.pending.pop_front() {
                records += chunk.records;
                bytes += chunk.bytes.len() as u64;
                self.durable_through = chunk.last_seq;
                self.recycle(chunk.bytes);
            }
        }
        Ok(Committed { durable_through: RecordSeq(self.durable_through), records, bytes })
    }

    /// Commits, then deletes every segment that holds no live message and whose settle and
    /// update records refer to no segment still on disk (see `index.rs`). The segment being
    /// appended to is never deleted.
    pub fn compact(&mut self) -> Result<Compacted, CommitError> {
        let committed = self.commit()?;
        let mut out = Compacted { durable_through: committed.durable_through, ..Compacted::default() };
        loop {
            let dead = self.index.dead_segments(Some(self.tail.segment));
            if dead.is_empty() {
                return Ok(out);
            }
            for seq in dead {
                self.tail_mark.forget(seq);
                // Close the handle first: some systems refuse to delete an open file.
                let segment = self.segments.remove(&seq);
                crate::SegmentReader::forget(&self.reader_handles, seq);
                match self.storage.remove(&segment_name(seq)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound && segment.is_none() => {}
                    Err(source) => {
                        if let Some(segment) = segment {
                            self.segments.insert(seq, segment);
                        }
                        return Err(CommitError::RemoveFailed { segment: seq, source });
                    }
                }
                self.index.remove_segment(seq);
                out.segments_removed += 1;
                out.bytes_reclaimed += segment.map_or(0, |s| s.durable_bytes);
            }
        }
    }

    /// The body (properties + content) of the enqueue record at `location`, checksum verified.
    /// Works for records not yet committed too (served from the write buffer).
    pub fn read_message(&self, location: Location) -> Result<Bytes, ReadError> {
        let record_bytes = location.record_bytes as usize;
        if record_bytes < RECORD_HEADER_BYTES {
            return Err(ReadError::NoSuchRecord { location });
        }
        let start = u64::from(location.offset);
        let end = start + record_bytes as u64;
        let on_disk = self
            .segments
            .get(&location.segment)
            .filter(|s| start >= SEGMENT_HEADER_BYTES as u64 && end <= s.durable_bytes);
        let buf = if let Some(segment) = on_disk {
            let mut buf = vec![0; record_bytes];
            segment
                .file
                .read_exact_at(start, &mut buf)
                .map_err(|source| ReadError::Io { location, source })?;
            buf
        } else {
            self.pending_bytes_at(location).ok_or(ReadError::NoSuchRecord { location })?.to_vec()
        };
        let body_at = check_enqueue(&buf, location)?;
        Ok(Bytes::from(buf).slice(body_at..))
    }

    /// Recovery's second pass (`recovery/replay.rs`): hands `consume` the messages live now that
    /// [`Store::open`] recovered, `(queue, message)` in log order, so each queue's in enqueue
    /// order, with their latest metadata. One at a time: nothing is held per message; a second
    /// thread reads them a few batches ahead of `consume`. Call it before appending (what is
    /// settled meanwhile is left out; what is enqueued meanwhile is not recovered). Each record is
    /// checked again; one that changed since [`Store::open`] read it is left out and returned as
    /// damage, with what `consume` returned: pass that to [`Store::drop_unreadable`]. Fails only
    /// if the reading thread cannot be started.
    pub fn replay<R>(
        &self,
        replay: Replay,
        consume: impl FnOnce(&mut Replayed) -> R,
    ) -> Result<(R, Vec<Damage>), ReadError> {
        replay.run(&self.index, |seq| self.segments.get(&seq).map(|s| s.file.as_ref()), consume)
    }

    /// Forgets the live messages whose enqueue record the second pass could not read back
    /// (the damage [`Store::replay`] returned), as if the first pass had found the damage: they are lost, no
    /// longer counted, and pin no segment. Returns how many were live. Call it after the replay,
    /// before appending.
    pub fn drop_unreadable(&mut self, damaged: &[Damage]) -> u64 {
        let at = damaged.iter().filter_map(|d| Some((d.segment, u32::try_from(d.offset).ok()?))).collect();
        self.index.forget_records(&at)
    }

    /// [`Store::replay`] collected per queue: for tests and tools, never for a large log.
    pub fn recovered_queues(
        &self,
        replay: Replay,
    ) -> Result<BTreeMap<u64, Vec<RecoveredMessage>>, ReadError> {
        let (queues, _) = self.replay(replay, |replayed| {
            let mut queues: BTreeMap<u64, Vec<RecoveredMessage>> = BTreeMap::new();
            for found in replayed {
                let (queue, message) = found?;
                queues.entry(queue).or_default().push(message);
            }
            Ok(queues)
        })?;
        queues
    }

    /// A reader of durable records with its own file handles, for another thread; the handles
    /// of segments this store deletes are closed.
    pub fn reader(&self) -> crate::SegmentReader {
        crate::SegmentReader::sharing(self.storage.clone(), self.reader_handles.clone())
    }

    /// Whether `msg_id` is live (enqueued, not settled) in `queue`.
    pub fn is_live(&self, queue: u64, msg_id: u64) -> bool {
        self.index.contains(queue, msg_id)
    }

    /// Live messages of `queue`.
    pub fn queue_messages(&self, queue: u64) -> u64 {
        self.index.queue_messages(queue)
    }

    /// The last record made durable by a commit.
    pub fn durable_through(&self) -> RecordSeq {
        RecordSeq(self.durable_through)
    }

    /// Bytes appended and not yet committed (the server commits early past its own bound).
    pub fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|c| c.bytes.len() as u64).sum()
    }

    /// Live messages in the log (what a recovery would bring back).
    pub fn live_messages(&self) -> u64 {
        self.index.live_messages()
    }

    /// Counters for metrics and tests.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            segments: self.segments.len() as u64,
            disk_bytes: self.segments.values().map(|s| s.durable_bytes).sum(),
            live_messages: self.index.live_messages(),
            pending_records: self.pending.iter().map(|c| c.records).sum(),
            pending_bytes: self.pending_bytes(),
            durable_through: RecordSeq(self.durable_through),
            last_appended: RecordSeq(self.last_appended),
            checkpoints_written: self.checkpoints.written,
            checkpoints_failed: self.checkpoints.failed,
        }
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Encodes one record into the tail chunk; rotates first if the tail segment is full.
    fn push(
        &mut self,
        kind: RecordKind,
        queue: u64,
        msg_id: u64,
        metadata: &[u8],
        body: &[u8],
    ) -> (RecordSeq, Location) {
        let record_bytes = (RECORD_HEADER_BYTES + metadata.len() + body.len()) as u64;
        let header_bytes = SEGMENT_HEADER_BYTES as u64;
        // A segment holds at least one record, however large.
        if self.tail.end > header_bytes && self.tail.end + record_bytes > self.config.segment_bytes_target {
            self.rotate(None);
        }
        self.checkpoints.appended(record_bytes);
        let Tail { segment, end } = self.tail;
        if self.pending.back().is_none_or(|c| c.segment != segment) {
            let bytes = std::mem::take(&mut self.spare);
            self.pending.push_back(Chunk { segment, start: end, bytes, records: 0, last_seq: 0 });
        }
        self.last_appended += 1;
        if let Some(chunk) = self.pending.back_mut() {
            encode_record(&mut chunk.bytes, kind, queue, msg_id, metadata, body);
            chunk.records += 1;
            chunk.last_seq = self.last_appended;
        }
        self.tail.end += record_bytes;
        // Fits: the tail is at most SEGMENT_BYTES_MAX before a record of at most
        // BODY_BYTES_MAX + METADATA_BYTES_MAX + header, below u32::MAX (checked in limits.rs).
        let location = Location { segment, offset: end as u32, record_bytes: record_bytes as u32 };
        (RecordSeq(self.last_appended), location)
    }

    /// Creates segment `seq` with its header, synced before any record is written to it, so a
    /// damaged header with records after it can only be corruption (see recovery).
    fn create_segment(&mut self, seq: u64) -> Result<(), CommitError> {
        let name = segment_name(seq);
        let write_failed = |source| CommitError::WriteFailed { segment: seq, source };
        let file = match self.storage.create(&name) {
            Ok(file) => file,
            // Left by an earlier attempt that failed after creating the file; never holds records.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.storage.open(&name).map_err(write_failed)?
            }
            Err(e) => return Err(write_failed(e)),
        };
        // The previous segment was synced whole (its chunks come first): its length now is what
        // recovery holds it to, whatever later happens to the file.
        let previous = seq.checked_sub(1).and_then(|p| self.segments.get(&p)).map(|p| p.end);
        file.write_all_at(0, &encode_segment_header(seq, previous))
            .and_then(|()| file.set_len(SEGMENT_HEADER_BYTES as u64))
            .map_err(write_failed)?;
        if let Err(source) = file.sync() {
            self.poisoned = true;
            return Err(CommitError::SyncFailed { segment: seq, source });
        }
        let durable_bytes = SEGMENT_HEADER_BYTES as u64;
        let end = SegmentEnd { bytes: durable_bytes, records: 0 };
        self.segments.insert(seq, Segment { file, durable_bytes, end });
        self.index.add_segment(seq);
        Ok(())
    }

    /// Writes and syncs the oldest pending chunk (its segment exists).
    fn flush_front(&mut self) -> Result<(), CommitError> {
        let Some(chunk) = self.pending.front() else {
            return Ok(());
        };
        let Some(segment) = self.segments.get_mut(&chunk.segment) else {
            return Ok(());
        };
        let seq = chunk.segment;
        segment
            .file
            .write_all_at(chunk.start, &chunk.bytes)
            .map_err(|source| CommitError::WriteFailed { segment: seq, source })?;
        if let Err(source) = segment.file.sync() {
            self.poisoned = true;
            return Err(CommitError::SyncFailed { segment: seq, source });
        }
        segment.durable_bytes = chunk.start + chunk.bytes.len() as u64;
        segment.end =
            SegmentEnd { bytes: segment.durable_bytes, records: segment.end.records + chunk.records };
        // After the sync, never before: the mark may lag the segment, never lead it.
        self.tail_mark.write(seq, segment.end);
        Ok(())
    }

    fn recycle(&mut self, mut bytes: Vec<u8>) {
        bytes.clear();
        bytes.shrink_to(WRITE_BUFFER_RETAIN_BYTES);
        if bytes.capacity() > self.spare.capacity() {
            self.spare = bytes;
        }
    }

    fn pending_bytes_at(&self, location: Location) -> Option<&[u8]> {
        let chunk = self.pending.iter().find(|c| c.segment == location.segment)?;
        let from = usize::try_from(u64::from(location.offset).checked_sub(chunk.start)?).ok()?;
        chunk.bytes.get(from..from + location.record_bytes as usize)
    }

    fn check_writable(&self) -> Result<(), AppendError> {
        if self.poisoned {
            return Err(AppendError::Poisoned);
        }
        if self.tail.segment >= SEGMENT_SEQUENCE_MAX {
            return Err(AppendError::SequenceExhausted);
        }
        Ok(())
    }

    fn check_live(&self, queue: u64, msg_id: u64) -> Result<(), AppendError> {
        self.check_writable()?;
        if !self.index.contains(queue, msg_id) {
            return Err(AppendError::NotLive { queue, msg_id });
        }
        Ok(())
    }
}

fn check_metadata(metadata: &[u8]) -> Result<(), AppendError> {
    if metadata.len() > METADATA_BYTES_MAX {
        return Err(AppendError::MetadataTooLarge { bytes: metadata.len() });
    }
    Ok(())
}

/// Checks a whole record read back for `location`; returns where its body starts.
pub(crate) fn check_enqueue(buf: &[u8], location: Location) -> Result<usize, ReadError> {
    let corrupt = |defect| ReadError::Corrupt { location, defect };
    let mut header_bytes = [0; RECORD_HEADER_BYTES];
    header_bytes.copy_from_slice(&buf[..RECORD_HEADER_BYTES]);
    let header = RecordHeader::decode(&header_bytes).map_err(|d| corrupt(Defect::RecordHeader(d)))?;
    if header.record_bytes() != buf.len() as u64 {
        return Err(corrupt(Defect::Truncated));
    }
    if crc32c::crc32c(&buf[4..]) != header.crc {
        return Err(corrupt(Defect::Checksum));
    }
    if header.kind != RecordKind::Enqueue {
        return Err(ReadError::NotAnEnqueue { location });
    }
    Ok(RECORD_HEADER_BYTES + usize::from(header.metadata_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    /// The live index packs a segment sequence in 32 bits: a log whose last segment has the last
    /// sequence opens (its messages are read) and refuses appends with a clear error.
    #[test]
    fn appends_stop_at_the_last_segment_sequence() {
        let storage = MemStorage::new();
        let file = storage.create(&segment_name(SEGMENT_SEQUENCE_MAX)).unwrap();
        file.write_all_at(0, &encode_segment_header(SEGMENT_SEQUENCE_MAX, None)).unwrap();
        file.sync().unwrap();
        drop(file);
        let (mut store, recovered) = Store::open(Arc::new(storage), StoreConfig::default()).unwrap();
        assert!(recovered.queue_messages.is_empty());
        assert!(matches!(store.append_enqueue(1, 1, b"", b"x"), Err(AppendError::SequenceExhausted)));
        assert!(matches!(store.append_purge(1), Err(AppendError::SequenceExhausted)));
    }
}
