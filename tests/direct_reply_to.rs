//! End to end over loopback with lapin: an RPC round trip through direct reply-to
//! (`amq.rabbitmq.reply-to`), requester and responder on separate connections.

mod common;

use std::time::Duration;

use common::{connect, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A request carrying reply_to = amq.rabbitmq.reply-to is answered by a responder on another
/// connection, and the reply reaches the requester's no-ack consumer with its correlation id.
#[tokio::test]
async fn rpc_round_trip_over_direct_reply_to() {
    let broker = RunningBroker::start();
    let requester_conn = connect(&broker).await;
    let responder_conn = connect(&broker).await;
    let requester = requester_conn.create_channel().await.unwrap();
    let responder = responder_conn.create_channel().await.unwrap();
    responder
        .queue_declare("rpc".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut requests = responder
        .basic_consume("rpc".into(), "server".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();

    // Spring's RabbitTemplate probes the pseudo-queue with a passive declare first.
    let probe = requester
        .queue_declare(
            "amq.rabbitmq.reply-to".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(probe.message_count(), 0);
    let mut replies = requester
        .basic_consume(
            "amq.rabbitmq.reply-to".into(),
            "client".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let properties = BasicProperties::default()
        .with_reply_to("amq.rabbitmq.reply-to".into())
        .with_correlation_id("42".into());
    requester
        .basic_publish("".into(), "rpc".into(), BasicPublishOptions::default(), b"ping", properties)
        .await
        .unwrap();

    let request = within("request", requests.next()).await.expect("stream open").expect("request");
    assert_eq!(request.data, b"ping");
    let reply_to = request.properties.reply_to().clone().expect("reply_to");
    assert!(reply_to.as_str().starts_with("amq.rabbitmq.reply-to."), "{}", reply_to.as_str());
    let correlation_id = request.properties.correlation_id().clone().expect("correlation id");
    responder.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let confirm = responder
        .basic_publish(
            "".into(),
            reply_to.as_str().into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            b"pong",
            BasicProperties::default().with_correlation_id(correlation_id),
        )
        .await
        .unwrap();
    assert!(within("confirm", confirm).await.unwrap().is_ack());
    request.ack(BasicAckOptions::default()).await.unwrap();

    let reply = within("reply", replies.next()).await.expect("stream open").expect("reply");
    assert_eq!(reply.data, b"pong");
    assert_eq!(reply.routing_key.as_str(), reply_to.as_str());
    assert_eq!(reply.properties.correlation_id().as_ref().map(|c| c.as_str()), Some("42"));
}
