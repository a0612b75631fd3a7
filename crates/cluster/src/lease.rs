//! How long this node's etcd lease is known to hold, by its own monotonic clock (sans-IO).
//!
//! etcd restarts a lease's TTL when it *processes* a keepalive, which is after this node *sent*
//! it. So from the send time of the last keepalive etcd answered, the lease holds at least the TTL
//! etcd reported — as etcd's clock counts. This node's clock may run slower than etcd's by up to
//! [`DRIFT`], and etcd's expiry and a follower's campaign then take some time of their own
//! that we do not count on. The lease is taken as valid until
//!
//! ```text
//! sent + ttl × (1 − DRIFT) − MARGIN
//! ```
//!
//! and a leader confirms nothing from then on (docs/clustering.md "Lease safety").

use std::time::{Duration, Instant};

/// The largest rate difference between this node's monotonic clock and etcd's that the rule
/// tolerates (5 %: far beyond NTP-disciplined or even free-running quartz clocks, ~0.01 %).
pub const DRIFT: f64 = 0.05;
/// A fixed allowance besides the drift, for the time between reading the clock and acting.
pub const MARGIN: Duration = Duration::from_millis(50);

/// The lease as this node last renewed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseClock {
    ttl: Duration,
    /// When the last keepalive etcd answered (with time left) was sent.
    sent: Instant,
    /// The time left etcd reported then.
    granted: Duration,
}

impl LeaseClock {
    /// A lease of `ttl` granted by a request sent at `sent`.
    pub fn granted(ttl: Duration, sent: Instant) -> LeaseClock {
        LeaseClock { ttl, sent, granted: ttl }
    }

    /// Whether a keepalive is due: a third of the TTL since the last one that held.
    pub fn renewal_due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.sent) >= self.ttl / 3
    }

    /// etcd answered a keepalive sent at `sent` with `left` of the lease remaining.
    pub fn renewed(&mut self, sent: Instant, left: Duration) {
        if sent >= self.sent {
            self.sent = sent;
            self.granted = left.min(self.ttl);
        }
    }

    /// The instant from which this node must act as if the lease had expired.
    pub fn valid_until(&self) -> Instant {
        let safe = self.granted.mul_f64(1.0 - DRIFT).saturating_sub(MARGIN);
        self.sent + safe
    }

    pub fn holds(&self, now: Instant) -> bool {
        now < self.valid_until()
    }
}

/// The lease a node holds: etcd's id for it, and how long it holds by this node's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLease {
    pub id: i64,
    pub clock: LeaseClock,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    #[test]
    fn the_lease_counts_from_the_send_time_less_the_drift_margin() {
        let start = Instant::now();
        let lease = LeaseClock::granted(TTL, start);
        // 3 s × 0.95 − 50 ms = 2.8 s
        assert_eq!(lease.valid_until(), start + Duration::from_millis(2_800));
        assert!(lease.holds(start + Duration::from_millis(2_799)));
        assert!(!lease.holds(start + Duration::from_millis(2_800)));
    }

    #[test]
    fn a_renewal_moves_the_window_to_its_send_time_not_its_answer_time() {
        let start = Instant::now();
        let mut lease = LeaseClock::granted(TTL, start);
        let sent = start + Duration::from_secs(1);
        // The answer came 1.4 s later (a slow etcd): the window still starts at `sent`.
        lease.renewed(sent, TTL);
        assert_eq!(lease.valid_until(), sent + Duration::from_millis(2_800));
    }

    #[test]
    fn a_late_answer_to_an_older_keepalive_does_not_shorten_or_extend_the_window() {
        let start = Instant::now();
        let mut lease = LeaseClock::granted(TTL, start);
        lease.renewed(start + Duration::from_secs(2), TTL);
        lease.renewed(start + Duration::from_secs(1), TTL);
        assert_eq!(lease.valid_until(), start + Duration::from_millis(4_800));
    }

    #[test]
    fn etcd_reporting_less_time_left_shortens_the_window() {
        let start = Instant::now();
        let mut lease = LeaseClock::granted(TTL, start);
        lease.renewed(start, Duration::from_secs(2));
        assert_eq!(lease.valid_until(), start + Duration::from_millis(1_850));
    }

    #[test]
    fn a_renewal_is_due_every_third_of_the_ttl() {
        let start = Instant::now();
        let lease = LeaseClock::granted(TTL, start);
        assert!(!lease.renewal_due(start + Duration::from_millis(999)));
        assert!(lease.renewal_due(start + Duration::from_secs(1)));
    }
}
