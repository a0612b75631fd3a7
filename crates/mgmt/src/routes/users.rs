//! /api/users and /api/permissions.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::{body_json, str_field, tags_field};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::users::{HashingAlgorithm, Permission, User};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/users", get(list))
        .route("/api/users/without-permissions", get(without_permissions))
        .route("/api/users/{user}", get(show).put(put).delete(delete))
        .route("/api/users/{user}/permissions", get(user_permissions))
        .route("/api/permissions", get(list_permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(show_permission).put(put_permission).delete(delete_permission),
        )
}

pub(crate) fn user_json(u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": u.hashing_algorithm.name(),
        "tags": u.tags,
        "limits": u.limits.to_json(),
    })
}

pub(crate) fn permission_json(p: &Permission) -> Value {
    json!({"user": p.user, "vhost": p.vhost, "configure": p.configure, "write": p.write, "read": p.read})
}

async fn list(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    listing::respond(state.users.users().iter().map(user_json).collect(), &params)
}

async fn without_permissions(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
) -> Result<Json<Value>, ApiError> {
    auth.require_admin()?;
    let permissions = state.users.permissions();
    let users: Vec<Value> = state
        .users
        .users()
        .iter()
        .filter(|u| !permissions.iter().any(|p| p.user == u.name))
        .map(user_json)
        .collect();
    Ok(Json(Value::Array(users)))
}

async fn show(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    auth.require_admin()?;
    state.users.user(&name).map(|u| Json(user_json(&u))).ok_or(ApiError::NotFound)
}

/// Body: `password` (hashed here) or `password_hash` (+ `hashing_algorithm`), and `tags`.
async fn put(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let body = body_json(&body)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("user names must not be empty"));
    }
    let tags = tags_field(&body)?;
    let existing = state.users.user(&name);
    let (password_hash, hashing_algorithm) =
        match (str_field(&body, "password")?, str_field(&body, "password_hash")?) {
            (Some(password), _) => (state.users.hash_password(password), HashingAlgorithm::default()),
            (None, Some(hash)) => (hash.to_owned(), hashing_algorithm(&body)?),
            // Updating tags keeps the password.
            (None, None) => existing.as_ref().map_or((String::new(), HashingAlgorithm::default()), |u| {
                (u.password_hash.clone(), u.hashing_algorithm)
            }),
        };
    let existed = existing.is_some();
    // Limits are changed through /api/user-limits only; updating a user keeps them.
    let limits = existing.map(|u| u.limits).unwrap_or_default();
    state.users.put_user(User { name, password_hash, hashing_algorithm, tags, limits })?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// The `hashing_algorithm` of a body with a `password_hash`: one of RabbitMQ's three modules,
/// SHA-256 when absent (RabbitMQ's default); another name is 400.
pub(crate) fn hashing_algorithm(body: &Value) -> Result<HashingAlgorithm, ApiError> {
    match str_field(body, "hashing_algorithm")? {
        None => Ok(HashingAlgorithm::default()),
        Some(name) => HashingAlgorithm::parse(name)
            .ok_or_else(|| ApiError::bad_request(format!("unsupported hashing_algorithm {name}"))),
    }
}

async fn delete(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let vhosts: Vec<String> =
        state.users.permissions().into_iter().filter(|p| p.user == name).map(|p| p.vhost).collect();
    if !state.users.delete_user(&name)? {
        return Err(ApiError::NotFound);
    }
    for vhost in vhosts {
        super::push_permissions(&state, &name, &vhost).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn user_permissions(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    state.users.user(&name).ok_or(ApiError::NotFound)?;
    let items = state.users.permissions().iter().filter(|p| p.user == name).map(permission_json).collect();
    listing::respond(items, &params)
}

async fn list_permissions(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    listing::respond(state.users.permissions().iter().map(permission_json).collect(), &params)
}

async fn show_permission(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    auth.require_admin()?;
    state.users.permission(&vhost, &user).map(|p| Json(permission_json(&p))).ok_or(ApiError::NotFound)
}

async fn put_permission(
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
    let permission = Permission {
        user: user.clone(),
        vhost: vhost.clone(),
        configure: field("configure")?,
        write: field("write")?,
        read: field("read")?,
    };
    let existed = state.users.permission(&vhost, &user).is_some();
    state.users.put_permission(permission)?;
    super::push_permissions(&state, &user, &vhost).await?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete_permission(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    if !state.users.delete_permission(&vhost, &user)? {
        return Err(ApiError::NotFound);
    }
    super::push_permissions(&state, &user, &vhost).await?;
    Ok(StatusCode::NO_CONTENT)
}
