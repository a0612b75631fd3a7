//! /api/queues: list, show, declare (PUT), delete, purge (`contents`), get, bindings.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete as delete_route, get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use hourglass_broker::admin::{sort_queues, QueueDetails};
use hourglass_broker::queue::{QueueStats, QueueType};
use hourglass_broker::requests::{
    AsUser, DeclareQueue, DeleteQueue, GetMessages, GetSettlement, QueueDetailsNamed, QueueListing,
    QueueNameGroups, ReadWait,
};
use hourglass_broker::Message;
use hourglass_wire::{BasicGetOk, QueueDeclare, QueueDelete, QueuePurge, ShortStr};
use serde_json::{json, Value};

use super::exchanges::short;
use super::{body_json, bool_field, require_vhost, str_field};
use crate::access::{require_vhost_access, VhostFilter};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::{json_to_table, properties_to_json, table_to_json};
use crate::listing::{self, Params};
use crate::rates::{self, Ranges, Rates};
use crate::AppState;

/// The most messages one `…/get` returns: the request's count is clamped to it.
const GET_COUNT_MAX: u64 = 1000;
/// A `…/get` stops taking messages once the bodies it took reach 16 MiB (the first message is
/// always taken): `count` = 1000 over large messages would otherwise build GiBs of JSON (issue
/// #12). What it did not take stays in the queue; `truncate` still cuts what is shown.
const GET_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The gets one `…/get` sends at most: each but the last may stop at a message paged out and
/// wait for the broker to read it off its thread (issue 41), the next taking the rest; so it
/// waits at most 7 times.
const GET_ROUNDS_MAX: usize = 8;
/// How long a `…/get` waits for one such read; past it, the next get is the last and takes what
/// is in memory.
const GET_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues", get(list_all))
        .route("/api/queues/{vhost}", get(list_vhost))
        .route("/api/queues/{vhost}/{name}", get(show).put(put).delete(delete))
        .route("/api/queues/{vhost}/{name}/contents", delete_route(purge))
        .route("/api/queues/{vhost}/{name}/get", post(get_messages))
        .route("/api/queues/{vhost}/{name}/bindings", get(bindings))
}

/// A queue as RabbitMQ's API shows it; `ranges` lists rate history when the request asked.
pub(crate) fn queue_json(q: &QueueDetails, node: &str, rates: &Rates, ranges: Ranges) -> Value {
    let s = &q.stats;
    let message_stats = rates.details(
        &rates::key::queue(&s.vhost, &s.name),
        &rates::queue_fields(&s.counters.messages),
        ranges.msg_rates,
    );
    let depth = rates.details(
        &rates::key::queue_depth(&s.vhost, &s.name),
        &rates::depth_fields(s.messages_ready, s.messages_unacked),
        ranges.lengths,
    );
    let mut json = json!({
        "name": s.name,
        "vhost": s.vhost,
        "type": match s.queue_type { QueueType::Classic => "classic", QueueType::Quorum => "quorum" },
        "durable": s.durable,
        "auto_delete": s.auto_delete,
        "exclusive": s.exclusive,
        "arguments": table_to_json(&q.arguments),
        "node": node,
        "state": "running",
        "consumers": s.consumers,
        "consumer_capacity": if s.consumers > 0 { 1.0 } else { 0.0 },
        "consumer_utilisation": if s.consumers > 0 { 1.0 } else { 0.0 },
        "exclusive_consumer_tag": null,
        "policy": q.policies.policy,
        "operator_policy": q.policies.operator_policy,
        "effective_policy_definition": table_to_json(&q.policies.effective_definition),
        "memory": 0,
        "message_stats": message_stats,
        "head_message_timestamp": null,
        // Hourglass's time statistics (semantics §7).
        "messages_delayed": s.messages_delayed,
        "message_bytes_delayed": s.message_bytes_delayed,
        "messages_delayed_on_disk": s.messages_delayed_on_disk,
        "next_due_ms": s.next_due.map(|t| t.as_millis()),
        "messages_with_ttl": s.messages_with_ttl,
        "next_expiry_ms": s.next_expiry.map(|t| t.as_millis()),
        "last_expiry_ms": s.last_expiry.map(|t| t.as_millis()),
        "messages_expired": s.counters.expired,
        "messages_dead_lettered": {
            "rejected": s.counters.dead_lettered_rejected,
            "expired": s.counters.dead_lettered_expired,
            "maxlen": s.counters.dead_lettered_maxlen,
            "delivery_limit": s.counters.dead_lettered_delivery_limit,
        },
        "messages_visibility_expired": s.counters.visibility_expired,
        "effective_settings": effective_settings(q),
        "messages_redelivered": s.counters.redelivered,
        "messages_deduplicated": s.counters.deduplicated,
    });
    if let Value::Object(fields) = &mut json {
        if s.queue_type == QueueType::Quorum {
            // RabbitMQ 4.3's quorum queue fields: ready messages per priority, and how many
            // priorities hold some.
            let by_priority: serde_json::Map<String, Value> =
                s.messages_by_priority.iter().map(|(p, n)| (p.to_string(), json!(n))).collect();
            fields.insert("messages_active_priorities".to_owned(), json!(by_priority.len()));
            fields.insert("messages_by_priority".to_owned(), Value::Object(by_priority));
            // RabbitMQ's quorum queue members: this node leads it, and is its one member a
            // client can use (in a cluster the followers keep copies of the store but serve no
            // client). AMQP 1.0's `GET /queues/:q` names the same node.
            fields.insert("leader".to_owned(), json!(node));
            fields.insert("members".to_owned(), json!([node]));
            fields.insert("online".to_owned(), json!([node]));
        }
        fields.extend(depth);
        fields.extend(count_fields(s).map(|(name, value)| (name.to_owned(), json!(value))));
    }
    json
}

/// The time and limit settings the queue runs with, arguments and policies merged and defaults
/// applied (semantics §4–§6): what `arguments` and `effective_policy_definition` add up to. `null`
/// where nothing applies.
fn effective_settings(q: &QueueDetails) -> Value {
    let a = &q.settings;
    json!({
        "message_ttl": a.message_ttl_ms,
        "delivery_delay": a.delivery_delay_ms,
        "visibility_timeout": a.visibility_timeout_ms,
        "consumer_timeout": q.consumer_timeout_ms,
        "delivery_limit": a.delivery_limit,
        "redelivery_delay": a.redelivery_delay_ms,
        "redelivery_delay_max": a.redelivery_delay_max_ms,
        "delayed_retry": a.delayed_retry.map(|r| {
            json!({"type": r.kind.name(), "min": r.min_ms, "max": r.max_ms, "multiplier": r.multiplier})
        }),
    })
}

/// RabbitMQ's count and byte fields of a queue besides its depth (docs/http-api.md "Queue counts
/// and bytes"), as the queue's state gives them.
fn count_fields(s: &QueueStats) -> [(&'static str, usize); 11] {
    [
        ("messages_ram", s.messages_ram()),
        ("messages_ready_ram", s.messages_ready_ram),
        ("messages_unacknowledged_ram", s.messages_unacked),
        ("messages_persistent", s.messages_persistent),
        ("messages_paged_out", s.messages_paged_out()),
        ("message_bytes", s.message_bytes()),
        ("message_bytes_ready", s.message_bytes_ready),
        ("message_bytes_unacknowledged", s.message_bytes_unacked),
        ("message_bytes_ram", s.message_bytes_ram()),
        ("message_bytes_persistent", s.message_bytes_persistent),
        ("message_bytes_paged_out", s.message_bytes_paged_out()),
    ]
}

/// Every queue of `only`'s vhost (all vhosts without one) as the broker's compact rows, built in
/// slices (`BrokerHandle::rows_in_slices`) and in no order; rendering is left to the caller, so a
/// page renders only its own rows.
async fn queue_rows(state: &AppState, only: Option<String>) -> Result<Vec<QueueDetails>, ApiError> {
    state.broker.rows_in_slices(QueueListing { vhost: only }).await
}

/// Every queue of `only`'s vhost (all vhosts without one) as JSON, sorted by vhost and name.
pub(crate) async fn all_queues(state: &AppState, only: Option<String>) -> Result<Vec<Value>, ApiError> {
    let mut rows = queue_rows(state, only).await?;
    sort_queues(&mut rows);
    let node = state.node.name.clone();
    Ok(rows.iter().map(|q| queue_json(q, &node, &state.rates, Ranges::default())).collect())
}

/// Sort keys read from a queue's row without rendering it (each the JSON field of that name).
const QUEUE_SORT_VALUES: &[listing::SortValue<QueueDetails>] = &[
    ("messages", |q| json!(q.stats.messages())),
    ("messages_ready", |q| json!(q.stats.messages_ready)),
    ("messages_unacknowledged", |q| json!(q.stats.messages_unacked)),
    ("messages_delayed", |q| json!(q.stats.messages_delayed)),
    ("consumers", |q| json!(q.stats.consumers)),
];

/// A queue listing (`listing::respond_keyed`): the queues' names are filtered, sorted and
/// paged, and only the rows shown are asked of the broker — a full listing's slice by slice as
/// it is written — so a listing of 100,000 queues holds a key per queue, not its row. Only the
/// vhosts `visible` accepts are listed (`access.rs`: vhosts the user may see). Each takes one of
/// the `user`'s listing slots (`streamed.rs`) while it runs.
async fn list(
    state: &AppState,
    user: &str,
    only: Option<String>,
    params: &Params,
    visible: impl Fn(&str) -> bool,
) -> Result<Response, ApiError> {
    let slot = state.listings.take(user).await?;
    let names = state.broker.ask(QueueNameGroups { vhost: only }).await?;
    let groups = names.into_iter().filter(|g| visible(&g.vhost)).map(|g| (g.vhost, g.queues)).collect();
    let (node, rates) = (state.node.clone(), state.rates.clone());
    let ranges = Ranges::from_params(params);
    let listing = listing::KeyedListing::<QueueListing> {
        render: Arc::new(move |q: &QueueDetails| queue_json(q, &node.name, &rates, ranges)),
        values: QUEUE_SORT_VALUES,
    };
    listing::respond_keyed(&state.broker, groups, params, listing, slot).await
}

async fn list_all(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let filter = VhostFilter::new(&state, &user);
    list(&state, &user.name, None, &params, |vhost| filter.shows(vhost)).await
}

async fn list_vhost(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    list(&state, &user.name, Some(vhost), &params, |_| true).await
}

async fn show(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let row = state.broker.ask(QueueDetailsNamed { vhost, name }).await?;
    let row = row.ok_or(ApiError::NotFound)?;
    Ok(Json(queue_json(&row, &state.node.name, &state.rates, Ranges::from_params(&params))))
}

/// queue.declare from a JSON object (a PUT body or a definitions entry): `durable` (default
/// true), `auto_delete`, `arguments`.
pub(crate) fn queue_declare(name: &str, body: &Value) -> Result<QueueDeclare, ApiError> {
    Ok(QueueDeclare {
        queue: short(name)?,
        durable: bool_field(body, "durable", true)?,
        auto_delete: bool_field(body, "auto_delete", false)?,
        arguments: json_to_table(body.get("arguments").unwrap_or(&Value::Null))
            .map_err(ApiError::bad_request)?,
        ..Default::default()
    })
}

/// Body: `durable` (default true), `auto_delete`, `arguments`. 201 when created, 204 when an
/// equivalent queue existed, 400 when it differs.
async fn put(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("queue name must not be empty"));
    }
    let declare = queue_declare(&name, &body_json(&body)?)?;
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    let created = state.broker.request(DeclareQueue { who, declare }).await??;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

async fn delete(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<StatusCode, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let delete = QueueDelete {
        queue: short(&name)?,
        if_unused: params.get("if-unused").is_some_and(|v| v == "true"),
        if_empty: params.get("if-empty").is_some_and(|v| v == "true"),
        ..Default::default()
    };
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    state.broker.request(DeleteQueue { who, delete }).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn purge(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let purge = QueuePurge { queue: short(&name)?, ..Default::default() };
    let permissions = super::permissions_of(&state, &user, &vhost);
    super::call_as(&state, &user.name, permissions, vhost, purge).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Body: `count`, `ackmode`, `encoding` (`auto` or `base64`), `truncate`. Gets up to `count`
/// messages, then settles them all at once (a requeue after each would return the same message).
async fn get_messages(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let body = body_json(&body)?;
    let count = match body.get("count") {
        None => 1,
        Some(Value::Number(n)) => {
            n.as_u64().ok_or_else(|| ApiError::bad_request("count must be a positive integer"))?
        }
        Some(Value::String(s)) => {
            s.parse().map_err(|_| ApiError::bad_request("count must be a positive integer"))?
        }
        Some(_) => return Err(ApiError::bad_request("count must be a positive integer")),
    }
    .min(GET_COUNT_MAX);
    // RabbitMQ's ack_requeue_true returns the messages, as a reject with requeue does.
    let settlement =
        match str_field(&body, "ackmode")?.ok_or_else(|| ApiError::bad_request("ackmode is required"))? {
            "ack_requeue_false" => GetSettlement::Ack,
            "ack_requeue_true" | "reject_requeue_true" => GetSettlement::Requeue,
            "reject_requeue_false" => GetSettlement::Reject,
            other => return Err(ApiError::bad_request(format!("unknown ackmode {other}"))),
        };
    let base64_always = match str_field(&body, "encoding")?.unwrap_or("auto") {
        "auto" => false,
        "base64" => true,
        other => return Err(ApiError::bad_request(format!("unknown encoding {other}"))),
    };
    let truncate = body.get("truncate").and_then(Value::as_u64).map(|t| t as usize);
    let _ = bool_field(&body, "requeue", false)?;
    let queue = short(&name)?;
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    let replies = take_messages(&state, who, queue, count, settlement).await?;
    let items = replies
        .iter()
        .map(|(ok, message)| {
            let body = &message.body[..truncate.unwrap_or(usize::MAX).min(message.body.len())];
            let (payload, encoding) = match (base64_always, std::str::from_utf8(body)) {
                (false, Ok(text)) => (text.to_owned(), "string"),
                _ => (base64::engine::general_purpose::STANDARD.encode(body), "base64"),
            };
            json!({
                "payload_bytes": message.body.len(),
                "redelivered": ok.redelivered,
                "exchange": ok.exchange.as_str(),
                "routing_key": ok.routing_key.as_str(),
                "message_count": ok.message_count,
                "properties": properties_to_json(&message.properties().decode()),
                "payload": payload,
                "payload_encoding": encoding,
            })
        })
        .collect();
    Ok(Json(Value::Array(items)))
}

/// Up to `count` messages of `queue` taken as `who` and settled as `settlement`, bodies up to
/// [`GET_BODY_BYTES_MAX`]. The broker reads paged messages off its thread: a get that finds a
/// read out takes nothing, or stops at a paged message
/// ([`Gotten::awaits_read`](hourglass_broker::requests::Gotten)); this waits for the read and
/// gets the rest, in up to [`GET_ROUNDS_MAX`] gets, the last (or the one after a wait that timed
/// out) taking what is in memory. A `count` of 0 takes nothing and waits for nothing. After a
/// get that took messages, only when they were acknowledged: a requeue put them back in front,
/// where the next get would take them again, and a reject may dead-letter them back into the
/// same queue; such a get answers with fewer. What earlier gets took and acknowledged is
/// answered whatever a later one meets.
async fn take_messages(
    state: &AppState,
    who: AsUser,
    queue: ShortStr,
    count: u64,
    settlement: GetSettlement,
) -> Result<Vec<(BasicGetOk, Arc<Message>)>, ApiError> {
    let mut got: Vec<(BasicGetOk, Arc<Message>)> = Vec::new();
    let mut body_bytes = 0usize;
    let mut may_wait = count > 0;
    for round in 1..=GET_ROUNDS_MAX {
        may_wait &= round < GET_ROUNDS_MAX;
        let get = GetMessages {
            who: who.clone(),
            queue: queue.clone(),
            count: count - got.len() as u64,
            body_bytes_max: GET_BODY_BYTES_MAX.saturating_sub(body_bytes),
            settlement,
            wait_for_reads: may_wait,
        };
        let gotten = match state.broker.request(get).await {
            Ok(Ok(gotten)) => gotten,
            Err(_) | Ok(Err(_)) if !got.is_empty() => break,
            Ok(Err(refused)) => return Err(refused.into()),
            Err(error) => return Err(error),
        };
        let settled_out_of_line = settlement != GetSettlement::Ack && !gotten.messages.is_empty();
        body_bytes += gotten.messages.iter().map(|(_, message)| message.body.len()).sum::<usize>();
        got.extend(gotten.messages);
        if !gotten.awaits_read || settled_out_of_line || !may_wait {
            break;
        }
        let wait = ReadWait { vhost: who.vhost.clone(), queue: queue.as_str().into_owned() };
        match state.broker.wait_for_read(wait).await {
            // A read still out after the wait: the next get takes what is in memory.
            Ok(woken) => may_wait = tokio::time::timeout(GET_READ_WAIT, woken).await.is_ok(),
            Err(_) if !got.is_empty() => break,
            Err(error) => return Err(error),
        }
    }
    Ok(got)
}

async fn bindings(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let items = super::bindings::bindings_to(&state, vhost, true, name).await?;
    listing::respond(items, &params)
}
