//! `x-message-ttl` and the `expiration` property (semantics §1): a deadline index over every ready
//! message, not only the head, so a short-lived message expires on time behind long-lived ones.
//!
//! Leaves to others: dead-lettering the expired messages (`dead_letter.rs`), choosing when to
//! look (`Broker::handle_timeout`).

use std::collections::{BTreeMap, BTreeSet};

use super::entry::Seq;
use crate::time::Timestamp;

/// Ready messages that have a deadline, ordered by (deadline, seq): O(log n) insert, remove and
/// "what is due", 16 bytes of key per message. A run of paged-out messages (`ready_run.rs`),
/// whose deadlines rise along it, has a key for its first message only (it expires first), and
/// its last deadline in `run_ends`. `Ready` keeps the keys in step with its slots.
#[derive(Debug, Default)]
pub(crate) struct DeadlineIndex {
    deadlines: BTreeSet<(Timestamp, Seq)>,
    /// The last deadline of each run with deadlines, counted.
    run_ends: BTreeMap<Timestamp, usize>,
    /// Ready messages with a deadline, the members of runs included.
    messages: usize,
}

impl DeadlineIndex {
    pub fn insert(&mut self, deadline: Timestamp, seq: Seq) {
        self.deadlines.insert((deadline, seq));
    }

    pub fn remove(&mut self, deadline: Timestamp, seq: Seq) {
        self.deadlines.remove(&(deadline, seq));
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Timestamp> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// The latest deadline: when the last message with one expires if none leaves first.
    pub fn last(&self) -> Option<Timestamp> {
        let last_key = self.deadlines.last().map(|(at, _)| *at);
        last_key.into_iter().chain(self.run_ends.last_key_value().map(|(at, _)| *at)).max()
    }

    /// How many ready messages have a deadline.
    pub fn message_count(&self) -> usize {
        self.messages
    }

    /// A ready message with a deadline came (`true`) or went.
    pub fn count(&mut self, came: bool) {
        if came {
            self.messages += 1;
        } else {
            self.messages -= 1;
        }
    }

    /// `came` ready messages gained a deadline and `gone` lost theirs.
    pub fn recount(&mut self, came: usize, gone: usize) {
        self.messages = self.messages + came - gone;
    }

    /// A run whose last deadline is `at` came (`true`) or went.
    pub fn run_end(&mut self, at: Timestamp, came: bool) {
        if came {
            *self.run_ends.entry(at).or_default() += 1;
        } else if let std::collections::btree_map::Entry::Occupied(mut ends) = self.run_ends.entry(at) {
            *ends.get_mut() -= 1;
            if *ends.get() == 0 {
                ends.remove();
            }
        }
    }

    /// Removes and returns one message due at `now` (deadline <= now), earliest first.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Seq> {
        match self.deadlines.first() {
            Some(&(at, _)) if at <= now => self.deadlines.pop_first().map(|(_, seq)| seq),
            _ => None,
        }
    }

    pub fn clear(&mut self) {
        *self = DeadlineIndex::default();
    }
}

/// The TTL deadline of a message with `expiration_ms` becoming ready at `ready_at` in a queue
/// with `queue_ttl_ms` (semantics §1).
pub(crate) fn deadline(
    queue_ttl_ms: Option<u64>,
    expiration_ms: Option<u64>,
    ready_at: Timestamp,
) -> Option<Timestamp> {
    effective_ttl_ms(queue_ttl_ms, expiration_ms).map(|ms| ready_at.saturating_add_millis(ms))
}

/// The TTL that applies to a message: the smaller of the queue's and the message's (semantics §1).
pub(crate) fn effective_ttl_ms(queue_ttl_ms: Option<u64>, message_ttl_ms: Option<u64>) -> Option<u64> {
    match (queue_ttl_ms, message_ttl_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses the `expiration` property: a string holding a non-negative integer of milliseconds
/// (semantics §1); the error names what is wrong in RabbitMQ's terms.
pub(crate) fn parse_expiration(expiration: &[u8]) -> Result<u64, String> {
    let text = std::str::from_utf8(expiration).map_err(|_| "no_integer".to_owned())?;
    // As Erlang's string:to_integer: a leading integer, then whatever is left over.
    let digits_end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, rest) = text.split_at(digits_end);
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return Err("no_integer".to_owned());
    }
    if !rest.is_empty() {
        return Err(format!("{{leftover_string,\"{rest}\"}}"));
    }
    match number.parse::<i128>() {
        Ok(ms) if ms < 0 => Err(format!("{{value_negative,{ms}}}")),
        Ok(ms) if ms > i128::from(super::args::MAX_TIME_MS) => Err(format!("{{value_too_large,{ms}}}")),
        Ok(ms) => Ok(ms as u64),
        Err(_) => Err("no_integer".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smaller of the queue TTL and the message TTL wins (semantics §1 "the smaller wins").
    #[test]
    fn smaller_ttl_wins() {
        assert_eq!(effective_ttl_ms(Some(100), Some(50)), Some(50));
        assert_eq!(effective_ttl_ms(Some(100), Some(500)), Some(100));
        assert_eq!(effective_ttl_ms(None, Some(7)), Some(7));
        assert_eq!(effective_ttl_ms(Some(0), None), Some(0));
        assert_eq!(effective_ttl_ms(None, None), None);
    }

    /// Only a non-negative integer string is a valid expiration (semantics §1).
    #[test]
    fn expiration_must_be_a_non_negative_integer() {
        assert_eq!(parse_expiration(b"60000"), Ok(60000));
        assert_eq!(parse_expiration(b"0"), Ok(0));
        assert_eq!(parse_expiration(b"-5"), Err("{value_negative,-5}".to_owned()));
        assert_eq!(parse_expiration(b"soon"), Err("no_integer".to_owned()));
        assert_eq!(parse_expiration(b"1.5"), Err("{leftover_string,\".5\"}".to_owned()));
        assert!(parse_expiration(b"999999999999999").is_err());
    }

    /// Due messages come out earliest first, and only once due.
    #[test]
    fn due_messages_come_out_in_deadline_order() {
        let mut index = DeadlineIndex::default();
        let t = |ms| Timestamp::from_millis(ms);
        index.insert(t(30), 1);
        index.insert(t(10), 2);
        index.insert(t(20), 3);
        index.remove(t(20), 3);
        assert_eq!(index.next(), Some(t(10)));
        assert_eq!(index.pop_due(t(9)), None);
        assert_eq!(index.pop_due(t(30)), Some(2));
        assert_eq!(index.pop_due(t(30)), Some(1));
        assert_eq!(index.pop_due(t(30)), None);
    }
}
