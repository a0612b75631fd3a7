//! End to end over loopback with lapin: the real binary, a real client.

mod common;

use std::time::Duration;

use common::{connect, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A publisher's confirmed messages reach a consumer in order, and acks settle them.
#[tokio::test]
async fn publish_with_confirms_and_consume_with_acks() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("work".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..100u32 {
        let confirm = channel
            .basic_publish(
                "".into(),
                "work".into(),
                BasicPublishOptions::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap();
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    let consumer_channel = conn.create_channel().await.unwrap();
    consumer_channel.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consumer_channel
        .basic_consume("work".into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for expected in 0..100u32 {
        let delivery = within("delivery", consumer.next()).await.expect("stream open").expect("delivery");
        assert_eq!(delivery.data, expected.to_be_bytes());
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let queue = channel
        .queue_declare(
            "work".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(queue.message_count(), 0);
    assert_eq!(queue.consumer_count(), 1);
}

/// basic.get returns messages with the remaining count, then get-empty.
#[tokio::test]
async fn basic_get_polling() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("poll".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for body in [b"a", b"b"] {
        channel
            .basic_publish(
                "".into(),
                "poll".into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .unwrap();
    }
    let first = within("get", channel.basic_get("poll".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("message");
    assert_eq!(first.delivery.data, b"a");
    assert_eq!(first.message_count, 1);
    first.delivery.ack(BasicAckOptions::default()).await.unwrap();
    let second =
        channel.basic_get("poll".into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("message");
    assert_eq!(second.delivery.data, b"b");
    assert!(channel.basic_get("poll".into(), BasicGetOptions { no_ack: true }).await.unwrap().is_none());
}

/// A mandatory publish that routes nowhere comes back to the publisher (basic.return 312).
#[tokio::test]
async fn mandatory_unroutable_message_is_returned() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let confirm = channel
        .basic_publish(
            "amq.direct".into(),
            "nobody-home".into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            b"lost?",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let confirmation = within("confirm", confirm).await.unwrap();
    let returned = confirmation.take_message().expect("returned message");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.data, b"lost?");
}

/// A channel error (404) closes only that channel; the connection keeps serving.
#[tokio::test]
async fn channel_error_leaves_the_connection_usable() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let doomed = conn.create_channel().await.unwrap();
    let err = doomed
        .queue_declare(
            "missing".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NOT_FOUND"), "{err}");
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("still-fine".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    assert!(conn.status().connected());
}

/// Topic routing through a declared exchange, seen by a consumer.
#[tokio::test]
async fn topic_exchange_routes_to_matching_consumer() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .exchange_declare(
            "events".into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions { exclusive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(
            queue.name().clone(),
            "events".into(),
            "order.*.created".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume(
            queue.name().clone(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for key in ["order.eu.deleted", "order.eu.created"] {
        channel
            .basic_publish(
                "events".into(),
                key.into(),
                BasicPublishOptions::default(),
                key.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap();
    }
    let delivery = within("delivery", consumer.next()).await.unwrap().unwrap();
    assert_eq!(delivery.routing_key.as_str(), "order.eu.created");
}

/// A client speaking another protocol version gets AMQP 0-9-1's header back and a closed socket.
#[tokio::test]
async fn wrong_protocol_header_is_answered_with_ours() {
    let broker = RunningBroker::start();
    let mut socket = tokio::net::TcpStream::connect(broker.amqp).await.unwrap();
    socket.write_all(b"AMQP\x01\x01\x00\x0a").await.unwrap();
    let mut reply = Vec::new();
    within("close", socket.read_to_end(&mut reply)).await.unwrap();
    assert_eq!(reply, b"AMQP\x00\x00\x09\x01");
}

/// SIGTERM closes client connections with 320 CONNECTION_FORCED and the process exits 0.
#[tokio::test]
async fn sigterm_closes_connections_and_exits_cleanly() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let status = tokio::task::spawn_blocking(move || broker.terminate()).await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    // The client processes the server's connection.close on its own task; poll, bounded.
    let closed = within("client sees the close", async {
        while conn.status().connected() {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    closed.await;
}

/// Above the memory high watermark (here set to ~0 so it is always exceeded) the broker tells a
/// client connection.blocked when it publishes, as RabbitMQ does; lapin then holds its publishes.
#[tokio::test]
async fn memory_alarm_blocks_publishers() {
    let broker = RunningBroker::start_with(&["--vm-memory-high-watermark", "0.0000001"]);
    let conn = connect(&broker).await;
    publish_one(&conn).await;
    within("connection.blocked", async {
        while !conn.status().blocked() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// With less free disk than `--disk-free-limit` (here more than any disk has) the broker raises
/// RabbitMQ's disk alarm: a publishing client gets connection.blocked, the alarm health check fails with 503
/// naming the disk, and /api/nodes reports it.
#[tokio::test]
async fn disk_alarm_blocks_publishers_and_fails_the_health_check() {
    let broker = RunningBroker::start_with(&["--disk-free-limit", "1000000000GB"]);
    let conn = connect(&broker).await;
    publish_one(&conn).await;
    within("connection.blocked", async {
        while !conn.status().blocked() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (status, body) = common::http(&broker, "GET", "/api/health/checks/alarms", "").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""resource":"disk""#), "{body}");
    let (status, body) = common::http(&broker, "GET", "/api/nodes", "").await;
    assert_eq!(status, 200);
    assert!(body.contains(r#""disk_free_alarm":true"#), "{body}");
    assert!(body.contains(r#""mem_alarm":false"#), "{body}");
}

/// Publishes one message on a new channel (a connection is blocked by an alarm once it publishes).
async fn publish_one(conn: &lapin::Connection) {
    let channel = conn.create_channel().await.unwrap();
    channel
        .basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions::default(),
            b"one",
            BasicProperties::default(),
        )
        .await
        .unwrap();
}

/// `--load-definitions` imports a RabbitMQ definitions file at start (RabbitMQ's
/// `load_definitions`): its exchange, queue and binding exist before any client connects.
#[tokio::test]
async fn definitions_file_is_imported_at_start() {
    let path = std::env::temp_dir().join(format!("hourglass-defs-{}.json", std::process::id()));
    let definitions = r#"{
        "vhosts": [{"name": "/"}],
        "exchanges": [{"name": "orders", "vhost": "/", "type": "topic", "durable": true,
                       "auto_delete": false, "internal": false, "arguments": {}}],
        "queues": [{"name": "order-events", "vhost": "/", "durable": true, "auto_delete": false,
                    "arguments": {"x-message-ttl": 60000}}],
        "bindings": [{"source": "orders", "vhost": "/", "destination": "order-events",
                      "destination_type": "queue", "routing_key": "order.#", "arguments": {}}]
    }"#;
    std::fs::write(&path, definitions).unwrap();
    let broker = RunningBroker::start_with(&["--load-definitions", path.to_str().unwrap()]);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .basic_publish(
            "orders".into(),
            "order.created".into(),
            Default::default(),
            b"o",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let got = within("routed through the imported binding", async {
        loop {
            if let Some(m) =
                channel.basic_get("order-events".into(), BasicGetOptions { no_ack: true }).await.unwrap()
            {
                return m;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(got.delivery.data, b"o");
    std::fs::remove_file(&path).unwrap();
}

/// Sender-selected distribution: CC and BCC headers add routing keys; the consumer of a queue
/// reached only by BCC sees the CC header but no BCC (RabbitMQ's extension).
#[tokio::test]
async fn cc_and_bcc_headers_add_routing_keys_and_bcc_is_hidden() {
    use lapin::types::{AMQPValue, FieldArray};
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    for queue in ["to", "cc", "bcc"] {
        channel
            .queue_declare(queue.into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .unwrap();
        channel
            .queue_bind(
                queue.into(),
                "amq.direct".into(),
                queue.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let keys = |key: &str| AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString(key.into())]));
    let mut headers = FieldTable::default();
    headers.insert("CC".into(), keys("cc"));
    headers.insert("BCC".into(), keys("bcc"));
    channel
        .basic_publish(
            "amq.direct".into(),
            "to".into(),
            BasicPublishOptions::default(),
            b"memo",
            BasicProperties::default().with_headers(headers),
        )
        .await
        .unwrap();
    for queue in ["to", "cc", "bcc"] {
        let got = within("get", channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{queue} got the message"));
        assert_eq!(got.delivery.routing_key.as_str(), "to");
        let headers = got.delivery.properties.headers().as_ref().expect("headers").inner();
        assert_eq!(headers.get("CC"), Some(&keys("cc")));
        assert!(!headers.contains_key("BCC"), "BCC is never delivered");
    }
}
