//! Seeing deliveries in flight under a visibility or consumer timeout of their own (semantics §4):
//! which deliveries of a queue are out with a consumer and when each comes back if not settled.
//! Read-only; changing a visibility timeout is `Broker::change_visibility` (by receipt handle).

use crate::broker::Broker;
use crate::queue::visibility::{DeadlineKind, DeliveryRef};
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
    /// The first `limit` deliveries of a queue under a visibility or consumer timeout of their own,
    /// soonest back first,
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
            .map(|(visible_at, delivery)| {
                let (receipt_handle, consumer_timeout_ms) = self.what_brings_back(id, delivery);
                InFlightDelivery {
                    receipt_handle,
                    consumer_timeout_ms,
                    connection: delivery.conn.0,
                    channel: delivery.channel.0,
                    delivery_tag: delivery.tag,
                    visible_at,
                }
            })
            .collect();
        Some((listed, queue.visibility.delivery_count()))
    }

    /// What brings an outstanding delivery of queue `queue` back: its visibility timeout, with the
    /// receipt handle its consumer got, or its consumer timeout (ms).
    fn what_brings_back(&self, queue: QueueId, delivery: DeliveryRef) -> (Option<String>, Option<u64>) {
        let Some(channel) = self.connections.channel(delivery.conn, delivery.channel) else {
            return (None, None);
        };
        let Some(unacked) = channel.unacked(delivery.tag) else { return (None, None) };
        match unacked.deadline.map(|d| d.kind) {
            Some(DeadlineKind::Visibility) => {
                let receipt =
                    Receipt { queue, delivery, channel_opening: channel.opening, entry: unacked.entry.seq };
                (Some(self.receipts.issue(&receipt)), None)
            }
            Some(DeadlineKind::ConsumerTimeout(ms)) => (None, Some(ms)),
            None => (None, None),
        }
    }
}
