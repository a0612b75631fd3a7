//! /api/vhosts: list, show, create (PUT), delete, and a vhost's permissions. The list shows
//! administrators and monitoring users every vhost, others those they have permissions in; the
//! rest is for administrators (RabbitMQ 3.10's rabbit_mgmt_wm_vhost, _permissions_vhost).

use hourglass_broker::requests::{AddVhost, DeleteVhost, TracedVhosts, Tracing};
use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::{body_json, bool_field, str_field, tags_field, users::permission_json};
use crate::access::sees_vhost_record;
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::rates::{self, Ranges, Rates};
use crate::users::VhostRecord;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/vhosts", get(list))
        .route("/api/vhosts/{vhost}", get(show).put(put).delete(delete))
        .route("/api/vhosts/{vhost}/permissions", get(permissions))
}

pub(crate) fn vhost_json(v: &VhostRecord, view: &BrokerView, rates: &Rates, ranges: Ranges) -> Value {
    let (ready, unacked) = view.counts.get(&v.name).copied().unwrap_or_default();
    let depth = rates.details(
        &rates::key::vhost_depth(&v.name),
        &rates::depth_fields(ready, unacked),
        ranges.lengths,
    );
    let mut json = json!({
        "name": v.name,
        "description": v.description,
        "tags": v.tags,
        "default_queue_type": v.default_queue_type.clone().unwrap_or_else(|| "classic".into()),
        "metadata": {"description": v.description, "tags": v.tags,
            "default_queue_type": v.default_queue_type.clone().unwrap_or_else(|| "classic".into())},
        "tracing": view.traced.contains(&v.name),
        "cluster_state": {},
    });
    if let Value::Object(fields) = &mut json {
        fields.extend(depth);
    }
    json
}

/// What the broker knows of the vhosts: ready and unacknowledged messages, and which are traced.
pub(crate) struct BrokerView {
    counts: HashMap<String, (usize, usize)>,
    traced: HashSet<String>,
}

async fn broker_view(state: &AppState) -> Result<BrokerView, ApiError> {
    let queues = rates::sampler::queue_stats_in_slices(&state.broker).await?;
    let traced = state.broker.ask(TracedVhosts).await?;
    let counts = rates::sampler::depth_by_vhost(&queues);
    Ok(BrokerView { counts, traced: traced.into_iter().collect() })
}

async fn list(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let view = broker_view(&state).await?;
    let node = state.node.name.clone();
    let ranges = Ranges::from_params(&params);
    let items = state
        .users
        .vhosts()
        .iter()
        .filter(|v| sees_vhost_record(&state, &user, &v.name))
        .map(|v| {
            let mut item = vhost_json(v, &view, &state.rates, ranges);
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
    Query(params): Query<Params>,
) -> Result<Json<Value>, ApiError> {
    user.require_admin()?;
    let record = state.users.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let view = broker_view(&state).await?;
    Ok(Json(vhost_json(&record, &view, &state.rates, Ranges::from_params(&params))))
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
    // Updating a vhost keeps what the body does not give (`tracing` alone switches the firehose);
    // limits are changed through /api/vhost-limits only.
    let before = state.users.vhost(&vhost);
    let existed = before.is_some();
    let before = before.unwrap_or_default();
    let record = VhostRecord {
        name: vhost.clone(),
        description: str_field(&body, "description")?.map_or(before.description, str::to_owned),
        tags: if body.get("tags").is_some() { tags_field(&body)? } else { before.tags },
        default_queue_type: str_field(&body, "default_queue_type")?
            .map(str::to_owned)
            .or(before.default_queue_type),
        limits: before.limits,
    };
    let tracing = match body.get("tracing") {
        None | Some(Value::Null) => None,
        Some(_) => Some(bool_field(&body, "tracing", false)?),
    };
    state.users.put_vhost(record)?;
    let (name, node) = (vhost.clone(), state.node.name.clone());
    let tracing = tracing.map(|on| match on {
        true => Tracing::On { node },
        false => Tracing::Off,
    });
    state.broker.request(AddVhost { name, tracing }).await?;
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
    if state.users.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    // Its exchanges, queues and bindings go first, then its record: a crash between the two
    // leaves an empty vhost that still exists (the delete did not answer), never definitions
    // under a vhost nobody has a record of.
    let name = vhost.clone();
    state.broker.request(DeleteVhost { name }).await?;
    state.users.delete_vhost(&vhost)?;
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
