//! Hourglass management: a RabbitMQ-shaped HTTP API (`/api/...`), Prometheus metrics, and the
//! user/vhost/permission store shared with the AMQP side.
//!
//! Handlers reach the broker through [`BrokerHandle`]: a closure sent to the broker task, run
//! between commands, its result returned over a oneshot. Nothing here holds broker state.
//!
//! | file | job |
//! |---|---|
//! | `handle.rs` | [`BrokerHandle`]: jobs to the broker task |
//! | `identity_saves.rs` | the user store's changes written through the broker task and the store thread |
//! | `users` | [`UserStore`] (the `hourglass-identity` crate): users, password hashes, permissions, vhost records |
//! | `auth.rs` | HTTP basic auth against the store |
//! | `access.rs` | who may see and change what (vhost access, owners, listing filters) |
//! | `cross_site.rs` | cross-site requests refused (JSON bodies only, no foreign `Origin`/`Referer`), `nosniff` |
//! | `error.rs` | errors as RabbitMQ's `{"error", "reason"}` bodies |
//! | `json.rs` | field tables and message properties as JSON |
//! | `listener.rs` | the HTTP accept loop and its limits: timeouts, body size, connections |
//! | `listing.rs` | `columns`, `sort`, `sort_reverse`, `name`, `page`, `page_size` |
//! | `routes/*.rs` | one file per resource (`routes/policies.rs`: policies and operator policies) |
//! | `metrics/` | Prometheus text exposition (`/metrics`, `/metrics/per-object`, `/metrics/detailed`) |
//! | `resources.rs` | the memory and disk alarms |
//! | `ui.rs` | the web UI's embedded files at `/` (sources in `ui/src`, docs/ui.md) |

mod access;
mod auth;
mod cross_site;
mod error;
mod handle;
mod identity_saves;
mod jobs;
pub mod json;
mod listener;
mod listing;
pub mod metrics;
pub mod rates;
pub mod resources;
mod routes;
pub mod streamed;
pub mod tls;
mod ui;
/// The user store (`hourglass-identity`), under its old path.
pub use hourglass_identity as users;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

pub use cross_site::{CrossSiteRefusal, ListenerScheme};
pub use error::ApiError;
pub use handle::BrokerHandle;
pub use identity_saves::saver_through_store;
pub use jobs::{JobRequest, JobRunner};
pub use streamed::ListingSlots;
pub use users::UserStore;

/// The product version every response reports.
pub const PRODUCT_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The RabbitMQ version whose management API these shapes follow.
pub const RABBITMQ_COMPAT_VERSION: &str = "3.13.7";

/// What the API says about this node.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// `hourglass@<host>`, in RabbitMQ's `name@host` form.
    pub name: String,
    pub bind: IpAddr,
    pub amqp_port: u16,
    pub http_port: u16,
    pub metrics_port: u16,
    pub started: Instant,
    /// Memory and disk against their limits, and the alarms they raise.
    pub resources: resources::ResourceWatch,
    /// Damage the message log's recovery skipped at start (docs/storage.md "Recovery rules").
    pub store_damage: StoreDamage,
    /// Where the API changes the alarm limits (`None`: a node without a monitor).
    pub alarm_limits: Option<std::sync::Arc<resources::AlarmLimitsControl>>,
    /// The cluster this node leads (`None`: a single node).
    pub cluster: Option<std::sync::Arc<dyn ClusterStatus>>,
    /// The cluster's name (`--cluster-name`), the same on every node and across failovers;
    /// `None` for a single node, whose cluster is named after the node, as RabbitMQ's is.
    pub cluster_name: Option<String>,
    /// Every listener, under RabbitMQ's protocol names (`/api/overview`, the listener health
    /// checks).
    pub listeners: Vec<Listener>,
}

/// One listener as the API reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// RabbitMQ's protocol name: `amqp`, `amqp/ssl`, `http`, `https`, `http/prometheus`,
    /// `https/prometheus`.
    pub protocol: &'static str,
    pub port: u16,
}

/// The cluster as `GET /api/cluster` shows it (docs/clustering.md "Seeing the cluster").
pub trait ClusterStatus: Send + Sync + std::fmt::Debug {
    /// `{"cluster_name", "leader", "term", "nodes": [{"name", "role", "in_sync", "caught_up",
    /// "lag_records", "amqp", "last_seen_ms"}]}`. Called off the runtime (it may ask etcd).
    fn status(&self) -> serde_json::Value;
    /// The Prometheus gauges, from what the node already knows (no etcd round trip).
    fn gauges(&self) -> ClusterGauges;
}

/// Clustered mode's Prometheus gauges (docs/metrics.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterGauges {
    pub leader: bool,
    pub term: u64,
    /// Nodes in the in-sync set, the leader included.
    pub in_sync: u64,
    /// Per follower: replicated operations not yet acknowledged (the leader's view).
    pub lag_records: Vec<(String, u64)>,
}

/// Damaged stretches of the message log skipped by recovery at start, and synced records it
/// found lost (cut from a segment): each means confirmed messages lost (or settled ones back).
/// Shown in `/api/nodes` and as Prometheus gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreDamage {
    pub regions: u64,
    pub bytes: u64,
    /// Synced records no longer in the log (docs/storage.md "Recovery rules").
    pub lost_records: u64,
    pub lost_bytes: u64,
}

impl NodeInfo {
    /// The port of the AMQP listener (the AMQPS one with `tls`) clients connect to.
    pub fn amqp_listener_port(&self, tls: bool) -> u16 {
        let amqps = self.listeners.iter().find(|l| l.protocol == "amqp/ssl").map(|l| l.port);
        match (tls, amqps) {
            (true, Some(port)) => port,
            _ => self.amqp_port,
        }
    }

    pub fn new(bind: IpAddr, amqp_port: u16, http_port: u16, metrics_port: u16) -> Self {
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        NodeInfo {
            name: format!("hourglass@{host}"),
            bind,
            amqp_port,
            http_port,
            metrics_port,
            started: Instant::now(),
            resources: resources::unmonitored(),
            store_damage: StoreDamage::default(),
            cluster: None,
            cluster_name: None,
            alarm_limits: None,
            listeners: vec![
                Listener { protocol: "amqp", port: amqp_port },
                Listener { protocol: "http", port: http_port },
                Listener { protocol: "http/prometheus", port: metrics_port },
            ],
        }
    }

    /// Names the node `hourglass@NAME` (a cluster member's name, instead of the host's).
    pub fn with_node_name(self, name: &str) -> Self {
        NodeInfo { name: format!("hourglass@{name}"), ..self }
    }

    /// Names the cluster (clustered mode's `--cluster-name`).
    pub fn with_cluster_name(self, name: &str) -> Self {
        NodeInfo { cluster_name: Some(name.to_owned()), ..self }
    }

    /// The cluster's name as RabbitMQ reports it (`/api/overview`, `rabbitmq_identity_info`):
    /// the cluster's own in a cluster, else the node's.
    pub fn cluster_name(&self) -> &str {
        self.cluster_name.as_deref().unwrap_or(&self.name)
    }

    /// Reports the cluster this node leads.
    pub fn with_cluster(self, cluster: std::sync::Arc<dyn ClusterStatus>) -> Self {
        NodeInfo { cluster: Some(cluster), ..self }
    }

    /// Reports exactly these listeners (some plain ones may be off, TLS ones on).
    pub fn with_listeners(self, listeners: Vec<Listener>) -> Self {
        NodeInfo { listeners, ..self }
    }

    /// Reports what the message log's recovery skipped.
    pub fn with_store_damage(self, store_damage: StoreDamage) -> Self {
        NodeInfo { store_damage, ..self }
    }

    /// Reports the alarms of the monitor behind `resources`.
    pub fn with_resources(self, resources: resources::ResourceWatch) -> Self {
        NodeInfo { resources, ..self }
    }

    /// Lets the API change the alarm limits through `control`.
    pub fn with_alarm_limits(self, control: std::sync::Arc<resources::AlarmLimitsControl>) -> Self {
        NodeInfo { alarm_limits: Some(control), ..self }
    }
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub broker: BrokerHandle,
    pub users: Arc<UserStore>,
    pub node: Arc<NodeInfo>,
    /// Samples behind the API's rates (`rates/`), written by `rates::sampler::run`.
    pub rates: Arc<rates::Rates>,
    /// The failed-login slowdown per source address, shared with the AMQP listener.
    pub logins: Arc<hourglass_session::LoginLimiter>,
    /// The cap on full listings rendering at once (`streamed.rs`).
    pub listings: Arc<ListingSlots>,
    /// What access keys' secrets are sealed with (`secrets_key_file`); `None`: no access keys
    /// can be made (`routes/access_keys.rs`).
    pub secrets: Option<Arc<hourglass_identity::SecretsKey>>,
}

/// The management API's routes (`/api/...`), behind basic auth.
/// Imports a definitions file (RabbitMQ's export format) as RabbitMQ's `load_definitions` does at
/// boot; the error names the file and what failed.
pub async fn load_definitions_file(state: &AppState, path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let body: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    routes::import_definitions(state, "rmq-internal", &body)
        .await
        .map_err(|e| format!("importing {}: {e}", path.display()))
}

pub fn api_router(state: AppState) -> axum::Router {
    routes::router(state)
}

/// The Prometheus routes (`/metrics`, `/metrics/per-object`, `/metrics/detailed`), without auth
/// as in RabbitMQ.
pub fn metrics_router(state: AppState) -> axum::Router {
    metrics::router(state)
}

/// A clustered follower's Prometheus routes: the cluster gauges (it runs no broker).
pub fn follower_metrics_router(cluster: std::sync::Arc<dyn ClusterStatus>) -> axum::Router {
    metrics::follower_router(cluster)
}

pub use axum::Router;
pub use listener::{serve, HttpLimits, RefusalLog};
