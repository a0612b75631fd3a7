//! End to end: each limit a client can run into (issue #15), hit over the real binary, with
//! RabbitMQ 3.10's reply code and text (checked against a reference 3.10.8 where it has one),
//! while another client carries on. The table of limits is docs/limits.md.

mod common;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use common::{connect, http, RunningBroker};
use hourglass_wire::{
    encode_content, encode_method_frame, BasicPublish, ChannelClose, ChannelOpen, ConnectionClose,
    ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, EncodedProperties, FieldTable as WireTable, Frame,
    FrameDecoder, LongStr, Method, QueueDeclare, ShortStr, PROTOCOL_HEADER,
};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long any one step may take.
const STEP: Duration = Duration::from_secs(10);

/// A client speaking raw frames, so a test sees the exact reply code, text, class and method.
struct Raw {
    socket: tokio::net::TcpStream,
    input: BytesMut,
    decoder: FrameDecoder,
}

impl Raw {
    /// Connects as `user` and gets to connection.tune; returns it with the tune's fields.
    async fn to_tune(broker: &RunningBroker, user: &str, password: &str) -> (Raw, (u16, u32)) {
        let socket = tokio::net::TcpStream::connect(broker.amqp).await.unwrap();
        let mut raw = Raw { socket, input: BytesMut::new(), decoder: FrameDecoder::new(1 << 20) };
        raw.socket.write_all(PROTOCOL_HEADER).await.unwrap();
        assert!(matches!(raw.method().await, Some((0, Method::ConnectionStart(_)))));
        let start_ok = ConnectionStartOk {
            client_properties: WireTable::new(),
            mechanism: ShortStr::from_static("PLAIN"),
            response: LongStr::from(format!("\0{user}\0{password}").as_str()),
            locale: ShortStr::from_static("en_US"),
        };
        raw.send(&[(0, start_ok.into())]).await;
        let Some((0, Method::ConnectionTune(tune))) = raw.method().await else {
            panic!("no connection.tune")
        };
        (raw, (tune.channel_max, tune.frame_max))
    }

    /// Tunes to `channel_max` / `frame_max` and opens `vhost`; returns what the broker answered.
    async fn open(broker: &RunningBroker, user: &str, vhost: &str, tune: (u16, u32)) -> (Raw, Method) {
        let (mut raw, _) = Raw::to_tune(broker, user, user_password(user)).await;
        let tune_ok = ConnectionTuneOk { channel_max: tune.0, frame_max: tune.1, heartbeat: 0 };
        let open = ConnectionOpen { virtual_host: ShortStr::try_from(vhost).unwrap() };
        raw.send(&[(0, tune_ok.into()), (0, open.into())]).await;
        let (_, answer) = raw.method().await.expect("an answer to connection.open");
        (raw, answer)
    }

    async fn send(&mut self, frames: &[(u16, Method)]) {
        let mut out = BytesMut::new();
        for (channel, method) in frames {
            encode_method_frame(*channel, method, &mut out);
        }
        self.socket.write_all(&out).await.unwrap();
    }

    /// The next method frame (others skipped); None when the socket closes.
    async fn method(&mut self) -> Option<(u16, Method)> {
        loop {
            if let Ok(Some(frame)) = self.decoder.decode(&mut self.input) {
                if let Frame::Method { channel, method } = frame {
                    return Some((channel, method));
                }
                continue;
            }
            let mut chunk = [0u8; 8192];
            let read =
                tokio::time::timeout(STEP, self.socket.read(&mut chunk)).await.expect("answer in time");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn user_password(user: &str) -> &str {
    if user == "guest" {
        "guest"
    } else {
        "limpw"
    }
}

/// `(code, text, class, method)` of a connection.close.
fn connection_close(method: Option<(u16, Method)>) -> (u16, String, u16, u16) {
    match method {
        Some((
            0,
            Method::ConnectionClose(ConnectionClose { reply_code, reply_text, class_id, method_id }),
        )) => (reply_code, reply_text.as_str().into_owned(), class_id, method_id),
        other => panic!("expected connection.close, got {other:?}"),
    }
}

/// `(channel, code, text, class, method)` of a channel.close.
fn channel_close(method: Option<(u16, Method)>) -> (u16, u16, String, u16, u16) {
    match method {
        Some((
            channel,
            Method::ChannelClose(ChannelClose { reply_code, reply_text, class_id, method_id }),
        )) => (channel, reply_code, reply_text.as_str().into_owned(), class_id, method_id),
        other => panic!("expected channel.close, got {other:?}"),
    }
}

fn owned(code: u16, text: &str, class: u16, method: u16) -> (u16, String, u16, u16) {
    (code, text.to_owned(), class, method)
}

async fn lapin_as(broker: &RunningBroker, user: &str, vhost: &str) -> lapin::Result<Connection> {
    let vhost = vhost.replace('/', "%2f");
    let url = format!("amqp://{user}:{}@{}/{vhost}", user_password(user), broker.amqp);
    tokio::time::timeout(STEP, Connection::connect(&url, ConnectionProperties::default()))
        .await
        .expect("in time")
}

/// A publish and get round trip on a fresh channel of `conn`: the client carries on.
async fn round_trip(conn: &Connection, queue: &str, body: &[u8]) {
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare(queue.into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .unwrap();
    tokio::time::timeout(STEP, confirm).await.expect("confirm in time").unwrap();
    let got = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert_eq!(got.map(|m| m.delivery.data.clone()), Some(body.to_vec()));
    let _ = channel.close(200, "done".into()).await;
}

/// An HTTP request that must succeed (any 2xx).
async fn api(broker: &RunningBroker, method: &str, path: &str, body: &str) -> String {
    let (status, reply) = http(broker, method, path, body).await;
    assert!((200..300).contains(&status), "{method} {path}: {status} {reply}");
    reply
}

/// A content header frame announcing `body_size`, sent without its body.
fn header_frame(channel: u16, body_size: u64) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(2);
    out.put_u16(channel);
    out.put_u32(14);
    out.put_u16(60);
    out.put_u16(0);
    out.put_u64(body_size);
    out.put_u16(0);
    out.put_u8(0xCE);
    out
}

/// `--max-message-size`: a larger message closes only its channel with 406 and RabbitMQ's text
/// (rabbit_channel:check_msg_size) — the connection's other channel and another client carry on;
/// the default is RabbitMQ's 128 MiB, refused from the content header, before any body arrives.
#[tokio::test]
async fn message_over_max_message_size_closes_its_channel_with_406() {
    let broker = RunningBroker::start_with(&["--max-message-size", "1024"]);
    let (mut raw, opened) = Raw::open(&broker, "guest", "/", (2047, 131_072)).await;
    assert!(matches!(opened, Method::ConnectionOpenOk(_)));
    raw.send(&[(1, ChannelOpen {}.into()), (2, ChannelOpen {}.into())]).await;
    for _ in 0..2 {
        assert!(matches!(raw.method().await, Some((_, Method::ChannelOpenOk(_)))));
    }
    let publish: Method =
        BasicPublish { routing_key: ShortStr::from_static("q"), ..Default::default() }.into();
    let mut out = BytesMut::new();
    encode_content(1, &publish, &EncodedProperties::default(), &[7u8; 1025], 131_072, &mut out);
    raw.socket.write_all(&out).await.unwrap();
    let text = "PRECONDITION_FAILED - message size 1025 is larger than configured max size 1024";
    assert_eq!(channel_close(raw.method().await), (1, 406, text.to_owned(), 60, 40));
    // Channel 2 of the same connection is untouched; another client publishes at the limit.
    let declare = QueueDeclare { queue: ShortStr::from_static("still"), ..Default::default() };
    raw.send(&[(2, declare.into())]).await;
    assert!(matches!(raw.method().await, Some((2, Method::QueueDeclareOk(_)))));
    round_trip(&connect(&broker).await, "at-limit", &[1u8; 1024]).await;

    let broker = RunningBroker::start();
    let (mut raw, _) = Raw::open(&broker, "guest", "/", (2047, 131_072)).await;
    raw.send(&[(1, ChannelOpen {}.into())]).await;
    assert!(matches!(raw.method().await, Some((1, Method::ChannelOpenOk(_)))));
    let mut out = BytesMut::new();
    encode_method_frame(1, &publish, &mut out);
    out.extend_from_slice(&header_frame(1, 134_217_729));
    raw.socket.write_all(&out).await.unwrap();
    let text = "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728";
    assert_eq!(channel_close(raw.method().await), (1, 406, text.to_owned(), 60, 40));
}

/// `--channel-max`: offered in connection.tune; a tune-ok above it, or a channel.open past the
/// negotiated number, is 530 with RabbitMQ's texts (rabbit_reader), while another client opens
/// channels freely. The default offer is RabbitMQ's 2047.
#[tokio::test]
async fn channel_max_is_offered_and_enforced_with_530() {
    let broker = RunningBroker::start();
    let (_, tune) = Raw::to_tune(&broker, "guest", "guest").await;
    assert_eq!(tune, (2047, 131_072), "RabbitMQ's defaults");

    let broker = RunningBroker::start_with(&["--channel-max", "3"]);
    let (mut raw, tune) = Raw::to_tune(&broker, "guest", "guest").await;
    assert_eq!(tune.0, 3);
    raw.send(&[(0, ConnectionTuneOk { channel_max: 4, frame_max: 131_072, heartbeat: 0 }.into())]).await;
    let text = "NOT_ALLOWED - negotiated channel_max = 4 is higher than the maximum allowed value (3)";
    assert_eq!(connection_close(raw.method().await), owned(530, text, 10, 30));

    let (mut raw, opened) = Raw::open(&broker, "guest", "/", (3, 131_072)).await;
    assert!(matches!(opened, Method::ConnectionOpenOk(_)));
    for channel in [1, 2, 700] {
        raw.send(&[(channel, ChannelOpen {}.into())]).await;
        assert!(matches!(raw.method().await, Some((_, Method::ChannelOpenOk(_)))), "channel {channel}");
    }
    let other = connect(&broker).await;
    raw.send(&[(9, ChannelOpen {}.into())]).await;
    let text = "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)";
    assert_eq!(connection_close(raw.method().await), owned(530, text, 0, 0));
    round_trip(&other, "other", b"fine").await;
}

/// `--frame-max`: offered in connection.tune; a tune-ok below AMQP's 4096 or above the offer is
/// 530 with RabbitMQ's texts; a client within the bounds connects.
#[tokio::test]
async fn frame_max_outside_its_bounds_in_tune_ok_is_530() {
    let broker = RunningBroker::start_with(&["--frame-max", "8192"]);
    let cases = [
        (4095, "NOT_ALLOWED - negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
        (8193, "NOT_ALLOWED - negotiated frame_max = 8193 is higher than the maximum allowed value (8192)"),
    ];
    for (frame_max, text) in cases {
        let (mut raw, tune) = Raw::to_tune(&broker, "guest", "guest").await;
        assert_eq!(tune.1, 8192);
        raw.send(&[(0, ConnectionTuneOk { channel_max: 2047, frame_max, heartbeat: 0 }.into())]).await;
        assert_eq!(connection_close(raw.method().await), owned(530, text, 10, 30));
    }
    let (_, opened) = Raw::open(&broker, "guest", "/", (2047, 4096)).await;
    assert!(matches!(opened, Method::ConnectionOpenOk(_)));
    round_trip(&connect(&broker).await, "framed", &[5u8; 20_000]).await;
}

/// A vhost's `max-connections` (set over the API): the connection past it gets 530 on
/// connection.open with RabbitMQ's text; another vhost is not counted; a closed connection frees
/// its place; 0 admits nobody and -1 means no limit, as in RabbitMQ.
#[tokio::test]
async fn vhost_max_connections_refuses_with_530_naming_the_limit() {
    let broker = RunningBroker::start();
    api(&broker, "PUT", "/api/vhosts/other", "{}").await;
    api(&broker, "PUT", "/api/vhost-limits/%2F/max-connections", r#"{"value": 1}"#).await;
    let listed = api(&broker, "GET", "/api/vhost-limits", "").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&listed).unwrap(),
        serde_json::json!([{"vhost": "/", "value": {"max-connections": 1}}])
    );
    let first = lapin_as(&broker, "guest", "/").await.expect("the first fits");
    let (_, refused) = Raw::open(&broker, "guest", "/", (2047, 131_072)).await;
    let text = "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached";
    assert_eq!(connection_close(Some((0, refused))), owned(530, text, 10, 40));
    let elsewhere = lapin_as(&broker, "guest", "other").await.expect("another vhost is not counted");
    round_trip(&first, "q", b"still served").await;
    first.close(200, "bye".into()).await.unwrap();
    let again = lapin_as(&broker, "guest", "/").await.expect("the place was freed");
    again.close(200, "bye".into()).await.unwrap();

    api(&broker, "PUT", "/api/vhost-limits/%2F/max-connections", r#"{"value": 0}"#).await;
    let (_, refused) = Raw::open(&broker, "guest", "/", (2047, 131_072)).await;
    let text = "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (0) is reached";
    assert_eq!(connection_close(Some((0, refused))), owned(530, text, 10, 40));
    api(&broker, "PUT", "/api/vhost-limits/%2F/max-connections", r#"{"value": -1}"#).await;
    let mut many = Vec::new();
    for _ in 0..3 {
        many.push(lapin_as(&broker, "guest", "/").await.expect("-1: no limit"));
    }
    round_trip(&elsewhere, "q", b"other vhost").await;
}

/// A vhost's `max-queues`: declaring a new queue past it closes the channel with 406 and
/// RabbitMQ's text; redeclaring or passively declaring an existing queue still works, and a
/// deleted queue frees its place.
#[tokio::test]
async fn vhost_max_queues_refuses_a_new_queue_with_406() {
    let broker = RunningBroker::start();
    api(&broker, "PUT", "/api/vhost-limits/%2F/max-queues", r#"{"value": 1}"#).await;
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("q1".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let refused =
        channel.queue_declare("q2".into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    let text = "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '/' (1) is reached";
    assert!(refused.expect_err("over the limit").to_string().contains(text));
    let (mut raw, _) = Raw::open(&broker, "guest", "/", (2047, 131_072)).await;
    raw.send(&[(1, ChannelOpen {}.into())]).await;
    raw.method().await;
    let declare = QueueDeclare { queue: ShortStr::from_static("q3"), ..Default::default() };
    raw.send(&[(1, declare.into())]).await;
    let text = "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost '/' (1) is reached";
    assert_eq!(channel_close(raw.method().await), (1, 406, text.to_owned(), 50, 10));

    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("q1".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("redeclare");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel.queue_declare("q1".into(), passive, FieldTable::default()).await.expect("passive");
    round_trip(&conn, "q1", b"the existing queue works").await;
    channel.queue_delete("q1".into(), QueueDeleteOptions::default()).await.unwrap();
    channel
        .queue_declare("q2".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("freed");
}

/// Creates user `lim` (password `limpw`) with full permissions on `/`.
async fn create_lim(broker: &RunningBroker) {
    api(broker, "PUT", "/api/users/lim", r#"{"password": "limpw", "tags": ""}"#).await;
    api(broker, "PUT", "/api/permissions/%2F/lim", r#"{"configure": ".*", "write": ".*", "read": ".*"}"#)
        .await;
}

/// A user's `max-connections` and `max-channels`: past them, 530 with RabbitMQ's texts — on
/// connection.open for connections, closing the whole connection on channel.open for channels
/// (as rabbit_reader) — counted across the user's connections; guest carries on.
#[tokio::test]
async fn user_limits_refuse_connections_and_channels_with_530() {
    let broker = RunningBroker::start();
    create_lim(&broker).await;
    api(&broker, "PUT", "/api/user-limits/lim/max-connections", r#"{"value": 2}"#).await;
    api(&broker, "PUT", "/api/user-limits/lim/max-channels", r#"{"value": 2}"#).await;
    let listed = api(&broker, "GET", "/api/user-limits/lim", "").await;
    let expected = serde_json::json!([{"user": "lim", "value": {"max-channels": 2, "max-connections": 2}}]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&listed).unwrap(), expected);
    let guest = connect(&broker).await;
    let (mut first, _) = Raw::open(&broker, "lim", "/", (2047, 131_072)).await;
    let (mut second, _) = Raw::open(&broker, "lim", "/", (2047, 131_072)).await;
    let (_, refused) = Raw::open(&broker, "lim", "/", (2047, 131_072)).await;
    let text = "NOT_ALLOWED - connection refused for user 'lim': user connection limit (2) is reached";
    assert_eq!(connection_close(Some((0, refused))), owned(530, text, 10, 40));
    first.send(&[(1, ChannelOpen {}.into())]).await;
    assert!(matches!(first.method().await, Some((1, Method::ChannelOpenOk(_)))));
    second.send(&[(1, ChannelOpen {}.into())]).await;
    assert!(matches!(second.method().await, Some((1, Method::ChannelOpenOk(_)))));
    second.send(&[(2, ChannelOpen {}.into())]).await;
    let text = "NOT_ALLOWED - number of channels opened for user 'lim' has reached the maximum allowed user limit of (2)";
    assert_eq!(connection_close(second.method().await), owned(530, text, 0, 0));
    // The closed connection gave back its channel and its place.
    first.send(&[(2, ChannelOpen {}.into())]).await;
    assert!(matches!(first.method().await, Some((2, Method::ChannelOpenOk(_)))));
    round_trip(&guest, "guest-q", b"unlimited").await;
    api(&broker, "DELETE", "/api/user-limits/lim/max-channels", "").await;
    first.send(&[(3, ChannelOpen {}.into())]).await;
    assert!(matches!(first.method().await, Some((3, Method::ChannelOpenOk(_)))), "cleared: no limit");
}

/// Limits outlive a restart (users.snap) and travel in definitions as RabbitMQ 3.10 writes them:
/// users[].limits and a `vhost-limits` parameter; an import that would pass a vhost's max-queues
/// is refused whole with RabbitMQ's text. Bad values get RabbitMQ's validation texts (400).
#[tokio::test]
async fn limits_survive_restarts_and_round_trip_through_definitions() {
    let broker = RunningBroker::start();
    create_lim(&broker).await;
    api(&broker, "PUT", "/api/vhost-limits/%2F/max-queues", r#"{"value": 1}"#).await;
    api(&broker, "PUT", "/api/user-limits/lim/max-connections", r#"{"value": 1}"#).await;
    let (status, reply) =
        http(&broker, "PUT", "/api/vhost-limits/%2F/max-connections", r#"{"value": "x"}"#).await;
    assert_eq!(status, 400);
    assert!(reply.contains(r#"max-connections should be a number, actually was <<\"x\">>"#), "{reply}");
    let (status, reply) = http(&broker, "PUT", "/api/user-limits/lim/max-queues", r#"{"value": 1}"#).await;
    assert_eq!(status, 400);
    assert!(reply.contains(r#"Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits"#), "{reply}");

    let broker = RunningBroker::start_in(broker.kill9());
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("only".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let refused =
        channel.queue_declare("more".into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    assert!(refused
        .expect_err("max-queues kept")
        .to_string()
        .contains("queue limit in vhost '/' (1) is reached"));
    let _kept = lapin_as(&broker, "lim", "/").await.expect("one");
    let second = lapin_as(&broker, "lim", "/").await.expect_err("max-connections kept");
    assert!(second.to_string().contains("user connection limit (1) is reached"), "{second}");

    let exported: serde_json::Value =
        serde_json::from_str(&api(&broker, "GET", "/api/definitions", "").await).unwrap();
    let params = serde_json::json!([{"vhost": "/", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 1}}]);
    assert_eq!(exported["parameters"], params);
    let lim = exported["users"].as_array().unwrap().iter().find(|u| u["name"] == "lim").unwrap();
    assert_eq!(lim["limits"], serde_json::json!({"max-connections": 1}));

    let fresh = RunningBroker::start();
    let mut import = exported.clone();
    import["queues"] = serde_json::json!([{"name": "a", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}}]);
    api(&fresh, "POST", "/api/definitions", &import.to_string()).await;
    let listed = api(&fresh, "GET", "/api/vhost-limits/%2F", "").await;
    assert!(listed.contains(r#""max-queues":1"#), "{listed}");
    assert!(api(&fresh, "GET", "/api/user-limits/lim", "").await.contains(r#""max-connections":1"#));
    import["queues"] = serde_json::json!([
        {"name": "b", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}},
        {"name": "c", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}},
    ]);
    let (status, reply) = http(&fresh, "POST", "/api/definitions", &import.to_string()).await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply.contains(r#"Adding 2 queue(s) to virtual host \"/\" would exceed the limit of 1 queue(s)."#),
        "{reply}"
    );
    let queues = api(&fresh, "GET", "/api/queues/%2F", "").await;
    assert!(!queues.contains(r#""name":"b""#), "nothing of a refused import is declared: {queues}");
}

/// `base64(salt ++ H(salt ++ utf8(password)))`, computed here as RabbitMQ computes its hashes.
fn rabbit_hash(algorithm: &str, salt: [u8; 4], password: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let mut input = salt.to_vec();
    input.extend_from_slice(password.as_bytes());
    let digest: Vec<u8> = match algorithm {
        "rabbit_password_hashing_sha256" => sha2::Sha256::digest(&input).to_vec(),
        "rabbit_password_hashing_sha512" => sha2::Sha512::digest(&input).to_vec(),
        "rabbit_password_hashing_md5" => md5::Md5::digest(&input).to_vec(),
        other => panic!("{other}"),
    };
    base64::engine::general_purpose::STANDARD.encode([salt.as_slice(), &digest].concat())
}

/// The three hashing algorithms RabbitMQ exports import (definitions and PUT /api/users), log in
/// over AMQP with their password, keep their algorithm through an export and a restart; an
/// unknown algorithm is 400.
#[tokio::test]
async fn sha256_sha512_and_md5_password_hashes_import_and_log_in() {
    let broker = RunningBroker::start();
    let algorithms =
        ["rabbit_password_hashing_sha256", "rabbit_password_hashing_sha512", "rabbit_password_hashing_md5"];
    let mut users = Vec::new();
    for (i, algorithm) in algorithms.iter().enumerate() {
        let hash = rabbit_hash(algorithm, [0x90, 0x8D, 0xC6, i as u8], "limpw");
        users.push(serde_json::json!({"name": format!("def{i}"), "password_hash": hash, "hashing_algorithm": algorithm, "tags": []}));
    }
    let permissions: Vec<_> = (0..3)
        .map(|i| serde_json::json!({"user": format!("def{i}"), "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}))
        .collect();
    let defs = serde_json::json!({"users": users, "permissions": permissions});
    api(&broker, "POST", "/api/definitions", &defs.to_string()).await;
    let md5 = rabbit_hash("rabbit_password_hashing_md5", [1, 2, 3, 4], "limpw");
    let body = serde_json::json!({"password_hash": md5, "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""});
    api(&broker, "PUT", "/api/users/put-md5", &body.to_string()).await;
    api(
        &broker,
        "PUT",
        "/api/permissions/%2F/put-md5",
        r#"{"configure": ".*", "write": ".*", "read": ".*"}"#,
    )
    .await;
    let bcrypt =
        serde_json::json!({"password_hash": md5, "hashing_algorithm": "rabbit_password_hashing_bcrypt"});
    let (status, reply) = http(&broker, "PUT", "/api/users/nope", &bcrypt.to_string()).await;
    assert_eq!(status, 400, "{reply}");

    let broker = RunningBroker::start_in(broker.kill9());
    for user in ["def0", "def1", "def2", "put-md5"] {
        let conn = lapin_as(&broker, user, "/").await.unwrap_or_else(|e| panic!("{user} logs in: {e}"));
        round_trip(&conn, user, b"logged in").await;
        let url = format!("amqp://{user}:wrong@{}/%2f", broker.amqp);
        assert!(
            Connection::connect(&url, ConnectionProperties::default()).await.is_err(),
            "{user}: wrong password"
        );
    }
    let exported: serde_json::Value =
        serde_json::from_str(&api(&broker, "GET", "/api/definitions", "").await).unwrap();
    for (i, algorithm) in algorithms.iter().enumerate() {
        let user =
            exported["users"].as_array().unwrap().iter().find(|u| u["name"] == format!("def{i}")).unwrap();
        assert_eq!(user["hashing_algorithm"], *algorithm);
        assert_eq!(user["password_hash"], users[i]["password_hash"], "exported as imported");
    }
}

/// Sends a raw HTTP/1.1 request head to the management port; returns the status line.
async fn raw_http_status(broker: &RunningBroker, head: &str) -> String {
    let mut socket = tokio::net::TcpStream::connect(broker.http).await.unwrap();
    // The server may answer and close before it has read everything: a failed write is fine.
    let _ = socket.write_all(head.as_bytes()).await;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(STEP, socket.read_to_end(&mut reply)).await.expect("answer in time");
    String::from_utf8_lossy(&reply).lines().next().unwrap_or_default().to_owned()
}

/// HTTP request heads: more than 100 header lines, or more than 417,600 bytes of head (cowboy's
/// limits, which RabbitMQ's listener has), get 431 before any login; a request at the limits and
/// other clients are served.
#[tokio::test]
async fn http_request_heads_over_the_limits_get_431() {
    let broker = RunningBroker::start();
    let request = |extra: &str| {
        format!("GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n{extra}Connection: close\r\n\r\n")
    };
    // 97 more lines: 100 with Host, Authorization and Connection.
    let at_limit: String = (0..97).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(raw_http_status(&broker, &request(&at_limit)).await, "HTTP/1.1 200 OK");
    let over: String = (0..98).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(
        raw_http_status(&broker, &request(&over)).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let big_value = format!("X-Big: {}\r\n", "v".repeat(420_000));
    assert_eq!(
        raw_http_status(&broker, &request(&big_value)).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let within = format!("X-Big: {}\r\n", "v".repeat(300_000));
    assert_eq!(raw_http_status(&broker, &request(&within)).await, "HTTP/1.1 200 OK");
    assert_eq!(http(&broker, "GET", "/api/overview", "").await.0, 200);
}
