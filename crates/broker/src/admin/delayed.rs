//! Seeing and steering delayed messages (semantics §7): list and peek without consuming, cancel,
//! reschedule — by id, or every message with a given `message_id` property, found slice by
//! slice. Ids are the entries' ids (`entry_ids.rs`): a persisted message keeps its id across
//! restarts, and no other message gets it. The listings read nothing on the broker's thread:
//! their callers finish them (`delayed_listing.rs`).

use std::sync::Arc;

use super::delayed_listing::{DelayedMatches, DelayedPeek, Listed};
use crate::broker::Broker;
use crate::message::Message;
use crate::queue::QueueId;
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
    /// Paged messages among them, whose records the caller reads (`DelayedMatches::found`).
    pub reads: usize,
    /// The bytes of those records at most (the first always): a record is read whole to learn
    /// its `message_id`.
    pub read_bytes: usize,
}

/// Why a delayed-message operation found nothing to act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DelayedError {
    QueueNotFound,
    MessageNotFound,
}

impl Broker {
    /// The first `limit` delayed messages of a queue in due order, with their content: the far
    /// tier's spill files and the paged ones' records are read by the caller
    /// ([`DelayedPeek::read_stored`]).
    pub fn peek_delayed(&self, vhost: &str, queue: &str, limit: usize) -> Result<DelayedPeek, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        Ok(DelayedPeek { listed: Listed::snapshot(queue, None, limit), limit, source: self.message_source() })
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

    /// Makes a delayed message due at `due` instead (at `now` or earlier: ready at once, after
    /// any far message due no later, `DelayIndex::next_near_due`).
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
        self.move_pending_page_out(queue_id, entry.persist_id(), entry.seq, Some(due));
        // The stored due time follows (a restart keeps the new schedule).
        self.persist_update(queue_id, &entry, Some(due));
        self.run_queue(queue_id, now);
        self.run_dead_letters(now);
        Ok(())
    }

    /// One slice of a search of a queue's delayed messages for those whose `message_id`
    /// property is `message_id`: from after `cursor` in due order, at most `examined` messages
    /// and at most `reads` paged ones among them, their records at most `read_bytes` (the first
    /// always; a paged one's properties are in its record, ADR 0007). The broker's thread only
    /// takes what it holds ([`Listed::snapshot`], no read, so one slice holds the broker task for
    /// milliseconds); the caller reads and matches ([`DelayedMatches::found`], which also says
    /// where the next slice starts). The caller runs slices, each in its own job, until there is
    /// no next; messages that fall due or arrive meanwhile may be missed or found, as in any
    /// listing.
    pub fn delayed_with_message_id(
        &self,
        vhost: &str,
        queue: &str,
        message_id: &str,
        cursor: Option<DelayedKey>,
        slice: DelayedSlice,
    ) -> Result<DelayedMatches, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        Ok(DelayedMatches {
            listed: Listed::snapshot(queue, cursor, slice.examined.max(1)),
            cursor,
            slice,
            message_id: message_id.to_owned(),
            source: self.message_source(),
        })
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
