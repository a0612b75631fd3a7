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
    json!({"access_key_id": key.id, "user": key.user, "created_ms": key.created_ms})
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

/// A new key for `user`: 201 with its id and secret, once saved (replicated in a cluster).
async fn create(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    auth.require_admin()?;
    let secrets = state.secrets.as_ref().ok_or_else(|| {
        ApiError::bad_request("access keys need a secrets key: set secrets_key_file (docs/sqs.md)")
    })?;
    state.users.user(&user).ok_or(ApiError::NotFound)?;
    let (id, secret) = new_id_and_secret();
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let sealed = secrets.seal(&id, &user, &secret);
    let record = AccessKeyRecord { id: id.clone(), user: user.clone(), created_ms, sealed };
    // Saved through the broker task and the store thread before it is visible, as users are.
    state.users.add_access_key(record)?;
    Ok((StatusCode::CREATED, Json(json!({"access_key_id": id, "secret_access_key": secret, "user": user}))))
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
