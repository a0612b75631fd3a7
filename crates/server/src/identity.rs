//! Users, vhost records and permissions across restarts: entries of the data directory's
//! catalog, the same stream as the durable definitions (docs/storage.md).
//!
//! The management user store (`hourglass_mgmt::UserStore`) turns each change into the catalog
//! entries of the records it changed (`hourglass-identity` `entries.rs`); its saver here puts them into the
//! catalog and commits before the change is visible. On start the store is read back from the
//! catalog; a data directory from an older version has its `users.snap` moved in once; a first
//! start writes RabbitMQ's defaults (guest on `/`). Only a first start: a data directory that
//! held a catalog before and now has no users (its catalog was damaged and set aside) starts with
//! none, so that damage never brings back a guest administrator that was deleted (issue 22).
//!
//! Once the broker runs, every change goes through the broker task and the store thread like any
//! other definition (`hourglass_mgmt::saver_through_store`); only start-up writes here directly.
//!
//! Which vhosts exist is the user store's vhost records (the one owner): at start the broker gets
//! every vhost they name. A vhost is created record first and deleted record last, in the one
//! ordered stream of store ops, so definitions under a vhost without a record cannot arise; a
//! data directory written before that order (a crash between the two writes of a deletion) has
//! them dropped at start, once, with a WARN. A data directory from before users were kept has
//! only the broker's list: those vhosts are adopted instead.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use hourglass_broker::{Broker, CatalogChange, Timestamp};
use hourglass_mgmt::users::{VhostRecord, FILE_SCHEMA_VERSION};
use hourglass_mgmt::UserStore;
use hourglass_store::catalog::Catalog;

use crate::catalog_file::{apply_change, commit_catalog, lock_catalog, CatalogHistory};
use crate::config::DefaultUser;
use hourglass_store::snapshot::read_snapshot;
use hourglass_store::Storage;

/// The whole-file users snapshot older versions kept; read once and moved into the catalog.
pub const LEGACY_USERS_FILE: &str = "users.snap";

/// The administrator a start made, for the start-up banner (a first start's guest/guest, or
/// the `--default-user`); `None` when the users were already stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MadeUser {
    Guest,
    DefaultUser(String),
}

/// Loads (or creates) the user store kept in `catalog`, gives `broker` the vhosts it records, and
/// makes the start's own changes save to `catalog`; says which administrator it made, if any.
/// `storage` is the data directory (for an older `users.snap`). A vhost in `keep` (it holds queues recreated for orphaned messages,
/// issue 12) is added to the store rather than deleted from the broker: deleting it would purge
/// those messages.
pub fn open(
    catalog: Arc<Mutex<Catalog>>,
    blank: Blank<'_>,
    storage: &dyn Storage,
    loopback_users: Vec<String>,
    keep: &[String],
    broker: &mut Broker,
    now: Timestamp,
) -> anyhow::Result<(UserStore, Option<MadeUser>)> {
    let mut made = None;
    let stored = {
        let catalog = lock_catalog(&catalog);
        UserStore::from_catalog(catalog.entries().map(|(k, v)| (&k[..], &v[..])), loopback_users.clone())
            .context("reading users")?
    };
    let legacy = read_snapshot(storage, LEGACY_USERS_FILE).context("reading users.snap")?;
    let saver = saver(catalog);
    let users = match (stored, legacy) {
        (Some(users), legacy) => {
            if legacy.is_some() {
                // Moved already; a crash came before the file's removal.
                storage.remove(LEGACY_USERS_FILE).context("removing users.snap once moved")?;
            }
            let users = users.persist_with(saver);
            if let (true, Some(user)) = (users.users().is_empty(), blank.default_user) {
                // A catalog set aside left no users: the configured administrator is the way in.
                users.add_default_user(&user.name, &user.password)?;
                made = Some(MadeUser::DefaultUser(user.name.clone()));
                tracing::warn!(user = %user.name, "no users were stored: added the --default-user administrator");
            }
            drop_definitions_without_a_record(users, keep, broker, now)?
        }
        (None, Some(s)) if s.schema_version == FILE_SCHEMA_VERSION => {
            let users = UserStore::from_file(&s.payload, loopback_users).context("reading users.snap")?;
            let users = users.persist_with(saver);
            users.save()?;
            storage.remove(LEGACY_USERS_FILE).context("removing users.snap once moved")?;
            tracing::info!("{LEGACY_USERS_FILE} moved into the catalog");
            drop_definitions_without_a_record(users, keep, broker, now)?
        }
        (None, Some(s)) => {
            anyhow::bail!("{LEGACY_USERS_FILE} schema version {} is not supported", s.schema_version)
        }
        (None, None) => {
            // Every record goes in with one save (one catalog commit), not one commit per vhost.
            let users = match (blank.history, blank.default_user) {
                (_, Some(user)) => {
                    made = Some(MadeUser::DefaultUser(user.name.clone()));
                    UserStore::with_default_user(loopback_users, &user.name, &user.password)?
                }
                (CatalogHistory::FirstStart, None) => {
                    made = Some(MadeUser::Guest);
                    UserStore::with_defaults(loopback_users)
                }
                (CatalogHistory::HeldBefore, None) => {
                    tracing::error!(
                        "no users are stored, though this data directory held a catalog before \
                         (it was damaged and set aside): no default user is created, so nobody \
                         can log in; start with --default-user and --default-pass to add an \
                         administrator (docs/storage.md)"
                    );
                    UserStore::without_users(loopback_users)
                }
            };
            for name in broker.vhost_names() {
                if users.vhost(&name).is_none() {
                    users.put_vhost(VhostRecord { name, ..VhostRecord::default() })?;
                }
            }
            let users = users.persist_with(saver);
            users.save()?;
            users
        }
    };
    for vhost in users.vhosts() {
        broker.add_vhost(&vhost.name);
        broker.set_vhost_max_queues(&vhost.name, vhost.limits.effective("max-queues"));
    }
    Ok((users, made))
}

/// What decides the users of a catalog that has none.
#[derive(Clone, Copy, Debug)]
pub struct Blank<'a> {
    /// Only a first start gets guest/guest.
    pub history: CatalogHistory,
    /// Made instead of guest, and also where a catalog set aside left no users.
    pub default_user: Option<&'a DefaultUser>,
}

/// The saver: puts the changed records into the catalog and commits (one sync) before the
/// change is visible.
fn saver(catalog: Arc<Mutex<Catalog>>) -> hourglass_mgmt::users::Saver {
    Box::new(move |changes: &[CatalogChange]| {
        let mut catalog = lock_catalog(&catalog);
        for change in changes {
            if let Err(error) = apply_change(&mut catalog, change) {
                // All of the change or none of it: the user store undoes it too.
                catalog.discard();
                return Err(error.to_string());
            }
        }
        commit_catalog(&mut catalog).map_err(|e| e.to_string())
    })
}

/// Drops from `broker` the vhosts the user store has no record of (or, for those in `keep`, adds
/// a record). Only a data directory written before vhost deletions were ordered (definitions
/// first, record last) has any.
fn drop_definitions_without_a_record(
    users: UserStore,
    keep: &[String],
    broker: &mut Broker,
    now: Timestamp,
) -> anyhow::Result<UserStore> {
    let kept: Vec<String> = users.vhosts().into_iter().map(|v| v.name).collect();
    for name in broker.vhost_names() {
        if kept.contains(&name) {
            continue;
        }
        if keep.contains(&name) {
            tracing::error!(vhost = %name, "vhost not among the stored vhost records holds orphaned messages: kept");
            users.put_vhost(VhostRecord { name, ..VhostRecord::default() })?;
        } else {
            tracing::warn!(vhost = %name, "vhost not among the stored vhost records: deleting it");
            broker.delete_vhost(&name, now);
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use hourglass_broker::BrokerConfig;
    use hourglass_mgmt::users::Permission;
    use hourglass_store::catalog::CatalogConfig;
    use hourglass_store::snapshot::write_snapshot;
    use hourglass_store::MemStorage;

    use super::*;
    use crate::catalog_file::{open_catalog, DamagedDefinitions};

    fn blank(history: CatalogHistory) -> Blank<'static> {
        Blank { history, default_user: None }
    }

    fn broker() -> Broker {
        Broker::new(BrokerConfig::default())
    }

    /// The data directory's catalog, as a start opens it.
    fn catalog(storage: &MemStorage) -> Arc<Mutex<Catalog>> {
        let (catalog, _) =
            Catalog::open(Arc::new(storage.clone()), "catalog", CatalogConfig::default()).unwrap();
        Arc::new(Mutex::new(catalog))
    }

    fn start(storage: &MemStorage, keep: &[String], broker: &mut Broker) -> UserStore {
        let history = CatalogHistory::FirstStart;
        open(catalog(storage), blank(history), storage, vec![], keep, broker, Timestamp::ZERO).unwrap().0
    }

    /// A first start saves the defaults; changes are saved and read back at the next start,
    /// and the broker gets the saved vhosts.
    #[test]
    fn changes_survive_a_restart() {
        let storage = MemStorage::new();
        let users = start(&storage, &[], &mut broker());
        users.put_user_with_password("bob", "pw", vec![]).unwrap();
        users.put_vhost(VhostRecord { name: "dev".into(), ..Default::default() }).unwrap();
        users.put_permission(Permission::full("bob", "dev")).unwrap();
        drop(users);
        let mut restarted = broker();
        let users = start(&storage, &[], &mut restarted);
        assert!(users.check_login("bob", "pw", false).is_ok());
        assert!(users.check_login("guest", "guest", false).is_ok(), "the defaults were saved");
        assert_eq!(users.permission("dev", "bob"), Some(Permission::full("bob", "dev")));
        assert!(restarted.has_vhost("dev"));
    }

    /// A change writes the records it changed, not the whole store: one user more is one entry
    /// more, and deleting a vhost deletes its record and the permissions on it.
    #[test]
    fn a_change_writes_only_its_records() {
        let storage = MemStorage::new();
        let shared = catalog(&storage);
        let history = CatalogHistory::FirstStart;
        let (users, made) =
            open(shared.clone(), blank(history), &storage, vec![], &[], &mut broker(), Timestamp::ZERO)
                .unwrap();
        assert_eq!(made, Some(MadeUser::Guest), "a first start makes guest");
        let count = || lock_catalog(&shared).len();
        let before = count();
        for i in 0..50 {
            users.put_user_with_password(&format!("u{i}"), "pw", vec![]).unwrap();
        }
        assert_eq!(count(), before + 50);
        let log = || storage.open("catalog.log").unwrap().len_bytes().unwrap();
        let (at_50, _) = (log(), users.put_user_with_password("u50", "pw", vec![]).unwrap());
        assert!(log() - at_50 < 512, "one user's record, not the whole store ({} bytes)", log() - at_50);
        users.put_vhost(VhostRecord { name: "dev".into(), ..Default::default() }).unwrap();
        users.put_permission(Permission::full("u1", "dev")).unwrap();
        let with_dev = count();
        users.delete_vhost("dev").unwrap();
        assert_eq!(count(), with_dev - 2);
    }

    /// An older data directory's users.snap moves into the catalog once: its users log in, the
    /// file is gone, and the next start reads the catalog.
    #[test]
    fn an_older_users_file_moves_into_the_catalog() {
        let older = UserStore::with_defaults(vec![]);
        older.put_user_with_password("carol", "pw", vec![]).unwrap();
        let storage = MemStorage::new();
        write_snapshot(&storage, LEGACY_USERS_FILE, FILE_SCHEMA_VERSION, &older.encoded_file()).unwrap();
        let users = start(&storage, &[], &mut broker());
        assert!(users.check_login("carol", "pw", false).is_ok());
        assert!(read_snapshot(&storage, LEGACY_USERS_FILE).unwrap().is_none(), "moved, then removed");
        drop(users);
        let users = start(&storage, &[], &mut broker());
        assert!(users.check_login("carol", "pw", false).is_ok());
    }

    /// The stored vhost records decide which vhosts exist: one the broker kept but the store
    /// lost goes.
    #[test]
    fn broker_vhosts_follow_the_stored_records() {
        let storage = MemStorage::new();
        drop(start(&storage, &[], &mut broker()));
        let mut restarted = broker();
        restarted.add_vhost("stale");
        start(&storage, &[], &mut restarted);
        assert!(!restarted.has_vhost("stale"));
        assert!(restarted.has_vhost("/"));
    }

    /// Issue 12: a vhost the store lacks but that holds queues recreated for orphaned messages
    /// is added to the store, not deleted (that would purge the messages).
    #[test]
    fn a_vhost_holding_orphaned_messages_is_kept() {
        let storage = MemStorage::new();
        drop(start(&storage, &[], &mut broker()));
        let mut restarted = broker();
        restarted.add_vhost("orphans");
        let users = start(&storage, &["orphans".to_owned()], &mut restarted);
        assert!(restarted.has_vhost("orphans"));
        assert!(users.vhost("orphans").is_some());
    }

    /// Issue 22: a data directory that held a catalog before gets no default user when its
    /// users are gone (a damaged catalog set aside): guest does not come back; the broker's
    /// vhosts are still recorded.
    #[test]
    fn no_default_user_where_a_catalog_was_before() {
        let storage = MemStorage::new();
        let mut old = broker();
        old.add_vhost("prod");
        let history = CatalogHistory::HeldBefore;
        let (users, made) =
            open(catalog(&storage), blank(history), &storage, vec![], &[], &mut old, Timestamp::ZERO)
                .unwrap();
        assert_eq!(made, None, "no administrator made");
        assert!(users.check_login("guest", "guest", true).is_err());
        assert!(users.vhost("prod").is_some());
        drop(users);
        let again = start(&storage, &[], &mut broker());
        assert!(again.check_login("guest", "guest", true).is_err(), "nor at the next start");
    }

    /// Issue 37 finding 7: a damaged catalog set aside gives back no credential taken away.
    /// The damaged commit (carol's password change) is skipped and the commits after it apply:
    /// guest, deleted after it, stays deleted, and bob logs in with the password set after it
    /// only. carol is withheld: her change does not read, so neither password may log in.
    #[test]
    fn a_set_aside_catalog_gives_back_no_credential_taken_away() {
        let storage = MemStorage::new();
        let users = start(&storage, &[], &mut broker());
        users.put_user_with_password("bob", "old", vec![]).unwrap();
        users.put_user_with_password("carol", "old", vec![]).unwrap();
        users.put_user_with_password("carol", "rotated", vec![]).unwrap();
        users.put_user_with_password("bob", "new", vec![]).unwrap();
        assert!(users.delete_user("guest").unwrap());
        drop(users);
        let log = storage.open("catalog.log").unwrap();
        let mut bytes = vec![0; log.len_bytes().unwrap() as usize];
        log.read_exact_at(0, &mut bytes).unwrap();
        // carol's last record: the password change.
        let at = bytes.windows(5).rposition(|w| w == b"carol").unwrap();
        log.write_all_at(at as u64, b"X").unwrap();

        let shared: Arc<dyn Storage> = Arc::new(storage.clone());
        let refused = open_catalog(shared.clone(), DamagedDefinitions::Refuse, 7).unwrap_err();
        assert!(refused.to_string().contains("damage, not a torn tail"), "{refused}");
        let opened = open_catalog(shared, DamagedDefinitions::SetAside, 7).unwrap();
        let history = CatalogHistory::HeldBefore;
        let catalog = Arc::new(Mutex::new(opened.catalog));
        let (users, made) =
            open(catalog, blank(history), &storage, vec![], &[], &mut broker(), Timestamp::ZERO).unwrap();
        assert_eq!(made, None);
        assert!(users.check_login("guest", "guest", true).is_err(), "guest stays deleted");
        assert!(users.check_login("bob", "old", true).is_err(), "bob's old password");
        assert!(users.check_login("bob", "new", true).is_ok(), "bob's new password");
        assert!(users.check_login("carol", "old", true).is_err(), "carol's old password");
        assert!(users.user("carol").is_none(), "carol is withheld");
    }

    /// With no stored users at all (a data directory from before users were kept), the
    /// broker's vhosts are adopted.
    #[test]
    fn older_data_dir_adopts_broker_vhosts() {
        let storage = MemStorage::new();
        let mut old = broker();
        old.add_vhost("legacy");
        let users = start(&storage, &[], &mut old);
        assert!(users.vhost("legacy").is_some());
    }
}
