//! The data directory and the store thread (issue 6, docs/storage.md).
//!
//! - [`DataDir::open`] creates the directory, takes its lock file (one broker per directory),
//!   opens the message log (`messages/`, recovering it) and the catalog of definitions
//!   (`catalog_file.rs`; a catalog that does not read stops the start with one line naming it and
//!   the way out, [`DamagedDefinitions`]).
//! - [`recover`] hands both to `Broker::restore`: messages come back as store locations, read
//!   when needed through a [`StoreSource`] (ADR 0007). No stored message is dropped: the broker
//!   recreates the queues its definitions lack (issue 12, docs/security.md).
//! - [`spawn_store_thread`]: one plain thread owns the `Store` and the `Catalog`. It takes every
//!   batch of broker ops waiting, appends them (a `Catalog` op to the catalog), commits the
//!   catalog, then the log (one fsync each covers the whole batch: group commit, no timer), then
//!   reports the last op_seq durable back to the broker task, which releases the confirms and
//!   declare-oks waiting on it.
//! - [`apply_batch`] is that step on its own, so crash tests drive it over `MemStorage`.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use hourglass_broker::{
    Broker, CatalogChange, DefinitionNotStored, Definitions, MessageSource, QueueState, RecordLocation,
    RestoreReport, SequencedOp, StatePart, StoreOp, StoredBody, StoredLocation, StoredMessage, Timestamp,
};
use hourglass_store::catalog::{Catalog, CatalogError};
use hourglass_store::{
    CommitError, Damage, FsStorage, Location, OnCorruption, OpenError, QueueCheckpoint, ReadError, Recovered,
    RecoveredQueueState, Replay, SegmentReader, Storage, Store, StoreConfig,
};
use tokio::sync::mpsc;

use crate::broker_task::BrokerInput;
use crate::catalog_file::{apply_change, commit_catalog, lock_catalog, open_catalog};
pub use crate::catalog_file::{CatalogHistory, DamagedDefinitions};
use crate::failure_log::{FailureLog, LogLine, REPEAT_INTERVAL};
use hourglass_mgmt::StoreDamage;

/// The message log's directory inside the data directory.
pub const MESSAGES_DIR: &str = "messages";
/// The data directory's subdirectory of spill files (far-future delayed messages, ADR 0013).
pub const SPILL_DIR: &str = "delays";
/// Held (locked) while a broker uses the data directory.
pub const LOCK_FILE: &str = "hourglass.lock";
/// Settled messages after which the store thread compacts: often enough that disk use follows
/// the backlog, rarely enough that the directory scan costs nothing measurable.
const COMPACT_AFTER_SETTLES: u64 = 50_000;
/// Wait before retrying a commit that failed to write (e.g. disk full): nothing is lost meanwhile,
/// the records stay buffered and their confirms wait.
const WRITE_RETRY: Duration = Duration::from_millis(500);

/// The most a checkpoint may write in a cluster (its file and its pack of new rosters, ADR
/// 0020), where files are replicated and each follower writes and syncs them before it
/// acknowledges anything after them (ADR 0019). Measured: a
/// 53 MB checkpoint (10M delayed messages) kept three nodes in step; with checkpoints of a few
/// hundred MB (near 60M) the leader stopped hearing from both followers and stepped down.
pub const REPLICATED_CHECKPOINT_BYTES_MAX: u64 = 64 << 20;

/// An open data directory: the lock, the message log, the catalog and the directory's storage.
pub struct DataDir {
    /// Where it is (named in start-up errors).
    pub dir: std::path::PathBuf,
    pub store: Store,
    /// Shared by the store thread (the broker's definitions) and the user store's saver.
    pub catalog: Arc<Mutex<Catalog>>,
    /// Whether a catalog was here before this start (only a first start makes default users).
    pub catalog_history: CatalogHistory,
    /// The data directory itself (the catalog's files; an older `users.snap`).
    pub definitions: Arc<dyn Storage>,
    /// Recovered at open; taken by [`recover`].
    recovered: Option<Recovered>,
    /// Decoded from the catalog at open; taken by [`recover`].
    stored_definitions: Option<Definitions>,
    damage: StoreDamage,
    /// Live messages in the message log, kept by the store thread after each commit: what a
    /// restart would recover (the memory alarm's restart need, `alarm::restart_memory`).
    pub stored_messages: Arc<std::sync::atomic::AtomicU64>,
    /// Where queues keep far-future delayed messages (ADR 0013): emptied at open.
    spill: Arc<crate::spill_files::SpillDir>,
    _lock: File,
}

/// Wraps the data directory's storages (the top directory as `""`, the message log as
/// `"messages/"`): clustered mode replicates every change through it (hourglass_cluster).
pub type StorageWrapper = Arc<dyn Fn(Arc<dyn Storage>, &'static str) -> Arc<dyn Storage> + Send + Sync>;

impl DataDir {
    /// Creates `dir` if missing, locks it, recovers the message log (damage recovery cannot
    /// bound is refused unless `on_corruption` is `Skip`, `--recover-skip-corrupt`) and opens the
    /// catalog (`damaged`: what to do when it does not read). `wrap`, when given, wraps both
    /// storages first (clustered mode). `now` names what is set aside.
    pub fn open(
        dir: &Path,
        on_corruption: OnCorruption,
        damaged: DamagedDefinitions,
        wrap: Option<&StorageWrapper>,
        now: Timestamp,
    ) -> anyhow::Result<DataDir> {
        let lock = lock_data_dir(dir)?;
        let messages_dir = dir.join(MESSAGES_DIR);
        let mut messages: Arc<dyn Storage> =
            Arc::new(FsStorage::open(&messages_dir).context("opening the message log directory")?);
        let mut definitions: Arc<dyn Storage> =
            Arc::new(FsStorage::open(dir).context("opening the data directory")?);
        if let Some(wrap) = wrap {
            messages = wrap(messages, "messages/");
            definitions = wrap(definitions, "");
        }
        let config = StoreConfig { on_corruption, ..StoreConfig::default() };
        let (mut store, recovered) = match Store::open(messages, config) {
            Ok(opened) => opened,
            Err(e @ OpenError::Corrupt { .. }) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "recovering the message log in {}: refusing to start; to skip the damaged bytes \
                     (the messages in them are lost) start once with --recover-skip-corrupt",
                    messages_dir.display()
                )))
            }
            Err(e) => return Err(anyhow::Error::new(e).context("recovering the message log")),
        };
        // The broker offers checkpoints with its queues' states (ADR 0019).
        store.take_checkpoints_on_request();
        if wrap.is_some() {
            // Replicated: every follower writes and syncs the file before it answers again.
            store.limit_checkpoint_bytes(REPLICATED_CHECKPOINT_BYTES_MAX);
        }
        log_recovery(&messages_dir, &recovered);
        let opened = open_catalog(definitions.clone(), damaged, now.as_millis())
            .with_context(|| format!("data dir {}", dir.display()))?;
        let spill_dir = dir.join(SPILL_DIR);
        let spill = crate::spill_files::SpillDir::open(&spill_dir).map_err(|e| {
            anyhow::anyhow!("cannot empty the spill directory {}: {}", spill_dir.display(), io_reason(&e))
        })?;
        let stored_messages = Arc::new(std::sync::atomic::AtomicU64::new(store.live_messages()));
        let report = &recovered.report;
        let damage = StoreDamage {
            regions: report.damaged.len() as u64,
            bytes: report.damaged_bytes(),
            lost_records: report.lost_records(),
            lost_bytes: report.lost_bytes(),
        };
        Ok(DataDir {
            dir: dir.to_owned(),
            store,
            catalog: Arc::new(Mutex::new(opened.catalog)),
            catalog_history: opened.history,
            definitions,
            recovered: Some(recovered),
            stored_definitions: Some(opened.definitions),
            damage,
            stored_messages,
            spill: Arc::new(spill),
            _lock: lock,
        })
    }

    /// What recovery skipped as damaged, or found lost (stays the same while the broker runs).
    pub fn damage(&self) -> StoreDamage {
        self.damage
    }
}

/// Creates `dir` if missing and takes its lock file (one broker per directory); the lock lasts
/// as long as the returned file.
pub fn lock_data_dir(dir: &Path) -> anyhow::Result<File> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {}", dir.display(), io_reason(&e)))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| anyhow::anyhow!("cannot write to data dir {}: {}", dir.display(), io_reason(&e)))?;
    lock.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => {
            anyhow::anyhow!(
                "data dir {} is locked by another process (another broker uses it)",
                dir.display()
            )
        }
        std::fs::TryLockError::Error(e) => {
            anyhow::anyhow!("cannot lock data dir {}: {}", dir.display(), io_reason(&e))
        }
    })?;
    Ok(lock)
}

/// One line for the recovery; one ERROR per damaged stretch and per loss of synced records
/// (never quiet: each means confirmed messages lost or settled ones back), naming the file,
/// offset and size.
fn log_recovery(messages_dir: &Path, recovered: &Recovered) {
    let report = &recovered.report;
    for damage in &report.damaged {
        log_damage(messages_dir, damage, "");
    }
    for lost in &report.lost {
        tracing::error!(
            file = %messages_dir.join(segment_file_name(lost.segment)).display(),
            offset = lost.offset,
            bytes_lost = lost.bytes_lost,
            records_lost = lost.records_lost,
            "message log lost records it had synced: the segment ends (or cannot be read) before the \
             length it had at its last sync, so this is damage to the file (cut, or overwritten), not \
             a crash's torn tail; messages enqueued in those records are lost, messages settled there \
             come back"
        );
    }
    if let Some(why) = &report.checkpoint_ignored {
        tracing::warn!(
            file = %messages_dir.join(hourglass_store::CHECKPOINT_FILE).display(),
            reason = %why,
            "the message log's checkpoint is not used: the whole log is read (it is written again \
             at the log's next rotation)"
        );
    }
    let checkpoint = report.checkpoint.as_ref();
    tracing::info!(
        from_checkpoint = checkpoint.is_some(),
        segments_skipped = checkpoint.map_or(0, |c| c.segments_skipped),
        queue_states = recovered.queue_states.len(),
        segments = report.segments,
        records = report.records,
        torn_tail_bytes = report.torn_tail_bytes,
        damaged_regions = report.damaged.len(),
        damaged_bytes = report.damaged_bytes(),
        lost_records = report.lost_records(),
        lost_bytes = report.lost_bytes(),
        queues = recovered.queue_messages.len(),
        messages = recovered.queue_messages.values().sum::<u64>(),
        "message log recovered"
    );
}

/// One damaged stretch at ERROR; `when` says which pass found it.
fn log_damage(messages_dir: &Path, damage: &Damage, when: &str) {
    tracing::error!(
        file = %messages_dir.join(segment_file_name(damage.segment)).display(),
        offset = damage.offset,
        bytes_skipped = damage.bytes_skipped,
        defect = %damage.defect,
        "message log is damaged{when}: skipped bytes no valid record could be read from; messages \
         enqueued there are lost, messages settled there come back"
    );
}

/// A segment's file name (the store's naming: 20 digits, `.seg`), for log lines.
fn segment_file_name(segment: u64) -> String {
    format!("{segment:020}.seg")
}

/// Restores `broker` from the data directory: definitions, then every recovered message. A live
/// record that no longer reads back as the first pass found it is logged and counted as damage,
/// and left out. Fails only if a segment cannot be read again (an I/O error).
pub fn recover(data: &mut DataDir, broker: &mut Broker, now: Timestamp) -> Result<RestoreReport, ReadError> {
    let recovered = data.recovered.take().unwrap_or_default();
    let definitions = data.stored_definitions.take().unwrap_or_default();
    broker.set_spill_files(data.spill.clone());
    let restored = restore_into(broker, &mut data.store, definitions, recovered, now)?;
    for damage in &restored.damaged {
        log_damage(&data.dir.join(MESSAGES_DIR), damage, " (found reading the live messages back)");
    }
    data.damage.regions += restored.damaged.len() as u64;
    data.damage.bytes += restored.damaged.iter().map(|d| d.bytes_skipped).sum::<u64>();
    data.stored_messages.store(data.store.live_messages(), std::sync::atomic::Ordering::Relaxed);
    Ok(restored.report)
}

/// What [`restore_into`] did.
#[derive(Debug)]
pub struct Restored {
    pub report: RestoreReport,
    /// Live records the second pass left out (the log changed after the first pass read it): not
    /// restored, and forgotten by the store.
    pub damaged: Vec<Damage>,
}

/// The broker's [`MessageSource`]: reads records from the segment files with handles of its own
/// (positioned reads, safe beside the store thread's appends; ADR 0007).
#[derive(Debug)]
pub struct StoreSource(SegmentReader);

impl StoreSource {
    /// Reads records through `reader` ([`Store::reader`]).
    pub fn new(reader: SegmentReader) -> Self {
        StoreSource(reader)
    }
}

impl MessageSource for StoreSource {
    fn read(&self, at: RecordLocation) -> Result<Bytes, String> {
        self.0.read_message(store_location(at)).map_err(|e| e.to_string())
    }

    fn read_many(&self, at: &[RecordLocation]) -> Vec<Result<Bytes, String>> {
        let locations: Vec<Location> = at.iter().copied().map(store_location).collect();
        self.0.read_messages(&locations).into_iter().map(|read| read.map_err(|e| e.to_string())).collect()
    }
}

fn store_location(at: RecordLocation) -> Location {
    Location { segment: at.segment, offset: at.offset, record_bytes: at.record_bytes }
}

/// Restores `broker` from a recovered log and the stored `definitions`. Messages come back as
/// locations (their metadata carries what the queue needs), read one at a time by the store's
/// second recovery pass and handed straight to the broker: no copy of the recovered set is ever
/// held (recovery's peak memory, issue 23). The broker reads a record through the
/// [`StoreSource`] attached here when it needs the message. A record that does not read back as
/// the first pass indexed it is left out, and the store forgets it ([`Restored::damaged`]).
pub fn restore_into(
    broker: &mut Broker,
    store: &mut Store,
    definitions: Definitions,
    recovered: Recovered,
    now: Timestamp,
) -> Result<Restored, ReadError> {
    broker.set_message_source(Arc::new(StoreSource::new(store.reader())));
    let Recovered { queue_messages, replay, queue_states, .. } = recovered;
    let mut report = broker.restore_definitions(definitions, &queue_messages, now);
    let replay = restore_queue_states(broker, &mut report, replay, queue_states);
    let (restored, damaged) = store.replay(replay, |replayed| {
        let mut failed = None;
        let messages = replayed.map_while(|found| match found {
            Ok((queue, m)) => {
                let Location { segment, offset, record_bytes } = m.location;
                let at = RecordLocation { segment, offset, record_bytes };
                Some((
                    queue,
                    StoredMessage { msg_id: m.msg_id, metadata: m.metadata, body: StoredBody::At(at) },
                ))
            }
            Err(error) => {
                failed = Some(error);
                None
            }
        });
        let report = broker.restore_messages(report, &queue_messages, messages, now);
        failed.map_or(Ok(report), Err)
    })?;
    let report = restored?;
    store.drop_unreadable(&damaged);
    tracing::info!(
        exchanges = report.exchanges,
        queues = report.queues,
        bindings = report.bindings,
        ready = report.ready,
        delayed = report.delayed,
        delayed_from_checkpoint = report.delayed_from_checkpoint,
        ready_from_checkpoint = report.ready_from_checkpoint,
        overdue = report.overdue,
        policies = report.policies,
        orphaned_queues = report.orphaned.len(),
        undecodable = report.undecodable,
        refused_queues = report.refused_queues,
        "broker restored"
    );
    Ok(Restored { report, damaged })
}

/// Gives `broker` the queue states the checkpoint held (ADR 0019, ADR 0021). A state the broker cannot
/// use is logged, and its queue read back from the log whole instead. Returns the replay that
/// reads the rest.
fn restore_queue_states(
    broker: &mut Broker,
    report: &mut RestoreReport,
    mut replay: Replay,
    states: Vec<RecoveredQueueState>,
) -> Replay {
    for RecoveredQueueState { queue, parts, changed } in states {
        if !broker.restore_queue_state(report, queue, parts, &changed) {
            tracing::warn!(
                queue_id = queue,
                "a queue's state in the checkpoint cannot be used; its messages are read from the log"
            );
            replay.read_whole(queue);
        }
    }
    replay
}

/// An OS error in a few words, without "(os error 13)".
fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::NotADirectory => "a path component is not a directory".to_owned(),
        std::io::ErrorKind::ReadOnlyFilesystem => "read-only file system".to_owned(),
        std::io::ErrorKind::StorageFull => "no space left on device".to_owned(),
        _ => error.to_string(),
    }
}

/// Why a batch could not be made durable.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Writing failed (disk full...): the records stay buffered; retry `commit`. `refused`:
    /// the batch's definition changes the catalog refused before the write.
    #[error("{error}")]
    WriteFailed { error: CommitError, refused: Vec<DefinitionNotStored> },
    /// Unknown state on disk: restart and recover.
    #[error("{0}")]
    Fatal(String),
}

/// What one batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Every op up to this is durable.
    pub durable_op_seq: u64,
    pub settles: u64,
    /// Bytes the commit wrote to the log.
    pub bytes_written: u64,
    /// Where the enqueue records of the batch were written (for paging, ADR 0007).
    pub stored: Vec<StoredLocation>,
    /// Definition changes the catalog refused (they live in memory only): reported to the
    /// broker, so the API job that made one answers 500 instead of 2xx.
    pub refused: Vec<DefinitionNotStored>,
}

/// Applies `ops` (in op_seq order): catalog changes to the catalog, the rest to the log; then
/// commits the catalog and the log, once each. The catalog goes first: a message is never on
/// disk in a queue whose definition is not. The catalog (shared with the user store) is locked
/// from the batch's first change to its commit only, not through the log's commit.
pub fn apply_batch(
    store: &mut Store,
    catalog: &Mutex<Catalog>,
    ops: &[SequencedOp],
) -> Result<BatchOutcome, BatchError> {
    let mut locked: Option<MutexGuard<'_, Catalog>> = None;
    let gone = settled_within(ops);
    let mut outcome = BatchOutcome::default();
    for sequenced in ops {
        if let Some(key) = message_key(&sequenced.op) {
            if gone.contains(&key) {
                // Entered and left within this batch: nothing about it needs to reach the disk.
                outcome.durable_op_seq = sequenced.op_seq;
                continue;
            }
        }
        let appended = match &sequenced.op {
            StoreOp::Enqueue { queue, msg_id, metadata, record } => {
                store.append_enqueue(*queue, *msg_id, metadata, record).map(|enqueued| {
                    let Location { segment, offset, record_bytes } = enqueued.location;
                    let location = RecordLocation { segment, offset, record_bytes };
                    outcome.stored.push(StoredLocation { queue: *queue, msg_id: *msg_id, location });
                })
            }
            StoreOp::Settle { queue, msg_id } => {
                outcome.settles += 1;
                store.append_settle(*queue, *msg_id).map(|_| ())
            }
            StoreOp::Update { queue, msg_id, metadata } => {
                store.append_update(*queue, *msg_id, metadata).map(|_| ())
            }
            StoreOp::Purge { queue } => store.append_purge(*queue).map(|_| ()),
            StoreOp::Checkpoint(states) => {
                store.checkpoint_with(states.iter().map(queue_checkpoint).collect());
                Ok(())
            }
            StoreOp::Catalog(change) => {
                let catalog = locked.get_or_insert_with(|| lock_catalog(catalog));
                if let Some(refusal) = apply_catalog_change(catalog, change, sequenced.op_seq)? {
                    outcome.refused.push(refusal);
                }
                Ok(())
            }
        };
        if let Err(error) = appended {
            // Only a record over the store's limits fails here (the frame limit keeps bodies far
            // below); the message stays in memory but will not survive a restart.
            tracing::error!(op_seq = sequenced.op_seq, %error, "store refused a record");
        }
        outcome.durable_op_seq = sequenced.op_seq;
    }
    if let Some(mut catalog) = locked {
        commit_catalog(&mut catalog).map_err(|e| BatchError::Fatal(format!("writing definitions: {e}")))?;
    }
    match store.commit() {
        Ok(committed) => Ok(BatchOutcome { bytes_written: committed.bytes, ..outcome }),
        Err(error @ CommitError::WriteFailed { .. }) => {
            Err(BatchError::WriteFailed { error, refused: outcome.refused })
        }
        Err(e) => Err(BatchError::Fatal(e.to_string())),
    }
}

/// One definition change into the catalog. A definition over the catalog's record limit is
/// refused and logged (it lives in memory only), like a message over the store's limits, and
/// returned so the broker tells the API job that made it (the limits on what a definition holds,
/// `hourglass_broker::table_limits`, keep this from happening).
fn apply_catalog_change(
    catalog: &mut Catalog,
    change: &CatalogChange,
    op_seq: u64,
) -> Result<Option<DefinitionNotStored>, BatchError> {
    match apply_change(catalog, change) {
        Ok(()) => Ok(None),
        Err(error @ CatalogError::TooLarge { .. }) => {
            tracing::error!(%error, "catalog refused a definition: it will not survive a restart");
            Ok(Some(DefinitionNotStored { op_seq, reason: error.to_string() }))
        }
        Err(error) => Err(BatchError::Fatal(format!("writing definitions: {error}"))),
    }
}

/// The (queue, message) an op is about, for the ops about one message in one queue.
fn message_key(op: &StoreOp) -> Option<(u64, u64)> {
    match op {
        StoreOp::Enqueue { queue, msg_id, .. }
        | StoreOp::Settle { queue, msg_id }
        | StoreOp::Update { queue, msg_id, .. } => Some((*queue, *msg_id)),
        StoreOp::Purge { .. } | StoreOp::Catalog(_) | StoreOp::Checkpoint(_) => None,
    }
}

/// A broker's queue state as the store takes it with a checkpoint.
fn queue_checkpoint(state: &QueueState) -> QueueCheckpoint {
    QueueCheckpoint {
        queue: state.queue,
        covers: state.covers,
        read_back: state.read_back.clone(),
        parts: state.parts.iter().map(store_part).collect(),
    }
}

/// A part of a queue's state as the store takes it: a kept part stays kept (written once).
fn store_part(part: &StatePart) -> hourglass_store::StatePart {
    match part {
        StatePart::Inline(bytes) => hourglass_store::StatePart::Inline(bytes.clone()),
        StatePart::Kept(bytes) => hourglass_store::StatePart::Kept(bytes.clone()),
    }
}

/// Messages enqueued and settled within `ops` (a consumer took and acked them before the batch
/// reached the disk, the usual case with a consumer keeping up): their enqueue, updates and
/// settle are all skipped, so such a message costs no write and no fsync — RabbitMQ's classic
/// queues do the same for messages acked before they are written. Their confirms still wait for
/// the batch's commit, so a confirm never comes before the fsync covering what was written.
fn settled_within(ops: &[SequencedOp]) -> std::collections::HashSet<(u64, u64)> {
    let mut enqueued = std::collections::HashSet::new();
    let mut gone = std::collections::HashSet::new();
    for sequenced in ops {
        match &sequenced.op {
            StoreOp::Enqueue { queue, msg_id, .. } => {
                enqueued.insert((*queue, *msg_id));
            }
            StoreOp::Settle { queue, msg_id } if enqueued.contains(&(*queue, *msg_id)) => {
                gone.insert((*queue, *msg_id));
            }
            _ => {}
        }
    }
    gone
}

/// Starts the store thread: it owns `data` and runs until `ops` closes.
pub fn spawn_store_thread(
    mut data: DataDir,
    ops: std::sync::mpsc::Receiver<Vec<SequencedOp>>,
    persisted: mpsc::WeakSender<BrokerInput>,
    die_after: Option<std::time::Duration>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("hourglass-store".to_owned()).spawn(move || {
        let mut settles_since_compaction = 0u64;
        let die_at = die_after.map(|after| std::time::Instant::now() + after);
        while let Some(mut batch) = next_batch(&ops, die_at) {
            // Group commit: everything that arrived while the last sync ran goes in this one.
            while let Ok(more) = ops.try_recv() {
                batch.extend(more);
            }
            let outcome = commit_with_retry(&mut data, &batch);
            data.stored_messages.store(data.store.live_messages(), std::sync::atomic::Ordering::Relaxed);
            settles_since_compaction += outcome.settles;
            let Some(broker) = persisted.upgrade() else { break };
            let persisted = BrokerInput::Persisted {
                op_seq: outcome.durable_op_seq,
                stored: outcome.stored,
                refused: outcome.refused,
            };
            if broker.blocking_send(persisted).is_err() {
                break;
            }
            if settles_since_compaction >= COMPACT_AFTER_SETTLES {
                settles_since_compaction = 0;
                match data.store.compact() {
                    Ok(c) => tracing::debug!(segments_removed = c.segments_removed, "store compacted"),
                    Err(error) => tracing::warn!(%error, "store compaction failed"),
                }
            }
        }
    })
}

/// The next batch of ops; `None` once the broker task is gone. Test only: with `die_at` set
/// (`supervise::InjectedDeath`), the thread panics at that instant.
fn next_batch(
    ops: &std::sync::mpsc::Receiver<Vec<SequencedOp>>,
    die_at: Option<std::time::Instant>,
) -> Option<Vec<SequencedOp>> {
    let Some(at) = die_at else { return ops.recv().ok() };
    match ops.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
        Ok(batch) => Some(batch),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            crate::supervise::die_injected(crate::supervise::Part::StoreThread)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
    }
}

/// Applies a batch; a failed write is retried until it succeeds (the records stay buffered,
/// their confirms wait). A failed sync leaves the disk in an unknown state: the process exits so
/// that recovery at the next start decides what is durable (docs/storage.md).
///
/// A disk that stays full is logged once when writes start failing, then once a minute with the
/// count of failures, and once when a write succeeds again (not at every retry).
fn commit_with_retry(data: &mut DataDir, batch: &[SequencedOp]) -> BatchOutcome {
    let mut result = apply_batch(&mut data.store, &data.catalog, batch);
    let mut failures = FailureLog::new(REPEAT_INTERVAL);
    loop {
        match result {
            Ok(outcome) => {
                if let Some(line) = failures.on_success(std::time::Instant::now()) {
                    log_write_failure(line, None);
                }
                return outcome;
            }
            Err(BatchError::WriteFailed { error, refused }) => {
                if let Some(line) = failures.on_failure(std::time::Instant::now()) {
                    log_write_failure(line, Some(&error));
                }
                std::thread::sleep(WRITE_RETRY);
                let refused_before = refused.clone();
                result = data
                    .store
                    .commit()
                    // The locations of the first attempt are lost: those messages stay in memory.
                    .map(|committed| BatchOutcome {
                        stored: Vec::new(),
                        durable_op_seq: batch.last().map_or(0, |o| o.op_seq),
                        bytes_written: committed.bytes,
                        settles: batch.iter().filter(|o| matches!(o.op, StoreOp::Settle { .. })).count()
                            as u64,
                        refused: refused_before,
                    })
                    .map_err(|e| match e {
                        error @ CommitError::WriteFailed { .. } => BatchError::WriteFailed { error, refused },
                        e => BatchError::Fatal(e.to_string()),
                    });
            }
            Err(BatchError::Fatal(error)) => {
                tracing::error!(%error, "store failed; exiting so that recovery decides what is durable");
                std::process::exit(70);
            }
        }
    }
}

fn log_write_failure(line: LogLine, error: Option<&CommitError>) {
    let error = error.map(|e| e.to_string()).unwrap_or_default();
    let retry_ms = WRITE_RETRY.as_millis();
    match line {
        LogLine::Started => {
            tracing::error!(%error, retry_ms, "store write failed; retrying, confirms wait until it succeeds")
        }
        LogLine::StillFailing { failures, failing_for } => tracing::error!(
            %error,
            failures,
            failing_for_s = failing_for.as_secs(),
            "store write still failing"
        ),
        LogLine::Recovered { failures, failed_for } => {
            tracing::warn!(failures, failed_for_ms = failed_for.as_millis(), "store write succeeded again")
        }
    }
}

#[cfg(test)]
mod tests {
    use hourglass_store::MemStorage;

    use super::*;

    fn enqueue(op_seq: u64, msg_id: u64) -> SequencedOp {
        let op = StoreOp::Enqueue {
            queue: 1,
            msg_id,
            metadata: Bytes::from_static(&[0; 22]),
            record: Bytes::from(format!("message {msg_id}")),
        };
        SequencedOp { op_seq, op }
    }

    fn settle(op_seq: u64, msg_id: u64) -> SequencedOp {
        SequencedOp { op_seq, op: StoreOp::Settle { queue: 1, msg_id } }
    }

    fn live_messages(storage: &MemStorage) -> Vec<u64> {
        let (store, recovered) = Store::open(Arc::new(storage.clone()), StoreConfig::default()).unwrap();
        let queues = store.recovered_queues(recovered.replay).unwrap();
        queues.get(&1).map(|q| q.iter().map(|m| m.msg_id).collect()).unwrap_or_default()
    }

    /// A message enqueued and settled in one batch is never written, and the batch is still
    /// reported durable through its last op; one settled in a later batch is written, then
    /// settled, as before.
    #[test]
    fn a_message_settled_within_its_batch_is_not_written() {
        let storage = MemStorage::new();
        let (mut store, _) = Store::open(Arc::new(storage.clone()), StoreConfig::default()).unwrap();
        let (catalog, _) = Catalog::open(Arc::new(MemStorage::new()), "c", Default::default()).unwrap();
        let catalog = Mutex::new(catalog);
        let outcome = apply_batch(&mut store, &catalog, &[enqueue(1, 10), settle(2, 10)]).unwrap();
        assert_eq!(outcome.durable_op_seq, 2);
        assert_eq!((outcome.settles, outcome.bytes_written), (0, 0), "nothing reached the disk");
        let outcome =
            apply_batch(&mut store, &catalog, &[enqueue(3, 11), enqueue(4, 12), settle(5, 11)]).unwrap();
        assert!(outcome.bytes_written > 0, "message 12 was written");
        assert_eq!(live_messages(&storage), vec![12]);
        let outcome = apply_batch(&mut store, &catalog, &[settle(6, 12)]).unwrap();
        assert_eq!(outcome.settles, 1);
        assert!(live_messages(&storage).is_empty());
    }

    /// A definition change the catalog refuses (over its record limit) is reported with its
    /// op_seq, so the API job that made it answers 500 (issue #22); the rest of the batch is kept.
    #[test]
    fn a_refused_catalog_change_is_reported_with_its_op_seq() {
        let (mut store, _) = Store::open(Arc::new(MemStorage::new()), StoreConfig::default()).unwrap();
        let (catalog, _) = Catalog::open(Arc::new(MemStorage::new()), "c", Default::default()).unwrap();
        let catalog = Mutex::new(catalog);
        let put = |op_seq, key: &'static str, bytes: usize| SequencedOp {
            op_seq,
            op: StoreOp::Catalog(CatalogChange::Put {
                key: Bytes::from_static(key.as_bytes()),
                value: Bytes::from(vec![0u8; bytes]),
            }),
        };
        let too_large = hourglass_store::limits::CATALOG_RECORD_BYTES_MAX + 1;
        let ops = [put(1, "small", 10), put(2, "huge", too_large), enqueue(3, 1)];
        let outcome = apply_batch(&mut store, &catalog, &ops).unwrap();
        assert_eq!(outcome.durable_op_seq, 3);
        assert_eq!(outcome.refused.iter().map(|r| r.op_seq).collect::<Vec<_>>(), vec![2]);
        assert!(outcome.refused[0].reason.contains("passes the limit"), "{:?}", outcome.refused);
    }
}
