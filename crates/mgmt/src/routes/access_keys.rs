//! /api/users/{user}/access-keys: the SQS endpoint's access keys of a user (issue 26,
//! docs/sqs.md). Administrators only, as users are. A new key's secret is in the answer to its
//! POST and nowhere else: listings show ids and dates.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::users::{new_id_and_secret, AccessKeyRecord};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/users/{user}/access-keys", get(list).post(create))
        .route("/api/users/{user}/access-keys/{id}", delete(revoke))
}

fn key_json(key: &AccessKeyRecord) -> Value {
    json!({"access_key_id": key.id, "user": key.user, "vhost": key.vhost(), "created_ms": key.created_ms})
}

async fn list(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    auth.require_admin()?;
    state.users.user(&user).ok_or(ApiError::NotFound)?;
    Ok(Json(Value::Array(state.users.access_keys_of(&user).iter().map(key_json).collect())))
}

/// A new key for `user`, acting in the body's `vhost` (`/` without one): 201 with its id and
/// secret, once saved (replicated in a cluster).
async fn create(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
    body: Option<Json<Value>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    auth.require_admin()?;
    let vhost = match body.as_ref().and_then(|Json(b)| b.get("vhost")) {
        None | Some(Value::Null) => "/".to_owned(),
        Some(Value::String(v)) => v.clone(),
        Some(_) => return Err(ApiError::bad_request("\"vhost\" must be a string")),
    };
    if state.users.vhost(&vhost).is_none() {
        return Err(ApiError::bad_request(format!("vhost '{vhost}' does not exist")));
    }
    let secrets = state.secrets.as_ref().ok_or_else(|| {
        ApiError::bad_request("access keys need a secrets key: set secrets_key_file (docs/sqs.md)")
    })?;
    state.users.user(&user).ok_or(ApiError::NotFound)?;
    let (id, secret) = new_id_and_secret();
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let sealed = secrets.seal(&id, &user, &secret);
    let stored_vhost = (vhost != "/").then(|| vhost.clone());
    let record =
        AccessKeyRecord { id: id.clone(), user: user.clone(), created_ms, sealed, vhost: stored_vhost };
    // Saved through the broker task and the store thread before it is visible, as users are.
    state.users.add_access_key(record)?;
    let answer = json!({"access_key_id": id, "secret_access_key": secret, "user": user, "vhost": vhost});
    Ok((StatusCode::CREATED, Json(answer)))
}

async fn revoke(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((user, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    if state.users.remove_access_key(&user, &id)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}
