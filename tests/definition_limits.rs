//! A 2xx means durable (issue #22, finding 3; docs/limits.md "Definitions"): argument tables,
//! policy definitions and user tags have limits on entries and encoded bytes, so nothing the API
//! or AMQP accepts is too large for the catalog. Before, `PUT /api/queues/%2F/bigq` with
//! 1,000,000 argument keys answered 201, the catalog refused its 18 MB record (an ERROR line
//! only), and the queue was gone after a restart with its messages in `hourglass.orphaned.1`.
//! Over the real binary: lapin and the HTTP API; every wait bounded.

mod common;

use std::time::Duration;

use common::{connect, http, RunningBroker};
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use serde_json::{json, Value};

const STEP: Duration = Duration::from_secs(60);
/// The limits under test (`hourglass_broker::table_limits`).
const TABLE_ENTRIES_MAX: usize = 1024;

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// `{"k0":0,"k1":1,…}` with `keys` entries, as JSON text.
fn json_keys(keys: usize) -> String {
    let mut text = String::with_capacity(keys * 14);
    text.push('{');
    for i in 0..keys {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("\"k{i}\":{i}"));
    }
    text.push('}');
    text
}

fn amqp_keys(keys: usize) -> FieldTable {
    let mut table = FieldTable::default();
    for i in 0..keys {
        table.insert(ShortString::from(format!("k{i}")), AMQPValue::LongLongInt(i as i64));
    }
    table
}

async fn get_json(broker: &RunningBroker, path: &str) -> (u16, Value) {
    let (status, body) = http(broker, "GET", path, "").await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The finding: the 1,000,000-key PUT (a 12 MiB body, under the 20 MB limit) is 400 naming the
/// limit and creates nothing; a normal durable queue next to it is 201 and, with its messages,
/// is there after a restart; nothing is orphaned.
#[tokio::test]
async fn a_million_argument_keys_put_is_400_and_a_restart_loses_nothing() {
    let broker = RunningBroker::start();
    let body = format!("{{\"durable\":true,\"arguments\":{}}}", json_keys(1_000_000));
    assert!(body.len() > 12 << 20 && body.len() < 20_000_000, "{} bytes", body.len());
    let (status, answer) = within("big PUT", http(&broker, "PUT", "/api/queues/%2F/bigq", &body)).await;
    assert_eq!(status, 400, "{}", &answer[..answer.len().min(300)]);
    // 16.9 MB encoded: the byte limit (64 KiB) is met first.
    assert!(
        answer.contains("queue arguments is 16888894 bytes encoded, more than the limit of 65536"),
        "{answer}"
    );
    assert_eq!(get_json(&broker, "/api/queues/%2F/bigq").await.0, 404, "the refused queue exists");

    let normal = json!({"durable": true, "arguments": {"x-max-length": 1000}}).to_string();
    assert_eq!(http(&broker, "PUT", "/api/queues/%2F/normal", &normal).await.0, 201);
    let publish = json!({"routing_key": "normal", "payload": "m", "payload_encoding": "string",
        "properties": {"delivery_mode": 2}})
    .to_string();
    for _ in 0..10 {
        let (status, answer) =
            http(&broker, "POST", "/api/exchanges/%2F/amq.default/publish", &publish).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert!(broker.log_lines_with("catalog refused").is_empty(), "the catalog refused a definition");
    let data_dir = broker.data_dir();
    assert_eq!(broker.terminate().code(), Some(0));

    let broker = RunningBroker::start_in(data_dir);
    let (status, queue) = get_json(&broker, "/api/queues/%2F/normal").await;
    assert_eq!(status, 200, "the normal queue is back");
    assert_eq!(queue["arguments"], json!({"x-max-length": 1000}));
    assert_eq!(queue["messages"], 10, "its messages are back");
    assert_eq!(get_json(&broker, "/api/queues/%2F/bigq").await.0, 404);
    let (_, queues) = get_json(&broker, "/api/queues").await;
    let names: Vec<&str> =
        queues.as_array().into_iter().flatten().filter_map(|q| q["name"].as_str()).collect();
    assert!(names.iter().all(|n| !n.starts_with("hourglass.orphaned.")), "orphaned: {names:?}");
}

/// Over AMQP, a queue.declare or basic.consume with 1,025 arguments is refused with 406
/// PRECONDITION_FAILED naming the limit (a channel error: the connection carries on), and 1,024
/// pass.
#[tokio::test]
async fn amqp_argument_tables_past_the_limit_are_406() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = within("channel", conn.create_channel()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let refused =
        within("declare", channel.queue_declare("wide".into(), durable, amqp_keys(TABLE_ENTRIES_MAX + 1)))
            .await
            .unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("PRECONDITION_FAILED") && text.contains("1025 entries"), "{text}");
    assert!(text.contains("limit of 1024"), "{text}");

    let channel = within("channel", conn.create_channel()).await.unwrap();
    within("declare", channel.queue_declare("wide".into(), durable, amqp_keys(TABLE_ENTRIES_MAX)))
        .await
        .unwrap();
    let refused = within(
        "consume",
        channel.basic_consume(
            "wide".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            amqp_keys(TABLE_ENTRIES_MAX + 1),
        ),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("consumer arguments has 1025 entries"), "{refused}");
    assert!(conn.status().connected(), "a channel error closed the connection");
}

/// Policy definitions and user tags past their limits are 400 over HTTP, and nothing is stored.
#[tokio::test]
async fn policy_definitions_and_user_tags_past_the_limits_are_400() {
    let broker = RunningBroker::start();
    let definition = format!("{{\"pattern\":\".*\",\"definition\":{}}}", json_keys(TABLE_ENTRIES_MAX + 1));
    let (status, answer) = http(&broker, "PUT", "/api/policies/%2F/wide", &definition).await;
    let shown = &answer[..answer.len().min(300)];
    assert_eq!(status, 400, "{shown}");
    // Before, refused only for its unknown keys; a table this size is now refused as such.
    assert!(answer.contains("policy definition has 1025 entries"), "{shown}");
    assert_eq!(get_json(&broker, "/api/policies/%2F/wide").await.0, 404);

    let tags: Vec<String> = (0..=TABLE_ENTRIES_MAX).map(|i| format!("t{i}")).collect();
    let user = json!({"password": "pw", "tags": tags.join(",")}).to_string();
    let (status, answer) = http(&broker, "PUT", "/api/users/tagged", &user).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("1025 tags"), "{answer}");
    assert_eq!(get_json(&broker, "/api/users/tagged").await.0, 404);
    let user = json!({"password": "pw", "tags": "management,monitoring"}).to_string();
    assert_eq!(http(&broker, "PUT", "/api/users/tagged", &user).await.0, 201);
}

/// A 201 means durable: queues declared over HTTP are all there after a `kill -9` sent right
/// after the last answer (before, an answer could come before the catalog's fsync).
#[tokio::test]
async fn queues_answered_201_survive_a_kill_9_right_after() {
    let broker = RunningBroker::start();
    let body = json!({"durable": true}).to_string();
    for i in 0..50 {
        let (status, answer) = http(&broker, "PUT", &format!("/api/queues/%2F/kept-{i}"), &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    let broker = RunningBroker::start_in(broker.kill9());
    for i in 0..50 {
        assert_eq!(get_json(&broker, &format!("/api/queues/%2F/kept-{i}")).await.0, 200, "kept-{i} was lost");
    }
}
