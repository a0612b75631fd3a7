//! /api/bindings: list, and create / show / delete between an exchange and a queue or exchange.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use hourglass_broker::admin::slices::{BindingKey, ExchangeKey};
use hourglass_broker::admin::{sort_bindings, BindingDetails, QueueNames};
use hourglass_broker::requests::{
    AsUser, BindingListing, BindingsFrom, BindingsTo, CallMethod, DeclaredBindings,
};
use hourglass_wire::{ExchangeBind, ExchangeUnbind, FieldTable, Method, QueueBind, QueueUnbind};
use serde_json::{json, Value};

use super::exchanges::short;
use super::{body_json, exchange_name, require_vhost, str_field};
use crate::access::{require_vhost_access, VhostFilter};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::{json_to_table, table_to_json};
use crate::listing::{self, Params};
use crate::streamed;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/bindings", get(list_all))
        .route("/api/bindings/{vhost}", get(list_vhost))
        .route("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", get(list_between).post(create))
        .route("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", get(show).delete(delete))
}

/// RabbitMQ's `properties_key`: the routing key (`~` when empty), plus a digest of the arguments.
fn properties_key(routing_key: &str, arguments: &FieldTable) -> String {
    let key = if routing_key.is_empty() { "~".to_owned() } else { routing_key.to_owned() };
    if arguments.is_empty() {
        return key;
    }
    // FNV-1a over the encoded table: stable across runs, which is all the key needs.
    let hash = arguments
        .raw()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    format!("{key}~{hash:016x}")
}

pub(crate) fn binding_json(b: &BindingDetails) -> Value {
    json!({
        "source": b.source,
        "vhost": b.vhost,
        "destination": b.destination,
        "destination_type": b.destination_type,
        "routing_key": b.routing_key,
        "arguments": table_to_json(&b.arguments),
        "properties_key": properties_key(&b.routing_key, &b.arguments),
    })
}

pub(crate) async fn vhost_bindings(state: &AppState, vhost: &str) -> Result<Vec<Value>, ApiError> {
    require_vhost(state, vhost)?;
    let rows = binding_rows(state, Some(vhost.to_owned())).await?;
    listing::off_workers(move || bindings_json(rows)).await
}

/// The bindings of `vhost` whose destination is the queue (or exchange) `destination`, as JSON in
/// the listing's order: looked up on the broker, no other binding's row built.
pub(crate) async fn bindings_to(
    state: &AppState,
    vhost: String,
    destination_is_queue: bool,
    destination: String,
) -> Result<Vec<Value>, ApiError> {
    require_vhost(state, &vhost)?;
    let rows = state.broker.ask(BindingsTo { vhost, destination_is_queue, destination }).await?;
    Ok(rows.iter().map(binding_json).collect())
}

/// The bindings of `vhost` whose source is exchange `source`, as JSON in their order, built in
/// slices (`""`, the default exchange, has one implicit binding per queue).
pub(crate) async fn bindings_from(
    state: &AppState,
    vhost: String,
    source: String,
) -> Result<Vec<Value>, ApiError> {
    require_vhost(state, &vhost)?;
    let rows = state.broker.rows_in_slices(BindingsFrom { vhost, source }).await?;
    listing::off_workers(move || rows.iter().map(binding_json).collect()).await
}

/// Every binding of `only`'s vhost (all vhosts without one), in no order; the rows are built in
/// slices (`BrokerHandle::rows_in_slices`).
async fn binding_rows(state: &AppState, only: Option<String>) -> Result<Vec<BindingDetails>, ApiError> {
    state.broker.rows_in_slices(BindingListing { vhost: only }).await
}

/// `rows` as JSON in the listing's order (`sort_bindings`).
fn bindings_json(mut rows: Vec<BindingDetails>) -> Vec<Value> {
    sort_bindings(&mut rows);
    rows.iter().map(binding_json).collect()
}

/// The keys of every binding of `only`'s vhost (all vhosts without one) that `visible` shows, in
/// the listing's order (`sort_bindings`): by vhost, the implicit ones by queue name, then the
/// declared ones by source exchange, each exchange's in the order they were made. A key per
/// binding (or per range of an exchange's), not a row (issue 22).
async fn ordered_binding_keys(
    state: &AppState,
    only: Option<String>,
    visible: impl Fn(&str) -> bool,
) -> Result<Vec<BindingKey>, ApiError> {
    let (mut names, mut declared) = state.broker.ask(DeclaredBindings { vhost: only }).await?;
    names.retain(|group| visible(&group.vhost));
    declared.retain(|key| exchange_of(key).is_some_and(|x| visible(&x.vhost)));
    listing::off_workers(move || binding_keys_in_order(names, declared)).await
}

/// `declared` and the implicit binding of each queue of `names`, in the listing's order.
fn binding_keys_in_order(mut names: Vec<QueueNames>, mut declared: Vec<BindingKey>) -> Vec<BindingKey> {
    names.sort_by(|a, b| a.vhost.cmp(&b.vhost));
    // A stable sort: the ranges of one exchange stay in their order.
    declared.sort_by(|a, b| {
        let key = |k| exchange_of(k).map(|x| (&x.vhost, &x.name));
        key(a).cmp(&key(b))
    });
    let mut declared = declared.into_iter().peekable();
    let mut keys = Vec::new();
    for group in names {
        let vhost = group.vhost.clone();
        let by_name = vec![(group.vhost, group.queues)];
        let (queues, _) = listing::ordered_keys(by_name, listing::NameOrder::VhostThenName, &Params::new());
        keys.extend(queues.into_iter().map(BindingKey::Default));
        while let Some(key) = declared.next_if(|k| exchange_of(k).is_some_and(|x| x.vhost == vhost)) {
            keys.push(key);
        }
    }
    keys
}

fn exchange_of(key: &BindingKey) -> Option<&ExchangeKey> {
    match key {
        BindingKey::Declared { exchange, .. } => Some(exchange),
        BindingKey::Default(_) => None,
    }
}

/// A binding listing. Asked whole in its own order, it is written slice by slice as the rows
/// are read (`streamed::json_array_in_slices`); filtered, sorted or paged, every row is read
/// and rendered first. Either takes one of the `user`'s listing slots (`streamed.rs`).
async fn list(
    state: &AppState,
    user: &str,
    only: Option<String>,
    params: &Params,
    visible: impl Fn(&str) -> bool,
) -> Result<Response, ApiError> {
    let slot = state.listings.take(user).await?;
    if listing::whole_in_own_order(params) {
        let keys = ordered_binding_keys(state, only, visible).await?;
        let columns = listing::columns(params);
        return Ok(streamed::json_array_in_slices::<BindingListing>(
            state.broker.clone(),
            keys,
            binding_json,
            columns,
            slot,
        ));
    }
    let mut rows = binding_rows(state, only).await?;
    rows.retain(|row| visible(&row.vhost));
    let params = params.clone();
    listing::off_workers(move || {
        let _slot = slot;
        listing::respond(bindings_json(rows), &params)
    })
    .await?
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

fn destination_type(kind: &str) -> Result<&'static str, ApiError> {
    match kind {
        "q" => Ok("queue"),
        "e" => Ok("exchange"),
        _ => Err(ApiError::NotFound),
    }
}

async fn between(
    state: &AppState,
    vhost: &str,
    source: &str,
    kind: &str,
    destination: &str,
) -> Result<Vec<Value>, ApiError> {
    let kind = destination_type(kind)?;
    let source = exchange_name(source);
    Ok(vhost_bindings(state, vhost)
        .await?
        .into_iter()
        .filter(|b| b["source"] == source && b["destination_type"] == kind && b["destination"] == destination)
        .collect())
}

async fn list_between(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    Ok(Json(Value::Array(between(&state, &vhost, &source, &kind, &destination).await?)))
}

async fn show(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    let all = between(&state, &vhost, &source, &kind, &destination).await?;
    all.into_iter().find(|b| b["properties_key"] == props.as_str()).map(Json).ok_or(ApiError::NotFound)
}

/// Body: `routing_key`, `arguments`. 201 with the new binding's location.
async fn create(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    require_vhost(&state, &vhost)?;
    let kind = destination_type(&kind)?;
    let body = body_json(&body)?;
    let routing_key = str_field(&body, "routing_key")?.unwrap_or_default().to_owned();
    let arguments =
        json_to_table(body.get("arguments").unwrap_or(&Value::Null)).map_err(ApiError::bad_request)?;
    let location = properties_key(&routing_key, &arguments);
    bind(
        &state,
        &user.name,
        super::permissions_of(&state, &user, &vhost),
        &vhost,
        exchange_name(&source),
        kind,
        &destination,
        &routing_key,
        arguments,
        true,
    )
    .await?;
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

async fn delete(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    require_vhost_access(&state, &user, &vhost)?;
    let all = between(&state, &vhost, &source, &kind, &destination).await?;
    let found = all.into_iter().find(|b| b["properties_key"] == props.as_str()).ok_or(ApiError::NotFound)?;
    let routing_key = found["routing_key"].as_str().unwrap_or_default().to_owned();
    let arguments = json_to_table(&found["arguments"]).map_err(ApiError::bad_request)?;
    let kind = destination_type(&kind)?;
    bind(
        &state,
        &user.name,
        super::permissions_of(&state, &user, &vhost),
        &vhost,
        exchange_name(&source),
        kind,
        &destination,
        &routing_key,
        arguments,
        false,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Binds (or unbinds) through the admin channel, so the broker's checks apply.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn bind(
    state: &AppState,
    user: &str,
    permissions: std::sync::Arc<hourglass_broker::Permissions>,
    vhost: &str,
    source: &str,
    destination_type: &str,
    destination: &str,
    routing_key: &str,
    arguments: FieldTable,
    create: bool,
) -> Result<(), ApiError> {
    let (source, destination, routing_key) = (short(source)?, short(destination)?, short(routing_key)?);
    let to_queue = destination_type == "queue";
    let method: Method = match (to_queue, create) {
        (true, true) => {
            QueueBind { queue: destination, exchange: source, routing_key, arguments, ..Default::default() }
                .into()
        }
        (true, false) => QueueUnbind { queue: destination, exchange: source, routing_key, arguments }.into(),
        (false, true) => {
            ExchangeBind { destination, source, routing_key, arguments, ..Default::default() }.into()
        }
        (false, false) => {
            ExchangeUnbind { destination, source, routing_key, arguments, ..Default::default() }.into()
        }
    };
    let who = AsUser { user: user.to_owned(), vhost: vhost.to_owned(), permissions };
    state.broker.request(CallMethod { who, method }).await??;
    Ok(())
}
