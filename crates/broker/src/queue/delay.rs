//! `x-delivery-delay` and the delayed exchange's `x-delay` (semantics §3): messages that wait in
//! their target queue, invisible and not counted as ready, until due. One ordered index per
//! queue keyed by (due, seq): no task or timer per message, ties in publish order.
//!
//! Leaves to others: reading `x-delay` at publish (`exchange/delayed.rs`), moving due messages
//! to ready (`Broker::promote_due`), TTL (it starts when the message becomes ready).

use std::collections::BTreeMap;

use super::entry::{Entry, Paged, Payload, Seq};
use crate::message::Message;
use crate::time::Timestamp;

/// A waiting message and whether it is new to the queue (its TTL starts when it becomes ready)
/// or coming back (it keeps its deadline and place).
#[derive(Debug)]
pub(crate) struct Waiting {
    pub entry: Entry,
    pub returning: bool,
}

#[derive(Debug, Default)]
pub(crate) struct DelayIndex {
    waiting: BTreeMap<(Timestamp, Seq), Waiting>,
    body_bytes: usize,
}

/// A delayed message as listings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedInfo {
    pub seq: u64,
    pub due: Timestamp,
    pub body_size: usize,
}

impl DelayIndex {
    pub fn insert(&mut self, due: Timestamp, waiting: Waiting) {
        self.body_bytes += waiting.entry.body_size();
        self.waiting.insert((due, waiting.entry.seq), waiting);
    }

    /// The earliest due time.
    pub fn next(&self) -> Option<Timestamp> {
        self.waiting.first_key_value().map(|((due, _), _)| *due)
    }

    /// Removes and returns one message due at `now`, earliest first (ties in publish order).
    pub fn pop_due(&mut self, now: Timestamp) -> Option<(Timestamp, Waiting)> {
        match self.waiting.first_key_value() {
            Some(((due, _), _)) if *due <= now => {
                let ((due, _), waiting) = self.waiting.pop_first()?;
                self.body_bytes -= waiting.entry.body_size();
                Some((due, waiting))
            }
            _ => None,
        }
    }

    pub fn message_count(&self) -> usize {
        self.waiting.len()
    }

    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// The due time of the waiting message with this seq (a scan: an operator action, not a hot
    /// path).
    pub fn due_of(&self, seq: Seq) -> Option<Timestamp> {
        self.waiting.keys().find(|(_, s)| *s == seq).map(|(due, _)| *due)
    }

    /// Takes out the waiting message (`due`, `seq`).
    pub fn remove_at(&mut self, due: Timestamp, seq: Seq) -> Option<Waiting> {
        let waiting = self.waiting.remove(&(due, seq))?;
        self.body_bytes -= waiting.entry.body_size();
        Some(waiting)
    }

    /// The waiting messages after (`due`, `seq`) in due order (from the first without a cursor).
    pub fn after(&self, cursor: Option<(Timestamp, Seq)>) -> impl Iterator<Item = (Timestamp, &Waiting)> {
        use std::ops::Bound::{Excluded, Unbounded};
        let start = cursor.map_or(Unbounded, Excluded);
        self.waiting.range((start, Unbounded)).map(|((due, _), waiting)| (*due, waiting))
    }

    /// Replaces the message of waiting entry (`due`, `seq`) — if it is still `persist_id`'s and
    /// in memory — with what `page_out` makes of it (ADR 0007); returns whether it did.
    pub fn page_out(
        &mut self,
        due: Timestamp,
        seq: Seq,
        persist_id: u64,
        page_out: impl FnOnce(&Message) -> Option<Paged>,
    ) -> bool {
        let Some(waiting) = self.waiting.get_mut(&(due, seq)) else { return false };
        let entry = &mut waiting.entry;
        if entry.persist_id() != Some(persist_id) {
            return false;
        }
        let Some(paged) = entry.resident().and_then(|message| page_out(message)) else { return false };
        entry.payload = Payload::Paged(paged);
        true
    }

    /// The first `limit` waiting messages in due order with their content, without taking them.
    pub fn peek(&self, limit: usize) -> impl Iterator<Item = (Timestamp, &Entry)> {
        self.waiting.iter().take(limit).map(|((due, _), w)| (*due, &w.entry))
    }

    /// The first `limit` waiting messages in due order, without taking them.
    pub fn list(&self, limit: usize) -> Vec<DelayedInfo> {
        self.waiting
            .iter()
            .take(limit)
            .map(|((due, seq), w)| DelayedInfo { seq: *seq, due: *due, body_size: w.entry.body_size() })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn waiting(seq: Seq) -> Waiting {
        let message =
            Message::new(Default::default(), Default::default(), Default::default(), vec![1u8; 2].into());
        Waiting { entry: Entry::new(seq, Arc::new(message), None, None, None), returning: false }
    }

    /// Due messages come out in due order, ties in publish (seq) order, only once due.
    #[test]
    fn due_order_with_ties_in_publish_order() {
        let mut index = DelayIndex::default();
        let t = Timestamp::from_millis;
        index.insert(t(20), waiting(1));
        index.insert(t(10), waiting(3));
        index.insert(t(10), waiting(2));
        assert_eq!((index.message_count(), index.body_bytes(), index.next()), (3, 6, Some(t(10))));
        assert!(index.pop_due(t(9)).is_none());
        let order: Vec<Seq> = std::iter::from_fn(|| index.pop_due(t(20))).map(|(_, w)| w.entry.seq).collect();
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!(index.body_bytes(), 0);
    }
}
