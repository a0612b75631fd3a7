//! The count and byte fields an operator reads (issue 25, "Numbers that must match RabbitMQ's
//! management API"), over the real binary with a real client: every expected number below is what
//! RabbitMQ 3.10.8 answered for the same traffic (`../shared/tools/rabbitmq-ref`), and 3.13 defines
//! these fields the same way. One exception: RabbitMQ 3.10.8 left a queue's and the overview's
//! `get_empty` at 0 after a basic.get-empty (its channel counted none either); we count it, as its
//! field says.

mod common;

use std::time::Duration;

use common::{connect, http, scrape, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use serde_json::Value;

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn declare(channel: &Channel, queue: &str, durable: bool) {
    let options = QueueDeclareOptions { durable, ..Default::default() };
    channel.queue_declare(queue.into(), options, FieldTable::default()).await.unwrap();
}

/// Publishes `body` to `queue` with delivery mode 2 (persistent) or 1, waiting for its confirm.
async fn publish(channel: &Channel, queue: &str, body: &[u8], persistent: bool) {
    let properties = BasicProperties::default().with_delivery_mode(if persistent { 2 } else { 1 });
    let confirm = channel
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, properties)
        .await
        .unwrap();
    within("confirm", confirm).await.unwrap();
}

async fn get_json(broker: &RunningBroker, path: &str) -> Value {
    let (status, body) = http(broker, "GET", path, "").await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The fields of a queue object named in `expected`, as (name, value) pairs.
fn fields(queue: &Value, expected: &[(&str, u64)]) -> Vec<(String, Option<u64>)> {
    expected.iter().map(|(name, _)| ((*name).to_owned(), queue[*name].as_u64())).collect()
}

fn wanted(expected: &[(&str, u64)]) -> Vec<(String, Option<u64>)> {
    expected.iter().map(|(name, value)| ((*name).to_owned(), Some(*value))).collect()
}

/// A durable queue holding 8 persistent 5-byte and 4 transient 10-byte messages, 3 of them
/// delivered and unacked; a transient queue holding one persistent 3-byte message (not persistent
/// there: RabbitMQ counts `messages_persistent` only in durable queues); a basic.get on an empty
/// queue. The queue objects (shown and listed), the overview's totals, the vhost and the
/// per-object Prometheus gauges give RabbitMQ's numbers.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario checked against every view of it: queue, listing, overview, vhost, gauges"
)]
async fn queue_vhost_and_overview_counts_are_rabbitmqs() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let publisher = conn.create_channel().await.unwrap();
    publisher.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    declare(&publisher, "ui.vis", true).await;
    declare(&publisher, "tr.q", false).await;
    declare(&publisher, "empty.q", true).await;
    for _ in 0..8 {
        publish(&publisher, "ui.vis", b"hello", true).await;
    }
    for _ in 0..4 {
        publish(&publisher, "ui.vis", b"transient1", false).await;
    }
    publish(&publisher, "tr.q", b"abc", true).await;
    let empty = publisher.basic_get("empty.q".into(), BasicGetOptions { no_ack: false }).await.unwrap();
    assert!(empty.is_none());

    let consumer = conn.create_channel().await.unwrap();
    consumer.basic_qos(3, BasicQosOptions::default()).await.unwrap();
    let mut deliveries = consumer
        .basic_consume("ui.vis".into(), "c".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for _ in 0..3 {
        within("delivery", deliveries.next()).await.expect("a delivery").unwrap();
    }

    let expected = [
        ("messages", 12),
        ("messages_ready", 9),
        ("messages_unacknowledged", 3),
        ("messages_ram", 12),
        ("messages_ready_ram", 9),
        ("messages_unacknowledged_ram", 3),
        ("messages_persistent", 8),
        ("messages_paged_out", 0),
        ("message_bytes", 80),
        ("message_bytes_ready", 65),
        ("message_bytes_unacknowledged", 15),
        ("message_bytes_ram", 80),
        ("message_bytes_persistent", 40),
        ("message_bytes_paged_out", 0),
    ];
    let shown = get_json(&broker, "/api/queues/%2F/ui.vis").await;
    assert_eq!(fields(&shown, &expected), wanted(&expected), "{shown}");
    let listed = get_json(&broker, "/api/queues/%2F").await;
    let listed = listed.as_array().unwrap().iter().find(|q| q["name"] == "ui.vis").unwrap().clone();
    assert_eq!(fields(&listed, &expected), wanted(&expected), "{listed}");

    let transient =
        [("messages", 1), ("messages_persistent", 0), ("message_bytes", 3), ("message_bytes_persistent", 0)];
    let tr = get_json(&broker, "/api/queues/%2F/tr.q").await;
    assert_eq!(fields(&tr, &transient), wanted(&transient), "{tr}");

    let empty_q = get_json(&broker, "/api/queues/%2F/empty.q").await;
    assert_eq!(empty_q["message_stats"]["get_empty"], 1, "{empty_q}");
    assert_eq!(shown["message_stats"]["get_empty"], 0, "{shown}");
    assert_eq!(
        (shown["message_stats"]["publish"].as_u64(), shown["message_stats"]["deliver"].as_u64()),
        (Some(12), Some(3))
    );

    let overview = get_json(&broker, "/api/overview").await;
    let totals = [("messages", 13), ("messages_ready", 10), ("messages_unacknowledged", 3)];
    assert_eq!(fields(&overview["queue_totals"], &totals), wanted(&totals), "{overview}");
    let objects = [("queues", 3), ("connections", 1), ("channels", 2), ("consumers", 1), ("exchanges", 7)];
    assert_eq!(fields(&overview["object_totals"], &objects), wanted(&objects), "{overview}");
    let stats = [("publish", 13), ("deliver", 3), ("deliver_get", 3), ("get_empty", 1), ("ack", 0)];
    assert_eq!(fields(&overview["message_stats"], &stats), wanted(&stats), "{overview}");

    let vhost = get_json(&broker, "/api/vhosts/%2F").await;
    assert_eq!(fields(&vhost, &totals), wanted(&totals), "{vhost}");

    let metrics = scrape(&broker, "/metrics/per-object").await;
    let gauges = [
        ("rabbitmq_queue_messages", 12),
        ("rabbitmq_queue_messages_ready", 9),
        ("rabbitmq_queue_messages_unacked", 3),
        ("rabbitmq_queue_messages_ram", 12),
        ("rabbitmq_queue_messages_ram_bytes", 80),
        ("rabbitmq_queue_messages_ready_ram", 9),
        ("rabbitmq_queue_messages_unacked_ram", 3),
        ("rabbitmq_queue_messages_persistent", 8),
        ("rabbitmq_queue_messages_persistent_bytes", 40),
        ("rabbitmq_queue_messages_bytes", 80),
        ("rabbitmq_queue_messages_ready_bytes", 65),
        ("rabbitmq_queue_messages_unacked_bytes", 15),
        ("rabbitmq_queue_messages_paged_out", 0),
        ("rabbitmq_queue_messages_paged_out_bytes", 0),
    ];
    let scraped: Vec<(String, Option<u64>)> = gauges
        .iter()
        .map(|(name, _)| {
            let line = format!("{name}{{vhost=\"/\",queue=\"ui.vis\"}} ");
            let value = metrics.lines().find_map(|l| l.strip_prefix(&line)).and_then(|v| v.parse().ok());
            ((*name).to_owned(), value)
        })
        .collect();
    assert_eq!(scraped, wanted(&gauges), "{metrics}");

    // Acked (after the consumer is cancelled, so no more come), the three leave every count; the
    // queue's bytes follow.
    consumer.basic_cancel("c".into(), BasicCancelOptions::default()).await.unwrap();
    consumer.basic_ack(3, BasicAckOptions { multiple: true }).await.unwrap();
    declare(&consumer, "ui.vis", true).await;
    let after = [
        ("messages", 9),
        ("messages_unacknowledged", 0),
        ("messages_persistent", 5),
        ("message_bytes", 65),
        ("message_bytes_unacknowledged", 0),
        ("message_bytes_persistent", 25),
    ];
    let acked = get_json(&broker, "/api/queues/%2F/ui.vis").await;
    assert_eq!(fields(&acked, &after), wanted(&after), "{acked}");
}

/// Rates from the first look (issue 25): with about 20 messages a second flowing for 11 s and no
/// request before, the first look at the queue and the overview shows their rates — the broker
/// samples every 5 s in the background, as RabbitMQ's `collect_statistics_interval`.
#[tokio::test]
async fn the_first_look_shows_rates() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    declare(&channel, "flowing", false).await;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(11) {
        publish(&channel, "flowing", b"tick", false).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queue = get_json(&broker, "/api/queues/%2F/flowing").await;
    let publish_rate = queue["message_stats"]["publish_details"]["rate"].as_f64().unwrap_or_default();
    assert!((5.0..=40.0).contains(&publish_rate), "{queue}");
    let depth_rate = queue["messages_details"]["rate"].as_f64().unwrap_or_default();
    assert!((5.0..=40.0).contains(&depth_rate), "{queue}");
    let overview = get_json(&broker, "/api/overview?msg_rates_age=60&msg_rates_incr=5").await;
    let details = &overview["message_stats"]["publish_details"];
    assert!(details["rate"].as_f64().unwrap_or_default() > 5.0, "{overview}");
    let samples = details["samples"].as_array().map(Vec::len).unwrap_or_default();
    assert!(samples >= 2, "the history of the last minute is listed: {overview}");
}

/// `/api/nodes` counts descriptors and sockets as RabbitMQ 3.x: `fd_total` the process's soft
/// descriptor limit, `fd_used` its open descriptors, `sockets_total` 90% of the limit less 100,
/// `sockets_used` the open client connections (they were hard-coded 1048576, 0 and 0).
#[tokio::test]
async fn node_counts_descriptors_and_sockets() {
    let broker = RunningBroker::start();
    let _one = connect(&broker).await;
    let _two = connect(&broker).await;
    let nodes = get_json(&broker, "/api/nodes").await;
    let node = &nodes[0];
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", broker.pid())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert_eq!(node["fd_total"].as_u64(), Some(soft), "{node}");
    assert_eq!(node["sockets_total"].as_u64(), Some(soft.saturating_sub(100) * 9 / 10), "{node}");
    assert_eq!(node["sockets_used"].as_u64(), Some(2), "{node}");
    let open = std::fs::read_dir(format!("/proc/{}/fd", broker.pid())).unwrap().count() as u64;
    let fd_used = node["fd_used"].as_u64().unwrap_or_default();
    assert!(fd_used > 0 && fd_used.abs_diff(open) <= 4, "fd_used {fd_used}, /proc says {open}");
}
