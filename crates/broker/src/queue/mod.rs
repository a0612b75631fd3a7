//! A queue: its ready messages, its consumers and its counts. Each contract feature lives in its
//! own file beside this one; this file holds only what every queue has.

pub(crate) mod args;
pub(crate) mod consumers;
pub(crate) mod entry;
pub(crate) mod ready;
mod stats;

pub use args::QueueType;
pub use stats::{BindingInfo, QueueStats};

use std::sync::Arc;

use hourglass_wire::{FieldTable, ShortStr};

use crate::api::ConnectionId;
use crate::message::Message;
pub use args::QueueArgs;
use consumers::Consumers;
use entry::{Entry, Seq};
use ready::Ready;

/// A queue's identity for the life of the process; a queue deleted and declared again under the
/// same name gets a new id, so late acks for the old one are told apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u64);

/// How a queue was declared.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    pub name: ShortStr,
    pub durable: bool,
    /// The connection that owns an exclusive queue.
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

#[derive(Debug)]
pub(crate) struct Queue {
    pub id: QueueId,
    pub vhost: String,
    pub spec: QueueSpec,
    pub args: QueueArgs,
    pub ready: Ready,
    pub consumers: Consumers,
    /// Deliveries of this queue's messages not yet settled (held by channels).
    pub unacked_count: usize,
    /// An auto-delete queue is deleted when its last consumer goes, once it has had one.
    pub had_consumer: bool,
    next_seq: Seq,
}

impl Queue {
    pub fn new(id: QueueId, vhost: String, spec: QueueSpec, args: QueueArgs) -> Self {
        Queue {
            id,
            vhost,
            spec,
            args,
            ready: Ready::default(),
            consumers: Consumers::default(),
            unacked_count: 0,
            had_consumer: false,
            next_seq: 0,
        }
    }

    pub fn name(&self) -> &ShortStr {
        &self.spec.name
    }

    /// Appends a newly routed message.
    pub fn enqueue(&mut self, message: Arc<Message>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ready.push_back(Entry { seq, message, redelivered: false });
    }

    /// Takes the next ready message for a delivery that will be settled later.
    pub fn take_for_delivery(&mut self, expect_ack: bool) -> Option<Entry> {
        let entry = self.ready.pop_front()?;
        if expect_ack {
            self.unacked_count += 1;
        }
        Some(entry)
    }

    /// A delivery was acked (or dropped): it leaves the queue for good.
    pub fn settle(&mut self) {
        debug_assert!(self.unacked_count > 0);
        self.unacked_count = self.unacked_count.saturating_sub(1);
    }

    /// A delivery came back unsettled: it becomes ready again at its old place.
    pub fn requeue(&mut self, mut entry: Entry) {
        self.settle();
        entry.redelivered = true;
        self.ready.requeue(entry);
    }

    /// Ready messages (never unacked or expired ones), as declare-ok and get-ok count them.
    pub fn message_count(&self) -> usize {
        self.ready.message_count()
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.count()
    }

    pub fn is_exclusive_to_other(&self, conn: ConnectionId) -> bool {
        self.spec.exclusive_owner.is_some_and(|owner| owner != conn)
    }
}
