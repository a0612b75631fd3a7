//! End to end with lapin: a policy set over HTTP applies to a queue declared without arguments
//! (semantics §6), and survives a restart. Waits are on the events themselves, each bounded.

mod common;

use std::time::Duration;

use common::{connect, http, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};

const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A message-ttl + dead-letter-exchange policy, set with PUT /api/policies, dead-letters a
/// message of a plain queue with x-death reason `expired`; after a restart the policy is listed.
#[tokio::test]
async fn http_policy_dead_letters_by_ttl_and_survives_a_restart() {
    let broker = RunningBroker::start();
    let policy = r#"{"pattern": "^work$", "apply-to": "queues",
        "definition": {"message-ttl": 200, "dead-letter-exchange": "dlx"}}"#;
    let (status, body) = http(&broker, "PUT", "/api/policies/%2F/ttl", policy).await;
    assert_eq!(status, 201, "{body}");

    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .exchange_declare("dlx".into(), ExchangeKind::Fanout, Default::default(), FieldTable::default())
        .await
        .unwrap();
    channel.queue_declare("dlq".into(), Default::default(), FieldTable::default()).await.unwrap();
    channel
        .queue_bind("dlq".into(), "dlx".into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    channel.queue_declare("work".into(), Default::default(), FieldTable::default()).await.unwrap();
    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut dlq =
        channel.basic_consume("dlq".into(), "dead".into(), no_ack, FieldTable::default()).await.unwrap();
    channel
        .basic_publish(
            "".into(),
            "work".into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let delivery = within("dead-lettered message", dlq.next()).await.expect("a delivery").unwrap();
    let headers = delivery.properties.headers().clone().expect("headers");
    let Some(AMQPValue::LongString(reason)) = headers.inner().get("x-first-death-reason") else {
        panic!("no x-first-death-reason in {headers:?}")
    };
    assert_eq!(reason.to_string(), "expired");

    let (_, queue) = http(&broker, "GET", "/api/queues/%2F/work", "").await;
    let queue: serde_json::Value = serde_json::from_str(&queue).unwrap();
    assert_eq!(queue["policy"], "ttl");
    assert_eq!(queue["effective_policy_definition"]["message-ttl"], 200);
    conn.close(200, "bye".into()).await.unwrap();

    let restarted = RunningBroker::start_in(broker.kill9());
    let (status, body) = http(&restarted, "GET", "/api/policies/%2F/ttl", "").await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["definition"]["dead-letter-exchange"], "dlx");
}
