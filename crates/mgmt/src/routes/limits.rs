//! /api/vhost-limits and /api/user-limits: RabbitMQ's per-vhost (`max-connections`,
//! `max-queues`) and per-user (`max-connections`, `max-channels`) limits, in its management
//! plugin's shapes (`rabbit_mgmt_wm_limit(s)`, `rabbit_mgmt_wm_user_limit(s)`, 3.10).
//!
//! Listing needs any management tag and shows the vhosts the user can see
//! (`is_authorized_vhost_visible`); setting and clearing need `administrator`. A vhost's
//! `max-queues` is handed to the broker at once; the connection and channel limits are read by
//! each connection.open / channel.open (`hourglass_session`, `client_limits.rs`).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, put};
use axum::{Extension, Router};
use hourglass_broker::requests::SetVhostMaxQueues;
use serde_json::{json, Value};

use super::body_json;
use crate::access::{sees_vhost_record, NOT_AUTHORISED_VHOST};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::users::{Limits, LimitsOf};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/vhost-limits", get(list_vhost_limits))
        .route("/api/vhost-limits/{vhost}", get(vhost_limits))
        .route("/api/vhost-limits/{vhost}/{name}", put(put_vhost_limit).delete(delete_vhost_limit))
        .route("/api/user-limits", get(list_user_limits))
        .route("/api/user-limits/{user}", get(user_limits))
        .route("/api/user-limits/{user}/{name}", put(put_user_limit).delete(delete_user_limit))
}

async fn list_vhost_limits(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let items = state
        .users
        .vhosts()
        .into_iter()
        .filter(|v| !v.limits.is_empty() && sees_vhost_record(&state, &auth, &v.name))
        .map(|v| json!({"vhost": v.name, "value": v.limits.to_json()}))
        .collect();
    listing::respond(items, &params)
}

async fn vhost_limits(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let record = state.users.vhost(&vhost).ok_or(ApiError::NotFound)?;
    if !sees_vhost_record(&state, &auth, &vhost) {
        return Err(ApiError::not_authorised(NOT_AUTHORISED_VHOST));
    }
    let items = match record.limits.is_empty() {
        true => Vec::new(),
        false => vec![json!({"vhost": vhost, "value": record.limits.to_json()})],
    };
    listing::respond(items, &params)
}

/// PUT `{"value": N}`: sets one limit, keeping the others (RabbitMQ's `update_limit`).
async fn put_vhost_limit(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let record = state.users.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let value = required_value(&body)?;
    let limits = record
        .limits
        .with(LimitsOf::Vhost, &name, &value)
        .map_err(|e| ApiError::bad_request(format!("Validation failed\n\n{e}\n")))?;
    set_vhost_limits(&state, &vhost, limits).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_vhost_limit(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let record = state.users.vhost(&vhost).ok_or(ApiError::NotFound)?;
    set_vhost_limits(&state, &vhost, record.limits.without(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Saves a vhost's limits and hands its `max-queues` to the broker (also used by definitions
/// imports).
pub(crate) async fn set_vhost_limits(state: &AppState, vhost: &str, limits: Limits) -> Result<(), ApiError> {
    let max_queues = limits.effective("max-queues");
    state.users.set_vhost_limits(vhost, limits)?;
    let vhost = vhost.to_owned();
    state.broker.request(SetVhostMaxQueues { vhost, max_queues }).await?;
    Ok(())
}

async fn list_user_limits(
    State(state): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let items = state
        .users
        .users()
        .into_iter()
        .filter(|u| !u.limits.is_empty())
        .map(|u| json!({"user": u.name, "value": u.limits.to_json()}))
        .collect();
    listing::respond(items, &params)
}

async fn user_limits(
    State(state): State<AppState>,
    Path(user): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let record = state.users.user(&user).ok_or(ApiError::NotFound)?;
    let items = match record.limits.is_empty() {
        true => Vec::new(),
        false => vec![json!({"user": user, "value": record.limits.to_json()})],
    };
    listing::respond(items, &params)
}

async fn put_user_limit(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((user, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let record = state.users.user(&user).ok_or(ApiError::NotFound)?;
    let value = required_value(&body)?;
    let limits = record.limits.with(LimitsOf::User, &name, &value).map_err(ApiError::bad_request)?;
    state.users.set_user_limits(&user, limits)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_user_limit(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((user, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let record = state.users.user(&user).ok_or(ApiError::NotFound)?;
    state.users.set_user_limits(&user, record.limits.without(&name))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body's `value` (RabbitMQ's `with_decode([value], ...)`).
fn required_value(body: &[u8]) -> Result<Value, ApiError> {
    match body_json(body)?.get("value") {
        None | Some(Value::Null) => Err(ApiError::bad_request("value is required")),
        Some(value) => Ok(value.clone()),
    }
}
