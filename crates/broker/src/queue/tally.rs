//! Messages counted with their body bytes, and the persistent ones among them: what RabbitMQ's
//! `messages_*` and `message_bytes_*` fields count. A message is persistent when it goes to the
//! store (delivery mode 2 in a durable queue: it has a store id), as RabbitMQ counts
//! `messages_persistent` only in durable queues.

use super::entry::Entry;

/// A count of messages, their body bytes, and of those the persistent ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub messages: usize,
    pub bytes: usize,
    pub persistent: usize,
    pub persistent_bytes: usize,
}

impl Tally {
    /// Counts `entry` in.
    pub(crate) fn add(&mut self, entry: &Entry) {
        self.add_many(entry, 1);
    }

    /// Counts in `n` messages like `entry`.
    pub(crate) fn add_many(&mut self, entry: &Entry, n: usize) {
        let (bytes, persistent) = (entry.body_size() * n, entry.persist_id().is_some());
        self.messages += n;
        self.bytes += bytes;
        if persistent {
            self.persistent += n;
            self.persistent_bytes += bytes;
        }
    }

    /// Counts `entry` out (it was counted in).
    pub(crate) fn remove(&mut self, entry: &Entry) {
        let (bytes, persistent) = (entry.body_size(), entry.persist_id().is_some());
        debug_assert!(self.messages > 0 && self.bytes >= bytes);
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if persistent {
            self.persistent = self.persistent.saturating_sub(1);
            self.persistent_bytes = self.persistent_bytes.saturating_sub(bytes);
        }
    }

    /// Both tallies together.
    pub fn plus(self, other: Tally) -> Tally {
        Tally {
            messages: self.messages + other.messages,
            bytes: self.bytes + other.bytes,
            persistent: self.persistent + other.persistent,
            persistent_bytes: self.persistent_bytes + other.persistent_bytes,
        }
    }
}
