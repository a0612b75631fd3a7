//! End to end (issue 6 "done"): the real binary is killed with `kill -9` mid-stream and restarted
//! on the same data directory; every confirmed message is there exactly once, a delayed message is
//! still delayed, a dead-lettered one is in its DLQ.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{connect, RunningBroker};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

const STEP: Duration = Duration::from_secs(20);

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

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions { durable: true, ..Default::default() }
}

/// Takes every message of `queue` with basic.get (no-ack); returns the bodies in order.
/// Publishes `messages` (body, properties) to `queue` through the default exchange with
/// publisher confirms, all before awaiting any, and checks each was acked.
async fn publish_confirmed(
    channel: &lapin::Channel,
    queue: &str,
    messages: impl IntoIterator<Item = (Vec<u8>, BasicProperties)>,
) {
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut confirms = Vec::new();
    for (body, properties) in messages {
        let confirm = channel.basic_publish("".into(), queue.into(), Default::default(), &body, properties);
        confirms.push(confirm.await.unwrap());
    }
    for confirm in confirms {
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
}

async fn drain(channel: &lapin::Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    while let Some(m) =
        within("get", channel.basic_get(queue.into(), BasicGetOptions { no_ack: true })).await.unwrap()
    {
        bodies.push(m.delivery.data.clone());
    }
    bodies
}

/// Publishes persistent messages with confirms in windows of 32 while the broker is killed with
/// SIGKILL; after a restart on the same data dir every confirmed message is there exactly once
/// (unconfirmed ones may or may not be), in publish order.
#[tokio::test]
async fn confirmed_messages_survive_kill_9_exactly_once() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("dq".into(), durable(), FieldTable::default()).await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let confirmed: Arc<Mutex<Vec<u32>>> = Arc::default();
    let publisher = {
        let confirmed = confirmed.clone();
        tokio::spawn(async move {
            for window in 0..10_000u32 {
                let mut pending = Vec::new();
                for i in window * 32..(window + 1) * 32 {
                    let publish = channel
                        .basic_publish(
                            "".into(),
                            "dq".into(),
                            Default::default(),
                            &i.to_be_bytes(),
                            persistent(),
                        )
                        .await;
                    let Ok(confirm) = publish else { return };
                    pending.push((i, confirm));
                }
                for (i, confirm) in pending {
                    match confirm.await {
                        Ok(c) if c.is_ack() => confirmed.lock().unwrap().push(i),
                        _ => return,
                    }
                }
            }
        })
    };
    within("enough confirms", async {
        while confirmed.lock().unwrap().len() < 500 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let data_dir = broker.kill9();
    publisher.abort();
    let confirmed: BTreeSet<u32> = confirmed.lock().unwrap().iter().copied().collect();
    drop(conn);

    let broker = RunningBroker::start_in(data_dir);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let recovered: Vec<u32> = drain(&channel, "dq")
        .await
        .into_iter()
        .map(|b| u32::from_be_bytes(b.as_slice().try_into().expect("4-byte body")))
        .collect();
    let unique: BTreeSet<u32> = recovered.iter().copied().collect();
    assert_eq!(unique.len(), recovered.len(), "a message came back twice");
    assert!(recovered.windows(2).all(|w| w[0] < w[1]), "publish order kept");
    let missing: Vec<&u32> = confirmed.difference(&unique).collect();
    assert!(
        missing.is_empty(),
        "{} confirmed messages lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// Across a kill -9: a delayed message is still delayed (then arrives), a dead-lettered message
/// is in its DLQ, an acked one does not come back, and the durable topology is back.
#[tokio::test]
async fn delayed_and_dead_lettered_messages_survive_kill_9() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let delay = table(&[("x-delivery-delay", AMQPValue::LongLongInt(3_000))]);
    channel.queue_declare("later".into(), durable(), delay).await.unwrap();
    channel.queue_declare("dlq".into(), durable(), FieldTable::default()).await.unwrap();
    let dlx = table(&[
        ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
        ("x-dead-letter-routing-key", AMQPValue::LongString("dlq".into())),
    ]);
    channel.queue_declare("work".into(), durable(), dlx).await.unwrap();
    for (queue, body) in [("later", &b"delayed"[..]), ("work", b"rejected"), ("work", b"acked")] {
        let confirm = channel
            .basic_publish("".into(), queue.into(), Default::default(), body, persistent())
            .await
            .unwrap();
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    let rejected = within("get", channel.basic_get("work".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("message");
    assert_eq!(rejected.delivery.data, b"rejected");
    rejected.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    let acked = within("get", channel.basic_get("work".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("message");
    acked.delivery.ack(BasicAckOptions::default()).await.unwrap();
    // A round trip after the settles: a durable declare-ok waits for the store, and the store
    // writes in order, so the settles are durable once it answers.
    channel.queue_declare("sync-point".into(), durable(), FieldTable::default()).await.unwrap();
    let data_dir = broker.kill9();
    drop(conn);

    let broker = RunningBroker::start_in(data_dir);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let later = channel.queue_declare("later".into(), passive, FieldTable::default()).await.unwrap();
    assert_eq!(later.message_count(), 0, "still delayed: not ready");
    assert_eq!(drain(&channel, "dlq").await, vec![b"rejected".to_vec()]);
    assert!(drain(&channel, "work").await.is_empty(), "acked message came back");
    let arrived = within("delayed message due", async {
        loop {
            if let Some(m) =
                channel.basic_get("later".into(), BasicGetOptions { no_ack: true }).await.unwrap()
            {
                return m.delivery.data.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(arrived, b"delayed");
}

/// The ids of the queue's delayed messages, in due order, with their bodies (base64).
async fn delayed_ids(broker: &RunningBroker, queue: &str) -> Vec<(u64, String)> {
    let (status, body) = common::http(broker, "GET", &format!("/api/queues/%2F/{queue}/delayed"), "").await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let items = listed.as_array().cloned().unwrap_or_default();
    items.iter().map(|d| (d["id"].as_u64().unwrap(), d["payload"].as_str().unwrap().to_owned())).collect()
}

/// Issue 23: a delayed message's id names the same message after a restart. Before, ids were
/// the messages' positions, renumbered at each start: with the first of three cancelled, the
/// id listed for the second named the third after a restart, and cancelling it dropped the
/// wrong message.
#[tokio::test]
async fn a_delayed_message_keeps_its_id_across_a_restart() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let delay = table(&[("x-delivery-delay", AMQPValue::LongLongInt(600_000))]);
    channel.queue_declare("parked".into(), durable(), delay).await.unwrap();
    for body in [&b"first"[..], b"second", b"third"] {
        let confirm = channel
            .basic_publish("".into(), "parked".into(), Default::default(), body, persistent())
            .await
            .unwrap();
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    let before = delayed_ids(&broker, "parked").await;
    assert_eq!(before.len(), 3, "{before:?}");
    let (status, _) =
        common::http(&broker, "DELETE", &format!("/api/queues/%2F/parked/delayed/{}", before[0].0), "").await;
    assert_eq!(status, 204);
    // A durable declare-ok waits for the store, which writes in order: the cancel is durable.
    channel.queue_declare("sync-point".into(), durable(), FieldTable::default()).await.unwrap();
    let data_dir = broker.kill9();
    drop(conn);

    let broker = RunningBroker::start_in(data_dir);
    let after = delayed_ids(&broker, "parked").await;
    assert_eq!(after, before[1..].to_vec(), "the same ids for the same messages");
    let (status, _) =
        common::http(&broker, "DELETE", &format!("/api/queues/%2F/parked/delayed/{}", before[1].0), "").await;
    assert_eq!(status, 204);
    let left = delayed_ids(&broker, "parked").await;
    assert_eq!(left, before[2..].to_vec(), "cancelling the second's id dropped the second");
    // An id from before the restart that is gone names nothing, not a newer message.
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let confirm = channel
        .basic_publish("".into(), "parked".into(), Default::default(), b"fourth", persistent())
        .await
        .unwrap();
    assert!(within("confirm", confirm).await.unwrap().is_ack());
    let (status, _) =
        common::http(&broker, "DELETE", &format!("/api/queues/%2F/parked/delayed/{}", before[0].0), "").await;
    assert_eq!(status, 404);
    assert_eq!(delayed_ids(&broker, "parked").await.len(), 2);
}

/// Issue 23: delayed messages are cancelled and rescheduled by their AMQP `message_id`, also
/// after a restart, when they are read back from the store (the delayed-message plugin's users
/// ask for this: a message id is what their application knows).
#[tokio::test]
async fn delayed_messages_are_cancelled_and_rescheduled_by_message_id_across_a_restart() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let delay = table(&[("x-delivery-delay", AMQPValue::LongLongInt(600_000))]);
    channel.queue_declare("orders".into(), durable(), delay).await.unwrap();
    for (body, id) in [(&b"a"[..], "order-1"), (b"b", "order-2"), (b"c", "order-1"), (b"d", "order-3")] {
        let properties = persistent().with_message_id(id.into());
        let confirm = channel
            .basic_publish("".into(), "orders".into(), Default::default(), body, properties)
            .await
            .unwrap();
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    drop(conn);
    let data_dir = broker.kill9();

    let broker = RunningBroker::start_in(data_dir);
    let path = "/api/queues/%2F/orders/delayed";
    let (status, body) = common::http(&broker, "DELETE", &format!("{path}?message_id=order-1"), "").await;
    assert_eq!((status, body.as_str()), (200, r#"{"cancelled":2}"#));
    let (status, _) = common::http(&broker, "DELETE", &format!("{path}?message_id=order-1"), "").await;
    assert_eq!(status, 404, "none left with that id");
    let (status, body) =
        common::http(&broker, "POST", &format!("{path}?message_id=order-3"), r#"{"delay_ms": 0}"#).await;
    assert_eq!((status, body.as_str()), (200, r#"{"rescheduled":1}"#));
    let payloads: Vec<String> = delayed_ids(&broker, "orders").await.into_iter().map(|(_, p)| p).collect();
    use base64::Engine;
    assert_eq!(payloads, [base64::engine::general_purpose::STANDARD.encode("b")], "only order-2 still waits");
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let got = channel.basic_get("orders".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert_eq!(got.map(|m| m.delivery.data), Some(b"d".to_vec()), "order-3 was made due at once");
}

/// Paging end to end (ADR 0007): with at most 50 messages resident per queue, 1,000 persistent
/// messages are kept mostly as store locations; some are taken while the broker runs (read back
/// from the segment files), the rest after a restart (recovered as locations only), all in
/// publish order with their exact bodies and properties.
#[tokio::test]
async fn paged_messages_are_consumed_in_order_across_a_restart() {
    const MESSAGES: usize = 1_000;
    let limit = ["--queue-resident-messages", "50"];
    let body = |i: usize| format!("message {i:04} ").repeat(40).into_bytes();
    let broker = RunningBroker::start_with(&limit);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("big".into(), durable(), FieldTable::default()).await.unwrap();
    let messages = (0..MESSAGES).map(|i| {
        let properties = persistent().with_message_id(ShortString::from(format!("m{i}")));
        (body(i), properties)
    });
    publish_confirmed(&channel, "big", messages).await;
    // Past the head: these were paged out once stored and are read back now.
    for i in 0..100 {
        let got = within("get", channel.basic_get("big".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
            .expect("message");
        assert_eq!(got.delivery.data, body(i), "message {i}");
    }
    channel.queue_declare("sync-point".into(), durable(), FieldTable::default()).await.unwrap();
    let data_dir = broker.data_dir();
    assert!(broker.terminate().success());
    drop(conn);

    let broker = RunningBroker::start_in_with(data_dir, &limit);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.basic_qos(100, BasicQosOptions::default()).await.unwrap();
    let mut consumer = channel
        .basic_consume("big".into(), "c".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    use futures_lite::StreamExt;
    for i in 100..MESSAGES {
        let delivery = within("delivery", consumer.next()).await.expect("open").expect("delivery");
        assert_eq!(delivery.data, body(i), "message {i}");
        let id = delivery.properties.message_id().as_ref().map(|s| s.to_string());
        assert_eq!(id, Some(format!("m{i}")));
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let big = channel.queue_declare("big".into(), passive, FieldTable::default()).await.unwrap();
    assert_eq!(big.message_count(), 0);
}

/// The HTTP API's get of a paged queue (issue 41) reads the paged messages off the broker's
/// thread and still answers with every message asked for, in queue order: 200 of 300 with 20
/// resident, requeued, then 250 acknowledged (the first 200 now redelivered).
#[tokio::test]
async fn the_http_api_s_get_takes_paged_messages_in_order() {
    const MESSAGES: usize = 300;
    let broker = RunningBroker::start_with(&["--queue-resident-messages", "20"]);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("big".into(), durable(), FieldTable::default()).await.unwrap();
    let messages = (0..MESSAGES).map(|i| (format!("m{i:03}").into_bytes(), persistent()));
    publish_confirmed(&channel, "big", messages).await;
    let (status, shown) = common::http(&broker, "GET", "/api/queues/%2F/big", "").await;
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
    let paged = shown["messages_paged_out"].as_u64().unwrap_or_default();
    assert!(status == 200 && paged >= 250, "the backlog is paged out: {status} {shown}");
    let get = |count: usize, ackmode: &str| {
        let body = serde_json::json!({"count": count, "ackmode": ackmode, "encoding": "auto"}).to_string();
        let broker = &broker;
        async move {
            let (status, got) = common::http(broker, "POST", "/api/queues/%2F/big/get", &body).await;
            assert_eq!(status, 200, "{got}");
            let got: Vec<serde_json::Value> = serde_json::from_str(&got).unwrap();
            got.iter()
                .map(|m| (m["payload"].as_str().unwrap().to_owned(), m["redelivered"].as_bool().unwrap()))
                .collect::<Vec<_>>()
        }
    };
    let expected = |range: std::ops::Range<usize>, redelivered: &dyn Fn(usize) -> bool| {
        range.map(|i| (format!("m{i:03}"), redelivered(i))).collect::<Vec<_>>()
    };
    assert_eq!(get(200, "ack_requeue_true").await, expected(0..200, &|_| false));
    assert_eq!(get(250, "ack_requeue_false").await, expected(0..250, &|i| i < 200));
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let big = channel.queue_declare("big".into(), passive, FieldTable::default()).await.unwrap();
    assert_eq!(big.message_count(), 50);
}

/// The number of spill files (far-future delayed messages, ADR 0013) in a data directory.
fn spill_files(data_dir: &std::path::Path) -> usize {
    std::fs::read_dir(data_dir.join("delays")).map_or(0, |files| files.count())
}

async fn delayed_count(broker: &RunningBroker, queue: &str) -> u64 {
    let (status, body) = common::http(broker, "GET", &format!("/api/queues/%2F/{queue}"), "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["messages_delayed"].as_u64().unwrap()
}

/// Issue 23 (ADR 0013, phase 1): far-future delayed messages leave memory for spill files in
/// the data directory once stored; the count stays exact, a restart rebuilds the files from the
/// message log (nothing is lost with them), and deleting the queue deletes them.
#[tokio::test]
async fn far_future_delayed_messages_wait_in_spill_files_across_a_restart() {
    const MESSAGES: usize = 20_000;
    let limit = ["--queue-resident-messages", "50"];
    let broker = RunningBroker::start_with(&limit);
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let delay = table(&[("x-delivery-delay", AMQPValue::LongLongInt(3_600_000))]);
    channel.queue_declare("later".into(), durable(), delay).await.unwrap();
    let messages = (0..MESSAGES).map(|i| (format!("m{i}").into_bytes(), persistent()));
    publish_confirmed(&channel, "later", messages).await;
    let data_dir = broker.data_dir();
    assert_eq!(delayed_count(&broker, "later").await, MESSAGES as u64);
    assert!(spill_files(&data_dir) >= 1, "far-future messages were written to spill files");
    let (_, body) = common::http(&broker, "GET", "/api/queues/%2F/later", "").await;
    let on_disk =
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["messages_delayed_on_disk"].as_u64();
    // All but the 50 kept in memory (the resident limit) once stored and paged out.
    assert_eq!(on_disk, Some(MESSAGES as u64 - 50), "{body}");
    drop(conn);
    assert!(broker.terminate().success());

    let broker = RunningBroker::start_in_with(data_dir.clone(), &limit);
    assert_eq!(delayed_count(&broker, "later").await, MESSAGES as u64, "exact after the restart");
    assert!(spill_files(&data_dir) >= 1, "rebuilt from the log at the restore");
    let listed = delayed_ids(&broker, "later").await;
    assert!(!listed.is_empty());
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_delete("later".into(), QueueDeleteOptions::default()).await.unwrap();
    assert_eq!(spill_files(&data_dir), 0, "the queue's spill files went with it");
}

/// Issue 23: the node reports what a restart would need to recover its stored messages
/// (`/api/nodes`: `restart_mem_need`, the memory alarm's second limit), and it follows them: up
/// with confirmed persistent messages, down when they are consumed.
#[tokio::test]
async fn the_restart_memory_need_follows_the_stored_messages() {
    let broker = RunningBroker::start();
    let need = || async {
        let (status, body) = common::http(&broker, "GET", "/api/nodes", "").await;
        assert_eq!(status, 200, "{body}");
        let nodes: serde_json::Value = serde_json::from_str(&body).unwrap();
        let node = &nodes[0];
        assert!(node["restart_mem_limit"].as_u64().unwrap() > 0, "{node}");
        node["restart_mem_need"].as_u64().unwrap()
    };
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("kept".into(), durable(), FieldTable::default()).await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..10u8 {
        let confirm = channel
            .basic_publish("".into(), "kept".into(), Default::default(), &[i], persistent())
            .await
            .unwrap();
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    let per_message = hourglass_server::alarm::RESTART_BYTES_PER_MESSAGE;
    // The alarm monitor samples once a second: wait for a sample after the commit.
    let deadline = std::time::Instant::now() + STEP;
    while need().await != 10 * per_message {
        assert!(std::time::Instant::now() < deadline, "restart need: {}", need().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(drain(&channel, "kept").await.len(), 10);
    channel.queue_declare("sync-point".into(), durable(), FieldTable::default()).await.unwrap();
    while need().await != 0 {
        assert!(std::time::Instant::now() < deadline, "restart need: {}", need().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
