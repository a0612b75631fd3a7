//! hourglass-identity: users, their permissions and the vhost records — the one owner of who may
//! connect where and of which vhosts exist — shared by the AMQP side (as the session's
//! [`Authenticator`]) and the HTTP API, and kept as entries of the store's catalog, beside the
//! broker's durable definitions (`entries.rs`).
//!
//! Passwords are stored as RabbitMQ stores them (`hashing.rs`): `base64(salt ++
//! H(salt ++ utf8(password)))` with a 4-byte salt and H the user's hashing algorithm (SHA-256 for
//! new passwords; SHA-512 and MD5 hashes from RabbitMQ exports are kept), so definitions exported
//! from RabbitMQ import here and back unchanged. Users and vhosts carry RabbitMQ's limits
//! (`limits.rs`), read by the session at connection.open and channel.open.
//!
//! Each permission entry is compiled once when set ([`Permissions`]); connection.open hands the
//! compiled set to the broker, which checks every operation against it. The API pushes changed
//! sets to open connections (`routes::push_permissions`).
//!
//! With a saver attached ([`UserStore::persist_with`]), every change is written before it is
//! visible — the records it changed, as catalog entries (`entries.rs`) — and a failed write
//! leaves the store as it was and reports the error.

mod access_keys;
mod batch;
mod entries;
mod file;
mod hashing;
mod limits;
mod topics;
mod withhold;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use hourglass_broker::{CatalogChange, InvalidPattern, Permissions};
use hourglass_session::{Authenticator, ClientLimits, LoginRefused, VhostAccess};
use sha2::{Digest, Sha256};

pub use access_keys::{
    new_id_and_secret, AccessKeyRecord, SealedSecret, SecretsKey, ACCESS_KEYS_PER_USER_MAX,
};
pub use batch::Batch;
pub use file::{FileError, FILE_SCHEMA_VERSION};
pub use hashing::HashingAlgorithm;
use hashing::SALT_BYTES;
pub use limits::{Limits, LimitsOf, USER_LIMIT_NAMES, VHOST_LIMIT_NAMES};
pub use topics::TopicPermission;
pub use withhold::{withhold_uncertain_credentials, Withheld};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// `base64(salt ++ H(salt ++ password))`; empty means password logins are refused.
    pub password_hash: String,
    /// H above.
    pub hashing_algorithm: HashingAlgorithm,
    pub tags: Vec<String>,
    /// `max-connections`, `max-channels`.
    pub limits: Limits,
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
    /// `max-connections`, `max-queues`.
    pub limits: Limits,
}

/// A permission entry with its compiled patterns.
#[derive(Clone, Debug)]
struct Granted {
    permission: Permission,
    compiled: Arc<Permissions>,
}

/// Everything the file holds, plus the (configured, not saved) loopback users.
#[derive(Clone, Debug, Default)]
struct State {
    users: BTreeMap<String, User>,
    vhosts: BTreeMap<String, VhostRecord>,
    /// Keyed by (vhost, user).
    permissions: BTreeMap<(String, String), Granted>,
    /// Keyed by (vhost, user, exchange); compiled into the (vhost, user) entry of `permissions`.
    topic_permissions: BTreeMap<(String, String, String), TopicPermission>,
    /// Users that may log in only from a loopback address (RabbitMQ's `loopback_users`).
    loopback_users: Vec<String>,
    /// The SQS endpoint's access keys by id (`access_keys.rs`).
    access_keys: BTreeMap<String, AccessKeyRecord>,
}

/// Writes changed records durably (the server: into the data directory's catalog).
pub type Saver = Box<dyn Fn(&[CatalogChange]) -> Result<(), String> + Send + Sync>;

/// Why a change was not made.
#[derive(Debug)]
pub enum StoreError {
    /// A permission pattern does not compile (RabbitMQ refuses it too).
    InvalidPattern(InvalidPattern),
    /// A permission for a user or vhost that does not exist.
    Unknown(String),
    /// The change could not be saved; the store is as it was.
    NotSaved(String),
    /// The user holds as many access keys as one may.
    TooManyAccessKeys { user: String },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::InvalidPattern(e) => e.fmt(f),
            StoreError::Unknown(what) => write!(f, "{what} does not exist"),
            StoreError::NotSaved(e) => write!(f, "saving users, vhosts and permissions failed: {e}"),
            StoreError::TooManyAccessKeys { user } => {
                write!(
                    f,
                    "user {user} already holds {ACCESS_KEYS_PER_USER_MAX} access keys: revoke one first"
                )
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// The user and vhost records. The records' lock is held only for a lookup or to put a saved
/// change in place, never across a save (an fsync) nor an `.await`: logins never wait for a
/// change's sync (issue 22). Changes take `writer` for their whole course, so they are saved
/// and made visible in order.
#[derive(Default)]
pub struct UserStore {
    state: RwLock<State>,
    writer: std::sync::Mutex<()>,
    salt_counter: std::sync::atomic::AtomicU64,
    saver: Option<Saver>,
}

impl std::fmt::Debug for UserStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserStore").field("state", &self.state).field("saved", &self.saver.is_some()).finish()
    }
}

impl UserStore {
    /// RabbitMQ's first-start setup: vhost `/` ("Default virtual host"), user guest/guest tagged administrator with full
    /// permissions on `/`; `loopback_users` may log in only from loopback (default: guest).
    pub fn with_defaults(loopback_users: Vec<String>) -> Self {
        // Valid patterns and a plain name: nothing here can fail.
        Self::with_default_user(loopback_users, "guest", "guest").expect("the default records are valid")
    }

    /// The first-start setup with `name`/`password` as the administrator instead of guest
    /// (RabbitMQ's `default_user` and `default_pass`).
    pub fn with_default_user(
        loopback_users: Vec<String>,
        name: &str,
        password: &str,
    ) -> Result<Self, StoreError> {
        let store = UserStore::without_users(loopback_users);
        store.add_default_user(name, password)?;
        Ok(store)
    }

    /// Adds vhost `/` (when missing) and `name`/`password`, tagged administrator with full
    /// permissions on `/`.
    pub fn add_default_user(&self, name: &str, password: &str) -> Result<(), StoreError> {
        if self.vhost("/").is_none() {
            let description = "Default virtual host".to_owned();
            self.put_vhost(VhostRecord { name: "/".into(), description, ..VhostRecord::default() })?;
        }
        self.put_user_with_password(name, password, vec!["administrator".into()])?;
        self.put_permission(Permission::full(name, "/")).map(|_| ())
    }

    /// No users, vhost records or permissions: what a data directory whose catalog was lost
    /// starts with (no default user is made there, issue 22).
    pub fn without_users(loopback_users: Vec<String>) -> Self {
        let store = UserStore::default();
        store.write().loopback_users = loopback_users;
        store
    }

    /// The records a saved file holds (`file.rs`), with `loopback_users` from the
    /// configuration.
    pub fn from_file(payload: &[u8], loopback_users: Vec<String>) -> Result<Self, FileError> {
        let store = UserStore::default();
        let mut state = file::decode(payload)?;
        state.loopback_users = loopback_users;
        *store.write() = state;
        Ok(store)
    }

    /// The records the catalog's identity entries hold, with `loopback_users` from the
    /// configuration; `None` when it has none (a first start, or data from before the catalog).
    pub fn from_catalog<'a>(
        entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        loopback_users: Vec<String>,
    ) -> Result<Option<Self>, FileError> {
        let Some(mut state) = entries::decode(entries)? else { return Ok(None) };
        state.loopback_users = loopback_users;
        let store = UserStore::default();
        *store.write() = state;
        Ok(Some(store))
    }

    /// The records as one JSON document, as older versions kept them in `users.snap` (for
    /// tests of moving such a file into the catalog).
    pub fn encoded_file(&self) -> Vec<u8> {
        file::encode(&self.read())
    }

    /// From now on every change is saved with `saver` before it is visible.
    pub fn persist_with(mut self, saver: Saver) -> Self {
        self.saver = Some(saver);
        self
    }

    /// Saves every record (the defaults of a first start, or records read from an older
    /// `users.snap`), marking the first start done.
    pub fn save(&self) -> Result<(), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let state = self.read();
        match &self.saver {
            Some(saver) => saver(&entries::all(&state)).map_err(StoreError::NotSaved),
            None => Ok(()),
        }
    }

    pub fn put_user(&self, user: User) -> Result<(), StoreError> {
        self.update(|state| {
            state.users.insert(user.name.clone(), user);
            Ok(())
        })
    }

    pub fn put_user_with_password(
        &self,
        name: &str,
        password: &str,
        tags: Vec<String>,
    ) -> Result<(), StoreError> {
        let hash = self.hash_password(password);
        let user = User {
            name: name.to_owned(),
            password_hash: hash,
            hashing_algorithm: HashingAlgorithm::default(),
            tags,
            limits: Limits::default(),
        };
        self.put_user(user)
    }

    /// Replaces a user's limits; `Unknown` when there is no such user.
    pub fn set_user_limits(&self, name: &str, limits: Limits) -> Result<(), StoreError> {
        self.update(|state| {
            let user =
                state.users.get_mut(name).ok_or_else(|| StoreError::Unknown(format!("user {name}")))?;
            user.limits = limits;
            Ok(())
        })
    }

    /// Replaces a vhost's limits; `Unknown` when there is no such vhost.
    pub fn set_vhost_limits(&self, name: &str, limits: Limits) -> Result<(), StoreError> {
        self.update(|state| {
            let vhost =
                state.vhosts.get_mut(name).ok_or_else(|| StoreError::Unknown(format!("vhost {name}")))?;
            vhost.limits = limits;
            Ok(())
        })
    }

    /// Deletes a user and its permissions; false when there was no such user.
    pub fn delete_user(&self, name: &str) -> Result<bool, StoreError> {
        self.update(|state| {
            state.permissions.retain(|(_, user), _| user != name);
            state.topic_permissions.retain(|(_, user, _), _| user != name);
            state.access_keys.retain(|_, key| key.user != name);
            Ok(state.users.remove(name).is_some())
        })
    }

    pub fn user(&self, name: &str) -> Option<User> {
        self.read().users.get(name).cloned()
    }

    pub fn users(&self) -> Vec<User> {
        self.read().users.values().cloned().collect()
    }

    pub fn put_vhost(&self, vhost: VhostRecord) -> Result<(), StoreError> {
        self.update(|state| {
            state.vhosts.insert(vhost.name.clone(), vhost);
            Ok(())
        })
    }

    /// Deletes a vhost record and its permissions; false when there was none.
    pub fn delete_vhost(&self, name: &str) -> Result<bool, StoreError> {
        self.update(|state| {
            state.permissions.retain(|(vhost, _), _| vhost != name);
            state.topic_permissions.retain(|(vhost, _, _), _| vhost != name);
            state.access_keys.retain(|_, key| key.vhost() != name);
            Ok(state.vhosts.remove(name).is_some())
        })
    }

    pub fn vhost(&self, name: &str) -> Option<VhostRecord> {
        self.read().vhosts.get(name).cloned()
    }

    pub fn vhosts(&self) -> Vec<VhostRecord> {
        self.read().vhosts.values().cloned().collect()
    }

    /// Sets a user's permissions in a vhost; returns the compiled set for open connections.
    pub fn put_permission(&self, permission: Permission) -> Result<Arc<Permissions>, StoreError> {
        let topics = topics::of(&self.read(), &permission.vhost, &permission.user);
        let granted = Granted::compile(permission, &topics)?;
        let compiled = granted.compiled.clone();
        self.update(|state| batch::insert_permission(state, granted))?;
        Ok(compiled)
    }

    pub fn delete_permission(&self, vhost: &str, user: &str) -> Result<bool, StoreError> {
        self.update(|state| Ok(state.permissions.remove(&(vhost.to_owned(), user.to_owned())).is_some()))
    }

    pub fn permission(&self, vhost: &str, user: &str) -> Option<Permission> {
        self.read().permissions.get(&(vhost.to_owned(), user.to_owned())).map(|g| g.permission.clone())
    }

    /// What a user may do in a vhost now: its compiled entry, or nothing at all.
    pub fn compiled_permissions(&self, vhost: &str, user: &str) -> Arc<Permissions> {
        let state = self.read();
        let granted = state.permissions.get(&(vhost.to_owned(), user.to_owned()));
        granted.map_or_else(Permissions::none, |g| g.compiled.clone())
    }

    /// Every permission, by vhost then user.
    pub fn permissions(&self) -> Vec<Permission> {
        self.read().permissions.values().map(|g| g.permission.clone()).collect()
    }

    /// Checks a login as RabbitMQ's internal backend does: a blank password is refused before
    /// any lookup; `peer_is_loopback` matters for the users in `loopback_users`.
    pub fn check_login(
        &self,
        name: &str,
        password: &str,
        peer_is_loopback: bool,
    ) -> Result<User, LoginRefused> {
        if password.is_empty() {
            return Err(LoginRefused::BlankPassword);
        }
        let state = self.read();
        let user = state.users.get(name).ok_or(LoginRefused::UnknownUser)?;
        if !user.hashing_algorithm.verify(&user.password_hash, password) {
            return Err(LoginRefused::BadPassword);
        }
        if !peer_is_loopback && state.loopback_users.iter().any(|u| u == name) {
            return Err(LoginRefused::LoopbackOnly);
        }
        Ok(user.clone())
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
        HashingAlgorithm::default().hash_with_salt(&salt, password)
    }

    /// Applies a change to a copy of the records, saves what it changed, and only then puts
    /// the copy in place: nobody sees a change before it is saved, a change that fails (partway
    /// through a batch, or in its save) leaves nothing behind, and readers are never held by a
    /// save. `writer` keeps changes, their saves and their swaps in one order.
    fn update<T, E: From<StoreError>>(
        &self,
        change: impl FnOnce(&mut State) -> Result<T, E>,
    ) -> Result<T, E> {
        // A poisoned writer lock guards nothing but the order: keep serving.
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = self.read().clone();
        let out = change(&mut next)?;
        if let Some(saver) = &self.saver {
            let changes = entries::diff(&self.read(), &next);
            if !changes.is_empty() {
                saver(&changes).map_err(StoreError::NotSaved)?;
            }
        }
        *self.write() = next;
        Ok(out)
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
    fn authenticate(
        &self,
        username: &str,
        password: &str,
        peer_is_loopback: bool,
    ) -> Result<(), LoginRefused> {
        self.check_login(username, password, peer_is_loopback).map(|_| ())
    }

    /// EXTERNAL (a verified client certificate's CN): the user must exist; loopback-only users
    /// stay loopback-only, as rabbit_reader checks `loopback_users` for every mechanism.
    fn authenticate_external(&self, username: &str, peer_is_loopback: bool) -> Result<(), LoginRefused> {
        let state = self.read();
        if !state.users.contains_key(username) {
            return Err(LoginRefused::UnknownUser);
        }
        if !peer_is_loopback && state.loopback_users.iter().any(|u| u == username) {
            return Err(LoginRefused::LoopbackOnly);
        }
        Ok(())
    }

    fn vhost_access(&self, username: &str, vhost: &str) -> VhostAccess {
        let state = self.read();
        if !state.vhosts.contains_key(vhost) {
            return VhostAccess::NotFound;
        }
        match state.permissions.get(&(vhost.to_owned(), username.to_owned())) {
            Some(granted) => VhostAccess::Allowed(granted.compiled.clone()),
            None => VhostAccess::Refused,
        }
    }

    fn may_impersonate(&self, username: &str) -> bool {
        self.read().users.get(username).is_some_and(|user| user.tags.iter().any(|tag| tag == "impersonator"))
    }

    fn client_limits(&self, username: &str, vhost: &str) -> ClientLimits {
        let state = self.read();
        ClientLimits {
            vhost_max_connections: state
                .vhosts
                .get(vhost)
                .and_then(|v| v.limits.effective("max-connections")),
            user_max_connections: state
                .users
                .get(username)
                .and_then(|u| u.limits.effective("max-connections")),
        }
    }

    fn user_max_channels(&self, username: &str) -> Option<u64> {
        self.read().users.get(username).and_then(|u| u.limits.effective("max-channels"))
    }
}

impl Permission {
    /// `.*` for all three, as RabbitMQ gives guest on `/` and a vhost's creator.
    pub fn full(user: &str, vhost: &str) -> Self {
        Permission {
            user: user.to_owned(),
            vhost: vhost.to_owned(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }
}

impl Granted {
    /// Compiles an entry with the user's topic permissions in that vhost,
    /// `(exchange, write, read)`.
    fn compile(permission: Permission, topics: &[(String, String, String)]) -> Result<Granted, StoreError> {
        let compiled = Permissions::compile(&permission.configure, &permission.write, &permission.read)
            .and_then(|p| p.with_topics(topics, &permission.user, &permission.vhost))
            .map_err(StoreError::InvalidPattern)?;
        Ok(Granted { permission, compiled: Arc::new(compiled) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of RabbitMQ's password docs (salt 908DC60A, password test12) verifies.
    #[test]
    fn rabbitmq_style_hash_verifies() {
        let hash = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR";
        let sha256 = HashingAlgorithm::Sha256;
        assert_eq!(sha256.hash_with_salt(&[0x90, 0x8D, 0xC6, 0x0A], "test12"), hash);
        assert!(sha256.verify(hash, "test12"));
        assert!(!sha256.verify(hash, "test13"));
        assert!(!sha256.verify("not base64!", "x"));
        let store = UserStore::default();
        assert!(sha256.verify(&store.hash_password("pw"), "pw"));
    }

    /// Defaults match RabbitMQ's: guest/guest from loopback only, on vhost "/".
    #[test]
    fn defaults_are_rabbitmqs() {
        let store = UserStore::with_defaults(vec!["guest".into()]);
        assert_eq!(store.authenticate("guest", "guest", true), Ok(()));
        assert_eq!(store.authenticate("guest", "guest", false), Err(LoginRefused::LoopbackOnly));
        assert_eq!(store.authenticate("guest", "nope", true), Err(LoginRefused::BadPassword));
        assert_eq!(store.authenticate("nobody", "nope", true), Err(LoginRefused::UnknownUser));
        assert_eq!(store.authenticate_external("guest", true), Ok(()));
        assert_eq!(store.authenticate_external("guest", false), Err(LoginRefused::LoopbackOnly));
        assert_eq!(store.authenticate_external("nobody", true), Err(LoginRefused::UnknownUser));
        assert_eq!(store.vhost_access("guest", "/"), VhostAccess::Allowed(Permissions::full()));
        assert_eq!(store.vhost_access("guest", "other"), VhostAccess::NotFound);
        store.put_user_with_password("bob", "pw", vec![]).unwrap();
        assert_eq!(store.vhost_access("bob", "/"), VhostAccess::Refused);
        assert_eq!(store.authenticate("bob", "pw", false), Ok(()));
        let open = UserStore::with_defaults(vec![]);
        assert_eq!(open.authenticate("guest", "guest", false), Ok(()));
    }

    /// A user whose password is empty cannot log in with it (RabbitMQ refuses blank passwords).
    #[test]
    fn blank_password_is_refused() {
        let store = UserStore::with_defaults(vec![]);
        store.put_user_with_password("blank", "", vec!["administrator".into()]).unwrap();
        assert_eq!(store.authenticate("blank", "", true), Err(LoginRefused::BlankPassword));
    }

    /// Issue 22: a login is not held by a change's save (the save is the catalog's fsync); the
    /// change is visible only once saved.
    #[test]
    fn logins_do_not_wait_for_a_save() {
        use std::sync::mpsc;
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let release_rx = std::sync::Mutex::new(release_rx);
        let store = Arc::new(UserStore::with_defaults(vec![]).persist_with(Box::new(move |_| {
            let _ = entered_tx.send(());
            let _ = release_rx.lock().unwrap().recv();
            Ok(())
        })));
        let changing = store.clone();
        let change = std::thread::spawn(move || changing.put_user_with_password("bob", "pw", vec![]));
        entered.recv().unwrap();
        // The save is under way and blocked: a login and a lookup still answer (within a bound,
        // so that a login held by the save fails the test rather than hanging it).
        let (answer_tx, answer) = mpsc::channel();
        let reading = store.clone();
        std::thread::spawn(move || {
            let login = reading.check_login("guest", "guest", true).is_ok();
            let _ = answer_tx.send((login, reading.user("bob").is_none()));
        });
        let answered = answer.recv_timeout(std::time::Duration::from_secs(10));
        release.send(()).unwrap();
        assert_eq!(answered, Ok((true, true)), "a login and a lookup during the save; bob not yet visible");
        change.join().unwrap().unwrap();
        assert!(store.check_login("bob", "pw", true).is_ok());
    }
}
