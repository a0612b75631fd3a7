//! End to end with lapin: TTL, dead-lettering with x-death, max-length and x-expires on the real
//! binary. Waits are on the events themselves, each bounded.

mod common;

use std::time::{Duration, Instant};

use common::{connect, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, ExchangeKind};

const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in entries {
        table.insert(ShortString::from(*k), v.clone());
    }
    table
}

async fn dead_letter_setup(channel: &Channel, source: &str, source_args: &[(&str, AMQPValue)]) {
    channel
        .exchange_declare("dlx".into(), ExchangeKind::Fanout, Default::default(), FieldTable::default())
        .await
        .unwrap();
    channel.queue_declare("dlq".into(), Default::default(), FieldTable::default()).await.unwrap();
    channel
        .queue_bind("dlq".into(), "dlx".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let mut all = vec![("x-dead-letter-exchange", AMQPValue::LongString("dlx".into()))];
    all.extend(source_args.iter().cloned());
    channel.queue_declare(source.into(), Default::default(), args(&all)).await.unwrap();
}

fn x_death_first(headers: &FieldTable) -> &FieldTable {
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death in {headers:?}")
    };
    match deaths.as_slice().first() {
        Some(AMQPValue::FieldTable(t)) => t,
        other => panic!("{other:?}"),
    }
}

fn long_string(table: &FieldTable, key: &str) -> String {
    match table.inner().get(key) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("{key}: {other:?}"),
    }
}

/// A message with a short per-message TTL behind a long-lived head reaches the DLQ on time, with
/// x-death reason expired, while the head stays.
#[tokio::test]
async fn expired_message_reaches_the_dead_letter_queue_with_x_death() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    dead_letter_setup(&channel, "work", &[]).await;
    let publish = |body: &'static [u8], ttl: &str| {
        let props = BasicProperties::default().with_expiration(ttl.into());
        channel.basic_publish("".into(), "work".into(), BasicPublishOptions::default(), body, props)
    };
    publish(b"head", "60000").await.unwrap();
    let sent = Instant::now();
    publish(b"short", "200").await.unwrap();
    let mut dlq = channel
        .basic_consume(
            "dlq".into(),
            "dead".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let dead = within("dead letter", dlq.next()).await.unwrap().unwrap();
    let waited = sent.elapsed();
    assert_eq!(dead.data, b"short");
    assert!(waited >= Duration::from_millis(190), "expired early: {waited:?}");
    let headers = dead.properties.headers().as_ref().expect("headers");
    let death = x_death_first(headers);
    assert_eq!(long_string(death, "reason"), "expired");
    assert_eq!(long_string(death, "queue"), "work");
    assert_eq!(long_string(death, "original-expiration"), "200");
    assert!(dead.properties.expiration().is_none());
    let work = channel
        .queue_declare(
            "work".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(work.message_count(), 1, "the long-lived head is still there");
}

/// basic.reject without requeue dead-letters with reason rejected.
#[tokio::test]
async fn rejected_message_is_dead_lettered() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    dead_letter_setup(&channel, "jobs", &[]).await;
    channel
        .basic_publish("".into(), "jobs".into(), Default::default(), b"bad", BasicProperties::default())
        .await
        .unwrap();
    let got = within("get", channel.basic_get("jobs".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .unwrap();
    got.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    let dead = within("dlq", async {
        loop {
            if let Some(m) = channel.basic_get("dlq".into(), BasicGetOptions { no_ack: true }).await.unwrap()
            {
                return m;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let death = x_death_first(dead.delivery.properties.headers().as_ref().unwrap());
    assert_eq!(long_string(death, "reason"), "rejected");
}

/// x-max-length with reject-publish nacks the overflowing publish.
#[tokio::test]
async fn max_length_reject_publish_nacks() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let queue_args = args(&[
        ("x-max-length", AMQPValue::LongInt(1)),
        ("x-overflow", AMQPValue::LongString("reject-publish".into())),
    ]);
    channel.queue_declare("bounded".into(), Default::default(), queue_args).await.unwrap();
    let first = channel
        .basic_publish("".into(), "bounded".into(), Default::default(), b"1", BasicProperties::default())
        .await
        .unwrap();
    assert!(within("ack", first).await.unwrap().is_ack());
    let second = channel
        .basic_publish("".into(), "bounded".into(), Default::default(), b"2", BasicProperties::default())
        .await
        .unwrap();
    assert!(within("nack", second).await.unwrap().is_nack());
}

/// A queue with x-expires disappears once unused for that long.
#[tokio::test]
async fn unused_queue_expires() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare(
            "ephemeral".into(),
            Default::default(),
            args(&[("x-expires", AMQPValue::LongInt(200))]),
        )
        .await
        .unwrap();
    let gone = within("queue expiry", async {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            // A passive declare would count as a use (RabbitMQ's stat renews x-expires); purge does not.
            let probe = conn.create_channel().await.unwrap();
            let result = probe.queue_purge("ephemeral".into(), QueuePurgeOptions::default()).await;
            if result.is_err() {
                return;
            }
        }
    });
    gone.await;
}

/// An invalid x-message-ttl is refused with 406 naming the argument.
#[tokio::test]
async fn invalid_ttl_argument_is_refused() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let err = channel
        .queue_declare("bad".into(), Default::default(), args(&[("x-message-ttl", AMQPValue::LongInt(-1))]))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("PRECONDITION_FAILED") && text.contains("x-message-ttl"), "{text}");
}
