//! A message entering one queue (published or dead-lettered): deduplication (semantics §8), a
//! delay (semantics §3), overflow limits, TTL 0, then the ready messages and the consumers.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::entry::{Entry, Payload};
use crate::queue::message_groups::GroupKey;
use crate::queue::{overflow, DeathReason, Overflow, QueueId};
use crate::time::Timestamp;
use hourglass_wire::ShortStr;

/// Whether a queue took a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    Accepted,
    /// Refused by x-overflow reject-publish(-dlx): the publisher gets basic.nack.
    Rejected,
    /// Dropped as a duplicate of a message the queue took (semantics §8), whose `message_id`
    /// this is; the publisher's confirm is positive, as LavinMQ's.
    Duplicate(Option<ShortStr>),
}

impl Broker {
    /// Puts `message` into queue `id` at `now`. `delay_ms` is the delay the message brought from
    /// a delayed exchange; it wins over the queue's `x-delivery-delay` (semantics §3).
    pub(crate) fn enqueue(
        &mut self,
        id: QueueId,
        message: Arc<Message>,
        now: Timestamp,
        delay_ms: Option<u64>,
    ) -> Enqueued {
        // One look at the queue for the message's whole way in: the entry ids and the store are
        // the broker's parts beside it.
        let Some((queue, dedup_ids)) = self.queues.get_with_dedup_ids(&id) else { return Enqueued::Accepted };
        let held_id = queue.args.deduplication.as_ref().and_then(|spec| spec.held_id_of(&message));
        if let Some(original) = held_id.as_ref().and_then(|held| queue.dedup.duplicate_of(held, now)) {
            queue.counters.deduplicated += 1;
            return Enqueued::Duplicate(original);
        }
        let delay = delay_ms.or(queue.args.delivery_delay_ms).filter(|ms| *ms > 0);
        if delay.is_none() && queue.rejects_publish(message.body_size()) {
            // x-overflow reject-publish(-dlx); the -dlx variant dead-letters the refused message
            // (it was never stored, so nothing to settle).
            if queue.args.overflow == Overflow::RejectPublishDlx {
                self.dead_letter_later(id, message, DeathReason::Maxlen, 0, None);
            }
            return Enqueued::Rejected;
        }
        if let Some(held) = held_id {
            queue.dedup.hold(held, now, message.properties().message_id(), dedup_ids);
        }
        let seq = self.entry_ids.next();
        let persist_id = self.persist.id_for(queue, &message, seq);
        if let Some(delay) = delay {
            let due = now.saturating_add_millis(delay);
            queue.delay(seq, Payload::Resident(message.clone()), due, persist_id);
            if persist_id.is_some() {
                let entry = Entry::new(seq, message, None, None, persist_id);
                self.persist_enqueue(id, &entry, Some(due));
            }
            self.reschedule(id);
            return Enqueued::Accepted;
        }
        let entry = queue.new_entry(seq, Payload::Resident(message), now, persist_id);
        if entry.persist_id().is_none() && !entry.expires_on_arrival() {
            // Nothing to store and no TTL 0 (most messages): ready, under the same look.
            queue.push_ready(entry, None);
        } else {
            // Before admitting: a TTL-0 expiry or an overflow drop settles it right away.
            self.persist_enqueue(id, &entry, None);
            self.admit(id, entry, None);
        }
        self.run_queue(id, now);
        Enqueued::Accepted
    }

    /// Whether an x-overflow reject-publish(-dlx) limit of queue `id` refuses a message of
    /// `body_size` now.
    fn over_publish_limit(&self, id: QueueId, body_size: usize) -> bool {
        self.queues.get(&id).is_some_and(|queue| queue.rejects_publish(body_size))
    }

    /// Moves the delayed messages due at `now` to ready, in due order (semantics §3). A message
    /// new to the queue starts its TTL at its due time; one coming back keeps its place.
    pub(crate) fn promote_due(&mut self, id: QueueId, now: Timestamp) {
        while let Some(queue) = self.queues.get_mut(&id) {
            let Some(due) = queue.delayed.next_near_due().filter(|due| *due <= now) else { break };
            if self.overdue.limits(due) {
                // Fell due while the broker was down: it waits for the limiter's credit, and
                // what is due after it waits behind it (overdue_release.rs).
                queue.delayed.hold(true);
                self.overdue.hold(id, due);
                break;
            }
            self.promote_next_delayed(id, now);
        }
    }

    /// Makes queue `id`'s first delayed message ready, if it is due at `now`.
    pub(crate) fn promote_next_delayed(&mut self, id: QueueId, now: Timestamp) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let Some((due, waiting)) = queue.delayed.pop_due(now) else { return };
        // Ready now: after every message already ready (a new place, a new id).
        let seq = self.entry_ids.next();
        let ready_seq = if waiting.returning { waiting.entry.seq } else { seq };
        self.move_pending_page_out(id, waiting.entry.persist_id(), ready_seq, None);
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let group = queue.take_waiting_group(waiting.entry.seq);
        if waiting.returning {
            queue.return_to_ready_in(waiting.entry, group);
            return;
        }
        // Nothing to write: stored as "waiting until `due`", recovery reads "ready since" (or a
        // checkpoint's state lists its new place if it is in memory then, `write_promoted`).
        let persist_id = waiting.entry.persist_id();
        let entry = queue.new_entry(seq, waiting.entry.payload, due, persist_id);
        if self.over_publish_limit(id, entry.body_size()) {
            // Refused: dead-lettered under reject-publish-dlx (settled after its copies are
            // stored), else dropped and settled.
            if self.queues.get(&id).is_some_and(|q| q.args.overflow == Overflow::RejectPublishDlx) {
                self.dead_letter_entry(id, entry, DeathReason::Maxlen);
            } else {
                self.persist_settle(id, persist_id);
            }
            return;
        }
        self.admit(id, entry, group);
    }

    /// A message becoming ready (at `entry.ready_at()`) in message group `group` if known:
    /// delivered or expired at once with TTL 0, else appended to the ready messages. The caller
    /// checked reject-publish limits.
    fn admit(&mut self, id: QueueId, entry: Entry, group: Option<GroupKey>) {
        if entry.expires_on_arrival() {
            // TTL 0: a consumer that can take it now gets it, else it expires at once (semantics §1).
            let ready_at = entry.ready_at().unwrap_or_default();
            if let Some(entry) = self.deliver_now(id, entry, ready_at) {
                if let Some(queue) = self.queues.get_mut(&id) {
                    queue.counters.expired += 1;
                }
                self.dead_letter_entry(id, entry, DeathReason::Expired);
            }
            return;
        }
        if let Some(queue) = self.queues.get_mut(&id) {
            queue.push_ready(entry, group);
        }
    }

    /// x-overflow drop-head: the oldest ready messages go (dead-lettered, reason `maxlen`) until the
    /// queue is within its limits. Under reject-publish a queue over its limits (a limit lowered
    /// by policy, requeued messages) keeps them, as RabbitMQ's maybe_drop_head does.
    pub(crate) fn enforce_limits(&mut self, id: QueueId) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        if !queue.drops_head_over_limits() {
            return;
        }
        let mut dropped = Vec::new();
        while overflow::is_over(&queue.args, queue.message_count(), queue.ready.body_bytes()) {
            match queue.drop_head() {
                Some(entry) => dropped.push(entry),
                None => break,
            }
        }
        for entry in dropped {
            self.dead_letter_entry(id, entry, DeathReason::Maxlen);
        }
    }
}
