//! How many long polls may wait at once, per access key and per source address (issue 37,
//! finding 5). A waiting ReceiveMessage holds an HTTP connection for up to 20 s, and every
//! listener has one pool of connections (`--http-max-connections`, 1,024): without a bound, one
//! key's 10,000 long polls took them all and every other client's SendMessage got 503 for as long
//! as they waited. A long poll that would pass a bound is refused at once with `RequestThrottled`,
//! the code SDKs back off and retry on; a poll that finds a message, or asks for no wait and
//! finds no paged head being read (`messages.rs`, `READ_WAIT_MAX`), never counts, so a bound
//! never slows a busy queue's receives.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::error::SqsError;

/// Long polls one access key, and one source address whatever keys it signs with, may have
/// waiting at once unless configured (`sqs_max_long_polls`): a quarter of the default connection
/// pool, so no single key or host can take it, and ten times more than a busy worker fleet
/// needs (20 concurrent aiobotocore pollers, Celery's one poll per queue per worker).
pub const WAITING_MAX_DEFAULT: usize = 256;

/// The long polls waiting now, by access key and by address.
#[derive(Debug)]
pub struct LongPolls {
    /// The most one key, and one address, may have waiting.
    max: usize,
    counts: Mutex<Counts>,
}

impl Default for LongPolls {
    fn default() -> Self {
        LongPolls::with_max(WAITING_MAX_DEFAULT)
    }
}

#[derive(Debug, Default)]
struct Counts {
    by_key: HashMap<String, usize>,
    by_address: HashMap<IpAddr, usize>,
}

/// One waiting long poll's place; given back when dropped.
#[derive(Debug)]
pub struct Waiting {
    polls: Arc<LongPolls>,
    key: String,
    address: Option<IpAddr>,
}

impl LongPolls {
    /// At most `max` waiting long polls per key and per address.
    pub fn with_max(max: usize) -> Self {
        LongPolls { max, counts: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one more long poll of `key` from `address`, unless either holds its maximum.
    pub fn admit(self: &Arc<Self>, key: &str, address: Option<IpAddr>) -> Result<Waiting, SqsError> {
        let mut counts = self.lock();
        let of_key = counts.by_key.get(key).copied().unwrap_or(0);
        let of_address = address.map_or(0, |a| counts.by_address.get(&a).copied().unwrap_or(0));
        if of_key >= self.max {
            return Err(throttled(format!("the access key has {of_key} long polls waiting")));
        }
        if of_address >= self.max {
            return Err(throttled(format!("this address has {of_address} long polls waiting")));
        }
        *counts.by_key.entry(key.to_owned()).or_default() += 1;
        if let Some(address) = address {
            *counts.by_address.entry(address).or_default() += 1;
        }
        Ok(Waiting { polls: self.clone(), key: key.to_owned(), address })
    }

    /// Long polls waiting now for `key` (for tests and listings).
    pub fn waiting_for_key(&self, key: &str) -> usize {
        self.lock().by_key.get(key).copied().unwrap_or(0)
    }
}

fn throttled(why: String) -> SqsError {
    SqsError::RequestThrottled(format!(
        "Request is throttled: {why}, the most one key or address may have (retry later)."
    ))
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut counts = self.polls.lock();
        release(&mut counts.by_key, &self.key);
        if let Some(address) = &self.address {
            release(&mut counts.by_address, address);
        }
    }
}

/// One fewer for `at`, and its entry gone at zero (so the maps hold only who is waiting).
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, at: &K) {
    if let Some(count) = counts.get_mut(at) {
        *count -= 1;
        if *count == 0 {
            counts.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key or an address at its maximum is refused with RequestThrottled; a place given back
    /// admits the next, and other keys and addresses are not affected meanwhile.
    #[test]
    fn keys_and_addresses_are_bounded_apart() {
        let polls = Arc::new(LongPolls::with_max(3));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut held: Vec<Waiting> = (0..3).map(|_| polls.admit("k1", Some(a)).unwrap()).collect();
        assert!(matches!(polls.admit("k1", Some(b)), Err(SqsError::RequestThrottled(_))));
        assert!(matches!(polls.admit("k2", Some(a)), Err(SqsError::RequestThrottled(_))), "address full");
        let other = polls.admit("k2", Some(b)).unwrap();
        held.pop();
        let again = polls.admit("k1", Some(b)).unwrap();
        assert_eq!(polls.waiting_for_key("k1"), 3);
        drop((held, again, other));
        assert_eq!(polls.waiting_for_key("k1"), 0);
        assert!(polls.lock().by_key.is_empty() && polls.lock().by_address.is_empty(), "nothing kept");
    }
}
