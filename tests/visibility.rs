//! End to end with lapin: a visibility timeout returns an unacked delivery on an open channel.

mod common;

use std::time::{Duration, Instant};

use common::{connect, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Every settle of a delivery whose visibility ran out is ignored, not only the first: a reject
/// then a nack then an ack of the same stale tag leave the channel open (semantics §4).
#[tokio::test]
async fn repeated_settles_of_a_timed_out_delivery_are_all_ignored() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-visibility-timeout"), AMQPValue::LongInt(1_000));
    channel.queue_declare("stale".into(), Default::default(), args).await.unwrap();
    channel
        .basic_publish("".into(), "stale".into(), Default::default(), b"s", BasicProperties::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume("stale".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let first = within("first delivery", consumer.next()).await.unwrap().unwrap();
    let second = within("redelivery", consumer.next()).await.unwrap().unwrap();
    first.reject(BasicRejectOptions { requeue: true }).await.unwrap();
    first.nack(BasicNackOptions { requeue: true, multiple: false }).await.unwrap();
    first.ack(BasicAckOptions::default()).await.unwrap();
    second.ack(BasicAckOptions::default()).await.unwrap();
    // a round trip on the same channel proves it is still open after all four settles
    let queue = within(
        "passive declare",
        channel.queue_declare(
            "stale".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        ),
    )
    .await
    .expect("the channel stays open after repeated stale settles");
    assert_eq!(queue.message_count(), 0, "the message was settled once, by the live ack");
}

/// A consumer that does not ack within x-visibility-timeout gets the message again (redelivered,
/// with x-receipt-handle and x-delivery-count), its channel still open; its late ack of the first
/// delivery is ignored and the ack of the second settles the message.
#[tokio::test]
async fn unacked_delivery_returns_after_the_visibility_timeout() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-visibility-timeout"), AMQPValue::LongInt(1_000));
    channel.queue_declare("tasks".into(), Default::default(), args).await.unwrap();
    channel
        .basic_publish("".into(), "tasks".into(), Default::default(), b"t", BasicProperties::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume("tasks".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let first = within("first delivery", consumer.next()).await.unwrap().unwrap();
    assert!(!first.redelivered);
    let headers = first.properties.headers().clone().unwrap_or_default();
    assert!(headers.inner().contains_key("x-receipt-handle"));
    let taken = Instant::now();
    let second = within("redelivery", consumer.next()).await.unwrap().unwrap();
    assert!(taken.elapsed() >= Duration::from_millis(950), "came back early: {:?}", taken.elapsed());
    assert!(second.redelivered);
    let count = second.properties.headers().as_ref().and_then(|h| h.inner().get("x-delivery-count").cloned());
    assert_eq!(count, Some(AMQPValue::LongLongInt(1)));
    first.ack(BasicAckOptions::default()).await.unwrap();
    second.ack(BasicAckOptions::default()).await.unwrap();
    let probe = conn.create_channel().await.unwrap();
    let queue = probe
        .queue_declare(
            "tasks".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(queue.message_count(), 0);
    assert!(channel.status().connected(), "the late ack did not close the channel");
}

/// semantics §4: POST /api/queues/{vhost}/{queue}/visibility with a delivery's x-receipt-handle and
/// timeout_ms 0 makes that message visible at once: the consumer gets it again right away; the
/// same handle is stale afterwards (404).
#[tokio::test]
async fn receipt_handle_over_http_makes_the_message_visible_now() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-visibility-timeout"), AMQPValue::LongInt(600_000));
    channel.queue_declare("jobs".into(), Default::default(), args).await.unwrap();
    channel
        .basic_publish("".into(), "jobs".into(), Default::default(), b"j", BasicProperties::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume("jobs".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let first = within("delivery", consumer.next()).await.unwrap().unwrap();
    let handle =
        match first.properties.headers().as_ref().and_then(|h| h.inner().get("x-receipt-handle").cloned()) {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("no receipt handle: {other:?}"),
        };
    let body = format!(r#"{{"receipt_handle":"{handle}","timeout_ms":0}}"#);
    let (status, _) = common::http(&broker, "POST", "/api/queues/%2F/jobs/visibility", &body).await;
    assert_eq!(status, 204);
    let again = within("visible again", consumer.next()).await.unwrap().unwrap();
    assert!(again.redelivered);
    let (status, _) = common::http(&broker, "POST", "/api/queues/%2F/jobs/visibility", &body).await;
    assert_eq!(status, 404);
}

/// semantics §4, docs/http-api.md: GET /api/queues/{vhost}/{queue}/in-flight lists the
/// deliveries held under a visibility timeout with their receipt handles, their channel and when
/// each comes back; a settled delivery leaves the listing.
#[tokio::test]
async fn in_flight_listing_shows_each_delivery_and_when_it_returns() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-visibility-timeout"), AMQPValue::LongInt(600_000));
    channel.queue_declare("jobs".into(), Default::default(), args).await.unwrap();
    for body in [b"a", b"b"] {
        channel
            .basic_publish("".into(), "jobs".into(), Default::default(), body, BasicProperties::default())
            .await
            .unwrap();
    }
    let mut consumer = channel
        .basic_consume("jobs".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let mut handles = Vec::new();
    let mut deliveries = Vec::new();
    for _ in 0..2 {
        let d = within("delivery", consumer.next()).await.unwrap().unwrap();
        match d.properties.headers().as_ref().and_then(|h| h.inner().get("x-receipt-handle").cloned()) {
            Some(AMQPValue::LongString(s)) => handles.push(s.to_string()),
            other => panic!("no receipt handle: {other:?}"),
        }
        deliveries.push(d);
    }
    let (status, body) = common::http(&broker, "GET", "/api/queues/%2F/jobs/in-flight", "").await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["total"], 2);
    let items = listed["deliveries"].as_array().unwrap();
    let listed_handles: Vec<&str> = items.iter().map(|d| d["receipt_handle"].as_str().unwrap()).collect();
    assert_eq!(listed_handles, handles.iter().map(String::as_str).collect::<Vec<_>>());
    for item in items {
        let returns_in = item["visible_in_ms"].as_u64().unwrap();
        assert!((590_000..=600_000).contains(&returns_in), "{item}");
        assert!(item["channel"].as_str().unwrap().ends_with("(1)"), "{item}");
    }
    deliveries[0].ack(BasicAckOptions::default()).await.unwrap();
    // A round trip on the same channel: the broker has taken the ack once this answers.
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel.queue_declare("jobs".into(), passive, FieldTable::default()).await.unwrap();
    let (_, body) = common::http(&broker, "GET", "/api/queues/%2F/jobs/in-flight", "").await;
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["deliveries"][0]["receipt_handle"], handles[1].as_str());
}

/// Issue 39: a delivery under RabbitMQ 4.3's `x-consumer-timeout` is listed in flight as
/// `"timeout": "consumer"` without a receipt handle, the consumer listing shows its timeout, and
/// when it runs out lapin's consumer ends (basic.cancel) while the channel stays usable.
#[tokio::test]
async fn consumer_timeout_is_listed_and_cancels_a_lapin_consumer() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-consumer-timeout"), AMQPValue::LongInt(1_500));
    channel.queue_declare("slow".into(), Default::default(), args).await.unwrap();
    channel
        .basic_publish("".into(), "slow".into(), Default::default(), b"job", BasicProperties::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume("slow".into(), "w".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let delivery = within("delivery", consumer.next()).await.unwrap().unwrap();
    let started = Instant::now();
    assert!(delivery
        .properties
        .headers()
        .as_ref()
        .is_none_or(|h| !h.inner().contains_key("x-receipt-handle")));
    let (_, body) = common::http(&broker, "GET", "/api/queues/%2F/slow/in-flight", "").await;
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["total"], 1, "{body}");
    let item = &listed["deliveries"][0];
    assert_eq!(
        (item["timeout"].as_str(), item["consumer_timeout"].as_u64()),
        (Some("consumer"), Some(1_500)),
        "{item}"
    );
    assert!(item["receipt_handle"].is_null(), "{item}");
    let (_, body) = common::http(&broker, "GET", "/api/consumers", "").await;
    let consumers: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(consumers[0]["consumer_timeout"], 1_500, "{body}");
    // lapin ends the consumer's stream when the broker cancels it.
    assert!(within("the cancel", consumer.next()).await.is_none(), "the consumer was cancelled");
    assert!(started.elapsed() >= Duration::from_millis(1_400), "{:?}", started.elapsed());
    let back = channel.basic_get("slow".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(back.is_some_and(|m| m.delivery.redelivered), "back in the queue, redelivered");
}
