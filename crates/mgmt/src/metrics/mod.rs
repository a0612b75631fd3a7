//! Prometheus text exposition with the RabbitMQ plugin's (rabbitmq_prometheus) metric names,
//! types, labels and HELP texts; docs/metrics.md lists every family.
//!
//! - `/metrics`: every family, summed over objects (no per-queue or per-channel labels);
//! - `/metrics/per-object`: the same families, one sample per queue (`vhost`, `queue`), channel
//!   (`channel`) or connection;
//! - `/metrics/detailed?family=…&vhost=…`: only the families asked for (repeatable `family`;
//!   none asked, none sent), per object, named `rabbitmq_detailed_*` (`rabbitmq_cluster_*` for the
//!   exchange and vhost families); `vhost` (repeatable) keeps the queue and exchange families to
//!   those vhosts, as RabbitMQ does.
//!
//! Written by hand rather than with `prometheus-client`: every value is sampled from one broker
//! snapshot at scrape time (a collector, not long-lived counters), and the format is a few lines.

mod families;
mod process;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hourglass_broker::admin::{ChannelSummary, ConnectionSummary};
use hourglass_broker::churn::ChurnStats;
use hourglass_broker::message_stats::{MessageSizes, MessageStats};
use hourglass_broker::queue::QueueStats;
use hourglass_broker::requests::{BindingCounts, NodeTotals, Totals};

use crate::error::ApiError;
use crate::routes::connections;
use crate::AppState;

pub use families::Family;
pub use process::resident_memory_bytes;
pub(crate) use process::{max_fds, max_tcp_sockets, open_fds};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route("/metrics/detailed", get(detailed))
        .with_state(state)
}

/// A follower's Prometheus endpoint (docs/metrics.md "Clustered mode"): the cluster gauges only.
pub fn follower_router(cluster: std::sync::Arc<dyn crate::ClusterStatus>) -> Router {
    Router::new()
        .route("/metrics", get(move || async move { text(families::follower_text(&cluster.gauges())) }))
}

/// Which endpoint is rendering.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scope {
    /// `/metrics`: summed over objects.
    Aggregated,
    /// `/metrics/per-object`: one sample per object.
    PerObject,
    /// `/metrics/detailed`: the families asked for, per object, queues and exchanges of the
    /// vhosts asked for (all when `vhosts` is `None`).
    Detailed { families: Vec<Family>, vhosts: Option<Vec<String>> },
}

impl Scope {
    fn per_object(&self) -> bool {
        !matches!(self, Scope::Aggregated)
    }

    /// Whether a queue or exchange of `vhost` is shown.
    fn shows_vhost(&self, vhost: &str) -> bool {
        match self {
            Scope::Detailed { vhosts: Some(vhosts), .. } => vhosts.iter().any(|v| v == vhost),
            _ => true,
        }
    }

    fn wants(&self, family: Family) -> bool {
        match self {
            Scope::Detailed { families, .. } => families.contains(&family),
            _ => family.is_raw(),
        }
    }
}

/// An exchange with its binding count, for the `exchange_*` families of `/metrics/detailed`.
pub(crate) struct ExchangeRow {
    vhost: String,
    name: String,
    bindings: usize,
}

/// Everything one scrape shows, the many objects read in slices (`admin/slices.rs`).
pub(crate) struct Snapshot {
    queues: Vec<QueueStats>,
    channels: Vec<ChannelSummary>,
    connections: Vec<ConnectionSummary>,
    consumers: usize,
    messages: MessageStats,
    sizes: MessageSizes,
    churn: ChurnStats,
    vhosts: Vec<String>,
    exchanges: Vec<ExchangeRow>,
}

async fn snapshot(state: &AppState, with_exchanges: bool) -> Result<Snapshot, ApiError> {
    // The many objects in slices (`admin/slices.rs`): at 100,000 queues one job over them held
    // confirms up.
    let mut queues = crate::rates::sampler::queue_stats_in_slices(&state.broker).await?;
    queues.sort_unstable_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let exchanges = if with_exchanges { exchange_rows(state).await? } else { Vec::new() };
    let channels = connections::channel_rows(state).await?;
    let connections = connections::connection_rows(state).await?;
    let consumers = connections::consumer_rows(state).await?.len();
    let Totals { messages, sizes, churn, vhosts } = state.broker.ask(NodeTotals).await?;
    Ok(Snapshot { queues, channels, connections, consumers, messages, sizes, churn, vhosts, exchanges })
}

/// Every exchange by vhost and name with its binding count (the default exchange's: one per
/// queue), counted without building the bindings.
async fn exchange_rows(state: &AppState) -> Result<Vec<ExchangeRow>, ApiError> {
    let mut counts = state.broker.ask(BindingCounts).await?;
    counts.sort_unstable_by(|(a, _), (b, _)| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let rows = counts.into_iter().map(|(key, bindings)| ExchangeRow {
        name: key.name.as_str().into_owned(),
        vhost: key.vhost,
        bindings,
    });
    Ok(rows.collect())
}

async fn aggregated(State(state): State<AppState>) -> Result<Response, ApiError> {
    let snap = snapshot(&state, false).await?;
    Ok(text(families::render(&state, &snap, &Scope::Aggregated)))
}

async fn per_object(State(state): State<AppState>) -> Result<Response, ApiError> {
    let snap = snapshot(&state, false).await?;
    Ok(text(families::render(&state, &snap, &Scope::PerObject)))
}

/// Query pairs in order, so `family` and `vhost` may repeat (`?family=a&family=b`).
async fn detailed(
    State(state): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let scope = detailed_scope(&pairs);
    let with_exchanges = scope.wants(Family::ExchangeBindings) || scope.wants(Family::ExchangeNames);
    let snap = snapshot(&state, with_exchanges).await?;
    Ok(text(families::render(&state, &snap, &scope)))
}

/// RabbitMQ ignores family names it does not know (and vhosts that do not exist: they match
/// nothing here).
fn detailed_scope(pairs: &[(String, String)]) -> Scope {
    let mut families = Vec::new();
    let mut vhosts: Option<Vec<String>> = None;
    for (key, value) in pairs {
        match key.as_str() {
            "family" => families.extend(Family::from_name(value)),
            "vhost" => vhosts.get_or_insert_with(Vec::new).push(value.clone()),
            _ => {}
        }
    }
    Scope::Detailed { families, vhosts }
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `family` and `vhost` repeat; unknown families are ignored as RabbitMQ ignores them.
    #[test]
    fn detailed_query_keeps_every_known_family_and_vhost() {
        let pairs: Vec<(String, String)> = [
            ("family", "queue_coarse_metrics"),
            ("family", "no_such_family"),
            ("family", "channel_metrics"),
            ("vhost", "/"),
            ("vhost", "other"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let scope = detailed_scope(&pairs);
        assert_eq!(
            scope,
            Scope::Detailed {
                families: vec![Family::QueueCoarse, Family::Channel],
                vhosts: Some(vec!["/".into(), "other".into()]),
            }
        );
        assert!(scope.shows_vhost("other") && !scope.shows_vhost("third"));
        assert!(!scope.wants(Family::ConnectionChurn));
    }
}
