//! Prometheus text exposition with the RabbitMQ plugin's metric names: `/metrics` aggregates
//! queue metrics over all queues, `/metrics/per-object` labels them by `vhost` and `queue`.
//!
//! Written by hand rather than with `prometheus-client`: every value is sampled from one broker
//! snapshot at scrape time (a collector, not long-lived counters), and the format is a few lines.

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hourglass_broker::message_stats::MessageStats;
use hourglass_broker::queue::QueueStats;

use crate::error::ApiError;
use crate::AppState;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .with_state(state)
}

struct Snapshot {
    queues: Vec<QueueStats>,
    connections: usize,
    channels: usize,
    consumers: usize,
    messages: MessageStats,
}

async fn snapshot(state: &AppState) -> Result<Snapshot, ApiError> {
    state
        .broker
        .run(|b, _| Snapshot {
            queues: b.list_queues(),
            connections: b.list_connections().len(),
            channels: b.list_channels().len(),
            consumers: b.list_consumers().len(),
            messages: b.message_stats(),
        })
        .await
}

async fn aggregated(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(text(render(&state, &snapshot(&state).await?, false)))
}

async fn per_object(State(state): State<AppState>) -> Result<Response, ApiError> {
    Ok(text(render(&state, &snapshot(&state).await?, true)))
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

/// The queue gauges: name, help, and how to read one queue.
type QueueGauge = (&'static str, &'static str, fn(&QueueStats) -> usize);
type QueueCounter = (&'static str, &'static str, fn(&QueueStats) -> u64);

/// Counters of time events (contract §7): RabbitMQ's dead-lettering names, ours for the rest.
const QUEUE_COUNTERS: &[QueueCounter] = &[
    (
        "rabbitmq_global_messages_dead_lettered_rejected_total",
        "Messages dead-lettered because they were rejected",
        |q| q.counters.dead_lettered_rejected,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_expired_total",
        "Messages dead-lettered because their TTL expired",
        |q| q.counters.dead_lettered_expired,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_maxlen_total",
        "Messages dead-lettered by a length limit",
        |q| q.counters.dead_lettered_maxlen,
    ),
    (
        "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
        "Messages dead-lettered past their delivery limit",
        |q| q.counters.dead_lettered_delivery_limit,
    ),
    (
        "hourglass_queue_messages_expired_total",
        "Messages that expired (TTL), dead-lettered or dropped",
        |q| q.counters.expired,
    ),
    ("hourglass_queue_visibility_expired_total", "Deliveries whose visibility timeout ran out", |q| {
        q.counters.visibility_expired
    }),
    ("hourglass_queue_messages_redelivered_total", "Messages that came back unacknowledged", |q| {
        q.counters.redelivered
    }),
];

type GlobalCounter = (&'static str, &'static str, fn(&MessageStats) -> u64);

/// The RabbitMQ plugin's global message counters (rabbit_global_counters), broker-wide.
const GLOBAL_COUNTERS: &[GlobalCounter] = &[
    ("rabbitmq_global_messages_received_total", "Total number of messages received from publishers", |m| {
        m.publish
    }),
    ("rabbitmq_global_messages_routed_total", "Total number of messages routed to queues or streams", |m| {
        m.routed
    }),
    (
        "rabbitmq_global_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |m| m.drop_unroutable,
    ),
    (
        "rabbitmq_global_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |m| m.return_unroutable,
    ),
    ("rabbitmq_global_messages_confirmed_total", "Total number of messages confirmed to publishers", |m| {
        m.confirm
    }),
    ("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers", |m| {
        m.deliver_get()
    }),
    (
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        |m| m.deliver,
    ),
    (
        "rabbitmq_global_messages_delivered_consume_auto_ack_total",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        |m| m.deliver_no_ack,
    ),
    (
        "rabbitmq_global_messages_delivered_get_manual_ack_total",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        |m| m.get,
    ),
    (
        "rabbitmq_global_messages_delivered_get_auto_ack_total",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        |m| m.get_no_ack,
    ),
    ("rabbitmq_global_messages_redelivered_total", "Total number of messages redelivered to consumers", |m| {
        m.redeliver
    }),
    ("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", |m| {
        m.ack
    }),
];

const QUEUE_GAUGES: &[QueueGauge] = &[
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", |q| q.messages_ready),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", |q| {
        q.messages_unacked
    }),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth", |q| {
        q.messages_ready + q.messages_unacked
    }),
    ("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", |q| q.message_bytes_ready),
    ("rabbitmq_queue_consumers", "Consumers on a queue", |q| q.consumers),
    ("hourglass_queue_messages_delayed", "Messages waiting for their due time (delayed, back-off)", |q| {
        q.messages_delayed
    }),
    ("hourglass_queue_messages_delayed_bytes", "Size in bytes of delayed messages", |q| {
        q.message_bytes_delayed
    }),
];

fn render(state: &AppState, s: &Snapshot, per_object: bool) -> String {
    let mut out = String::new();
    let node = &state.node.name;
    gauge(
        &mut out,
        "rabbitmq_identity_info",
        "RabbitMQ node & cluster identity info",
        &[(format!("rabbitmq_node=\"{}\",rabbitmq_cluster=\"{}\"", escape(node), escape(node)), 1)],
    );
    gauge(
        &mut out,
        "rabbitmq_build_info",
        "RabbitMQ & Erlang/OTP version info",
        &[(
            format!(
                "rabbitmq_version=\"{}\",product_version=\"{}\"",
                crate::RABBITMQ_COMPAT_VERSION,
                crate::PRODUCT_VERSION
            ),
            1,
        )],
    );
    gauge(
        &mut out,
        "rabbitmq_connections",
        "Connections currently open",
        &[(String::new(), s.connections as u64)],
    );
    gauge(&mut out, "rabbitmq_channels", "Channels currently open", &[(String::new(), s.channels as u64)]);
    gauge(&mut out, "rabbitmq_queues", "Queues available", &[(String::new(), s.queues.len() as u64)]);
    gauge(
        &mut out,
        "rabbitmq_consumers",
        "Consumers currently connected",
        &[(String::new(), s.consumers as u64)],
    );
    for (name, help, read) in QUEUE_GAUGES {
        let samples = queue_samples(&s.queues, per_object, |q| read(q) as u64);
        gauge(&mut out, name, help, &samples);
    }
    for (name, help, read) in GLOBAL_COUNTERS {
        metric(&mut out, "counter", name, help, &[(String::new(), read(&s.messages))]);
    }
    for (name, help, read) in QUEUE_COUNTERS {
        let samples = queue_samples(&s.queues, per_object, read);
        metric(&mut out, "counter", name, help, &samples);
    }
    gauge(
        &mut out,
        "rabbitmq_process_resident_memory_bytes",
        "Memory used in bytes",
        &[(String::new(), resident_memory_bytes())],
    );
    let resources = *state.node.resources.borrow();
    for (name, help, value) in [
        ("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes", resources.mem_limit),
        ("rabbitmq_disk_space_available_bytes", "Disk space available in bytes", resources.disk_free),
        (
            "rabbitmq_disk_space_available_limit_bytes",
            "Free disk space low watermark in bytes",
            resources.disk_free_limit,
        ),
        (
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            u64::from(resources.mem_alarm),
        ),
        (
            "rabbitmq_alarms_free_disk_space_watermark",
            "is 1 if free disk space watermark alarm is in effect",
            u64::from(resources.disk_free_alarm),
        ),
        (
            "hourglass_store_recovery_damaged_regions",
            "Damaged stretches of the message log skipped by recovery at start",
            state.node.store_damage.regions,
        ),
        (
            "hourglass_store_recovery_damaged_bytes",
            "Bytes of the message log skipped as damaged by recovery at start",
            state.node.store_damage.bytes,
        ),
    ] {
        gauge(&mut out, name, help, &[(String::new(), value)]);
    }
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
    gauge(&mut out, "rabbitmq_process_open_fds", "Open file descriptors", &[(String::new(), fds)]);
    let uptime = state.node.started.elapsed().as_secs_f64();
    let _ = writeln!(out, "# HELP rabbitmq_erlang_uptime_seconds Node uptime\n# TYPE rabbitmq_erlang_uptime_seconds gauge\nrabbitmq_erlang_uptime_seconds {uptime}");
    out
}

/// One sample per queue (labelled by vhost and queue), or their sum.
fn queue_samples(
    queues: &[QueueStats],
    per_object: bool,
    read: impl Fn(&QueueStats) -> u64,
) -> Vec<(String, u64)> {
    if per_object {
        queues
            .iter()
            .map(|q| (format!("vhost=\"{}\",queue=\"{}\"", escape(&q.vhost), escape(&q.name)), read(q)))
            .collect()
    } else {
        vec![(String::new(), queues.iter().map(read).sum())]
    }
}

fn gauge(out: &mut String, name: &str, help: &str, samples: &[(String, u64)]) {
    metric(out, "gauge", name, help, samples);
}

fn metric(out: &mut String, kind: &str, name: &str, help: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// Prometheus label escaping: backslash, double quote, newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Resident set size from /proc (0 where there is none).
pub fn resident_memory_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Label values are escaped as the text format 0.0.4 requires (checked with promtool and
    /// prometheus_client's parser: a queue named `q"weird\name` parses back).
    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("q\"weird\\name\n"), "q\\\"weird\\\\name\\n");
        let mut out = String::new();
        gauge(&mut out, "x", "help", &[(format!("queue=\"{}\"", escape("a\"b")), 1)]);
        assert_eq!(out, "# HELP x help\n# TYPE x gauge\nx{queue=\"a\\\"b\"} 1\n");
    }
}
