//! Failed logins slow down per source address (AMQP and the HTTP API share one limiter).
//!
//! RabbitMQ has no such slowdown; we add one because a broker reachable from the network would
//! otherwise answer password guesses as fast as a client can send them. The rules:
//!
//! * A good login is never delayed: credentials are checked first, and only a refusal is held.
//! * The answer to a refused login is held `first_delay_ms × 2^(n-1)` (at most
//!   [`LOGIN_FAILURE_DELAY_MAX_MS`]), `n` counting the address's failures since it last had
//!   [`LOGIN_FAILURES_FORGOTTEN_AFTER_MS`] without one. A guesser that waits for each answer
//!   manages a few guesses a minute per connection.
//! * A guesser that does not wait (many connections at once) is capped by
//!   [`LOGIN_FAILURES_PENDING_MAX`]: while that many refusals from one address are still being
//!   held, further attempts from it are refused without looking at the password (and held too).
//!   A good login from that address fails only while such a burst is in flight.
//! * IPv6 addresses count per /64 (one host usually owns a whole /64).
//! * Memory is bounded: at most [`LOGIN_SOURCES_MAX`] addresses are tracked; when full, quiet
//!   ones are forgotten first, then the one whose last failure is oldest.
//!
//! Sans-IO: every call takes `now`; the callers hold the answer asynchronously (the session's
//! `LoginRefused` state with a deadline; the HTTP handler's sleep), never blocking a thread.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use hourglass_broker::Timestamp;

/// The longest a refused login's answer is held: 5 s, short enough that a person who mistyped
/// a password a few times is not locked out, long enough that guessing is slow.
pub const LOGIN_FAILURE_DELAY_MAX_MS: u64 = 5_000;
/// An address's failures are forgotten after a minute without one.
pub const LOGIN_FAILURES_FORGOTTEN_AFTER_MS: u64 = 60_000;
/// Refusals one address may have held at once before its further attempts are refused unchecked:
/// 8 lets a few clients behind one NAT retry at the same time.
pub const LOGIN_FAILURES_PENDING_MAX: usize = 8;
/// Source addresses tracked at once: 10,000 entries of under 200 bytes each (< 2 MiB).
pub const LOGIN_SOURCES_MAX: usize = 10_000;

/// Whether a login attempt's credentials are checked at all.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Check them.
    Check,
    /// Too many refusals from this address are still being held: refuse without checking, and
    /// hold the answer this long.
    Refuse { hold_ms: u64 },
}

/// Per-address failed-login state; see the module documentation.
#[derive(Debug)]
pub struct LoginLimiter {
    first_delay_ms: u64,
    sources: Mutex<HashMap<IpAddr, Source>>,
}

#[derive(Debug, Default)]
struct Source {
    failures: u32,
    last_failure: Timestamp,
    /// When each held refusal is answered (future ones only matter).
    pending: VecDeque<Timestamp>,
}

impl LoginLimiter {
    /// The first refusal from an address is held `first_delay_ms`; 0 turns the slowdown off.
    pub fn new(first_delay_ms: u64) -> Self {
        LoginLimiter { first_delay_ms, sources: Mutex::new(HashMap::new()) }
    }

    /// Asked before checking credentials from `source`.
    pub fn admit(&self, source: IpAddr, now: Timestamp) -> Admission {
        if self.first_delay_ms == 0 {
            return Admission::Check;
        }
        let mut sources = self.lock();
        let Some(entry) = sources.get_mut(&key(source)) else { return Admission::Check };
        entry.forget_answered(now);
        if entry.pending.len() < LOGIN_FAILURES_PENDING_MAX {
            return Admission::Check;
        }
        Admission::Refuse { hold_ms: self.delay_ms(entry.failures) }
    }

    /// A login from `source` was refused at `now`: how long to hold the answer (ms).
    pub fn record_failure(&self, source: IpAddr, now: Timestamp) -> u64 {
        if self.first_delay_ms == 0 {
            return 0;
        }
        let mut sources = self.lock();
        let source = key(source);
        if !sources.contains_key(&source) && sources.len() >= LOGIN_SOURCES_MAX {
            make_room(&mut sources, now);
        }
        let entry = sources.entry(source).or_default();
        entry.forget_answered(now);
        if now.as_millis().saturating_sub(entry.last_failure.as_millis()) >= LOGIN_FAILURES_FORGOTTEN_AFTER_MS
        {
            entry.failures = 0;
        }
        entry.failures = entry.failures.saturating_add(1);
        entry.last_failure = now;
        let hold_ms = self.delay_ms(entry.failures);
        if entry.pending.len() < LOGIN_FAILURES_PENDING_MAX {
            entry.pending.push_back(now.saturating_add_millis(hold_ms));
        }
        hold_ms
    }

    /// How many addresses are tracked (for tests and metrics).
    pub fn tracked_sources(&self) -> usize {
        self.lock().len()
    }

    fn delay_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(32);
        self.first_delay_ms.saturating_mul(1u64 << doublings).min(LOGIN_FAILURE_DELAY_MAX_MS)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Source>> {
        // A panic elsewhere mid-update leaves plain counters behind; keep limiting.
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for LoginLimiter {
    /// The slowdown off (tests and embedders that do not configure one).
    fn default() -> Self {
        LoginLimiter::new(0)
    }
}

impl Source {
    fn forget_answered(&mut self, now: Timestamp) {
        self.pending.retain(|answer_at| *answer_at > now);
    }

    fn is_quiet(&self, now: Timestamp) -> bool {
        self.pending.iter().all(|answer_at| *answer_at <= now)
            && now.as_millis().saturating_sub(self.last_failure.as_millis())
                >= LOGIN_FAILURES_FORGOTTEN_AFTER_MS
    }
}

/// Drops every quiet address; if none was, the one whose last failure is oldest.
fn make_room(sources: &mut HashMap<IpAddr, Source>, now: Timestamp) {
    sources.retain(|_, source| !source.is_quiet(now));
    if sources.len() < LOGIN_SOURCES_MAX {
        return;
    }
    let oldest = sources.iter().min_by_key(|(_, s)| s.last_failure).map(|(ip, _)| *ip);
    if let Some(ip) = oldest {
        sources.remove(&ip);
    }
}

/// IPv4 (also IPv4-mapped IPv6) as is; IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + ms)
    }

    /// Each failure from one address doubles the hold, up to the maximum; others are unaffected.
    #[test]
    fn holds_double_per_failure_up_to_the_maximum() {
        let limiter = LoginLimiter::new(100);
        let holds: Vec<u64> = (0..8).map(|i| limiter.record_failure(A, at(i * 10_000))).collect();
        assert_eq!(holds, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        assert_eq!(limiter.record_failure(B, at(80_000)), 100, "another address starts afresh");
    }

    /// A minute without failures forgets them: the next hold is the first one again.
    #[test]
    fn failures_are_forgotten_after_a_quiet_minute() {
        let limiter = LoginLimiter::new(100);
        limiter.record_failure(A, at(0));
        assert_eq!(limiter.record_failure(A, at(59_999)), 200);
        assert_eq!(limiter.record_failure(A, at(59_999 + LOGIN_FAILURES_FORGOTTEN_AFTER_MS)), 100);
    }

    /// While the maximum of refusals from one address are held, its further attempts are refused
    /// unchecked; once their holds end, attempts are checked again. Other addresses never wait.
    #[test]
    fn a_burst_of_pending_refusals_stops_checking_until_they_are_answered() {
        let limiter = LoginLimiter::new(1_000);
        for _ in 0..LOGIN_FAILURES_PENDING_MAX {
            assert_eq!(limiter.admit(A, at(0)), Admission::Check);
            limiter.record_failure(A, at(0));
        }
        assert!(matches!(limiter.admit(A, at(0)), Admission::Refuse { hold_ms: 5_000 }));
        assert_eq!(limiter.admit(B, at(0)), Admission::Check);
        // The first hold (1 s) ended: one slot is free again.
        assert_eq!(limiter.admit(A, at(1_000)), Admission::Check);
    }

    /// Tracked addresses never exceed the cap: quiet ones go first, then the stalest.
    #[test]
    fn tracked_addresses_are_bounded() {
        let limiter = LoginLimiter::new(10);
        let ip = |i: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        for i in 0..LOGIN_SOURCES_MAX as u32 {
            limiter.record_failure(ip(i), at(u64::from(i)));
        }
        assert_eq!(limiter.tracked_sources(), LOGIN_SOURCES_MAX);
        limiter.record_failure(ip(1 << 20), at(20_000));
        assert_eq!(limiter.tracked_sources(), LOGIN_SOURCES_MAX, "the stalest made room");
        limiter.record_failure(ip(2 << 20), at(200_000));
        assert_eq!(limiter.tracked_sources(), 1, "all quiet ones forgotten at once");
    }

    /// IPv6 addresses of one /64 share their count; 0 turns the slowdown off.
    #[test]
    fn ipv6_counts_per_64_and_zero_disables() {
        let limiter = LoginLimiter::new(100);
        limiter.record_failure("2001:db8::1".parse().unwrap(), at(0));
        assert_eq!(limiter.record_failure("2001:db8::ffff:2".parse().unwrap(), at(1)), 200);
        let off = LoginLimiter::new(0);
        assert_eq!(off.record_failure(A, at(0)), 0);
        assert_eq!(off.admit(A, at(0)), Admission::Check);
    }
}
