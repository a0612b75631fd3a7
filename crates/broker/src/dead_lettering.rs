//! Carrying out dead-lettering (semantics §2): the rewritten message is routed through the source
//! queue's dead-letter exchange into its targets, minus those that would close a cycle. Work is
//! collected in a list and run after the operation that caused it, so one death cannot recurse
//! into another while a queue is being changed.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::broker::{release_burst_capacity, Broker};
use crate::message::Message;
use crate::queue::dead_letter::{self, DeadLetter};
use crate::queue::entry::{Entry, Payload};
use crate::queue::{DeathReason, QueueId};
use crate::routing;
use crate::sender_selected::HeaderRoutes;
use crate::time::Timestamp;

/// A bound on dead-letterings carried out per operation: a pathological topology (a rejection
/// ping-pong through max-length-0 queues) stops here instead of spinning; the rest are dropped
/// and logged.
const MAX_DEAD_LETTERS_PER_RUN: usize = 1_000_000;

/// Dead-letterings waiting to be carried out, with the queue each leaves.
pub(crate) type DeadLetterQueue = VecDeque<(QueueId, DeadLetter)>;

impl Broker {
    /// Notes a queued message leaving queue `from` for `reason` (see `dead_letter_later`).
    /// A packed or paged-out message is made resident only when there is a dead-letter exchange
    /// to send it to: a packed one at once, a paged one by a read the driver performs, which
    /// later expired or dropped messages of the queue wait behind (`dead_letter_reads.rs`). One that cannot
    /// be read is dropped (and settled) like an expired one without a DLX.
    pub(crate) fn dead_letter_entry(&mut self, from: QueueId, mut entry: Entry, reason: DeathReason) {
        let persist_id = entry.persist_id();
        // Handed out this many times here: each failed delivery counted, and a rejected one is
        // the delivery under way (semantics §5).
        let receives = entry.delivery_count.saturating_add(u32::from(reason == DeathReason::Rejected));
        let Some(queue) = self.queues.get_mut(&from) else { return };
        if queue.args.dead_letter_exchange.is_some() {
            if entry.paged_at().is_none() && !queue.pager.page_in(&mut entry) {
                // Noted lost by page_in: settled with the queue's other lost messages.
                return;
            }
            // Only a message still stored as queued waits behind a read: a restart brings it back
            // to leave again. A rejected or over-limit one was delivered; it leaves at once.
            let restorable = matches!(reason, DeathReason::Expired | DeathReason::Maxlen);
            if entry.paged_at().is_some() || (restorable && self.dead_letter_reads.waits(from)) {
                return self.dead_letter_after_read(from, entry, reason, receives);
            }
        }
        match entry.payload {
            Payload::Resident(message) => self.dead_letter_later(from, message, reason, receives, persist_id),
            // No dead-letter exchange: the body is not needed, the message just leaves.
            Payload::Packed(_) | Payload::Paged(_) => self.persist_settle(from, persist_id),
        }
    }

    /// Notes a message leaving queue `from` for `reason`; carried out by `run_dead_letters`.
    /// A persisted source (`persist_id`) is settled in the store only after its copies are
    /// enqueued into the targets (semantics §2: at-least-once, also across a crash); without a
    /// dead-letter exchange it is settled at once.
    pub(crate) fn dead_letter_later(
        &mut self,
        from: QueueId,
        message: Arc<Message>,
        reason: DeathReason,
        receives: u32,
        persist_id: Option<u64>,
    ) {
        let Some(queue) = self.queues.get_mut(&from) else { return };
        let counter = match reason {
            DeathReason::Rejected => &mut queue.counters.dead_lettered_rejected,
            DeathReason::Expired => &mut queue.counters.dead_lettered_expired,
            DeathReason::Maxlen => &mut queue.counters.dead_lettered_maxlen,
            DeathReason::DeliveryLimit => &mut queue.counters.dead_lettered_delivery_limit,
        };
        if queue.args.dead_letter_exchange.is_some() {
            *counter += 1;
            self.dead_letters.push_back((from, DeadLetter { message, reason, receives, persist_id }));
        } else {
            self.persist_settle(from, persist_id);
        }
    }

    /// Carries out every pending dead-lettering, including those it causes in turn.
    pub(crate) fn run_dead_letters(&mut self, now: Timestamp) {
        let mut done = 0usize;
        while let Some((from, dead)) = self.dead_letters.pop_front() {
            done += 1;
            if done > MAX_DEAD_LETTERS_PER_RUN {
                tracing::warn!(dropped = self.dead_letters.len() + 1, "dead-letter run limit reached");
                for (from, dead) in std::mem::take(&mut self.dead_letters) {
                    self.persist_settle(from, dead.persist_id);
                }
                break;
            }
            let source = dead.persist_id;
            self.republish_dead(from, dead, now);
            // After the copies' Enqueue ops: a crash in between keeps both, never neither.
            self.persist_settle(from, source);
        }
        release_burst_capacity(&mut self.dead_letters);
    }

    fn republish_dead(&mut self, from: QueueId, dead: DeadLetter, now: Timestamp) {
        let Some(queue) = self.queues.get(&from) else { return };
        let Some(dlx) = queue.args.dead_letter_exchange.clone() else { return };
        let rewritten = dead_letter::rewrite(
            &dead.message,
            queue.name(),
            dead.reason,
            now,
            &dlx,
            queue.args.dead_letter_routing_key.as_ref(),
            queue.is_sqs_managed().then_some(dead.receives),
        );
        let Some(vhost) = self.vhosts.get(&queue.vhost) else { return };
        // A missing dead-letter exchange drops the message without error, as RabbitMQ.
        if !vhost.exchanges.contains_key(&dlx) {
            return;
        }
        // The CC keys the message still carries route it again (rabbit_dead_letter); a
        // dead-letter routing key replaces them (rewrite drops the header). Read when made.
        let cc = HeaderRoutes::read(rewritten.properties()).unwrap_or_default();
        let mut targets = Vec::new();
        routing::route(vhost, &dlx, &rewritten, cc.keys(), &mut targets);
        let headers = rewritten.properties().headers();
        targets.retain(|id| {
            self.queues.get(id).is_some_and(|q| !dead_letter::is_cycle(headers.as_ref(), q.name()))
        });
        let message = Arc::new(rewritten);
        for id in targets {
            self.enqueue(id, message.clone(), now, None);
        }
    }
}
