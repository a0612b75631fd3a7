//! End to end: what the test suites of amqp091-go, pika and aio-pika found when run against the
//! real binary (issue #13), each checked against RabbitMQ 3.10.8 first. How to run those suites:
//! `docs/client-test-suites.md`.

mod common;

use std::time::Duration;

use common::raw_amqp::RawAmqp;
use common::{connect, RunningBroker};
use hourglass_wire::{ChannelClose, ChannelCloseOk, ChannelOpen, Method, QueueDeclare, ShortStr};
use lapin::{ErrorKind, ExchangeKind};

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);

/// pika's `TestInvalidExchangeTypeRaisesConnectionClosed` (1.4.4): declaring an exchange of a
/// type the broker does not have closes the channel with 406 and RabbitMQ's text, "unknown
/// exchange type", as RabbitMQ 3.12.14 and 3.13.3 on do; the connection and its other channels
/// stay open (RabbitMQ 3.10 closed the connection with 503).
#[tokio::test]
async fn unknown_exchange_type_closes_the_channel_with_rabbitmqs_text() {
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let channel = conn.create_channel().await.unwrap();
    let kind = ExchangeKind::Custom("ZZwwInvalid".into());
    let declare = channel.exchange_declare("odd".into(), kind, Default::default(), Default::default());
    let err = tokio::time::timeout(STEP, declare).await.expect("an answer").expect_err("refused");
    let ErrorKind::ProtocolError(amqp) = err.kind() else { panic!("not a protocol error: {err}") };
    assert_eq!(amqp.get_id(), 406);
    assert_eq!(amqp.get_message().as_str(), "PRECONDITION_FAILED - unknown exchange type 'ZZwwInvalid'");
    assert!(conn.status().connected(), "406 is a channel error: the connection stays open");
    let other = conn.create_channel().await.unwrap();
    other.queue_declare("still-served".into(), Default::default(), Default::default()).await.unwrap();
}

/// amqp091-go's `TestChannelExceptionWithCloseIssue43`: the client closes a channel the broker is
/// already closing (the two channel.close cross), then answers the broker's close with close-ok,
/// as clients do. The broker answers the client's close with close-ok and keeps the channel closing
/// until that close-ok, as rabbit_channel's `closing` state does; it used to free the channel at
/// once, so the client's close-ok landed on a free channel and closed the connection with 504.
#[tokio::test]
async fn crossing_channel_closes_leave_the_connection_and_its_other_channels_open() {
    let broker = RunningBroker::start();
    let mut raw = RawAmqp::open(&broker, &[1, 2]).await;
    let missing =
        QueueDeclare { queue: ShortStr::from_static("no-such-queue"), passive: true, ..Default::default() };
    raw.send(&[(1, missing.into())]).await;
    let Some((1, Method::ChannelClose(close))) = raw.next_method().await else {
        panic!("no channel.close on channel 1");
    };
    assert_eq!(close.reply_code, 404, "{:?}", close.reply_text);

    let bye =
        ChannelClose { reply_code: 200, reply_text: ShortStr::from_static("bye"), class_id: 0, method_id: 0 };
    raw.send(&[(1, bye.into())]).await;
    assert_eq!(raw.next_method().await, Some((1, ChannelCloseOk {}.into())));
    raw.send(&[(1, ChannelCloseOk {}.into())]).await;

    let declare = QueueDeclare { queue: ShortStr::from_static("still-here"), ..Default::default() };
    raw.send(&[(2, declare.into()), (1, ChannelOpen {}.into())]).await;
    // Two answers on two channels, in either order (RabbitMQ's come from two channel processes).
    let mut answers = [raw.next_method().await, raw.next_method().await];
    answers.sort_by_key(|answer| answer.as_ref().map(|(channel, _)| *channel));
    assert!(matches!(answers[0], Some((1, Method::ChannelOpenOk(_)))), "channel 1 opens again: {answers:?}");
    assert!(matches!(answers[1], Some((2, Method::QueueDeclareOk(_)))), "channel 2 still works: {answers:?}");
}
