//! Users, their permissions and the vhost records, shared by the AMQP side (as the session's
//! [`Authenticator`]) and the HTTP API.
//!
//! Passwords are stored as RabbitMQ stores them (`rabbit_password_hashing_sha256`):
//! `base64(salt ++ sha256(salt ++ utf8(password)))` with a 4-byte salt, so definitions exported
//! from RabbitMQ import here and back unchanged.
//!
//! Not yet enforced: the configure/write/read regexes on each AMQP operation. A permission entry
//! only decides whether a user may open a vhost.

use std::collections::BTreeMap;
use std::sync::RwLock;

use base64::Engine;
use hourglass_session::{Authenticator, VhostAccess};
use sha2::{Digest, Sha256};

pub const HASHING_ALGORITHM: &str = "rabbit_password_hashing_sha256";
/// RabbitMQ's salt size for its password hashes.
const SALT_BYTES: usize = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// `base64(salt ++ sha256(salt ++ password))`; empty means password logins are refused.
    pub password_hash: String,
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    pub user: String,
    pub vhost: String,
    pub configure: String,
    pub write: String,
    pub read: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VhostRecord {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub default_queue_type: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    users: BTreeMap<String, User>,
    vhosts: BTreeMap<String, VhostRecord>,
    /// Keyed by (vhost, user).
    permissions: BTreeMap<(String, String), Permission>,
    /// Users that may log in only from a loopback address (RabbitMQ's `loopback_users`).
    loopback_users: Vec<String>,
}

/// The user and vhost records. Locks are held only for a lookup or an update, never across an
/// `.await`.
#[derive(Debug, Default)]
pub struct UserStore {
    state: RwLock<State>,
    salt_counter: std::sync::atomic::AtomicU64,
}

impl UserStore {
    /// RabbitMQ's first-start setup: vhost `/`, user guest/guest tagged administrator with full
    /// permissions on `/`; `loopback_users` may log in only from loopback (default: guest).
    pub fn with_defaults(loopback_users: Vec<String>) -> Self {
        let store = UserStore::default();
        store.write().loopback_users = loopback_users;
        store.put_vhost(VhostRecord { name: "/".into(), ..VhostRecord::default() });
        store.put_user_with_password("guest", "guest", vec!["administrator".into()]);
        store.put_permission(Permission {
            user: "guest".into(),
            vhost: "/".into(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        });
        store
    }

    pub fn put_user(&self, user: User) {
        self.write().users.insert(user.name.clone(), user);
    }

    pub fn put_user_with_password(&self, name: &str, password: &str, tags: Vec<String>) {
        let hash = self.hash_password(password);
        self.put_user(User { name: name.to_owned(), password_hash: hash, tags });
    }

    /// Deletes a user and its permissions; false when there was no such user.
    pub fn delete_user(&self, name: &str) -> bool {
        let mut state = self.write();
        state.permissions.retain(|(_, user), _| user != name);
        state.users.remove(name).is_some()
    }

    pub fn user(&self, name: &str) -> Option<User> {
        self.read().users.get(name).cloned()
    }

    pub fn users(&self) -> Vec<User> {
        self.read().users.values().cloned().collect()
    }

    pub fn put_vhost(&self, vhost: VhostRecord) {
        self.write().vhosts.insert(vhost.name.clone(), vhost);
    }

    /// Deletes a vhost record and its permissions; false when there was none.
    pub fn delete_vhost(&self, name: &str) -> bool {
        let mut state = self.write();
        state.permissions.retain(|(vhost, _), _| vhost != name);
        state.vhosts.remove(name).is_some()
    }

    pub fn vhost(&self, name: &str) -> Option<VhostRecord> {
        self.read().vhosts.get(name).cloned()
    }

    pub fn vhosts(&self) -> Vec<VhostRecord> {
        self.read().vhosts.values().cloned().collect()
    }

    pub fn put_permission(&self, permission: Permission) {
        let key = (permission.vhost.clone(), permission.user.clone());
        self.write().permissions.insert(key, permission);
    }

    pub fn delete_permission(&self, vhost: &str, user: &str) -> bool {
        self.write().permissions.remove(&(vhost.to_owned(), user.to_owned())).is_some()
    }

    pub fn permission(&self, vhost: &str, user: &str) -> Option<Permission> {
        self.read().permissions.get(&(vhost.to_owned(), user.to_owned())).cloned()
    }

    /// Every permission, by vhost then user.
    pub fn permissions(&self) -> Vec<Permission> {
        self.read().permissions.values().cloned().collect()
    }

    /// Checks a login; `peer_is_loopback` matters for the users in `loopback_users`.
    pub fn check_login(&self, name: &str, password: &str, peer_is_loopback: bool) -> Option<User> {
        let state = self.read();
        let user = state.users.get(name)?;
        if !peer_is_loopback && state.loopback_users.iter().any(|u| u == name) {
            return None;
        }
        verify_password(&user.password_hash, password).then(|| user.clone())
    }

    /// A new salted hash of `password`. The salt needs to be unique, not secret: the process id,
    /// the wall clock and a counter, mixed.
    pub fn hash_password(&self, password: &str) -> String {
        let count = self.salt_counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mixed = Sha256::digest(format!("{}:{nanos}:{count}", std::process::id()).as_bytes());
        let mut salt = [0u8; SALT_BYTES];
        salt.copy_from_slice(&mixed[..SALT_BYTES]);
        hash_with_salt(&salt, password)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere mid-update of plain maps; keep serving.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Authenticator for UserStore {
    fn authenticate(&self, username: &str, password: &str, peer_is_loopback: bool) -> bool {
        self.check_login(username, password, peer_is_loopback).is_some()
    }

    fn vhost_access(&self, username: &str, vhost: &str) -> VhostAccess {
        let state = self.read();
        if !state.vhosts.contains_key(vhost) {
            VhostAccess::NotFound
        } else if state.permissions.contains_key(&(vhost.to_owned(), username.to_owned())) {
            VhostAccess::Allowed
        } else {
            VhostAccess::Refused
        }
    }
}

/// `base64(salt ++ sha256(salt ++ password))`.
pub fn hash_with_salt(salt: &[u8], password: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(password.as_bytes());
    let mut out = salt.to_vec();
    out.extend_from_slice(&hasher.finalize());
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// Whether `password` matches a stored hash; malformed hashes match nothing.
pub fn verify_password(stored: &str, password: &str) -> bool {
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(stored) else { return false };
    if raw.len() != SALT_BYTES + 32 {
        return false;
    }
    let expected = hash_with_salt(&raw[..SALT_BYTES], password);
    constant_time_eq(expected.as_bytes(), stored.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of RabbitMQ's password docs (salt 908DC60A, password test12) verifies.
    #[test]
    fn rabbitmq_style_hash_verifies() {
        let hash = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR";
        assert_eq!(hash_with_salt(&[0x90, 0x8D, 0xC6, 0x0A], "test12"), hash);
        assert!(verify_password(hash, "test12"));
        assert!(!verify_password(hash, "test13"));
        assert!(!verify_password("not base64!", "x"));
        let store = UserStore::default();
        assert!(verify_password(&store.hash_password("pw"), "pw"));
    }

    /// Defaults match RabbitMQ's: guest/guest from loopback only, on vhost "/".
    #[test]
    fn defaults_are_rabbitmqs() {
        let store = UserStore::with_defaults(vec!["guest".into()]);
        assert!(store.authenticate("guest", "guest", true));
        assert!(!store.authenticate("guest", "guest", false));
        assert!(!store.authenticate("guest", "nope", true));
        assert_eq!(store.vhost_access("guest", "/"), VhostAccess::Allowed);
        assert_eq!(store.vhost_access("guest", "other"), VhostAccess::NotFound);
        store.put_user_with_password("bob", "pw", vec![]);
        assert_eq!(store.vhost_access("bob", "/"), VhostAccess::Refused);
        assert!(store.authenticate("bob", "pw", false));
        let open = UserStore::with_defaults(vec![]);
        assert!(open.authenticate("guest", "guest", false));
    }
}
