//! The broker's timeouts: what `handle_timeout` fires, and when it next has work. Each queue is
//! filed under its earliest deadline in the timer index its owner keeps (`queues.rs`), so a
//! timeout visits only queues with work due.

use crate::broker::Broker;
use crate::queue::entry::Entry;
use crate::queue::{DeathReason, QueueId};
use crate::time::Timestamp;

impl Broker {
    /// Fires every timer due at `now`: releases delayed messages overdue since a restart
    /// (overdue_release.rs), expires messages (dead-lettering them), deletes queues
    /// unused for their `x-expires`, and times out deliveries under the broker's default consumer
    /// timeout (consumer_timeout.rs).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.release_overdue(now);
        while let Some(id) = self.queues.pop_due(now) {
            if self.queues.get(&id).is_some_and(|queue| queue.is_expired(now)) {
                self.delete_queue(id);
                continue;
            }
            self.run_queue(id, now);
        }
        self.sweep_default_timeouts(now);
        self.run_dead_letters(now);
        self.flush_definitions();
    }

    /// The earliest time `handle_timeout` has work to do.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        [self.queues.next_deadline(), self.default_timeouts.next(), self.overdue.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Files a queue under its current earliest deadline (call after anything that may change it).
    /// Also settles the messages the queue dropped because they could not be read back, and
    /// collects the spill reads its far tier asked for (`spill_reads.rs`) and the read of paged
    /// messages it asked for (`message_reads.rs`).
    pub(crate) fn reschedule(&mut self, id: QueueId) {
        for msg_id in self.queues.refile(id).unwrap_or_default() {
            self.persist.settle(id, msg_id);
        }
    }

    /// Fires queue `id`'s timers due at `now`, each kind in its own place: deliveries whose
    /// visibility timeout ran out become ready again (redelivery.rs), far-future delayed
    /// messages within the horizon come from disk (queue/delay.rs), delayed messages whose time
    /// came become ready (enqueue.rs), and messages whose TTL ran out leave for dead-lettering.
    /// Called when `Queue::timers_due` says so (`run_queue`).
    pub(crate) fn fire_due_timers(&mut self, id: QueueId, now: Timestamp) {
        self.expire_visibility(id, now);
        if let Some(queue) = self.queues.get_mut(&id) {
            queue.delayed.load_due_soon(now);
        }
        self.promote_due(id, now);
        self.expire_messages(id, now);
    }

    /// Removes a queue's expired ready messages and queues them for dead-lettering (semantics §1:
    /// an expired message is never delivered).
    pub(crate) fn expire_messages(&mut self, id: QueueId, now: Timestamp) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let mut expired: Vec<Entry> = Vec::new();
        queue.take_expired(now, &mut expired);
        for entry in expired {
            self.dead_letter_entry(id, entry, DeathReason::Expired);
        }
    }
}
