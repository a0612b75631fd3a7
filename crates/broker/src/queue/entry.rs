//! One message's place in one queue: the shared message plus this queue's bookkeeping.

use std::sync::Arc;

use crate::message::Message;
use crate::time::Timestamp;

/// A message's position in its queue; requeued messages go back to their old position.
pub(crate) type Seq = u64;

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub seq: Seq,
    pub message: Arc<Message>,
    /// Set once the message has been delivered and came back (AMQP basic.deliver `redelivered`).
    pub redelivered: bool,
    /// When the message expires (contract §1): fixed when it became ready, kept across requeues.
    pub expires_at: Option<Timestamp>,
    /// Deliveries that came back unacknowledged (contract §5, `x-delivery-count`).
    pub delivery_count: u32,
    /// The message's id in the store (`persist.rs`) when it is persistent and its queue durable;
    /// kept from publish to settle, across delays and requeues (unlike `seq`).
    pub persist_id: Option<u64>,
    /// When the message became ready in this queue (its TTL counts from here); `None` while it
    /// has never been ready (a delayed message not yet due).
    pub ready_at: Option<Timestamp>,
}

impl Entry {
    pub fn body_size(&self) -> usize {
        self.message.body_size()
    }
}
