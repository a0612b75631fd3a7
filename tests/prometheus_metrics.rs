//! Prometheus metrics as RabbitMQ's Grafana dashboards read them (issue #13, "Prometheus as
//! RabbitMQ's dashboards read it"; docs/metrics.md), over the real binary: known traffic, then a
//! scrape whose counters must equal what that traffic makes RabbitMQ count.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{connect, scrape, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

/// Every metric name that a PromQL expression of RabbitMQ's `RabbitMQ-Overview` Grafana dashboard
/// reads, in the versions published with rabbitmq-server 3.8 to 3.13 and on its main branch
/// (deps/rabbitmq_prometheus/docker/grafana/dashboards/RabbitMQ-Overview.json). Label names
/// (`rabbitmq_cluster`, `rabbitmq_node`, `rabbitmq_endpoint`) are not metrics.
const OVERVIEW_DASHBOARD_METRICS: &[&str] = &[
    "rabbitmq_build_info",
    "rabbitmq_channel_consumers",
    "rabbitmq_channel_get_ack_total",
    "rabbitmq_channel_get_empty_total",
    "rabbitmq_channel_get_total",
    "rabbitmq_channel_messages_acked_total",
    "rabbitmq_channel_messages_confirmed_total",
    "rabbitmq_channel_messages_delivered_ack_total",
    "rabbitmq_channel_messages_delivered_total",
    "rabbitmq_channel_messages_published_total",
    "rabbitmq_channel_messages_redelivered_total",
    "rabbitmq_channel_messages_unconfirmed",
    "rabbitmq_channel_messages_unroutable_dropped_total",
    "rabbitmq_channel_messages_unroutable_returned_total",
    "rabbitmq_channels",
    "rabbitmq_channels_closed_total",
    "rabbitmq_channels_opened_total",
    "rabbitmq_connections",
    "rabbitmq_connections_closed_total",
    "rabbitmq_connections_opened_total",
    "rabbitmq_consumers",
    "rabbitmq_disk_space_available_bytes",
    "rabbitmq_disk_space_available_limit_bytes",
    "rabbitmq_erlang_uptime_seconds",
    "rabbitmq_global_consumers",
    "rabbitmq_global_messages_acknowledged_total",
    "rabbitmq_global_messages_confirmed_total",
    "rabbitmq_global_messages_delivered_consume_auto_ack_total",
    "rabbitmq_global_messages_delivered_consume_manual_ack_total",
    "rabbitmq_global_messages_delivered_get_auto_ack_total",
    "rabbitmq_global_messages_delivered_get_manual_ack_total",
    "rabbitmq_global_messages_delivered_total",
    "rabbitmq_global_messages_get_empty_total",
    "rabbitmq_global_messages_received_confirm_total",
    "rabbitmq_global_messages_received_total",
    "rabbitmq_global_messages_redelivered_total",
    "rabbitmq_global_messages_routed_total",
    "rabbitmq_global_messages_unroutable_dropped_total",
    "rabbitmq_global_messages_unroutable_returned_total",
    "rabbitmq_global_publishers",
    "rabbitmq_identity_info",
    "rabbitmq_message_size_bytes_bucket",
    "rabbitmq_message_size_bytes_count",
    "rabbitmq_message_size_bytes_sum",
    "rabbitmq_process_max_fds",
    "rabbitmq_process_max_tcp_sockets",
    "rabbitmq_process_open_fds",
    "rabbitmq_process_open_tcp_sockets",
    "rabbitmq_process_resident_memory_bytes",
    "rabbitmq_queue_messages_published_total",
    "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked",
    "rabbitmq_queues",
    "rabbitmq_queues_created_total",
    "rabbitmq_queues_declared_total",
    "rabbitmq_queues_deleted_total",
    "rabbitmq_resident_memory_limit_bytes",
];

/// Metrics of the dashboard that are 0 on RabbitMQ too after the traffic below: nothing is left
/// ready, unacked or unconfirmed, and no connection has closed.
const MAY_BE_ZERO: &[&str] = &[
    "rabbitmq_channel_messages_unconfirmed",
    "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked",
    "rabbitmq_connections_closed_total",
];

/// What the traffic of `metrics_count_traffic_as_rabbitmq_dashboards_read_it` makes RabbitMQ count
/// on `/metrics`: ten publishes on a confirm channel (eight routed, one returned, one dropped), a
/// get of each kind and an empty one, five manual-ack deliveries of which one requeued, two
/// no-ack deliveries, four channels of which one closed, and a queue declared and deleted.
const AFTER_TRAFFIC: &[(&str, u64)] = &[
    ("rabbitmq_channel_messages_published_total", 10),
    ("rabbitmq_channel_messages_confirmed_total", 10),
    ("rabbitmq_channel_messages_unroutable_returned_total", 1),
    ("rabbitmq_channel_messages_unroutable_dropped_total", 1),
    ("rabbitmq_channel_get_ack_total", 1),
    ("rabbitmq_channel_get_total", 1),
    ("rabbitmq_channel_get_empty_total", 1),
    ("rabbitmq_channel_messages_delivered_ack_total", 5),
    ("rabbitmq_channel_messages_delivered_total", 2),
    ("rabbitmq_channel_messages_redelivered_total", 1),
    ("rabbitmq_channel_messages_acked_total", 5),
    // The manual-ack consumer went with its lapin handle (basic.cancel); the no-ack one stays.
    ("rabbitmq_channel_consumers", 1),
    ("rabbitmq_channel_messages_unacked", 0),
    ("rabbitmq_consumer_prefetch", 10),
    ("rabbitmq_connections_opened_total", 1),
    ("rabbitmq_connections_closed_total", 0),
    ("rabbitmq_channels_opened_total", 4),
    ("rabbitmq_channels_closed_total", 1),
    // Three declares and the round-trip redeclare in `consume_requeueing_once`.
    ("rabbitmq_queues_declared_total", 4),
    ("rabbitmq_queues_created_total", 3),
    ("rabbitmq_queues_deleted_total", 1),
    ("rabbitmq_queue_messages_published_total", 8),
    ("rabbitmq_global_messages_received_confirm_total", 10),
    ("rabbitmq_global_messages_get_empty_total", 1),
    ("rabbitmq_global_publishers", 1),
    ("rabbitmq_global_consumers", 1),
    ("rabbitmq_process_open_tcp_sockets", 1),
    ("rabbitmq_message_size_bytes_count{protocol=\"amqp091\"}", 10),
    ("rabbitmq_message_size_bytes_sum{protocol=\"amqp091\"}", 10),
    ("rabbitmq_message_size_bytes_bucket{protocol=\"amqp091\",le=\"100\"}", 10),
];

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Publishes with confirms, gets with and without ack, a get on an empty queue, a manual-ack
/// consumer that requeues once, a no-ack consumer, unroutable publishes both ways and a queue
/// deleted: `/metrics` sums the channel counters to exactly those numbers, counts the churn,
/// and has every metric the Overview dashboard reads, non-zero where RabbitMQ's would be.
#[tokio::test]
async fn metrics_count_traffic_as_rabbitmq_dashboards_read_it() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let publisher = conn.create_channel().await.unwrap();
    declare(&publisher, "prom-q").await;
    declare(&publisher, "prom-q2").await;
    publisher.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for _ in 0..6 {
        publish(&publisher, "", "prom-q", false).await;
    }
    for _ in 0..2 {
        publish(&publisher, "", "prom-q2", false).await;
    }
    publish(&publisher, "amq.direct", "nowhere", true).await;
    publish(&publisher, "amq.direct", "nowhere", false).await;

    let getter = conn.create_channel().await.unwrap();
    getter.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let got = within("get", getter.basic_get("prom-q".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("a message");
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    let got = getter.basic_get("prom-q".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(got.is_some());
    consume_requeueing_once(&getter, "prom-q", 4).await;
    let empty = getter.basic_get("prom-q".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(empty.is_none());

    let no_ack = conn.create_channel().await.unwrap();
    let options = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut consumer =
        no_ack.basic_consume("prom-q2".into(), "auto".into(), options, FieldTable::default()).await.unwrap();
    for _ in 0..2 {
        within("no-ack delivery", consumer.next()).await.expect("stream open").expect("delivery");
    }
    let churn = conn.create_channel().await.unwrap();
    declare(&churn, "prom-temp").await;
    churn.queue_delete("prom-temp".into(), QueueDeleteOptions::default()).await.unwrap();
    churn.close(200, "bye".into()).await.unwrap();

    let text = scrape(&broker, "/metrics").await;
    let metrics = samples(&text);
    for (name, value) in AFTER_TRAFFIC {
        assert_eq!(metrics.get(*name), Some(&(*value as f64)), "{name} in\n{text}");
    }
    assert_families_declared_once(&text);
    assert_families_declared_once(&scrape(&broker, "/metrics/per-object").await);
    let by_name = summed_by_name(&metrics);
    for name in OVERVIEW_DASHBOARD_METRICS {
        let value = by_name.get(*name).unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"));
        assert!(*value > 0.0 || MAY_BE_ZERO.contains(name), "{name} is 0 after traffic:\n{text}");
    }
    drop(conn);
}

/// `/metrics/per-object` labels channel counters by channel and queue gauges by vhost and
/// queue; `/metrics/detailed` sends only the families asked for, keeps queues to the vhosts
/// asked for, and shows open transactions and unacked basic.get deliveries.
#[tokio::test]
async fn per_object_and_detailed_endpoints_label_by_object_and_filter() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    declare(&channel, "detail-q").await;
    for _ in 0..3 {
        publish(&channel, "", "detail-q", false).await;
    }
    let got = channel.basic_get("detail-q".into(), BasicGetOptions { no_ack: false }).await.unwrap();
    assert!(got.is_some(), "left unacked on purpose");
    let tx = conn.create_channel().await.unwrap();
    tx.tx_select().await.unwrap();
    publish(&tx, "", "detail-q", false).await;
    publish(&tx, "", "detail-q", false).await;
    let held = tx.basic_get("detail-q".into(), BasicGetOptions { no_ack: false }).await.unwrap();
    held.expect("a message").delivery.ack(BasicAckOptions::default()).await.unwrap();
    // A round trip on the tx channel: the ack above is in the broker's transaction by now.
    declare(&tx, "detail-q").await;

    let per_object = scrape(&broker, "/metrics/per-object").await;
    let metrics = samples(&per_object);
    let first_channel = metrics
        .iter()
        .find(|(k, _)| {
            k.starts_with("rabbitmq_channel_messages_published_total{channel=\"") && k.ends_with(" (1)\"}")
        })
        .map(|(_, v)| *v);
    assert_eq!(first_channel, Some(3.0), "{per_object}");
    assert_eq!(metrics.get("rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"detail-q\"}"), Some(&1.0));

    let aggregated = samples(&scrape(&broker, "/metrics").await);
    assert_eq!(aggregated.get("rabbitmq_channel_messages_uncommitted"), Some(&2.0));
    assert_eq!(aggregated.get("rabbitmq_channel_acks_uncommitted"), Some(&1.0));
    // The acked-in-transaction delivery has left the channel's unacked list (as in RabbitMQ) but
    // not the queue's.
    assert_eq!(aggregated.get("rabbitmq_channel_messages_unacked"), Some(&1.0));

    let path = "/metrics/detailed?family=queue_coarse_metrics&family=channel_metrics&family=exchange_bindings&vhost=%2F";
    let text = scrape(&broker, path).await;
    let detailed = samples(&text);
    assert_eq!(
        detailed.get("rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"detail-q\"}"),
        Some(&1.0)
    );
    assert_eq!(
        detailed.get("rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"detail-q\"}"),
        Some(&2.0)
    );
    let unacked: f64 = detailed
        .iter()
        .filter(|(k, _)| k.starts_with("rabbitmq_detailed_channel_messages_unacked{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(unacked, 1.0, "{text}");
    assert!(detailed.contains_key("rabbitmq_cluster_exchange_bindings{vhost=\"/\",exchange=\"amq.direct\"}"));
    assert!(!text.contains("connections_opened_total") && !text.contains("rabbitmq_queue_messages_ready"));
    assert!(text.contains("\nrabbitmq_identity_info{"), "{text}");

    let other_vhost = scrape(&broker, "/metrics/detailed?family=queue_coarse_metrics&vhost=nowhere").await;
    assert!(!other_vhost.contains("detail-q"), "{other_vhost}");
    let nothing_asked = scrape(&broker, "/metrics/detailed").await;
    assert!(!nothing_asked.contains("rabbitmq_detailed_"), "{nothing_asked}");
    drop(conn);
}

async fn declare(channel: &Channel, queue: &str) {
    channel.queue_declare(queue.into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
}

/// Publishes one message; on a confirm channel, waits for its confirm.
async fn publish(channel: &Channel, exchange: &str, routing_key: &str, mandatory: bool) {
    let options = BasicPublishOptions { mandatory, ..Default::default() };
    let confirm = channel
        .basic_publish(exchange.into(), routing_key.into(), options, b"m", BasicProperties::default())
        .await
        .unwrap();
    within("confirm", confirm).await.unwrap();
}

/// Consumes `count` messages with manual acks, requeueing the first delivery once; then a
/// round trip, so every ack has reached the broker.
async fn consume_requeueing_once(channel: &Channel, queue: &str, count: usize) {
    let mut consumer = channel
        .basic_consume(queue.into(), "manual".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let (mut acked, mut requeued) = (0, false);
    for _ in 0..count + 1 {
        let delivery = within("delivery", consumer.next()).await.expect("stream open").expect("delivery");
        if requeued {
            delivery.ack(BasicAckOptions::default()).await.unwrap();
            acked += 1;
        } else {
            delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
            requeued = true;
        }
        if acked == count {
            break;
        }
    }
    assert_eq!(acked, count);
    declare(channel, queue).await;
}

/// Samples by name with labels (`name{labels}`), for every non-comment line.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Samples summed over their label sets, by bare metric name (what `sum(name)` in PromQL gives).
fn summed_by_name(samples: &HashMap<String, f64>) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for (key, value) in samples {
        let name = key.split('{').next().unwrap_or(key);
        *out.entry(name.to_owned()).or_insert(0.0) += value;
    }
    out
}

/// A valid exposition declares each family once (`# TYPE`), and every sample belongs to the
/// family declared last (`_bucket`, `_sum`, `_count` to a histogram).
fn assert_families_declared_once(text: &str) {
    let mut declared = std::collections::HashSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap_or_default().to_owned();
            assert!(declared.insert(current.clone()), "{current} declared twice");
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s));
            assert!(name == current || base == Some(current.as_str()), "{name} outside its family");
        }
    }
}
