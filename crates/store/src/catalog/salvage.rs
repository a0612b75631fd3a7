//! What still reads of a catalog that does not open, for a start that sets it aside
//! (`--set-aside-damaged-definitions`): the snapshot, then every whole commit of the log in
//! order — those after damage too (`resync.rs`, issue 37 finding 7) — and what was lost.
//!
//! A commit that cannot be applied (damaged, or holding a record this build cannot read) is
//! skipped whole, as replay skips a torn one: its changes are all lost together. The commits
//! after it apply as they did the first time, and every key they write ends as the catalog last
//! had it. Every other entry may have been changed or deleted by what was lost, and which ones
//! cannot be known: [`Salvaged::is_current`] tells them apart, so that the caller can refuse to
//! bring back what only the lost changes could have removed (a user, a password; the server
//! withholds those, docs/storage.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use bytes::Bytes;

use super::log_scan::Scanned;
use super::resync::resync;
use super::{
    apply_change, decode_change, decode_snapshot, read_log_body, read_log_header, Change, LogHeader,
    CATALOG_SCHEMA, LOG_SUFFIX, LOG_VERSION, SNAP_SUFFIX,
};
use crate::snapshot::read_snapshot;
use crate::storage::Storage;

/// What could still be read of a catalog that does not open (`Catalog::salvage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// The snapshot's map (empty when it did not read) with every whole commit of the log
    /// applied in order, those after damage included (none when the snapshot did not read:
    /// changes without their base are no state the catalog ever had).
    pub entries: BTreeMap<Bytes, Bytes>,
    /// The snapshot read, or there was none.
    pub snapshot_read: bool,
    /// Whole commits of the log applied, before and after what was lost.
    pub commits: u64,
    /// What of the log could not be applied (`None`: nothing).
    pub lost: Option<Lost>,
    /// The keys written by the commits applied after the last loss.
    written_since_loss: BTreeSet<Bytes>,
}

/// Commits of the log that could not be applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The first commit lost, by its sequence in the log (the log's first commit is 1).
    pub first_commit: u64,
    /// Commits lost whose count is known: damaged, or holding a record this build cannot apply.
    pub commits: u64,
    /// Nothing after the damage reads whole (or the log's header does not read): every later
    /// commit is lost too, how many unknown.
    pub rest_of_log: bool,
}

impl Salvaged {
    /// Whether `key`'s entry is certain to be as the catalog last had it: nothing was lost, or a
    /// commit applied after the last loss wrote it. Any other entry may have been changed or
    /// deleted by what was lost.
    pub fn is_current(&self, key: &[u8]) -> bool {
        self.lost.is_none() || self.written_since_loss.contains(key)
    }

    /// Notes `commits` lost from commit `first_commit` on: nothing written before is certain now.
    fn lose(&mut self, first_commit: u64, commits: u64, rest_of_log: bool) {
        self.written_since_loss.clear();
        let lost = self.lost.get_or_insert(Lost { first_commit, commits: 0, rest_of_log: false });
        lost.commits = lost.commits.saturating_add(commits);
        lost.rest_of_log |= rest_of_log;
    }

    /// Applies each of `scanned`'s whole commits (the first is commit `first_sequence`) whole,
    /// or, when one of its records cannot be read, not at all.
    fn apply_commits(&mut self, scanned: &Scanned<'_>, first_sequence: u64) {
        let mut start = 0;
        for (i, &end) in (0u64..).zip(&scanned.commit_ends) {
            // Saturating: `first_sequence` comes from a trailer read back from the disk.
            let sequence = first_sequence.saturating_add(i);
            let records = scanned.records.get(start..end).unwrap_or_default();
            start = end;
            match records.iter().map(|body| decode_change(body)).collect::<Result<Vec<_>, _>>() {
                Ok(changes) => {
                    changes.into_iter().for_each(|change| self.apply(change));
                    self.commits += 1;
                }
                Err(_) => self.lose(sequence, 1, false),
            }
        }
    }

    fn apply(&mut self, change: Change<'_>) {
        if self.lost.is_some() {
            match change {
                Change::Put { key, .. } => {
                    self.written_since_loss.insert(Bytes::copy_from_slice(key));
                }
                Change::Delete { key } => {
                    self.written_since_loss.remove(key);
                }
                Change::DeletePrefix { prefix } => self.written_since_loss.retain(|k| !k.starts_with(prefix)),
            }
        }
        apply_change(&mut self.entries, change);
    }
}

/// The map of catalog `name` in `storage` as far as it reads (module doc).
pub(super) fn salvage(storage: &dyn Storage, name: &str) -> Salvaged {
    let mut salvaged = Salvaged::default();
    let generation = match read_snapshot(storage, &format!("{name}{SNAP_SUFFIX}")) {
        Ok(None) => 0,
        Ok(Some(s)) if s.schema_version == CATALOG_SCHEMA => match decode_snapshot(&s.payload) {
            Ok((generation, entries)) => {
                salvaged.entries = entries;
                generation
            }
            Err(_) => return salvaged,
        },
        _ => return salvaged,
    };
    salvaged.snapshot_read = true;
    match log_body(storage, name, generation) {
        LogBody::Absent => {}
        LogBody::Unreadable => salvaged.lose(1, 0, true),
        LogBody::Read(body) => apply_log(&mut salvaged, &body),
    }
    salvaged
}

/// The log's body, as far as a salvage can use it.
enum LogBody {
    /// No log, or one older than the snapshot (a crash while folding: the snapshot holds it).
    Absent,
    /// Its header or body does not read, or it is of another format or a later generation:
    /// whatever it held is lost.
    Unreadable,
    Read(Vec<u8>),
}

fn log_body(storage: &dyn Storage, name: &str, generation: u64) -> LogBody {
    let log = match storage.open(&format!("{name}{LOG_SUFFIX}")) {
        Ok(log) => log,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return LogBody::Absent,
        Err(_) => return LogBody::Unreadable,
    };
    match read_log_header(log.as_ref(), name) {
        Ok(LogHeader { generation: g, .. }) if g < generation => LogBody::Absent,
        Ok(LogHeader { version, generation: g, file_bytes }) if (version, g) == (LOG_VERSION, generation) => {
            read_log_body(log.as_ref(), name, file_bytes).map_or(LogBody::Unreadable, LogBody::Read)
        }
        _ => LogBody::Unreadable,
    }
}

/// Applies the log's whole commits before its damage, then those after it.
fn apply_log(salvaged: &mut Salvaged, body: &[u8]) {
    let read = resync(body);
    salvaged.apply_commits(&read.before, 1);
    let Some(damage) = read.damage else { return };
    let first_lost = read.before.commits + 1;
    match damage.lost_commits {
        Some(lost) => {
            salvaged.lose(first_lost, lost, false);
            salvaged.apply_commits(&damage.after, first_lost.saturating_add(lost));
        }
        None => salvaged.lose(first_lost, 0, true),
    }
}
