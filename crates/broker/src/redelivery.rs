//! Messages coming back unacknowledged (semantics §4, §5): visibility timeouts running out, the
//! failed-delivery count with its limit and back-off, the headers a redelivery carries, and
//! changing one delivery's remaining invisibility by receipt handle.

use std::sync::Arc;

use hourglass_wire::{FieldValue, LongStr};

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::delivery_limit::{self, Return};
use crate::queue::entry::Entry;
use crate::queue::{DeathReason, QueueId, ReturnKind};
use crate::time::Timestamp;

/// Why a visibility change was refused (the HTTP API answers 404 for both).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VisibilityError {
    /// No such queue.
    QueueNotFound,
    /// The handle is unknown, or its delivery was already settled or timed out.
    HandleNotFound,
}

impl Broker {
    /// A delivery of queue `id` came back unsettled, as `how`: it counts one failed delivery,
    /// then goes back to ready, waits out its back-off, or is dead-lettered over its limit
    /// (semantics §5).
    pub(crate) fn return_to_queue(&mut self, id: QueueId, mut entry: Entry, how: ReturnKind, now: Timestamp) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        entry.delivery_count = entry.delivery_count.saturating_add(1);
        match delivery_limit::on_return(&queue.args, entry.delivery_count, how) {
            Return::Ready => {
                entry.redelivered = true;
                self.persist_update(id, &entry, None);
                if let Some(queue) = self.queues.get_mut(&id) {
                    queue.requeue(entry);
                }
            }
            Return::After { delay_ms } => {
                let due = now.saturating_add_millis(delay_ms);
                entry.redelivered = true;
                self.persist_update(id, &entry, Some(due));
                if let Some(queue) = self.queues.get_mut(&id) {
                    queue.delay_return(entry, due);
                }
            }
            Return::OverLimit => {
                queue.settle(&entry);
                self.dead_letter_entry(id, entry, DeathReason::DeliveryLimit);
            }
        }
    }

    /// Takes back the deliveries of queue `id` whose visibility ran out at `now`; their channels
    /// stay open and their consumers get the credit back (semantics §4).
    pub(crate) fn expire_visibility(&mut self, id: QueueId, now: Timestamp) {
        loop {
            let Some(queue) = self.queues.get_mut(&id) else { return };
            let Some(delivery) = queue.visibility.pop_due(now) else { return };
            let Some(channel) = self.channels.get_mut(&(delivery.conn, delivery.channel)) else { continue };
            let Some(unacked) = channel.take_timed_out(delivery.tag) else { continue };
            if let Some(tag) = &unacked.consumer_tag {
                if let Some(consumer) = queue.consumers.find_mut(delivery.conn, delivery.channel, tag) {
                    consumer.unacked = consumer.unacked.saturating_sub(1);
                }
            }
            queue.counters.visibility_expired += 1;
            self.return_to_queue(id, unacked.entry, ReturnKind::Returned, now);
        }
    }

    /// Sets the remaining invisibility of the delivery named by `receipt_handle` to `timeout_ms`
    /// from `now`; 0 makes it visible at once (semantics §4).
    pub fn change_visibility(
        &mut self,
        vhost: &str,
        queue: &str,
        receipt_handle: &str,
        timeout_ms: u64,
        now: Timestamp,
    ) -> Result<(), VisibilityError> {
        let id = self
            .vhosts
            .get(vhost)
            .and_then(|v| v.queues.iter().find(|(n, _)| n.as_bytes() == queue.as_bytes()).map(|(_, id)| *id))
            .ok_or(VisibilityError::QueueNotFound)?;
        let receipt = self.receipts.open(receipt_handle).ok_or(VisibilityError::HandleNotFound)?;
        let delivery = receipt.delivery;
        if receipt.queue != id {
            return Err(VisibilityError::HandleNotFound);
        }
        let channel = self
            .channels
            .get_mut(&(delivery.conn, delivery.channel))
            .filter(|channel| channel.opening == receipt.channel_opening)
            .ok_or(VisibilityError::HandleNotFound)?;
        let unacked = channel.unacked_mut(delivery.tag).ok_or(VisibilityError::HandleNotFound)?;
        let (Some(old), true) = (unacked.visible_at, unacked.queue == id) else {
            return Err(VisibilityError::HandleNotFound);
        };
        let new = now.saturating_add_millis(timeout_ms);
        unacked.visible_at = Some(new);
        if let Some(queue) = self.queues.get_mut(&id) {
            queue.visibility.remove(old, delivery);
            queue.visibility.insert(new, delivery);
        }
        let mark = self.mark();
        self.run_queue(id, now);
        self.run_dead_letters(now);
        self.hold_after(mark, None);
        Ok(())
    }
}

/// The message as this delivery carries it: `x-delivery-count` on redeliveries (semantics §5) and
/// `x-receipt-handle` under a visibility timeout (semantics §4). The stored message is unchanged.
/// `entry` comes from `take_for_delivery`, so its message is in memory; a paged one (a bug) goes
/// out empty rather than stopping the broker.
pub(crate) fn decorate(entry: &Entry, receipt_handle: Option<String>) -> Arc<Message> {
    let Some(message) = entry.resident() else {
        debug_assert!(false, "a paged message reached delivery");
        return Arc::new(Message::new(
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
        ));
    };
    if entry.delivery_count == 0 && receipt_handle.is_none() {
        return message.clone();
    }
    let mut headers = message.properties().headers().unwrap_or_default();
    if entry.delivery_count > 0 {
        headers = headers.with_entry("x-delivery-count", FieldValue::I64(i64::from(entry.delivery_count)));
    }
    if let Some(handle) = receipt_handle {
        headers = headers.with_entry("x-receipt-handle", FieldValue::LongStr(LongStr::from(handle)));
    }
    let properties = message.properties().edited(|p| p.headers = Some(headers));
    Arc::new(message.with_properties(properties))
}
