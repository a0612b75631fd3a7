//! Rate-limited logging of an operation that fails again and again while it is retried (the
//! store's writes on a full disk, retried every 500 ms): one ERROR when it starts failing, then
//! at most one per [`FailureLog`] interval with the count of failures since, and one line when
//! it succeeds again. Time is an argument, so tests drive it with made-up instants.

use std::time::{Duration, Instant};

/// How often a failure that goes on is reported again: often enough that an operator watching
/// the log sees it is still going on, rarely enough that a long outage costs a few lines.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// The state of one retried operation's failures.
#[derive(Debug)]
pub struct FailureLog {
    interval: Duration,
    /// Set while failing: when the first failure happened.
    failing_since: Option<Instant>,
    last_logged: Option<Instant>,
    /// Failures since `failing_since`.
    failures: u64,
    /// Failures since the last line.
    unlogged: u64,
}

/// What to log now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLine {
    /// The first failure after a success (or ever).
    Started,
    /// Still failing: `failures` since the last line, over `failing_for` in all.
    StillFailing { failures: u64, failing_for: Duration },
    /// Succeeded after `failures` failures over `failed_for`.
    Recovered { failures: u64, failed_for: Duration },
}

impl FailureLog {
    /// Reports a failure that goes on at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        FailureLog { interval, failing_since: None, last_logged: None, failures: 0, unlogged: 0 }
    }

    /// The operation failed at `now`: what to log, if anything.
    pub fn on_failure(&mut self, now: Instant) -> Option<LogLine> {
        self.failures += 1;
        let Some(since) = self.failing_since else {
            self.failing_since = Some(now);
            self.last_logged = Some(now);
            return Some(LogLine::Started);
        };
        self.unlogged += 1;
        let due = self.last_logged.is_none_or(|at| now.saturating_duration_since(at) >= self.interval);
        if !due {
            return None;
        }
        self.last_logged = Some(now);
        let failures = std::mem::take(&mut self.unlogged);
        Some(LogLine::StillFailing { failures, failing_for: now.saturating_duration_since(since) })
    }

    /// The operation succeeded at `now`: a line if it had been failing.
    pub fn on_success(&mut self, now: Instant) -> Option<LogLine> {
        let since = self.failing_since.take()?;
        let failures = std::mem::take(&mut self.failures);
        self.unlogged = 0;
        self.last_logged = None;
        Some(LogLine::Recovered { failures, failed_for: now.saturating_duration_since(since) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write retried every 500 ms for three minutes on a full disk logs its start, once a
    /// minute with the count since, and its recovery: 5 lines instead of 360.
    #[test]
    fn a_long_failure_logs_at_start_once_a_minute_and_at_recovery() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut log = FailureLog::new(REPEAT_INTERVAL);
        assert_eq!(log.on_success(at(0)), None, "nothing to say without a failure");
        let mut lines = Vec::new();
        for retry in 0..360 {
            lines.extend(log.on_failure(at(1_000 + retry * 500)).map(|line| (retry, line)));
        }
        let minute = Duration::from_secs(60);
        assert_eq!(
            lines,
            vec![
                (0, LogLine::Started),
                (120, LogLine::StillFailing { failures: 120, failing_for: minute }),
                (240, LogLine::StillFailing { failures: 120, failing_for: 2 * minute }),
            ]
        );
        let recovered = log.on_success(at(1_000 + 360 * 500));
        assert_eq!(recovered, Some(LogLine::Recovered { failures: 360, failed_for: 3 * minute }));
        assert_eq!(log.on_success(at(200_000)), None);
        // The next outage starts afresh.
        assert_eq!(log.on_failure(at(300_000)), Some(LogLine::Started));
        assert_eq!(log.on_failure(at(300_500)), None);
    }
}
