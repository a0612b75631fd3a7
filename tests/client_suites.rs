//! End to end: what the test suites of amqp091-go, pika and aio-pika found when run against the
//! real binary (issue #13), each checked against RabbitMQ 3.10.8 first. How to run those suites:
//! `docs/client-test-suites.md`.

mod common;

use std::time::Duration;

use common::{connect, RunningBroker};
use lapin::{ErrorKind, ExchangeKind};

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
