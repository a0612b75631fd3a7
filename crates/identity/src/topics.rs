//! RabbitMQ's topic permissions (`set_topic_permissions`): per user, vhost and exchange, a write
//! and a read pattern on routing keys. The store keeps them beside the permission entries and
//! compiles them into the user's [`Permissions`] for that vhost, which the broker checks on topic
//! exchanges (`hourglass_broker::permissions`).

use super::{Granted, State, StoreError, UserStore};
use hourglass_broker::Permissions;

/// One topic permission, as the API and definitions show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPermission {
    pub user: String,
    pub vhost: String,
    pub exchange: String,
    pub write: String,
    pub read: String,
}

impl UserStore {
    /// Sets the topic permission of `user` in `vhost` for its exchange (replacing the one there
    /// was); the user and vhost must exist and the patterns compile. The user's compiled
    /// permissions in the vhost change with it (push them to open connections).
    pub fn put_topic_permission(&self, topic: TopicPermission) -> Result<(), StoreError> {
        check(&topic)?;
        self.update(|state| insert(state, topic))
    }

    /// Removes the user's topic permissions in `vhost`: for `exchange`, or all of them. False when
    /// there was none.
    pub fn delete_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
        exchange: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.update(|state| {
            let before = state.topic_permissions.len();
            state
                .topic_permissions
                .retain(|(v, u, x), _| !(v == vhost && u == user && exchange.is_none_or(|e| e == x)));
            let removed = state.topic_permissions.len() < before;
            recompile(state, vhost, user)?;
            Ok(removed)
        })
    }

    /// Every topic permission, by vhost, user, exchange.
    pub fn topic_permissions(&self) -> Vec<TopicPermission> {
        self.read().topic_permissions.values().cloned().collect()
    }
}

/// The user's topic permissions in `vhost` as `(exchange, write, read)`.
pub(super) fn of(state: &State, vhost: &str, user: &str) -> Vec<(String, String, String)> {
    state
        .topic_permissions
        .values()
        .filter(|t| t.vhost == vhost && t.user == user)
        .map(|t| (t.exchange.clone(), t.write.clone(), t.read.clone()))
        .collect()
}

/// Whether the topic permission's patterns compile (outside any lock: compiling takes time).
pub(super) fn check(topic: &TopicPermission) -> Result<(), StoreError> {
    let check = [(topic.exchange.clone(), topic.write.clone(), topic.read.clone())];
    Permissions::compile("", "", "")
        .and_then(|p| p.with_topics(&check, &topic.user, &topic.vhost))
        .map(|_| ())
        .map_err(StoreError::InvalidPattern)
}

/// Puts a checked topic permission in, once its user and vhost are known to exist, and
/// compiles the user's permission entry in the vhost again.
pub(super) fn insert(state: &mut State, topic: TopicPermission) -> Result<(), StoreError> {
    if !state.users.contains_key(&topic.user) {
        return Err(StoreError::Unknown(format!("user {}", topic.user)));
    }
    if !state.vhosts.contains_key(&topic.vhost) {
        return Err(StoreError::Unknown(format!("vhost {}", topic.vhost)));
    }
    let (vhost, user) = (topic.vhost.clone(), topic.user.clone());
    state.topic_permissions.insert((vhost.clone(), user.clone(), topic.exchange.clone()), topic);
    recompile(state, &vhost, &user)
}

/// Compiles the (vhost, user) permission entry again with its current topic permissions.
fn recompile(state: &mut State, vhost: &str, user: &str) -> Result<(), StoreError> {
    let key = (vhost.to_owned(), user.to_owned());
    let Some(granted) = state.permissions.get(&key) else { return Ok(()) };
    let topics = of(state, vhost, user);
    let compiled = Granted::compile(granted.permission.clone(), &topics)?;
    state.permissions.insert(key, compiled);
    Ok(())
}
