//! Time across a failover (docs/clustering.md): a delayed message and a message under a queue TTL
//! published to the old leader neither fire early on the new one nor are forgotten.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::Cluster;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

const DELAY_MS: u32 = 7_000;

async fn channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    (conn, channel)
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert(ShortString::from(*key), value.clone());
    }
    table
}

async fn declare(channel: &Channel) {
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let delayed_type = table(&[("x-delayed-type", AMQPValue::LongString("direct".into()))]);
    let exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel
        .exchange_declare(
            "later".into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            exchange,
            delayed_type,
        )
        .await
        .unwrap();
    channel.queue_declare("due".into(), durable, FieldTable::default()).await.unwrap();
    channel
        .queue_bind(
            "due".into(),
            "later".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let ttl = table(&[
        ("x-message-ttl", AMQPValue::LongInt(DELAY_MS as i32)),
        ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
        ("x-dead-letter-routing-key", AMQPValue::LongString("expired".into())),
    ]);
    channel.queue_declare("expiring".into(), durable, ttl).await.unwrap();
    channel.queue_declare("expired".into(), durable, FieldTable::default()).await.unwrap();
}

async fn publish(channel: &Channel, exchange: &str, key: &str, headers: FieldTable) {
    let props = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
    let confirm = channel
        .basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), b"timed", props)
        .await
        .unwrap();
    assert!(confirm.await.unwrap().is_ack());
}

/// Polls `queue` through any running node until a message comes; when it came.
async fn first_arrival(cluster: &Cluster, queue: &str, within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let url = cluster.follower_url("");
        if let Ok(conn) = Connection::connect(&url, ConnectionProperties::default()).await {
            if let Ok(channel) = conn.create_channel().await {
                while Instant::now() < deadline {
                    match channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await {
                        Ok(Some(_)) => return Instant::now(),
                        Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
                        Err(_) => break,
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "nothing arrived in {queue} within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delays_and_ttls_carry_over_a_failover_without_firing_early() {
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    let leader = tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
    let (conn, ch) = channel(&cluster.follower_url(&leader)).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    declare(&ch).await;
    let published = Instant::now();
    publish(&ch, "later", "k", table(&[("x-delay", AMQPValue::LongInt(DELAY_MS as i32))])).await;
    publish(&ch, "", "expiring", FieldTable::default()).await;
    drop(conn);
    cluster.node(&leader).kill9();
    tokio::task::block_in_place(|| cluster.wait_new_leader(&leader, Duration::from_secs(30)));
    let due = published + Duration::from_millis(u64::from(DELAY_MS));
    let delivered = first_arrival(&cluster, "due", Duration::from_secs(30)).await;
    assert!(delivered >= due, "the delayed message came {:?} early", due - delivered);
    let expired = first_arrival(&cluster, "expired", Duration::from_secs(30)).await;
    assert!(expired >= due, "the message expired {:?} early", due - expired);
    eprintln!(
        "delayed message due {DELAY_MS} ms after publish came at {:?}; the TTL'd one expired at {:?}",
        delivered - published,
        expired - published
    );
}
