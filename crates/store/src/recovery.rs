//! Recovery: read every segment in sequence order, verify each record's checksum, skip damaged
//! records that valid records follow, cut the torn tail of the last segment, and rebuild the live
//! index. That first pass holds no message: only the index (where each live enqueue record lies),
//! the latest metadata of the live messages that were updated, and each segment's valid length.
//! A second pass (`replay.rs`, [`crate::Store::replay`]) reads the live messages back one at a
//! time in log order, so recovery's peak memory is the running store's, whatever the backlog
//! (issue 23). Each pass runs on two threads: one reads and verifies, the other builds the index
//! (first pass) or restores (second), a few batches apart (issue 38: a restart takes the longer
//! of the two halves, not their sum).
//!
//! Rules (docs/storage.md has the full list):
//! - a bad record that a valid record follows is corruption, in any segment: the bytes up to the
//!   next valid record are skipped and listed in [`RecoveryReport::damaged`] (`recovery/resync.rs`
//!   finds the next valid record), and the segment is never appended to again;
//! - the last segment's tail from a bad record that nothing valid follows is cut (truncate +
//!   sync): those bytes were never covered by a commit, because a segment is synced whole before
//!   the next is created;
//! - a last segment whose header never completed (shorter than a header, or exactly a header that
//!   does not check) is removed: it was created, and the crash came before its header was synced;
//! - a damaged segment header with bytes after it, or damage running to the end of any other
//!   segment, cannot be bounded: handled as [`OnCorruption`] says;
//! - a segment with another format version is refused whatever the policy;
//! - where recovery knows a segment's length at a sync (`claims.rs`: the next segment's header,
//!   or the tail mark), bytes below it were synced: a bad record there is never a torn tail, and
//!   what cannot be read from there to that length — the file cut, or damage to its end — is
//!   synced records lost, counted and listed in [`RecoveryReport::lost`], not refused (its extent
//!   is known).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;

use bytes::Bytes;

use crate::checkpoint::{self, Checkpoint, KnownSegment};
use crate::error::{Defect, OpenError};
use crate::index::{self, LiveIndex};
use crate::limits::RECOVERY_READ_BYTES;
use crate::queue_states::Covered;
use crate::record::{
    check_segment_header, parse_segment_name, segment_name, RecordHeader, RecordKind, SegmentEnd,
    SegmentHeaderDefect, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_SUFFIX,
};
use crate::state_packs::Registry;
use crate::storage::{Storage, StorageFile};
use crate::types::{CheckpointUsed, Damage, Loss, OnCorruption, Recovered, RecoveryReport};
use claims::Claims;
use pipe::{pipe, BatchSender};
pub use replay::{Replay, Replayed};
pub(crate) use replay::{ReplaySegment, Updates};
use resync::AfterDamage;
pub(crate) use window::Window;

mod claims;
mod pipe;
mod replay;
mod resync;
mod window;

/// A segment file found on disk, with the length of its valid prefix.
#[derive(Debug)]
pub(crate) struct OpenSegment {
    pub(crate) file: Box<dyn StorageFile>,
    /// Bytes up to the end of the last valid record; reads beyond are refused.
    pub(crate) valid_bytes: u64,
    /// Recovery skipped damage inside it, or found synced records lost: never append to it (the
    /// next recovery must see the same bytes, and so make the same decisions).
    pub(crate) damaged: bool,
    /// What the next segment's header records of this one: its length and records, or, where
    /// synced records were lost, the length and count it had (so every later recovery reports
    /// the same loss).
    pub(crate) end: SegmentEnd,
}

/// What the store starts from.
pub(crate) struct RecoveredState {
    pub(crate) segments: BTreeMap<u64, OpenSegment>,
    pub(crate) index: LiveIndex,
    pub(crate) recovered: Recovered,
    /// The segment the tail mark on disk names, if it names one.
    pub(crate) tail_mark_names: Option<u64>,
    /// The queue states' kept parts the checkpoint named, read from their packs.
    pub(crate) known_parts: Registry,
}

pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    on_corruption: OnCorruption,
) -> Result<RecoveredState, OpenError> {
    let sequences = list_segments(storage.as_ref())?;
    let mut files = Vec::with_capacity(sequences.len());
    for &seq in &sequences {
        files.push((seq, storage.open(&segment_name(seq)).map_err(io_err("opening a segment"))?));
    }
    let claims = Claims::gather(storage.as_ref(), &files).map_err(io_err("reading segment lengths"))?;
    let (checkpoint, checkpoint_ignored) = match checkpoint::load(storage.as_ref(), &files) {
        checkpoint::Found::None => (None, None),
        checkpoint::Found::Usable(checkpoint) => (Some(checkpoint), None),
        checkpoint::Found::Ignored(why) => (None, Some(why)),
    };
    let plan = &Plan::of(checkpoint.as_ref());
    let (mut indexer, known, known_parts, states_left_out) = match checkpoint {
        Some(checkpoint) => {
            let covered = Covered::new(checkpoint.replay_from, checkpoint.states);
            let indexer = Indexer { index: checkpoint.index, covered, ..Indexer::default() };
            (indexer, checkpoint.known, checkpoint.known_parts, checkpoint.states_left_out)
        }
        None => (Indexer::default(), BTreeMap::new(), Registry::default(), 0),
    };
    let tail_mark_names = claims.tail_mark_names();
    // Reading and verifying on one thread, indexing on this one: the two halves cost about the
    // same (the index's inserts are cache misses in a table of N entries), so a restart takes the
    // longer of the two instead of their sum.
    let (ops, received) = pipe(INDEX_BATCH, INDEX_BATCHES_IN_FLIGHT);
    let verified = std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("hg-recovery-read".to_owned())
            .spawn_scoped(scope, move || {
                let mut scan = Scan {
                    ops,
                    replay_segments: Vec::new(),
                    report: RecoveryReport::default(),
                    on_corruption,
                };
                let segments = scan.all(storage, files, &claims, plan, sequences.last().copied())?;
                // Dropping the sender sends its last batch and ends the indexer's loop.
                Ok::<_, OpenError>((segments, scan.replay_segments, scan.report))
            })
            .map_err(io_err("starting the recovery reader thread"))?;
        for op in received {
            indexer.apply(op);
        }
        match reader.join() {
            Ok(verified) => verified,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    let (segments, replay_segments, mut report) = verified?;
    let Indexer { mut index, updates, mut covered, .. } = indexer;
    report.checkpoint_ignored = checkpoint_ignored;
    if let Some(replay_from) = plan.replay_from {
        // Segments the checkpoint named that compaction deleted after it was written.
        let gone: BTreeSet<u64> = known.keys().copied().filter(|seq| !segments.contains_key(seq)).collect();
        covered.segments_gone(&index, &gone);
        report.checkpoint = Some(CheckpointUsed {
            replay_from,
            segments_skipped: plan.known.len() as u64,
            segments_reread: plan.reread.len() as u64,
            messages_in_deleted_segments: index.forget_segments(&gone),
            states_left_out,
        });
    }
    let (skips, queue_states) = covered.split();
    let replay = Replay::new(replay_segments, updates, skips);
    let recovered = Recovered { queue_messages: index.messages_per_queue(), report, replay, queue_states };
    Ok(RecoveredState { segments, index, recovered, tail_mark_names, known_parts })
}

/// Index operations the reader sends at once.
const INDEX_BATCH: usize = 4096;
/// Batches the reader may be ahead of the indexer (a few MB).
const INDEX_BATCHES_IN_FLIGHT: usize = 8;

/// What the first pass found, in log order, for the live index.
enum IndexOp {
    /// Records from here on lie in segment `seq`.
    Segment(u64),
    /// Records from here on lie in segment `seq`, which the checkpoint holds: updates only.
    UpdatesOf(u64),
    /// A record that verified, at `offset` in the current segment; with its metadata if it is
    /// an update.
    Record { header: RecordHeader, offset: u32, metadata: Option<Bytes> },
    /// Segment `seq` was a torn new segment, removed (it held no record).
    SegmentRemoved(u64),
}

/// Builds the live index and the updates from the verified records, in log order.
#[derive(Default)]
struct Indexer {
    index: LiveIndex,
    /// The latest metadata of live messages that an update record changed.
    updates: Updates,
    segment: u64,
    /// The current segment is one the index started from (a checkpoint's), read again only
    /// for its updates.
    updates_only: bool,
    /// The checkpoint's queue states, and what changed in their queues after it.
    covered: Covered,
}

impl Indexer {
    fn apply(&mut self, op: IndexOp) {
        match op {
            IndexOp::Segment(seq) => {
                (self.segment, self.updates_only) = (seq, false);
                self.index.add_segment(seq);
            }
            IndexOp::UpdatesOf(seq) => (self.segment, self.updates_only) = (seq, true),
            IndexOp::Record { header, offset, metadata } => self.apply_record(&header, offset, metadata),
            IndexOp::SegmentRemoved(seq) => self.index.remove_segment(seq),
        }
    }

    fn apply_record(&mut self, header: &RecordHeader, offset: u32, metadata: Option<Bytes>) {
        let (queue, msg_id, seq) = (header.queue, header.msg_id, self.segment);
        if self.updates_only {
            // The index holds this segment's records already; only an update's metadata is new,
            // if its message is live now in the enqueue it updated (not in a later one).
            let updated = |place: u64| place < index::pack(seq, offset);
            if let Some(metadata) = metadata.filter(|_| header.kind == RecordKind::Update) {
                if self.index.place(queue, msg_id).is_some_and(updated) {
                    self.updates.set(queue, msg_id, metadata);
                }
            }
            return;
        }
        if header.kind == RecordKind::Purge {
            self.covered.purged(queue);
        } else if self.covered.has(queue)
            && self.index.place(queue, msg_id).is_some_and(|place| self.covered.is_before(place))
        {
            // A message the checkpoint knew (an enqueue of such an id replaces it).
            self.covered.changed(queue, msg_id);
        }
        match header.kind {
            RecordKind::Enqueue => {
                // Appends refuse a live id, so a repeat means the later record wins.
                if self.index.enqueue_replacing(queue, msg_id, seq, offset) {
                    self.updates.forget(queue, msg_id);
                }
            }
            RecordKind::Settle => {
                if self.index.settle(queue, msg_id, seq).is_some() {
                    self.updates.forget(queue, msg_id);
                }
            }
            RecordKind::Update => {
                if let (Some(_), Some(metadata)) = (self.index.update(queue, msg_id, seq), metadata) {
                    self.updates.set(queue, msg_id, metadata);
                }
            }
            RecordKind::Purge => {
                self.index.purge(queue, seq);
                self.updates.forget_queue(queue);
            }
        }
    }
}

/// Which segments the first pass reads, with a checkpoint: those from its position on, and
/// those before it that hold updates; the rest are taken as it knew them.
#[derive(Default)]
struct Plan {
    replay_from: Option<u64>,
    known: BTreeMap<u64, KnownSegment>,
    reread: BTreeSet<u64>,
}

impl Plan {
    fn of(checkpoint: Option<&Checkpoint>) -> Self {
        let Some(checkpoint) = checkpoint else {
            return Self::default();
        };
        let (reread, known) = checkpoint
            .known
            .iter()
            .partition::<BTreeMap<_, _>, _>(|(seq, _)| checkpoint.index.holds_updates(**seq));
        Self { replay_from: Some(checkpoint.replay_from), known, reread: reread.into_keys().collect() }
    }
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

/// The first pass's reading and verifying (on the reader thread): what it finds goes to the
/// indexer as [`IndexOp`]s.
struct Scan {
    ops: BatchSender<IndexOp>,
    /// Each kept segment's valid length, for the second pass.
    replay_segments: Vec<ReplaySegment>,
    report: RecoveryReport,
    on_corruption: OnCorruption,
}

/// Where a segment's scan stopped early, and why.
struct Stop {
    offset: u64,
    defect: Defect,
    end: StopKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StopKind {
    /// A torn write from `offset`: past the last segment's synced length, a tail no commit
    /// covered (cut it); below a known synced length, the end of a file cut short (records lost).
    TornTail,
    /// Damage that no valid record follows (or whose extent could not be bounded): policy decides.
    ToEnd,
}

/// A segment's valid length, whether recovery skipped damage inside it (or lost records from
/// it), and what the next segment's header should record of it.
struct Scanned {
    valid_bytes: u64,
    damaged: bool,
    end: SegmentEnd,
}

impl Scan {
    /// Scans every segment in sequence order; returns those kept. A torn new segment is removed.
    fn all(
        &mut self,
        storage: &Arc<dyn Storage>,
        files: Vec<(u64, Box<dyn StorageFile>)>,
        claims: &Claims,
        plan: &Plan,
        last: Option<u64>,
    ) -> Result<BTreeMap<u64, OpenSegment>, OpenError> {
        let mut segments = BTreeMap::new();
        for (seq, file) in files {
            let is_last = Some(seq) == last;
            if let Some(known) = plan.known.get(&seq) {
                let (valid_bytes, end) = (known.valid_bytes, known.end);
                self.replay_segments.push(ReplaySegment { seq, valid_bytes });
                segments.insert(seq, OpenSegment { file, valid_bytes, damaged: false, end });
                continue;
            }
            let start =
                if plan.reread.contains(&seq) { IndexOp::UpdatesOf(seq) } else { IndexOp::Segment(seq) };
            match self.segment(seq, file.as_ref(), is_last, claims.of(seq), start)? {
                Some(Scanned { valid_bytes, damaged, end }) => {
                    self.replay_segments.push(ReplaySegment { seq, valid_bytes });
                    segments.insert(seq, OpenSegment { file, valid_bytes, damaged, end });
                }
                None => {
                    drop(file);
                    self.ops.push(IndexOp::SegmentRemoved(seq));
                    storage.remove(&segment_name(seq)).map_err(io_err("removing a torn segment"))?;
                    self.report.torn_segment_removed = Some(seq);
                }
            }
        }
        if let Some((segment, end)) = claims.missing_last_segment(last) {
            // Named by the tail mark, so synced, and no later segment exists: deleted whole.
            let loss = Loss { segment, offset: 0, bytes_lost: end.bytes, records_lost: end.records };
            self.report.lost.push(loss);
        }
        Ok(segments)
    }

    /// Scans one segment (`synced`: its length and records at a sync, if known); returns its valid
    /// length, or `None` if it is a torn new segment.
    fn segment(
        &mut self,
        seq: u64,
        file: &dyn StorageFile,
        is_last: bool,
        synced: Option<SegmentEnd>,
        start: IndexOp,
    ) -> Result<Option<Scanned>, OpenError> {
        let file_bytes = file.len_bytes().map_err(io_err("sizing a segment"))?;
        let mut window = Window::new(file, file_bytes);
        self.report.segments += 1;
        self.ops.push(start);
        let damage_before = self.report.damaged.len();
        let header = match window.bytes(0, SEGMENT_HEADER_BYTES) {
            Ok(Some(bytes)) => {
                let mut header = [0; SEGMENT_HEADER_BYTES];
                header.copy_from_slice(bytes);
                Some(check_segment_header(&header, seq))
            }
            Ok(None) => None,
            Err(e) => return Err(io_err("reading a segment header")(e)),
        };
        let header_defect = match (header, synced) {
            (Some(Ok(_)), _) => None,
            (Some(Err(SegmentHeaderDefect::UnsupportedVersion(version))), _) => {
                return Err(OpenError::UnsupportedVersion { segment: seq, version })
            }
            // Shorter than a header, yet known to have held synced records: cut, all of it lost.
            (None, Some(synced)) => return Ok(Some(self.lost_whole(seq, synced))),
            // A header that never completed: written but not synced when the machine stopped.
            (None | Some(Err(SegmentHeaderDefect::Damaged)), None)
                if is_last && file_bytes <= SEGMENT_HEADER_BYTES as u64 =>
            {
                return Ok(None)
            }
            (Some(Err(SegmentHeaderDefect::WrongSequence(found))), _) => Some(Defect::WrongSequence(found)),
            _ => Some(Defect::SegmentHeader),
        };
        if let Some(defect) = header_defect {
            // Headers are synced before any record: a bad one with bytes after it is corruption.
            // Under `Skip` the records behind it are still read (they carry their own checksums).
            let header_bytes = (SEGMENT_HEADER_BYTES as u64).min(file_bytes);
            self.refuse_or_skip(seq, 0, header_bytes, defect)?;
        }
        let records_before = self.report.records;
        let stop = self.records(seq, &mut window, is_last, synced)?;
        let (valid_bytes, lost_from) = self.end_of(seq, file, file_bytes, stop, synced)?;
        let records = self.report.records - records_before;
        let end = match (lost_from, synced) {
            (Some(offset), Some(synced)) => {
                let records_lost = synced.records.saturating_sub(records);
                let bytes_lost = synced.bytes - offset;
                self.report.lost.push(Loss { segment: seq, offset, bytes_lost, records_lost });
                synced
            }
            _ => SegmentEnd { bytes: valid_bytes, records },
        };
        let damaged = self.report.damaged.len() > damage_before || lost_from.is_some();
        Ok(Some(Scanned { valid_bytes, damaged, end }))
    }

    /// Where a segment's readable records end, acting on how its scan stopped; and, if synced
    /// records are lost (from that offset to `synced.bytes`), where the loss starts.
    fn end_of(
        &mut self,
        seq: u64,
        file: &dyn StorageFile,
        file_bytes: u64,
        stop: Option<Stop>,
        synced: Option<SegmentEnd>,
    ) -> Result<(u64, Option<u64>), OpenError> {
        let synced_past = |offset: u64| synced.is_some_and(|s| offset < s.bytes);
        let (valid_bytes, lost_from) = match stop {
            None => (file_bytes, None),
            // Below the synced length: records lost, counted (the synced length bounds them),
            // and the file left as it is, so every later recovery reads it as this one did.
            Some(Stop { offset, .. }) if synced_past(offset) => (offset, Some(offset)),
            Some(Stop { offset, end: StopKind::TornTail, .. }) => {
                file.set_len(offset).map_err(io_err("cutting a torn tail"))?;
                file.sync().map_err(io_err("syncing a cut tail"))?;
                self.report.torn_tail_bytes += file_bytes - offset;
                (offset, None)
            }
            Some(Stop { offset, defect, end: StopKind::ToEnd }) => {
                self.refuse_or_skip(seq, offset, file_bytes - offset, defect)?;
                (offset, None)
            }
        };
        // Whole records, then nothing up to the synced length: cut at a record boundary.
        Ok((valid_bytes, lost_from.or_else(|| synced_past(valid_bytes).then_some(valid_bytes))))
    }

    /// A segment known to have held `synced` that is shorter than a header: all of it lost.
    fn lost_whole(&mut self, segment: u64, synced: SegmentEnd) -> Scanned {
        let loss = Loss { segment, offset: 0, bytes_lost: synced.bytes, records_lost: synced.records };
        self.report.lost.push(loss);
        Scanned { valid_bytes: 0, damaged: true, end: synced }
    }

    /// Damage recovery cannot bound: refused by default, skipped and reported under `Skip`.
    fn refuse_or_skip(
        &mut self,
        segment: u64,
        offset: u64,
        bytes_skipped: u64,
        defect: Defect,
    ) -> Result<(), OpenError> {
        match self.on_corruption {
            OnCorruption::Refuse => Err(OpenError::Corrupt { segment, offset, defect }),
            OnCorruption::Skip => {
                self.report.damaged.push(Damage { segment, offset, bytes_skipped, defect });
                Ok(())
            }
        }
    }

    /// Reads records until the end of the file (`None`), skipping (and reporting) damaged stretches
    /// that a valid record follows, or stops at damage nothing valid follows.
    fn records(
        &mut self,
        seq: u64,
        window: &mut Window<'_>,
        is_last: bool,
        synced: Option<SegmentEnd>,
    ) -> Result<Option<Stop>, OpenError> {
        let read_failed = io_err("reading a segment");
        let mut offset = SEGMENT_HEADER_BYTES as u64;
        while offset < window.file_bytes {
            let defect = match check_record(window, offset, Some(RecordKind::Update)).map_err(&read_failed)? {
                Ok(record) => {
                    // In range: check_record refuses records ending past u32::MAX.
                    let (header, metadata) = (record.header, record.metadata);
                    self.ops.push(IndexOp::Record { header, offset: offset as u32, metadata });
                    self.report.records += 1;
                    offset += record.header.record_bytes();
                    continue;
                }
                Err(defect) => defect,
            };
            // Only bytes no sync covered can hold a torn write: past the synced length of the
            // last segment. Below it, the end of a file cut short looks like a torn write, and is
            // read with the same rules (they keep a record inside a cut body from being taken for
            // a real one); the loss is counted when the scan stops (`end_of`).
            let torn_possible = match synced {
                Some(synced) if offset < synced.bytes => window.file_bytes < synced.bytes,
                _ => is_last,
            };
            match resync::after_damage(window, offset, torn_possible).map_err(&read_failed)? {
                AfterDamage::ResumeAt(next) => {
                    let damage = Damage { segment: seq, offset, bytes_skipped: next - offset, defect };
                    self.report.damaged.push(damage);
                    offset = next;
                }
                AfterDamage::TornTail => return Ok(Some(Stop { offset, defect, end: StopKind::TornTail })),
                AfterDamage::ToEnd => return Ok(Some(Stop { offset, defect, end: StopKind::ToEnd })),
            }
        }
        Ok(None)
    }
}

/// A record whose lengths and checksum verified, with its metadata if it is of the kind asked for
/// (the first pass keeps an update's; the second reads an enqueue's).
struct CheckedRecord {
    header: RecordHeader,
    metadata: Option<Bytes>,
}

/// Reads and verifies the record at `offset` (header checks, extent inside the file, CRC32C over
/// header and payload, the body checksummed as a stream), keeping its metadata if it is a
/// `keep_metadata` record; applies nothing.
fn check_record(
    window: &mut Window<'_>,
    offset: u64,
    keep_metadata: Option<RecordKind>,
) -> io::Result<Result<CheckedRecord, Defect>> {
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
    let Some(metadata) = window.bytes(metadata_at, metadata_bytes)? else {
        return Ok(Err(Defect::Truncated));
    };
    crc = crc32c::crc32c_append(crc, metadata);
    let metadata = (Some(header.kind) == keep_metadata).then(|| Bytes::copy_from_slice(metadata));
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
    Ok(Ok(CheckedRecord { header, metadata }))
}

fn io_err(doing: &'static str) -> impl Fn(io::Error) -> OpenError {
    move |source| OpenError::Io { doing, source }
}
