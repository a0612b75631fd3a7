//! Whose access key signed a request, and its secret (docs/sqs.md, ADR 0011).
//!
//! - `guest` / `guest`, the default user's key, usable only while `guest` still logs in with the
//!   password `guest` and, like `guest` itself, only from loopback (`loopback_users`): a changed
//!   password or a deleted `guest` disables it.
//! - Keys made with `hourglass-ctl add_access_key USER` (or `POST /api/users/{user}/access-keys`),
//!   kept in the user store with their secrets sealed under the secrets key; a key of a user in
//!   `loopback_users` works only from loopback, as its user's logins do.

use hourglass_session::Authenticator;

use crate::sigv4::SignatureError;
use crate::SqsState;

/// The default user's access key id and secret.
const GUEST: &str = "guest";

/// An access key's user, the vhost it acts in, and its secret.
pub struct AccessKey {
    pub user: String,
    pub vhost: String,
    pub secret: String,
}

/// The secret of `access_key`, for a request from loopback or not.
pub fn secret_of(state: &SqsState, access_key: &str, loopback: bool) -> Result<AccessKey, SignatureError> {
    if access_key == GUEST && state.users.check_login(GUEST, GUEST, loopback).is_ok() {
        return Ok(AccessKey { user: GUEST.to_owned(), vhost: "/".to_owned(), secret: GUEST.to_owned() });
    }
    let (Some(record), Some(secrets)) = (state.users.access_key(access_key), state.secrets.as_ref()) else {
        return Err(SignatureError::UnknownAccessKey);
    };
    // The user still exists, and may log in from here (`loopback_users`).
    if state.users.authenticate_external(&record.user, loopback).is_err() {
        return Err(SignatureError::UnknownAccessKey);
    }
    let secret = secrets.open(&record).ok_or(SignatureError::UnknownAccessKey)?;
    Ok(AccessKey { vhost: record.vhost().to_owned(), user: record.user, secret })
}
