//! End to end over loopback (issue #12): hostile routing keys and names against the real binary.

mod common;

use std::time::Duration;

use common::{connect, RunningBroker};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Finding 2: bindings of eight `#`s and a 60-word routing key. The publish is confirmed and
/// routed at once (before, the broker task tried each of some 10⁸–10⁹ splits of the key among the
/// `#`s and every client stalled), and another connection can still log in afterwards.
#[tokio::test]
async fn many_hash_topic_binding_routes_a_long_key_at_once() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("hit".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    // The pattern, and one whose `#`s are not adjacent (so it is not simply `#.b`).
    for pattern in ["#.#.#.#.#.#.#.#.b", "#.*.#.*.#.*.#.*.#.*.#.*.#.*.#.b"] {
        let options = QueueBindOptions::default();
        channel
            .queue_bind("hit".into(), "amq.topic".into(), pattern.into(), options, FieldTable::default())
            .await
            .unwrap();
    }
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for last in ["b", "c"] {
        let key = format!("{}{last}", "w.".repeat(59));
        let publish = channel
            .basic_publish(
                "amq.topic".into(),
                key.as_str().into(),
                BasicPublishOptions::default(),
                b"x",
                BasicProperties::default(),
            )
            .await
            .unwrap();
        within("publish confirm", publish).await.unwrap();
    }
    let other = within("a second login", connect(&broker)).await;
    let probe = other.create_channel().await.unwrap();
    let declared = probe
        .queue_declare(
            "hit".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(declared.message_count(), 1, "only the key ending in `b` matches");
}

/// One AMQP frame: type, channel, payload, frame-end.
fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    out.extend_from_slice(payload);
    out.push(0xCE);
    out
}

fn method(channel: u16, class_id: u16, method_id: u16, args: &[u8]) -> Vec<u8> {
    let mut payload = class_id.to_be_bytes().to_vec();
    payload.extend_from_slice(&method_id.to_be_bytes());
    payload.extend_from_slice(args);
    frame(1, channel, &payload)
}

fn short(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::try_from(bytes.len()).unwrap()];
    out.extend_from_slice(bytes);
    out
}

/// Reads frames until a method with these ids; returns its arguments.
async fn read_method(socket: &mut TcpStream, class_id: u16, method_id: u16) -> Vec<u8> {
    for _ in 0..16 {
        let mut header = [0u8; 7];
        within("frame header", socket.read_exact(&mut header)).await.unwrap();
        let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
        let mut payload = vec![0u8; size + 1];
        within("frame payload", socket.read_exact(&mut payload)).await.unwrap();
        if header[0] == 1 && payload[..4] == [class_id.to_be_bytes(), method_id.to_be_bytes()].concat()[..] {
            return payload[4..size].to_vec();
        }
    }
    panic!("no method {class_id}.{method_id} within 16 frames");
}

/// Header, PLAIN guest/guest, tune-ok, open "/", channel 1 open.
async fn open_raw(broker: &RunningBroker) -> TcpStream {
    let mut socket = TcpStream::connect(broker.amqp).await.unwrap();
    socket.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    read_method(&mut socket, 10, 10).await;
    let mut start_ok = 0u32.to_be_bytes().to_vec();
    start_ok.extend(short(b"PLAIN"));
    start_ok.extend_from_slice(&12u32.to_be_bytes());
    start_ok.extend_from_slice(b"\0guest\0guest");
    start_ok.extend(short(b"en_US"));
    socket.write_all(&method(0, 10, 11, &start_ok)).await.unwrap();
    read_method(&mut socket, 10, 30).await;
    let tune_ok = [2047u16.to_be_bytes().as_slice(), &131_072u32.to_be_bytes(), &0u16.to_be_bytes()].concat();
    socket.write_all(&method(0, 10, 31, &tune_ok)).await.unwrap();
    socket.write_all(&method(0, 10, 40, &[short(b"/"), short(b""), vec![0]].concat())).await.unwrap();
    read_method(&mut socket, 10, 41).await;
    socket.write_all(&method(1, 20, 10, &short(b""))).await.unwrap();
    read_method(&mut socket, 20, 11).await;
    socket
}

/// Finding 9: queue.declare with a name that is not UTF-8 gets RabbitMQ 3.10.8's connection.close
/// 501 "FRAME_ERROR - Malformed UTF-8 in shortstr" (class/method 0/0); the broker stays up.
#[tokio::test]
async fn non_utf8_queue_name_is_closed_with_501_as_rabbitmq() {
    let broker = RunningBroker::start();
    let mut socket = open_raw(&broker).await;
    let declare = [&[0u8, 0][..], &short(b"q\xff"), &[0], &0u32.to_be_bytes()].concat();
    socket.write_all(&method(1, 50, 10, &declare)).await.unwrap();
    let close = read_method(&mut socket, 10, 50).await;
    let text = b"FRAME_ERROR - Malformed UTF-8 in shortstr";
    let expected = [&501u16.to_be_bytes()[..], &short(text), &[0, 0, 0, 0]].concat();
    assert_eq!(close, expected);
    socket.write_all(&method(0, 10, 51, &[])).await.unwrap();
    let mut rest = Vec::new();
    within("socket closed after close-ok", socket.read_to_end(&mut rest)).await.unwrap();
    let conn = within("a new login", connect(&broker)).await;
    let channel = conn.create_channel().await.unwrap();
    let missing = channel
        .queue_declare(
            "q\u{fffd}".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await;
    assert!(missing.is_err(), "nothing was declared");
}
