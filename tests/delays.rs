//! End to end with lapin: the delayed exchange (the plugin's interface) and delay queues.

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

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

/// A message published to an x-delayed-message exchange with x-delay arrives no earlier than its
/// delay, carrying x-delay negated; a message without x-delay goes through at once.
#[tokio::test]
async fn delayed_exchange_delivers_after_the_delay() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .exchange_declare(
            "delayed".into(),
            lapin::ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions::default(),
            table(&[("x-delayed-type", AMQPValue::LongString("direct".into()))]),
        )
        .await
        .unwrap();
    channel.queue_declare("later".into(), Default::default(), FieldTable::default()).await.unwrap();
    channel
        .queue_bind("later".into(), "delayed".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume(
            "later".into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let sent = Instant::now();
    let props = BasicProperties::default().with_headers(table(&[("x-delay", AMQPValue::LongInt(400))]));
    channel.basic_publish("delayed".into(), "k".into(), Default::default(), b"later", props).await.unwrap();
    channel
        .basic_publish("delayed".into(), "k".into(), Default::default(), b"now", BasicProperties::default())
        .await
        .unwrap();
    let first = within("undelayed", consumer.next()).await.unwrap().unwrap();
    assert_eq!(first.data, b"now");
    let second = within("delayed", consumer.next()).await.unwrap().unwrap();
    let waited = sent.elapsed();
    assert_eq!(second.data, b"later");
    assert!(waited >= Duration::from_millis(390), "delivered early: {waited:?}");
    let delay = second.properties.headers().as_ref().and_then(|h| h.inner().get("x-delay").cloned());
    assert_eq!(delay, Some(AMQPValue::LongInt(-400)));
}

/// A queue with x-delivery-delay holds each message for that long; passive declare counts it as
/// not ready meanwhile.
#[tokio::test]
async fn delay_queue_holds_messages() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare(
            "slow".into(),
            Default::default(),
            table(&[("x-delivery-delay", AMQPValue::LongInt(300))]),
        )
        .await
        .unwrap();
    let sent = Instant::now();
    channel
        .basic_publish("".into(), "slow".into(), Default::default(), b"x", BasicProperties::default())
        .await
        .unwrap();
    let queue = channel
        .queue_declare(
            "slow".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(queue.message_count(), 0, "a delayed message is not ready");
    let mut consumer = channel
        .basic_consume(
            "slow".into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    within("delivery", consumer.next()).await.unwrap().unwrap();
    assert!(sent.elapsed() >= Duration::from_millis(290));
}
