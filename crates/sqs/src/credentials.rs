//! Whose access key signed a request, and its secret.
//!
//! For now one key exists: `guest` / `guest`, the default user's, usable only while `guest`
//! still logs in with the password `guest` and, like `guest` itself, only from loopback
//! (`loopback_users`). A changed password or a deleted `guest` disables the key with it.
//! Keys of other users (`hourglass-ctl add_access_key`) are not built yet (docs/sqs.md).

use hourglass_mgmt::UserStore;

use crate::sigv4::SignatureError;

/// The default user's access key id and secret.
const GUEST: &str = "guest";

/// An access key's user and secret.
pub struct AccessKey {
    pub user: String,
    pub secret: String,
}

/// The secret of `access_key`, for a request from loopback or not.
pub fn secret_of(users: &UserStore, access_key: &str, loopback: bool) -> Result<AccessKey, SignatureError> {
    if access_key == GUEST && users.check_login(GUEST, GUEST, loopback).is_ok() {
        return Ok(AccessKey { user: GUEST.to_owned(), secret: GUEST.to_owned() });
    }
    Err(SignatureError::UnknownAccessKey)
}
