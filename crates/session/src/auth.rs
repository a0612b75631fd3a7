//! Who may log in (SASL PLAIN, AMQPLAIN and EXTERNAL in connection.start-ok) and which vhosts they
//! may open.
//!
//! PLAIN and AMQPLAIN carry a username and password in one response; EXTERNAL takes the user name
//! from the connection's verified TLS client certificate (its subject's CN, as RabbitMQ's
//! rabbitmq_auth_mechanism_ssl with its default `ssl_cert_login_from = common_name`) and ignores
//! the response. Each is a single step: we never send connection.secure. Checking credentials is
//! the [`Authenticator`]'s job; this file only extracts them from the response bytes.

use std::sync::Arc;

use bytes::Bytes;
use hourglass_broker::Permissions;
use hourglass_wire::{FieldTable, FieldValue};

use crate::client_limits::ClientLimits;

/// The mechanisms offered in connection.start, space-separated as AMQP 0-9-1 §1.4.2.1 requires.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";

/// The same with EXTERNAL, offered only on a connection that presented a verified client
/// certificate and only when the operator turned EXTERNAL on (RabbitMQ offers a mechanism when it
/// is in `auth_mechanisms` and its `should_offer(Sock)` agrees; 3.10's EXTERNAL agrees when the
/// socket has a peer certificate). Last, so a client that takes the first mechanism it knows
/// keeps logging in with a password as before.
pub const MECHANISMS_WITH_EXTERNAL: &str = "PLAIN AMQPLAIN EXTERNAL";

/// What the TLS layer verified about the client, handed to the session as data (the session
/// never sees the socket): present only when the client's certificate chained to the configured
/// CA.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The first common name (CN) of the certificate's subject, if it has one (and it is text).
    pub common_name: Option<String>,
}

/// Decides whether a login succeeds and whether a user may open a vhost.
pub trait Authenticator: Send + Sync {
    /// Ok when `username` / `password` is a valid login from this peer (`peer_is_loopback` lets
    /// an implementation keep some users, like RabbitMQ's `guest`, to local connections); the
    /// error says why not, for the log only (clients are told nothing more than "refused").
    fn authenticate(
        &self,
        username: &str,
        password: &str,
        peer_is_loopback: bool,
    ) -> Result<(), LoginRefused>;
    /// Ok when `username`, named by a verified client certificate (SASL EXTERNAL), may log in
    /// from this peer: the user must exist; there is no password to check (RabbitMQ's
    /// `check_user_login(Username, [])`). Refused unless an implementation says otherwise.
    fn authenticate_external(&self, _username: &str, _peer_is_loopback: bool) -> Result<(), LoginRefused> {
        Err(LoginRefused::UnknownUser)
    }
    /// Whether an authenticated `username` may open `vhost` (connection.open), and with which
    /// configure / write / read permissions.
    fn vhost_access(&self, username: &str, vhost: &str) -> VhostAccess;
    /// Whether `username` has RabbitMQ's `impersonator` tag: its publishes may carry another
    /// user's `user_id`. Read once at connection.open, as RabbitMQ reads a user's tags at login.
    fn may_impersonate(&self, _username: &str) -> bool {
        false
    }
    /// The connection limits of `vhost` and `username` (RabbitMQ's vhost and user
    /// `max-connections`), read at connection.open; none by default.
    fn client_limits(&self, _username: &str, _vhost: &str) -> ClientLimits {
        ClientLimits::default()
    }
    /// The user's `max-channels`, read at every channel.open; none by default.
    fn user_max_channels(&self, _username: &str) -> Option<u64> {
        None
    }
}

/// Why a login was refused: logged (never with the password), never sent to the client.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LoginRefused {
    /// No such user.
    UnknownUser,
    /// The password does not match.
    BadPassword,
    /// An empty password: refused before any lookup, as RabbitMQ's internal backend does
    /// (`rabbit_auth_backend_internal`: "attempted to log in with a blank password").
    BlankPassword,
    /// The user may log in only from a loopback address (RabbitMQ's `loopback_users`).
    LoopbackOnly,
    /// The credentials could not be read as a user name and password (not UTF-8, foreign
    /// authzid).
    Unusable,
    /// EXTERNAL with a client certificate whose subject has no common name to log in as
    /// (RabbitMQ: "no name found").
    NoCertificateName,
    /// Too many refused logins from this address are still being answered
    /// ([`crate::LoginLimiter`]); the password was not checked.
    TooManyFailures,
}

impl LoginRefused {
    /// The reason as the log shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            LoginRefused::UnknownUser => "user unknown",
            LoginRefused::BadPassword => "bad password",
            LoginRefused::BlankPassword => "blank password",
            LoginRefused::LoopbackOnly => "user may only log in via localhost",
            LoginRefused::Unusable => "unusable credentials",
            LoginRefused::NoCertificateName => "no name found in the client certificate",
            LoginRefused::TooManyFailures => "too many failed logins from this address",
        }
    }
}

impl std::fmt::Display for LoginRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to "may this user open this vhost?".
#[derive(Clone, Debug, PartialEq)]
pub enum VhostAccess {
    /// Yes; the broker checks each operation against these permissions.
    Allowed(Arc<Permissions>),
    /// No such vhost (530 "vhost {v} not found").
    NotFound,
    /// The vhost exists but this user has no access (530 "access to vhost ... refused").
    Refused,
}

/// A fixed list of users and vhosts; every user may do anything in every vhost.
///
/// The default is RabbitMQ's out-of-the-box setup: user `guest` / `guest`, allowed only from a
/// loopback address (RabbitMQ's `loopback_users`), and the vhost `/`.
#[derive(Clone, Debug)]
pub struct StaticUsers {
    users: Vec<StaticUser>,
    vhosts: Vec<String>,
}

#[derive(Clone, Debug)]
struct StaticUser {
    name: String,
    password: String,
    loopback_only: bool,
}

impl StaticUsers {
    /// No users and no vhosts: nobody can log in.
    pub fn empty() -> Self {
        StaticUsers { users: Vec::new(), vhosts: Vec::new() }
    }

    /// Adds (or replaces) a user; `loopback_only` refuses its logins from non-loopback peers.
    pub fn with_user(mut self, name: &str, password: &str, loopback_only: bool) -> Self {
        self.users.retain(|u| u.name != name);
        self.users.push(StaticUser { name: name.to_owned(), password: password.to_owned(), loopback_only });
        self
    }

    /// Adds a vhost (idempotent).
    pub fn with_vhost(mut self, name: &str) -> Self {
        if !self.vhosts.iter().any(|v| v == name) {
            self.vhosts.push(name.to_owned());
        }
        self
    }
}

impl Default for StaticUsers {
    fn default() -> Self {
        StaticUsers::empty().with_user("guest", "guest", true).with_vhost("/")
    }
}

impl Authenticator for StaticUsers {
    fn authenticate(
        &self,
        username: &str,
        password: &str,
        peer_is_loopback: bool,
    ) -> Result<(), LoginRefused> {
        if password.is_empty() {
            return Err(LoginRefused::BlankPassword);
        }
        let user = self.users.iter().find(|u| u.name == username).ok_or(LoginRefused::UnknownUser)?;
        if !constant_time_eq(user.password.as_bytes(), password.as_bytes()) {
            return Err(LoginRefused::BadPassword);
        }
        if !peer_is_loopback && user.loopback_only {
            return Err(LoginRefused::LoopbackOnly);
        }
        Ok(())
    }

    fn authenticate_external(&self, username: &str, peer_is_loopback: bool) -> Result<(), LoginRefused> {
        let user = self.users.iter().find(|u| u.name == username).ok_or(LoginRefused::UnknownUser)?;
        if !peer_is_loopback && user.loopback_only {
            return Err(LoginRefused::LoopbackOnly);
        }
        Ok(())
    }

    fn vhost_access(&self, username: &str, vhost: &str) -> VhostAccess {
        if !self.vhosts.iter().any(|v| v == vhost) {
            VhostAccess::NotFound
        } else if self.users.iter().any(|u| u.name == username) {
            VhostAccess::Allowed(Permissions::full())
        } else {
            VhostAccess::Refused
        }
    }
}

/// A username and password taken from a start-ok response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub username: String,
    pub password: String,
}

/// Why a start-ok response could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AuthError {
    /// The response is not well-formed for its mechanism (502 SYNTAX_ERROR).
    Malformed(&'static str),
    /// Well-formed but unusable (non-UTF-8 name, foreign authzid): refused like a bad password.
    Refused,
}

/// The SASL mechanisms we implement.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mechanism {
    Plain,
    AmqPlain,
    /// RFC 4422 appendix A: the identity comes from outside SASL (here: the TLS client
    /// certificate); the response (an authzid, usually empty) is ignored, as RabbitMQ does.
    External,
}

impl Mechanism {
    /// The mechanism named in start-ok, if we offer it.
    pub(crate) fn parse(name: &[u8]) -> Option<Mechanism> {
        match name {
            b"PLAIN" => Some(Mechanism::Plain),
            b"AMQPLAIN" => Some(Mechanism::AmqPlain),
            b"EXTERNAL" => Some(Mechanism::External),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::AmqPlain => "AMQPLAIN",
            Mechanism::External => "EXTERNAL",
        }
    }

    /// Extracts the credentials from a start-ok `response` (PLAIN and AMQPLAIN only: EXTERNAL
    /// carries none).
    pub(crate) fn credentials(self, response: Bytes) -> Result<Credentials, AuthError> {
        match self {
            Mechanism::Plain => plain_credentials(&response),
            Mechanism::AmqPlain => amqplain_credentials(response),
            Mechanism::External => Err(AuthError::Refused),
        }
    }
}

/// RFC 4616: `[authzid] NUL authcid NUL passwd`. An authzid naming another user would ask us to
/// act on that user's behalf, which we do not support, so only an empty or identical one passes.
fn plain_credentials(response: &[u8]) -> Result<Credentials, AuthError> {
    let mut parts = response.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(pass), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed("response invalid"));
    };
    let username = std::str::from_utf8(user).map_err(|_| AuthError::Refused)?;
    let password = std::str::from_utf8(pass).map_err(|_| AuthError::Refused)?;
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::Refused);
    }
    Ok(Credentials { username: username.to_owned(), password: password.to_owned() })
}

/// AMQPLAIN: a field table's entries (without its length prefix) holding LOGIN and PASSWORD.
fn amqplain_credentials(response: Bytes) -> Result<Credentials, AuthError> {
    const MISSING: &str = "AMQPLAIN auth info is missing LOGIN or PASSWORD field";
    const BAD_TYPE: &str = "AMQPLAIN auth info uses unsupported type for LOGIN or PASSWORD field";
    let table = FieldTable::from_raw(response)
        .map_err(|_| AuthError::Malformed("AMQPLAIN auth info is not a field table"))?;
    let (Some(login), Some(password)) = (table.get("LOGIN"), table.get("PASSWORD")) else {
        return Err(AuthError::Malformed(MISSING));
    };
    let (FieldValue::LongStr(login), FieldValue::LongStr(password)) = (login, password) else {
        return Err(AuthError::Malformed(BAD_TYPE));
    };
    let username = std::str::from_utf8(login.as_bytes()).map_err(|_| AuthError::Refused)?;
    let password = std::str::from_utf8(password.as_bytes()).map_err(|_| AuthError::Refused)?;
    Ok(Credentials { username: username.to_owned(), password: password.to_owned() })
}

/// Compares secrets in time that depends only on their lengths, not on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PLAIN accepts an empty authzid or one equal to the user, and rejects a malformed response.
    #[test]
    fn plain_response_forms() {
        let ok = Credentials { username: "u".into(), password: "p".into() };
        assert_eq!(plain_credentials(b"\0u\0p"), Ok(ok.clone()));
        assert_eq!(plain_credentials(b"u\0u\0p"), Ok(ok));
        assert_eq!(plain_credentials(b"x\0u\0p"), Err(AuthError::Refused));
        assert!(matches!(plain_credentials(b"\0u"), Err(AuthError::Malformed(_))));
        assert!(matches!(plain_credentials(b"\0u\0p\0q"), Err(AuthError::Malformed(_))));
    }

    /// The default users are RabbitMQ's: guest/guest from loopback only, vhost "/".
    #[test]
    fn default_static_users_match_rabbitmq() {
        let users = StaticUsers::default();
        assert_eq!(users.authenticate("guest", "guest", true), Ok(()));
        assert_eq!(users.authenticate("guest", "guest", false), Err(LoginRefused::LoopbackOnly));
        assert_eq!(users.authenticate("guest", "nope", true), Err(LoginRefused::BadPassword));
        assert_eq!(users.authenticate("nobody", "x", true), Err(LoginRefused::UnknownUser));
        let blank = StaticUsers::empty().with_user("b", "", false);
        assert_eq!(blank.authenticate("b", "", false), Err(LoginRefused::BlankPassword));
        assert_eq!(users.vhost_access("guest", "/"), VhostAccess::Allowed(Permissions::full()));
        assert_eq!(users.vhost_access("guest", "other"), VhostAccess::NotFound);
        assert_eq!(users.vhost_access("nobody", "/"), VhostAccess::Refused);
    }

    /// EXTERNAL needs only an existing user, and keeps the loopback-only rule.
    #[test]
    fn external_login_needs_an_existing_user() {
        let users = StaticUsers::default().with_user("cert-user", "unused", false);
        assert_eq!(users.authenticate_external("cert-user", false), Ok(()));
        assert_eq!(users.authenticate_external("guest", true), Ok(()));
        assert_eq!(users.authenticate_external("guest", false), Err(LoginRefused::LoopbackOnly));
        assert_eq!(users.authenticate_external("nobody", true), Err(LoginRefused::UnknownUser));
    }
}
