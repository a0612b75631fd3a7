//! hourglass-store: Hourglass's durable message log. It knows records and bytes, not AMQP
//! (ARCHITECTURE rule 6): a queue is a `u64` id, a message a `u64` id with an opaque body and a
//! small opaque metadata blob.
//!
//! - [`Store`]: one append-only log of checksummed records per broker (enqueue, settle, update,
//!   purge) in bounded segment files; group commit (`append_*` then one `commit` = one sync);
//!   bodies read back on demand by [`Location`]; compaction deletes segments nothing live needs.
//! - [`Store::open`] recovers: verifies checksums, cuts a torn tail, reports synced records lost
//!   (a segment cut below its known synced length), rebuilds the live index ([`Recovered`]);
//!   [`Store::replay`] then reads the live messages back one at a time, each checked again, each
//!   queue's in enqueue order with their latest metadata.
//! - [`catalog`]: the durable key → value map for definitions and identity (a snapshot plus a log
//!   of changes: one change, one small record).
//! - [`snapshot`]: small atomically replaced files (the catalog's snapshot, older definitions).
//! - [`storage`]: the seam ([`Storage`], [`StorageFile`]) with a real-file backend
//!   ([`FsStorage`]) and an in-memory one ([`MemStorage`]) that crash tests freeze at any sync point.
//!
//! Synchronous, no tokio: the server calls it from a blocking thread. Recovery's two passes
//! each run a second, scoped thread of their own (`recovery/pipe.rs` joins the two). docs/storage.md describes the
//! format and the recovery rules; docs/adr/0005-storage.md says why this design.

pub mod catalog;
mod checkpoint;
mod error;
mod index;
pub mod limits;
mod queue_states;
mod reader;
mod record;
mod recovery;
pub mod snapshot;
mod state_packs;
pub mod storage;
mod store;
mod tail_mark;
mod types;
mod varint;

pub use checkpoint::CHECKPOINT_FILE;
pub use error::{AppendError, CommitError, Defect, OpenError, ReadError};
pub use queue_states::{QueueCheckpoint, RecoveredQueueState, StatePart};
pub use reader::SegmentReader;
pub use record::{HeaderDefect, FORMAT_VERSION};
pub use recovery::{Replay, Replayed};
pub use state_packs::is_write_once;
pub use storage::{Crash, Fault, FsStorage, MemImage, MemStorage, Storage, StorageFile};
pub use store::Store;
pub use types::{
    Appended, CheckpointUsed, Committed, Compacted, Damage, Enqueued, Location, Loss, OnCorruption, Purged,
    RecordSeq, Recovered, RecoveredMessage, RecoveryReport, StoreConfig, StoreStats,
};
