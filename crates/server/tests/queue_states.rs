//! Queue states in checkpoints (ADR 0019, ADR 0021), the broker and the store together, while
//! the broker offers checkpoints with its queues' states after every few kilobytes of ops:
//! - delayed messages wait in the far tier and are cancelled;
//! - a ready backlog is paged out into runs while a poller takes, acks, holds and requeues
//!   messages at its head;
//! - the same in an SQS FIFO queue, its messages in three groups (issue 41: its state keeps
//!   them), received back over SQS.
//!
//! Before every durability event the storage image is captured; each image is crashed (unsynced
//! bytes lost, kept or torn), recovered (`Store::open` + `restore_into`, the states taken where
//! they can be) and checked: every confirmed message comes back exactly once (a delayed one
//! waiting until its due time, a ready one in queue order), none whose cancel or ack was durable
//! comes back, and many of the restarts take most messages from a state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hourglass_broker::queue::MemorySpillFiles;
use hourglass_broker::{BrokerConfig, Effect, PagingLimits, RestoreReport, SequencedOp};
use hourglass_server::catalog_file::{open_catalog, DamagedDefinitions};
use hourglass_server::persistence::{apply_batch, restore_into, StoreSource};
use hourglass_store::catalog::Catalog;
use hourglass_store::{Crash, MemImage, MemStorage, Storage, Store, StoreConfig};
use hourglass_testkit::{methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// Small segments, so that the workload rotates across many and checkpoints often.
const SEGMENT_BYTES: u64 = 8192;
const DELAY_MS: u64 = 3_600_000;
/// The FIFO workload's queue delay: every message becomes ready (with a new seq) after it.
const FIFO_DELAY_MS: u64 = 1;
/// Records per spill run.
const RUN_RECORDS: usize = 64;
/// Published in bulk first: several spill runs and a buffer.
const BULK_BATCHES: usize = 5;
const BULK_BATCH: usize = 100;
/// Then one message and three cancels each.
const STEPS: usize = 30;
/// A ready backlog's bulk: past the 1,024 page-outs after which a queue joins paged-out
/// messages into runs.
const READY_BULK_BATCHES: usize = 12;

fn store_config() -> StoreConfig {
    StoreConfig { segment_bytes_target: SEGMENT_BYTES, ..StoreConfig::default() }
}

/// A broker as the server runs one over `store`: spill files, paging, checkpoint offers.
fn broker(store: &Store) -> TestBroker {
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    tb.broker.set_message_source(Arc::new(StoreSource::new(store.reader())));
    tb.broker.set_paging_limits(PagingLimits { max_resident_messages: 2, max_resident_bytes: 1 << 20 });
    tb.broker.set_spill_files(Arc::new(MemorySpillFiles::with_run_records(RUN_RECORDS)));
    tb.broker.set_checkpoint_offer_every(2048);
    tb
}

#[derive(Clone, Debug, Default)]
struct Expect {
    /// Bodies confirmed before this point: must wait.
    confirmed: BTreeSet<String>,
    /// Bodies whose cancel or ack was sent: may be gone.
    settle_sent: BTreeSet<String>,
    /// Bodies whose cancel or ack was durable before this point: must not come back.
    settled: BTreeSet<String>,
}

struct Workload {
    tb: TestBroker,
    storage: MemStorage,
    store: Store,
    catalog: Mutex<Catalog>,
    tags: BTreeMap<u64, String>,
    /// Each waiting body's entry id, for cancels.
    seqs: BTreeMap<String, u64>,
    /// Effects of publishes not yet written.
    pending: Vec<Effect>,
    expect: Expect,
    points: Vec<(MemImage, Expect)>,
}

impl Workload {
    fn new() -> Self {
        let storage = MemStorage::new();
        let (mut store, _) = Store::open(Arc::new(storage.clone()), store_config()).unwrap();
        store.take_checkpoints_on_request();
        let catalog = open_catalog(Arc::new(storage.clone()), DamagedDefinitions::Refuse, 0).unwrap().catalog;
        storage.record_sync_points();
        let tb = broker(&store);
        let catalog = Mutex::new(catalog);
        Workload {
            tb,
            storage,
            store,
            catalog,
            tags: BTreeMap::new(),
            seqs: BTreeMap::new(),
            pending: Vec::new(),
            expect: Expect::default(),
            points: Vec::new(),
        }
    }

    /// Writes the ops waiting as one batch, capturing every image on the way, then tells the
    /// broker where messages went and what is durable. Returns whether there was anything.
    fn sync(&mut self, mut effects: Vec<Effect>) -> bool {
        effects.append(&mut self.pending);
        let ops: Vec<SequencedOp> = std::iter::from_fn(|| self.tb.broker.poll_store_op()).collect();
        let Some(last) = ops.last().map(|o| o.op_seq) else { return false };
        let outcome = apply_batch(&mut self.store, &self.catalog, &ops).unwrap();
        for image in self.storage.take_images() {
            self.points.push((image, self.expect.clone()));
        }
        let now = self.tb.clock.now();
        self.tb.broker.handle_stored(last, &outcome.stored);
        self.tb.broker.handle_persisted(last, now);
        effects.extend(std::iter::from_fn(|| self.tb.broker.poll_effect()));
        for method in methods(&effects) {
            if let Method::BasicAck(ack) = method {
                if let Some(body) = self.tags.get(&ack.delivery_tag) {
                    self.expect.confirmed.insert(body.clone());
                }
            }
        }
        true
    }

    /// Publishes `body` (persistent, confirmed) to queue `queue`, noting a waiting message's
    /// entry id; written at once with `sync`, else with the next batch.
    fn publish(&mut self, chan: Chan, queue: &str, body: String, sync: bool) {
        self.publish_in(chan, queue, None, body, sync);
    }

    /// `publish`, in SQS message group `group` when given.
    fn publish_in(&mut self, chan: Chan, queue: &str, group: Option<&str>, body: String, sync: bool) {
        let headers = group.map(|group| {
            let id = FieldValue::LongStr(group.into());
            FieldTable::from_entries([(hourglass_broker::queue::message_groups::GROUP_HEADER, id)])
        });
        let persistent = BasicProperties { delivery_mode: Some(2), headers, ..Default::default() };
        let effects = self.tb.publish_with(chan, "", queue, persistent, body.as_bytes(), false);
        self.tags.insert(self.tags.len() as u64 + 1, body.clone());
        if queue == "later" {
            // Entry ids are given one per message in publish order (one queue, nothing else).
            let seq = match self.seqs.values().max() {
                Some(last) => last + 1,
                None => self.tb.broker.list_delayed("/", "later", 1).unwrap()[0].seq,
            };
            self.seqs.insert(body, seq);
        }
        self.pending.extend(effects);
        if sync {
            let effects = std::mem::take(&mut self.pending);
            self.sync(effects);
        }
    }

    /// One step of the poller at queue `queue`'s head: takes the first ready message and acks it
    /// (step 0 of every 3; durable at once), holds it unacknowledged (1) or requeues it (2); then
    /// 3 ms pass.
    fn poll_head(&mut self, poller: Chan, queue: &str, step: usize) {
        let (tag, got) = get(&mut self.tb, poller, queue, false).expect("a ready message");
        let mut effects = match step % 3 {
            0 => {
                self.expect.settle_sent.insert(got.clone());
                let effects = self.tb.call(poller, BasicAck { delivery_tag: tag, multiple: false });
                self.sync(effects);
                self.expect.settled.insert(got);
                Vec::new()
            }
            1 => Vec::new(),
            _ => self.tb.call(poller, BasicNack { delivery_tag: tag, multiple: false, requeue: true }),
        };
        effects.extend(self.tb.advance(Duration::from_millis(3)));
        self.sync(effects);
    }

    /// Cancels the waiting message `body` through the management API; its cancel is durable
    /// once the batch that carries it is.
    fn cancel(&mut self, body: &str) {
        self.tb.broker.cancel_delayed("/", "later", self.seqs[body]).unwrap();
        self.expect.settle_sent.insert(body.to_owned());
        assert!(self.sync(Vec::new()));
        self.expect.settled.insert(body.to_owned());
    }
}

fn run_delayed_workload() -> Vec<(MemImage, Expect)> {
    let mut w = Workload::new();
    let admin = w.tb.channel();
    let arguments = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(DELAY_MS as i64))]);
    let effects = w
        .tb
        .call(admin, QueueDeclare { queue: short("later"), durable: true, arguments, ..Default::default() });
    w.sync(effects);
    let publisher = w.tb.channel();
    let effects = w.tb.call(publisher, ConfirmSelect { nowait: false });
    w.sync(effects);
    let body = |i: usize| format!("later-{i:05}-{}", "x".repeat(i % 40));
    // More than a spill run's worth (16,384 records), in a few batches: runs and a buffer.
    for batch in 0..BULK_BATCHES {
        for i in batch * BULK_BATCH..(batch + 1) * BULK_BATCH {
            w.publish(publisher, "later", body(i), false);
        }
        w.sync(Vec::new());
    }
    for step in 0..STEPS {
        let i = BULK_BATCHES * BULK_BATCH + step;
        w.publish(publisher, "later", body(i), true);
        // From the runs, from the buffer, and the newest.
        for cancelled in [step * 13, BULK_BATCHES * BULK_BATCH - 1 - step * 3, i] {
            if step % 2 == 0 || cancelled != i {
                w.cancel(&body(cancelled));
            }
        }
        let effects = w.tb.advance(Duration::from_millis(3));
        w.sync(effects);
    }
    w.points
}

/// A broker restored from what an image keeps after `crash`, its clock 1 s on.
fn restart(image: &MemImage, crash: Crash) -> (TestBroker, RestoreReport) {
    let storage = image.crash(crash);
    let (mut store, recovered) = Store::open(Arc::new(storage.clone()), store_config()).expect("recovers");
    let mut tb = broker(&store);
    tb.clock.advance(Duration::from_millis(1_000));
    let now = tb.clock.now();
    let definitions =
        open_catalog(Arc::new(storage), DamagedDefinitions::Refuse, 0).expect("definitions read").definitions;
    let restored = restore_into(&mut tb.broker, &mut store, definitions, recovered, now).expect("reads back");
    assert!(restored.damaged.is_empty(), "{:?}", restored.damaged);
    (tb, restored.report)
}

/// What an image recovers to: the waiting count, how many came from a state, and every body
/// once the delay has passed.
fn recover(image: &MemImage, crash: Crash) -> Recovery {
    let (mut tb, report) = restart(image, crash);
    let delayed = tb.broker.queue_stats("/", "later").map_or(0, |s| s.messages_delayed);
    let chan = tb.channel();
    let early = tb.advance(Duration::from_millis(DELAY_MS - 120_000));
    assert!(methods(&early).is_empty());
    let mut bodies = Vec::new();
    if tb.broker.queue_stats("/", "later").is_some() {
        assert!(get(&mut tb, chan, "later", true).is_none(), "nothing is due before its time");
        tb.advance(Duration::from_millis(130_000));
        while let Some((_, body)) = get(&mut tb, chan, "later", true) {
            bodies.push(body);
        }
    }
    (delayed, report.delayed_from_checkpoint, bodies)
}

/// The next message of `queue` by basic.get (with `no_ack`, else left unacknowledged), with its
/// delivery tag.
fn get(tb: &mut TestBroker, chan: Chan, queue: &str, no_ack: bool) -> Option<(u64, String)> {
    let effects = tb.call(chan, BasicGet { queue: short(queue), no_ack });
    effects.iter().find_map(|e| match e {
        Effect::Send { method, content: Some(m), .. } => match method.as_ref() {
            Method::BasicGetOk(ok) => Some((ok.delivery_tag, String::from_utf8_lossy(&m.body).into_owned())),
            _ => None,
        },
        _ => None,
    })
}

/// What one restart recovered: the queue's count, how many of its messages came from a state,
/// and every body it gives back.
type Recovery = (usize, usize, Vec<String>);

/// Crashes every point four ways (unsynced bytes lost, kept, torn, torn and garbled), recovers
/// each with `recover` and checks what both workloads promise: the count is the bodies', none
/// came back twice, every confirmed body whose settle (a cancel or an ack, `settled_as`) was not
/// sent came back, none whose settle was durable did; `check` adds a workload's own promise. More
/// than half of the restarts must take messages from a state.
fn check_every_crash(
    points: &[(MemImage, Expect)],
    settled_as: &str,
    recover: impl Fn(&MemImage, Crash) -> Recovery,
    check: impl Fn(&str, &[String]),
) {
    assert!(points.len() > 100, "only {} sync points", points.len());
    let mut from_states = 0;
    for (at, (image, expect)) in points.iter().enumerate() {
        for crash in [
            Crash::LoseUnsynced,
            Crash::KeepUnsynced,
            Crash::Torn { bytes: 17, garbled: false },
            Crash::Torn { bytes: 40, garbled: true },
        ] {
            let ctx = format!("crash point {at} ({crash:?})");
            let (count, from_state, bodies) = recover(image, crash);
            let unique: BTreeSet<&String> = bodies.iter().collect();
            assert_eq!(unique.len(), bodies.len(), "{ctx}: a message came back twice: {bodies:?}");
            assert_eq!(count, bodies.len(), "{ctx}: the queue's count");
            for body in &expect.confirmed {
                assert!(
                    expect.settle_sent.contains(body) || unique.contains(body),
                    "{ctx}: confirmed {body} lost"
                );
            }
            for body in &expect.settled {
                assert!(!unique.contains(body), "{ctx}: {settled_as} {body} came back");
            }
            check(&ctx, &bodies);
            if from_state > 0 {
                from_states += 1;
            }
        }
    }
    let restarts = points.len() * 4;
    eprintln!("{from_states} of {restarts}");
    assert!(
        from_states * 2 > restarts,
        "only {from_states} of {restarts} restarts took messages from a state"
    );
}

/// At every sync point, whatever the crash keeps of unsynced bytes, the recovered broker holds
/// every confirmed message that was not cancelled, once, waiting until its time; most later
/// restarts take most messages from a state.
#[test]
fn every_sync_point_recovers_each_waiting_message_once() {
    let points = run_delayed_workload();
    // Spill rosters are written once, to packs (ADR 0020): a pack still on disk beside a newer
    // one holds rosters that later checkpoints named again instead of writing them.
    let packs = |image: &MemImage| {
        let names = image.crash(Crash::LoseUnsynced).list().unwrap();
        names.iter().filter(|name| name.ends_with(".states")).count()
    };
    assert!(points.iter().any(|(image, _)| packs(image) >= 2), "no checkpoint named an earlier pack");
    check_every_crash(&points, "cancelled", recover, |_, _| {});
}

/// A ready backlog: bulk publishes paged out into runs, then a poller at the head that acks one
/// message, holds the next unacknowledged and requeues the third, each step with a publish
/// behind them.
fn run_ready_workload() -> Vec<(MemImage, Expect)> {
    let mut w = Workload::new();
    let admin = w.tb.channel();
    let effects =
        w.tb.call(admin, QueueDeclare { queue: short("backlog"), durable: true, ..Default::default() });
    w.sync(effects);
    let publisher = w.tb.channel();
    let effects = w.tb.call(publisher, ConfirmSelect { nowait: false });
    w.sync(effects);
    // One size, so that paged-out messages in a row make runs; every 50th longer, to cut them.
    let body = |i: usize| format!("ready-{i:05}{}", if i % 50 == 49 { "-x" } else { "" });
    for batch in 0..READY_BULK_BATCHES {
        for i in batch * BULK_BATCH..(batch + 1) * BULK_BATCH {
            w.publish(publisher, "backlog", body(i), false);
        }
        w.sync(Vec::new());
    }
    let poller = w.tb.channel();
    for step in 0..STEPS * 2 {
        w.publish(publisher, "backlog", body(READY_BULK_BATCHES * BULK_BATCH + step), true);
        w.poll_head(poller, "backlog", step);
    }
    w.points
}

/// What an image recovers to: the ready count, how many came from a state, and every body in
/// the order basic.get gives them.
fn recover_ready(image: &MemImage, crash: Crash) -> Recovery {
    let (mut tb, report) = restart(image, crash);
    let ready = tb.broker.queue_stats("/", "backlog").map_or(0, |s| s.messages_ready);
    let chan = tb.channel();
    let bodies = std::iter::from_fn(|| get(&mut tb, chan, "backlog", true)).map(|(_, body)| body).collect();
    (ready, report.ready_from_checkpoint, bodies)
}

/// At every sync point, whatever the crash keeps of unsynced bytes, the recovered broker holds
/// every confirmed ready message that was not acked, once, in queue order (a message held
/// unacknowledged or requeued is back in its place); most restarts take most messages from a
/// state.
#[test]
fn every_sync_point_recovers_each_ready_message_once_in_order() {
    let points = run_ready_workload();
    check_every_crash(&points, "acked", recover_ready, |ctx, bodies| {
        let disorder = bodies.windows(2).find(|pair| pair[0] >= pair[1]);
        assert!(disorder.is_none(), "{ctx}: out of order or twice: {disorder:?}");
    });
}

/// The ready workload's in an SQS FIFO queue (`x-sqs-fifo`), each message in one of three
/// message groups and delayed by the queue for a millisecond first: each becomes ready with a
/// new place (seq), which the log does not record (it still says "waiting").
fn run_fifo_workload() -> Vec<(MemImage, Expect)> {
    let mut w = Workload::new();
    let admin = w.tb.channel();
    let arguments = FieldTable::from_entries([
        ("x-sqs-fifo", FieldValue::Bool(true)),
        ("x-delivery-delay", FieldValue::I64(FIFO_DELAY_MS as i64)),
    ]);
    let effects = w
        .tb
        .call(admin, QueueDeclare { queue: short("fifo"), durable: true, arguments, ..Default::default() });
    w.sync(effects);
    let publisher = w.tb.channel();
    let effects = w.tb.call(publisher, ConfirmSelect { nowait: false });
    w.sync(effects);
    let group = |i: usize| format!("g{}", i % 3);
    let body = |i: usize| format!("fifo-g{}-{i:05}{}", i % 3, if i % 50 == 49 { "-x" } else { "" });
    for batch in 0..READY_BULK_BATCHES {
        for i in batch * BULK_BATCH..(batch + 1) * BULK_BATCH {
            w.publish_in(publisher, "fifo", Some(&group(i)), body(i), false);
        }
        let effects = w.tb.advance(Duration::from_millis(FIFO_DELAY_MS));
        w.sync(effects);
    }
    let poller = w.tb.channel();
    for step in 0..STEPS * 2 {
        let i = READY_BULK_BATCHES * BULK_BATCH + step;
        w.publish_in(publisher, "fifo", Some(&group(i)), body(i), true);
        w.poll_head(poller, "fifo", step);
    }
    w.points
}

/// What an image recovers to, received over SQS: the ready and overdue count, how many came
/// from a state, and every body in the order the receives give them (each deleted at once, so
/// that its group goes on).
fn recover_fifo(image: &MemImage, crash: Crash) -> Recovery {
    let (mut tb, report) = restart(image, crash);
    let Some(stats) = tb.broker.queue_stats("/", "fifo") else { return (0, 0, Vec::new()) };
    // Those the log still has as waiting (never held by a state) are overdue: ready soon.
    let ready = stats.messages_ready + stats.messages_delayed;
    tb.advance(Duration::from_millis(FIFO_DELAY_MS));
    let mut bodies = Vec::new();
    for _ in 0..(ready + 10) * 2 {
        let now = tb.clock.now();
        let taken = tb.broker.sqs_receive("/", "fifo", 10, Some(30_000), now).unwrap();
        for received in &taken {
            tb.broker.sqs_delete("/", "fifo", &received.receipt_handle, now).unwrap();
            bodies.push(String::from_utf8_lossy(&received.message.body).into_owned());
        }
        if taken.is_empty() && !tb.broker.sqs_awaits_read("/", "fifo") {
            break;
        }
        tb.answer_reads();
    }
    (ready, report.ready_from_checkpoint, bodies)
}

/// Issue 41: at every sync point, whatever the crash keeps, the recovered SQS FIFO queue holds
/// every confirmed message that was not acked, once, and SQS receives give each group's in
/// order; most restarts take most messages from a state, groups and all. Before, a queue with
/// message groups had no state, and every restart read its backlog back from the log. And a
/// ready message held in memory after its delay comes back at its place: before, the log's
/// "waiting" made it wait again and become ready behind the state's messages, out of its
/// group's order.
#[test]
fn every_sync_point_recovers_each_fifo_message_once_in_its_group_s_order() {
    let points = run_fifo_workload();
    check_every_crash(&points, "acked", recover_fifo, |ctx, bodies| {
        for group in ["g0", "g1", "g2"] {
            let of_group: Vec<&String> = bodies.iter().filter(|body| body[5..7] == *group).collect();
            let disorder = of_group.windows(2).find(|pair| pair[0] >= pair[1]);
            assert!(disorder.is_none(), "{ctx}: group {group} out of order or twice: {disorder:?}");
        }
    });
}
