//! The catalog: a durable key → value map for definitions and identity (exchanges, queues,
//! bindings, policies, vhosts, users...), kept as a checksummed snapshot plus an append-only log
//! of changes, so that one change costs one small record and one sync however large the map is.
//! Keys and values are opaque bytes here; the broker decides what they mean.
//!
//! ```text
//! NAME.snap   the map at generation G (`snapshot::write_snapshot`, schema CATALOG_SCHEMA):
//!             generation u64, then entries: key length u32, key, value length u32, value
//! NAME.log    header (24 bytes): magic "HGLSCLOG", format version u32 (LOG_VERSION),
//!             generation u64, CRC32C of bytes 0..20
//!             commits, each its records then its trailer (`catalog/log_scan.rs`);
//!             a record: body length u32, CRC32C of the body u32, body:
//!               1 put:           key length u32, key, value
//!               2 delete:        key
//!               3 delete prefix: every key starting with these bytes
//!               4 commit:        the trailer (sequence, record count), written twice
//! ```
//!
//! All lengths little-endian. A change is buffered by [`Catalog::put`] / [`Catalog::delete`] and
//! durable after [`Catalog::commit`] (one write, one sync). When the log has grown past the
//! snapshot's size (and [`CatalogConfig::compact_min_bytes`]), the commit writes the whole map as
//! snapshot G+1 and starts an empty log at G+1: the cost per change stays constant on average.
//!
//! Recovery: the snapshot, then the log's whole commits in order, each applied entirely or not
//! at all. A log of an older generation is what a crash between those two steps leaves (the new
//! snapshot already holds it): it is replaced by an empty one. What follows the last whole commit
//! is the torn tail of a commit that never finished (whose changes were never reported durable)
//! when nothing valid comes after it: the file is cut there and the bytes dropped are reported. A
//! bad record with a whole commit after it is damage, and opening fails
//! ([`CatalogError::Damaged`]): damage never silently drops what came after it
//! (`catalog/log_scan.rs` has the rules). A log of format 1 (records without trailers, before
//! issue 22) is read record by record as it was written, then folded into a snapshot at once.
//!
//! A start told to set a damaged catalog aside reads what it can instead ([`Catalog::salvage`]):
//! every whole commit, those after the damage too (`catalog/resync.rs`), and which entries no
//! later commit wrote, so that the caller need not trust them (`catalog/salvage.rs`).

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

use crate::limits::{CATALOG_COMPACT_MIN_BYTES, CATALOG_RECORD_BYTES_MAX, SNAPSHOT_BYTES_MAX};
use crate::record::{u32_at, u64_at};
use crate::snapshot::{read_snapshot, replace_atomically, write_snapshot, SnapshotError};
use crate::storage::{Storage, StorageFile};
pub use log_scan::Damaged;
use log_scan::{encode_trailer, next_record, scan, RECORD_HEADER_BYTES};
pub use salvage::{Lost, Salvaged};

/// The snapshot's schema version (the layout of its payload above).
pub const CATALOG_SCHEMA: u32 = 1;
const LOG_MAGIC: [u8; 8] = *b"HGLSCLOG";
/// The log's format: 2 closes every commit with a trailer; 1 (read, never written) had none.
const LOG_VERSION: u32 = 2;
const LOG_VERSION_UNCOMMITTED: u32 = 1;
const LOG_HEADER_BYTES: usize = 24;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_DELETE_PREFIX: u8 = 3;
const LOG_SUFFIX: &str = ".log";
const SNAP_SUFFIX: &str = ".snap";

/// Tuning of a catalog.
#[derive(Clone, Copy, Debug)]
pub struct CatalogConfig {
    /// The log is folded into a new snapshot once it is larger than this and than the snapshot.
    pub compact_min_bytes: u64,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig { compact_min_bytes: CATALOG_COMPACT_MIN_BYTES }
    }
}

/// Why a catalog could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("catalog I/O failed while {doing}: {source}")]
    Io {
        doing: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("catalog {name:?} is corrupt: {reason}")]
    Corrupt { name: String, reason: String },
    #[error("{name}.log is damaged: {damage}")]
    Damaged { name: String, damage: Damaged },
    #[error("a catalog record of {bytes} bytes passes the limit of {CATALOG_RECORD_BYTES_MAX}")]
    TooLarge { bytes: usize },
}

/// What opening found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogOpened {
    /// Records replayed from the log.
    pub records: u64,
    /// Whole commits replayed from the log.
    pub commits: u64,
    /// Damaged copies of commit trailers that their twin covered.
    pub repaired_copies: u64,
    /// Nothing was ever committed here: no snapshot, and a log with nothing after its header.
    pub pristine: bool,
    /// Bytes of a torn tail cut from the log (an unfinished commit).
    pub torn_bytes: u64,
    /// The log was of an older generation than the snapshot (a crash mid-compaction) and was
    /// replaced.
    pub stale_log_replaced: bool,
}

/// What one commit did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogCommitted {
    /// Bytes appended to the log.
    pub bytes: u64,
    /// Whether the commit also folded the log into a new snapshot.
    pub compacted: bool,
    /// Folding was due but failed (the changes are durable; it is tried again next commit).
    pub compaction_error: Option<String>,
}

/// An open catalog (module doc). One owner: the store thread.
#[derive(Debug)]
pub struct Catalog {
    storage: Arc<dyn Storage>,
    name: String,
    config: CatalogConfig,
    entries: BTreeMap<Bytes, Bytes>,
    generation: u64,
    log: Box<dyn StorageFile>,
    log_bytes: u64,
    snapshot_bytes: u64,
    pending: Vec<u8>,
    /// Records in `pending`.
    pending_records: u32,
    /// The last commit's sequence in this log (0: none yet).
    sequence: u64,
    /// The values the uncommitted changes replaced (`None`: the key was absent), oldest first:
    /// a failed commit puts them back, so the map never holds what the disk may not.
    undo: Vec<(Bytes, Option<Bytes>)>,
    /// A failed commit's records could not be cut yet: the next commit cuts them first.
    cut_needed: bool,
    /// A compaction wrote its snapshot but not yet the new, empty log: the next commit starts it
    /// first.
    log_outdated: bool,
}

impl Catalog {
    /// Opens (or creates) catalog `name` in `storage`, recovering it.
    pub fn open(
        storage: Arc<dyn Storage>,
        name: &str,
        config: CatalogConfig,
    ) -> Result<(Catalog, CatalogOpened), CatalogError> {
        let snap_name = format!("{name}{SNAP_SUFFIX}");
        let (generation, entries, snapshot_bytes) = match read_snapshot(storage.as_ref(), &snap_name)? {
            None => (0, BTreeMap::new(), 0),
            Some(s) if s.schema_version != CATALOG_SCHEMA => {
                return Err(corrupt(
                    name,
                    format!("snapshot schema {} is not {CATALOG_SCHEMA}", s.schema_version),
                ))
            }
            Some(s) => {
                let bytes = s.payload.len() as u64;
                let (generation, entries) = decode_snapshot(&s.payload).map_err(|r| corrupt(name, r))?;
                (generation, entries, bytes)
            }
        };
        let mut catalog = Catalog {
            log: new_log(storage.as_ref(), name, generation, false)?,
            storage,
            name: name.to_owned(),
            config,
            entries,
            generation,
            log_bytes: LOG_HEADER_BYTES as u64,
            snapshot_bytes,
            pending: Vec::new(),
            pending_records: 0,
            sequence: 0,
            undo: Vec::new(),
            cut_needed: false,
            log_outdated: false,
        };
        let mut opened = catalog.replay()?;
        opened.pristine &= snapshot_bytes == 0 && generation == 0;
        Ok((catalog, opened))
    }

    /// What still reads of a catalog that does not open, for a start that sets it aside: the
    /// snapshot and every whole commit of the log, those after damage included, and what was lost
    /// (`catalog/salvage.rs`). Reads only; the caller sets the files aside.
    pub fn salvage(storage: &dyn Storage, name: &str) -> Salvaged {
        salvage::salvage(storage, name)
    }

    /// The map as of the last change (committed or not), in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.entries.iter()
    }

    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        self.entries.get(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `key` to `value` (durable after the next commit). Nothing is written when the key
    /// already holds that value.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), CatalogError> {
        if self.entries.get(key).is_some_and(|v| v[..] == *value) {
            return Ok(());
        }
        let mut body = Vec::with_capacity(5 + key.len() + value.len());
        body.push(OP_PUT);
        body.extend_from_slice(&(key.len() as u32).to_le_bytes());
        body.extend_from_slice(key);
        body.extend_from_slice(value);
        self.buffer(&body)?;
        let key = Bytes::copy_from_slice(key);
        let old = self.entries.insert(key.clone(), Bytes::copy_from_slice(value));
        self.undo.push((key, old));
        Ok(())
    }

    /// Removes `key` (durable after the next commit); nothing is written when it is absent.
    pub fn delete(&mut self, key: &[u8]) -> Result<(), CatalogError> {
        if !self.entries.contains_key(key) {
            return Ok(());
        }
        let mut body = Vec::with_capacity(1 + key.len());
        body.push(OP_DELETE);
        body.extend_from_slice(key);
        self.buffer(&body)?;
        if let Some((key, old)) = self.entries.remove_entry(key) {
            self.undo.push((key, Some(old)));
        }
        Ok(())
    }

    /// Removes every key that starts with `prefix` (durable after the next commit).
    pub fn delete_prefix(&mut self, prefix: &[u8]) -> Result<(), CatalogError> {
        if !self.entries.range::<[u8], _>(from(prefix)).next().is_some_and(|(k, _)| k.starts_with(prefix)) {
            return Ok(());
        }
        let mut body = Vec::with_capacity(1 + prefix.len());
        body.push(OP_DELETE_PREFIX);
        body.extend_from_slice(prefix);
        self.buffer(&body)?;
        for (key, old) in remove_prefix(&mut self.entries, prefix) {
            self.undo.push((key, Some(old)));
        }
        Ok(())
    }

    /// Makes every change so far durable: one write and one sync of the log, then, when the log
    /// has outgrown the snapshot, a new snapshot (module doc). When the write or sync fails the
    /// changes since the last commit are dropped from the map too, and the error returned.
    pub fn commit(&mut self) -> Result<CatalogCommitted, CatalogError> {
        if self.pending.is_empty() {
            return Ok(CatalogCommitted::default());
        }
        encode_trailer(self.sequence + 1, self.pending_records, &mut self.pending);
        let cut = match (self.log_outdated, self.cut_needed) {
            (true, _) => self.start_new_log(),
            (false, true) => {
                self.log.set_len(self.log_bytes).map_err(io_err("cutting a failed commit from the log"))
            }
            (false, false) => Ok(()),
        };
        let written = cut
            .and_then(|()| {
                self.log.write_all_at(self.log_bytes, &self.pending).map_err(io_err("appending to the log"))
            })
            .and_then(|()| self.log.sync().map_err(io_err("syncing the log")));
        if let Err(error) = written {
            self.discard();
            return Err(error);
        }
        let bytes = self.pending.len() as u64;
        self.log_bytes += bytes;
        self.sequence += 1;
        self.pending_records = 0;
        self.pending.clear();
        self.undo.clear();
        self.cut_needed = false;
        let records = self.log_bytes - LOG_HEADER_BYTES as u64;
        let mut committed = CatalogCommitted { bytes, ..CatalogCommitted::default() };
        if records > self.config.compact_min_bytes.max(self.snapshot_bytes) {
            // The changes are durable already: a failed folding is reported, not a failed commit.
            match self.compact() {
                Ok(folded) => committed.compacted = folded,
                Err(error) => committed.compaction_error = Some(error.to_string()),
            }
        }
        Ok(committed)
    }

    /// Drops the changes made since the last commit (a failed commit, or a caller that could not
    /// make all of a change's records): their records (cut from the log, so that a shorter commit
    /// after them cannot leave whole records of theirs behind it), and their effect on the map.
    /// The cut is durable with the next commit's sync; until then a crash may keep or lose the
    /// failed records, as with any failed sync.
    pub fn discard(&mut self) {
        self.cut_needed = self.log.set_len(self.log_bytes).is_err();
        self.pending.clear();
        self.pending_records = 0;
        for (key, old) in self.undo.drain(..).rev() {
            match old {
                Some(value) => self.entries.insert(key, value),
                None => self.entries.remove(&key),
            };
        }
    }

    /// Writes the whole map as the next generation's snapshot, then an empty log for it.
    /// Whether it did: a map too large for a snapshot keeps growing its log instead.
    fn compact(&mut self) -> Result<bool, CatalogError> {
        // Sized before it is encoded: a map over the limit is not encoded at every commit.
        if snapshot_bytes(&self.entries) as u64 > SNAPSHOT_BYTES_MAX {
            return Ok(false);
        }
        let payload = encode_snapshot(self.generation + 1, &self.entries);
        write_snapshot(
            self.storage.as_ref(),
            &format!("{}{SNAP_SUFFIX}", self.name),
            CATALOG_SCHEMA,
            &payload,
        )?;
        // The snapshot holds everything: the log starts over, empty, at the new generation. Until
        // that new log exists nothing may be appended to the old one (a reopen would drop it as
        // stale), so a failure here is retried first by the next commit.
        self.generation += 1;
        self.snapshot_bytes = payload.len() as u64;
        self.log_bytes = LOG_HEADER_BYTES as u64;
        self.sequence = 0;
        self.log_outdated = true;
        self.start_new_log()?;
        Ok(true)
    }

    fn start_new_log(&mut self) -> Result<(), CatalogError> {
        self.log = new_log(self.storage.as_ref(), &self.name, self.generation, true)?;
        self.log_outdated = false;
        Ok(())
    }

    fn buffer(&mut self, body: &[u8]) -> Result<(), CatalogError> {
        if body.len() > CATALOG_RECORD_BYTES_MAX {
            return Err(CatalogError::TooLarge { bytes: body.len() });
        }
        self.pending.extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        self.pending.extend_from_slice(body);
        self.pending_records += 1;
        Ok(())
    }

    /// Applies the log's whole commits to the snapshot's map; cuts a torn tail; refuses damage.
    fn replay(&mut self) -> Result<CatalogOpened, CatalogError> {
        let mut opened = CatalogOpened::default();
        let LogHeader { version, generation, file_bytes } = read_log_header(self.log.as_ref(), &self.name)?;
        if generation < self.generation {
            self.log = new_log(self.storage.as_ref(), &self.name, self.generation, true)?;
            opened.stale_log_replaced = true;
            return Ok(opened);
        }
        if generation > self.generation {
            return Err(corrupt(&self.name, format!("log generation {generation} is ahead of its snapshot")));
        }
        opened.pristine = file_bytes == LOG_HEADER_BYTES as u64;
        let bytes = read_log_body(self.log.as_ref(), &self.name, file_bytes)?;
        let whole_bytes = if version == LOG_VERSION_UNCOMMITTED {
            self.replay_uncommitted(&bytes, &mut opened)?
        } else {
            self.replay_commits(&bytes, &mut opened)?
        };
        self.log_bytes = LOG_HEADER_BYTES as u64 + whole_bytes as u64;
        if self.log_bytes < file_bytes {
            opened.torn_bytes = file_bytes - self.log_bytes;
            self.log.set_len(self.log_bytes).map_err(io_err("cutting the log's torn tail"))?;
            self.log.sync().map_err(io_err("syncing the log"))?;
        }
        if version == LOG_VERSION_UNCOMMITTED && !self.compact()? {
            return Err(corrupt(&self.name, "a format 1 log too large to fold into a snapshot".to_owned()));
        }
        Ok(opened)
    }

    /// Applies the whole commits of a log body; where they end.
    fn replay_commits(&mut self, bytes: &[u8], opened: &mut CatalogOpened) -> Result<usize, CatalogError> {
        let scanned =
            scan(bytes).map_err(|damage| CatalogError::Damaged { name: self.name.clone(), damage })?;
        for body in &scanned.records {
            apply(&mut self.entries, body).map_err(|r| corrupt(&self.name, r.to_owned()))?;
        }
        opened.records = scanned.records.len() as u64;
        opened.commits = scanned.commits;
        opened.repaired_copies = scanned.repaired_copies;
        self.sequence = scanned.commits;
        if let Some(at) = scanned.rewrite_trailer_at {
            // The first copy is whole (the scan checked it): the second is written from it.
            let copy = &bytes[at - log_scan::TRAILER_BYTES..at];
            let offset = (LOG_HEADER_BYTES + at) as u64;
            self.log.write_all_at(offset, copy).map_err(io_err("rewriting a commit trailer"))?;
            self.log.sync().map_err(io_err("syncing the log"))?;
            opened.repaired_copies += 1;
        }
        Ok(scanned.whole_bytes)
    }

    /// Applies the records of a format 1 log (no commit trailers) up to the first bad one; where
    /// they end.
    fn replay_uncommitted(
        &mut self,
        bytes: &[u8],
        opened: &mut CatalogOpened,
    ) -> Result<usize, CatalogError> {
        let mut at = 0;
        while let Some(body) = next_record(&bytes[at..]) {
            apply(&mut self.entries, body).map_err(|r| corrupt(&self.name, r.to_owned()))?;
            at += RECORD_HEADER_BYTES + body.len();
            opened.records += 1;
        }
        Ok(at)
    }
}

/// What a log's header says, and the log's size.
struct LogHeader {
    version: u32,
    generation: u64,
    file_bytes: u64,
}

/// Reads and checks the header of `log` (catalog `name`).
fn read_log_header(log: &dyn StorageFile, name: &str) -> Result<LogHeader, CatalogError> {
    let file_bytes = log.len_bytes().map_err(io_err("sizing the log"))?;
    if file_bytes < LOG_HEADER_BYTES as u64 {
        return Err(corrupt(name, "log shorter than its header".to_owned()));
    }
    let mut header = [0; LOG_HEADER_BYTES];
    log.read_exact_at(0, &mut header).map_err(io_err("reading the log header"))?;
    let (version, generation) = check_log_header(&header).map_err(|r| corrupt(name, r.to_owned()))?;
    Ok(LogHeader { version, generation, file_bytes })
}

/// The body of `log` after its header (`file_bytes` long in all), within the limits.
fn read_log_body(log: &dyn StorageFile, name: &str, file_bytes: u64) -> Result<Vec<u8>, CatalogError> {
    if file_bytes > SNAPSHOT_BYTES_MAX + CATALOG_RECORD_BYTES_MAX as u64 {
        return Err(corrupt(name, format!("log of {file_bytes} bytes passes every limit")));
    }
    let mut body = vec![0; (file_bytes - LOG_HEADER_BYTES as u64) as usize];
    log.read_exact_at(LOG_HEADER_BYTES as u64, &mut body).map_err(io_err("reading the log"))?;
    Ok(body)
}

/// One change record, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Delete { key: &'a [u8] },
    DeletePrefix { prefix: &'a [u8] },
}

/// Reads one checksummed record body.
fn decode_change(body: &[u8]) -> Result<Change<'_>, &'static str> {
    let (&op, rest) = body.split_first().ok_or("empty record")?;
    match op {
        OP_PUT => {
            let key_len = rest.get(..4).map(|b| u32_at(b, 0) as usize).ok_or("short put record")?;
            let key = rest.get(4..4 + key_len).ok_or("put record shorter than its key")?;
            Ok(Change::Put { key, value: &rest[4 + key_len..] })
        }
        OP_DELETE => Ok(Change::Delete { key: rest }),
        OP_DELETE_PREFIX => Ok(Change::DeletePrefix { prefix: rest }),
        _ => Err("unknown record kind"),
    }
}

/// Applies one change to `entries`.
fn apply_change(entries: &mut BTreeMap<Bytes, Bytes>, change: Change<'_>) {
    match change {
        Change::Put { key, value } => {
            entries.insert(Bytes::copy_from_slice(key), Bytes::copy_from_slice(value));
        }
        Change::Delete { key } => {
            entries.remove(key);
        }
        Change::DeletePrefix { prefix } => {
            remove_prefix(entries, prefix);
        }
    }
}

/// Applies one checksummed record body to `entries`.
fn apply(entries: &mut BTreeMap<Bytes, Bytes>, body: &[u8]) -> Result<(), &'static str> {
    apply_change(entries, decode_change(body)?);
    Ok(())
}

/// Every key from `prefix` on, in order.
fn from(prefix: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Included(prefix), Bound::Unbounded)
}

/// Removes every entry whose key starts with `prefix`; returns them.
fn remove_prefix(entries: &mut BTreeMap<Bytes, Bytes>, prefix: &[u8]) -> Vec<(Bytes, Bytes)> {
    let doomed: Vec<Bytes> = entries
        .range::<[u8], _>(from(prefix))
        .take_while(|(k, _)| k.starts_with(prefix))
        .map(|(k, _)| k.clone())
        .collect();
    doomed.into_iter().filter_map(|key| entries.remove_entry(&key)).collect()
}

/// Creates `NAME.log` with an empty body at `generation`. `replace`: through a temp file renamed
/// over the old log (atomic); otherwise only when there is none yet.
fn new_log(
    storage: &dyn Storage,
    name: &str,
    generation: u64,
    replace: bool,
) -> Result<Box<dyn StorageFile>, CatalogError> {
    let log_name = format!("{name}{LOG_SUFFIX}");
    if !replace {
        match storage.open(&log_name) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("opening the log")(e)),
        }
    }
    let mut header = Vec::with_capacity(LOG_HEADER_BYTES);
    header.extend_from_slice(&LOG_MAGIC);
    header.extend_from_slice(&LOG_VERSION.to_le_bytes());
    header.extend_from_slice(&generation.to_le_bytes());
    header.extend_from_slice(&crc32c::crc32c(&header).to_le_bytes());
    replace_atomically(storage, &log_name, &header)
        .map_err(|(doing, source)| CatalogError::Io { doing, source })?;
    storage.open(&log_name).map_err(io_err("opening the log"))
}

/// The log header's format version and generation, or why it is not a header we wrote.
fn check_log_header(header: &[u8; LOG_HEADER_BYTES]) -> Result<(u32, u64), &'static str> {
    if header[..8] != LOG_MAGIC {
        return Err("log has a bad magic");
    }
    if crc32c::crc32c(&header[..20]) != u32_at(header, 20) {
        return Err("log header fails its checksum");
    }
    let version = u32_at(header, 8);
    if version != LOG_VERSION && version != LOG_VERSION_UNCOMMITTED {
        return Err("log has another format version");
    }
    Ok((version, u64_at(header, 12)))
}

/// The length of [`encode_snapshot`]'s payload for `entries`: the generation, then each entry's
/// two lengths and bytes.
fn snapshot_bytes(entries: &BTreeMap<Bytes, Bytes>) -> usize {
    8 + entries.iter().map(|(k, v)| 8 + k.len() + v.len()).sum::<usize>()
}

fn encode_snapshot(generation: u64, entries: &BTreeMap<Bytes, Bytes>) -> Vec<u8> {
    let mut out = Vec::with_capacity(snapshot_bytes(entries));
    out.extend_from_slice(&generation.to_le_bytes());
    for (key, value) in entries {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

fn decode_snapshot(payload: &Bytes) -> Result<(u64, BTreeMap<Bytes, Bytes>), String> {
    let generation = u64_at(payload.get(..8).ok_or("snapshot shorter than its generation")?, 0);
    let mut entries = BTreeMap::new();
    let mut at = 8;
    let take = |at: &mut usize| -> Result<Bytes, String> {
        let len =
            payload.get(*at..*at + 4).map(|b| u32_at(b, 0) as usize).ok_or("snapshot entry cut short")?;
        let end = (*at + 4)
            .checked_add(len)
            .filter(|end| *end <= payload.len())
            .ok_or("snapshot entry cut short")?;
        let field = payload.slice(*at + 4..end);
        *at = end;
        Ok(field)
    };
    while at < payload.len() {
        let key = take(&mut at)?;
        let value = take(&mut at)?;
        entries.insert(key, value);
    }
    Ok((generation, entries))
}

fn corrupt(name: &str, reason: String) -> CatalogError {
    CatalogError::Corrupt { name: name.to_owned(), reason }
}

fn io_err(doing: &'static str) -> impl Fn(io::Error) -> CatalogError {
    move |source| CatalogError::Io { doing, source }
}

mod log_scan;
mod resync;
mod salvage;
#[cfg(test)]
mod tests;
