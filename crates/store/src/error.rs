//! One small error enum per operation; each variant names the rule that broke.

use std::io;

use crate::record::{HeaderDefect, FORMAT_VERSION};
use crate::types::Location;

/// What is wrong with bytes read from a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Defect {
    #[error("segment header is damaged (bad magic or checksum)")]
    SegmentHeader,
    #[error("segment header names sequence {0}, not the one in the file name")]
    WrongSequence(u64),
    #[error("record header is invalid: {0}")]
    RecordHeader(HeaderDefect),
    #[error("record runs past the end of the segment")]
    Truncated,
    #[error("record checksum does not match its bytes")]
    Checksum,
    /// Recovery's second pass found a record that verifies but is not the one its first pass
    /// indexed at that offset (another kind, queue or message id): the file changed in between.
    #[error("record is not the one recovery indexed here (the file changed between its passes)")]
    NotTheIndexedRecord,
}

/// Why [`crate::Store::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid store configuration: {0}")]
    Config(&'static str),
    #[error("storage I/O failed while {doing}: {source}")]
    Io {
        doing: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("segment {segment} is corrupt at byte {offset}: {defect}")]
    Corrupt { segment: u64, offset: u64, defect: Defect },
    #[error("segment {segment} has format version {version}; this build reads version {FORMAT_VERSION}")]
    UnsupportedVersion { segment: u64, version: u32 },
    #[error("file {name:?} ends in .seg but is not a valid segment name (20 digits, at most 2^63-1)")]
    StrayFile { name: String },
}

/// Why an append was refused. Nothing was written and no state changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("metadata is {bytes} bytes; the limit is {max}", max = crate::limits::METADATA_BYTES_MAX)]
    MetadataTooLarge { bytes: usize },
    #[error("body is {bytes} bytes; the limit is {max}", max = crate::limits::BODY_BYTES_MAX)]
    BodyTooLarge { bytes: usize },
    #[error("message {msg_id} is already live in queue {queue}")]
    AlreadyLive { queue: u64, msg_id: u64 },
    #[error("message {msg_id} is not live in queue {queue}")]
    NotLive { queue: u64, msg_id: u64 },
    #[error("an earlier sync failed; the store must be reopened (recovery decides what is durable)")]
    Poisoned,
    #[error("the log reached its last segment sequence number; move the data directory aside")]
    SequenceExhausted,
}

/// Why a commit (or the commit inside a compaction) failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A write (or segment creation) failed, e.g. the disk is full. Nothing was lost: the pending
    /// records stay buffered and the next commit writes them again.
    #[error("writing segment {segment} failed (pending records kept; retry): {source}")]
    WriteFailed {
        segment: u64,
        #[source]
        source: io::Error,
    },
    /// A sync failed. After a failed fsync the kernel may have dropped the dirty pages, so what is
    /// on disk is unknown: the store refuses further writes until it is reopened and recovered.
    #[error("syncing segment {segment} failed; the store must be reopened: {source}")]
    SyncFailed {
        segment: u64,
        #[source]
        source: io::Error,
    },
    /// Deleting a dead segment failed; it is retried by the next compaction.
    #[error("removing segment {segment} failed: {source}")]
    RemoveFailed {
        segment: u64,
        #[source]
        source: io::Error,
    },
    #[error("an earlier sync failed; the store must be reopened")]
    Poisoned,
}

/// Why [`crate::Store::read_message`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no record at {location:?}: the segment or range does not exist")]
    NoSuchRecord { location: Location },
    #[error("the record at {location:?} is not an enqueue")]
    NotAnEnqueue { location: Location },
    #[error("the record at {location:?} is corrupt: {defect}")]
    Corrupt { location: Location, defect: Defect },
    #[error("reading {location:?} failed: {source}")]
    Io {
        location: Location,
        #[source]
        source: io::Error,
    },
    /// Recovery's second pass could not start the thread that reads ahead.
    #[error("starting the recovery reader thread failed: {0}")]
    ReaderThread(#[source] io::Error),
}
