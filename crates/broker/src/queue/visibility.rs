//! A delivery's deadline (semantics §4): a delivery for manual ack that is not settled in time
//! comes back to its queue. Two settings give one, and one index holds both:
//! - `x-visibility-timeout` (queue argument, policy, basic.consume override): the delivery
//!   becomes ready again and nobody is told; the consumer keeps going (SQS's model);
//! - `x-consumer-timeout` (RabbitMQ 4.3: consumer argument, queue argument, policy): the delivery
//!   becomes ready again and the consumer is cancelled, or its channel closed
//!   (`consumer_timeout.rs`).
//!
//! The index orders outstanding deliveries by deadline. The broker-wide default consumer timeout
//! (`consumer_timeout` in the config, 30 minutes as RabbitMQ's) is not kept here: every delivery
//! without a deadline of its own has it, so its channel's deliveries run out in tag order and
//! `consumer_timeout.rs` finds them there, with nothing added to each delivery's path.
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

/// What runs out at a delivery's deadline.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeadlineKind {
    /// `x-visibility-timeout`: the delivery comes back quietly; it carries a receipt handle.
    Visibility,
    /// `x-consumer-timeout` of this many ms: the delivery comes back and its consumer hears of it.
    ConsumerTimeout(u64),
}

/// When an unsettled delivery comes back, and why.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub at: Timestamp,
    pub kind: DeadlineKind,
}

impl Deadline {
    /// The deadline of a delivery made at `now` under these timeouts (`None`: the broker's
    /// default consumer timeout applies). With both, the earlier one runs; a tie goes to the
    /// visibility timeout, whose return is the gentler.
    pub fn of_delivery(
        visibility_ms: Option<u64>,
        consumer_timeout_ms: Option<u64>,
        now: Timestamp,
    ) -> Option<Self> {
        let kind = match (visibility_ms, consumer_timeout_ms) {
            (Some(visibility), Some(consumer)) if consumer < visibility => {
                DeadlineKind::ConsumerTimeout(consumer)
            }
            (Some(_), _) => DeadlineKind::Visibility,
            (None, Some(consumer)) => DeadlineKind::ConsumerTimeout(consumer),
            (None, None) => return None,
        };
        let ms = match kind {
            DeadlineKind::Visibility => visibility_ms.unwrap_or_default(),
            DeadlineKind::ConsumerTimeout(ms) => ms,
        };
        Some(Deadline { at: now.saturating_add_millis(ms), kind })
    }

    /// Whether the delivery carries a receipt handle (`x-receipt-handle`, semantics §4).
    pub fn has_receipt(&self) -> bool {
        self.kind == DeadlineKind::Visibility
    }
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

    /// The earlier of a visibility timeout and a consumer timeout runs; a tie goes to visibility.
    #[test]
    fn the_earlier_timeout_gives_the_deadline() {
        let now = Timestamp::from_millis(1_000);
        assert_eq!(Deadline::of_delivery(None, None, now), None);
        let visibility = Deadline::of_delivery(Some(5_000), None, now).unwrap();
        assert_eq!((visibility.at.as_millis(), visibility.kind), (6_000, DeadlineKind::Visibility));
        assert!(visibility.has_receipt());
        let consumer = Deadline::of_delivery(Some(5_000), Some(2_000), now).unwrap();
        assert_eq!((consumer.at.as_millis(), consumer.kind), (3_000, DeadlineKind::ConsumerTimeout(2_000)));
        assert!(!consumer.has_receipt());
        let tie = Deadline::of_delivery(Some(2_000), Some(2_000), now).unwrap();
        assert_eq!(tie.kind, DeadlineKind::Visibility);
        let later = Deadline::of_delivery(Some(2_000), Some(9_000), now).unwrap();
        assert_eq!(later.kind, DeadlineKind::Visibility);
        let alone = Deadline::of_delivery(None, Some(0), now).unwrap();
        assert_eq!((alone.at.as_millis(), alone.kind), (1_000, DeadlineKind::ConsumerTimeout(0)));
    }

    /// semantics §4: the timeout is 1 s to 12 h.
    #[test]
    fn timeout_range() {
        assert!(check_range(999).is_err());
        assert!(check_range(1_000).is_ok());
        assert!(check_range(43_200_000).is_ok());
        assert!(check_range(43_200_001).is_err());
    }
}
