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
    /// What recovery does with a damaged record that is not in the torn tail.
    pub on_corruption: OnCorruption,
}

/// What recovery does with a damaged record in a segment other than the last one.
///
/// A torn tail of the *last* segment is always cut: it holds only writes no commit covered. A bad
/// record anywhere else was synced once, so it is damage to confirmed data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnCorruption {
    /// Refuse to open, naming the segment and offset; the operator decides (the default: losing
    /// confirmed messages, or resurrecting settled ones, silently is worse than not starting).
    #[default]
    Refuse,
    /// Keep the records before the damage, skip the rest of that segment, go on with the next one
    /// and list the damage in [`RecoveryReport::damaged`]. Messages whose enqueue was skipped are
    /// lost; messages whose settle was skipped come back (at-least-once).
    SkipRestOfSegment,
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
    /// Live messages per queue id, in enqueue order. Queues with no live message are absent.
    pub queues: BTreeMap<u64, Vec<RecoveredMessage>>,
    /// What recovery did on the way.
    pub report: RecoveryReport,
}

/// What recovery read, cut and skipped; for the broker's startup log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: u64,
    /// Valid records read.
    pub records: u64,
    /// Bytes cut from the end of the last segment (writes no commit had covered). Large numbers
    /// here, not explained by a crash, deserve a look at the disk.
    pub torn_tail_bytes: u64,
    /// A last segment whose header was never completed, removed.
    pub torn_segment_removed: Option<u64>,
    /// Damage skipped under [`OnCorruption::SkipRestOfSegment`] (always empty with `Refuse`).
    pub damaged: Vec<Damage>,
}

/// A damaged stretch of a segment that recovery skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub segment: u64,
    /// Offset of the first bad byte.
    pub offset: u64,
    /// Bytes skipped (to the end of the segment).
    pub bytes_skipped: u64,
    pub defect: Defect,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { segment_bytes_target: SEGMENT_BYTES_DEFAULT, on_corruption: OnCorruption::Refuse }
    }
}
