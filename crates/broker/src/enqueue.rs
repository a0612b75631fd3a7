//! A message entering one queue (published or dead-lettered): a delay (contract §3), overflow
//! limits, TTL 0, then the ready messages and the consumers.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::{overflow, DeathReason, Overflow, QueueId};
use crate::time::Timestamp;

/// Whether a queue took a message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    Accepted,
    /// Refused by x-overflow reject-publish(-dlx): the publisher gets basic.nack.
    Rejected,
}

impl Broker {
    /// Puts `message` into queue `id` at `now`. `delay_ms` is the delay the message brought from
    /// a delayed exchange; it wins over the queue's `x-delivery-delay` (contract §3).
    pub(crate) fn enqueue(
        &mut self,
        id: QueueId,
        message: Arc<Message>,
        now: Timestamp,
        delay_ms: Option<u64>,
    ) -> Enqueued {
        let Some(queue) = self.queues.get_mut(&id) else { return Enqueued::Accepted };
        if let Some(delay) = delay_ms.or(queue.args.delivery_delay_ms).filter(|ms| *ms > 0) {
            queue.delay(message, now.saturating_add_millis(delay));
            self.reschedule(id);
            return Enqueued::Accepted;
        }
        let outcome = self.admit(id, message, now);
        self.dispatch(id, now);
        outcome
    }

    /// Moves the delayed messages due at `now` to ready, in due order (contract §3). A message
    /// new to the queue starts its TTL at its due time; one coming back keeps its place.
    pub(crate) fn promote_due(&mut self, id: QueueId, now: Timestamp) {
        while let Some(queue) = self.queues.get_mut(&id) {
            let Some((due, waiting)) = queue.delayed.pop_due(now) else { break };
            if waiting.returning {
                queue.return_to_ready(waiting.entry);
            } else {
                self.admit(id, waiting.entry.message, due);
            }
        }
    }

    /// A message becoming ready at `ready_at`: refused if over a reject-publish limit, delivered
    /// or expired at once with TTL 0, else appended to the ready messages.
    fn admit(&mut self, id: QueueId, message: Arc<Message>, ready_at: Timestamp) -> Enqueued {
        let Some(queue) = self.queues.get_mut(&id) else { return Enqueued::Accepted };
        let body_size = message.body_size();
        if overflow::rejects_publish(&queue.args, queue.message_count(), queue.ready.body_bytes(), body_size)
        {
            if queue.args.overflow == Overflow::RejectPublishDlx {
                self.dead_letter_later(id, message, DeathReason::Maxlen);
            }
            return Enqueued::Rejected;
        }
        let entry = queue.new_entry(message, ready_at);
        if entry.expires_at.is_some_and(|at| at <= ready_at) {
            // TTL 0: a consumer that can take it now gets it, else it expires at once (contract §1).
            if let Some(entry) = self.deliver_now(id, entry, ready_at) {
                if let Some(queue) = self.queues.get_mut(&id) {
                    queue.counters.expired += 1;
                }
                self.dead_letter_later(id, entry.message, DeathReason::Expired);
            }
            return Enqueued::Accepted;
        }
        queue.push_ready(entry);
        Enqueued::Accepted
    }

    /// x-overflow drop-head: the oldest ready messages go (dead-lettered, reason `maxlen`) until the
    /// queue is within its limits.
    pub(crate) fn drop_overflowing_head(&mut self, id: QueueId) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let mut dropped = Vec::new();
        while overflow::is_over(&queue.args, queue.message_count(), queue.ready.body_bytes()) {
            match queue.drop_head() {
                Some(entry) => dropped.push(entry),
                None => break,
            }
        }
        for entry in dropped {
            self.dead_letter_later(id, entry.message, DeathReason::Maxlen);
        }
    }
}
