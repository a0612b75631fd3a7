//! Messages coming back unacknowledged (semantics §4, §5): visibility timeouts running out, the
//! failed-delivery count with its limit and back-off, the headers a redelivery carries, and
//! changing one delivery's remaining invisibility by receipt handle.

use std::sync::Arc;

use hourglass_wire::{FieldValue, LongStr, ShortStr};

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::delivery_limit::{self, Return};
use crate::queue::entry::Entry;
use crate::queue::visibility::{self, Deadline, DeadlineKind, DeliveryRef};
use crate::queue::{DeathReason, QueueId, ReturnKind};
use crate::time::Timestamp;

/// A delivery taken back because its time ran out.
pub(crate) struct TimedOut {
    /// The queue it went back to.
    pub queue: QueueId,
    /// The consumer it went to; `None` for basic.get.
    pub consumer_tag: Option<ShortStr>,
    /// Its own deadline; `None`: the broker's default consumer timeout.
    pub deadline: Option<Deadline>,
}

/// Why a visibility change was refused (the HTTP API answers 404 for both).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VisibilityError {
    /// No such queue.
    QueueNotFound,
    /// Not a receipt handle of the queue (malformed, forged, or another queue's).
    HandleInvalid,
    /// The handle's delivery is over and its message is not waiting in the queue: received
    /// again under a newer handle, or gone.
    HandleNotFound,
    /// The handle's delivery timed out and its message waits in the queue, not received again:
    /// there is no invisibility left to change (SQS answers a success that changes nothing).
    Expired,
    /// The delivery would stay invisible over 12 hours in all since it was made (SQS's limit).
    BeyondLimit,
}

impl Broker {
    /// A delivery of queue `id` came back unsettled, as `how`: it counts one failed delivery
    /// (unless the broker counts failures only and this is not one), then goes back to ready,
    /// waits out its back-off, or is dead-lettered over its limit (semantics §5).
    pub(crate) fn return_to_queue(&mut self, id: QueueId, entry: Entry, how: ReturnKind, now: Timestamp) {
        self.return_until(id, entry, how, None, now);
    }

    /// As [`Broker::return_to_queue`], but the message is not delivered again before `ready_at`
    /// (RabbitMQ 4.3: an explicit delivery time takes precedence over delayed retry and back-off;
    /// over its delivery limit it is still dead-lettered at once). A time already past is none.
    pub(crate) fn return_to_queue_at(
        &mut self,
        id: QueueId,
        entry: Entry,
        how: ReturnKind,
        ready_at: Timestamp,
        now: Timestamp,
    ) {
        self.return_until(id, entry, how, Some(ready_at).filter(|at| *at > now), now);
    }

    fn return_until(
        &mut self,
        id: QueueId,
        mut entry: Entry,
        how: ReturnKind,
        ready_at: Option<Timestamp>,
        now: Timestamp,
    ) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        if self.delivery_counting.counts(how) {
            entry.delivery_count = entry.delivery_count.saturating_add(1);
        }
        let fate = match (delivery_limit::on_return(&queue.args, entry.delivery_count, how), ready_at) {
            (Return::OverLimit, _) => Return::OverLimit,
            (_, Some(at)) => Return::After { delay_ms: at.as_millis().saturating_sub(now.as_millis()) },
            (fate, None) => fate,
        };
        match fate {
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

    /// Takes back the deliveries of queue `id` whose visibility or consumer timeout ran out at
    /// `now`. After a visibility timeout the channel stays open and the consumer gets the credit
    /// back (semantics §4); after a consumer timeout the consumer hears of it
    /// (`consumer_timeout.rs`).
    pub(crate) fn expire_visibility(&mut self, id: QueueId, now: Timestamp) {
        let mut consumer_timeouts = Vec::new();
        while let Some(delivery) = self.queues.get_mut(&id).and_then(|q| q.visibility.pop_due(now)) {
            let Some(timed_out) = self.take_back_timed_out(delivery, now) else { continue };
            match timed_out.deadline.map(|d| d.kind) {
                Some(DeadlineKind::ConsumerTimeout(ms)) => {
                    consumer_timeouts.push((delivery, timed_out.consumer_tag, ms))
                }
                _ => {
                    if let Some(queue) = self.queues.get_mut(&id) {
                        queue.counters.visibility_expired += 1;
                    }
                }
            }
        }
        for (delivery, consumer_tag, ms) in consumer_timeouts {
            self.consumer_timed_out(delivery, consumer_tag, ms, now);
        }
    }

    /// Takes `delivery`, whose time ran out, back from its channel (its tag stays known as
    /// stale) and returns its message to the queue, as a return, not a failure.
    pub(crate) fn take_back_timed_out(&mut self, delivery: DeliveryRef, now: Timestamp) -> Option<TimedOut> {
        let channel = self.connections.channel_mut(delivery.conn, delivery.channel)?;
        let unacked = channel.take_timed_out(delivery.tag)?;
        let id = unacked.queue;
        if let (Some(tag), Some(queue)) = (&unacked.consumer_tag, self.queues.get_mut(&id)) {
            if let Some(consumer) = queue.consumers.find_mut(delivery.conn, delivery.channel, tag) {
                consumer.unacked = consumer.unacked.saturating_sub(1);
            }
        }
        let timed_out =
            TimedOut { queue: id, consumer_tag: unacked.consumer_tag, deadline: unacked.deadline };
        let how = match unacked.deadline.map(|d| d.kind) {
            Some(DeadlineKind::Visibility) => ReturnKind::VisibilityTimeout,
            _ => ReturnKind::Returned,
        };
        self.return_to_queue(id, unacked.entry, how, now);
        Some(timed_out)
    }

    /// Sets the remaining invisibility of the delivery named by `receipt_handle` to `timeout_ms`
    /// from `now`; 0 makes it visible at once (semantics §4). Not past 12 hours from when the
    /// delivery was made, as SQS.
    pub fn change_visibility(
        &mut self,
        vhost: &str,
        queue: &str,
        receipt_handle: &str,
        timeout_ms: u64,
        now: Timestamp,
    ) -> Result<(), VisibilityError> {
        let id =
            self.vhosts.get(vhost).and_then(|v| v.queue_id(queue)).ok_or(VisibilityError::QueueNotFound)?;
        let receipt = self.receipts.open(receipt_handle).ok_or(VisibilityError::HandleInvalid)?;
        let delivery = receipt.delivery;
        if receipt.queue != id {
            return Err(VisibilityError::HandleInvalid);
        }
        let over = || match self.queues.get(&id) {
            Some(queue) if queue.ready.contains(receipt.entry) => VisibilityError::Expired,
            _ => VisibilityError::HandleNotFound,
        };
        let current = self
            .connections
            .channel(delivery.conn, delivery.channel)
            .is_some_and(|channel| channel.opening == receipt.channel_opening && channel.holds(delivery.tag));
        if !current {
            return Err(over());
        }
        let channel = self
            .connections
            .channel_mut(delivery.conn, delivery.channel)
            .ok_or(VisibilityError::HandleNotFound)?;
        let unacked = channel.unacked_mut(delivery.tag).ok_or(VisibilityError::HandleNotFound)?;
        // Only a visibility timeout is steered by its receipt handle.
        let (Some(old), true) = (unacked.deadline.filter(Deadline::has_receipt), unacked.queue == id) else {
            return Err(VisibilityError::HandleNotFound);
        };
        let new = now.saturating_add_millis(timeout_ms);
        // SQS: a message stays invisible at most 12 hours in all from its receive, counted in
        // whole seconds gone (a change made just after the receive may ask for the full 12 h).
        let gone_ms = now.as_millis().saturating_sub(unacked.delivered_at.as_millis()) / 1000 * 1000;
        if gone_ms.saturating_add(timeout_ms) > visibility::MAX_VISIBILITY_MS {
            return Err(VisibilityError::BeyondLimit);
        }
        unacked.deadline = Some(Deadline { at: new, ..old });
        if let Some(queue) = self.queues.get_mut(&id) {
            queue.visibility.remove(old.at, delivery);
            queue.visibility.insert(new, delivery);
        }
        self.run_queue(id, now);
        self.run_dead_letters(now);
        self.flush_definitions();
        Ok(())
    }
}

/// The message as this delivery carries it: `x-delivery-count` on redeliveries (semantics §5) and
/// `x-receipt-handle` under a visibility timeout (semantics §4). The stored message is unchanged.
/// `entry` comes from a take for a consumer (`Queue::take_for_consumer`, `take_for_sqs_receive`), so its
/// message is in memory; a paged one (a bug) goes out empty rather than stopping the broker.
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
