//! Delayed messages that fell due while the broker was down (issue 38): delivered as soon as it is
//! back, never early, in due order, at no more than the operator's rate
//! (`--overdue-release-rate`, messages a second; no limit by default).
//!
//! A restore at `now` marks every delayed message due at or before `now` as overdue. Without a
//! rate they become ready at the restore's first dispatch, as before. With one, a queue whose
//! next delayed message is overdue is *held*: its delay index stops filing that message's time
//! (`DelayIndex::hold`), and the queue waits here under its head's due time. At each of this
//! limiter's deadlines the broker releases the earliest-due head of all held queues, one credit
//! each (`Broker::release_overdue`), so the overdue messages of all queues leave in due order.
//! A held queue's later messages wait behind its overdue ones: a queue never delivers out of due
//! order. The credit refills at the rate, up to one second's worth, which is also there at once
//! after the restore.
//!
//! Sans-IO: every method takes `now`.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;

use crate::broker::Broker;
use crate::queue::QueueId;
use crate::time::Timestamp;

/// One message's worth of credit, in thousandths (the refill is `rate` thousandths a
/// millisecond, so no rounding is lost).
const ONE: u64 = 1_000;

#[derive(Debug, Default)]
pub(crate) struct OverdueRelease {
    /// Messages released a second at most; `None`: no limit, nothing is held.
    rate: Option<NonZeroU32>,
    /// The restore's time: a delayed message due at or before it fell due while the broker was
    /// down. `None` before a restore.
    restored_at: Option<Timestamp>,
    /// Credit in thousandths of a message, as of `refilled_at`.
    credit: u64,
    refilled_at: Timestamp,
    /// Held queues by their head's due time (ties by queue id).
    held: BTreeSet<(Timestamp, QueueId)>,
    /// Each held queue's key in `held`.
    held_at: HashMap<QueueId, Timestamp>,
}

impl OverdueRelease {
    pub fn new(rate: Option<NonZeroU32>) -> Self {
        OverdueRelease { rate, ..OverdueRelease::default() }
    }

    /// The broker was restored at `now`: what was due by then is overdue; a second's worth of
    /// credit is there at once.
    pub fn restored(&mut self, now: Timestamp) {
        self.restored_at = Some(now);
        self.refilled_at = now;
        self.credit = self.capacity();
    }

    /// Whether a delayed message due at `due` waits for credit rather than for its time.
    pub fn limits(&self, due: Timestamp) -> bool {
        self.rate.is_some() && self.restored_at.is_some_and(|at| due <= at)
    }

    /// Files queue `id` as held, its head due at `due` (replacing where it was filed).
    pub fn hold(&mut self, id: QueueId, due: Timestamp) {
        if let Some(was) = self.held_at.insert(id, due) {
            self.held.remove(&(was, id));
        }
        self.held.insert((due, id));
    }

    /// The held queue whose head is due first, taken out of the held set, if a credit is there
    /// for it at `now` (the credit is spent).
    pub fn next_release(&mut self, now: Timestamp) -> Option<QueueId> {
        let &(due, id) = self.held.first()?;
        self.refill(now);
        if self.credit < ONE {
            return None;
        }
        self.credit -= ONE;
        self.held.remove(&(due, id));
        self.held_at.remove(&id);
        Some(id)
    }

    /// Gives back the credit of a release that released nothing.
    pub fn refund(&mut self) {
        self.credit = (self.credit + ONE).min(self.capacity());
    }

    /// When the next credit is there for a held queue; `None` when none is held.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.held.first()?;
        let rate = u64::from(self.rate?.get());
        let missing = ONE.saturating_sub(self.credit);
        Some(self.refilled_at.saturating_add_millis(missing.div_ceil(rate)))
    }

    fn capacity(&self) -> u64 {
        self.rate.map_or(0, |rate| u64::from(rate.get()) * ONE)
    }

    fn refill(&mut self, now: Timestamp) {
        let Some(rate) = self.rate else { return };
        let elapsed = now.as_millis().saturating_sub(self.refilled_at.as_millis());
        self.credit = (self.credit + elapsed * u64::from(rate.get())).min(self.capacity());
        self.refilled_at = self.refilled_at.max(now);
    }
}

impl Broker {
    /// Releases held queues' overdue messages, earliest due first, while credit lasts; then
    /// dispatches each queue released from.
    pub(crate) fn release_overdue(&mut self, now: Timestamp) {
        let mut released = Vec::new();
        while let Some(id) = self.overdue.next_release(now) {
            let Some(queue) = self.queues.get_mut(&id) else {
                self.overdue.refund();
                continue;
            };
            if !queue.delayed.next_near_due().is_some_and(|due| due <= now && self.overdue.limits(due)) {
                // Its head was cancelled, rescheduled or purged meanwhile: back to its own timer.
                queue.delayed.hold(false);
                self.overdue.refund();
                self.reschedule(id);
                continue;
            }
            self.promote_next_delayed(id, now);
            let Some(queue) = self.queues.get_mut(&id) else { continue };
            match queue.delayed.next_near_due() {
                Some(due) if self.overdue.limits(due) => self.overdue.hold(id, due),
                _ => queue.delayed.hold(false),
            }
            if !released.contains(&id) {
                released.push(id);
            }
        }
        for id in released {
            self.run_queue(id, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn nothing_is_held_without_a_rate_or_before_a_restore() {
        let mut none = OverdueRelease::new(None);
        none.restored(at(1_000));
        assert!(!none.limits(at(500)));
        let two = OverdueRelease::new(NonZeroU32::new(2));
        assert!(!two.limits(at(500)), "no restore yet");
    }

    #[test]
    fn what_fell_due_by_the_restore_is_overdue() {
        let mut limiter = OverdueRelease::new(NonZeroU32::new(2));
        limiter.restored(at(1_000));
        assert!(limiter.limits(at(1_000)));
        assert!(!limiter.limits(at(1_001)));
    }

    #[test]
    fn releases_earliest_due_first_at_the_rate_after_a_second_s_worth() {
        let mut limiter = OverdueRelease::new(NonZeroU32::new(2));
        limiter.restored(at(10_000));
        limiter.hold(QueueId(1), at(5_000));
        limiter.hold(QueueId(2), at(3_000));
        assert_eq!(limiter.next_deadline(), Some(at(10_000)), "credit at once");
        assert_eq!(limiter.next_release(at(10_000)), Some(QueueId(2)));
        limiter.hold(QueueId(2), at(6_000));
        assert_eq!(limiter.next_release(at(10_000)), Some(QueueId(1)));
        limiter.hold(QueueId(1), at(7_000));
        assert_eq!(limiter.next_release(at(10_000)), None, "a second's worth spent");
        assert_eq!(limiter.next_deadline(), Some(at(10_500)));
        assert_eq!(limiter.next_release(at(10_499)), None);
        assert_eq!(limiter.next_release(at(10_500)), Some(QueueId(2)));
        assert_eq!(limiter.next_deadline(), Some(at(11_000)));
        assert_eq!(limiter.next_release(at(11_000)), Some(QueueId(1)));
        assert_eq!(limiter.next_deadline(), None, "nothing held");
    }

    #[test]
    fn credit_saved_up_is_capped_at_a_second_s_worth() {
        let mut limiter = OverdueRelease::new(NonZeroU32::new(3));
        limiter.restored(at(0));
        for queue in 1..=10 {
            limiter.hold(QueueId(queue), at(queue));
        }
        let released = std::iter::from_fn(|| limiter.next_release(at(60_000))).count();
        assert_eq!(released, 3);
    }

    #[test]
    fn a_queue_filed_again_is_held_once_under_its_new_time() {
        let mut limiter = OverdueRelease::new(NonZeroU32::new(1));
        limiter.restored(at(100));
        limiter.hold(QueueId(1), at(50));
        limiter.hold(QueueId(1), at(60));
        assert_eq!(limiter.next_release(at(100)), Some(QueueId(1)));
        assert_eq!(limiter.next_release(at(10_000)), None);
        assert_eq!(limiter.next_deadline(), None);
    }
}
