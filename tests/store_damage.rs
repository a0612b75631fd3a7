//! End to end (issue #12, finding 8): damage in the message log over the real binary. A flipped
//! byte in the middle of the last segment loses the one message it hit, loudly (an ERROR naming
//! the file, offset and bytes, and a counter in /api/nodes), not everything after it; damage
//! recovery cannot bound refuses the start and names `--recover-skip-corrupt`, which then starts.
//! Issue 37, finding 10: bytes cut from the end of the log after their confirms are lost records,
//! reported as such, never a quiet torn tail.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{connect, http, RunningBroker};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

const MESSAGES: usize = 1_000;
const STEP: Duration = Duration::from_secs(20);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn body(i: usize) -> Vec<u8> {
    format!("message {i:04} ").repeat(8).into_bytes()
}

/// 1,000 confirmed persistent messages in durable queue `dq`; the broker stopped; its data dir.
async fn confirmed_messages_then_stop() -> PathBuf {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("dq".into(), durable, FieldTable::default()).await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut confirms = Vec::new();
    for i in 0..MESSAGES {
        let properties = BasicProperties::default().with_delivery_mode(2);
        let payload = body(i);
        let confirm = channel.basic_publish("".into(), "dq".into(), Default::default(), &payload, properties);
        confirms.push(confirm.await.unwrap());
    }
    for confirm in confirms {
        assert!(within("confirm", confirm).await.unwrap().is_ack());
    }
    let data_dir = broker.data_dir();
    assert!(broker.terminate().success());
    drop(conn);
    data_dir
}

fn only_segment(data_dir: &Path) -> PathBuf {
    let segments: Vec<PathBuf> = std::fs::read_dir(data_dir.join("messages"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    segments[0].clone()
}

fn xor_byte(path: &Path, offset: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset] ^= mask;
    std::fs::write(path, bytes).unwrap();
}

/// The bodies left in `dq`, taken with basic.get.
async fn drain(broker: &RunningBroker) -> Vec<Vec<u8>> {
    let conn = connect(broker).await;
    let channel = conn.create_channel().await.unwrap();
    let mut bodies = Vec::new();
    for _ in 0..=MESSAGES {
        let get = channel.basic_get("dq".into(), BasicGetOptions { no_ack: true });
        match within("get", get).await.unwrap() {
            Some(m) => bodies.push(m.delivery.data.clone()),
            None => break,
        }
    }
    bodies
}

/// The case: a byte flipped in message 500's record, in the middle of the only (last)
/// segment. Before: 501 of 1,000 cut at INFO. Now: 999 delivered in order, an ERROR line with the
/// file, offset and bytes skipped, and `store_damaged_regions: 1` in /api/nodes.
#[tokio::test]
async fn flipped_byte_mid_segment_loses_one_message_loudly() {
    let data_dir = confirmed_messages_then_stop().await;
    let segment = only_segment(&data_dir);
    let bytes = std::fs::read(&segment).unwrap();
    let needle = body(500);
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).expect("message 500 on disk");
    xor_byte(&segment, at + 20, 0x01);

    let broker = RunningBroker::start_in(data_dir);
    let errors = broker.log_lines_with("message log is damaged");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("ERROR"), "{}", errors[0]);
    assert!(errors[0].contains("00000000000000000001.seg") && errors[0].contains("offset="), "{}", errors[0]);
    assert!(errors[0].contains("bytes_skipped="), "{}", errors[0]);
    let bodies = drain(&broker).await;
    let expected: Vec<Vec<u8>> = (0..MESSAGES).filter(|i| *i != 500).map(body).collect();
    assert_eq!(bodies.len(), 999);
    assert!(bodies == expected, "the 999 undamaged messages, in publish order");
    let (status, nodes) = http(&broker, "GET", "/api/nodes", "").await;
    assert_eq!(status, 200);
    assert!(nodes.contains("\"store_damaged_regions\":1"), "{nodes}");
}

/// A damaged segment header cannot be bounded: the start is refused with a message naming the
/// file's directory and `--recover-skip-corrupt`; with that flag the broker starts, reports the
/// damage and still reads every record behind the header (each has its own checksum).
#[tokio::test]
async fn damaged_segment_header_refuses_start_until_recover_skip_corrupt() {
    let data_dir = confirmed_messages_then_stop().await;
    xor_byte(&only_segment(&data_dir), 3, 0x01);

    let (status, text) = common::run_until_exit(&data_dir, &[], STEP);
    assert!(!status.success());
    assert!(text.contains("--recover-skip-corrupt") && text.contains("corrupt at byte 0"), "{text}");

    let broker = RunningBroker::start_in_with(data_dir, &["--recover-skip-corrupt"]);
    assert_eq!(broker.log_lines_with("message log is damaged").len(), 1);
    let bodies = drain(&broker).await;
    assert_eq!(bodies.len(), MESSAGES);
}

/// Issue 37, finding 10: 1,000 bytes cut from the end of the only (last) segment after every
/// message was confirmed. Before: an INFO line with a small `torn_tail_bytes` and the confirmed
/// messages behind the cut gone without a word. Now: one ERROR line naming the file, where the
/// records end and how many synced records are gone, `store_lost_records` in /api/nodes, and the
/// messages before the cut delivered in order.
#[tokio::test]
async fn bytes_cut_from_the_end_after_confirms_are_lost_records_reported_at_error() {
    let data_dir = confirmed_messages_then_stop().await;
    let segment = only_segment(&data_dir);
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(len - 1_000).unwrap();

    let broker = RunningBroker::start_in(data_dir);
    let errors = broker.log_lines_with("message log lost records");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("ERROR"), "{}", errors[0]);
    assert!(errors[0].contains("00000000000000000001.seg"), "{}", errors[0]);
    let lost: usize = errors[0]
        .split("records_lost=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("records_lost in {}", errors[0]));
    assert!(lost > 1, "{}", errors[0]);
    let recovered = broker.log_lines_with("message log recovered");
    assert!(recovered.iter().all(|l| l.contains("torn_tail_bytes=0")), "{recovered:?}");
    let bodies = drain(&broker).await;
    let expected: Vec<Vec<u8>> = (0..MESSAGES - lost).map(body).collect();
    assert!(bodies == expected, "the {} messages before the cut, in publish order", MESSAGES - lost);
    let (status, nodes) = http(&broker, "GET", "/api/nodes", "").await;
    assert_eq!(status, 200);
    assert!(nodes.contains(&format!("\"store_lost_records\":{lost}")), "{nodes}");
}
