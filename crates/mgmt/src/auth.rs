//! HTTP basic auth against the user store. A user needs one of RabbitMQ's management tags to use
//! the API at all, and `administrator` to change users, vhosts, permissions or definitions.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hourglass_broker::Timestamp;
use hourglass_session::{Admission, LoginRefused};
use tracing::warn;

use crate::error::ApiError;
use crate::AppState;

/// Sent by scripts in a page (jQuery's convention, and our UI's): such a request must not make
/// the browser open its Basic-auth prompt.
const FROM_SCRIPT_HEADER: &str = "x-requested-with";

/// Tags that open the management API (RabbitMQ's management user tags).
const MANAGEMENT_TAGS: &[&str] = &["administrator", "monitoring", "policymaker", "management"];

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct AuthUser {
    pub name: String,
    pub tags: Vec<String>,
}

impl AuthUser {
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// RabbitMQ's `is_admin`: the `administrator` tag.
    pub fn is_admin(&self) -> bool {
        self.has_tag("administrator")
    }

    /// RabbitMQ's `is_monitor`: `administrator` or `monitoring` (sees every user's connections).
    pub fn is_monitor(&self) -> bool {
        self.is_admin() || self.has_tag("monitoring")
    }

    /// RabbitMQ's `is_authorized_monitor`: 401 `Not monitor user` without `administrator` or
    /// `monitoring`.
    pub fn require_monitor(&self) -> Result<(), ApiError> {
        if self.is_monitor() {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not monitor user"))
        }
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not administrator user"))
        }
    }
}

/// Logs in every request with its basic credentials. A refused login is logged with its reason
/// (never the password) and answered only after the failed-login hold of its source address
/// (`state.logins`, shared with AMQP), awaited here, so no thread waits; a good login is never
/// held.
pub async fn require_login(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
    // Requests without a socket (in-process tests) count as local.
    let loopback = peer.is_none_or(|addr| addr.ip().to_canonical().is_loopback());
    let from_script = request.headers().contains_key(FROM_SCRIPT_HEADER);
    let Some((name, password)) = basic_credentials(&request) else {
        return login_failed(from_script);
    };
    let now = wall_clock_now();
    let admission = peer.map_or(Admission::Check, |addr| state.logins.admit(addr.ip(), now));
    let checked = match admission {
        Admission::Check => state.users.check_login(&name, &password, loopback).map_err(|reason| {
            let hold_ms = peer.map_or(0, |addr| state.logins.record_failure(addr.ip(), now));
            (reason, hold_ms)
        }),
        Admission::Refuse { hold_ms } => Err((LoginRefused::TooManyFailures, hold_ms)),
    };
    let user = match checked {
        Ok(user) => user,
        Err((reason, hold_ms)) => {
            let peer = peer.map(|a| a.to_string()).unwrap_or_default();
            warn!(%peer, user = %name, %reason, hold_ms, "HTTP access denied");
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            return login_failed(from_script);
        }
    };
    if !user.tags.iter().any(|t| MANAGEMENT_TAGS.contains(&t.as_str())) {
        warn!(user = %name, reason = "not a management user", "HTTP access denied");
        return ApiError::not_authorised("Not management user").into_response();
    }
    request.extensions_mut().insert(AuthUser { name: user.name, tags: user.tags });
    next.run(request).await
}

/// A 401 for a failed login. A page's own script (the web UI, which sends `X-Requested-With`)
/// gets it without the `WWW-Authenticate` challenge, so the browser shows the page's login form
/// rather than its Basic-auth prompt; every other client gets the challenge, as from RabbitMQ.
fn login_failed(from_script: bool) -> Response {
    let mut response = ApiError::unauthorized("Login failed").into_response();
    if from_script {
        response.headers_mut().remove(header::WWW_AUTHENTICATE);
    }
    response
}

/// Wall-clock ms for the login limiter (the AMQP side passes the server clock's `now`, which
/// follows the same wall clock; a clock step only shortens or lengthens holds, never by more than
/// their cap).
fn wall_clock_now() -> Timestamp {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp::from_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

fn basic_credentials(request: &Request) -> Option<(String, String)> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (name, password) = text.split_once(':')?;
    Some((name.to_owned(), password.to_owned()))
}
