//! Seeing deliveries in flight under a visibility timeout (semantics §4): which deliveries of a
//! queue are out with a consumer and when each comes back if not settled. Read-only; changing
//! one's timeout is `Broker::change_visibility` (by receipt handle).

use crate::broker::Broker;
use crate::queue::visibility::DeliveryRef;
use crate::queue::QueueId;
use crate::receipts::Receipt;
use crate::time::Timestamp;

/// One outstanding delivery as the management API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlightDelivery {
    /// The `x-receipt-handle` the consumer got with it.
    pub receipt_handle: String,
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
                connection: delivery.conn.0,
                channel: delivery.channel.0,
                delivery_tag: delivery.tag,
                visible_at,
            })
            .collect();
        Some((listed, queue.visibility.delivery_count()))
    }

    /// The receipt handle of an outstanding delivery of queue `queue` (the one its consumer got).
    fn receipt_handle(&self, queue: QueueId, delivery: DeliveryRef) -> String {
        let channel = self.channels.get(&(delivery.conn, delivery.channel));
        let channel_opening = channel.map_or(0, |c| c.opening);
        let entry = channel.and_then(|c| c.unacked(delivery.tag)).map_or(0, |u| u.entry.seq);
        self.receipts.issue(&Receipt { queue, delivery, channel_opening, entry })
    }
}
