//! End to end (issue 37, finding 3): the far tier's spill files (`<data-dir>/delays`, ADR 0013)
//! damaged while the real binary runs — bytes flipped, a run cut short, a run deleted, the
//! directory replaced by a plain file — hide no confirmed delayed message. Each one arrives once,
//! at its due time and never before, without a restart, and the queue's counts and next due time
//! stay exact meanwhile. (Before: thousands stranded until a restart, counted out or shown with a
//! garbage `next_due_ms`.) The messages are due a little past the broker's 60 s near horizon, so
//! each test takes about 80 s of real time.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{connect, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

/// More than one spill run (16,384 records): a run file is written beside the write buffer.
const MESSAGES: usize = 17_000;
/// A full run file: 16,384 records of 80 bytes.
const RUN_FILE_BYTES: u64 = 16_384 * 80;
/// When the messages are due: past the 60 s horizon (they wait in spill files), with time to
/// publish and damage the files before they load, a horizon ahead of the due time.
const DUE_IN: Duration = Duration::from_secs(75);
/// How late the last of a queue's messages may arrive (a debug build delivering tens of thousands).
const LATE_AT_MOST: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_secs(30);
/// Resident messages per queue: the rest are paged out once stored, and far ones spilled.
const RESIDENT: [&str; 2] = ["--queue-resident-messages", "50"];

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

/// Declares durable queue `queue` behind the delayed exchange `later` (routing key: its name).
async fn declare(channel: &lapin::Channel, queue: &str) {
    let args = table(&[("x-delayed-type", AMQPValue::LongString("direct".into()))]);
    let kind = lapin::ExchangeKind::Custom("x-delayed-message".into());
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("later".into(), kind, durable, args).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), durable, FieldTable::default()).await.unwrap();
    channel
        .queue_bind(queue.into(), "later".into(), queue.into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
}

/// Publishes messages `numbers` to `queue`, persistent, all due at `due_ms` (`x-delay-until`),
/// and waits for every confirm.
async fn publish_due_at(channel: &lapin::Channel, queue: &str, numbers: std::ops::Range<usize>, due_ms: u64) {
    let headers = table(&[("x-delay-until", AMQPValue::LongLongInt(due_ms as i64))]);
    let properties = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
    let mut confirms = Vec::with_capacity(numbers.len());
    for i in numbers {
        let body = format!("{queue} {i}");
        let publish = channel.basic_publish(
            "later".into(),
            queue.into(),
            Default::default(),
            body.as_bytes(),
            properties.clone(),
        );
        confirms.push(publish.await.unwrap());
    }
    for confirm in confirms {
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
}

/// The spill run files of `data_dir` that are fully written, by queue id (`q<id>-<run>-<write>.run`).
fn run_files(data_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut runs: Vec<(u64, PathBuf)> = std::fs::read_dir(data_dir.join("delays"))
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_name()?.to_str()?.to_owned();
            let queue = name.strip_prefix('q')?.split('-').next()?.parse().ok()?;
            let full = std::fs::metadata(&path).ok()?.len() == RUN_FILE_BYTES;
            full.then_some((queue, path))
        })
        .collect();
    runs.sort();
    runs
}

/// Waits (bounded) until `count` run files are fully written; returns them in queue id order.
async fn wait_for_runs(data_dir: &Path, count: usize) -> Vec<PathBuf> {
    for _ in 0..200 {
        let runs = run_files(data_dir);
        if runs.len() >= count {
            return runs.into_iter().map(|(_, path)| path).collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {count} spill runs written: {:?}", run_files(data_dir));
}

async fn queue_json(broker: &RunningBroker, queue: &str) -> serde_json::Value {
    let (status, body) = common::http(broker, "GET", &format!("/api/queues/%2F/{queue}"), "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits (bounded) until `queue`'s far messages were loaded into memory (a horizon before they
/// are due, after the damage), then checks that none is hidden: the counts and the next due time
/// are exact.
async fn check_counts_after_the_load(broker: &RunningBroker, queue: &str, count: usize, due_ms: u64) {
    let load_ms = due_ms - 60_000;
    tokio::time::sleep(Duration::from_millis(load_ms.saturating_sub(now_ms()) + 500)).await;
    let mut json = queue_json(broker, queue).await;
    for _ in 0..100 {
        if json["messages_delayed_on_disk"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        json = queue_json(broker, queue).await;
    }
    assert_eq!(json["messages_delayed_on_disk"], 0, "{queue}: loaded a horizon ahead: {json}");
    assert_eq!(json["messages_delayed"], count, "{queue}: every message still counted: {json}");
    assert_eq!(json["next_due_ms"], due_ms, "{queue}: the true next due time: {json}");
}

/// Consumes `count` messages from each of `queues` (consumers started before `due_ms`, one task
/// each); checks each arrived once, never before `due_ms`, at most [`LATE_AT_MOST`] after it.
async fn all_arrive_on_time(broker: &RunningBroker, queues: &[&str], count: usize, due_ms: u64) {
    let conn = connect(broker).await;
    let mut tasks = Vec::new();
    for queue in queues {
        let channel = conn.create_channel().await.unwrap();
        let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
        let consumer =
            channel.basic_consume((*queue).into(), "".into(), no_ack, FieldTable::default()).await.unwrap();
        let queue = queue.to_string();
        tasks.push(tokio::spawn(receive_on_time(consumer, queue, count, due_ms)));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Nothing more comes: exactly once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for queue in queues {
        let json = queue_json(broker, queue).await;
        let counts = (json["messages"].as_u64(), json["messages_delayed"].as_u64());
        assert_eq!(counts, (Some(0), Some(0)), "{json}");
    }
}

async fn receive_on_time(mut consumer: lapin::Consumer, queue: String, count: usize, due_ms: u64) {
    let mut seen = BTreeSet::new();
    while seen.len() < count {
        let wait = Duration::from_millis(due_ms.saturating_sub(now_ms())) + LATE_AT_MOST;
        let delivery = tokio::time::timeout(wait, consumer.next()).await;
        let Ok(Some(Ok(delivery))) = delivery else {
            panic!("{queue}: {} of {count} arrived; the rest are stranded", seen.len());
        };
        let at = now_ms();
        assert!(at >= due_ms, "{queue}: a message arrived {} ms early", due_ms - at);
        assert!(at <= due_ms + LATE_AT_MOST.as_millis() as u64, "{queue}: {} ms late", at - due_ms);
        let body = String::from_utf8(delivery.data.clone()).unwrap();
        assert!(seen.insert(body.clone()), "{queue}: {body} arrived twice");
    }
    let expected: BTreeSet<String> = (0..count).map(|i| format!("{queue} {i}")).collect();
    assert_eq!(seen, expected);
}

/// A run with 50 bytes flipped, a run cut to half its length and a run deleted, each in its own
/// queue of 17,000 confirmed messages: all 51,000 arrive on time, once.
#[tokio::test]
async fn damaged_spill_runs_hide_no_confirmed_delayed_message() {
    let queues = ["flipped", "cut", "deleted"];
    let broker = RunningBroker::start_with(&RESIDENT);
    let due_ms = now_ms() + DUE_IN.as_millis() as u64;
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for queue in queues {
        declare(&channel, queue).await;
        publish_due_at(&channel, queue, 0..MESSAGES, due_ms).await;
    }
    // Queue ids follow the declarations: the runs come in the queues' order.
    let runs = wait_for_runs(&broker.data_dir(), queues.len()).await;
    assert!(now_ms() + 60_000 < due_ms, "published and written before the load");
    let mut bytes = std::fs::read(&runs[0]).unwrap();
    for byte in &mut bytes[80 * 8_000 + 3..80 * 8_000 + 53] {
        *byte ^= 0x5a;
    }
    std::fs::write(&runs[0], bytes).unwrap();
    std::fs::OpenOptions::new().write(true).open(&runs[1]).unwrap().set_len(RUN_FILE_BYTES / 2).unwrap();
    std::fs::remove_file(&runs[2]).unwrap();

    for queue in queues {
        check_counts_after_the_load(&broker, queue, MESSAGES, due_ms).await;
    }
    all_arrive_on_time(&broker, &queues, MESSAGES, due_ms).await;
}

/// The spill directory replaced by a plain file: the run in it is gone and the next run cannot be
/// written. All 34,000 messages still arrive on time, once; and the broker starts again on that
/// data directory.
#[tokio::test]
async fn a_spill_directory_replaced_by_a_file_hides_no_confirmed_delayed_message() {
    let broker = RunningBroker::start_with(&RESIDENT);
    let due_ms = now_ms() + DUE_IN.as_millis() as u64;
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    declare(&channel, "replaced").await;
    publish_due_at(&channel, "replaced", 0..MESSAGES, due_ms).await;
    wait_for_runs(&broker.data_dir(), 1).await;
    let spill_dir = broker.data_dir().join("delays");
    std::fs::remove_dir_all(&spill_dir).unwrap();
    std::fs::write(&spill_dir, b"not a directory").unwrap();
    // The second run's write fails: its messages must stay reachable and counted.
    publish_due_at(&channel, "replaced", MESSAGES..2 * MESSAGES, due_ms).await;
    assert!(now_ms() + 60_000 < due_ms, "published before the load");
    let json = queue_json(&broker, "replaced").await;
    assert_eq!(json["messages_delayed"], 2 * MESSAGES, "{json}");

    check_counts_after_the_load(&broker, "replaced", 2 * MESSAGES, due_ms).await;
    all_arrive_on_time(&broker, &["replaced"], 2 * MESSAGES, due_ms).await;
    drop(conn);
    let data_dir = broker.data_dir();
    assert!(broker.terminate().success());
    let broker = RunningBroker::start_in_with(data_dir.clone(), &RESIDENT);
    assert!(data_dir.join("delays").is_dir(), "the spill directory is made again at start");
    let json = queue_json(&broker, "replaced").await;
    assert_eq!(json["messages_delayed"], 0, "{json}");
}
