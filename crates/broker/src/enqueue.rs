//! A message entering one queue (published or dead-lettered): overflow limits, TTL 0, then the
//! ready messages and the consumers.

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
    /// Puts `message` into queue `id` at `now`.
    pub(crate) fn enqueue(&mut self, id: QueueId, message: Arc<Message>, now: Timestamp) -> Enqueued {
        let Some(queue) = self.queues.get_mut(&id) else { return Enqueued::Accepted };
        let body_size = message.body_size();
        if overflow::rejects_publish(&queue.args, queue.message_count(), queue.ready.body_bytes(), body_size)
        {
            if queue.args.overflow == Overflow::RejectPublishDlx {
                self.dead_letter_later(id, message, DeathReason::Maxlen);
            }
            return Enqueued::Rejected;
        }
        let entry = queue.new_entry(message, now);
        if entry.expires_at.is_some_and(|at| at <= now) {
            // TTL 0: a consumer that can take it now gets it, else it expires at once (contract §1).
            if let Some(entry) = self.deliver_now(id, entry) {
                if let Some(queue) = self.queues.get_mut(&id) {
                    queue.counters.expired += 1;
                }
                self.dead_letter_later(id, entry.message, DeathReason::Expired);
            }
            return Enqueued::Accepted;
        }
        queue.push_ready(entry);
        self.dispatch(id, now);
        self.drop_overflowing_head(id);
        Enqueued::Accepted
    }

    /// x-overflow drop-head: the oldest ready messages go (dead-lettered, reason `maxlen`) until the
    /// queue is within its limits.
    fn drop_overflowing_head(&mut self, id: QueueId) {
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
