//! Configure / write / read permissions on each AMQP operation, with RabbitMQ 3.x's reply texts
//! (checked against RabbitMQ 3.10: `ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for
//! user 'bob'`).

mod common;

use std::sync::Arc;

use common::*;
use hourglass_broker::{Permissions, Publish};
use hourglass_testkit::{methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// bob may configure and read `bob-*`, write `bob-*` and the default exchange.
fn bob_patterns() -> Arc<Permissions> {
    Arc::new(Permissions::compile("^bob-", "^bob-|^amq\\.default$", "^bob-").unwrap())
}

/// A broker where guest (full permissions) set things up, and a channel of bob's.
fn setup() -> (TestBroker, Chan, Chan) {
    let mut tb = TestBroker::new();
    let admin = tb.channel();
    declare(&mut tb, admin, "q");
    declare(&mut tb, admin, "bob-q");
    declare_exchange(&mut tb, admin, "bob-x", "direct");
    let conn = tb.connect_as("bob", bob_patterns());
    let bob = tb.open_channel(conn, 1);
    (tb, admin, bob)
}

fn refused(effects: &[hourglass_broker::Effect], kind: &str, name: &str) {
    let error = channel_error(effects).expect("a channel error");
    assert_eq!(error.reply_code, 403);
    assert_eq!(
        error.reply_text,
        format!("ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user 'bob'")
    );
}

fn reopen(tb: &mut TestBroker, chan: Chan) -> Chan {
    tb.open_channel(chan.conn, chan.channel.0 + 1)
}

/// queue.declare needs configure on the queue, server-named ones included; passive needs none.
#[test]
fn queue_declare_needs_configure() {
    let (mut tb, _, bob) = setup();
    refused(&declare(&mut tb, bob, "q"), "queue", "q");
    let bob = reopen(&mut tb, bob);
    let effects = declare(&mut tb, bob, "");
    let error = channel_error(&effects).expect("server-named queue refused");
    assert!(error.reply_text.contains("access to queue 'amq.gen-"), "{}", error.reply_text);
    let bob = reopen(&mut tb, bob);
    assert!(channel_error(&declare(&mut tb, bob, "bob-new")).is_none());
    let passive = QueueDeclare { queue: short("q"), passive: true, ..Default::default() };
    let effects = tb.call(bob, passive);
    assert!(matches!(methods(&effects)[..], [Method::QueueDeclareOk(_)]), "{effects:?}");
}

/// A new queue dead-lettering to an exchange needs write on that exchange.
#[test]
fn dead_letter_exchange_needs_write() {
    let (mut tb, _, bob) = setup();
    let args =
        FieldTable::from_entries([("x-dead-letter-exchange", FieldValue::LongStr("amq.direct".into()))]);
    let m = QueueDeclare { queue: short("bob-dl"), arguments: args, ..Default::default() };
    refused(&tb.call(bob, m), "exchange", "amq.direct");
}

/// queue.delete needs configure (even for a queue that does not exist); purge needs read.
#[test]
fn queue_delete_and_purge() {
    let (mut tb, _, bob) = setup();
    refused(&tb.call(bob, QueueDelete { queue: short("missing"), ..Default::default() }), "queue", "missing");
    let bob = reopen(&mut tb, bob);
    refused(&tb.call(bob, QueuePurge { queue: short("q"), ..Default::default() }), "queue", "q");
    let bob = reopen(&mut tb, bob);
    let effects = tb.call(bob, QueuePurge { queue: short("bob-q"), ..Default::default() });
    assert!(matches!(methods(&effects)[..], [Method::QueuePurgeOk(_)]), "{effects:?}");
}

/// queue.bind needs write on the queue and read on the exchange; unbind the same.
#[test]
fn queue_bind_needs_write_on_queue_and_read_on_exchange() {
    let (mut tb, _, bob) = setup();
    refused(&bind(&mut tb, bob, "q", "bob-x", "k"), "queue", "q");
    let bob = reopen(&mut tb, bob);
    refused(&bind(&mut tb, bob, "bob-q", "amq.direct", "k"), "exchange", "amq.direct");
    let bob = reopen(&mut tb, bob);
    assert!(channel_error(&bind(&mut tb, bob, "bob-q", "bob-x", "k")).is_none());
    let unbind = QueueUnbind {
        queue: short("bob-q"),
        exchange: short("amq.direct"),
        routing_key: short("k"),
        ..Default::default()
    };
    refused(&tb.call(bob, unbind), "exchange", "amq.direct");
}

/// exchange.bind needs write on the destination and read on the source.
#[test]
fn exchange_bind_needs_write_on_destination_and_read_on_source() {
    let (mut tb, _, bob) = setup();
    let m = |source: &str, destination: &str| ExchangeBind {
        source: short(source),
        destination: short(destination),
        routing_key: short("k"),
        ..Default::default()
    };
    refused(&tb.call(bob, m("bob-x", "amq.fanout")), "exchange", "amq.fanout");
    let bob = reopen(&mut tb, bob);
    refused(&tb.call(bob, m("amq.fanout", "bob-x")), "exchange", "amq.fanout");
}

/// exchange.declare and delete need configure; a new exchange's alternate exchange needs write.
#[test]
fn exchange_declare_and_delete_need_configure() {
    let (mut tb, _, bob) = setup();
    refused(&declare_exchange(&mut tb, bob, "x1", "direct"), "exchange", "x1");
    let bob = reopen(&mut tb, bob);
    refused(&tb.call(bob, ExchangeDelete { exchange: short("x1"), ..Default::default() }), "exchange", "x1");
    let bob = reopen(&mut tb, bob);
    let args = FieldTable::from_entries([("alternate-exchange", FieldValue::LongStr("amq.topic".into()))]);
    let m = ExchangeDeclare {
        exchange: short("bob-ae"),
        kind: short("fanout"),
        arguments: args,
        ..Default::default()
    };
    refused(&tb.call(bob, m), "exchange", "amq.topic");
}

/// basic.publish needs write on the exchange (the default one is amq.default), checked before
/// whether the exchange exists.
#[test]
fn publish_needs_write_on_exchange() {
    let (mut tb, admin, bob) = setup();
    refused(&tb.publish(bob, "amq.direct", "q", b"x"), "exchange", "amq.direct");
    let bob = reopen(&mut tb, bob);
    refused(&tb.publish(bob, "nope", "q", b"x"), "exchange", "nope");
    let bob = reopen(&mut tb, bob);
    assert!(channel_error(&tb.publish(bob, "", "q", b"x")).is_none());
    assert_eq!(tb.broker.queue_stats("/", "q").map(|s| s.messages_ready), Some(1));
    let _ = admin;
}

/// basic.get and basic.consume need read on the queue.
#[test]
fn get_and_consume_need_read() {
    let (mut tb, _, bob) = setup();
    refused(&tb.call(bob, BasicGet { queue: short("q"), no_ack: true }), "queue", "q");
    let bob = reopen(&mut tb, bob);
    refused(&consume(&mut tb, bob, "q", "c1", true), "queue", "q");
    let bob = reopen(&mut tb, bob);
    let effects = consume(&mut tb, bob, "bob-q", "c2", true);
    assert!(matches!(methods(&effects)[..], [Method::BasicConsumeOk(_)]), "{effects:?}");
}

/// Permissions changed by the management API apply to open connections at once; removed ones
/// refuse everything.
#[test]
fn changed_permissions_apply_to_open_connections() {
    let (mut tb, _, bob) = setup();
    tb.broker.set_permissions("bob", "/", Permissions::full());
    assert!(channel_error(&declare(&mut tb, bob, "q")).is_none());
    tb.broker.set_permissions("bob", "/", Permissions::none());
    let publish = Publish {
        exchange: short("bob-x"),
        routing_key: short("k"),
        mandatory: false,
        properties: BasicProperties::default().into(),
        body: bytes::Bytes::from_static(b"x"),
    };
    let effects = tb.command(hourglass_broker::Command::Publish {
        conn: bob.conn,
        channel: bob.channel,
        publish: Box::new(publish),
    });
    refused(&effects, "exchange", "bob-x");
}
