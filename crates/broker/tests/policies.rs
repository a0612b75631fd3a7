//! Policies and operator policies (semantics §6) with a manual clock: matching, precedence against
//! queue arguments, live re-application to existing queues, exchanges, and durability.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use hourglass_broker::policy::{PolicyError, PolicyKind, PolicySpec};
use hourglass_broker::{BrokerConfig, Effect, StoredBody};
use hourglass_testkit::{deliveries, short, Chan, TestBroker};
use hourglass_wire::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn int(v: i64) -> FieldValue {
    FieldValue::I64(v)
}

fn text(v: &str) -> FieldValue {
    FieldValue::LongStr(v.into())
}

fn spec(name: &str, pattern: &str, priority: i64, definition: &[(&str, FieldValue)]) -> PolicySpec {
    PolicySpec {
        name: name.to_owned(),
        pattern: pattern.to_owned(),
        apply_to: "all".to_owned(),
        priority,
        definition: FieldTable::from_entries(definition.iter().cloned()),
    }
}

/// Sets a policy in vhost `/` now; returns the effects it caused (deliveries, cancels).
fn set(tb: &mut TestBroker, kind: PolicyKind, spec: PolicySpec) -> Vec<Effect> {
    let now = tb.clock.now();
    tb.broker.set_policy(kind, "/", spec, now).expect("policy accepted");
    std::iter::from_fn(|| tb.broker.poll_effect()).collect()
}

fn clear(tb: &mut TestBroker, kind: PolicyKind, name: &str) {
    let now = tb.clock.now();
    tb.broker.clear_policy(kind, "/", name, now).expect("policy existed");
}

fn declare_args(tb: &mut TestBroker, c: Chan, name: &str, args: &[(&str, FieldValue)]) -> Vec<Effect> {
    let arguments = FieldTable::from_entries(args.iter().cloned());
    tb.call(c, QueueDeclare { queue: short(name), arguments, ..Default::default() })
}

fn ready(tb: &TestBroker, queue: &str) -> usize {
    tb.broker.queue_stats("/", queue).map_or(0, |s| s.messages_ready)
}

/// Queue "dlq" bound to fanout exchange "dlx".
fn dead_letter_target(tb: &mut TestBroker, c: Chan) {
    declare_exchange(tb, c, "dlx", "fanout");
    declare(tb, c, "dlq");
    bind(tb, c, "dlq", "dlx", "");
}

/// semantics §6 + §1: a 1000 ms message-ttl policy with a dead-letter-exchange policy dead-letters
/// a message at exactly 1000 ms, not a millisecond before.
#[test]
fn ttl_policy_dead_letters_at_exactly_its_deadline() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dead_letter_target(&mut tb, c);
    set(
        &mut tb,
        PolicyKind::User,
        spec("ttl", "^work$", 0, &[("message-ttl", int(1000)), ("dead-letter-exchange", text("dlx"))]),
    );
    declare(&mut tb, c, "work");
    tb.publish(c, "", "work", b"m");
    tb.advance(ms(999));
    assert_eq!((ready(&tb, "work"), ready(&tb, "dlq")), (1, 0));
    tb.advance(ms(1));
    assert_eq!((ready(&tb, "work"), ready(&tb, "dlq")), (0, 1));
}

/// semantics §6: an operator policy's max-length 5 beats a user policy's 10 (the lower wins).
#[test]
fn operator_max_length_beats_a_higher_user_policy() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    set(&mut tb, PolicyKind::User, spec("user", "^q$", 0, &[("max-length", int(10))]));
    set(&mut tb, PolicyKind::Operator, spec("cap", "^q$", 0, &[("max-length", int(5))]));
    declare(&mut tb, c, "q");
    for _ in 0..12 {
        tb.publish(c, "", "q", b"m");
    }
    assert_eq!(ready(&tb, "q"), 5);
}

/// semantics §6, as RabbitMQ's classic queues: for message-ttl the lowest of argument, policy and
/// operator policy applies. An argument of 2000 ms under a 1000 ms policy expires at 1000 ms
/// (measured on RabbitMQ 3.10); a 500 ms operator policy beats the argument too.
#[test]
fn lowest_ttl_of_argument_policy_and_operator_policy_applies() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    set(&mut tb, PolicyKind::User, spec("ttl", "^a", 0, &[("message-ttl", int(1000))]));
    declare_args(&mut tb, c, "a.arg-wins", &[("x-message-ttl", int(800))]);
    declare_args(&mut tb, c, "a.policy-wins", &[("x-message-ttl", int(2000))]);
    tb.publish(c, "", "a.arg-wins", b"m");
    tb.publish(c, "", "a.policy-wins", b"m");
    tb.advance(ms(800));
    assert_eq!((ready(&tb, "a.arg-wins"), ready(&tb, "a.policy-wins")), (0, 1));
    tb.advance(ms(200));
    assert_eq!(ready(&tb, "a.policy-wins"), 0);

    set(&mut tb, PolicyKind::Operator, spec("cap", "^a", 0, &[("message-ttl", int(500))]));
    tb.publish(c, "", "a.policy-wins", b"m");
    tb.advance(ms(499));
    assert_eq!(ready(&tb, "a.policy-wins"), 1);
    tb.advance(ms(1));
    assert_eq!(ready(&tb, "a.policy-wins"), 0);
}

/// semantics §6: a dead-letter-exchange argument beats the policy's (RabbitMQ's res_arg).
#[test]
fn dead_letter_exchange_argument_beats_the_policy() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dead_letter_target(&mut tb, c);
    declare_exchange(&mut tb, c, "other", "fanout");
    declare(&mut tb, c, "other-q");
    bind(&mut tb, c, "other-q", "other", "");
    set(&mut tb, PolicyKind::User, spec("dl", "^src", 0, &[("dead-letter-exchange", text("other"))]));
    declare_args(&mut tb, c, "src", &[("x-dead-letter-exchange", text("dlx")), ("x-message-ttl", int(10))]);
    tb.publish(c, "", "src", b"m");
    tb.advance(ms(10));
    assert_eq!((ready(&tb, "dlq"), ready(&tb, "other-q")), (1, 0));
}

/// RabbitMQ applies a policy change to existing queues at once: a lower max-length drops the
/// oldest ready messages (dead-lettered as `maxlen`); clearing it lifts the limit again.
#[test]
fn a_new_max_length_policy_trims_an_existing_queue_at_once() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    dead_letter_target(&mut tb, c);
    declare_args(&mut tb, c, "q", &[("x-dead-letter-exchange", text("dlx"))]);
    for body in [b"1", b"2", b"3", b"4", b"5"] {
        tb.publish(c, "", "q", body);
    }
    set(&mut tb, PolicyKind::User, spec("short", "^q$", 0, &[("max-length", int(2))]));
    assert_eq!((ready(&tb, "q"), ready(&tb, "dlq")), (2, 3));
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    assert_eq!(bodies_of_get(&got), b"4".to_vec(), "the oldest went first");
    clear(&mut tb, PolicyKind::User, "short");
    for _ in 0..5 {
        tb.publish(c, "", "q", b"m");
    }
    assert_eq!(ready(&tb, "q"), 6);
}

/// Under reject-publish a lowered max-length keeps what is there (RabbitMQ's maybe_drop_head
/// drops only under drop-head) and refuses publishes until the queue is below the limit.
#[test]
fn a_lower_limit_under_reject_publish_keeps_messages_and_refuses_new_ones() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-overflow", text("reject-publish"))]);
    for _ in 0..4 {
        tb.publish(c, "", "q", b"m");
    }
    set(&mut tb, PolicyKind::User, spec("short", "^q$", 0, &[("max-length", int(2))]));
    assert_eq!(ready(&tb, "q"), 4);
    tb.publish(c, "", "q", b"refused");
    assert_eq!(ready(&tb, "q"), 4);
}

fn bodies_of_get(effects: &[Effect]) -> Vec<u8> {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Send { method, content: Some(m), .. } if matches!(**method, Method::BasicGetOk(_)) => {
                Some(m.body.to_vec())
            }
            _ => None,
        })
        .expect("basic.get-ok")
}

/// As in RabbitMQ (measured on 3.10), a new message-ttl applies to messages that become ready
/// afterwards; the ones already ready keep the deadline they entered with.
#[test]
fn a_new_ttl_policy_applies_to_messages_entering_afterwards() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.publish(c, "", "q", b"old");
    set(&mut tb, PolicyKind::User, spec("ttl", "^q$", 0, &[("message-ttl", int(500))]));
    tb.publish(c, "", "q", b"new");
    tb.advance(ms(500));
    assert_eq!(ready(&tb, "q"), 1);
    let got = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    assert_eq!(bodies_of_get(&got), b"old".to_vec());
}

/// The highest-priority match applies; clearing it falls back to the next one; a queue
/// declared later is matched too.
#[test]
fn priority_picks_one_policy_and_clearing_falls_back() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    set(&mut tb, PolicyKind::User, spec("wide", ".*", 0, &[("max-length", int(3))]));
    set(&mut tb, PolicyKind::User, spec("narrow", "^jobs\\.", 5, &[("max-length", int(1))]));
    declare(&mut tb, c, "jobs.a");
    let details = tb.broker.list_queue_details();
    assert_eq!(details[0].policies.policy.as_deref(), Some("narrow"));
    assert_eq!(details[0].policies.effective_definition.get("max-length").and_then(|v| v.as_i64()), Some(1));
    for _ in 0..4 {
        tb.publish(c, "", "jobs.a", b"m");
    }
    assert_eq!(ready(&tb, "jobs.a"), 1);
    clear(&mut tb, PolicyKind::User, "narrow");
    for _ in 0..4 {
        tb.publish(c, "", "jobs.a", b"m");
    }
    assert_eq!(ready(&tb, "jobs.a"), 3);
    assert_eq!(tb.broker.list_queue_details()[0].policies.policy.as_deref(), Some("wide"));
}

/// Hourglass's settings by policy: a delivery-delay policy holds new messages back.
#[test]
fn delivery_delay_policy_holds_new_messages() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    set(&mut tb, PolicyKind::User, spec("delay", "^slow$", 0, &[("delivery-delay", int(300))]));
    declare(&mut tb, c, "slow");
    consume(&mut tb, c, "slow", "t", true);
    assert!(deliveries(&tb.publish(c, "", "slow", b"m")).is_empty());
    assert!(deliveries(&tb.advance(ms(299))).is_empty());
    assert_eq!(deliveries(&tb.advance(ms(1))).len(), 1);
}

/// An expires policy deletes an unused queue that long after the policy was set (RabbitMQ
/// re-arms the expiry timer when the value changes).
#[test]
fn expires_policy_counts_from_when_it_applies() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "idle");
    tb.advance(ms(10_000));
    set(&mut tb, PolicyKind::Operator, spec("gc", "^idle$", 0, &[("expires", int(1000))]));
    tb.advance(ms(999));
    assert!(tb.broker.queue_stats("/", "idle").is_some());
    tb.advance(ms(1));
    assert!(tb.broker.queue_stats("/", "idle").is_none());
}

/// An alternate-exchange policy catches what an exchange cannot route; listings name it.
#[test]
fn alternate_exchange_policy_applies_to_exchanges() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_exchange(&mut tb, c, "ae", "fanout");
    declare(&mut tb, c, "lost");
    bind(&mut tb, c, "lost", "ae", "");
    declare_exchange(&mut tb, c, "orders", "direct");
    let mut ae = spec("ae", "^orders$", 0, &[("alternate-exchange", text("ae"))]);
    ae.apply_to = "exchanges".to_owned();
    set(&mut tb, PolicyKind::User, ae);
    tb.publish(c, "orders", "nowhere", b"m");
    assert_eq!(ready(&tb, "lost"), 1);
    let listed = tb.broker.list_exchange_details("/");
    let orders = listed.iter().find(|x| x.spec.name == "orders").unwrap();
    assert_eq!(orders.policies.policy.as_deref(), Some("ae"));
    assert!(tb.broker.list_queue_details().iter().all(|q| q.policies.policy.is_none()), "exchanges only");
}

/// Bad policies are refused with RabbitMQ's reasons; clearing a missing one is NotFound.
#[test]
fn invalid_policies_are_refused() {
    let mut tb = TestBroker::new();
    let now = tb.clock.now();
    let err = tb.broker.set_policy(PolicyKind::User, "/", spec("p", ".*", 0, &[("foo", int(1))]), now);
    assert_eq!(
        err.unwrap_err().to_string(),
        "Validation failed\n\n[{<<\"foo\">>,1}] are not recognised policy settings\n"
    );
    let err = tb.broker.set_policy(
        PolicyKind::Operator,
        "/",
        spec("p", ".*", 0, &[("dead-letter-exchange", text("x"))]),
        now,
    );
    assert!(matches!(err, Err(PolicyError::Invalid(_))));
    let err = tb.broker.set_policy(PolicyKind::User, "nope", spec("p", ".*", 0, &[("expires", int(1))]), now);
    assert_eq!(err, Err(PolicyError::NoVhost("nope".to_owned())));
    assert!(matches!(
        tb.broker.clear_policy(PolicyKind::User, "/", "p", now),
        Err(PolicyError::NotFound { .. })
    ));
    assert!(tb.broker.list_policies(PolicyKind::User, None).is_empty());
}

/// Policies are durable definitions: after a restart they are back and applied to the restored
/// queues (the stored definitions carry them).
#[test]
fn policies_survive_a_restart() {
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, ..Default::default() });
    set(&mut tb, PolicyKind::User, spec("ttl", "^q$", 3, &[("message-ttl", int(1000))]));
    set(&mut tb, PolicyKind::Operator, spec("cap", ".*", 0, &[("max-length", int(2))]));
    let mut stored = StoredModel::default();
    for op in std::iter::from_fn(|| tb.broker.poll_store_op()) {
        stored.apply(&op.op, |_, _, record| StoredBody::Record(record.clone()));
    }

    let mut restored = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    let now = restored.clock.now();
    let report = restored.broker.restore(stored.definitions(), BTreeMap::new(), now);
    assert_eq!(report.policies, 2);
    let listed = restored.broker.list_policies(PolicyKind::User, Some("/"));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].spec.priority, 3);
    let queue = &restored.broker.list_queue_details()[0];
    assert_eq!(queue.policies.policy.as_deref(), Some("ttl"));
    assert_eq!(queue.policies.operator_policy.as_deref(), Some("cap"));
    let c = restored.channel();
    for _ in 0..3 {
        restored.publish(c, "", "q", b"m");
    }
    assert_eq!(ready(&restored, "q"), 2);
    restored.advance(ms(1000));
    assert_eq!(ready(&restored, "q"), 0);
}

/// Issue 39: RabbitMQ 4.3's delayed retry as policy keys (`delayed-retry-type`, `-min`, `-max`):
/// a rejected message waits as the policy says; the policy's type wins over the argument's; a
/// policy naming a type without a minimum, or a maximum below it, is refused in RabbitMQ's words.
#[test]
fn delayed_retry_policy_holds_returns_back() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(
        &mut tb,
        c,
        "q",
        &[("x-delayed-retry-type", text("returned")), ("x-delayed-retry-min", int(2_000))],
    );
    let definition = [("delayed-retry-type", text("all")), ("delayed-retry-min", int(300))];
    set(&mut tb, PolicyKind::User, spec("retry", "^q$", 0, &definition));
    tb.call(c, BasicConsume { queue: short("q"), consumer_tag: short("w"), ..Default::default() });
    let tag = deliveries(&tb.publish(c, "", "q", b"x"))[0].method.delivery_tag;
    assert!(
        deliveries(&tb.call(c, BasicReject { delivery_tag: tag, requeue: true })).is_empty(),
        "all, from the policy"
    );
    assert!(deliveries(&tb.advance(ms(299))).is_empty(), "the lower minimum: the policy's 300 ms");
    assert_eq!(deliveries(&tb.advance(ms(1))).len(), 1);
    let now = tb.clock.now();
    let mut refused = |definition: &[(&str, FieldValue)]| match tb.broker.set_policy(
        PolicyKind::User,
        "/",
        spec("bad", ".*", 0, definition),
        now,
    ) {
        Err(PolicyError::Invalid(why)) => why,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        refused(&[("delayed-retry-type", text("all"))]),
        "delayed-retry-min is required when delayed-retry-type is all"
    );
    assert_eq!(
        refused(&[
            ("delayed-retry-type", text("all")),
            ("delayed-retry-min", int(500)),
            ("delayed-retry-max", int(10))
        ]),
        "delayed-retry-max (10) must not be smaller than delayed-retry-min (500)"
    );
}

/// Issue 39: `consumer-timeout` as a policy key (RabbitMQ 4.3): the lower of the queue's argument
/// and the policy runs; an operator policy may not set it (RabbitMQ keeps it to user policies).
#[test]
fn consumer_timeout_policy_takes_the_lower_value() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare_args(&mut tb, c, "q", &[("x-consumer-timeout", int(5_000))]);
    set(&mut tb, PolicyKind::User, spec("ct", "^q$", 0, &[("consumer-timeout", int(2_000))]));
    tb.call(c, BasicConsume { queue: short("q"), consumer_tag: short("w"), ..Default::default() });
    tb.publish(c, "", "q", b"x");
    let cancelled = |effects: &[Effect]| {
        hourglass_testkit::methods(effects).iter().any(|m| matches!(m, Method::BasicCancel(_)))
    };
    assert!(!cancelled(&tb.advance(ms(1_999))));
    assert!(cancelled(&tb.advance(ms(1))), "the policy's 2 s, lower than the argument's 5 s");
    let now = tb.clock.now();
    match tb.broker.set_policy(
        PolicyKind::Operator,
        "/",
        spec("op", ".*", 0, &[("consumer-timeout", int(1))]),
        now,
    ) {
        Err(PolicyError::Invalid(why)) => assert!(why.contains("consumer-timeout"), "{why}"),
        other => panic!("{other:?}"),
    }
    let refused = tb.broker.set_policy(
        PolicyKind::User,
        "/",
        spec("neg", ".*", 0, &[("consumer-timeout", int(-5))]),
        now,
    );
    assert!(
        matches!(refused, Err(PolicyError::Invalid(why)) if why.starts_with("-5 is not a valid consumer timeout"))
    );
}
