//! Time as the broker sees it: wall-clock milliseconds handed in by the driver.
//!
//! The core never reads a clock (ARCHITECTURE.md rule 2). Deadlines are wall-clock milliseconds so
//! that persisted deadlines keep their meaning across a restart; the server derives `now` from a
//! monotonic clock anchored to the wall clock at start, so it never runs backwards.

use std::time::Duration;

/// The earlier of two times, either of which may be none: how a deadline is made of its parts
/// (run on every pass of a queue, so no min over an iterator of options).
pub(crate) fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// A point in time: milliseconds since the Unix epoch.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The earliest representable time.
    pub const ZERO: Timestamp = Timestamp(0);

    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Seconds since the epoch, as AMQP `timestamp` fields (x-death `time`) carry them.
    pub const fn as_secs(self) -> u64 {
        self.0 / 1000
    }

    /// `self + duration`, saturating at the far future.
    pub fn saturating_add(self, duration: Duration) -> Self {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// `ms` earlier, at the epoch at the earliest.
    pub const fn saturating_sub_millis(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_sub(ms))
    }

    pub const fn saturating_add_millis(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Time elapsed from `earlier` to `self`; zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}
