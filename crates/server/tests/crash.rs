//! Crash tests of the broker and the store together (issue 6 "done"): a workload of publishes
//! with confirms, acks, dead-lettering, delays and requeues runs through `Broker` + `apply_batch`
//! over `MemStorage`; before every durability event the storage image is captured. Each image is
//! crashed (unsynced bytes lost, kept, or torn), recovered (`Store::open` + `Broker::restore`),
//! and checked: every confirmed message is there exactly once (or its ack was durable), nothing
//! acked-and-durable comes back, delayed messages are still delayed, dead-lettered ones are in
//! their DLQ.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hourglass_broker::{BrokerConfig, Effect, SequencedOp};
use hourglass_server::catalog_file::{open_catalog, DamagedDefinitions};
use hourglass_server::persistence::{apply_batch, restore_into};
use hourglass_store::catalog::Catalog;
use hourglass_store::{Crash, MemImage, MemStorage, Store, StoreConfig};
use hourglass_testkit::{methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// Small segments, so the workload rotates across several.
const SEGMENT_BYTES: u64 = 2048;
const DELAY_MS: i64 = 60_000;

/// What the workload had promised at one crash point.
#[derive(Clone, Debug, Default)]
struct Expect {
    /// Bodies confirmed (basic.ack released) before this point: must survive.
    confirmed: BTreeSet<String>,
    /// Bodies the client acked (the ack may or may not be durable yet): may be gone.
    ack_sent: BTreeSet<String>,
    /// Bodies whose ack (Settle) was durable before this point: must not come back.
    acked: BTreeSet<String>,
    /// Bodies whose rejection was durable before this point: in the DLQ, not in `q`.
    dead_lettered: BTreeSet<String>,
}

struct Point {
    image: MemImage,
    expect: Expect,
}

struct Workload {
    tb: TestBroker,
    storage: MemStorage,
    store: Store,
    catalog: Mutex<Catalog>,
    durable: u64,
    /// The op_seq that must be durable for each body's ack / rejection to count.
    acked_at: BTreeMap<String, u64>,
    rejected_at: BTreeMap<String, u64>,
    /// Confirm tag → body, for the publishing channel.
    tags: BTreeMap<u64, String>,
    next_tag: u64,
    expect: Expect,
    points: Vec<Point>,
}

impl Workload {
    fn new() -> Self {
        let storage = MemStorage::new();
        let config = StoreConfig { segment_bytes_target: SEGMENT_BYTES, ..StoreConfig::default() };
        let (store, _) = Store::open(Arc::new(storage.clone()), config).unwrap();
        let catalog = open_catalog(Arc::new(storage.clone()), DamagedDefinitions::Refuse, 0).unwrap().catalog;
        storage.record_sync_points();
        let tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
        Workload {
            tb,
            storage,
            store,
            catalog: Mutex::new(catalog),
            durable: 0,
            acked_at: BTreeMap::new(),
            rejected_at: BTreeMap::new(),
            tags: BTreeMap::new(),
            next_tag: 1,
            expect: Expect::default(),
            points: Vec::new(),
        }
    }

    /// Writes the ops of the last command as one batch (one commit), capturing every image on
    /// the way, then releases what became durable. Returns the batch's last op_seq (0: none).
    fn sync(&mut self, effects: &mut Vec<Effect>) -> u64 {
        let ops: Vec<SequencedOp> = std::iter::from_fn(|| self.tb.broker.poll_store_op()).collect();
        let Some(last) = ops.last().map(|o| o.op_seq) else { return 0 };
        apply_batch(&mut self.store, &self.catalog, &ops).unwrap();
        for image in self.storage.take_images() {
            self.points.push(Point { image, expect: self.expect.clone() });
        }
        self.durable = last;
        let now = self.tb.clock.now();
        self.tb.broker.handle_persisted(last, now);
        effects.extend(std::iter::from_fn(|| self.tb.broker.poll_effect()));
        self.note_durable(effects);
        last
    }

    fn note_durable(&mut self, effects: &[Effect]) {
        for method in methods(effects) {
            if let Method::BasicAck(ack) = method {
                if let Some(body) = self.tags.get(&ack.delivery_tag) {
                    self.expect.confirmed.insert(body.clone());
                }
            }
        }
        for (body, at) in &self.acked_at {
            if *at <= self.durable {
                self.expect.acked.insert(body.clone());
            }
        }
        for (body, at) in &self.rejected_at {
            if *at <= self.durable {
                self.expect.dead_lettered.insert(body.clone());
            }
        }
    }

    fn call(&mut self, chan: Chan, method: impl Into<Method>) -> (Vec<Effect>, u64) {
        let mut effects = self.tb.call(chan, method);
        let last = self.sync(&mut effects);
        (effects, last)
    }

    fn publish(&mut self, chan: Chan, queue: &str, body: String) {
        let properties = BasicProperties { delivery_mode: Some(2), ..Default::default() };
        self.tags.insert(self.next_tag, body.clone());
        self.next_tag += 1;
        let mut effects = self.tb.publish_with(chan, "", queue, properties, body.as_bytes(), false);
        self.sync(&mut effects);
    }

    /// basic.get with ack on `queue`; returns (delivery tag, body).
    fn get(&mut self, chan: Chan, queue: &str) -> Option<(u64, String)> {
        let (effects, _) = self.call(chan, BasicGet { queue: short(queue), no_ack: false });
        effects.iter().find_map(|e| match e {
            Effect::Send { method, content: Some(m), .. } => match method.as_ref() {
                Method::BasicGetOk(ok) => {
                    Some((ok.delivery_tag, String::from_utf8_lossy(&m.body).into_owned()))
                }
                _ => None,
            },
            _ => None,
        })
    }
}

fn declare(w: &mut Workload, chan: Chan, name: &str, arguments: FieldTable) {
    let (effects, _) =
        w.call(chan, QueueDeclare { queue: short(name), durable: true, arguments, ..Default::default() });
    assert!(matches!(methods(&effects).as_slice(), [Method::QueueDeclareOk(_)]), "{effects:?}");
}

/// The workload: publishes with confirms into a DLX'd queue and a delay queue; acks, rejects
/// (dead-letters) and requeues some; the clock moves between steps.
fn run_workload() -> Vec<Point> {
    let mut w = Workload::new();
    let admin = w.tb.channel();
    declare(&mut w, admin, "dlq", FieldTable::new());
    let dlx = FieldTable::from_entries([
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]);
    declare(&mut w, admin, "q", dlx);
    let delay = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(DELAY_MS))]);
    declare(&mut w, admin, "later", delay);
    let publisher = w.tb.channel();
    w.call(publisher, ConfirmSelect { nowait: false });
    let consumer = w.tb.channel();
    for i in 0..24 {
        w.publish(publisher, "q", format!("q-{i:02}-{}", "x".repeat(i * 7)));
        if i % 4 == 0 {
            w.publish(publisher, "later", format!("later-{i:02}"));
        }
        if i % 3 == 2 {
            // Take the oldest message of q and ack, reject or requeue it.
            let Some((tag, body)) = w.get(consumer, "q") else { continue };
            match i % 9 {
                2 => {
                    w.expect.ack_sent.insert(body.clone());
                    let (_, at) = w.call(consumer, BasicAck { delivery_tag: tag, multiple: false });
                    w.acked_at.insert(body, at);
                }
                5 => {
                    let (_, at) = w.call(consumer, BasicReject { delivery_tag: tag, requeue: false });
                    w.rejected_at.insert(body, at);
                }
                _ => {
                    w.call(consumer, BasicNack { delivery_tag: tag, multiple: false, requeue: true });
                }
            }
        }
        let mut effects = w.tb.advance(Duration::from_millis(7));
        w.sync(&mut effects);
    }
    w.points
}

/// What a crashed image recovers to: bodies of q and dlq in order; later's delayed count and,
/// once the delay has passed, its bodies.
struct Recovered {
    q: Vec<String>,
    dlq: Vec<String>,
    later_delayed: usize,
    later: Vec<String>,
}

fn get_all(tb: &mut TestBroker, chan: Chan, queue: &str) -> Vec<String> {
    if tb.broker.queue_stats("/", queue).is_none() {
        return Vec::new();
    }
    let mut bodies = Vec::new();
    loop {
        let effects = tb.call(chan, BasicGet { queue: short(queue), no_ack: true });
        let body = effects.iter().find_map(|e| match e {
            Effect::Send { method, content: Some(m), .. } if matches!(**method, Method::BasicGetOk(_)) => {
                Some(String::from_utf8_lossy(&m.body).into_owned())
            }
            _ => None,
        });
        match body {
            Some(body) => bodies.push(body),
            None => return bodies,
        }
    }
}

fn recover(image: &MemImage, crash: Crash) -> Recovered {
    let storage = image.crash(crash);
    let config = StoreConfig { segment_bytes_target: SEGMENT_BYTES, ..StoreConfig::default() };
    let (mut store, recovered) = Store::open(Arc::new(storage.clone()), config).expect("recovers");
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    tb.clock.advance(Duration::from_millis(1_000));
    let now = tb.clock.now();
    let definitions = open_catalog(Arc::new(storage.clone()), DamagedDefinitions::Refuse, 0)
        .expect("definitions read")
        .definitions;
    let restored = restore_into(&mut tb.broker, &mut store, definitions, recovered, now)
        .expect("the recovered messages read back");
    assert!(restored.damaged.is_empty(), "{:?}", restored.damaged);
    let chan = tb.channel();
    let q = get_all(&mut tb, chan, "q");
    let dlq = get_all(&mut tb, chan, "dlq");
    let later_delayed = tb.broker.queue_stats("/", "later").map_or(0, |s| s.messages_delayed);
    tb.advance(Duration::from_millis(DELAY_MS as u64));
    let later = get_all(&mut tb, chan, "later");
    Recovered { q, dlq, later_delayed, later }
}

fn check(point: &Point, crash: Crash, at: usize) {
    let r = recover(&point.image, crash);
    let e = &point.expect;
    let ctx = format!("crash point {at} ({crash:?})");
    for (name, bodies) in [("q", &r.q), ("dlq", &r.dlq), ("later", &r.later)] {
        let unique: BTreeSet<&String> = bodies.iter().collect();
        assert_eq!(unique.len(), bodies.len(), "{ctx}: a message came back twice in {name}: {bodies:?}");
    }
    assert_eq!(r.later_delayed, r.later.len(), "{ctx}: recovered delayed messages not delayed");
    let all: BTreeSet<&String> = r.q.iter().chain(&r.dlq).chain(&r.later).collect();
    for body in &e.confirmed {
        // Rejected ones too: dead-lettering is at-least-once, so they are in q or in the DLQ.
        assert!(e.ack_sent.contains(body) || all.contains(body), "{ctx}: confirmed message {body} lost");
    }
    for body in &e.acked {
        assert!(!all.contains(body), "{ctx}: acked message {body} came back");
    }
    for body in &e.dead_lettered {
        assert!(r.dlq.contains(body), "{ctx}: dead-lettered message {body} not in the DLQ");
        assert!(!r.q.contains(body), "{ctx}: dead-lettered message {body} still in its source");
    }
}

/// At every sync point of the workload, whatever the crash keeps of unsynced bytes, the
/// recovered broker keeps every promise made before it.
#[test]
fn every_sync_point_keeps_every_promise() {
    let points = run_workload();
    assert!(points.len() > 50, "only {} sync points", points.len());
    for (at, point) in points.iter().enumerate() {
        for crash in [
            Crash::LoseUnsynced,
            Crash::KeepUnsynced,
            Crash::Torn { bytes: 17, garbled: false },
            Crash::Torn { bytes: 40, garbled: true },
        ] {
            check(point, crash, at);
        }
    }
}
