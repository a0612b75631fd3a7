//! A clock that moves only when a test says so.

use std::time::Duration;

use hourglass_broker::Timestamp;

#[derive(Clone, Copy, Debug)]
pub struct ManualClock {
    now: Timestamp,
}

impl ManualClock {
    /// Starts at a fixed, realistic wall-clock time (2026-01-01T00:00:00Z) so timestamps in
    /// headers look like real ones.
    pub fn new() -> Self {
        ManualClock { now: Timestamp::from_millis(1_767_225_600_000) }
    }

    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub fn advance(&mut self, by: Duration) -> Timestamp {
        self.now = self.now.saturating_add(by);
        self.now
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}
