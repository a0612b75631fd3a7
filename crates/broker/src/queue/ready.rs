//! Ready messages in queue order.
//!
//! Kept sorted by sequence number so a requeued message returns to its original place, as
//! RabbitMQ's classic queues do. Requeues land near the head (messages are delivered from the
//! head), where `VecDeque::insert` shifts only the short side.

use std::collections::VecDeque;

use super::entry::{Entry, Seq};

#[derive(Debug, Default)]
pub(crate) struct Ready {
    entries: VecDeque<Entry>,
    body_bytes: usize,
}

impl Ready {
    /// Appends a newly published message (its seq is greater than any queued one).
    pub fn push_back(&mut self, entry: Entry) {
        debug_assert!(self.entries.back().is_none_or(|last| last.seq < entry.seq));
        self.body_bytes += entry.body_size();
        self.entries.push_back(entry);
    }

    /// Puts a message back at its original position.
    pub fn requeue(&mut self, entry: Entry) {
        self.body_bytes += entry.body_size();
        let at = self.position_for(entry.seq);
        self.entries.insert(at, entry);
    }

    pub fn pop_front(&mut self) -> Option<Entry> {
        let entry = self.entries.pop_front()?;
        self.body_bytes -= entry.body_size();
        Some(entry)
    }

    /// Removes every ready message; returns how many there were.
    pub fn purge(&mut self) -> usize {
        let count = self.entries.len();
        self.entries.clear();
        self.body_bytes = 0;
        count
    }

    pub fn message_count(&self) -> usize {
        self.entries.len()
    }

    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position_for(&self, seq: Seq) -> usize {
        // Fast path: most requeues go in front of everything still ready.
        match self.entries.front() {
            None => 0,
            Some(front) if seq < front.seq => 0,
            _ => self.entries.partition_point(|e| e.seq < seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use std::sync::Arc;

    fn entry(seq: Seq) -> Entry {
        let message = Message {
            exchange: Default::default(),
            routing_key: Default::default(),
            properties: Default::default(),
            body: bytes::Bytes::from(vec![0u8; 3]),
        };
        Entry { seq, message: Arc::new(message), redelivered: false }
    }

    /// A requeued message goes back to its original place among the ready ones.
    #[test]
    fn requeued_message_returns_to_its_place() {
        let mut ready = Ready::default();
        for seq in [1, 3, 5] {
            ready.push_back(entry(seq));
        }
        ready.requeue(entry(4));
        ready.requeue(entry(0));
        let order: Vec<Seq> = std::iter::from_fn(|| ready.pop_front()).map(|e| e.seq).collect();
        assert_eq!(order, vec![0, 1, 3, 4, 5]);
    }

    /// Body bytes follow pushes, requeues, pops and purges.
    #[test]
    fn body_bytes_are_tracked() {
        let mut ready = Ready::default();
        ready.push_back(entry(1));
        ready.requeue(entry(0));
        assert_eq!(ready.body_bytes(), 6);
        ready.pop_front();
        assert_eq!(ready.body_bytes(), 3);
        assert_eq!(ready.purge(), 1);
        assert_eq!(ready.body_bytes(), 0);
    }
}
