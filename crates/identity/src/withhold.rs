//! Credentials a damaged catalog cannot vouch for, left out when a start sets it aside
//! (`--set-aside-damaged-definitions`; issue 37 finding 7; docs/storage.md "When the start is
//! refused").
//!
//! A salvage applies every whole commit of the log, those after the damage too, but the records
//! of the damaged commits do not read, and any of them may have deleted a user, changed a
//! password, narrowed a permission or revoked an access key. A rollback must never give back a
//! credential an operator took away, so the identity records that no commit after the loss
//! wrote are not restored:
//! - users, permissions, topic permissions and access keys: withheld (named in the log; an
//!   administrator makes them again, or `--default-user` gets in when no user is left);
//! - vhost records: kept as they read. They grant nothing by themselves, and a vhost taken away
//!   would take its queues and their messages with it;
//! - then whatever still names a user or vhost that is gone (a permission written after the
//!   loss for a user only the lost commit made) goes too, as a deletion of that user or vhost
//!   would have taken it: the user store reads only records that hang together.

use std::collections::BTreeMap;

use bytes::Bytes;
use hourglass_broker::IDENTITY_SCOPE;

use super::entries::{key, ACCESS_KEY, PERMISSION, TOPIC_PERMISSION, USER, VHOST};
use super::AccessKeyRecord;

/// What [`withhold_uncertain_credentials`] left out, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Withheld {
    pub users: Vec<String>,
    /// `user on vhost`.
    pub permissions: Vec<String>,
    /// `user on vhost for exchange`.
    pub topic_permissions: Vec<String>,
    /// Access key ids.
    pub access_keys: Vec<String>,
    /// Users still there.
    pub users_left: usize,
}

impl Withheld {
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
            && self.permissions.is_empty()
            && self.topic_permissions.is_empty()
            && self.access_keys.is_empty()
    }
}

/// Removes from a salvaged catalog's `entries` the credentials `is_current` does not vouch for,
/// then whatever names a user or vhost no longer there (module doc).
pub fn withhold_uncertain_credentials(
    entries: &mut BTreeMap<Bytes, Bytes>,
    is_current: impl Fn(&[u8]) -> bool,
) -> Withheld {
    let uncertain: Vec<Bytes> = entries
        .keys()
        .filter(|k| kind(k).is_some_and(|kind| kind != VHOST) && !is_current(k))
        .cloned()
        .collect();
    let mut withheld = Withheld::default();
    for k in uncertain {
        entries.remove(&k);
        withheld.note(&k);
    }
    let dangling: Vec<Bytes> = entries
        .iter()
        .filter(|(k, v)| names_a_missing_record(entries, k, v))
        .map(|(k, _)| k.clone())
        .collect();
    for k in dangling {
        entries.remove(&k);
        withheld.note(&k);
    }
    withheld.users_left = entries.keys().filter(|k| kind(k) == Some(USER)).count();
    withheld
}

impl Withheld {
    /// Names the removed record `key`.
    fn note(&mut self, key: &[u8]) {
        let parts = parts(key);
        let name =
            |i: usize| parts.get(i).map_or_else(String::new, |p| String::from_utf8_lossy(p).into_owned());
        match kind(key) {
            Some(USER) => self.users.push(name(0)),
            Some(PERMISSION) => self.permissions.push(format!("{} on {}", name(1), name(0))),
            Some(TOPIC_PERMISSION) => {
                self.topic_permissions.push(format!("{} on {} for {}", name(1), name(0), name(2)))
            }
            Some(ACCESS_KEY) => self.access_keys.push(name(0)),
            _ => {}
        }
    }
}

/// Whether the permission, topic permission or access key `key` names a user or vhost whose
/// record is not in `entries`.
fn names_a_missing_record(entries: &BTreeMap<Bytes, Bytes>, key: &[u8], value: &[u8]) -> bool {
    let parts = parts(key);
    let missing = |kind: u8, name: &[u8]| !entries.contains_key(&key_of(kind, name));
    match (kind(key), parts.as_slice()) {
        (Some(PERMISSION), [vhost, user]) | (Some(TOPIC_PERMISSION), [vhost, user, _]) => {
            missing(VHOST, vhost) || missing(USER, user)
        }
        // A record that does not read is left for the user store to refuse, naming it.
        (Some(ACCESS_KEY), _) => serde_json::from_slice::<AccessKeyRecord>(value)
            .is_ok_and(|record| missing(USER, record.user.as_bytes())),
        _ => false,
    }
}

fn key_of(kind: u8, name: &[u8]) -> Bytes {
    key(kind, &[name])
}

/// The kind of identity record `key` is (`None`: not an identity key).
fn kind(key: &[u8]) -> Option<u8> {
    match key {
        [IDENTITY_SCOPE, kind, ..] => Some(*kind),
        _ => None,
    }
}

/// The length-prefixed parts of identity key `key` (`composite_key`), as far as they read.
fn parts(key: &[u8]) -> Vec<&[u8]> {
    let mut rest = key.get(2..).unwrap_or_default();
    let mut parts = Vec::new();
    while let Some(len) = rest.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize) {
        let Some(part) = rest.get(4..4 + len) else { break };
        parts.push(part);
        rest = &rest[4 + len..];
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::super::{entries, Permission, TopicPermission, UserStore, VhostRecord};
    use super::*;
    use hourglass_broker::CatalogChange;

    /// The catalog entries of guest and bob (each with a permission on `/`, bob also on `dev`
    /// with a topic permission and an access key).
    fn stored() -> BTreeMap<Bytes, Bytes> {
        let store = UserStore::with_defaults(vec![]);
        store.put_user_with_password("bob", "secret", vec![]).unwrap();
        store.put_vhost(VhostRecord { name: "dev".into(), ..VhostRecord::default() }).unwrap();
        store.put_permission(Permission::full("bob", "/")).unwrap();
        store.put_permission(Permission::full("bob", "dev")).unwrap();
        let topic = TopicPermission {
            user: "bob".into(),
            vhost: "dev".into(),
            exchange: "amq.topic".into(),
            write: ".*".into(),
            read: ".*".into(),
        };
        store.put_topic_permission(topic).unwrap();
        let mut map: BTreeMap<Bytes, Bytes> = entries::all(&store.read())
            .into_iter()
            .filter_map(|change| match change {
                CatalogChange::Put { key, value } => Some((key, value)),
                _ => None,
            })
            .collect();
        let access_key =
            br#"{"id":"HGAKBOB","user":"bob","created_ms":1,"sealed":{"nonce":"","ciphertext":""}}"#;
        map.insert(key_of(ACCESS_KEY, b"HGAKBOB"), Bytes::from_static(access_key));
        map
    }

    /// Nothing certain: every user, permission, topic permission and access key is withheld,
    /// the vhost records stay, and what is left reads as a user store (with no users).
    #[test]
    fn nothing_current_withholds_every_credential_and_keeps_vhosts() {
        let mut map = stored();
        let withheld = withhold_uncertain_credentials(&mut map, |_| false);
        assert_eq!(withheld.users, ["bob", "guest"]);
        assert_eq!(withheld.permissions, ["bob on /", "guest on /", "bob on dev"]);
        assert_eq!(withheld.topic_permissions, ["bob on dev for amq.topic"]);
        assert_eq!((withheld.access_keys.as_slice(), withheld.users_left), (&["HGAKBOB".to_owned()][..], 0));
        let store = UserStore::from_catalog(map.iter().map(|(k, v)| (&k[..], &v[..])), vec![])
            .unwrap()
            .expect("identity entries");
        assert!(store.users().is_empty());
        assert_eq!(store.vhosts().len(), 2, "the vhost records stay");
    }

    /// A user written after the loss stays, with its password as then; its permission written
    /// before does not. A permission written after the loss for a user that is gone goes too.
    #[test]
    fn only_records_written_after_the_loss_stay_and_nothing_is_left_dangling() {
        let mut map = stored();
        let current =
            [key_of(USER, b"bob"), key(PERMISSION, &[b"dev", b"bob"]), key(PERMISSION, &[b"/", b"guest"])];
        let withheld = withhold_uncertain_credentials(&mut map, |k| current.iter().any(|c| c[..] == *k));
        assert_eq!(withheld.users, ["guest"]);
        assert_eq!(withheld.permissions, ["bob on /", "guest on /"], "guest's names a user that is gone");
        assert_eq!(withheld.users_left, 1);
        let store =
            UserStore::from_catalog(map.iter().map(|(k, v)| (&k[..], &v[..])), vec![]).unwrap().unwrap();
        assert!(store.check_login("bob", "secret", true).is_ok());
        assert!(store.check_login("guest", "guest", true).is_err());
        assert_eq!(store.permission("dev", "bob"), Some(Permission::full("bob", "dev")));
        assert_eq!(store.permission("/", "bob"), None);
    }

    /// Everything current: nothing is withheld.
    #[test]
    fn everything_current_withholds_nothing() {
        let mut map = stored();
        let before = map.clone();
        assert!(withhold_uncertain_credentials(&mut map, |_| true).is_empty());
        assert_eq!(map, before);
    }
}
