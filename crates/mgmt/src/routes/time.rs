//! Hourglass's own time endpoints (contract §4, §7): a delivery's visibility by receipt handle,
//! and the delayed messages of a queue — list and peek without consuming, cancel, reschedule.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use hourglass_broker::admin::{DelayedError, DelayedMessage};
use hourglass_broker::{Timestamp, VisibilityError};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{body_json, require_vhost};
use crate::error::ApiError;
use crate::json::properties_to_json;
use crate::AppState;

/// The most delayed messages one listing returns.
const DELAYED_LIST_MAX: usize = 1000;
/// The default page of a delayed-message listing.
const DELAYED_LIST_DEFAULT: usize = 100;
/// Longest visibility a client may set through the API: 12 h, the queue argument's maximum.
const VISIBILITY_MAX_MS: u64 = 43_200_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues/{vhost}/{name}/visibility", post(change_visibility))
        .route("/api/queues/{vhost}/{name}/delayed", get(list_delayed))
        .route("/api/queues/{vhost}/{name}/delayed/{id}", post(reschedule).delete(cancel))
}

/// Body `{"receipt_handle": "...", "timeout_ms": N}`: the message stays invisible N ms more from
/// now (0: visible at once). 204, or 404 for an unknown queue or a stale/unknown handle.
async fn change_visibility(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_vhost(&state, &vhost)?;
    let body = body_json(&body)?;
    let handle = body
        .get("receipt_handle")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("receipt_handle (string) is required"))?
        .to_owned();
    let timeout_ms =
        body.get("timeout_ms").and_then(Value::as_u64).filter(|ms| *ms <= VISIBILITY_MAX_MS).ok_or_else(
            || ApiError::bad_request(format!("timeout_ms must be an integer 0..={VISIBILITY_MAX_MS}")),
        )?;
    let result =
        state.broker.run(move |b, now| b.change_visibility(&vhost, &name, &handle, timeout_ms, now)).await?;
    match result {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(VisibilityError::QueueNotFound) => Err(ApiError::not_found()),
        Err(VisibilityError::HandleNotFound) => {
            Err(ApiError { reason: "receipt handle is stale or unknown".into(), ..ApiError::not_found() })
        }
    }
}

#[derive(Deserialize)]
struct ListParams {
    limit: Option<usize>,
}

/// The queue's delayed messages in due order, without consuming them.
async fn list_delayed(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    require_vhost(&state, &vhost)?;
    let limit = params.limit.unwrap_or(DELAYED_LIST_DEFAULT).min(DELAYED_LIST_MAX);
    let (listed, now) = state.broker.run(move |b, now| (b.peek_delayed(&vhost, &name, limit), now)).await?;
    let listed = listed.map_err(delayed_error)?;
    Ok(Json(Value::Array(listed.iter().map(|d| delayed_json(d, now)).collect())))
}

#[derive(Deserialize)]
struct Reschedule {
    /// Due this many ms from now.
    delay_ms: Option<u64>,
    /// Due at this wall-clock time (ms since the epoch).
    due_ms: Option<u64>,
}

/// Body `{"delay_ms": N}` or `{"due_ms": T}`: the message falls due then instead.
async fn reschedule(
    State(state): State<AppState>,
    Path((vhost, name, id)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_vhost(&state, &vhost)?;
    let body: Reschedule =
        serde_json::from_value(body_json(&body)?).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if body.delay_ms.is_some() == body.due_ms.is_some() {
        return Err(ApiError::bad_request("give exactly one of delay_ms and due_ms"));
    }
    let result = state
        .broker
        .run(move |b, now| {
            let due = match (body.delay_ms, body.due_ms) {
                (Some(delay), _) => now.saturating_add_millis(delay),
                (_, Some(at)) => Timestamp::from_millis(at),
                _ => now,
            };
            b.reschedule_delayed(&vhost, &name, id, due, now)
        })
        .await?;
    result.map(|()| StatusCode::NO_CONTENT).map_err(delayed_error)
}

/// Drops a delayed message before it is due.
async fn cancel(
    State(state): State<AppState>,
    Path((vhost, name, id)): Path<(String, String, u64)>,
) -> Result<StatusCode, ApiError> {
    require_vhost(&state, &vhost)?;
    let result = state.broker.run(move |b, _| b.cancel_delayed(&vhost, &name, id)).await?;
    result.map(|()| StatusCode::NO_CONTENT).map_err(delayed_error)
}

fn delayed_json(d: &DelayedMessage, now: Timestamp) -> Value {
    let m = &d.message;
    json!({
        "id": d.id,
        "due_ms": d.due.as_millis(),
        "due_in_ms": d.due.as_millis().saturating_sub(now.as_millis()),
        "exchange": m.exchange.as_str(),
        "routing_key": m.routing_key.as_str(),
        "properties": properties_to_json(&m.properties().decode()),
        "payload_bytes": m.body.len(),
        "payload": base64::engine::general_purpose::STANDARD.encode(&m.body),
        "payload_encoding": "base64",
    })
}

fn delayed_error(error: DelayedError) -> ApiError {
    match error {
        DelayedError::QueueNotFound => ApiError::not_found(),
        DelayedError::MessageNotFound => {
            ApiError { reason: "no such delayed message".into(), ..ApiError::not_found() }
        }
    }
}
