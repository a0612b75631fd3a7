//! /api/overview, /api/whoami, /api/nodes, the health checks and the aliveness test.

use super::connections;
use crate::access::{sees_owner, VhostFilter};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::listing::Params;
use crate::rates::{self, Ranges};
use crate::{AppState, PRODUCT_VERSION, RABBITMQ_COMPAT_VERSION};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use hourglass_broker::requests::{AsUser, CheckAlive, ConnectionCount, ExchangeKeys, NodeTotals, VhostNames};
use serde_json::{json, Value};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/overview", get(overview))
        .route("/api/whoami", get(whoami))
        .route("/api/nodes", get(nodes))
        .route("/api/nodes/{node}", get(node))
        .route("/api/health/checks/alarms", get(alarms))
        .route("/api/health/checks/local-alarms", get(local_alarms))
        .route("/api/health/checks/ready-to-serve-clients", get(ok))
        // A single node: no quorum queue or mirror depends on it staying up for a quorum.
        .route("/api/health/checks/node-is-quorum-critical", get(ok))
        .route("/api/health/checks/node-is-mirror-sync-critical", get(ok))
        .route("/api/health/checks/virtual-hosts", get(virtual_hosts))
        .route("/api/health/checks/port-listener/{port}", get(port_listener))
        .route("/api/health/checks/protocol-listener/{protocol}", get(protocol_listener))
        .route("/api/aliveness-test/{vhost}", get(aliveness))
}

/// Totals count what the user could list (RabbitMQ's get_overview(User) for users without
/// `monitoring`): queues and exchanges of its vhosts, its own connections, channels, consumers.
/// Their rates are the broker's as a whole (the sampler's, `rates/sampler.rs`), whoever asks.
async fn overview(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Result<Json<Value>, ApiError> {
    let vhosts = (!user.is_monitor()).then(|| VhostFilter::new(&state, &user));
    let mut queues = rates::sampler::queue_stats_in_slices(&state.broker).await?;
    queues.retain(|q| vhosts.as_ref().is_none_or(|f| f.shows(&q.vhost)));
    let connections = connections::connection_rows(&state).await?;
    let connections = connections.iter().filter(|c| sees_owner(&user, &c.info.user)).count();
    let channels = connections::channel_rows(&state).await?;
    let channels = channels.iter().filter(|c| sees_owner(&user, &c.user)).count();
    let consumers = connections::consumer_rows(&state).await?;
    let consumers = consumers.iter().filter(|c| sees_owner(&user, &c.user)).count();
    let exchange_keys = state.broker.ask(ExchangeKeys { vhost: None }).await?;
    let stats = state.broker.ask(NodeTotals).await?.messages;
    let exchanges =
        exchange_keys.iter().filter(|x| vhosts.as_ref().is_none_or(|f| f.shows(&x.vhost))).count();
    let (ready, unacked) = rates::sampler::total_depth(&queues);
    let ranges = Ranges::from_params(&params);
    let publisher = rates::publisher_fields(&stats);
    let mut message_stats = state.rates.details(rates::key::OVERVIEW, &publisher, ranges.msg_rates);
    // Ours (RabbitMQ has no such fields): messages expired and dead-lettered, with their rates.
    let time_totals = rates::time_total_fields(&queues);
    message_stats.extend(state.rates.details(rates::key::OVERVIEW_TIME, &time_totals, ranges.msg_rates));
    let depth = rates::depth_fields(ready, unacked);
    let mut queue_totals = state.rates.details(rates::key::OVERVIEW_QUEUE_TOTALS, &depth, ranges.lengths);
    let delayed: usize = queues.iter().map(|q| q.messages_delayed).sum();
    queue_totals.insert("messages_delayed".into(), json!(delayed));
    let exchange_types: Vec<Value> = ["direct", "fanout", "headers", "topic"]
        .iter()
        .map(|t| json!({"name": t, "description": "", "enabled": true}))
        .collect();
    let node = &state.node;
    let listener = |protocol: &str, port: u16| json!({"node": node.name, "protocol": protocol, "ip_address": node.bind.to_string(), "port": port});
    Ok(Json(json!({
        "management_version": RABBITMQ_COMPAT_VERSION,
        "rates_mode": "basic",
        "exchange_types": exchange_types,
        "product_version": PRODUCT_VERSION,
        "product_name": "Hourglass",
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "cluster_name": node.cluster_name(),
        "erlang_version": "none (Rust)",
        "erlang_full_version": "none (Rust)",
        "disable_stats": false,
        "enable_queue_totals": true,
        "statistics_db_event_queue": 0,
        "node": node.name,
        "churn_rates": {
            "connection_created": 0, "connection_closed": 0, "queue_declared": 0, "queue_created": 0,
            "queue_deleted": 0, "channel_created": 0, "channel_closed": 0,
        },
        "message_stats": message_stats,
        "queue_totals": queue_totals,
        "object_totals": {
            "connections": connections, "channels": channels, "exchanges": exchanges,
            "queues": queues.len(), "consumers": consumers,
        },
        "listeners": node.listeners.iter().map(|l| listener(l.protocol, l.port)).collect::<Vec<_>>(),
        "contexts": [{"node": node.name, "description": "RabbitMQ Management", "path": "/", "port": node.http_port.to_string()}],
    })))
}

/// RabbitMQ's fields, and ours: `permissions`, the caller's own (configure / write / read per
/// vhost), so the web UI can hide what the API would refuse (only administrators may list
/// permissions otherwise).
async fn whoami(State(state): State<AppState>, Extension(user): Extension<AuthUser>) -> Json<Value> {
    let permissions: Vec<Value> = state
        .users
        .permissions()
        .iter()
        .filter(|p| p.user == user.name)
        .map(|p| json!({"vhost": p.vhost, "configure": p.configure, "write": p.write, "read": p.read}))
        .collect();
    Json(json!({"name": user.name, "tags": user.tags, "is_internal_user": true, "permissions": permissions}))
}

/// This node; `sockets_used` is its open AMQP client connections.
fn node_json(state: &AppState, sockets_used: usize) -> Value {
    let node = &state.node;
    let uptime_ms = u64::try_from(node.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let processors = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let fd_total = crate::metrics::max_fds();
    let resources = *node.resources.borrow();
    json!({
        "name": node.name,
        "type": "disc",
        "running": true,
        "uptime": uptime_ms.min(u64::from(u32::MAX)),
        "run_queue": 0,
        "processors": processors,
        "os_pid": std::process::id().to_string(),
        "fd_total": fd_total,
        "fd_used": crate::metrics::open_fds(),
        "sockets_total": crate::metrics::max_tcp_sockets(fd_total),
        "sockets_used": sockets_used,
        "proc_total": 0,
        "proc_used": 0,
        "mem_limit": resources.mem_limit,
        "mem_used": crate::metrics::resident_memory_bytes(),
        "mem_alarm": resources.mem_alarm,
        "disk_free_limit": resources.disk_free_limit,
        "disk_free": resources.disk_free,
        "disk_free_alarm": resources.disk_free_alarm,
        // Ours: what a restart would need to recover the message log, and its limit (the memory
        // alarm is raised past it too).
        "restart_mem_need": resources.restart_mem_need,
        "restart_mem_limit": resources.restart_mem_limit,
        // Ours (RabbitMQ has no such field): damage the message log's recovery skipped, and the
        // synced records it found lost.
        "store_damaged_regions": node.store_damage.regions,
        "store_damaged_bytes": node.store_damage.bytes,
        "store_lost_records": node.store_damage.lost_records,
        "store_lost_bytes": node.store_damage.lost_bytes,
        "rates_mode": "basic",
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "being_drained": false,
        "applications": [],
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
    })
}

/// `administrator` or `monitoring` (RabbitMQ's is_authorized_monitor for /api/nodes).
async fn nodes(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
) -> Result<Json<Value>, ApiError> {
    user.require_monitor()?;
    let mut nodes = vec![node_json(&state, client_connections(&state).await?)];
    if let Some(cluster) = state.node.cluster.clone() {
        // Every member, as RabbitMQ lists every cluster node; the others from the cluster status.
        let status = tokio::task::spawn_blocking(move || cluster.status())
            .await
            .map_err(|_| ApiError::internal("cluster status task failed"))?;
        nodes[0]["cluster_role"] = json!("leader");
        for member in status["nodes"].as_array().into_iter().flatten() {
            let name = format!("hourglass@{}", member["name"].as_str().unwrap_or_default());
            if name == state.node.name {
                continue;
            }
            nodes.push(json!({
                "name": name, "type": "disc", "running": member["running"], "cluster_role": member["role"],
                "in_sync": member["in_sync"], "lag_records": member["lag_records"], "being_drained": false,
            }));
        }
    }
    Ok(Json(json!(nodes)))
}

async fn node(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    user.require_monitor()?;
    if name != state.node.name {
        return Err(ApiError::NotFound);
    }
    Ok(Json(node_json(&state, client_connections(&state).await?)))
}

/// Open AMQP client connections: RabbitMQ's `sockets_used`.
async fn client_connections(state: &AppState) -> Result<usize, ApiError> {
    state.broker.ask(ConnectionCount).await
}

async fn ok() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 without alarms; 503 naming each alarmed resource, as RabbitMQ's health check.
fn alarm_check(state: &AppState, scope: &str) -> Response {
    let resources = *state.node.resources.borrow();
    let alarmed = resources.alarmed_resources();
    if alarmed.is_empty() {
        return Json(json!({"status": "ok"})).into_response();
    }
    let alarms: Vec<Value> =
        alarmed.iter().map(|resource| json!({"node": state.node.name, "resource": resource})).collect();
    let body = json!({
        "status": "failed",
        "reason": format!("resource alarm(s) in effect {scope}"),
        "alarms": alarms,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn alarms(State(state): State<AppState>) -> Response {
    alarm_check(&state, "in the cluster")
}

async fn local_alarms(State(state): State<AppState>) -> Response {
    alarm_check(&state, "on the node")
}

fn failed(reason: String, extra: Value) -> Response {
    let mut body = json!({"status": "failed", "reason": reason});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn virtual_hosts(State(state): State<AppState>) -> Result<Response, ApiError> {
    let running = state.broker.ask(VhostNames).await?;
    let down: Vec<String> =
        state.users.vhosts().into_iter().map(|v| v.name).filter(|v| !running.contains(v)).collect();
    if down.is_empty() {
        return Ok(ok().await.into_response());
    }
    Ok(failed("Some virtual hosts are down".into(), json!({"virtual-hosts": down})))
}

async fn port_listener(State(state): State<AppState>, Path(port): Path<String>) -> Response {
    let node = &state.node;
    let ports: Vec<u16> = node.listeners.iter().map(|l| l.port).collect();
    match port.parse::<u16>() {
        Ok(p) if ports.contains(&p) => Json(json!({"status": "ok", "port": p})).into_response(),
        Ok(p) => failed(format!("No active listener on port {p}"), json!({"missing": p, "ports": ports})),
        Err(_) => ApiError::bad_request(format!("invalid port {port}")).into_response(),
    }
}

/// Our listeners under RabbitMQ's protocol names (`amqp/ssl`, `https`, `https/prometheus` for
/// TLS), with its aliases for AMQP 0-9-1.
async fn protocol_listener(State(state): State<AppState>, Path(protocol): Path<String>) -> Response {
    let normalized = match protocol.to_ascii_lowercase().as_str() {
        "amqp" | "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp0_9_1" => "amqp".to_owned(),
        "prometheus" | "http/prometheus" => "http/prometheus".to_owned(),
        other => other.to_owned(),
    };
    let protocols: Vec<&str> = state.node.listeners.iter().map(|l| l.protocol).collect();
    if protocols.contains(&normalized.as_str()) {
        Json(json!({"status": "ok", "protocol": normalized})).into_response()
    } else {
        failed("No active listener".to_owned(), json!({"missing": normalized, "protocols": protocols}))
    }
}

/// Declares `aliveness-test`, publishes to it and gets the message back, as RabbitMQ does.
async fn aliveness(
    State(state): State<AppState>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    crate::access::require_vhost_access(&state, &user, &vhost)?;
    super::require_vhost(&state, &vhost)?;
    let permissions = super::permissions_of(&state, &user, &vhost);
    let who = AsUser { user: user.name.clone(), vhost, permissions };
    state.broker.request(CheckAlive { who }).await??;
    Ok(Json(json!({"status": "ok"})))
}
