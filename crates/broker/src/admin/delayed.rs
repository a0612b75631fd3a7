//! Seeing and steering delayed messages (semantics §7): list and peek without consuming, cancel,
//! reschedule — by id, or every message with a given `message_id` property, found slice by
//! slice. Ids are the entries' ids (`entry_ids.rs`): a persisted message keeps its id across
//! restarts, and no other message gets it.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::entry::{Entry, Payload};
use crate::queue::{Queue, QueueId};
use crate::time::Timestamp;

/// A waiting message as the management API shows it.
#[derive(Clone, Debug)]
pub struct DelayedMessage {
    pub id: u64,
    pub due: Timestamp,
    pub message: Arc<Message>,
}

/// Where a delayed message waits: its due time and id (what orders the queue's delay index).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DelayedKey {
    pub due: Timestamp,
    pub id: u64,
}

/// How much of a queue's delayed messages one slice of a search looks at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DelayedSlice {
    /// Messages looked at.
    pub examined: usize,
    /// Paged messages read back from the store.
    pub reads: usize,
}

/// What one slice of a search found, and where the next one starts (`None`: the search is over).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedMatches {
    pub found: Vec<DelayedKey>,
    pub next: Option<DelayedKey>,
}

/// Why a delayed-message operation found nothing to act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DelayedError {
    QueueNotFound,
    MessageNotFound,
}

impl Broker {
    /// The first `limit` delayed messages of a queue in due order, with their content (a paged
    /// one is read back; one that cannot be is left out and logged).
    pub fn peek_delayed(
        &self,
        vhost: &str,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<DelayedMessage>, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        Ok(queue
            .delayed
            .peek(limit)
            .filter_map(|(due, entry)| {
                let message = read_back(queue, &entry)?;
                Some(DelayedMessage { id: entry.seq, due, message })
            })
            .collect())
    }

    /// Drops a delayed message before it becomes ready (a message waiting out a redelivery
    /// back-off is no longer counted as unacked, so dropping it is like any other drop).
    pub fn cancel_delayed(&mut self, vhost: &str, queue: &str, id: u64) -> Result<(), DelayedError> {
        let key = self.delayed_key(vhost, queue, id)?;
        self.cancel_delayed_at(vhost, queue, key)
    }

    /// [`Broker::cancel_delayed`] of the message at `key` (as [`Broker::delayed_with_message_id`]
    /// finds them): no scan.
    pub fn cancel_delayed_at(
        &mut self,
        vhost: &str,
        queue: &str,
        key: DelayedKey,
    ) -> Result<(), DelayedError> {
        let queue_id = self.queue_id(vhost, queue)?;
        let queue = self.queues.get_mut(&queue_id).ok_or(DelayedError::QueueNotFound)?;
        let waiting = queue.delayed.remove_at(key.due, key.id).ok_or(DelayedError::MessageNotFound)?;
        queue.take_waiting_group(waiting.entry.seq);
        self.persist_settle(queue_id, waiting.entry.persist_id());
        self.reschedule(queue_id);
        Ok(())
    }

    /// Makes a delayed message due at `due` instead (at `now` or earlier: ready at once).
    pub fn reschedule_delayed(
        &mut self,
        vhost: &str,
        queue: &str,
        id: u64,
        due: Timestamp,
        now: Timestamp,
    ) -> Result<(), DelayedError> {
        let key = self.delayed_key(vhost, queue, id)?;
        self.reschedule_delayed_at(vhost, queue, key, due, now)
    }

    /// [`Broker::reschedule_delayed`] of the message at `key`: no scan.
    pub fn reschedule_delayed_at(
        &mut self,
        vhost: &str,
        queue: &str,
        key: DelayedKey,
        due: Timestamp,
        now: Timestamp,
    ) -> Result<(), DelayedError> {
        let queue_id = self.queue_id(vhost, queue)?;
        let queue = self.queues.get_mut(&queue_id).ok_or(DelayedError::QueueNotFound)?;
        let waiting = queue.delayed.remove_at(key.due, key.id).ok_or(DelayedError::MessageNotFound)?;
        let entry = waiting.entry.clone();
        queue.delayed.insert(due, waiting);
        // The stored due time follows (a restart keeps the new schedule).
        self.persist_update(queue_id, &entry, Some(due));
        self.run_queue(queue_id, now);
        self.run_dead_letters(now);
        Ok(())
    }

    /// One slice of a search of a queue's delayed messages for those whose `message_id`
    /// property is `message_id`: from after `cursor` in due order, at most `examined` messages
    /// and at most `reads` of them read back from the store (a paged one's properties are in
    /// its record, ADR 0007), so that one slice holds the broker task for milliseconds. The
    /// caller runs slices, each in its own job, until `next` is `None`; messages that fall due or
    /// arrive meanwhile may be missed or found, as in any listing.
    pub fn delayed_with_message_id(
        &self,
        vhost: &str,
        queue: &str,
        message_id: &str,
        cursor: Option<DelayedKey>,
        slice: DelayedSlice,
    ) -> Result<DelayedMatches, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        let (mut found, mut reads, mut last) = (Vec::new(), 0, None);
        // At most `examined` candidates are taken out of the index at all; the read budget may
        // stop the slice earlier.
        let examined_at_most = slice.examined.max(1);
        let candidates = queue.delayed.after(cursor.map(|c| (c.due, c.id)), examined_at_most);
        let complete = candidates.len() < examined_at_most;
        for (due, waiting) in candidates {
            if reads == slice.reads.max(1) {
                return Ok(DelayedMatches { found, next: last });
            }
            let key = DelayedKey { due, id: waiting.entry.seq };
            last = Some(key);
            reads += usize::from(matches!(waiting.entry.payload, Payload::Paged(_)));
            let id = read_back(queue, &waiting.entry).and_then(|message| message.properties().message_id());
            if id.is_some_and(|id| id.as_bytes() == message_id.as_bytes()) {
                found.push(key);
            }
        }
        Ok(DelayedMatches { found, next: if complete { None } else { last } })
    }

    /// Where the delayed message `id` of a queue waits (a scan of its due times).
    fn delayed_key(&self, vhost: &str, queue: &str, id: u64) -> Result<DelayedKey, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        let due = queue.delayed.due_of(id).ok_or(DelayedError::MessageNotFound)?;
        Ok(DelayedKey { due, id })
    }

    pub(crate) fn queue_id(&self, vhost: &str, queue: &str) -> Result<QueueId, DelayedError> {
        self.vhosts.get(vhost).and_then(|v| v.queue_id(queue)).ok_or(DelayedError::QueueNotFound)
    }
}

/// A delayed entry's message, read back when paged; `None` (logged) when it cannot be.
fn read_back(queue: &Queue, entry: &Entry) -> Option<Arc<Message>> {
    queue
        .pager
        .message_of(&entry.payload)
        .inspect_err(|reason| tracing::warn!(seq = entry.seq, %reason, "delayed message cannot be read back"))
        .ok()
}
