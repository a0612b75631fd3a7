//! `x-visibility-timeout` (queue argument and basic.consume override; semantics §4): a delivery
//! for manual ack that is not settled in time becomes ready again, its channel staying open.
//! The index orders outstanding deliveries by the time they become visible again.
//!
//! Leaves to others: taking the delivery back from its channel and returning the message
//! (`Broker::expire_visibility`), stale-tag bookkeeping (`channel.rs`).

use std::collections::BTreeSet;

use crate::api::{ChannelId, ConnectionId};
use crate::time::Timestamp;

/// Shortest visibility timeout: 1 s (semantics §4).
pub const MIN_VISIBILITY_MS: u64 = 1_000;
/// Longest visibility timeout: 12 h, as SQS (semantics §4).
pub const MAX_VISIBILITY_MS: u64 = 43_200_000;

/// One outstanding delivery: the channel that holds it and its delivery tag.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryRef {
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub tag: u64,
}

#[derive(Debug, Default)]
pub(crate) struct VisibilityIndex {
    invisible_until: BTreeSet<(Timestamp, DeliveryRef)>,
}

impl VisibilityIndex {
    pub fn insert(&mut self, visible_at: Timestamp, delivery: DeliveryRef) {
        self.invisible_until.insert((visible_at, delivery));
    }

    pub fn remove(&mut self, visible_at: Timestamp, delivery: DeliveryRef) {
        self.invisible_until.remove(&(visible_at, delivery));
    }

    pub fn next(&self) -> Option<Timestamp> {
        self.invisible_until.first().map(|(at, _)| *at)
    }

    /// The first `limit` outstanding deliveries, soonest back first.
    pub fn peek(&self, limit: usize) -> impl Iterator<Item = (Timestamp, DeliveryRef)> + '_ {
        self.invisible_until.iter().take(limit).copied()
    }

    /// How many deliveries are outstanding under a visibility timeout.
    pub fn delivery_count(&self) -> usize {
        self.invisible_until.len()
    }

    /// Removes and returns one delivery whose timeout has run out at `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<DeliveryRef> {
        match self.invisible_until.first() {
            Some(&(at, _)) if at <= now => self.invisible_until.pop_first().map(|(_, d)| d),
            _ => None,
        }
    }
}

/// Checks a visibility timeout value (ms): 1 s ..= 12 h.
pub(crate) fn check_range(ms: u64) -> Result<u64, String> {
    if (MIN_VISIBILITY_MS..=MAX_VISIBILITY_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!("{{value_out_of_range,{ms},{MIN_VISIBILITY_MS},{MAX_VISIBILITY_MS}}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// semantics §4: the timeout is 1 s to 12 h.
    #[test]
    fn timeout_range() {
        assert!(check_range(999).is_err());
        assert!(check_range(1_000).is_ok());
        assert!(check_range(43_200_000).is_ok());
        assert!(check_range(43_200_001).is_err());
    }
}
