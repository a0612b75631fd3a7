//! /api/vhosts: list, show, create (PUT), delete, and a vhost's permissions. The list shows
//! administrators and monitoring users every vhost, others those they have permissions in; the
//! rest is for administrators (RabbitMQ 3.10's rabbit_mgmt_wm_vhost, _permissions_vhost).

use std::collections::HashMap;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::{body_json, str_field, tags_field, users::permission_json};
use crate::access::sees_vhost_record;
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::rates::{self, Rates};
use crate::users::VhostRecord;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/vhosts", get(list))
        .route("/api/vhosts/{vhost}", get(show).put(put).delete(delete))
        .route("/api/vhosts/{vhost}/permissions", get(permissions))
}

pub(crate) fn vhost_json(
    v: &VhostRecord,
    counts: Option<&(usize, usize)>,
    rates: &Rates,
    at: Instant,
) -> Value {
    let (ready, unacked) = counts.copied().unwrap_or_default();
    let depth = rates.details(&format!("vhost\0{}\0depth", v.name), at, &rates::depth_fields(ready, unacked));
    let mut json = json!({
        "name": v.name,
        "description": v.description,
        "tags": v.tags,
        "default_queue_type": v.default_queue_type.clone().unwrap_or_else(|| "classic".into()),
        "metadata": {"description": v.description, "tags": v.tags,
            "default_queue_type": v.default_queue_type.clone().unwrap_or_else(|| "classic".into())},
        "tracing": false,
        "cluster_state": {},
    });
    if let Value::Object(fields) = &mut json {
        fields.extend(depth);
    }
    json
}

async fn counts(state: &AppState) -> Result<HashMap<String, (usize, usize)>, ApiError> {
    let queues = state.broker.run(|b, _| b.list_queues()).await?;
    let mut out: HashMap<String, (usize, usize)> = HashMap::new();
    for q in queues {
        let entry = out.entry(q.vhost).or_default();
        entry.0 += q.messages_ready;
        entry.1 += q.messages_unacked;
    }
    Ok(out)
}

async fn list(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let counts = counts(&state).await?;
    let node = state.node.name.clone();
    let at = Instant::now();
    state.rates.forget_stale(at);
    let items = state
        .users
        .vhosts()
        .iter()
        .filter(|v| sees_vhost_record(&state, &user, &v.name))
        .map(|v| {
            let mut item = vhost_json(v, counts.get(&v.name), &state.rates, at);
            item["cluster_state"] = json!({ node.clone(): "running" });
            item
        })
        .collect();
    listing::respond(items, &params)
}

async fn show(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let record = state.users.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let counts = counts(&state).await?;
    Ok(Json(vhost_json(&record, counts.get(&vhost), &state.rates, Instant::now())))
}

async fn put(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    let body = body_json(&body)?;
    if vhost.is_empty() || vhost.len() > 255 {
        return Err(ApiError::bad_request("vhost names are 1 to 255 bytes"));
    }
    let record = VhostRecord {
        name: vhost.clone(),
        description: str_field(&body, "description")?.unwrap_or_default().to_owned(),
        tags: tags_field(&body)?,
        default_queue_type: str_field(&body, "default_queue_type")?.map(str::to_owned),
        // Limits are changed through /api/vhost-limits only; updating a vhost keeps them.
        limits: state.users.vhost(&vhost).map(|v| v.limits).unwrap_or_default(),
    };
    let existed = state.users.vhost(&vhost).is_some();
    state.users.put_vhost(record)?;
    let name = vhost.clone();
    state.broker.run(move |b, _| b.add_vhost(&name)).await?;
    // The creator gets full permissions, as RabbitMQ's management plugin grants them.
    if !existed && state.users.permission(&vhost, &user.name).is_none() {
        state.users.put_permission(crate::users::Permission::full(&user.name, &vhost))?;
    }
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

async fn delete(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
) -> Result<StatusCode, ApiError> {
    user.require_admin()?;
    if !state.users.delete_vhost(&vhost)? {
        return Err(ApiError::not_found());
    }
    state.broker.run(move |b, now| b.delete_vhost(&vhost, now)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn permissions(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    user.require_admin()?;
    super::require_vhost(&state, &vhost)?;
    let items = state.users.permissions().iter().filter(|p| p.vhost == vhost).map(permission_json).collect();
    listing::respond(items, &params)
}
