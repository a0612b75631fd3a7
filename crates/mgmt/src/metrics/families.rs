//! The metric families, as tables of name, type, HELP text and how to read one object, and the
//! text format they are written in. Names, types and HELP texts are rabbitmq_prometheus's (its
//! core metrics collector's `connection_churn_metrics`, `channel_metrics`, … groups; its global
//! counters); `hourglass_*` families are ours (docs/metrics.md).

use std::fmt::Write;

use hourglass_broker::admin::{ChannelSummary, ConnectionSummary};
use hourglass_broker::churn::ChurnStats;
use hourglass_broker::message_stats::{MessageSizes, MessageStats, MESSAGE_SIZE_BUCKETS_BYTES};
use hourglass_broker::queue::QueueStats;

use super::{process, ExchangeRow, Scope, Snapshot};
use crate::routes::connection_name;
use crate::{AppState, NodeInfo};

/// A group of metrics that `/metrics/detailed?family=` names; the aggregated and per-object
/// endpoints show every one that is not `cluster`-wide.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Family {
    ConnectionChurn,
    NodeCoarse,
    Node,
    QueueCoarse,
    QueueConsumerCount,
    Queue,
    Channel,
    ChannelExchange,
    ChannelQueue,
    Connection,
    ChannelQueueExchange,
    VhostStatus,
    ExchangeBindings,
    ExchangeNames,
}

const FAMILIES: &[(Family, &str)] = &[
    (Family::ConnectionChurn, "connection_churn_metrics"),
    (Family::NodeCoarse, "node_coarse_metrics"),
    (Family::Node, "node_metrics"),
    (Family::QueueCoarse, "queue_coarse_metrics"),
    (Family::QueueConsumerCount, "queue_consumer_count"),
    (Family::Queue, "queue_metrics"),
    (Family::Channel, "channel_metrics"),
    (Family::ChannelExchange, "channel_exchange_metrics"),
    (Family::ChannelQueue, "channel_queue_metrics"),
    (Family::Connection, "connection_metrics"),
    (Family::ChannelQueueExchange, "channel_queue_exchange_metrics"),
    (Family::VhostStatus, "vhost_status"),
    (Family::ExchangeBindings, "exchange_bindings"),
    (Family::ExchangeNames, "exchange_names"),
];

impl Family {
    /// The family a `family=` query value names, if we have it.
    pub fn from_name(name: &str) -> Option<Family> {
        FAMILIES.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }

    /// Per-node and per-object families; the others are cluster-wide (`rabbitmq_cluster_*`, only
    /// on `/metrics/detailed`).
    pub(crate) fn is_raw(self) -> bool {
        !matches!(self, Family::VhostStatus | Family::ExchangeBindings | Family::ExchangeNames)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

type Samples = Vec<(String, u64)>;
/// Name (without prefix), type, HELP, and how to read one object.
type Row<T> = (&'static str, Kind, &'static str, fn(&T) -> u64);

const CHURN: &[Row<ChurnStats>] = &[
    ("connections_opened_total", Kind::Counter, "Total number of connections opened", |c| {
        c.connections_opened
    }),
    ("connections_closed_total", Kind::Counter, "Total number of connections closed or terminated", |c| {
        c.connections_closed
    }),
    ("channels_opened_total", Kind::Counter, "Total number of channels opened", |c| c.channels_opened),
    ("channels_closed_total", Kind::Counter, "Total number of channels closed", |c| c.channels_closed),
    ("queues_declared_total", Kind::Counter, "Total number of queues declared", |c| c.queues_declared),
    ("queues_created_total", Kind::Counter, "Total number of queues created", |c| c.queues_created),
    ("queues_deleted_total", Kind::Counter, "Total number of queues deleted", |c| c.queues_deleted),
];

const QUEUE_COARSE: &[Row<QueueStats>] = &[
    ("queue_messages_ready", Kind::Gauge, "Messages ready to be delivered to consumers", |q| {
        q.messages_ready as u64
    }),
    (
        "queue_messages_unacked",
        Kind::Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |q| q.messages_unacked as u64,
    ),
    ("queue_messages", Kind::Gauge, "Sum of ready and unacknowledged messages - total queue depth", |q| {
        q.messages() as u64
    }),
];

const QUEUE_CONSUMERS: Row<QueueStats> =
    ("queue_consumers", Kind::Gauge, "Consumers on a queue", |q| q.consumers as u64);

/// rabbitmq_prometheus's `queue_metrics` counts and bytes, from the queue's own state
/// (`QueueStats`, as the HTTP API's fields of the same names).
const QUEUE: &[Row<QueueStats>] = &[
    QUEUE_CONSUMERS,
    ("queue_messages_ram", Kind::Gauge, "Ready and unacknowledged messages stored in memory", |q| {
        q.messages_ram() as u64
    }),
    (
        "queue_messages_ram_bytes",
        Kind::Gauge,
        "Size of ready and unacknowledged messages stored in memory",
        |q| q.message_bytes_ram() as u64,
    ),
    ("queue_messages_ready_ram", Kind::Gauge, "Ready messages stored in memory", |q| {
        q.messages_ready_ram as u64
    }),
    ("queue_messages_unacked_ram", Kind::Gauge, "Unacknowledged messages stored in memory", |q| {
        q.messages_unacked as u64
    }),
    ("queue_messages_persistent", Kind::Gauge, "Persistent messages", |q| q.messages_persistent as u64),
    ("queue_messages_persistent_bytes", Kind::Gauge, "Size in bytes of persistent messages", |q| {
        q.message_bytes_persistent as u64
    }),
    ("queue_messages_bytes", Kind::Gauge, "Size in bytes of ready and unacknowledged messages", |q| {
        q.message_bytes() as u64
    }),
    ("queue_messages_ready_bytes", Kind::Gauge, "Size in bytes of ready messages", |q| {
        q.message_bytes_ready as u64
    }),
    ("queue_messages_unacked_bytes", Kind::Gauge, "Size in bytes of all unacknowledged messages", |q| {
        q.message_bytes_unacked as u64
    }),
    ("queue_messages_paged_out", Kind::Gauge, "Messages paged out to disk", |q| {
        q.messages_paged_out() as u64
    }),
    ("queue_messages_paged_out_bytes", Kind::Gauge, "Size in bytes of messages paged out to disk", |q| {
        q.message_bytes_paged_out() as u64
    }),
];

const QUEUE_PUBLISHED: &[Row<QueueStats>] = &[(
    "queue_messages_published_total",
    Kind::Counter,
    "Total number of messages published to queues",
    |q| q.counters.messages.publish,
)];

const CHANNEL: &[Row<ChannelSummary>] = &[
    ("channel_consumers", Kind::Gauge, "Consumers on a channel", |c| c.consumers as u64),
    ("channel_messages_unacked", Kind::Gauge, "Delivered but not yet acknowledged messages", |c| {
        u64::from(c.deliveries_unacked)
    }),
    ("channel_messages_unconfirmed", Kind::Gauge, "Published but not yet confirmed messages", |c| {
        u64::from(c.messages_unconfirmed)
    }),
    (
        "channel_messages_uncommitted",
        Kind::Gauge,
        "Messages received in a transaction but not yet committed",
        |c| u64::from(c.messages_uncommitted),
    ),
    (
        "channel_acks_uncommitted",
        Kind::Gauge,
        "Message acknowledgements in a transaction not yet committed",
        |c| u64::from(c.acks_uncommitted),
    ),
    ("consumer_prefetch", Kind::Gauge, "Limit of unacknowledged messages for each consumer", |c| {
        u64::from(c.prefetch_count)
    }),
    (
        "channel_prefetch",
        Kind::Gauge,
        "Total limit of unacknowledged messages for all consumers on a channel",
        |c| u64::from(c.global_prefetch_count),
    ),
];

const CHANNEL_EXCHANGE: &[Row<ChannelSummary>] = &[
    (
        "channel_messages_published_total",
        Kind::Counter,
        "Total number of messages published into an exchange on a channel",
        |c| c.message_stats.publish,
    ),
    (
        "channel_messages_confirmed_total",
        Kind::Counter,
        "Total number of messages published into an exchange and confirmed on the channel",
        |c| c.message_stats.confirm,
    ),
    (
        "channel_messages_unroutable_returned_total",
        Kind::Counter,
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |c| c.message_stats.return_unroutable,
    ),
    (
        "channel_messages_unroutable_dropped_total",
        Kind::Counter,
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |c| c.message_stats.drop_unroutable,
    ),
];

const CHANNEL_QUEUE: &[Row<ChannelSummary>] = &[
    (
        "channel_get_ack_total",
        Kind::Counter,
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        |c| c.message_stats.get,
    ),
    (
        "channel_get_total",
        Kind::Counter,
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        |c| c.message_stats.get_no_ack,
    ),
    (
        "channel_messages_delivered_ack_total",
        Kind::Counter,
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        |c| c.message_stats.deliver,
    ),
    (
        "channel_messages_delivered_total",
        Kind::Counter,
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        |c| c.message_stats.deliver_no_ack,
    ),
    (
        "channel_messages_redelivered_total",
        Kind::Counter,
        "Total number of messages redelivered to consumers",
        |c| c.message_stats.redeliver,
    ),
    (
        "channel_messages_acked_total",
        Kind::Counter,
        "Total number of messages acknowledged by consumers",
        |c| c.message_stats.ack,
    ),
    (
        "channel_get_empty_total",
        Kind::Counter,
        "Total number of times basic.get operations fetched no message",
        |c| c.message_stats.get_empty,
    ),
];

const CONNECTION: &[Row<ConnectionSummary>] =
    &[("connection_channels", Kind::Gauge, "Channels on a connection", |c| c.channels as u64)];

/// The plugin's global counters (rabbit_global_counters), broker-wide, `/metrics` and
/// `/metrics/per-object` only.
const GLOBAL: &[Row<MessageStats>] = &[
    ("global_messages_received_total", Kind::Counter, "Total number of messages received from publishers", |m| {
        m.publish
    }),
    (
        "global_messages_received_confirm_total",
        Kind::Counter,
        "Total number of messages received from publishers expecting confirmations",
        |m| m.received_confirm,
    ),
    ("global_messages_routed_total", Kind::Counter, "Total number of messages routed to queues or streams", |m| {
        m.routed
    }),
    (
        "global_messages_unroutable_dropped_total",
        Kind::Counter,
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |m| m.drop_unroutable,
    ),
    (
        "global_messages_unroutable_returned_total",
        Kind::Counter,
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |m| m.return_unroutable,
    ),
    ("global_messages_confirmed_total", Kind::Counter, "Total number of messages confirmed to publishers", |m| {
        m.confirm
    }),
    ("global_messages_delivered_total", Kind::Counter, "Total number of messages delivered to consumers", |m| {
        m.deliver_get()
    }),
    (
        "global_messages_delivered_consume_manual_ack_total",
        Kind::Counter,
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        |m| m.deliver,
    ),
    (
        "global_messages_delivered_consume_auto_ack_total",
        Kind::Counter,
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        |m| m.deliver_no_ack,
    ),
    (
        "global_messages_delivered_get_manual_ack_total",
        Kind::Counter,
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        |m| m.get,
    ),
    (
        "global_messages_delivered_get_auto_ack_total",
        Kind::Counter,
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        |m| m.get_no_ack,
    ),
    (
        "global_messages_get_empty_total",
        Kind::Counter,
        "Total number of times basic.get operations fetched no message",
        |m| m.get_empty,
    ),
    ("global_messages_redelivered_total", Kind::Counter, "Total number of messages redelivered to consumers", |m| {
        m.redeliver
    }),
    ("global_messages_acknowledged_total", Kind::Counter, "Total number of messages acknowledged by consumers", |m| {
        m.ack
    }),
];

/// Per-queue counters of time events (semantics §7): RabbitMQ's dead-lettering names, ours for
/// the rest. Full names (no endpoint prefix); `/metrics` and `/metrics/per-object` only.
const TIME_COUNTERS: &[Row<QueueStats>] = &[
    (
        "rabbitmq_global_messages_dead_lettered_rejected_total",
        Kind::Counter,
        "Messages dead-lettered because they were rejected",
        |q| q.counters.dead_lettered_rejected,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_expired_total",
        Kind::Counter,
        "Messages dead-lettered because their TTL expired",
        |q| q.counters.dead_lettered_expired,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_maxlen_total",
        Kind::Counter,
        "Messages dead-lettered by a length limit",
        |q| q.counters.dead_lettered_maxlen,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
        Kind::Counter,
        "Messages dead-lettered past their delivery limit",
        |q| q.counters.dead_lettered_delivery_limit,
    ),
    (
        "hourglass_queue_messages_expired_total",
        Kind::Counter,
        "Messages that expired (TTL), dead-lettered or dropped",
        |q| q.counters.expired,
    ),
    (
        "hourglass_queue_visibility_expired_total",
        Kind::Counter,
        "Deliveries whose visibility timeout ran out",
        |q| q.counters.visibility_expired,
    ),
    (
        "hourglass_queue_messages_deduplicated_total",
        Kind::Counter,
        "Messages dropped as duplicates by a deduplicating queue",
        |q| q.counters.deduplicated,
    ),
    (
        "hourglass_queue_messages_redelivered_total",
        Kind::Counter,
        "Messages that came back unacknowledged",
        |q| q.counters.redelivered,
    ),
    (
        "hourglass_queue_messages_delayed",
        Kind::Gauge,
        "Messages waiting for their due time (delayed, back-off)",
        |q| q.messages_delayed as u64,
    ),
    ("hourglass_queue_messages_delayed_bytes", Kind::Gauge, "Size in bytes of delayed messages", |q| {
        q.message_bytes_delayed as u64
    }),
];

/// The exposition of one scrape.
pub(crate) fn render(state: &AppState, s: &Snapshot, scope: &Scope) -> String {
    let detailed = matches!(scope, Scope::Detailed { .. });
    let mut out =
        Out { text: String::new(), prefix: if detailed { "rabbitmq_detailed_" } else { "rabbitmq_" } };
    let per_object = scope.per_object();
    let node = &state.node;
    let queues: Vec<&QueueStats> = s.queues.iter().filter(|q| scope.shows_vhost(&q.vhost)).collect();
    if scope.wants(Family::ConnectionChurn) {
        out.rows(CHURN, &[(String::new(), &s.churn)], false);
    }
    if scope.wants(Family::NodeCoarse) || scope.wants(Family::Node) {
        node_families(&mut out, state, s, scope);
    }
    let queue_rows: Vec<(String, &QueueStats)> = queues
        .iter()
        .map(|q| (format!("vhost=\"{}\",queue=\"{}\"", escape(&q.vhost), escape(&q.name)), *q))
        .collect();
    if scope.wants(Family::QueueCoarse) {
        out.rows(QUEUE_COARSE, &queue_rows, per_object);
    }
    if scope.wants(Family::QueueConsumerCount) && !scope.wants(Family::Queue) {
        out.rows(&[QUEUE_CONSUMERS], &queue_rows, per_object);
    }
    if scope.wants(Family::Queue) {
        out.rows(QUEUE, &queue_rows, per_object);
    }
    object_families(&mut out, node, s, scope, &queues);
    if detailed {
        cluster_families(&mut out, s, scope);
    } else {
        totals(&mut out, s);
        out.prefix = "rabbitmq_";
        out.rows(GLOBAL, &[(String::new(), &s.messages)], false);
        global_gauges(&mut out, s);
        message_sizes(&mut out, &s.sizes);
        out.prefix = "";
        out.rows(TIME_COUNTERS, &queue_rows, per_object);
        alarms(&mut out, state);
        replication(&mut out, state);
    }
    out.prefix = "rabbitmq_";
    identity(&mut out, node);
    out.text
}

/// The channel and connection families, and the per-queue publish counter.
fn object_families(out: &mut Out, node: &NodeInfo, s: &Snapshot, scope: &Scope, queues: &[&QueueStats]) {
    let per_object = scope.per_object();
    let channel_rows: Vec<(String, &ChannelSummary)> =
        s.channels.iter().map(|c| (format!("channel=\"{}\"", escape(&channel_name(node, c))), c)).collect();
    for (family, rows) in [
        (Family::Channel, CHANNEL),
        (Family::ChannelExchange, CHANNEL_EXCHANGE),
        (Family::ChannelQueue, CHANNEL_QUEUE),
    ] {
        if scope.wants(family) {
            out.rows(rows, &channel_rows, per_object);
        }
    }
    if scope.wants(Family::Connection) {
        let rows: Vec<(String, &ConnectionSummary)> = s
            .connections
            .iter()
            .map(|c| {
                (
                    format!(
                        "channel=\"{}\"",
                        escape(&connection_name(node, &c.info.peer, &c.info.local, c.info.login.tls))
                    ),
                    c,
                )
            })
            .collect();
        out.rows(CONNECTION, &rows, per_object);
    }
    if scope.wants(Family::ChannelQueueExchange) {
        let rows: Vec<(String, &QueueStats)> = queues
            .iter()
            .map(|q| (format!("queue_vhost=\"{}\",queue=\"{}\"", escape(&q.vhost), escape(&q.name)), *q))
            .collect();
        out.rows(QUEUE_PUBLISHED, &rows, per_object);
    }
}

/// The plugin's `rabbitmq_global_publishers` and `rabbitmq_global_consumers`: a publisher is an
/// open channel that has published.
fn global_gauges(out: &mut Out, s: &Snapshot) {
    let publishers = s.channels.iter().filter(|c| c.message_stats.publish > 0).count() as u64;
    let help = "Current number of publishers";
    out.family(Kind::Gauge, "global_publishers", help, &[(String::new(), publishers)]);
    let consumers = vec![(String::new(), s.consumers as u64)];
    out.family(Kind::Gauge, "global_consumers", "Current number of consumers", &consumers);
}

/// RabbitMQ 4's `rabbitmq_message_size_bytes` histogram (cumulative buckets, as Prometheus wants).
fn message_sizes(out: &mut Out, sizes: &MessageSizes) {
    let name = "rabbitmq_message_size_bytes";
    let _ = writeln!(out.text, "# HELP {name} Size of messages received from publishers");
    let _ = writeln!(out.text, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (at, count) in sizes.counts.iter().enumerate() {
        cumulative += count;
        let le = MESSAGE_SIZE_BUCKETS_BYTES.get(at).map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
        let _ = writeln!(out.text, "{name}_bucket{{protocol=\"amqp091\",le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out.text, "{name}_sum{{protocol=\"amqp091\"}} {}", sizes.sum_bytes);
    let _ = writeln!(out.text, "{name}_count{{protocol=\"amqp091\"}} {cumulative}");
}

/// The `/metrics` totals RabbitMQ adds outside the families.
fn totals(out: &mut Out, s: &Snapshot) {
    for (name, help, value) in [
        ("connections", "Connections currently open", s.connections.len()),
        ("channels", "Channels currently open", s.channels.len()),
        ("consumers", "Consumers currently connected", s.consumers),
        ("queues", "Queues available", s.queues.len()),
    ] {
        out.family(Kind::Gauge, name, help, &[(String::new(), value as u64)]);
    }
}

/// `node_coarse_metrics` and `node_metrics`: the process, as the OS sees it.
fn node_families(out: &mut Out, state: &AppState, s: &Snapshot, scope: &Scope) {
    let resources = *state.node.resources.borrow();
    let max_fds = process::max_fds();
    let one = |value: u64| vec![(String::new(), value)];
    if scope.wants(Family::NodeCoarse) {
        out.family(Kind::Gauge, "process_open_fds", "Open file descriptors", &one(process::open_fds()));
        let sockets = s.connections.len() as u64;
        out.family(Kind::Gauge, "process_open_tcp_sockets", "Open TCP sockets", &one(sockets));
        let rss = process::resident_memory_bytes();
        out.family(Kind::Gauge, "process_resident_memory_bytes", "Memory used in bytes", &one(rss));
        let disk_free = resources.disk_free;
        out.family(
            Kind::Gauge,
            "disk_space_available_bytes",
            "Disk space available in bytes",
            &one(disk_free),
        );
    }
    if scope.wants(Family::Node) {
        out.family(Kind::Gauge, "process_max_fds", "Open file descriptors limit", &one(max_fds));
        let sockets = process::max_tcp_sockets(max_fds);
        out.family(Kind::Gauge, "process_max_tcp_sockets", "Open TCP sockets limit", &one(sockets));
        let mem_limit = resources.mem_limit;
        out.family(
            Kind::Gauge,
            "resident_memory_limit_bytes",
            "Memory high watermark in bytes",
            &one(mem_limit),
        );
        let disk_limit = resources.disk_free_limit;
        let help = "Free disk space low watermark in bytes";
        out.family(Kind::Gauge, "disk_space_available_limit_bytes", help, &one(disk_limit));
        let uptime = state.node.started.elapsed().as_secs_f64();
        let name = format!("{}erlang_uptime_seconds", out.prefix);
        let _ = writeln!(out.text, "# HELP {name} Node uptime\n# TYPE {name} gauge\n{name} {uptime}");
    }
}

/// The `rabbitmq_cluster_*` families of `/metrics/detailed`.
fn cluster_families(out: &mut Out, s: &Snapshot, scope: &Scope) {
    out.prefix = "rabbitmq_cluster_";
    if scope.wants(Family::VhostStatus) {
        let rows: Samples = s
            .vhosts
            .iter()
            .filter(|v| scope.shows_vhost(v))
            .map(|v| (format!("vhost=\"{}\"", escape(v)), 1))
            .collect();
        out.family(Kind::Gauge, "vhost_status", "Whether a given vhost is running", &rows);
    }
    let exchanges: Vec<&ExchangeRow> = s.exchanges.iter().filter(|x| scope.shows_vhost(&x.vhost)).collect();
    let label = |x: &ExchangeRow| format!("vhost=\"{}\",exchange=\"{}\"", escape(&x.vhost), escape(&x.name));
    if scope.wants(Family::ExchangeBindings) {
        let rows: Samples = exchanges.iter().map(|x| (label(x), x.bindings as u64)).collect();
        let help = "Number of bindings for an exchange. This value is cluster-wide.";
        out.family(Kind::Gauge, "exchange_bindings", help, &rows);
    }
    if scope.wants(Family::ExchangeNames) {
        let rows: Samples = exchanges.iter().map(|x| (label(x), 1)).collect();
        let help = "Enumerates exchanges without any additional info. This value is cluster-wide. \
                    A cheaper alternative to `exchange_bindings`";
        out.family(Kind::Gauge, "exchange_name", help, &rows);
    }
}

fn alarms(out: &mut Out, state: &AppState) {
    let resources = *state.node.resources.borrow();
    let memory = u64::from(resources.mem_alarm);
    let disk = u64::from(resources.disk_free_alarm);
    let help = "is 1 if VM memory watermark alarm is in effect";
    out.family(Kind::Gauge, "rabbitmq_alarms_memory_used_watermark", help, &[(String::new(), memory)]);
    let help = "is 1 if free disk space watermark alarm is in effect";
    out.family(Kind::Gauge, "rabbitmq_alarms_free_disk_space_watermark", help, &[(String::new(), disk)]);
    let damage = state.node.store_damage;
    let help = "Damaged stretches of the message log skipped by recovery at start";
    out.family(
        Kind::Gauge,
        "hourglass_store_recovery_damaged_regions",
        help,
        &[(String::new(), damage.regions)],
    );
    let help = "Bytes of the message log skipped as damaged by recovery at start";
    out.family(Kind::Gauge, "hourglass_store_recovery_damaged_bytes", help, &[(String::new(), damage.bytes)]);
    let help = "Synced records of the message log that recovery at start found lost (cut from a segment)";
    let lost = &[(String::new(), damage.lost_records)];
    out.family(Kind::Gauge, "hourglass_store_recovery_lost_records", help, lost);
    let help = "Synced bytes of the message log that recovery at start found lost";
    let lost = &[(String::new(), damage.lost_bytes)];
    out.family(Kind::Gauge, "hourglass_store_recovery_lost_bytes", help, lost);
}

/// Clustered mode's gauges (only on a clustered node).
fn replication(out: &mut Out, state: &AppState) {
    if let Some(cluster) = &state.node.cluster {
        cluster_gauges(out, &cluster.gauges());
    }
}

/// A follower's whole `/metrics`: it runs no broker, only these gauges.
pub(crate) fn follower_text(g: &crate::ClusterGauges) -> String {
    let mut out = Out { text: String::new(), prefix: "" };
    cluster_gauges(&mut out, g);
    out.text
}

fn cluster_gauges(out: &mut Out, g: &crate::ClusterGauges) {
    let help = "1 if this node is the cluster's leader";
    out.family(Kind::Gauge, "hourglass_cluster_leader", help, &[(String::new(), u64::from(g.leader))]);
    let help = "The leader's term (its etcd leader key's create revision)";
    out.family(Kind::Gauge, "hourglass_cluster_term", help, &[(String::new(), g.term)]);
    let help = "Nodes holding every confirmed record (the in-sync set, leader included)";
    out.family(Kind::Gauge, "hourglass_cluster_in_sync_replicas", help, &[(String::new(), g.in_sync)]);
    let rows: Vec<(String, u64)> =
        g.lag_records.iter().map(|(name, lag)| (format!("follower=\"{}\"", escape(name)), *lag)).collect();
    let help = "Replicated operations a follower has not yet acknowledged";
    out.family(Kind::Gauge, "hourglass_cluster_replication_lag_records", help, &rows);
}

fn identity(out: &mut Out, node: &NodeInfo) {
    // RabbitMQ's dashboards select by `rabbitmq_cluster`: the cluster's name, the same on every
    // leader, not the node's (issue #21).
    let (name, cluster) = (escape(&node.name), escape(node.cluster_name()));
    let labels = format!("rabbitmq_node=\"{name}\",rabbitmq_cluster=\"{cluster}\"");
    out.family(Kind::Gauge, "identity_info", "RabbitMQ node & cluster identity info", &[(labels, 1)]);
    let labels = format!(
        "rabbitmq_version=\"{}\",product_version=\"{}\"",
        crate::RABBITMQ_COMPAT_VERSION,
        crate::PRODUCT_VERSION
    );
    out.family(Kind::Gauge, "build_info", "RabbitMQ & Erlang/OTP version info", &[(labels, 1)]);
}

/// A channel's name as the management API gives it: its connection's, then the number.
fn channel_name(node: &NodeInfo, c: &ChannelSummary) -> String {
    format!("{} ({})", connection_name(node, &c.peer, &c.local, c.tls), c.channel.0)
}

/// The text being written, and the prefix of the endpoint's names.
struct Out {
    text: String,
    prefix: &'static str,
}

impl Out {
    /// One family per row: a sample per object, or their sum (one unlabelled sample).
    fn rows<T>(&mut self, rows: &[Row<T>], objects: &[(String, &T)], per_object: bool) {
        for (name, kind, help, read) in rows {
            let samples: Samples = if per_object {
                objects.iter().map(|(labels, object)| (labels.clone(), read(object))).collect()
            } else {
                vec![(String::new(), objects.iter().map(|(_, object)| read(object)).sum())]
            };
            self.family(*kind, name, help, &samples);
        }
    }

    fn family(&mut self, kind: Kind, name: &str, help: &str, samples: &[(String, u64)]) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let prefix = self.prefix;
        let _ = writeln!(self.text, "# HELP {prefix}{name} {help}\n# TYPE {prefix}{name} {kind}");
        for (labels, value) in samples {
            if labels.is_empty() {
                let _ = writeln!(self.text, "{prefix}{name} {value}");
            } else {
                let _ = writeln!(self.text, "{prefix}{name}{{{labels}}} {value}");
            }
        }
    }
}

/// Prometheus label escaping: backslash, double quote, newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Label values are escaped as the text format 0.0.4 requires (checked with promtool and
    /// prometheus_client's parser: a queue named `q"weird\name` parses back).
    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("q\"weird\\name\n"), "q\\\"weird\\\\name\\n");
        let mut out = Out { text: String::new(), prefix: "" };
        out.family(Kind::Gauge, "x", "help", &[(format!("queue=\"{}\"", escape("a\"b")), 1)]);
        assert_eq!(out.text, "# HELP x help\n# TYPE x gauge\nx{queue=\"a\\\"b\"} 1\n");
    }

    /// `rabbitmq_cluster` is the cluster's name on any leader (dashboards select by it across
    /// failovers), the node's only for a single node (as RabbitMQ names a lone node's cluster).
    #[test]
    fn identity_names_the_cluster_not_the_leader() {
        let node = |name: &str| NodeInfo::new([127, 0, 0, 1].into(), 5672, 15672, 15692).with_node_name(name);
        let label = |node: &NodeInfo| {
            let mut out = Out { text: String::new(), prefix: "rabbitmq_" };
            identity(&mut out, node);
            out.text.lines().find(|l| l.starts_with("rabbitmq_identity_info{")).map(str::to_owned)
        };
        let (n1, n2) = (node("n1").with_cluster_name("prod"), node("n2").with_cluster_name("prod"));
        assert_eq!(
            label(&n1).as_deref(),
            Some("rabbitmq_identity_info{rabbitmq_node=\"hourglass@n1\",rabbitmq_cluster=\"prod\"} 1")
        );
        assert_eq!(label(&n2).map(|l| l.replace("n2", "n1")), label(&n1));
        let single = label(&node("solo")).unwrap();
        assert!(single.contains("rabbitmq_cluster=\"hourglass@solo\""), "{single}");
    }

    /// Every family name the detailed endpoint accepts reads back to its family.
    #[test]
    fn family_names_round_trip() {
        for (family, name) in FAMILIES {
            assert_eq!(Family::from_name(name), Some(*family));
        }
        assert_eq!(Family::from_name("connection_coarse_metrics"), None);
    }
}
