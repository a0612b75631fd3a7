//! Seeing deliveries in flight under a visibility or consumer timeout of their own (semantics §4):
//! which deliveries of a queue are out with a consumer and when each comes back if not settled.
//! Read-only; changing a visibility timeout is `Broker::change_visibility` (by receipt handle).

use crate::broker::Broker;
use crate::queue::visibility::{Deadline, DeadlineKind, DeliveryRef};
use crate::queue::QueueId;
use crate::receipts::Receipt;
use crate::time::Timestamp;

/// One outstanding delivery as the management API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlightDelivery {
    /// The `x-receipt-handle` the consumer got with it; `None` under a consumer timeout, which
    /// is not steered by handle.
    pub receipt_handle: Option<String>,
    /// Its consumer timeout (ms) when that is what brings it back, else a visibility timeout does.
    pub consumer_timeout_ms: Option<u64>,
    /// The connection and channel holding it.
    pub connection: u64,
    pub channel: u16,
    pub delivery_tag: u64,
    /// When it becomes ready again unless settled first.
    pub visible_at: Timestamp,
}

impl Broker {
    /// The first `limit` deliveries of a queue under a visibility timeout, soonest back first,
    /// and how many there are in all; `None` when there is no such queue.
    pub fn peek_in_flight(
        &self,
        vhost: &str,
        queue: &str,
        limit: usize,
    ) -> Option<(Vec<InFlightDelivery>, usize)> {
        let id = self.queue_id(vhost, queue).ok()?;
        let queue = self.queues.get(&id)?;
        let listed = queue
            .visibility
            .peek(limit)
            .map(|(visible_at, delivery)| InFlightDelivery {
                receipt_handle: self.receipt_handle(id, delivery),
                consumer_timeout_ms: self.consumer_timeout_of(delivery),
                connection: delivery.conn.0,
                channel: delivery.channel.0,
                delivery_tag: delivery.tag,
                visible_at,
            })
            .collect();
        Some((listed, queue.visibility.delivery_count()))
    }

    /// The receipt handle of an outstanding delivery of queue `queue` (the one its consumer got),
    /// if it has one.
    fn receipt_handle(&self, queue: QueueId, delivery: DeliveryRef) -> Option<String> {
        let channel = self.channels.get(&(delivery.conn, delivery.channel))?;
        let unacked = channel.unacked(delivery.tag)?;
        unacked.deadline.filter(Deadline::has_receipt)?;
        let (channel_opening, entry) = (channel.opening, unacked.entry.seq);
        Some(self.receipts.issue(&Receipt { queue, delivery, channel_opening, entry }))
    }

    /// The consumer timeout that brings `delivery` back, if that is what does.
    fn consumer_timeout_of(&self, delivery: DeliveryRef) -> Option<u64> {
        let channel = self.channels.get(&(delivery.conn, delivery.channel))?;
        match channel.unacked(delivery.tag)?.deadline?.kind {
            DeadlineKind::ConsumerTimeout(ms) => Some(ms),
            DeadlineKind::Visibility => None,
        }
    }
}
