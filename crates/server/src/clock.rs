//! The one place that reads the OS clock.
//!
//! `now` is wall-clock milliseconds (persisted deadlines need the wall clock), but it advances with
//! the monotonic clock from a wall-clock anchor taken at start, so it never jumps backwards when
//! the system time is adjusted. The anchor and the elapsed time are added in microseconds and
//! truncated to milliseconds once, so `now` is never a whole millisecond behind the wall clock:
//! a delay a publisher measures from its own clock never fires early by the broker's.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hourglass_broker::Timestamp;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    anchor_wall_us: u64,
    anchor: Instant,
}

impl Clock {
    pub fn new() -> Self {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Clock::anchored(wall, Instant::now())
    }

    /// A clock that reads `wall` (since the epoch) at `anchor`.
    fn anchored(wall: Duration, anchor: Instant) -> Self {
        Clock { anchor_wall_us: u64::try_from(wall.as_micros()).unwrap_or(u64::MAX), anchor }
    }

    pub fn now(&self) -> Timestamp {
        self.at(Instant::now())
    }

    /// The wall-clock millisecond at `instant` (not before the anchor).
    fn at(&self, instant: Instant) -> Timestamp {
        let elapsed = instant.saturating_duration_since(self.anchor);
        let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        Timestamp::from_millis(self.anchor_wall_us.saturating_add(elapsed_us) / 1000)
    }

    /// The tokio instant at which `deadline` falls due: the first at which `now` reads it.
    pub fn instant_of(&self, deadline: Timestamp) -> tokio::time::Instant {
        let offset_us = deadline.as_millis().saturating_mul(1000).saturating_sub(self.anchor_wall_us);
        // Cap far-future deadlines so the addition cannot overflow (a year is "never" here).
        let offset = Duration::from_micros(offset_us.min(365 * 24 * 3600 * 1_000_000));
        tokio::time::Instant::from_std(self.anchor + offset)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anchored at 1000.9 ms, 0.5 ms later it reads 1001, not 1000: the fractions add up before
    /// they are cut (issue 23: tracers with a relative delay arrived 1 ms early by their
    /// publisher's clock when both were cut).
    #[test]
    fn now_is_never_a_whole_millisecond_behind() {
        let anchor = Instant::now();
        let clock = Clock::anchored(Duration::from_micros(1_000_900), anchor);
        assert_eq!(clock.at(anchor), Timestamp::from_millis(1000));
        assert_eq!(clock.at(anchor + Duration::from_micros(500)), Timestamp::from_millis(1001));
        assert_eq!(clock.at(anchor + Duration::from_micros(99)), Timestamp::from_millis(1000));
    }

    /// A deadline's instant is the first at which the clock reads it: never before.
    #[test]
    fn a_deadline_falls_due_when_the_clock_reads_it() {
        let anchor = Instant::now();
        let clock = Clock::anchored(Duration::from_micros(1_000_900), anchor);
        let deadline = Timestamp::from_millis(1005);
        let at = clock.instant_of(deadline).into_std();
        assert_eq!(clock.at(at), deadline);
        assert_eq!(clock.at(at - Duration::from_micros(1)), Timestamp::from_millis(1004));
    }
}
