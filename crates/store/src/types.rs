//! The values the broker holds and passes back: configuration, record sequence numbers, message
//! locations, and what recovery returns.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Defect;
use crate::limits::SEGMENT_BYTES_DEFAULT;

/// How the store is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Size a segment grows to before the log rotates (a single larger record still fits whole).
    /// Between [`crate::limits::SEGMENT_BYTES_MIN`] and [`crate::limits::SEGMENT_BYTES_MAX`].
    pub segment_bytes_target: u64,
    /// What recovery does with damage it cannot bound (see [`OnCorruption`]).
    pub on_corruption: OnCorruption,
}

/// What recovery does with damage it cannot bound.
///
/// Damage that valid records follow is always skipped and listed in [`RecoveryReport::damaged`]:
/// those records are readable, and refusing would only make an operator restart with `Skip` to
/// get the same result. The last segment's torn tail (a bad record that nothing valid follows,
/// past its known synced length) is always cut: it holds only writes no commit covered. Synced
/// records gone from a segment whose synced length and record count are known are counted in
/// [`RecoveryReport::lost`], never refused: their extent is known. What remains is damage recovery
/// cannot bound: a bad segment header with bytes after it, or damage that runs to the end of a
/// segment synced whole whose length is unknown (written by an earlier build, or its next
/// segment compacted away). That is confirmed data gone without a trace of where it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnCorruption {
    /// Refuse to open, naming the segment and offset; the operator decides (the default: losing
    /// confirmed messages, or resurrecting settled ones, without an operator's say is worse than
    /// not starting).
    #[default]
    Refuse,
    /// Skip it too (a damaged segment header: the records behind it are still read; damage to the
    /// end: the rest of that segment), list it in [`RecoveryReport::damaged`] and go on. Messages
    /// whose enqueue was skipped are lost; messages whose settle was skipped come back
    /// (at-least-once). The server's `--recover-skip-corrupt`.
    Skip,
}

/// The sequence number of an appended record, increasing by one per record from 1 in each
/// [`crate::Store`] instance. A commit makes every record up to a sequence number durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordSeq(pub u64);

/// Where an enqueue record lies: enough to read its body back. 16 bytes, `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Sequence number of the segment file.
    pub segment: u64,
    /// Offset of the record's first byte in the segment.
    pub offset: u32,
    /// The whole record: header, metadata and body.
    pub record_bytes: u32,
}

/// What one append returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Durable once a commit returns a `durable_through` at or past it.
    pub seq: RecordSeq,
}

/// What an enqueue append returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// Durable once a commit returns a `durable_through` at or past it.
    pub seq: RecordSeq,
    /// Where the body can be read back ([`crate::Store::read_message`]), even before the commit.
    pub location: Location,
}

/// What a purge append returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Purged {
    /// Durable once a commit returns a `durable_through` at or past it.
    pub seq: RecordSeq,
    /// Live messages the purge settled.
    pub messages: u64,
}

/// What a commit made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Every record with a sequence number up to this one is on disk (synced).
    pub durable_through: RecordSeq,
    /// Records this commit wrote (0 if nothing was pending: no sync was done).
    pub records: u64,
    /// Bytes this commit wrote.
    pub bytes: u64,
}

/// What a compaction reclaimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Segment files deleted.
    pub segments_removed: u64,
    /// Their total size.
    pub bytes_reclaimed: u64,
    /// Every record up to this one is durable (compaction commits pending records first).
    pub durable_through: RecordSeq,
}

/// A counter snapshot for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Segment files on disk.
    pub segments: u64,
    /// Their total durable size.
    pub disk_bytes: u64,
    /// Messages enqueued and not settled (committed or not).
    pub live_messages: u64,
    /// Records appended and not yet committed.
    pub pending_records: u64,
    /// Their bytes (the write buffer the server may want to bound by committing).
    pub pending_bytes: u64,
    /// The last durable record.
    pub durable_through: RecordSeq,
    /// The last appended record.
    pub last_appended: RecordSeq,
    /// Checkpoints of the live index written since the store was opened (ADR 0018).
    pub checkpoints_written: u64,
    /// Checkpoints that could not be written (the previous one stays in use).
    pub checkpoints_failed: u64,
}

/// One message recovered from disk, live in its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredMessage {
    pub msg_id: u64,
    /// Where its body is; read it with [`crate::Store::read_message`].
    pub location: Location,
    /// Body bytes (properties + content, as appended), for queue byte counts.
    pub body_bytes: u32,
    /// The metadata of its enqueue, or of its latest update.
    pub metadata: Bytes,
}

/// Everything recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// How many live messages each queue id has. Queues with no live message are absent.
    pub queue_messages: BTreeMap<u64, u64>,
    /// What recovery did on the way.
    pub report: RecoveryReport,
    /// The messages themselves are read back by [`crate::Store::replay`] with this, one at a
    /// time (recovery holds none of them).
    pub replay: crate::Replay,
    /// The queue states the checkpoint it started from held ([`crate::Store::checkpoint_with`]),
    /// by queue: the messages they hold are not read back by the replay.
    pub queue_states: Vec<crate::RecoveredQueueState>,
}

/// What recovery read, cut and skipped; for the broker's startup log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: u64,
    /// Valid records read.
    pub records: u64,
    /// Bytes cut from the end of the last segment (writes no commit had covered: past its synced
    /// length where that is known, see [`RecoveryReport::lost`]). Large numbers here, not
    /// explained by a crash, deserve a look at the disk.
    pub torn_tail_bytes: u64,
    /// A last segment whose header was never completed, removed.
    pub torn_segment_removed: Option<u64>,
    /// Damaged stretches skipped, in log order: corruption, never a crash's doing. Each means
    /// records lost (an enqueue: a message; a settle: a message back). Unbounded damage appears
    /// here only under [`OnCorruption::Skip`].
    pub damaged: Vec<Damage>,
    /// The checkpoint this recovery started from (ADR 0018), if it used one.
    pub checkpoint: Option<CheckpointUsed>,
    /// A checkpoint found and not used, and why: the whole log was read instead.
    pub checkpoint_ignored: Option<String>,
    /// Synced records gone from the end of a segment, in log order: the segment is shorter than
    /// (or unreadable before the end of) the length it had at a sync the store can prove
    /// (docs/storage.md "Recovery rules"). Never a crash's doing: a crash only tears what no sync
    /// covered. Each lost enqueue is a confirmed message lost; a lost settle, a message back.
    pub lost: Vec<Loss>,
}

/// How much of the log a checkpoint spared recovery's first pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointUsed {
    /// The log was read from the start of this segment on.
    pub replay_from: u64,
    /// Segments before it taken as the checkpoint knew them, not read.
    pub segments_skipped: u64,
    /// Segments before it read again for their update records.
    pub segments_reread: u64,
    /// Live messages of the checkpoint whose segment compaction had deleted since.
    pub messages_in_deleted_segments: u64,
    /// Queue states it held that were left out because a part of theirs did not read back
    /// from its pack (ADR 0020): their queues were read back from the log.
    pub states_left_out: u64,
}

impl RecoveryReport {
    /// Total bytes skipped as damaged.
    pub fn damaged_bytes(&self) -> u64 {
        self.damaged.iter().map(|d| d.bytes_skipped).sum()
    }

    /// Total synced records lost ([`RecoveryReport::lost`]).
    pub fn lost_records(&self) -> u64 {
        self.lost.iter().map(|l| l.records_lost).sum()
    }

    /// Total synced bytes lost.
    pub fn lost_bytes(&self) -> u64 {
        self.lost.iter().map(|l| l.bytes_lost).sum()
    }
}

/// Synced records that recovery cannot read back from the end of a segment: the file was cut
/// below the length it had at its last known sync, or it is unreadable from `offset` to there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    pub segment: u64,
    /// Where the segment's readable records end: the first byte lost.
    pub offset: u64,
    /// Synced bytes from `offset` to the segment's length at its last known sync.
    pub bytes_lost: u64,
    /// Records the segment held at that sync that recovery did not read: those lost here, and any
    /// in stretches of the same segment skipped as damaged.
    pub records_lost: u64,
}

/// A damaged stretch of a segment that recovery skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub segment: u64,
    /// Offset of the first bad byte: where the record that failed its checks starts.
    pub offset: u64,
    /// Bytes skipped: to the next valid record, or to the end of the segment.
    pub bytes_skipped: u64,
    pub defect: Defect,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { segment_bytes_target: SEGMENT_BYTES_DEFAULT, on_corruption: OnCorruption::Refuse }
    }
}
