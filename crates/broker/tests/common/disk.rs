//! A stand-in for the message store in broker tests (paging, the far tier): the segment files
//! as a map of records by location, and a `Disk` that applies the broker's store ops, assigns
//! locations and reports them back as the store thread does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hourglass_broker::queue::MemorySpillFiles;
use hourglass_broker::{
    BrokerConfig, Effect, MessageSource, PagingLimits, RecordLocation, StoredBody, StoredLocation,
};
use hourglass_testkit::TestBroker;

use super::StoredModel;

/// The segment files: records by location, and how many reads were made.
#[derive(Debug, Default)]
pub struct MapSource {
    pub records: Mutex<HashMap<RecordLocation, Bytes>>,
    reads: AtomicUsize,
}

impl MessageSource for MapSource {
    fn read(&self, at: RecordLocation) -> Result<Bytes, String> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.records.lock().unwrap().get(&at).cloned().ok_or_else(|| "no such record".to_owned())
    }
}

/// A stand-in for the store: applies ops, assigns locations, reports them back.
#[derive(Default)]
pub struct Disk {
    pub source: Arc<MapSource>,
    next_offset: u32,
    pub stored: StoredModel,
}

impl Disk {
    /// Writes every pending op, reports the batch durable with its locations; returns the
    /// released effects.
    pub fn sync(&mut self, tb: &mut TestBroker) -> Vec<Effect> {
        let ops: Vec<_> = std::iter::from_fn(|| tb.broker.poll_store_op()).collect();
        let mut stored = Vec::new();
        let (source, next_offset) = (&self.source, &mut self.next_offset);
        for op in &ops {
            self.stored.apply(&op.op, |queue, msg_id, record| {
                *next_offset += 1000;
                let location =
                    RecordLocation { segment: 1, offset: *next_offset, record_bytes: record.len() as u32 };
                source.records.lock().unwrap().insert(location, record.clone());
                stored.push(StoredLocation { queue, msg_id, location });
                StoredBody::At(location)
            });
        }
        if let Some(last) = ops.last() {
            tb.broker.handle_stored(last.op_seq, &stored);
            tb.broker.handle_persisted(last.op_seq, tb.clock.now());
        }
        std::iter::from_fn(|| tb.broker.poll_effect()).collect()
    }

    pub fn live(&self) -> usize {
        self.stored.live()
    }

    pub fn reads(&self) -> usize {
        self.source.reads.load(Ordering::SeqCst)
    }

    /// A new broker restored from what was written, reading through the same source.
    pub fn restart(&self, tb: &TestBroker, limits: PagingLimits) -> TestBroker {
        self.restart_spilling(tb, limits, None)
    }

    /// [`Disk::restart`] with far-future delayed messages kept in `spill` (ADR 0013).
    pub fn restart_spilling(
        &self,
        tb: &TestBroker,
        limits: PagingLimits,
        spill: Option<Arc<MemorySpillFiles>>,
    ) -> TestBroker {
        let mut restored = paging_broker(&self.source, limits);
        if let Some(spill) = spill {
            restored.broker.set_spill_files(spill);
        }
        let gap = tb.clock.now().saturating_duration_since(restored.clock.now());
        let now = restored.clock.advance(gap);
        restored.broker.restore(self.stored.definitions(), self.stored.queues.clone(), now);
        restored
    }
}

pub fn paging_broker(source: &Arc<MapSource>, limits: PagingLimits) -> TestBroker {
    let mut tb = TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() });
    tb.broker.set_message_source(source.clone());
    tb.broker.set_paging_limits(limits);
    tb
}
