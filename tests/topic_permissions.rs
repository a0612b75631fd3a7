//! End to end: RabbitMQ's topic permissions (issue #15) — write on the routing key of a publish
//! to a topic exchange, read on the binding key of a bind — with RabbitMQ 3.10's 403 text
//! (checked against a reference 3.10.8), applied to open connections, kept across restarts and
//! carried by definitions.

mod common;

use std::time::Duration;

use common::{connect, http, RunningBroker};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const STEP: Duration = Duration::from_secs(10);

async fn api(broker: &RunningBroker, method: &str, path: &str, body: &str) -> String {
    let (status, reply) = http(broker, method, path, body).await;
    assert!((200..300).contains(&status), "{method} {path}: {status} {reply}");
    reply
}

/// User `tp` (password `tppw`) with full permissions on `/` and, on `amq.topic`, write only on
/// keys starting with its name and read only on `r.*` keys.
async fn create_tp(broker: &RunningBroker) {
    api(broker, "PUT", "/api/users/tp", r#"{"password": "tppw", "tags": ""}"#).await;
    api(broker, "PUT", "/api/permissions/%2F/tp", r#"{"configure": ".*", "write": ".*", "read": ".*"}"#)
        .await;
    let topic = r#"{"exchange": "amq.topic", "write": "^{username}\\.", "read": "^r\\."}"#;
    api(broker, "PUT", "/api/topic-permissions/%2F/tp", topic).await;
}

async fn connect_tp(broker: &RunningBroker) -> Connection {
    let url = format!("amqp://tp:tppw@{}/%2f", broker.amqp);
    tokio::time::timeout(STEP, Connection::connect(&url, ConnectionProperties::default()))
        .await
        .expect("in time")
        .expect("tp logs in")
}

/// Publishes with confirms on `channel`; the error text when the channel is closed instead.
async fn publish(channel: &Channel, exchange: &str, routing_key: &str) -> Result<(), String> {
    channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| e.to_string())?;
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(STEP, confirm).await.expect("in time").map(|_| ()).map_err(|e| e.to_string())
}

/// What `tp` may publish and bind, as RabbitMQ decides it: refusals close the channel with 403
/// and RabbitMQ's text; other exchange types and other users are not concerned.
async fn assert_tp_is_limited(broker: &RunningBroker) {
    let conn = connect_tp(broker).await;
    publish(&conn.create_channel().await.unwrap(), "amq.topic", "tp.orders").await.expect("its own keys");
    let refused = publish(&conn.create_channel().await.unwrap(), "amq.topic", "other.orders").await;
    let text = "ACCESS_REFUSED - access to topic 'other.orders' in exchange 'amq.topic' in vhost '/' refused for user 'tp'";
    assert!(refused.as_ref().expect_err("another key").contains(text), "{refused:?}");
    publish(&conn.create_channel().await.unwrap(), "amq.direct", "other.orders")
        .await
        .expect("not a topic exchange");

    let channel = conn.create_channel().await.unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions { exclusive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let name = queue.name().clone();
    channel
        .queue_bind(
            name.clone(),
            "amq.topic".into(),
            "r.ok".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("read on r.*");
    let refused = channel
        .queue_bind(
            name,
            "amq.topic".into(),
            "x.no".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    let text =
        "ACCESS_REFUSED - access to topic 'x.no' in exchange 'amq.topic' in vhost '/' refused for user 'tp'";
    assert!(refused.expect_err("bind key not readable").to_string().contains(text));

    let guest = connect(broker).await;
    publish(&guest.create_channel().await.unwrap(), "amq.topic", "other.orders")
        .await
        .expect("guest has none");
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn topic_permissions_limit_routing_keys_and_survive_restarts() {
    let broker = RunningBroker::start();
    create_tp(&broker).await;
    let listed: serde_json::Value =
        serde_json::from_str(&api(&broker, "GET", "/api/topic-permissions", "").await).unwrap();
    let expected = serde_json::json!([{"user": "tp", "vhost": "/", "exchange": "amq.topic", "write": "^{username}\\.", "read": "^r\\."}]);
    assert_eq!(listed, expected);
    assert_tp_is_limited(&broker).await;

    let broker = RunningBroker::start_in(broker.kill9());
    assert_tp_is_limited(&broker).await;
    let exported: serde_json::Value =
        serde_json::from_str(&api(&broker, "GET", "/api/definitions", "").await).unwrap();
    assert_eq!(exported["topic_permissions"], expected);

    let fresh = RunningBroker::start();
    api(&fresh, "POST", "/api/definitions", &exported.to_string()).await;
    assert_tp_is_limited(&fresh).await;
}

/// Setting or clearing a topic permission applies to the user's open connection at its next
/// publish; a pattern that does not compile is 400.
#[tokio::test]
async fn topic_permission_changes_apply_to_open_connections() {
    let broker = RunningBroker::start();
    create_tp(&broker).await;
    let conn = connect_tp(&broker).await;
    assert!(publish(&conn.create_channel().await.unwrap(), "amq.topic", "free.key").await.is_err());
    api(&broker, "DELETE", "/api/topic-permissions/%2F/tp", "").await;
    publish(&conn.create_channel().await.unwrap(), "amq.topic", "free.key").await.expect("cleared");
    let (status, reply) = http(
        &broker,
        "PUT",
        "/api/topic-permissions/%2F/tp",
        r#"{"exchange": "amq.topic", "write": "(", "read": ""}"#,
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    api(
        &broker,
        "PUT",
        "/api/topic-permissions/%2F/tp",
        r#"{"exchange": "amq.topic", "write": "^never$", "read": ""}"#,
    )
    .await;
    assert!(
        publish(&conn.create_channel().await.unwrap(), "amq.topic", "free.key").await.is_err(),
        "set again"
    );
}
