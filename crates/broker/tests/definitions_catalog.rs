//! The durable definitions are written one change at a time (the store's catalog): whatever a
//! client declares, binds, unbinds and deletes — auto-deleted exchanges and exchange-to-exchange
//! bindings included — the catalog the changes build restores exactly the durable definitions
//! the broker had, and a declare writes only its own entries however many exist.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use hourglass_broker::policy::{PolicyKind, PolicySpec};
use hourglass_broker::{Broker, BrokerConfig, Definitions, StoreOp, StoredBody};
use hourglass_testkit::{short, TestBroker};
use hourglass_wire::*;
use proptest::prelude::*;

fn durable_broker() -> TestBroker {
    TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() })
}

/// Applies every op the broker emitted to `stored`; how many there were.
fn drain(tb: &mut TestBroker, stored: &mut StoredModel) -> usize {
    let ops: Vec<_> = std::iter::from_fn(|| tb.broker.poll_store_op()).collect();
    for op in &ops {
        stored.apply(&op.op, |_, _, record| StoredBody::Record(record.clone()));
    }
    if let Some(last) = ops.last() {
        let now = tb.clock.now();
        tb.broker.handle_persisted(last.op_seq, now);
    }
    ops.len()
}

/// What a restart must bring back of `vhost`: durable exchanges (not the built-in ones) with
/// their flags, durable queues, bindings between durable ends, policies.
fn durable_state(broker: &Broker, vhost: &str) -> String {
    let exchanges: BTreeSet<String> = broker
        .list_exchanges(vhost)
        .into_iter()
        .filter(|x| x.durable && !x.name.is_empty() && !x.name.as_bytes().starts_with(b"amq."))
        .map(|x| format!("{} {:?} ad={} int={}", x.name, x.kind, x.auto_delete, x.internal))
        .collect();
    let queues: BTreeMap<String, bool> = broker
        .list_queues()
        .into_iter()
        .filter(|q| q.vhost == vhost && q.durable)
        .map(|q| (q.name, q.auto_delete))
        .collect();
    let durable_exchange =
        |name: &str| broker.list_exchanges(vhost).iter().any(|x| x.name == *name && x.durable);
    let bindings: BTreeSet<String> = broker
        .list_bindings(vhost)
        .into_iter()
        .filter(|b| durable_exchange(&b.source))
        .filter(|b| match b.destination_kind {
            "queue" => queues.contains_key(&b.destination),
            _ => durable_exchange(&b.destination),
        })
        .map(|b| format!("{} -> {} {} [{}]", b.source, b.destination_kind, b.destination, b.routing_key))
        .collect();
    let policies: Vec<String> = broker
        .list_policies(PolicyKind::User, Some(vhost))
        .into_iter()
        .map(|p| format!("{} {}", p.spec.name, p.spec.pattern))
        .collect();
    format!("exchanges {exchanges:?}\nqueues {queues:?}\nbindings {bindings:?}\npolicies {policies:?}")
}

fn restored(stored: &StoredModel) -> TestBroker {
    let mut tb = durable_broker();
    let now = tb.clock.now();
    tb.broker.add_vhost("v2");
    tb.broker.restore(stored.definitions(), BTreeMap::new(), now);
    tb
}

#[derive(Clone, Debug)]
enum Op {
    DeclareQueue { q: u8, durable: bool },
    DeleteQueue { q: u8 },
    DeclareExchange { x: u8, durable: bool, auto_delete: bool },
    DeleteExchange { x: u8 },
    Bind { x: u8, q: u8, key: u8 },
    Unbind { x: u8, q: u8, key: u8 },
    BindExchange { x: u8, to: u8, key: u8 },
    UnbindExchange { x: u8, to: u8, key: u8 },
    SetPolicy { p: u8, pattern: u8 },
    ClearPolicy { p: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let n = || 0u8..2;
    prop_oneof![
        (n(), any::<bool>()).prop_map(|(q, durable)| Op::DeclareQueue { q, durable }),
        n().prop_map(|q| Op::DeleteQueue { q }),
        (n(), any::<bool>(), any::<bool>()).prop_map(|(x, durable, auto_delete)| Op::DeclareExchange {
            x,
            durable,
            auto_delete
        }),
        n().prop_map(|x| Op::DeleteExchange { x }),
        (n(), n(), 0u8..2).prop_map(|(x, q, key)| Op::Bind { x, q, key }),
        (n(), n(), 0u8..2).prop_map(|(x, q, key)| Op::Unbind { x, q, key }),
        (n(), n(), 0u8..2).prop_map(|(x, to, key)| Op::BindExchange { x, to, key }),
        (n(), n(), 0u8..2).prop_map(|(x, to, key)| Op::UnbindExchange { x, to, key }),
        (0u8..2, 0u8..2).prop_map(|(p, pattern)| Op::SetPolicy { p, pattern }),
        (0u8..2).prop_map(|p| Op::ClearPolicy { p }),
    ]
}

/// Runs `op` on a fresh channel (a refused one only closes that channel).
fn run(tb: &mut TestBroker, op: &Op) {
    let c = tb.channel();
    let q = |i: &u8| short(&format!("q{i}"));
    let x = |i: &u8| short(&format!("x{i}"));
    let key = |i: &u8| short(&format!("k{i}"));
    let method: Method = match op {
        Op::DeclareQueue { q: i, durable } => {
            QueueDeclare { queue: q(i), durable: *durable, ..Default::default() }.into()
        }
        Op::DeleteQueue { q: i } => QueueDelete { queue: q(i), ..Default::default() }.into(),
        Op::DeclareExchange { x: i, durable, auto_delete } => ExchangeDeclare {
            exchange: x(i),
            kind: short("direct"),
            durable: *durable,
            auto_delete: *auto_delete,
            ..Default::default()
        }
        .into(),
        Op::DeleteExchange { x: i } => ExchangeDelete { exchange: x(i), ..Default::default() }.into(),
        Op::Bind { x: i, q: j, key: k } => {
            QueueBind { queue: q(j), exchange: x(i), routing_key: key(k), ..Default::default() }.into()
        }
        Op::Unbind { x: i, q: j, key: k } => {
            QueueUnbind { queue: q(j), exchange: x(i), routing_key: key(k), ..Default::default() }.into()
        }
        Op::BindExchange { x: i, to, key: k } => {
            ExchangeBind { destination: x(to), source: x(i), routing_key: key(k), ..Default::default() }
                .into()
        }
        Op::UnbindExchange { x: i, to, key: k } => {
            ExchangeUnbind { destination: x(to), source: x(i), routing_key: key(k), ..Default::default() }
                .into()
        }
        Op::SetPolicy { p, pattern } => {
            let spec = PolicySpec {
                name: format!("p{p}"),
                pattern: format!("^q{pattern}$"),
                apply_to: "queues".into(),
                priority: i64::from(*p),
                definition: FieldTable::from_entries([("max-length", FieldValue::I64(10))]),
            };
            let now = tb.clock.now();
            tb.broker.set_policy(PolicyKind::User, "/", spec, now).expect("policy accepted");
            return;
        }
        Op::ClearPolicy { p } => {
            let now = tb.clock.now();
            let _ = tb.broker.clear_policy(PolicyKind::User, "/", &format!("p{p}"), now);
            return;
        }
    };
    tb.call(c, method);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After any sequence of changes, a broker restored from the catalog holds exactly the
    /// durable definitions the running broker holds.
    #[test]
    fn the_catalog_restores_exactly_the_durable_definitions(ops in prop::collection::vec(op(), 1..60)) {
        let mut tb = durable_broker();
        let mut stored = StoredModel::default();
        for op in &ops {
            run(&mut tb, op);
            drain(&mut tb, &mut stored);
        }
        let after = restored(&stored);
        prop_assert_eq!(durable_state(&after.broker, "/"), durable_state(&tb.broker, "/"));
    }
}

/// A durable declare writes its own entries only: the hundredth costs what the first did.
#[test]
fn a_declare_writes_only_its_own_entries() {
    let mut tb = durable_broker();
    let mut stored = StoredModel::default();
    let mut written = Vec::new();
    for i in 0..100 {
        let c = tb.channel();
        let queue = short(&format!("q{i}"));
        tb.call(c, QueueDeclare { queue: queue.clone(), durable: true, ..Default::default() });
        tb.call(c, QueueBind { queue, exchange: short("amq.direct"), ..Default::default() });
        written.push(drain(&mut tb, &mut stored));
    }
    assert!(written.iter().all(|n| *n == 3), "queue, next id, binding each time: {written:?}");
    assert_eq!(stored.catalog.len(), 1 + 100 * 2, "the next id and 100 × (queue, binding)");
}

/// Deleting a vhost removes everything stored under it and nothing of another vhost.
#[test]
fn a_deleted_vhost_takes_its_stored_definitions_with_it() {
    let mut tb = durable_broker();
    let mut stored = StoredModel::default();
    tb.broker.add_vhost("v2");
    let now = tb.clock.now();
    let policy = |name: &str| PolicySpec {
        name: name.into(),
        pattern: ".*".into(),
        apply_to: "queues".into(),
        priority: 0,
        definition: FieldTable::from_entries([("max-length", FieldValue::I64(10))]),
    };
    tb.broker.set_policy(PolicyKind::User, "v2", policy("gone"), now).unwrap();
    tb.broker.set_policy(PolicyKind::User, "/", policy("kept"), now).unwrap();
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("kept"), durable: true, ..Default::default() });
    drain(&mut tb, &mut stored);
    let before = stored.catalog.len();
    assert!(tb.broker.delete_vhost("v2", now));
    drain(&mut tb, &mut stored);
    assert_eq!(stored.catalog.len(), before - 1, "its policy");
    let definitions: Definitions = stored.definitions();
    let text = format!("{definitions:?}");
    assert!(!text.contains("\"v2\"") && text.contains("kept"), "{text}");
    assert!(std::iter::from_fn(|| tb.broker.poll_store_op()).all(|o| !matches!(o.op, StoreOp::Purge { .. })));
}
