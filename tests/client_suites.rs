//! End to end: what the test suites of amqp091-go, pika and aio-pika found when run against the
//! real binary (issue #13), each checked against RabbitMQ 3.10.8 first. How to run those suites:
//! `docs/client-test-suites.md`.

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::{connect, RunningBroker};
use hourglass_wire::{
    encode_method_frame, ChannelClose, ChannelCloseOk, ChannelOpen, ConnectionOpen, ConnectionStartOk,
    ConnectionTuneOk, FieldTable, Frame, FrameDecoder, LongStr, Method, QueueDeclare, ShortStr,
    PROTOCOL_HEADER,
};
use lapin::{ErrorKind, ExchangeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

/// pika's `TestInvalidExchangeTypeRaisesConnectionClosed`: declaring an exchange of a type the
/// broker does not have closes the connection with 503 and RabbitMQ 3.10's text, "unknown exchange
/// type" (RabbitMQ says "invalid" only for names that happen to be Erlang atoms, e.g. `ok`).
#[tokio::test]
async fn unknown_exchange_type_closes_the_connection_with_rabbitmqs_text() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let kind = ExchangeKind::Custom("ZZwwInvalid".into());
    let declare = channel.exchange_declare("odd".into(), kind, Default::default(), Default::default());
    let err = tokio::time::timeout(STEP, declare).await.expect("an answer").expect_err("refused");
    let ErrorKind::ProtocolError(amqp) = err.kind() else { panic!("not a protocol error: {err}") };
    assert_eq!(amqp.get_id(), 503);
    assert_eq!(amqp.get_message().as_str(), "COMMAND_INVALID - unknown exchange type 'ZZwwInvalid'");
    assert!(!conn.status().connected(), "503 is a connection error: the connection is closed");
}

/// amqp091-go's `TestChannelExceptionWithCloseIssue43`: the client closes a channel the broker is
/// already closing (the two channel.close cross), then answers the broker's close with close-ok,
/// as clients do. The broker answers the client's close with close-ok and keeps the channel closing
/// until that close-ok, as rabbit_channel's `closing` state does; it used to free the channel at
/// once, so the client's close-ok landed on a free channel and closed the connection with 504.
#[tokio::test]
async fn crossing_channel_closes_leave_the_connection_and_its_other_channels_open() {
    let broker = RunningBroker::start();
    let (mut socket, mut input) = raw_open_channels(&broker, &[1, 2]).await;
    let missing =
        QueueDeclare { queue: ShortStr::from_static("no-such-queue"), passive: true, ..Default::default() };
    send(&mut socket, &[(1, missing.into())]).await;
    let Some((1, Method::ChannelClose(close))) = next_method(&mut socket, &mut input).await else {
        panic!("no channel.close on channel 1");
    };
    assert_eq!(close.reply_code, 404, "{:?}", close.reply_text);

    let bye =
        ChannelClose { reply_code: 200, reply_text: ShortStr::from_static("bye"), class_id: 0, method_id: 0 };
    send(&mut socket, &[(1, bye.into())]).await;
    assert_eq!(next_method(&mut socket, &mut input).await, Some((1, ChannelCloseOk {}.into())));
    send(&mut socket, &[(1, ChannelCloseOk {}.into())]).await;

    let declare = QueueDeclare { queue: ShortStr::from_static("still-here"), ..Default::default() };
    send(&mut socket, &[(2, declare.into()), (1, ChannelOpen {}.into())]).await;
    // Two answers on two channels, in either order (RabbitMQ's come from two channel processes).
    let mut answers =
        [next_method(&mut socket, &mut input).await, next_method(&mut socket, &mut input).await];
    answers.sort_by_key(|answer| answer.as_ref().map(|(channel, _)| *channel));
    assert!(matches!(answers[0], Some((1, Method::ChannelOpenOk(_)))), "channel 1 opens again: {answers:?}");
    assert!(matches!(answers[1], Some((2, Method::QueueDeclareOk(_)))), "channel 2 still works: {answers:?}");
}

/// A raw socket logged in as guest on `/` with `channels` open, heartbeats off; the read buffer
/// goes with it.
async fn raw_open_channels(broker: &RunningBroker, channels: &[u16]) -> (TcpStream, BytesMut) {
    let mut socket = TcpStream::connect(broker.amqp).await.unwrap();
    socket.write_all(PROTOCOL_HEADER).await.unwrap();
    let mut input = BytesMut::new();
    assert!(matches!(next_method(&mut socket, &mut input).await, Some((0, Method::ConnectionStart(_)))));
    let start_ok = ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: ShortStr::from_static("PLAIN"),
        response: LongStr::from("\0guest\0guest"),
        locale: ShortStr::from_static("en_US"),
    };
    send(&mut socket, &[(0, start_ok.into())]).await;
    assert!(matches!(next_method(&mut socket, &mut input).await, Some((0, Method::ConnectionTune(_)))));
    let tune_ok = ConnectionTuneOk { channel_max: 16, frame_max: 131_072, heartbeat: 0 };
    let open = ConnectionOpen { virtual_host: ShortStr::from_static("/") };
    send(&mut socket, &[(0, tune_ok.into()), (0, open.into())]).await;
    assert!(matches!(next_method(&mut socket, &mut input).await, Some((0, Method::ConnectionOpenOk(_)))));
    for &channel in channels {
        send(&mut socket, &[(channel, ChannelOpen {}.into())]).await;
        let answer = next_method(&mut socket, &mut input).await;
        assert!(matches!(answer, Some((c, Method::ChannelOpenOk(_))) if c == channel), "{answer:?}");
    }
    (socket, input)
}

/// Sends methods as frames on a raw socket.
async fn send(socket: &mut TcpStream, frames: &[(u16, Method)]) {
    let mut out = BytesMut::new();
    for (channel, method) in frames {
        encode_method_frame(*channel, method, &mut out);
    }
    socket.write_all(&out).await.unwrap();
}

/// Reads until the next method frame (channel and method), or None once the socket closes.
async fn next_method(socket: &mut TcpStream, input: &mut BytesMut) -> Option<(u16, Method)> {
    let mut decoder = FrameDecoder::new(131_072);
    loop {
        if let Ok(Some(Frame::Method { channel, method })) = decoder.decode(input) {
            return Some((channel, method));
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(STEP, socket.read(&mut chunk)).await.expect("broker answers in time");
        match read {
            Ok(0) | Err(_) => return None,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
        }
    }
}
