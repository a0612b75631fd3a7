//! Exchanges, bindings, routing, mandatory returns, publisher confirms and transactions.

mod common;

use bytes::Bytes;
use common::*;
use hourglass_broker::policy::{PolicyKind, PolicySpec};
use hourglass_broker::{Command, Effect, Publish};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

fn ready(tb: &TestBroker, queue: &str) -> usize {
    tb.broker.queue_stats("/", queue).map_or(0, |s| s.messages_ready)
}

/// Topic bindings route with `*` and `#`; a message reaches each matching queue once.
#[test]
fn topic_exchange_routes_by_pattern() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    for q in ["all", "usd", "none"] {
        declare(&mut tb, c, q);
    }
    bind(&mut tb, c, "all", "amq.topic", "#");
    bind(&mut tb, c, "all", "amq.topic", "stock.#");
    bind(&mut tb, c, "usd", "amq.topic", "stock.usd.*");
    bind(&mut tb, c, "none", "amq.topic", "bond.*");
    tb.publish(c, "amq.topic", "stock.usd.nyse", b"x");
    assert_eq!((ready(&tb, "all"), ready(&tb, "usd"), ready(&tb, "none")), (1, 1, 0));
}

/// A fanout exchange copies to every bound queue whatever the key; direct matches keys exactly.
#[test]
fn fanout_and_direct_routing() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "a");
    declare(&mut tb, c, "b");
    bind(&mut tb, c, "a", "amq.fanout", "");
    bind(&mut tb, c, "b", "amq.fanout", "ignored");
    tb.publish(c, "amq.fanout", "anything", b"x");
    assert_eq!((ready(&tb, "a"), ready(&tb, "b")), (1, 1));
    bind(&mut tb, c, "a", "amq.direct", "k1");
    tb.publish(c, "amq.direct", "k2", b"x");
    tb.publish(c, "amq.direct", "k1", b"x");
    assert_eq!(ready(&tb, "a"), 2);
}

/// A headers exchange routes on message headers with x-match.
#[test]
fn headers_exchange_routes_on_headers() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "h");
    let args = FieldTable::from_entries([
        ("x-match", FieldValue::LongStr("all".into())),
        ("format", FieldValue::LongStr("pdf".into())),
    ]);
    tb.call(
        c,
        QueueBind {
            queue: short("h"),
            exchange: short("amq.headers"),
            arguments: args,
            ..Default::default()
        },
    );
    let pdf = BasicProperties {
        headers: Some(FieldTable::from_entries([("format", FieldValue::LongStr("pdf".into()))])),
        ..Default::default()
    };
    tb.publish_with(c, "amq.headers", "", pdf, b"x", false);
    tb.publish(c, "amq.headers", "", b"no headers");
    assert_eq!(ready(&tb, "h"), 1);
}

/// Issue #12 finding 2: bindings of eight `#`s (adjacent, and apart) and a 60-word routing key
/// route at once through the broker (the old walk tried each way to split the key among the `#`s,
/// 10⁸ and more, and did not return).
#[test]
fn many_hash_binding_routes_a_long_key() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "amq.topic", "#.#.#.#.#.#.#.#.b");
    bind(&mut tb, c, "q", "amq.topic", "#.*.#.*.#.*.#.*.#.*.#.*.#.*.#.b");
    let key = |last: &str| format!("{}{last}", "w.".repeat(59));
    tb.publish(c, "amq.topic", &key("b"), b"x");
    tb.publish(c, "amq.topic", &key("c"), b"x");
    assert_eq!(ready(&tb, "q"), 1);
}

/// Exchange-to-exchange bindings forward messages; a cycle delivers once and terminates.
#[test]
fn exchange_to_exchange_bindings_follow_and_stop_at_cycles() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "e1", "fanout");
    declare_exchange(&mut tb, c, "e2", "fanout");
    tb.call(c, ExchangeBind { destination: short("e2"), source: short("e1"), ..Default::default() });
    tb.call(c, ExchangeBind { destination: short("e1"), source: short("e2"), ..Default::default() });
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "e2", "");
    tb.publish(c, "e1", "", b"x");
    assert_eq!(ready(&tb, "q"), 1);
}

/// An exchange's alternate exchange receives what it cannot route.
#[test]
fn alternate_exchange_takes_unroutable_messages() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "ae", "fanout");
    declare(&mut tb, c, "unrouted");
    bind(&mut tb, c, "unrouted", "ae", "");
    let args = FieldTable::from_entries([("alternate-exchange", FieldValue::LongStr("ae".into()))]);
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("main"),
            kind: short("direct"),
            arguments: args,
            ..Default::default()
        },
    );
    tb.publish(c, "main", "nobody", b"x");
    assert_eq!(ready(&tb, "unrouted"), 1);
}

/// Issue #12: a route that has reached its cap of 64 exchanges (here through 63
/// exchange-to-exchange bindings that reach no queue) and then meets a cycle of alternate
/// exchanges ends: the alternates past the cap are not followed (before, they were never marked
/// visited and the broker task looped forever). The message is unroutable and returned.
#[test]
fn alternate_exchange_cycle_past_the_exchange_cap_ends() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let alternate =
        |name: &str| FieldTable::from_entries([("alternate-exchange", FieldValue::LongStr(name.into()))]);
    for (name, ae) in [("src", "x"), ("x", "y"), ("y", "x")] {
        let declare = ExchangeDeclare {
            exchange: short(name),
            kind: short("fanout"),
            arguments: alternate(ae),
            ..Default::default()
        };
        tb.call(c, declare);
    }
    for i in 0..63 {
        let name = format!("e{i}");
        declare_exchange(&mut tb, c, &name, "fanout");
        tb.call(c, ExchangeBind { destination: short(&name), source: short("src"), ..Default::default() });
    }
    let effects = tb.publish_with(c, "src", "k", BasicProperties::default(), b"x", true);
    assert!(
        methods(&effects).iter().any(|m| matches!(m, Method::BasicReturn(r) if r.reply_code == 312)),
        "{effects:?}"
    );
}

/// An unroutable mandatory publish comes back as basic.return 312 NO_ROUTE, before its confirm.
#[test]
fn mandatory_unroutable_is_returned_before_the_confirm() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.call(c, ConfirmSelect { nowait: false });
    let effects = tb.publish_with(c, "amq.direct", "nowhere", BasicProperties::default(), b"x", true);
    match methods(&effects).as_slice() {
        [Method::BasicReturn(ret), Method::BasicAck(ack)] => {
            assert_eq!((ret.reply_code, ret.reply_text.as_str().as_ref()), (312, "NO_ROUTE"));
            assert_eq!((ack.delivery_tag, ack.multiple), (1, false));
        }
        other => panic!("{other:?}"),
    }
    let routed = tb.publish(c, "", "nowhere", b"x");
    assert!(matches!(methods(&routed).as_slice(), [Method::BasicAck(a)] if a.delivery_tag == 2));
}

/// Publishing to a missing exchange is 404; to an internal one 403.
#[test]
fn publish_to_missing_or_internal_exchange_fails() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(&tb.publish(c, "missing", "k", b"x")).expect("404");
    assert_eq!(err.reply_text, "NOT_FOUND - no exchange 'missing' in vhost '/'");
    assert_eq!((err.class_id, err.method_id), (60, 40));
    let c = tb.channel();
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("int"),
            kind: short("fanout"),
            internal: true,
            ..Default::default()
        },
    );
    let err = channel_error(&tb.publish(c, "int", "", b"x")).expect("403");
    assert_eq!(err.reply_code, 403);
}

/// An unknown exchange type is a 406 channel error (RabbitMQ 3.13's); redeclaring with another
/// type is 406 too.
#[test]
fn exchange_declare_errors() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(&declare_exchange(&mut tb, c, "x", "bogus")).expect("406");
    assert_eq!(err.reply_text, "PRECONDITION_FAILED - unknown exchange type 'bogus'");
    let c = tb.channel();
    declare_exchange(&mut tb, c, "x", "direct");
    let err = channel_error(&declare_exchange(&mut tb, c, "x", "fanout")).expect("406");
    assert_eq!(
        err.reply_text,
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'"
    );
    let c = tb.channel();
    let err = channel_error(&declare_exchange(&mut tb, c, "amq.custom", "direct")).expect("403");
    assert_eq!(
        err.reply_text,
        "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'"
    );
    assert!(channel_error(&declare_exchange(&mut tb, c, "amq.direct", "direct")).is_none());
}

/// exchange.delete if-unused refuses an exchange with bindings; binding to the default exchange is refused.
#[test]
fn exchange_delete_if_unused_and_default_exchange_rules() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "x", "direct");
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "x", "k");
    let err =
        channel_error(&tb.call(c, ExchangeDelete { exchange: short("x"), if_unused: true, nowait: false }));
    assert_eq!(err.unwrap().reply_text, "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use");
    let c = tb.channel();
    let err = channel_error(&bind(&mut tb, c, "q", "", "q")).expect("403");
    assert_eq!(err.reply_text, "ACCESS_REFUSED - operation not permitted on the default exchange");
}

/// An auto-delete exchange goes when its last binding is removed.
#[test]
fn auto_delete_exchange_goes_with_its_last_binding() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("ax"),
            kind: short("fanout"),
            auto_delete: true,
            ..Default::default()
        },
    );
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "ax", "");
    tb.call(c, QueueUnbind { queue: short("q"), exchange: short("ax"), ..Default::default() });
    let err = channel_error(
        &tb.call(c, ExchangeDeclare { exchange: short("ax"), passive: true, ..Default::default() }),
    );
    assert_eq!(err.expect("gone").reply_code, 404);
}

/// In a transaction, publishes and acks take effect at commit; rollback discards them.
#[test]
fn transactions_commit_and_roll_back() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(c, TxSelect {});
    tb.publish(c, "", "q", b"1");
    assert_eq!(ready(&tb, "q"), 0);
    let committed = tb.call(c, TxCommit {});
    assert!(matches!(methods(&committed).as_slice(), [Method::TxCommitOk(_)]));
    assert_eq!(ready(&tb, "q"), 1);
    tb.publish(c, "", "q", b"2");
    tb.call(c, TxRollback {});
    tb.call(c, TxCommit {});
    assert_eq!(ready(&tb, "q"), 1);
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    ack(&mut tb, c, 1, false);
    tb.call(c, TxRollback {});
    assert_eq!(
        tb.broker.queue_stats("/", "q").unwrap().messages_unacked,
        1,
        "rolled-back ack leaves it unacked"
    );
    ack(&mut tb, c, 1, false);
    tb.call(c, TxCommit {});
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_unacked, 0);
}

/// A channel cannot switch between tx and confirm modes; commit needs tx.select.
#[test]
fn tx_and_confirm_modes_exclude_each_other() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let err = channel_error(&tb.call(c, TxCommit {})).expect("406");
    assert_eq!(err.reply_text, "PRECONDITION_FAILED - channel is not transactional");
    let c = tb.channel();
    tb.call(c, TxSelect {});
    let err = channel_error(&tb.call(c, ConfirmSelect { nowait: false })).expect("406");
    assert_eq!(err.reply_text, "PRECONDITION_FAILED - cannot switch from tx to confirm mode");
}

/// A user_id property that is not the connection's user is refused with 406.
#[test]
fn user_id_must_match_the_authenticated_user() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let props = BasicProperties { user_id: Some(short("mallory")), ..Default::default() };
    let err = channel_error(&tb.publish_with(c, "", "q", props, b"x", false)).expect("406");
    assert_eq!(
        err.reply_text,
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'"
    );
}

/// Methods on a channel the broker already closed are ignored (they were in flight).
#[test]
fn methods_on_a_closed_channel_are_ignored() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    tb.publish(c, "missing", "", b"x");
    let effects: Vec<Effect> = declare(&mut tb, c, "q");
    assert!(effects.is_empty());
}

/// As RabbitMQ: unbinding from a missing exchange, a missing queue or something never bound
/// succeeds; a passive declare of the default exchange is refused; amq.rabbitmq.trace exists.
#[test]
fn unbind_is_lenient_and_system_exchanges_are_as_rabbitmq() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    for (queue, exchange) in [("q", "missing"), ("missing", "amq.direct"), ("q", "amq.direct")] {
        let effects =
            tb.call(c, QueueUnbind { queue: short(queue), exchange: short(exchange), ..Default::default() });
        assert!(
            matches!(methods(&effects).as_slice(), [Method::QueueUnbindOk(_)]),
            "{queue} from {exchange}"
        );
    }
    let effects =
        tb.call(c, ExchangeUnbind { destination: short("a"), source: short("b"), ..Default::default() });
    assert!(matches!(methods(&effects).as_slice(), [Method::ExchangeUnbindOk(_)]));
    let trace = tb.call(
        c,
        ExchangeDeclare { exchange: short("amq.rabbitmq.trace"), passive: true, ..Default::default() },
    );
    assert!(matches!(methods(&trace).as_slice(), [Method::ExchangeDeclareOk(_)]));
    let err = channel_error(
        &tb.call(c, ExchangeDeclare { exchange: short(""), passive: true, ..Default::default() }),
    );
    assert_eq!(err.unwrap().reply_code, 403);
}

/// Publishes `properties` (an encoding as a client sent it) with a raw `Command::Publish`.
fn publish_raw(
    tb: &mut TestBroker,
    c: Chan,
    routing_key: &str,
    properties: &EncodedProperties,
) -> Vec<Effect> {
    let publish = Publish {
        exchange: short(""),
        routing_key: short(routing_key),
        mandatory: true,
        properties: properties.clone(),
        body: Bytes::from_static(b"x"),
    };
    tb.command(Command::Publish { conn: c.conn, channel: c.channel, publish: Box::new(publish) })
}

/// A message the broker does not change goes out with the very property bytes it came with —
/// on basic.deliver, basic.get-ok and basic.return — as RabbitMQ reuses a message's received
/// encoding (ADR 0006); here one with a continuation flags word no encoder of ours would write.
#[test]
fn unchanged_properties_go_out_as_published() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    let raw = Bytes::from_static(&[0x90, 0x01, 0x00, 0x00, 4, b't', b'e', b'x', b't', 2]);
    let properties = EncodedProperties::split_from(&mut raw.clone()).expect("valid properties");
    let same_bytes = |p: &EncodedProperties| p.as_bytes() == raw && p.as_bytes().as_ptr() == raw.as_ptr();
    publish_raw(&mut tb, c, "q", &properties);
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    let Some(Effect::Send { content: Some(message), .. }) = got.first() else { panic!("{got:?}") };
    assert!(same_bytes(message.properties()), "basic.get-ok: {:?}", message.properties().as_bytes());
    let returned = publish_raw(&mut tb, c, "nowhere", &properties);
    let Some(Effect::Send { content: Some(message), .. }) = returned.first() else { panic!("{returned:?}") };
    assert!(same_bytes(message.properties()), "basic.return");
    consume(&mut tb, c, "q", "ctag", true);
    let delivered = deliveries(&publish_raw(&mut tb, c, "q", &properties));
    assert!(same_bytes(delivered[0].message.properties()), "basic.deliver");
    assert!(delivered[0].message.is_persistent(), "delivery-mode 2 is read in place");
}

/// RabbitMQ 4.0's `x-local-random` exchange: each message goes to one bound queue, picked at
/// random (every queue is on this node); bindings need an empty key and a classic queue, with
/// RabbitMQ's 406 texts otherwise.
#[test]
fn a_local_random_exchange_routes_each_message_to_one_bound_queue() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    assert!(channel_error(&declare_exchange(&mut tb, c, "rpc", "x-local-random")).is_none());
    for q in ["w1", "w2", "w3"] {
        declare(&mut tb, c, q);
        assert!(channel_error(&bind(&mut tb, c, q, "rpc", "")).is_none(), "{q}");
    }
    for i in 0..300 {
        tb.publish(c, "rpc", "any key", format!("m{i}").as_bytes());
    }
    let counts = ["w1", "w2", "w3"].map(|q| ready(&tb, q));
    assert_eq!(counts.iter().sum::<usize>(), 300, "each message in exactly one queue: {counts:?}");
    assert!(counts.iter().all(|n| *n >= 50), "spread over the bound queues: {counts:?}");

    let refused = |effects: &[Effect]| channel_error(effects).map(|e| (e.reply_code, e.reply_text));
    let c = tb.channel();
    assert_eq!(
        refused(&bind(&mut tb, c, "w1", "rpc", "k")),
        Some((406, "PRECONDITION_FAILED - Non empty binding 'k' key not permitted".to_owned()))
    );
    let c = tb.channel();
    let quorum = FieldTable::from_entries([("x-queue-type", FieldValue::LongStr("quorum".into()))]);
    declare_with(
        &mut tb,
        c,
        QueueDeclare { queue: short("qq"), durable: true, arguments: quorum, ..Default::default() },
    );
    assert_eq!(
        refused(&bind(&mut tb, c, "qq", "rpc", "")),
        Some((
            406,
            "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange type"
                .to_owned()
        ))
    );
    let c = tb.channel();
    declare_exchange(&mut tb, c, "downstream", "fanout");
    let to_exchange = ExchangeBind {
        destination: short("downstream"),
        source: short("rpc"),
        routing_key: short(""),
        ..Default::default()
    };
    assert_eq!(
        refused(&tb.call(c, to_exchange)),
        Some((406, "PRECONDITION_FAILED - Destination not found".to_owned()))
    );
}

/// A connection publishing the same exchange and key again is routed from its cached route
/// (`route_cache.rs`), and every change to what routing reads shows at the next publish: a
/// binding added or removed, a queue deleted and declared again, an exchange declared again as
/// another kind or as internal, a policy's alternate exchange. The exchange counts every publish,
/// from the cache too.
#[test]
fn the_same_route_published_again_follows_every_topology_change() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    let admin = tb.channel();
    declare_exchange(&mut tb, admin, "x", "direct");
    for q in ["a", "b", "ae"] {
        declare(&mut tb, admin, q);
    }
    let publish = |tb: &mut TestBroker| tb.publish(c, "x", "k", b"m");
    let counts = |tb: &TestBroker| (ready(tb, "a"), ready(tb, "b"), ready(tb, "ae"));
    bind(&mut tb, admin, "a", "x", "k");
    publish(&mut tb);
    publish(&mut tb);
    assert_eq!(counts(&tb), (2, 0, 0));
    bind(&mut tb, admin, "b", "x", "k");
    publish(&mut tb);
    assert_eq!(counts(&tb), (3, 1, 0), "a binding added");
    unbind(&mut tb, admin, "a", "x", "k");
    publish(&mut tb);
    assert_eq!(counts(&tb), (3, 2, 0), "a binding removed");
    tb.call(admin, QueueDelete { queue: short("b"), ..Default::default() });
    publish(&mut tb);
    declare(&mut tb, admin, "b");
    bind(&mut tb, admin, "b", "x", "k");
    publish(&mut tb);
    assert_eq!(counts(&tb), (3, 1, 0), "the queue declared again is another queue");
    tb.call(admin, ExchangeDelete { exchange: short("x"), ..Default::default() });
    declare_exchange(&mut tb, admin, "x", "fanout");
    bind(&mut tb, admin, "a", "x", "other");
    publish(&mut tb);
    assert_eq!(counts(&tb), (4, 1, 0), "the exchange declared again as a fanout");
    unbind(&mut tb, admin, "a", "x", "other");
    declare_exchange(&mut tb, admin, "ae-x", "fanout");
    bind(&mut tb, admin, "ae", "ae-x", "");
    publish(&mut tb);
    let policy = PolicySpec {
        name: "ae".to_owned(),
        pattern: "^x$".to_owned(),
        apply_to: "exchanges".to_owned(),
        priority: 0,
        definition: FieldTable::from_entries([("alternate-exchange", FieldValue::LongStr("ae-x".into()))]),
    };
    let now = tb.clock.now();
    tb.broker.set_policy(PolicyKind::User, "/", policy, now).expect("policy accepted");
    publish(&mut tb);
    assert_eq!(counts(&tb), (4, 1, 1), "a policy's alternate exchange");
    let stats = tb.broker.list_exchange_details("/");
    let x = stats.iter().find(|x| x.spec.name == "x").expect("x");
    assert_eq!((x.message_stats.publish_in, x.message_stats.publish_out), (3, 2), "the fanout's publishes");
    tb.call(admin, ExchangeDelete { exchange: short("x"), ..Default::default() });
    tb.call(
        admin,
        ExchangeDeclare { exchange: short("x"), kind: short("fanout"), internal: true, ..Default::default() },
    );
    let refused = channel_error(&publish(&mut tb)).expect("refused");
    assert_eq!(refused.reply_code, 403, "the exchange declared again as internal: {refused:?}");
}
