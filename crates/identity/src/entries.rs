//! The user store's records as entries of the store's catalog, the same stream that holds the
//! broker's durable definitions (`hourglass_broker` `persist/catalog.rs`; docs/storage.md): one
//! entry per user, vhost record, permission and topic permission, its value the record's JSON
//! (`file.rs` shapes). A change writes only the records it changed, so the cost of adding a
//! user does not grow with the number of users.
//!
//! ```text
//! i U comp(user)                              a user
//! i H comp(vhost)                             a vhost record
//! i P comp(vhost) comp(user)                  a permission
//! i T comp(vhost) comp(user) comp(exchange)   a topic permission
//! i K comp(key id)                            an access key (its secret sealed: access_keys.rs)
//! i !                                         written once, at the first start
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use hourglass_broker::{composite_key, CatalogChange, IDENTITY_SCOPE};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::file::{from_saved, SavedFile, SavedPermission, SavedTopicPermission, SavedUser, SavedVhost};
use super::{AccessKeyRecord, FileError, State};

pub(super) const USER: u8 = b'U';
pub(super) const VHOST: u8 = b'H';
pub(super) const PERMISSION: u8 = b'P';
pub(super) const TOPIC_PERMISSION: u8 = b'T';
pub(super) const ACCESS_KEY: u8 = b'K';
const INITIALISED: u8 = b'!';

pub(super) fn key(kind: u8, parts: &[&[u8]]) -> Bytes {
    composite_key(&[IDENTITY_SCOPE, kind], parts)
}

fn json(value: &impl Serialize) -> Bytes {
    // Serialising plain strings and vectors cannot fail.
    Bytes::from(serde_json::to_vec(value).expect("plain data serialises"))
}

/// Every record of `state`, as puts, with the first-start mark.
pub(super) fn all(state: &State) -> Vec<CatalogChange> {
    let mut changes = diff(&State::default(), state);
    changes.push(CatalogChange::Put { key: key(INITIALISED, &[]), value: Bytes::from_static(b"{}") });
    changes
}

/// The entries to write for the records that differ between `before` and `after`.
pub(super) fn diff(before: &State, after: &State) -> Vec<CatalogChange> {
    let mut out = Vec::new();
    diff_map(
        &before.users,
        &after.users,
        |a, b| a == b,
        |name| key(USER, &[name.as_bytes()]),
        |u| json(&SavedUser::of(u)),
        &mut out,
    );
    diff_map(
        &before.vhosts,
        &after.vhosts,
        |a, b| a == b,
        |name| key(VHOST, &[name.as_bytes()]),
        |v| json(&SavedVhost::of(v)),
        &mut out,
    );
    diff_map(
        &before.permissions,
        &after.permissions,
        |a, b| a.permission == b.permission,
        |(vhost, user)| key(PERMISSION, &[vhost.as_bytes(), user.as_bytes()]),
        |g| json(&SavedPermission::of(&g.permission)),
        &mut out,
    );
    diff_map(
        &before.topic_permissions,
        &after.topic_permissions,
        |a, b| a == b,
        |(vhost, user, exchange)| {
            key(TOPIC_PERMISSION, &[vhost.as_bytes(), user.as_bytes(), exchange.as_bytes()])
        },
        |t| json(&SavedTopicPermission::of(t)),
        &mut out,
    );
    diff_map(
        &before.access_keys,
        &after.access_keys,
        |a, b| a == b,
        |id| key(ACCESS_KEY, &[id.as_bytes()]),
        json,
        &mut out,
    );
    out
}

/// Puts for what is new or changed in `after`, deletes for what it no longer has.
fn diff_map<K: Ord, V>(
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
    same: impl Fn(&V, &V) -> bool,
    key: impl Fn(&K) -> Bytes,
    value: impl Fn(&V) -> Bytes,
    out: &mut Vec<CatalogChange>,
) {
    for (k, v) in after {
        if !before.get(k).is_some_and(|old| same(old, v)) {
            out.push(CatalogChange::Put { key: key(k), value: value(v) });
        }
    }
    out.extend(
        before.keys().filter(|k| !after.contains_key(k)).map(|k| CatalogChange::Delete { key: key(k) }),
    );
}

/// The records the catalog's identity entries hold (checked as `file.rs` checks a file); `None`
/// when there are none and the first start was never marked.
pub(super) fn decode<'a>(
    entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Option<State>, FileError> {
    let mut saved = SavedFile {
        users: Vec::new(),
        vhosts: Vec::new(),
        permissions: Vec::new(),
        topic_permissions: Vec::new(),
    };
    let mut found = false;
    let mut access_keys = Vec::new();
    for (key, value) in entries {
        let Some((&IDENTITY_SCOPE, rest)) = key.split_first() else { continue };
        found = true;
        match rest.first() {
            Some(&USER) => saved.users.push(parse(key, value)?),
            Some(&VHOST) => saved.vhosts.push(parse(key, value)?),
            Some(&PERMISSION) => saved.permissions.push(parse(key, value)?),
            Some(&TOPIC_PERMISSION) => saved.topic_permissions.push(parse(key, value)?),
            Some(&ACCESS_KEY) => access_keys.push(parse::<AccessKeyRecord>(key, value)?),
            Some(&INITIALISED) => {}
            _ => return Err(FileError(format!("unknown identity entry {}", key.escape_ascii()))),
        }
    }
    if !found {
        return Ok(None);
    }
    let mut state = from_saved(saved)?;
    // A key whose user is gone went with it (a user's deletion removes its keys in one commit).
    state.access_keys = access_keys
        .into_iter()
        .filter(|k| state.users.contains_key(&k.user))
        .map(|k| (k.id.clone(), k))
        .collect();
    Ok(Some(state))
}

fn parse<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, FileError> {
    serde_json::from_slice(value)
        .map_err(|e| FileError(format!("identity entry {} is not valid: {e}", key.escape_ascii())))
}
