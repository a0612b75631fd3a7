//! /api/topic-permissions: RabbitMQ's topic permissions (`rabbit_mgmt_wm_topic_permission(s)`),
//! administrators only. Objects are `{"user", "vhost", "exchange", "write", "read"}`; a change
//! applies to the user's open connections in the vhost at their next publish or bind.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{json, Value};

use super::body_json;
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::users::TopicPermission;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/topic-permissions", get(list))
        .route("/api/topic-permissions/{vhost}/{user}", get(show).put(put).delete(delete))
        .route("/api/users/{user}/topic-permissions", get(of_user))
        .route("/api/vhosts/{vhost}/topic-permissions", get(of_vhost))
}

pub(crate) fn topic_permission_json(t: &TopicPermission) -> Value {
    json!({"user": t.user, "vhost": t.vhost, "exchange": t.exchange, "write": t.write, "read": t.read})
}

async fn respond(
    state: &AppState,
    auth: &AuthUser,
    params: &Params,
    keep: impl Fn(&TopicPermission) -> bool,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    let items =
        state.users.topic_permissions().iter().filter(|t| keep(t)).map(topic_permission_json).collect();
    listing::respond(items, params)
}

async fn list(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    respond(&state, &auth, &params, |_| true).await
}

async fn of_user(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    state.users.user(&user).ok_or(ApiError::NotFound)?;
    respond(&state, &auth, &params, |t| t.user == user).await
}

async fn of_vhost(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    super::require_vhost(&state, &vhost)?;
    respond(&state, &auth, &params, |t| t.vhost == vhost).await
}

async fn show(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    if !state.users.topic_permissions().iter().any(|t| t.vhost == vhost && t.user == user) {
        return Err(ApiError::NotFound);
    }
    respond(&state, &auth, &params, |t| t.vhost == vhost && t.user == user).await
}

/// Body: `exchange`, `write`, `read` (all required, as RabbitMQ's `with_decode`).
async fn put(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let body = body_json(&body)?;
    super::require_vhost(&state, &vhost)?;
    super::require_user(&state, &user)?;
    let field = |key: &str| super::required_str(&body, key);
    let topic = TopicPermission {
        user: user.clone(),
        vhost: vhost.clone(),
        exchange: field("exchange")?,
        write: field("write")?,
        read: field("read")?,
    };
    let existed = state
        .users
        .topic_permissions()
        .iter()
        .any(|t| t.vhost == vhost && t.user == user && t.exchange == topic.exchange);
    state.users.put_topic_permission(topic)?;
    super::push_permissions(&state, &user, &vhost).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// `?exchange=X`: only that exchange's (Hourglass's addition, for `clear_topic_permissions USER X`);
/// without it every topic permission of the user in the vhost, as RabbitMQ's API.
#[derive(Debug, serde::Deserialize)]
struct DeleteParams {
    exchange: Option<String>,
}

async fn delete(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    Query(params): Query<DeleteParams>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    if !state.users.delete_topic_permissions(&vhost, &user, params.exchange.as_deref())? {
        return Err(ApiError::NotFound);
    }
    super::push_permissions(&state, &user, &vhost).await?;
    Ok(StatusCode::NO_CONTENT)
}
