//! The one place that reads the OS clock.
//!
//! `now` is wall-clock milliseconds (persisted deadlines need the wall clock), but it advances with
//! the monotonic clock from a wall-clock anchor taken at start, so it never jumps backwards when
//! the system time is adjusted.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hourglass_broker::Timestamp;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    anchor_wall_ms: u64,
    anchor: Instant,
}

impl Clock {
    pub fn new() -> Self {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Clock { anchor_wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX), anchor: Instant::now() }
    }

    pub fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(u64::MAX);
        Timestamp::from_millis(self.anchor_wall_ms.saturating_add(elapsed))
    }

    /// The tokio instant at which `deadline` falls due.
    pub fn instant_of(&self, deadline: Timestamp) -> tokio::time::Instant {
        let offset = deadline.as_millis().saturating_sub(self.anchor_wall_ms);
        // Cap far-future deadlines so the addition cannot overflow (a year is "never" here).
        let offset = Duration::from_millis(offset.min(365 * 24 * 3600 * 1000));
        tokio::time::Instant::from_std(self.anchor + offset)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
