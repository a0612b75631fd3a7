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

/// Issue 38: delayed messages that fell due while the broker was down (kill -9) are delivered
/// once it is back, all of them, in due order, and no faster than `--overdue-release-rate`: 40
/// at 10 a second are a second's worth at the restore, then one every 100 ms, so the last comes
/// 3 s after the restore (the first is taken well within 1.5 s of it).
#[tokio::test]
async fn messages_due_while_down_come_back_in_due_order_at_the_rate() {
    const MESSAGES: u32 = 40;
    let rate = ["--overdue-release-rate", "10"];
    let broker = RunningBroker::start_with(&rate);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    let routing = table(&[("x-delayed-type", AMQPValue::LongString("direct".into()))]);
    let kind = lapin::ExchangeKind::Custom("x-delayed-message".into());
    channel.exchange_declare("d".into(), kind, durable, routing).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("later".into(), durable, FieldTable::default()).await.unwrap();
    channel
        .queue_bind("later".into(), "d".into(), "k".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    // Published latest-due first: message `rank` is due (rank × 5 + 200) ms after its publish.
    // All are published before any confirm is awaited: waiting for each confirm (a disk sync)
    // spaced the publishes by as much as the 5 ms between due times on a loaded machine, so
    // that the due order was no longer the rank order.
    let mut confirms = Vec::new();
    for rank in (0..MESSAGES).rev() {
        let delay = AMQPValue::LongInt(200 + 5 * rank as i32);
        let props =
            BasicProperties::default().with_delivery_mode(2).with_headers(table(&[("x-delay", delay)]));
        let body = rank.to_be_bytes();
        confirms.push(
            channel.basic_publish("d".into(), "k".into(), Default::default(), &body, props).await.unwrap(),
        );
    }
    for confirm in confirms {
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    // Everything falls due while the broker is down.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let data_dir = broker.kill9();
    drop(conn);

    let broker = RunningBroker::start_in_with(data_dir, &rate);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut consumer =
        channel.basic_consume("later".into(), "".into(), no_ack, FieldTable::default()).await.unwrap();
    let mut ranks = Vec::new();
    let mut first = None;
    while ranks.len() < MESSAGES as usize {
        let delivery = within("an overdue message", consumer.next()).await.unwrap().unwrap();
        first.get_or_insert_with(Instant::now);
        ranks.push(u32::from_be_bytes(delivery.data.as_slice().try_into().expect("4-byte body")));
    }
    let spread = first.expect("a delivery").elapsed();
    assert_eq!(ranks, (0..MESSAGES).collect::<Vec<_>>(), "all of them, in due order");
    assert!(
        spread >= Duration::from_millis(1_500),
        "faster than 10 a second: the last came {spread:?} after the first"
    );
}
