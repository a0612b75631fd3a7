//! The saved form of the user store's records: users (with RabbitMQ's password hashes, never
//! plain passwords), vhosts and permissions as JSON, in the shapes of RabbitMQ's definitions file
//! — one JSON value per record in the catalog (`entries.rs`), or all of them in one document in
//! the `users.snap` older versions kept (read once, to move it into the catalog; schema
//! [`FILE_SCHEMA_VERSION`]). `loopback_users` is configuration and is not saved. Reading checks
//! what the store relies on: known hashing algorithm, patterns that compile, permissions naming a
//! user and a vhost that exist. Limits (users' and vhosts') were added without a schema change: a
//! record without them reads as "no limits".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Granted, HashingAlgorithm, Limits, Permission, State, TopicPermission, User, VhostRecord};

/// The layout of the JSON below; bump it (and read the old one) when it changes.
pub const FILE_SCHEMA_VERSION: u32 = 1;

/// Why a saved file could not be read.
#[derive(Debug)]
pub struct FileError(pub String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileError {}

#[derive(Serialize, Deserialize)]
pub(super) struct SavedFile {
    pub(super) users: Vec<SavedUser>,
    pub(super) vhosts: Vec<SavedVhost>,
    pub(super) permissions: Vec<SavedPermission>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) topic_permissions: Vec<SavedTopicPermission>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct SavedTopicPermission {
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) exchange: String,
    pub(super) write: String,
    pub(super) read: String,
}

#[derive(Serialize, Deserialize)]
pub(super) struct SavedUser {
    pub(super) name: String,
    pub(super) password_hash: String,
    pub(super) hashing_algorithm: String,
    pub(super) tags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) limits: BTreeMap<String, i64>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct SavedVhost {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) tags: Vec<String>,
    pub(super) default_queue_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) limits: BTreeMap<String, i64>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct SavedPermission {
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) configure: String,
    pub(super) write: String,
    pub(super) read: String,
}

impl SavedUser {
    pub(super) fn of(u: &User) -> SavedUser {
        SavedUser {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            hashing_algorithm: u.hashing_algorithm.name().to_owned(),
            tags: u.tags.clone(),
            limits: u.limits.entries().clone(),
        }
    }
}

impl SavedVhost {
    pub(super) fn of(v: &VhostRecord) -> SavedVhost {
        SavedVhost {
            name: v.name.clone(),
            description: v.description.clone(),
            tags: v.tags.clone(),
            default_queue_type: v.default_queue_type.clone(),
            limits: v.limits.entries().clone(),
        }
    }
}

impl SavedPermission {
    pub(super) fn of(p: &Permission) -> SavedPermission {
        SavedPermission {
            user: p.user.clone(),
            vhost: p.vhost.clone(),
            configure: p.configure.clone(),
            write: p.write.clone(),
            read: p.read.clone(),
        }
    }
}

impl SavedTopicPermission {
    pub(super) fn of(t: &TopicPermission) -> SavedTopicPermission {
        SavedTopicPermission {
            user: t.user.clone(),
            vhost: t.vhost.clone(),
            exchange: t.exchange.clone(),
            write: t.write.clone(),
            read: t.read.clone(),
        }
    }
}

/// The JSON document for `state` (sorted by name: equal states give equal bytes).
pub(super) fn encode(state: &State) -> Vec<u8> {
    let file = SavedFile {
        users: state.users.values().map(SavedUser::of).collect(),
        vhosts: state.vhosts.values().map(SavedVhost::of).collect(),
        permissions: state.permissions.values().map(|g| SavedPermission::of(&g.permission)).collect(),
        topic_permissions: state.topic_permissions.values().map(SavedTopicPermission::of).collect(),
    };
    // Serialising plain strings and vectors to a Vec cannot fail.
    serde_json::to_vec_pretty(&file).expect("plain data serialises")
}

/// The records in a saved document (without `loopback_users`).
pub(super) fn decode(payload: &[u8]) -> Result<State, FileError> {
    let file: SavedFile =
        serde_json::from_slice(payload).map_err(|e| FileError(format!("users file is not valid: {e}")))?;
    from_saved(file)
}

/// The records, checked as the module doc says.
pub(super) fn from_saved(file: SavedFile) -> Result<State, FileError> {
    let mut state = State::default();
    for u in file.users {
        let Some(hashing_algorithm) = HashingAlgorithm::parse(&u.hashing_algorithm) else {
            return Err(FileError(format!(
                "user {}: unsupported hashing_algorithm {}",
                u.name, u.hashing_algorithm
            )));
        };
        let user = User {
            name: u.name.clone(),
            password_hash: u.password_hash,
            hashing_algorithm,
            tags: u.tags,
            limits: Limits::from_entries(u.limits),
        };
        state.users.insert(u.name, user);
    }
    for v in file.vhosts {
        let record = VhostRecord {
            name: v.name.clone(),
            description: v.description,
            tags: v.tags,
            default_queue_type: v.default_queue_type,
            limits: Limits::from_entries(v.limits),
        };
        state.vhosts.insert(v.name, record);
    }
    for t in file.topic_permissions {
        if !state.users.contains_key(&t.user) || !state.vhosts.contains_key(&t.vhost) {
            return Err(FileError(format!(
                "topic permission of {} on {}: no such user or vhost",
                t.user, t.vhost
            )));
        }
        let topic = TopicPermission {
            user: t.user,
            vhost: t.vhost,
            exchange: t.exchange,
            write: t.write,
            read: t.read,
        };
        state
            .topic_permissions
            .insert((topic.vhost.clone(), topic.user.clone(), topic.exchange.clone()), topic);
    }
    let mut permissions = BTreeMap::new();
    for p in file.permissions {
        if !state.users.contains_key(&p.user) || !state.vhosts.contains_key(&p.vhost) {
            return Err(FileError(format!("permission of {} on {}: no such user or vhost", p.user, p.vhost)));
        }
        let permission =
            Permission { user: p.user, vhost: p.vhost, configure: p.configure, write: p.write, read: p.read };
        let topics = super::topics::of(&state, &permission.vhost, &permission.user);
        let granted = Granted::compile(permission, &topics).map_err(|e| FileError(e.to_string()))?;
        permissions.insert((granted.permission.vhost.clone(), granted.permission.user.clone()), granted);
    }
    state.permissions = permissions;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::super::UserStore;
    use super::*;

    /// A store saved and read back has the same users (hashes, not passwords), vhosts and
    /// permissions, and its users still log in.
    #[test]
    fn saved_store_reads_back() {
        let store = UserStore::with_defaults(vec![]);
        store.put_user_with_password("bob", "secret", vec!["monitoring".into()]).unwrap();
        store
            .put_vhost(VhostRecord { name: "dev".into(), description: "d".into(), ..Default::default() })
            .unwrap();
        let p = Permission { configure: "^bob-".into(), ..Permission::full("bob", "dev") };
        store.put_permission(p.clone()).unwrap();
        let md5 = HashingAlgorithm::Md5;
        let carol = User {
            name: "carol".into(),
            password_hash: md5.hash_with_salt(&[9, 8, 7, 6], "old"),
            hashing_algorithm: md5,
            tags: vec![],
            limits: Limits::default()
                .with(super::super::LimitsOf::User, "max-channels", &serde_json::json!(3))
                .unwrap(),
        };
        store.put_user(carol).unwrap();
        let limits = Limits::default()
            .with(super::super::LimitsOf::Vhost, "max-queues", &serde_json::json!(-1))
            .unwrap();
        store.set_vhost_limits("dev", limits.clone()).unwrap();
        let bytes = encode(&store.read());
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(!text.contains("secret"), "{text}");
        let back = UserStore::from_file(&bytes, vec![]).unwrap();
        assert_eq!(back.users(), store.users());
        assert_eq!(back.vhosts(), store.vhosts());
        assert_eq!(back.permissions(), store.permissions());
        assert!(back.check_login("bob", "secret", false).is_ok());
        assert!(back.check_login("carol", "old", false).is_ok(), "an MD5 hash keeps its algorithm");
        assert_eq!(back.vhost("dev").unwrap().limits, limits, "-1 kept as given");
        assert_eq!(back.permission("dev", "bob"), Some(p));
    }

    /// A damaged or inconsistent file is refused with a reason, never half-loaded.
    #[test]
    fn bad_files_are_refused() {
        assert!(decode(b"{").is_err());
        let orphan = br#"{"users":[],"vhosts":[],"permissions":[{"user":"x","vhost":"/","configure":"","write":"","read":""}]}"#;
        assert!(decode(orphan).unwrap_err().0.contains("no such user or vhost"));
        let bad_regex = br#"{"users":[{"name":"x","password_hash":"","hashing_algorithm":"rabbit_password_hashing_sha256","tags":[]}],"vhosts":[{"name":"/","description":"","tags":[],"default_queue_type":null}],"permissions":[{"user":"x","vhost":"/","configure":"(","write":"","read":""}]}"#;
        assert!(decode(bad_regex).unwrap_err().0.contains("invalid configure regexp"));
    }
}
