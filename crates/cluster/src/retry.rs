//! Riding out an unreachable etcd (issue #21, finding 3): a node never gives up on etcd. It
//! tries again after a bounded, jittered back-off and says so at WARN at most every
//! [`OUTAGE_LOG_INTERVAL`], then once when etcd answers again.
//!
//! Both parts are pure: the back-off is a function of the attempt number and a jitter value, the
//! log rate of the `now` it is given, so both are unit-tested without sleeping.

use std::time::{Duration, Instant};

/// The first pause after a failure: short, so a blip (an etcd leader change) costs little.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(250);
/// The longest pause: an etcd that comes back is noticed within this (plus one request), so the
/// cluster serves again well inside 10 s of its return, while a node does not hammer an etcd that
/// is restarting (three nodes, a few requests each per pause).
pub const BACKOFF_MAX: Duration = Duration::from_secs(4);
/// At most one WARN line this often while etcd stays unreachable.
pub const OUTAGE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The pause before retry number `attempt` (0 = after the first failure): 250 ms doubling to
/// [`BACKOFF_MAX`], then the upper half of that range picked by `jitter` (0 ..= u16::MAX), so that
/// nodes cut off together do not all come back in the same instant.
pub fn backoff_delay(attempt: u32, jitter: u16) -> Duration {
    let doubled = BACKOFF_INITIAL.saturating_mul(1u32 << attempt.min(16));
    let ceiling = doubled.min(BACKOFF_MAX);
    let half = ceiling / 2;
    half + half.mul_f64(f64::from(jitter) / f64::from(u16::MAX))
}

/// The retry schedule of one loop: the attempt count since the last success, and the source of
/// its jitter.
#[derive(Debug)]
pub struct Backoff {
    attempt: u32,
    jitter: SplitMix64,
}

impl Default for Backoff {
    /// Jitter seeded from the system's random numbers.
    fn default() -> Backoff {
        Backoff::seeded(random_seed())
    }
}

impl Backoff {
    /// Jitter from `seed`: the same pauses for the same seed (the simulation replays them).
    pub fn seeded(seed: u64) -> Backoff {
        Backoff { attempt: 0, jitter: SplitMix64::new(seed) }
    }

    /// The pause before the next try.
    pub fn next_delay(&mut self) -> Duration {
        let delay = backoff_delay(self.attempt, self.jitter.next_u64() as u16);
        self.attempt = self.attempt.saturating_add(1);
        delay
    }

    /// etcd answered: the next failure starts from the shortest pause again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A seed from the system's random numbers (without them, 0: the pauses are still bounded).
pub fn random_seed() -> u64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// SplitMix64: a small seeded generator, the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What to log about an etcd outage, and when.
#[derive(Debug, Default)]
pub struct OutageLog {
    /// When the outage began, when it was last logged, and the failures since that line.
    outage: Option<(Instant, Instant, u64)>,
}

/// A line [`OutageLog`] says to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutageLine {
    /// etcd does not answer (the first failure, or a reminder): failures since the last line.
    Unreachable { failures: u64, for_ms: u64 },
    /// etcd answers again after `for_ms` of outage.
    Back { for_ms: u64 },
}

impl OutageLog {
    /// A request failed at `now`; the line to log, if one is due.
    pub fn on_failure(&mut self, now: Instant) -> Option<OutageLine> {
        match &mut self.outage {
            None => {
                self.outage = Some((now, now, 0));
                Some(OutageLine::Unreachable { failures: 1, for_ms: 0 })
            }
            Some((began, logged, failures)) => {
                *failures += 1;
                if now.duration_since(*logged) < OUTAGE_LOG_INTERVAL {
                    return None;
                }
                let line = OutageLine::Unreachable {
                    failures: *failures,
                    for_ms: now.duration_since(*began).as_millis() as u64,
                };
                (*logged, *failures) = (now, 0);
                Some(line)
            }
        }
    }

    /// A request succeeded at `now`; a line if an outage just ended.
    pub fn on_success(&mut self, now: Instant) -> Option<OutageLine> {
        let (began, _, _) = self.outage.take()?;
        Some(OutageLine::Back { for_ms: now.duration_since(began).as_millis() as u64 })
    }
}

impl OutageLine {
    /// Writes the line (WARN while unreachable, INFO when back), naming what the node was doing
    /// and, while unreachable, the last error.
    pub fn write(&self, doing: &str, error: Option<&dyn std::fmt::Display>) {
        match *self {
            OutageLine::Unreachable { failures, for_ms } => {
                let error = error.map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(
                    %error, failures, unreachable_for_ms = for_ms,
                    "etcd unreachable while {doing}; retrying with back-off"
                )
            }
            OutageLine::Back { for_ms } => {
                tracing::info!(unreachable_for_ms = for_ms, "etcd answers again ({doing})")
            }
        }
    }
}

/// Sleeps `total`, in short steps, returning early once `stop` is set: a node shutting down
/// does not sit out a back-off.
pub fn pause_unless_stopped(stop: &std::sync::atomic::AtomicBool, total: Duration) {
    const STEP: Duration = Duration::from_millis(50);
    let until = Instant::now() + total;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(STEP));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_250_ms_and_stays_under_the_cap() {
        // Without jitter each pause is half its range: 125, 250, 500 ms … up to half the cap.
        assert_eq!(backoff_delay(0, 0), Duration::from_millis(125));
        assert_eq!(backoff_delay(1, 0), Duration::from_millis(250));
        assert_eq!(backoff_delay(2, 0), Duration::from_millis(500));
        assert_eq!(backoff_delay(0, u16::MAX), BACKOFF_INITIAL);
        for attempt in [4, 5, 10, 31, u32::MAX] {
            assert_eq!(backoff_delay(attempt, u16::MAX), BACKOFF_MAX, "attempt {attempt}");
            assert_eq!(backoff_delay(attempt, 0), BACKOFF_MAX / 2, "attempt {attempt}");
        }
    }

    #[test]
    fn jitter_spreads_a_pause_over_the_upper_half_of_its_range() {
        let low = backoff_delay(3, 0);
        let mid = backoff_delay(3, u16::MAX / 2);
        let high = backoff_delay(3, u16::MAX);
        assert!(low < mid && mid < high, "{low:?} {mid:?} {high:?}");
        assert_eq!(high, Duration::from_secs(2));
    }

    #[test]
    fn a_backoff_starts_over_after_a_success() {
        let mut backoff = Backoff::default();
        for _ in 0..10 {
            assert!(backoff.next_delay() <= BACKOFF_MAX);
        }
        backoff.reset();
        assert!(backoff.next_delay() <= BACKOFF_INITIAL);
    }

    #[test]
    fn an_outage_is_logged_at_once_then_at_most_every_ten_seconds() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut log = OutageLog::default();
        assert_eq!(log.on_failure(at(0)), Some(OutageLine::Unreachable { failures: 1, for_ms: 0 }));
        let quiet: Vec<_> = (1..40).filter_map(|i| log.on_failure(at(i * 250))).collect();
        assert!(quiet.is_empty(), "{quiet:?}");
        assert_eq!(
            log.on_failure(at(10_000)),
            Some(OutageLine::Unreachable { failures: 40, for_ms: 10_000 })
        );
        assert_eq!(log.on_failure(at(12_000)), None);
        assert_eq!(log.on_success(at(13_000)), Some(OutageLine::Back { for_ms: 13_000 }));
        assert_eq!(log.on_success(at(14_000)), None);
        assert_eq!(log.on_failure(at(15_000)), Some(OutageLine::Unreachable { failures: 1, for_ms: 0 }));
    }
}
