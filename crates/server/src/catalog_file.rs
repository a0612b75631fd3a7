//! The catalog in the data directory (`catalog.snap` + `catalog.log`, docs/storage.md): the
//! durable definitions, one record per change. Opening it, deciding what to do when it does not
//! read ([`DamagedDefinitions`]), and moving an older data directory's whole-file
//! `definitions.snap` into it, once.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use hourglass_broker::{
    decode_catalog, decode_definitions, CatalogChange, Definitions, DEFINITIONS_SCHEMA_VERSION,
    DEFINITIONS_SCHEMA_VERSION_OLDEST, ORPHANED_QUEUE_PREFIX,
};
use hourglass_mgmt::users::{withhold_uncertain_credentials, Withheld};
use hourglass_store::catalog::{Catalog, CatalogConfig, CatalogError, CatalogOpened, Lost, Salvaged};
use hourglass_store::snapshot::read_snapshot;
use hourglass_store::Storage;

/// The catalog's name in the data directory (its files are `catalog.snap` and `catalog.log`).
pub const CATALOG: &str = "catalog";
/// The whole-file definitions older versions wrote; read once and moved into the catalog.
pub const LEGACY_DEFINITIONS_FILE: &str = "definitions.snap";

/// What start-up does when the stored definitions do not read (damaged, unsupported version,
/// undecodable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DamagedDefinitions {
    /// Refuse to start, changing nothing (the default): the operator decides.
    Refuse,
    /// Move the files aside as `<file>.damaged-<ms>` and start without them
    /// (`--set-aside-damaged-definitions`); the stored messages are kept in recreated queues.
    SetAside,
}

/// The stored definitions do not read and start-up was told to refuse ([`DamagedDefinitions::Refuse`]):
/// nothing was changed. A clustered node that meets this when elected takes a peer's copy instead
/// (`cluster_mode`).
#[derive(Debug, thiserror::Error)]
#[error(
    "{files} does not read ({problem}); refusing to start, nothing was changed. To start from what \
     still reads (the files are moved aside; the catalog restarts with every whole commit, those \
     after the damage too, or empty when nothing reads; users, permissions and access keys the \
     damaged commits may have changed are not restored; no default user is created; every stored \
     message is kept, in a queue named {prefix}<id> where its queue is lost), start once with \
     --set-aside-damaged-definitions",
    prefix = ORPHANED_QUEUE_PREFIX
)]
pub struct DefinitionsRefused {
    pub files: String,
    pub problem: String,
}

/// Whether this data directory held a catalog before this start. Only a truly first start
/// gets RabbitMQ's default user: a catalog that was damaged, set aside or emptied never brings
/// back a guest administrator that was deleted (issue 22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogHistory {
    /// Nothing was ever committed to a catalog here, and nothing was set aside.
    FirstStart,
    /// A catalog was here before (whatever it holds now).
    HeldBefore,
}

/// The opened catalog and what start-up needs to know of it.
#[derive(Debug)]
pub struct OpenedCatalog {
    pub catalog: Catalog,
    /// The broker's durable definitions it holds.
    pub definitions: Definitions,
    pub history: CatalogHistory,
}

/// The catalog, even if a panic elsewhere poisoned its lock (its map is whole: a change is
/// applied and committed under the lock, and a failed commit rolls the map back).
pub fn lock_catalog(catalog: &Mutex<Catalog>) -> MutexGuard<'_, Catalog> {
    catalog.lock().unwrap_or_else(|e| e.into_inner())
}

/// Applies one change to the catalog's map (durable with the next [`commit_catalog`]).
pub fn apply_change(catalog: &mut Catalog, change: &CatalogChange) -> Result<(), CatalogError> {
    match change {
        CatalogChange::Put { key, value } => catalog.put(key, value),
        CatalogChange::Delete { key } => catalog.delete(key),
        CatalogChange::DeletePrefix { prefix } => catalog.delete_prefix(prefix),
    }
}

/// Commits the catalog; a folding of its log that failed (the changes are durable all the same)
/// is logged.
pub fn commit_catalog(catalog: &mut Catalog) -> Result<(), CatalogError> {
    let committed = catalog.commit()?;
    if let Some(error) = committed.compaction_error {
        tracing::warn!(%error, "folding the catalog's log into a snapshot failed; retried at the next change");
    }
    Ok(())
}

/// Opens the catalog in `storage`, first moving `definitions.snap` into it if an older version
/// left one, and decodes the definitions it holds. A catalog that does not open is refused, or
/// (`SetAside`) moved aside and restarted from what of it still reads: every whole commit, those
/// after the damage too, less the credentials the lost commits may have changed
/// ([`restore_salvaged`]). `now_ms` names files set aside.
pub fn open_catalog(
    storage: Arc<dyn Storage>,
    damaged: DamagedDefinitions,
    now_ms: u64,
) -> anyhow::Result<OpenedCatalog> {
    let listed = storage.list().context("listing the data directory")?;
    // A file set aside by an earlier start says a catalog (or older definitions) was here.
    let mut history = if listed.iter().any(|f| f.contains(SET_ASIDE_MARK)) {
        CatalogHistory::HeldBefore
    } else {
        CatalogHistory::FirstStart
    };
    let mut catalog = match Catalog::open(storage.clone(), CATALOG, CatalogConfig::default()) {
        Ok((catalog, report)) => {
            log_opened(&report);
            if !report.pristine {
                history = CatalogHistory::HeldBefore;
            }
            catalog
        }
        Err(error) => {
            history = CatalogHistory::HeldBefore;
            let salvaged = match damaged {
                DamagedDefinitions::SetAside => Catalog::salvage(storage.as_ref(), CATALOG),
                DamagedDefinitions::Refuse => Salvaged::default(),
            };
            set_aside(storage.as_ref(), damaged, &error.to_string(), now_ms)?;
            let mut catalog = Catalog::open(storage.clone(), CATALOG, CatalogConfig::default())?.0;
            restore_salvaged(&mut catalog, salvaged)?;
            catalog
        }
    };
    move_legacy_definitions(storage.as_ref(), &mut catalog, damaged, now_ms)?;
    let decoded = decode_catalog(catalog.entries().map(|(k, v)| (&k[..], &v[..])));
    match decoded {
        Ok(definitions) => Ok(OpenedCatalog { catalog, definitions, history }),
        Err(problem) => {
            drop(catalog);
            set_aside(storage.as_ref(), damaged, &problem, now_ms)?;
            let (catalog, _) = Catalog::open(storage, CATALOG, CatalogConfig::default())?;
            let history = CatalogHistory::HeldBefore;
            Ok(OpenedCatalog { catalog, definitions: Definitions::default(), history })
        }
    }
}

/// What files set aside are named with: `<file>.damaged-<ms>`.
const SET_ASIDE_MARK: &str = ".damaged-";

fn log_opened(report: &CatalogOpened) {
    if report.torn_bytes > 0 {
        tracing::warn!(
            torn_bytes = report.torn_bytes,
            "catalog.log ended in an unfinished write (a crash mid-commit): cut there"
        );
    }
    if report.repaired_copies > 0 {
        tracing::warn!(
            copies = report.repaired_copies,
            "catalog.log had damaged commit trailers; their second copies covered them"
        );
    }
    if report.stale_log_replaced {
        tracing::info!("catalog.log was older than catalog.snap (a crash while folding): replaced");
    }
    tracing::debug!(records = report.records, commits = report.commits, "catalog.log replayed");
}

/// Writes what was salvaged of a set-aside catalog into the new, empty one (one commit). When
/// commits were lost, the users, permissions, topic permissions and access keys no later commit
/// wrote are left out: a lost commit may have deleted or changed any of them, and a damaged
/// catalog must never give back a credential an operator took away (issue 37 finding 7;
/// `hourglass_identity::withhold_uncertain_credentials`, docs/storage.md).
fn restore_salvaged(catalog: &mut Catalog, mut salvaged: Salvaged) -> anyhow::Result<()> {
    let mut entries = std::mem::take(&mut salvaged.entries);
    let withheld = match salvaged.lost {
        Some(_) => withhold_uncertain_credentials(&mut entries, |key| salvaged.is_current(key)),
        None => Withheld::default(),
    };
    for (key, value) in &entries {
        catalog.put(key, value).context("restoring what of the damaged catalog still reads")?;
    }
    commit_catalog(catalog).context("restoring what of the damaged catalog still reads")?;
    match (&salvaged.lost, salvaged.snapshot_read) {
        (_, false) => tracing::error!(
            "catalog.snap did not read: the catalog restarts empty (no users, no definitions); \
             no default user is created on a data directory that held a catalog"
        ),
        (None, true) => tracing::warn!(
            entries = entries.len(),
            log_commits = salvaged.commits,
            "the catalog restarts with everything its set-aside files held"
        ),
        (Some(lost), true) => log_lost(lost, &salvaged, entries.len(), &withheld),
    }
    Ok(())
}

/// Says which commits a set-aside catalog lost, what that means for definitions, and which
/// credentials were not restored.
fn log_lost(lost: &Lost, salvaged: &Salvaged, entries: usize, withheld: &Withheld) {
    if lost.rest_of_log {
        tracing::error!(
            first_lost_commit = lost.first_commit,
            log_commits = salvaged.commits,
            entries,
            "catalog.log does not read from commit {} on, and nothing after the damage reads \
             whole: every later change is lost; the catalog restarts from the commits before it",
            lost.first_commit
        );
    } else {
        tracing::error!(
            first_lost_commit = lost.first_commit,
            lost_commits = lost.commits,
            log_commits = salvaged.commits,
            entries,
            "catalog.log: {} commit(s) from commit {} on do not read and are skipped; every whole \
             commit before and after them is applied. Definitions only the skipped commits changed \
             are as they were before them (a queue declared there is gone, its messages kept in a \
             recreated queue); make those changes again",
            lost.commits,
            lost.first_commit
        );
    }
    if !withheld.is_empty() {
        tracing::error!(
            users = ?withheld.users,
            permissions = ?withheld.permissions,
            topic_permissions = ?withheld.topic_permissions,
            access_keys = ?withheld.access_keys,
            "credentials last written before the lost commits are not restored: those commits may \
             have deleted or changed them. Make them again (their old records are in the set-aside \
             catalog.log)"
        );
    }
    if withheld.users_left == 0 {
        tracing::error!(
            "no user is left after the lost commits: start with --default-user and --default-pass \
             to add an administrator (no default user is created on a data directory that held a \
             catalog)"
        );
    }
}

/// Puts every definition of an older data directory's `definitions.snap` into the catalog,
/// commits, then removes the file. A crash before the removal repeats it at the next start,
/// writing nothing new (the catalog skips puts of values it holds).
fn move_legacy_definitions(
    storage: &dyn Storage,
    catalog: &mut Catalog,
    damaged: DamagedDefinitions,
    now_ms: u64,
) -> anyhow::Result<()> {
    let readable = DEFINITIONS_SCHEMA_VERSION_OLDEST..=DEFINITIONS_SCHEMA_VERSION;
    let definitions = match read_snapshot(storage, LEGACY_DEFINITIONS_FILE) {
        Ok(None) => return Ok(()),
        Ok(Some(s)) if !readable.contains(&s.schema_version) => Err(format!(
            "schema version {} is not supported; this build reads {readable:?}",
            s.schema_version
        )),
        Ok(Some(s)) => decode_definitions(s.payload),
        Err(error) => Err(error.to_string()),
    };
    let definitions = match definitions {
        Ok(definitions) => definitions,
        Err(problem) => {
            let files = [LEGACY_DEFINITIONS_FILE.to_owned()];
            return set_aside_files(storage, damaged, &files, &problem, now_ms);
        }
    };
    for (key, value) in definitions.catalog_entries() {
        catalog.put(&key, &value).context("moving definitions.snap into the catalog")?;
    }
    catalog.commit().context("moving definitions.snap into the catalog")?;
    storage.remove(LEGACY_DEFINITIONS_FILE).context("removing definitions.snap once moved")?;
    tracing::info!(entries = catalog.len(), "{LEGACY_DEFINITIONS_FILE} moved into the catalog");
    Ok(())
}

/// Handles a catalog that does not read, as `damaged` says: refuse, or move its files aside.
fn set_aside(
    storage: &dyn Storage,
    damaged: DamagedDefinitions,
    problem: &str,
    now_ms: u64,
) -> anyhow::Result<()> {
    let listed = storage.list().context("listing the data directory")?;
    let files: Vec<String> = [format!("{CATALOG}.snap"), format!("{CATALOG}.log")]
        .into_iter()
        .filter(|f| listed.contains(f))
        .collect();
    set_aside_files(storage, damaged, &files, problem, now_ms)
}

/// Refuses to start naming `files` and the way out, or (`SetAside`) renames each to
/// `<file>.damaged-<ms>`.
fn set_aside_files(
    storage: &dyn Storage,
    damaged: DamagedDefinitions,
    files: &[String],
    problem: &str,
    now_ms: u64,
) -> anyhow::Result<()> {
    if damaged == DamagedDefinitions::Refuse {
        return Err(DefinitionsRefused { files: files.join(" + "), problem: problem.to_owned() }.into());
    }
    for file in files {
        let aside = format!("{file}{SET_ASIDE_MARK}{now_ms}");
        storage.rename(file, &aside).with_context(|| format!("moving {file} aside to {aside}"))?;
        tracing::error!(
            %problem, moved_to = %aside,
            "{file} does not read: moved aside, starting from what of it still reads (stored \
             messages are kept in recreated queues)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hourglass_store::snapshot::write_snapshot;
    use hourglass_store::MemStorage;
    use hourglass_wire::{FieldArray, FieldTable, FieldValue, LongStr};

    use super::*;

    /// `definitions.snap` as version 2 wrote it: vhost `/` with durable queue `q` (id 3).
    fn legacy_payload() -> Vec<u8> {
        let text = |s: &str| FieldValue::LongStr(LongStr::from(s));
        let queue = FieldTable::from_entries([
            ("name", text("q")),
            ("id", FieldValue::I64(3)),
            ("auto_delete", FieldValue::Bool(false)),
            ("arguments", FieldValue::ByteArray(FieldTable::new().raw().clone())),
        ]);
        let empty = || FieldValue::Array(FieldArray::new());
        let vhost = FieldTable::from_entries([
            ("name", text("/")),
            ("exchanges", empty()),
            ("queues", FieldValue::Array(FieldArray::from_values([FieldValue::Table(queue)]))),
            ("bindings", empty()),
        ]);
        let top = FieldTable::from_entries([
            ("next_queue_id", FieldValue::I64(4)),
            ("vhosts", FieldValue::Array(FieldArray::from_values([FieldValue::Table(vhost)]))),
        ]);
        top.raw().to_vec()
    }

    fn opened(storage: Arc<dyn Storage>, damaged: DamagedDefinitions, now_ms: u64) -> (Catalog, Definitions) {
        let opened = open_catalog(storage, damaged, now_ms).unwrap();
        (opened.catalog, opened.definitions)
    }

    fn queues(definitions: &Definitions) -> String {
        format!("{definitions:?}")
    }

    /// An older data directory's `definitions.snap` moves into the catalog once: the same
    /// definitions come back, the file is gone, and the next start reads the catalog alone. A
    /// crash before the file's removal only repeats the move.
    #[test]
    fn an_older_definitions_file_moves_into_the_catalog() {
        let storage = MemStorage::new();
        write_snapshot(&storage, LEGACY_DEFINITIONS_FILE, 2, &legacy_payload()).unwrap();
        let shared: Arc<dyn Storage> = Arc::new(storage.clone());
        let (catalog, definitions) = opened(shared.clone(), DamagedDefinitions::Refuse, 0);
        assert!(queues(&definitions).contains("\"q\"") && queues(&definitions).contains("QueueId(3)"));
        assert!(!storage.list().unwrap().contains(&LEGACY_DEFINITIONS_FILE.to_owned()));
        let entries = catalog.len();
        drop(catalog);
        let (_, again) = opened(shared.clone(), DamagedDefinitions::Refuse, 0);
        assert_eq!(queues(&again), queues(&definitions));

        write_snapshot(&storage, LEGACY_DEFINITIONS_FILE, 2, &legacy_payload()).unwrap();
        let (catalog, repeated) = opened(shared, DamagedDefinitions::Refuse, 0);
        assert_eq!((catalog.len(), queues(&repeated)), (entries, queues(&definitions)));
    }

    /// A damaged older file is refused like a damaged catalog, or set aside with the flag.
    #[test]
    fn a_damaged_older_definitions_file_is_refused_or_set_aside() {
        let storage = MemStorage::new();
        write_snapshot(&storage, LEGACY_DEFINITIONS_FILE, 2, b"\x01not a table").unwrap();
        let shared: Arc<dyn Storage> = Arc::new(storage.clone());
        let error = open_catalog(shared.clone(), DamagedDefinitions::Refuse, 0).unwrap_err().to_string();
        assert!(error.contains("definitions.snap does not read"), "{error}");
        let (catalog, _) = opened(shared, DamagedDefinitions::SetAside, 7);
        assert!(catalog.is_empty());
        assert!(storage.list().unwrap().contains(&"definitions.snap.damaged-7".to_owned()));
    }
}
