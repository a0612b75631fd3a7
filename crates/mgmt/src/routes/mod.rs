//! The `/api` routes, one file per resource, as in RabbitMQ's management plugin.

mod access_keys;
mod alarm_limits;
mod bindings;
mod cluster;
pub(crate) mod connections;
mod definitions;
pub(crate) use connections::connection_name;
pub(crate) use definitions::import_definitions;
mod exchanges;
mod limits;
mod none_set;
mod overview;
mod policies;
pub(crate) mod queues;
mod time;
mod topic_permissions;
mod users;
mod vhosts;

use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use hourglass_broker::requests::{AsUser, CallMethod, SetPermissions};
use hourglass_broker::Permissions;
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::AppState;

pub fn router(state: AppState) -> Router {
    // The trailing slash is trimmed before routing, so `GET /api/connections/` is
    // `GET /api/connections` (RabbitMQ's API accepts both; amqp091-go's tests use the former).
    // The web UI's files (`/`, `/app.js`, ...) are served without auth; the rest is the API.
    Router::new()
        .merge(crate::ui::routes())
        .fallback_service(api_router(state))
        .layer(axum::middleware::map_request(trim_trailing_slash))
}

fn api_router(state: AppState) -> Router {
    Router::new()
        .merge(overview::routes())
        .merge(vhosts::routes())
        .merge(users::routes())
        .merge(access_keys::routes())
        .merge(exchanges::routes())
        .merge(queues::routes())
        .merge(policies::routes())
        .merge(time::routes())
        .merge(bindings::routes())
        .merge(connections::routes())
        .merge(definitions::routes())
        .merge(limits::routes())
        .merge(topic_permissions::routes())
        .merge(none_set::routes())
        .merge(cluster::routes())
        .merge(alarm_limits::routes())
        .fallback(get(|| async { ApiError::NotFound }))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::require_login))
        // Outside the login: a cross-site request is refused before any password is checked.
        .layer(axum::middleware::from_fn(crate::cross_site::guard))
        .with_state(state)
}

/// `/api/connections/` → `/api/connections` (the query string kept).
async fn trim_trailing_slash(mut request: axum::extract::Request) -> axum::extract::Request {
    let uri = request.uri();
    let path = uri.path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match uri.query() {
            Some(query) => format!("{trimmed}?{query}"),
            None => trimmed.to_owned(),
        };
        if let Ok(parsed) = rebuilt.parse() {
            *request.uri_mut() = parsed;
        }
    }
    request
}

/// 404 unless the vhost exists.
/// Sends one channel method as `user` with `permissions` on an admin channel in `vhost` (the
/// AMQP handlers do the checks); a channel error becomes the HTTP error RabbitMQ's API would give.
pub(crate) async fn call_as(
    state: &AppState,
    user: &str,
    permissions: Arc<Permissions>,
    vhost: String,
    method: impl Into<hourglass_wire::Method>,
) -> Result<(), ApiError> {
    let who = AsUser { user: user.to_owned(), vhost, permissions };
    state.broker.request(CallMethod { who, method: method.into() }).await??;
    Ok(())
}

/// What an API user may do in `vhost`: its AMQP permissions there (none without an entry), as
/// RabbitMQ's management plugin acts with the user's own rights.
pub(crate) fn permissions_of(state: &AppState, user: &AuthUser, vhost: &str) -> Arc<Permissions> {
    state.users.compiled_permissions(vhost, &user.name)
}

/// Hands `user`'s permissions in `vhost`, as the store has them now (none when removed), to
/// the user's open connections there: the next operation on them is checked against these.
pub(crate) async fn push_permissions(state: &AppState, user: &str, vhost: &str) -> Result<(), ApiError> {
    let permissions = state.users.compiled_permissions(vhost, user);
    let (user, vhost) = (user.to_owned(), vhost.to_owned());
    state.broker.request(SetPermissions { user, vhost, permissions }).await
}

pub(crate) fn require_vhost(state: &AppState, vhost: &str) -> Result<(), ApiError> {
    state.users.vhost(vhost).map(|_| ()).ok_or(ApiError::NotFound)
}

/// The default exchange is `amq.default` in URLs (its real name is empty).
pub(crate) fn exchange_name(url_name: &str) -> &str {
    if url_name == "amq.default" {
        ""
    } else {
        url_name
    }
}

/// A JSON request body; an empty body is an empty object. Bad JSON is a 400, never a panic.
pub(crate) fn body_json(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    Ok(value)
}

pub(crate) fn bool_field(body: &Value, key: &str, default: bool) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(_) => Err(ApiError::bad_request(format!("{key} must be a boolean"))),
    }
}

pub(crate) fn str_field<'a>(body: &'a Value, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::bad_request(format!("{key} must be a string"))),
    }
}

/// A string field the body must have (permission bodies: RabbitMQ decodes them all-required).
pub(crate) fn required_str(body: &Value, key: &str) -> Result<String, ApiError> {
    str_field(body, key)?
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request(format!("{key} is required")))
}

/// 400 unless `user` exists (a permission for a missing user is refused, as RabbitMQ does).
pub(crate) fn require_user(state: &AppState, user: &str) -> Result<(), ApiError> {
    match state.users.user(user) {
        Some(_) => Ok(()),
        None => Err(ApiError::bad_request(format!("user {user} does not exist"))),
    }
}

/// Most tags of one user or vhost: the same 1,024 as the entries of an argument table
/// (`hourglass_broker::table_limits`). RabbitMQ's tags are a handful of words; a user record with
/// a million of them was too large for the catalog (issue #22).
pub(crate) const TAGS_MAX: usize = hourglass_broker::table_limits::TABLE_ENTRIES_MAX;

/// Most bytes of one user's or vhost's tags together (UTF-8), as for an argument table.
pub(crate) const TAGS_BYTES_MAX: usize = hourglass_broker::table_limits::TABLE_BYTES_MAX;

/// Tags past [`TAGS_MAX`] or [`TAGS_BYTES_MAX`]: 400.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TagsTooLarge {
    #[error("{count} tags, more than the limit of {TAGS_MAX}")]
    Count { count: usize },
    #[error("tags of {bytes} bytes, more than the limit of {TAGS_BYTES_MAX}")]
    Bytes { bytes: usize },
}

impl From<TagsTooLarge> for ApiError {
    fn from(error: TagsTooLarge) -> Self {
        ApiError::bad_request(error.to_string())
    }
}

/// Tags as a list or RabbitMQ's comma-separated string, within [`TAGS_MAX`] and [`TAGS_BYTES_MAX`].
pub(crate) fn tags_field(body: &Value) -> Result<Vec<String>, ApiError> {
    let tags = tags_of(body)?;
    if tags.len() > TAGS_MAX {
        return Err(TagsTooLarge::Count { count: tags.len() }.into());
    }
    let bytes = tags.iter().map(String::len).sum();
    if bytes > TAGS_BYTES_MAX {
        return Err(TagsTooLarge::Bytes { bytes }.into());
    }
    Ok(tags)
}

fn tags_of(body: &Value) -> Result<Vec<String>, ApiError> {
    match body.get("tags") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => {
            Ok(s.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect())
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str().map(str::to_owned).ok_or_else(|| ApiError::bad_request("tags must be strings"))
            })
            .collect(),
        Some(_) => Err(ApiError::bad_request("tags must be a list or a comma-separated string")),
    }
}
