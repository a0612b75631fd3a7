//! Users, vhosts and permissions across restarts: `<data-dir>/users.snap` (docs/storage.md).
//!
//! The management user store (`hourglass_mgmt::UserStore`) encodes itself (JSON, RabbitMQ's
//! definitions shapes, password hashes only); this module keeps that payload in an atomic
//! snapshot file (`hourglass_store::snapshot`: temp file, fsync, rename, directory fsync) and
//! writes it on every change, before the change is visible. On start it loads the file, or
//! starts from RabbitMQ's defaults (guest on `/`) and saves them.
//!
//! Vhosts live in two places: the user store (records, permissions) and the broker (exchanges,
//! queues; `definitions.snap`). The user store is the authority: at start the broker gets every
//! vhost the file names and loses any it has that the file does not (a crash between the two
//! writes of a vhost deletion). A data directory from before this file existed has only the
//! broker's list: those vhosts are adopted instead.

use std::sync::Arc;

use anyhow::Context;
use hourglass_broker::{Broker, Timestamp};
use hourglass_mgmt::users::{VhostRecord, FILE_SCHEMA_VERSION};
use hourglass_mgmt::UserStore;
use hourglass_store::snapshot::{read_snapshot, write_snapshot};
use hourglass_store::Storage;

/// The users, vhosts and permissions snapshot's file name in the data directory.
pub const USERS_FILE: &str = "users.snap";

/// Loads (or creates) the user store kept in `storage`, brings `broker`'s vhosts in line with it,
/// and makes every later change save to `storage`. A vhost in `keep` (it holds queues recreated
/// for orphaned messages, issue 12) is added to the file rather than deleted from the broker:
/// deleting it would purge those messages.
pub fn open(
    storage: Arc<dyn Storage>,
    loopback_users: Vec<String>,
    keep: &[String],
    broker: &mut Broker,
    now: Timestamp,
) -> anyhow::Result<UserStore> {
    let snapshot = read_snapshot(storage.as_ref(), USERS_FILE).context("reading users")?;
    let saver_storage = storage.clone();
    let saver = Box::new(move |payload: &[u8]| {
        write_snapshot(saver_storage.as_ref(), USERS_FILE, FILE_SCHEMA_VERSION, payload)
            .map_err(|e| e.to_string())
    });
    let users = match snapshot {
        Some(s) if s.schema_version == FILE_SCHEMA_VERSION => {
            let users = UserStore::from_file(&s.payload, loopback_users).context("reading users")?;
            let kept: Vec<String> = users.vhosts().into_iter().map(|v| v.name).collect();
            let users = users.persist_with(saver);
            for name in broker.vhost_names() {
                if kept.contains(&name) {
                    continue;
                }
                if keep.contains(&name) {
                    tracing::error!(vhost = %name, "vhost not in {USERS_FILE} holds orphaned messages: kept");
                    users.put_vhost(VhostRecord { name, ..VhostRecord::default() })?;
                } else {
                    tracing::warn!(vhost = %name, "vhost not in {USERS_FILE}: deleting it");
                    broker.delete_vhost(&name, now);
                }
            }
            users
        }
        Some(s) => anyhow::bail!("{USERS_FILE} schema version {} is not supported", s.schema_version),
        None => {
            let users = UserStore::with_defaults(loopback_users).persist_with(saver);
            for name in broker.vhost_names() {
                if users.vhost(&name).is_none() {
                    users.put_vhost(VhostRecord { name, ..VhostRecord::default() })?;
                }
            }
            users.save()?;
            users
        }
    };
    for vhost in users.vhosts() {
        broker.add_vhost(&vhost.name);
        broker.set_vhost_max_queues(&vhost.name, vhost.limits.effective("max-queues"));
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use hourglass_broker::BrokerConfig;
    use hourglass_mgmt::users::Permission;
    use hourglass_store::MemStorage;

    use super::*;

    fn broker() -> Broker {
        Broker::new(BrokerConfig::default())
    }

    /// A first start saves the defaults; changes are saved and read back at the next start,
    /// and the broker gets the saved vhosts.
    #[test]
    fn changes_survive_a_restart() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let users = open(storage.clone(), vec![], &[], &mut broker(), Timestamp::ZERO).unwrap();
        assert!(read_snapshot(storage.as_ref(), USERS_FILE).unwrap().is_some());
        users.put_user_with_password("bob", "pw", vec![]).unwrap();
        users.put_vhost(VhostRecord { name: "dev".into(), ..Default::default() }).unwrap();
        users.put_permission(Permission::full("bob", "dev")).unwrap();
        drop(users);
        let mut restarted = broker();
        let users = open(storage, vec![], &[], &mut restarted, Timestamp::ZERO).unwrap();
        assert!(users.check_login("bob", "pw", false).is_ok());
        assert_eq!(users.permission("dev", "bob"), Some(Permission::full("bob", "dev")));
        assert!(restarted.has_vhost("dev"));
    }

    /// The saved file decides which vhosts exist: one the broker kept but the file lost goes.
    #[test]
    fn broker_vhosts_follow_the_file() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        drop(open(storage.clone(), vec![], &[], &mut broker(), Timestamp::ZERO).unwrap());
        let mut restarted = broker();
        restarted.add_vhost("stale");
        open(storage, vec![], &[], &mut restarted, Timestamp::ZERO).unwrap();
        assert!(!restarted.has_vhost("stale"));
        assert!(restarted.has_vhost("/"));
    }

    /// Issue 12: a vhost the file lacks but that holds queues recreated for orphaned messages is
    /// added to the file, not deleted (that would purge the messages).
    #[test]
    fn a_vhost_holding_orphaned_messages_is_kept() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        drop(open(storage.clone(), vec![], &[], &mut broker(), Timestamp::ZERO).unwrap());
        let mut restarted = broker();
        restarted.add_vhost("orphans");
        let users = open(storage, vec![], &["orphans".to_owned()], &mut restarted, Timestamp::ZERO).unwrap();
        assert!(restarted.has_vhost("orphans"));
        assert!(users.vhost("orphans").is_some());
    }

    /// Without a file (an older data directory), the broker's vhosts are adopted.
    #[test]
    fn older_data_dir_adopts_broker_vhosts() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let mut old = broker();
        old.add_vhost("legacy");
        let users = open(storage, vec![], &[], &mut old, Timestamp::ZERO).unwrap();
        assert!(users.vhost("legacy").is_some());
    }
}
