//! /api/connections (list, show, close; by user), /api/channels, /api/consumers.
//!
//! Users without `administrator` or `monitoring` see only their own connections, channels and
//! consumers, and only administrators close other users' connections (`access.rs`).

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json, Router};
use hourglass_broker::admin::{
    sort_channels, sort_connections, sort_consumers, ChannelSummary, ConnectionSummary, ConsumerSummary,
};
use hourglass_broker::requests::{ChannelListing, CloseConnections, ConnectionListing, ConsumerListing};
use serde_json::{json, Value};

use crate::access::{require_owner_or_tag, require_vhost_access, sees_owner, OwnedAction};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::table_to_json;
use crate::listing::{self, Params};
use crate::rates::{self, Rates};
use crate::{AppState, NodeInfo};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/connections", get(list_connections))
        .route("/api/connections/{name}", get(show_connection).delete(close_connection))
        .route("/api/connections/{name}/channels", get(connection_channels))
        .route("/api/connections/username/{user}", get(user_connections).delete(close_user_connections))
        .route("/api/vhosts/{vhost}/connections", get(vhost_connections))
        .route("/api/channels", get(list_channels))
        .route("/api/vhosts/{vhost}/channels", get(vhost_channels))
        .route("/api/consumers", get(list_consumers))
        .route("/api/consumers/{vhost}", get(vhost_consumers))
}

/// `peer -> local`, as RabbitMQ names connections: the accepted socket's local address
/// (`127.0.0.1:46300 -> 127.0.0.1:5672`, never the wildcard bind address). Without one (a
/// stand-in connection) the listener's bind address and port: the AMQPS listener's over TLS.
pub(crate) fn connection_name(node: &NodeInfo, peer: &str, local: &str, tls: bool) -> String {
    if local.is_empty() {
        // A socket address, so an IPv6 listener reads `[::]:5672`, not `:::5672`.
        return format!("{peer} -> {}", std::net::SocketAddr::new(node.bind, node.amqp_listener_port(tls)));
    }
    format!("{peer} -> {local}")
}

fn split_peer(peer: &str) -> (String, u16) {
    match peer.rsplit_once(':') {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_owned(), port.parse().unwrap_or(0)),
        None => (peer.to_owned(), 0),
    }
}

fn connection_json(node: &NodeInfo, c: &ConnectionSummary) -> Value {
    let (peer_host, peer_port) = split_peer(&c.info.peer);
    // RabbitMQ's `host` and `port` are the socket's local end.
    let (host, port) = match split_peer(&c.info.local) {
        (host, port) if !host.is_empty() => (host, port),
        _ => (node.bind.to_string(), node.amqp_listener_port(c.info.login.tls)),
    };
    json!({
        "name": connection_name(node, &c.info.peer, &c.info.local, c.info.login.tls),
        "node": node.name,
        "state": "running",
        "type": "network",
        "protocol": c.info.login.protocol,
        "auth_mechanism": c.info.login.mechanism,
        "ssl": c.info.login.tls,
        "user": c.info.user,
        "user_who_performed_action": c.info.user,
        "vhost": c.info.vhost,
        "host": host,
        "port": port,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "connected_at": 0,
        "channel_max": c.info.channel_max,
        "frame_max": c.info.frame_max,
        "timeout": c.info.heartbeat_s,
        "channels": c.channels,
        "client_properties": table_to_json(&c.info.client_properties),
    })
}

fn channel_json(node: &NodeInfo, c: &ChannelSummary, rates: &Rates) -> Value {
    let key = rates::key::channel(c.conn, c.channel);
    let message_stats = rates.details(&key, &rates::publisher_fields(&c.message_stats), None);
    let connection = connection_name(node, &c.peer, &c.local, c.tls);
    let (peer_host, peer_port) = split_peer(&c.peer);
    json!({
        "name": format!("{connection} ({})", c.channel.0),
        "number": c.channel.0,
        "node": node.name,
        "state": "running",
        "user": c.user,
        "vhost": c.vhost,
        "connection_details": {"name": connection, "peer_host": peer_host, "peer_port": peer_port},
        "consumer_count": c.consumers,
        "confirm": c.confirm,
        "transactional": c.transactional,
        "prefetch_count": c.prefetch_count,
        "global_prefetch_count": c.global_prefetch_count,
        "messages_unacknowledged": c.messages_unacknowledged,
        "messages_unconfirmed": c.messages_unconfirmed,
        "messages_uncommitted": c.messages_uncommitted,
        "acks_uncommitted": c.acks_uncommitted,
        "message_stats": message_stats,
    })
}

fn consumer_json(node: &NodeInfo, c: &ConsumerSummary) -> Value {
    let connection = connection_name(node, &c.peer, &c.local, c.tls);
    let (peer_host, peer_port) = split_peer(&c.peer);
    json!({
        "consumer_tag": c.consumer_tag,
        "active": true,
        "activity_status": "up",
        "ack_required": c.ack_required,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch_count,
        "arguments": {},
        "consumer_timeout": c.consumer_timeout_ms,
        "queue": {"name": c.queue, "vhost": c.vhost},
        "channel_details": {
            "number": c.channel.0,
            "name": format!("{connection} ({})", c.channel.0),
            "connection_name": connection,
            "node": node.name,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": c.user,
        },
    })
}

/// Every client connection by id, built in slices (`BrokerHandle::rows_in_slices`).
pub(crate) async fn connection_rows(state: &AppState) -> Result<Vec<ConnectionSummary>, ApiError> {
    let mut all = state.broker.rows_in_slices(ConnectionListing).await?;
    sort_connections(&mut all);
    Ok(all)
}

/// Every client channel by connection and number, built in slices.
pub(crate) async fn channel_rows(state: &AppState) -> Result<Vec<ChannelSummary>, ApiError> {
    let mut all = state.broker.rows_in_slices(ChannelListing).await?;
    sort_channels(&mut all);
    Ok(all)
}

/// Every consumer by vhost, queue and tag, built in slices.
pub(crate) async fn consumer_rows(state: &AppState) -> Result<Vec<ConsumerSummary>, ApiError> {
    let mut all = state.broker.rows_in_slices(ConsumerListing).await?;
    sort_consumers(&mut all);
    Ok(all)
}

/// Every connection `user` may see.
async fn connections(state: &AppState, user: &AuthUser) -> Result<Vec<(ConnectionSummary, Value)>, ApiError> {
    let all = connection_rows(state).await?;
    Ok(all
        .into_iter()
        .filter(|c| sees_owner(user, &c.info.user))
        .map(|c| {
            let json = connection_json(&state.node, &c);
            (c, json)
        })
        .collect())
}

async fn list_connections(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    listing::respond(connections(&state, &auth).await?.into_iter().map(|(_, j)| j).collect(), &params)
}

async fn vhost_connections(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &auth, &vhost)?;
    super::require_vhost(&state, &vhost)?;
    let items = connections(&state, &auth)
        .await?
        .into_iter()
        .filter(|(c, _)| c.info.vhost == vhost)
        .map(|(_, j)| j)
        .collect();
    listing::respond(items, &params)
}

async fn user_connections(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_owner_or_tag(&auth, Some(&user), OwnedAction::Inspect)?;
    let items = connections(&state, &auth)
        .await?
        .into_iter()
        .filter(|(c, _)| c.info.user == user)
        .map(|(_, j)| j)
        .collect();
    listing::respond(items, &params)
}

/// Closes every connection of a user (320 CONNECTION_FORCED; `X-Reason` gives the text): an
/// administrator, or the user itself.
async fn close_user_connections(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    require_owner_or_tag(&auth, Some(&user), OwnedAction::Close)?;
    let ids: Vec<_> = connections(&state, &auth)
        .await?
        .into_iter()
        .filter(|(c, _)| c.info.user == user)
        .map(|(c, _)| c.id)
        .collect();
    let reason = close_reason(&headers);
    state.broker.request(CloseConnections { ids, reason }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn close_reason(headers: &HeaderMap) -> String {
    headers.get("x-reason").and_then(|v| v.to_str().ok()).unwrap_or("Closed via management plugin").to_owned()
}

/// The connection called `name`, if `auth` may `action` it (RabbitMQ's is_authorized_user: a
/// user who may not act on others' connections gets 401 for a name that matches nothing too).
async fn owned_connection(
    state: &AppState,
    auth: &AuthUser,
    name: &str,
    action: OwnedAction,
) -> Result<(ConnectionSummary, Value), ApiError> {
    let all = connection_rows(state).await?;
    let found = all
        .into_iter()
        .find(|c| connection_name(&state.node, &c.info.peer, &c.info.local, c.info.login.tls) == name);
    require_owner_or_tag(auth, found.as_ref().map(|c| c.info.user.as_str()), action)?;
    let found = found.ok_or(ApiError::NotFound)?;
    let json = connection_json(&state.node, &found);
    Ok((found, json))
}

async fn show_connection(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (_, json) = owned_connection(&state, &auth, &name, OwnedAction::Inspect).await?;
    Ok(Json(json))
}

/// Closes with 320 CONNECTION_FORCED; the `X-Reason` header gives the text, as in RabbitMQ. An
/// administrator may close any connection, other users only their own.
async fn close_connection(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let (found, _) = owned_connection(&state, &auth, &name, OwnedAction::Close).await?;
    let reason = close_reason(&headers);
    state.broker.request(CloseConnections { ids: vec![found.id], reason }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every channel `user` may see.
async fn channels(state: &AppState, user: &AuthUser) -> Result<Vec<(ChannelSummary, Value)>, ApiError> {
    let all = channel_rows(state).await?;
    Ok(all
        .into_iter()
        .filter(|c| sees_owner(user, &c.user))
        .map(|c| {
            let json = channel_json(&state.node, &c, &state.rates);
            (c, json)
        })
        .collect())
}

async fn list_channels(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    listing::respond(channels(&state, &auth).await?.into_iter().map(|(_, j)| j).collect(), &params)
}

async fn vhost_channels(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    require_vhost_access(&state, &auth, &vhost)?;
    super::require_vhost(&state, &vhost)?;
    let items = channels(&state, &auth)
        .await?
        .into_iter()
        .filter(|(c, _)| c.vhost == vhost)
        .map(|(_, j)| j)
        .collect();
    listing::respond(items, &params)
}

async fn connection_channels(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    owned_connection(&state, &auth, &name, OwnedAction::Inspect).await?;
    let items = channels(&state, &auth)
        .await?
        .into_iter()
        .filter(|(_, j)| j["connection_details"]["name"] == name.as_str())
        .map(|(_, j)| j)
        .collect();
    listing::respond(items, &params)
}

/// Every consumer `user` may see (RabbitMQ filters consumers by their channel's user only).
async fn consumers(state: &AppState, user: &AuthUser, only: Option<String>) -> Result<Vec<Value>, ApiError> {
    let all = consumer_rows(state).await?;
    Ok(all
        .iter()
        .filter(|c| sees_owner(user, &c.user))
        .filter(|c| only.as_ref().is_none_or(|v| &c.vhost == v))
        .map(|c| consumer_json(&state.node, c))
        .collect())
}

async fn list_consumers(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    listing::respond(consumers(&state, &auth, None).await?, &params)
}

async fn vhost_consumers(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    super::require_vhost(&state, &vhost)?;
    listing::respond(consumers(&state, &auth, Some(vhost)).await?, &params)
}
