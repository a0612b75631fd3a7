//! Hourglass's own time endpoints (semantics §4, §7): a delivery's visibility by receipt handle,
//! the delayed messages of a queue — list and peek without consuming, cancel, reschedule — and
//! the deliveries in flight under a visibility timeout, with when each comes back.
//!
//! Who may: each endpoint reads or steers messages of one queue, so it needs what the AMQP
//! analogue needs (`access::require_queue_access`): access to the vhost, then **read** on the
//! queue. Listing shows payloads as basic.get would; cancelling drops a message as basic.get +
//! ack or queue.purge would; rescheduling and changing visibility decide when a message is
//! delivered, as a consumer's basic.reject / nack does — every one of those needs read on the
//! queue in RabbitMQ, and none changes the queue's definition (configure) or adds a message
//! (write).
//!
//! A listing shows at most [`DELAYED_PAYLOAD_SHOWN_MAX`] bytes of each payload (less with
//! `truncate`), and stops once [`DELAYED_LIST_BYTES_MAX`] bytes of payloads and properties are
//! in the response, or before the stored records it read (on a blocking thread) pass
//! [`DELAYED_LIST_READ_BYTES_MAX`].

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use hourglass_broker::admin::{DelayedError, DelayedKey, DelayedMessage, DelayedPeek, DelayedSlice};
use hourglass_broker::requests::{
    CancelDelayed, CancelDelayedKeys, ChangeVisibility, DelayedWithMessageId, DueAt, InFlight,
    InFlightWithPeers, PeekDelayed, RescheduleDelayed, RescheduleDelayedKeys,
};
use hourglass_broker::{Access, Timestamp, VisibilityError};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{body_json, connection_name, require_vhost};
use crate::access::require_queue_access;
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::properties_to_json;
use crate::listing::off_workers;
use crate::AppState;

/// The most delayed messages one listing returns.
const DELAYED_LIST_MAX: usize = 1000;
/// The default page of a delayed-message listing.
const DELAYED_LIST_DEFAULT: usize = 100;
/// The most bytes of one payload a listing shows (`truncate` asks for fewer): 64 KiB is enough to
/// recognise a message; a client that needs a whole large body consumes it.
const DELAYED_PAYLOAD_SHOWN_MAX: usize = 65_536;
/// The most bytes of stored records one listing reads (a record is read whole, however little of
/// its payload is shown): 1,000 delayed messages of the largest size (128 MiB) would otherwise
/// read 128 GB for one response. Messages after it are left out of that response.
const DELAYED_LIST_READ_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The most payload and property bytes (before base64) one listing response carries: 8 MiB, so
/// a listing of the maximum count over large messages stays a few MiB of JSON instead of GiBs
/// (issue #12: 1,000 large messages made 1 GiB). Messages after the budget is spent are left out
/// of that response, and the last listed one's payload is cut to what was left.
const DELAYED_LIST_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Longest visibility a client may set through the API: 12 h, the queue argument's maximum.
const VISIBILITY_MAX_MS: u64 = 43_200_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues/{vhost}/{name}/visibility", post(change_visibility))
        .route(
            "/api/queues/{vhost}/{name}/delayed",
            get(list_delayed).delete(cancel_by_message_id).post(reschedule_by_message_id),
        )
        .route("/api/queues/{vhost}/{name}/delayed/{id}", post(reschedule).delete(cancel))
        .route("/api/queues/{vhost}/{name}/in-flight", get(list_in_flight))
}

/// Body `{"receipt_handle": "...", "timeout_ms": N}`: the message stays invisible N ms more from
/// now (0: visible at once). 204, or 404 for an unknown queue or a stale/unknown handle.
async fn change_visibility(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
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
    let change = ChangeVisibility { vhost, queue: name, receipt_handle: handle, timeout_ms };
    let result = state.broker.request(change).await?;
    match result {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(VisibilityError::QueueNotFound) => Err(ApiError::NotFound),
        Err(VisibilityError::HandleInvalid | VisibilityError::HandleNotFound | VisibilityError::Expired) => {
            Err(ApiError::NoSuchItem("receipt handle is stale or unknown"))
        }
        Err(VisibilityError::BeyondLimit) => Err(ApiError::bad_request(format!(
            "a delivery stays invisible at most {VISIBILITY_MAX_MS} ms in all from when it was made"
        ))),
    }
}

#[derive(Deserialize)]
struct ListParams {
    limit: Option<usize>,
    /// Show at most this many bytes of each payload (as RabbitMQ's `…/get` `truncate`).
    truncate: Option<usize>,
}

/// The queue's delayed messages in due order, without consuming them; payloads are cut as the
/// module documentation says (`payload_bytes` is always the whole size).
async fn list_delayed(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let limit = params.limit.unwrap_or(DELAYED_LIST_DEFAULT).min(DELAYED_LIST_MAX);
    let shown_max = params.truncate.unwrap_or(DELAYED_PAYLOAD_SHOWN_MAX).min(DELAYED_PAYLOAD_SHOWN_MAX);
    let (peek, now) = state.broker.ask(PeekDelayed { vhost, queue: name, limit }).await?;
    // A heavy listing's place (`streamed.rs`): its reads hold up to 64 MiB of records.
    let _slot = state.listings.take(&user.name).await?;
    // The records of paged ones are read on a blocking thread: a read may wait on the disk, and
    // the broker's task reads none (ARCHITECTURE.md rule 1).
    let read = move |peek: DelayedPeek| peek.read_stored(DELAYED_LIST_READ_BYTES_MAX);
    let listed = off_workers(move || peek.map(read)).await?.map_err(delayed_error)?;
    let mut budget = DELAYED_LIST_BYTES_MAX;
    let mut items = Vec::with_capacity(listed.len());
    for delayed in &listed {
        let Some(item) = delayed_json(delayed, now, shown_max, &mut budget) else { break };
        items.push(item);
    }
    Ok(Json(Value::Array(items)))
}

#[derive(Deserialize)]
struct InFlightParams {
    limit: Option<usize>,
}

/// The queue's deliveries under a visibility timeout, soonest back first: who holds each
/// (connection and channel, as `/api/channels` names them), its receipt handle and when it
/// returns. `{"deliveries": [...], "total": N}`: `total` counts them all, past `limit` too.
async fn list_in_flight(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<InFlightParams>,
) -> Result<Json<Value>, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let limit = params.limit.unwrap_or(DELAYED_LIST_DEFAULT).min(DELAYED_LIST_MAX);
    let InFlight { deliveries, peers, now } =
        state.broker.ask(InFlightWithPeers { vhost, queue: name, limit }).await?;
    let (listed, total) = deliveries.ok_or(ApiError::NotFound)?;
    let deliveries: Vec<Value> = listed
        .iter()
        .map(|d| {
            let connection = peers
                .get(&d.connection)
                .map(|(peer, local, tls)| connection_name(&state.node, peer, local, *tls));
            json!({
                "receipt_handle": d.receipt_handle,
                "timeout": if d.consumer_timeout_ms.is_some() { "consumer" } else { "visibility" },
                "consumer_timeout": d.consumer_timeout_ms,
                "connection": connection,
                "channel": connection.as_ref().map(|c| format!("{c} ({})", d.channel)),
                "delivery_tag": d.delivery_tag,
                "visible_at_ms": d.visible_at.as_millis(),
                "visible_in_ms": d.visible_at.as_millis().saturating_sub(now.as_millis()),
            })
        })
        .collect();
    Ok(Json(json!({"deliveries": deliveries, "total": total})))
}

#[derive(Deserialize)]
struct Reschedule {
    /// Due this many ms from now.
    delay_ms: Option<u64>,
    /// Due at this wall-clock time (ms since the epoch).
    due_ms: Option<u64>,
}

impl Reschedule {
    /// When the message falls due.
    fn due(&self) -> DueAt {
        match (self.delay_ms, self.due_ms) {
            (Some(delay), _) => DueAt::After(delay),
            (_, Some(at)) => DueAt::At(Timestamp::from_millis(at)),
            _ => DueAt::After(0),
        }
    }
}

/// A reschedule's body: exactly one of `delay_ms` and `due_ms`.
fn reschedule_body(body: &Bytes) -> Result<Reschedule, ApiError> {
    let body: Reschedule =
        serde_json::from_value(body_json(body)?).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if body.delay_ms.is_some() == body.due_ms.is_some() {
        return Err(ApiError::bad_request("give exactly one of delay_ms and due_ms"));
    }
    Ok(body)
}

/// Body `{"delay_ms": N}` or `{"due_ms": T}`: the message falls due then instead.
async fn reschedule(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name, id)): Path<(String, String, u64)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let when = reschedule_body(&body)?;
    let result = state.broker.request(RescheduleDelayed { vhost, queue: name, id, due: when.due() }).await?;
    result.map(|()| StatusCode::NO_CONTENT).map_err(delayed_error)
}

/// Drops a delayed message before it is due.
async fn cancel(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name, id)): Path<(String, String, u64)>,
) -> Result<StatusCode, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let result = state.broker.request(CancelDelayed { vhost, queue: name, id }).await?;
    result.map(|()| StatusCode::NO_CONTENT).map_err(delayed_error)
}

/// One slice of a search by `message_id`: what one broker job looks at.
const SEARCH_SLICE: DelayedSlice = DelayedSlice { examined: 2_000, reads: 128, read_bytes: 64 << 20 };
/// The most messages one cancel or reschedule by `message_id` acts on (a `message_id` names
/// one message in practice; the bound keeps a bad one from holding a list of millions).
const BY_MESSAGE_ID_MAX: usize = 10_000;

#[derive(Deserialize)]
struct ByMessageId {
    message_id: String,
}

/// The delayed messages of a queue whose `message_id` property is `message_id`, found slice by
/// slice (one broker job each, so the broker task is held for milliseconds at a time), as `user`
/// in one of the heavy listings' places (`streamed.rs`: each slice reads up to 64 MiB of
/// records); 404 when there is none.
async fn delayed_keys_with_message_id(
    state: &AppState,
    user: &str,
    vhost: &str,
    name: &str,
    message_id: &str,
) -> Result<Vec<DelayedKey>, ApiError> {
    let (mut found, mut cursor) = (Vec::new(), None);
    let _slot = state.listings.take(user).await?;
    loop {
        let search = DelayedWithMessageId {
            vhost: vhost.to_owned(),
            queue: name.to_owned(),
            message_id: message_id.to_owned(),
            cursor,
            slice: SEARCH_SLICE,
        };
        let slice = state.broker.ask(search).await?.map_err(delayed_error)?;
        // The far tier's files and the paged records are read on a blocking thread.
        let (matches, next) = off_workers(move || slice.found()).await?;
        found.extend(matches);
        if found.len() > BY_MESSAGE_ID_MAX {
            return Err(ApiError::bad_request(format!(
                "more than {BY_MESSAGE_ID_MAX} delayed messages have message_id {message_id:?}"
            )));
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if found.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(found)
}

/// `DELETE …/delayed?message_id=X`: drops every delayed message with that `message_id` property
/// (the AMQP property; as the delayed-message plugin's users ask for). 200 `{"cancelled": N}`;
/// 404 when none waits.
async fn cancel_by_message_id(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(by): Query<ByMessageId>,
) -> Result<Json<Value>, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let keys = delayed_keys_with_message_id(&state, &user.name, &vhost, &name, &by.message_id).await?;
    // Those that fell due since they were found are no longer delayed: not counted.
    let cancelled = state.broker.request(CancelDelayedKeys { vhost, queue: name, keys }).await?;
    Ok(Json(json!({"cancelled": cancelled})))
}

/// `POST …/delayed?message_id=X` with `{"delay_ms": N}` or `{"due_ms": T}`: every delayed message
/// with that `message_id` falls due then instead. 200 `{"rescheduled": N}`; 404 when none waits.
async fn reschedule_by_message_id(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(by): Query<ByMessageId>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    require_queue_access(&state, &user, &vhost, &name, Access::Read)?;
    require_vhost(&state, &vhost)?;
    let when = reschedule_body(&body)?;
    let keys = delayed_keys_with_message_id(&state, &user.name, &vhost, &name, &by.message_id).await?;
    let due = when.due();
    let rescheduled = state.broker.request(RescheduleDelayedKeys { vhost, queue: name, keys, due }).await?;
    Ok(Json(json!({"rescheduled": rescheduled})))
}

/// One listed message, its properties and (cut) payload charged to `budget`; `None` once the
/// budget cannot pay for its properties.
fn delayed_json(d: &DelayedMessage, now: Timestamp, shown_max: usize, budget: &mut usize) -> Option<Value> {
    let m = &d.message;
    let properties = properties_to_json(&m.properties().decode());
    let properties_bytes = serde_json::to_vec(&properties).map_or(usize::MAX, |v| v.len());
    *budget = budget.checked_sub(properties_bytes)?;
    let shown = m.body.len().min(shown_max).min(*budget);
    *budget -= shown;
    Some(json!({
        "id": d.id,
        "due_ms": d.due.as_millis(),
        "due_in_ms": d.due.as_millis().saturating_sub(now.as_millis()),
        "exchange": m.exchange.as_str(),
        "routing_key": m.routing_key.as_str(),
        "properties": properties,
        "payload_bytes": m.body.len(),
        "payload": base64::engine::general_purpose::STANDARD.encode(&m.body[..shown]),
        "payload_encoding": "base64",
        "payload_truncated": shown < m.body.len(),
    }))
}

fn delayed_error(error: DelayedError) -> ApiError {
    match error {
        DelayedError::QueueNotFound => ApiError::NotFound,
        DelayedError::MessageNotFound => ApiError::NoSuchItem("no such delayed message"),
    }
}
