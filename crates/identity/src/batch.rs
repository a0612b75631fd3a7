//! Many changes with one save: a definitions import writes its users, vhost records and
//! permissions as one catalog commit, and compares the records once, so that importing n users
//! costs O(n log n), not n saves of a state that grows with each (issue 22: 2,000 users took 90 s
//! and 10,000 over 8 minutes).

use super::{topics, Granted, Permission, State, StoreError, TopicPermission, User, UserStore, VhostRecord};

/// The records inside one batch of changes ([`UserStore::batch`]).
pub struct Batch<'a> {
    state: &'a mut State,
}

impl UserStore {
    /// Applies `changes` to the records and saves them all with one save before anyone sees
    /// them; when a change or the save fails, none of them is made.
    pub fn batch<T, E: From<StoreError>>(
        &self,
        changes: impl FnOnce(&mut Batch<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.update(|state| changes(&mut Batch { state }))
    }
}

impl Batch<'_> {
    pub fn put_user(&mut self, user: User) {
        self.state.users.insert(user.name.clone(), user);
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.state.users.get(name)
    }

    pub fn put_vhost(&mut self, vhost: VhostRecord) {
        self.state.vhosts.insert(vhost.name.clone(), vhost);
    }

    pub fn vhost(&self, name: &str) -> Option<&VhostRecord> {
        self.state.vhosts.get(name)
    }

    /// Sets a user's permissions in a vhost (both must exist, the patterns compile).
    pub fn put_permission(&mut self, permission: Permission) -> Result<(), StoreError> {
        let topics = topics::of(self.state, &permission.vhost, &permission.user);
        insert_permission(self.state, Granted::compile(permission, &topics)?)
    }

    /// Sets a topic permission (`UserStore::put_topic_permission`'s rules).
    pub fn put_topic_permission(&mut self, topic: TopicPermission) -> Result<(), StoreError> {
        topics::check(&topic)?;
        topics::insert(self.state, topic)
    }
}

/// Puts a compiled permission entry in, once its user and vhost are known to exist.
pub(super) fn insert_permission(state: &mut State, granted: Granted) -> Result<(), StoreError> {
    let (user, vhost) = (&granted.permission.user, &granted.permission.vhost);
    if !state.users.contains_key(user) {
        return Err(StoreError::Unknown(format!("user {user}")));
    }
    if !state.vhosts.contains_key(vhost) {
        return Err(StoreError::Unknown(format!("vhost {vhost}")));
    }
    let key = (vhost.clone(), user.clone());
    state.permissions.insert(key, granted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn counting_store() -> (UserStore, Arc<AtomicUsize>) {
        let saves = Arc::new(AtomicUsize::new(0));
        let counted = saves.clone();
        let store = UserStore::with_defaults(vec![]).persist_with(Box::new(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }));
        (store, saves)
    }

    fn user(name: &str) -> User {
        User {
            name: name.to_owned(),
            password_hash: String::new(),
            hashing_algorithm: Default::default(),
            tags: vec![],
            limits: Default::default(),
        }
    }

    /// A thousand users and their permissions are one save, not a thousand.
    #[test]
    fn a_batch_is_one_save() {
        let (store, saves) = counting_store();
        store
            .batch(|batch| {
                for i in 0..1_000 {
                    batch.put_user(user(&format!("u{i}")));
                    batch.put_permission(Permission {
                        user: format!("u{i}"),
                        vhost: "/".into(),
                        configure: ".*".into(),
                        write: ".*".into(),
                        read: ".*".into(),
                    })?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        assert_eq!(saves.load(Ordering::Relaxed), 1);
        assert_eq!(store.users().len(), 1_001);
        assert!(store.permission("/", "u999").is_some());
    }

    /// A batch with one failing change makes none of them.
    #[test]
    fn a_failed_batch_changes_nothing() {
        let (store, saves) = counting_store();
        let failed = store.batch(|batch| {
            batch.put_user(user("kept-out"));
            let nobody = Permission {
                user: "nobody".into(),
                vhost: "/".into(),
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            };
            batch.put_permission(nobody)
        });
        assert!(matches!(failed, Err(StoreError::Unknown(_))));
        assert!(store.user("kept-out").is_none());
        assert_eq!(saves.load(Ordering::Relaxed), 0);
    }
}
