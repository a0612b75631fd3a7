//! Issue 37, finding 9, through the broker: records whose queue id changed between recovery's two
//! passes were handed to the broker under the changed id, moving messages from one queue to
//! another with no damage reported (and the next restart dropped them). `restore_into` now leaves
//! them out, returns them as damage, and the store forgets them.

use std::sync::{Arc, Mutex};

use hourglass_broker::{BrokerConfig, SequencedOp};
use hourglass_server::catalog_file::{open_catalog, DamagedDefinitions};
use hourglass_server::persistence::{apply_batch, restore_into};
use hourglass_store::{Defect, MemStorage, Storage, Store, StoreConfig};
use hourglass_testkit::{short, TestBroker};
use hourglass_wire::*;

const QUEUE_ID_AT: u64 = 12;

/// Durable queues `a` (ten persistent messages) and `b` (one), written through the broker and
/// the store thread's batch step into `storage`.
fn two_queues(storage: &MemStorage) {
    let (mut store, _) = Store::open(Arc::new(storage.clone()), StoreConfig::default()).unwrap();
    let catalog = open_catalog(Arc::new(storage.clone()), DamagedDefinitions::Refuse, 0).unwrap().catalog;
    let catalog = Mutex::new(catalog);
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    let chan = tb.channel();
    for name in ["a", "b"] {
        tb.call(chan, QueueDeclare { queue: short(name), durable: true, ..Default::default() });
    }
    let persistent = BasicProperties { delivery_mode: Some(2), ..Default::default() };
    for (queue, body) in (0..10).map(|i| ("a", format!("a-{i}"))).chain([("b", "b-0".to_owned())]) {
        tb.publish_with(chan, "", queue, persistent.clone(), body.as_bytes(), false);
    }
    let ops: Vec<SequencedOp> = std::iter::from_fn(|| tb.broker.poll_store_op()).collect();
    apply_batch(&mut store, &catalog, &ops).unwrap();
}

/// Three of queue a's records get queue b's id between the passes: a keeps its other seven, b
/// keeps its one (not four), the three are reported as damage and the store forgets them.
#[test]
fn records_changed_between_the_passes_are_not_restored_into_another_queue() {
    let storage = MemStorage::new();
    two_queues(&storage);
    let (mut store, recovered) = Store::open(Arc::new(storage.clone()), StoreConfig::default()).unwrap();
    let by_count = |n: u64| recovered.queue_messages.iter().find(|(_, c)| **c == n).map(|(q, _)| *q).unwrap();
    let (a, b) = (by_count(10), by_count(1));
    let located = store.recovered_queues(recovered.replay.clone()).unwrap();
    for message in &located[&a][2..5] {
        let file = storage.open(&format!("{:020}.seg", message.location.segment)).unwrap();
        file.write_all_at(u64::from(message.location.offset) + QUEUE_ID_AT, &b.to_le_bytes()).unwrap();
    }

    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    let now = tb.clock.now();
    let definitions =
        open_catalog(Arc::new(storage.clone()), DamagedDefinitions::Refuse, 0).unwrap().definitions;
    let restored = restore_into(&mut tb.broker, &mut store, definitions, recovered, now).unwrap();
    let ready = |tb: &TestBroker, q: &str| tb.broker.queue_stats("/", q).map(|s| s.messages_ready);
    assert_eq!((ready(&tb, "a"), ready(&tb, "b")), (Some(7), Some(1)));
    let defects: Vec<Defect> = restored.damaged.iter().map(|d| d.defect).collect();
    assert_eq!(defects, [Defect::Checksum; 3]);
    assert_eq!((store.queue_messages(a), store.queue_messages(b)), (7, 1));
}
