//! Every limit of the store, each a named constant with the reason for its value.

/// Default size a segment grows to before the log rotates to a new one. Every segment stays open,
/// so 64 MiB keeps a 100 GiB backlog near 1,600 descriptors, while a segment is still small enough
/// to be freed soon after its messages are settled (RabbitMQ's message store rolls at 16 MiB).
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// Smallest segment target accepted: a header and a small record. Tests use tiny segments to
/// exercise rotation and compaction on every few records.
pub const SEGMENT_BYTES_MIN: u64 = 128;

/// Largest segment target accepted. Record offsets are stored as `u32`: the target plus one
/// largest record ([`BODY_BYTES_MAX`]) must stay below 4 GiB.
pub const SEGMENT_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Largest body (properties + content, opaque to the store) one record holds: RabbitMQ's hard
/// ceiling for `max_message_size` (512 MiB); a RabbitMQ-compatible broker refuses anything larger.
pub const BODY_BYTES_MAX: usize = 512 * 1024 * 1024;

/// Largest metadata blob (deadlines, delivery counts). It is rewritten by every update record and
/// copied into memory for every live message at recovery, so it must stay small; a few deadlines
/// and counters take tens of bytes. Also bounded by its `u16` length field.
pub const METADATA_BYTES_MAX: usize = 4096;

/// Bytes read per I/O call while scanning segments at recovery: large enough that a scan of small
/// records is not syscall-bound, small enough that recovery memory stays flat whatever the
/// record sizes (bodies are checksummed as a stream, never held whole).
pub const RECOVERY_READ_BYTES: usize = 1024 * 1024;

/// Bytes one forward scan for the next valid record after damage may checksum (recovery,
/// `recovery/resync.rs`). Random damage rarely even decodes as a record header, so a scan
/// normally checksums almost nothing; a client can, however, fill a body with look-alike headers
/// that each claim a long record, and without a bound each would be checksummed to its end
/// (quadratic in the segment). 1 GiB is about a second of CRC32C and page-cache reads; past it the
/// damage is treated as running to the end of the segment (refused, or skipped by the operator).
pub const RESYNC_CHECKSUM_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Capacity the write buffer keeps between commits. After a commit of a huge batch (or a huge
/// message) the buffer shrinks back to this, so one 512 MiB message does not pin 512 MiB forever.
pub const WRITE_BUFFER_RETAIN_BYTES: usize = 8 * 1024 * 1024;

/// Largest snapshot payload (durable definitions) read back. The whole snapshot is read into
/// memory; a million bindings encode to well under this.
pub const SNAPSHOT_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Most a checkpoint (`checkpoint.rs`) writes (its file and its pack), and most its queue
/// states take wherever written (ADRs 0019, 0020); also the largest checkpoint file read back.
/// The states are read into memory at a restart, and their kept parts become the queues'
/// rosters, which the running broker held anyway: 1 GiB holds the states of about 180M delayed
/// messages.
pub const CHECKPOINT_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// The catalog's log is folded into a new snapshot once it passes this size (and the snapshot's):
/// small enough that recovery replays little, large enough that a catalog of a few definitions is
/// not rewritten every few changes.
pub const CATALOG_COMPACT_MIN_BYTES: u64 = 1024 * 1024;

/// Largest catalog record (one definition with its key). A definition comes from one AMQP method
/// or one HTTP request, each far smaller; anything larger is refused rather than written.
pub const CATALOG_RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;

const _: () = assert!(METADATA_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(SEGMENT_BYTES_MAX + BODY_BYTES_MAX as u64 + 4096 < u32::MAX as u64);
