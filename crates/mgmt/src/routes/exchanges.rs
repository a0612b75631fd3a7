//! /api/exchanges: list, show, declare (PUT), delete, publish, and an exchange's bindings.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use hourglass_broker::admin::{sort_exchanges, ExchangeDetails};
use hourglass_broker::requests::{AsUser, DeclareExchange, DeleteExchange, ExchangeListing, PublishMessage};
use hourglass_broker::Publish;
use hourglass_wire::{ExchangeDeclare, ExchangeDelete, ShortStr};
use serde_json::{json, Value};

use super::{body_json, bool_field, exchange_name, require_vhost, str_field};
use crate::access::{require_vhost_access, VhostFilter};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::{json_to_properties, json_to_table, table_to_json};
use crate::listing::{self, Params};
use crate::rates::{self, Rates};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/exchanges", get(list_all))
        .route("/api/exchanges/{vhost}", get(list_vhost))
        .route("/api/exchanges/{vhost}/{name}", get(show).put(put).delete(delete))
        .route("/api/exchanges/{vhost}/{name}/publish", post(publish))
        .route("/api/exchanges/{vhost}/{name}/bindings/source", get(bindings_source))
        .route("/api/exchanges/{vhost}/{name}/bindings/destination", get(bindings_destination))
}

pub(crate) fn exchange_json(details: &ExchangeDetails, rates: &Rates) -> Value {
    let (vhost, x) = (&details.vhost, &details.spec);
    let key = rates::key::exchange(vhost, &x.name.as_str());
    let message_stats = rates.details(&key, &rates::exchange_fields(&details.message_stats), None);
    json!({
        "name": x.name.as_str(),
        "vhost": vhost,
        "type": x.type_name(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "user_who_performed_action": "rmq-internal",
        "policy": details.policies.policy,
        "operator_policy": details.policies.operator_policy,
        "effective_policy_definition": table_to_json(&details.policies.effective_definition),
        "message_stats": message_stats,
    })
}

/// Every exchange of `only`'s vhost (all vhosts without one) as JSON, by vhost and name; the
/// rows are built in slices (`BrokerHandle::rows_in_slices`).
pub(crate) async fn all_exchanges(state: &AppState, only: Option<String>) -> Result<Vec<Value>, ApiError> {
    let mut rows = state.broker.rows_in_slices(ExchangeListing { vhost: only }).await?;
    let rates = state.rates.clone();
    listing::off_workers(move || {
        sort_exchanges(&mut rows);
        rows.iter().map(|x| exchange_json(x, &rates)).collect()
    })
    .await
}

async fn list_all(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let mut items = all_exchanges(&state, None).await?;
    VhostFilter::new(&state, &user).retain(&mut items);
    listing::respond(items, &params)
}

async fn list_vhost(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    listing::respond(all_exchanges(&state, Some(vhost)).await?, &params)
}

async fn show(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let name = exchange_name(&name).to_owned();
    let all = all_exchanges(&state, Some(vhost)).await?;
    all.into_iter().find(|x| x["name"] == name.as_str()).map(Json).ok_or(ApiError::NotFound)
}

/// exchange.declare from a JSON object (a PUT body or a definitions entry): `type` required,
/// `durable` (default true), `auto_delete`, `internal`, `arguments`.
pub(crate) fn exchange_declare(name: &str, body: &Value) -> Result<ExchangeDeclare, ApiError> {
    let kind = str_field(body, "type")?.ok_or_else(|| ApiError::bad_request("type is required"))?;
    Ok(ExchangeDeclare {
        exchange: short(name)?,
        kind: short(kind)?,
        durable: bool_field(body, "durable", true)?,
        auto_delete: bool_field(body, "auto_delete", false)?,
        internal: bool_field(body, "internal", false)?,
        arguments: json_to_table(body.get("arguments").unwrap_or(&Value::Null))
            .map_err(ApiError::bad_request)?,
        ..Default::default()
    })
}

async fn put(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let declare = exchange_declare(exchange_name(&name), &body_json(&body)?)?;
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    let created = state.broker.request(DeclareExchange { who, declare }).await??;
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
    let delete = ExchangeDelete {
        exchange: short(exchange_name(&name))?,
        if_unused: params.get("if-unused").is_some_and(|v| v == "true"),
        ..Default::default()
    };
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    state.broker.request(DeleteExchange { who, delete }).await??;
    Ok(StatusCode::NO_CONTENT)
}

/// Body: `routing_key`, `payload`, `payload_encoding` (`string` or `base64`), `properties`.
/// Answers `{"routed": bool}`.
async fn publish(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let body = body_json(&body)?;
    let payload = str_field(&body, "payload")?.unwrap_or_default();
    let payload = match str_field(&body, "payload_encoding")?.unwrap_or("string") {
        "string" => bytes::Bytes::copy_from_slice(payload.as_bytes()),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map(bytes::Bytes::from)
            .map_err(|_| ApiError::bad_request("payload is not valid base64"))?,
        other => return Err(ApiError::bad_request(format!("unknown payload_encoding {other}"))),
    };
    let publish = Publish {
        exchange: short(exchange_name(&name))?,
        routing_key: short(str_field(&body, "routing_key")?.unwrap_or_default())?,
        mandatory: true,
        properties: json_to_properties(body.get("properties").unwrap_or(&Value::Null))
            .map_err(ApiError::bad_request)?
            .into(),
        body: payload,
    };
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    let routed = state.broker.request(PublishMessage { who, publish }).await??;
    Ok(Json(json!({"routed": routed})))
}

async fn bindings_source(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    let name = exchange_name(&name).to_owned();
    let items = super::bindings::bindings_from(&state, vhost, name).await?;
    listing::respond(items, &params)
}

async fn bindings_destination(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    let items = super::bindings::bindings_to(&state, vhost, false, name).await?;
    listing::respond(items, &params)
}

pub(crate) fn short(s: &str) -> Result<ShortStr, ApiError> {
    ShortStr::try_from(s).map_err(|_| ApiError::bad_request(format!("name too long (over 255 bytes): {s}")))
}
