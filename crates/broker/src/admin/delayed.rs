//! Seeing and steering delayed messages (semantics §7): list and peek without consuming, cancel,
//! reschedule — by id, or every message with a given `message_id` property, found slice by
//! slice. Ids are the entries' ids (`entry_ids.rs`): a persisted message keeps its id across
//! restarts, and no other message gets it.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::persist::{MessageSource, RecordLocation};
use crate::queue::entry::{Entry, Payload};
use crate::queue::{MessageRead, Queue, QueueId};
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

/// The delayed messages a peek found, in due order. The broker's thread reads no stored record
/// for it (ARCHITECTURE.md rule 1): the caller reads those of paged messages where a read may
/// wait on the disk ([`DelayedPeek::read_stored`]).
#[derive(Debug)]
pub struct DelayedPeek {
    found: Vec<(u64, Timestamp, Found)>,
    source: Option<Arc<dyn MessageSource>>,
}

/// A delayed message's content as a listing found it.
#[derive(Debug)]
enum Found {
    InMemory(Arc<Message>),
    /// Paged out (ADR 0007): its record, to be read off the broker's thread.
    Stored(RecordLocation),
}

impl DelayedPeek {
    /// How many records [`DelayedPeek::read_stored`] reads.
    pub fn stored(&self) -> usize {
        self.found.iter().filter(|(_, _, found)| matches!(found, Found::Stored(_))).count()
    }

    /// The messages, in due order, the paged ones read from the store (run it where a read may
    /// wait on the disk); one that cannot be read is left out and logged. The listing ends before
    /// the first paged one whose record would take the records read past `record_bytes_max`
    /// (the first is always read): a record is read whole, however little of its body a listing
    /// shows.
    pub fn read_stored(self, record_bytes_max: usize) -> Vec<DelayedMessage> {
        let source = self.source;
        let mut read_bytes = 0usize;
        self.found
            .into_iter()
            .take_while(|(_, _, found)| {
                let Found::Stored(at) = found else { return true };
                let within = read_bytes == 0 || read_bytes + at.record_bytes as usize <= record_bytes_max;
                read_bytes += at.record_bytes as usize;
                within
            })
            .filter_map(|(id, due, found)| {
                Some(DelayedMessage { id, due, message: read_found(&source, id, &found)? })
            })
            .collect()
    }
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

/// What one slice of a search looked at, and where the next one starts (`None`: the search is
/// over). Its messages are matched by [`DelayedMatches::found`], off the broker's thread: the
/// paged ones' properties are in their records.
#[derive(Debug)]
pub struct DelayedMatches {
    /// The messages looked at, in due order.
    candidates: Vec<(DelayedKey, Found)>,
    message_id: String,
    source: Option<Arc<dyn MessageSource>>,
    pub next: Option<DelayedKey>,
}

impl DelayedMatches {
    /// The messages of the slice whose `message_id` is the one searched for, in due order, the
    /// paged ones read from the store (run it where a read may wait on the disk; one that
    /// cannot be read is left out and logged).
    pub fn found(self) -> Vec<DelayedKey> {
        let DelayedMatches { candidates, message_id, source, .. } = self;
        let matches = |message: Arc<Message>| {
            message.properties().message_id().is_some_and(|id| id.as_bytes() == message_id.as_bytes())
        };
        candidates
            .into_iter()
            .filter(|(key, found)| read_found(&source, key.id, found).is_some_and(matches))
            .map(|(key, _)| key)
            .collect()
    }
}

/// Why a delayed-message operation found nothing to act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DelayedError {
    QueueNotFound,
    MessageNotFound,
}

impl Broker {
    /// The first `limit` delayed messages of a queue in due order, with their content: a paged
    /// one's record is read by the caller ([`DelayedPeek::read_stored`]).
    pub fn peek_delayed(&self, vhost: &str, queue: &str, limit: usize) -> Result<DelayedPeek, DelayedError> {
        let queue = self.queues.get(&self.queue_id(vhost, queue)?).ok_or(DelayedError::QueueNotFound)?;
        let found = queue
            .delayed
            .peek(limit)
            .filter_map(|(due, entry)| Some((entry.seq, due, found_of(queue, &entry)?)))
            .collect();
        Ok(DelayedPeek { found, source: self.message_source() })
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
    /// and at most `reads` paged ones among them, their records at most `read_bytes` (the first
    /// always; a paged one's properties are in its record,
    /// ADR 0007, which the caller reads: [`DelayedMatches::found`]), so that one slice holds the
    /// broker task for milliseconds. The caller runs slices, each in its own job, until `next`
    /// is `None`; messages that fall due or arrive meanwhile may be missed or found, as in any
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
        let mut matches = DelayedMatches {
            candidates: Vec::new(),
            message_id: message_id.to_owned(),
            source: self.message_source(),
            next: None,
        };
        let (mut stored, mut stored_bytes, mut last) = (0, 0usize, None);
        // At most `examined` candidates are taken out of the index at all; the read budget may
        // stop the slice earlier.
        let examined_at_most = slice.examined.max(1);
        let candidates = queue.delayed.after(cursor.map(|c| (c.due, c.id)), examined_at_most);
        let complete = candidates.len() < examined_at_most;
        for (due, waiting) in candidates {
            let found = found_of(queue, &waiting.entry);
            if let Some(Found::Stored(at)) = &found {
                let bytes = at.record_bytes as usize;
                let over_bytes = stored > 0 && stored_bytes + bytes > slice.read_bytes;
                if stored == slice.reads.max(1) || over_bytes {
                    matches.next = last;
                    return Ok(matches);
                }
                (stored, stored_bytes) = (stored + 1, stored_bytes + bytes);
            }
            let key = DelayedKey { due, id: waiting.entry.seq };
            last = Some(key);
            if let Some(found) = found {
                matches.candidates.push((key, found));
            }
        }
        matches.next = if complete { None } else { last };
        Ok(matches)
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

/// A delayed entry's message as a listing finds it: in memory (a packed one unpacked), or where
/// it is stored when paged; `None` (logged) when a packed one does not decode.
fn found_of(queue: &Queue, entry: &Entry) -> Option<Found> {
    if let Payload::Paged(paged) = &entry.payload {
        return Some(Found::Stored(paged.location()));
    }
    queue
        .pager
        .message_of(&entry.payload)
        .map(Found::InMemory)
        .map_err(|reason| cannot_read(entry.seq, &reason))
        .ok()
}

/// The message `found`, its record read through `source` when stored; `None` (logged) when it
/// cannot be.
fn read_found(source: &Option<Arc<dyn MessageSource>>, id: u64, found: &Found) -> Option<Arc<Message>> {
    match found {
        Found::InMemory(message) => Some(message.clone()),
        Found::Stored(at) => MessageRead::read_one(source.as_deref(), *at)
            .map(Arc::new)
            .map_err(|reason| cannot_read(id, &reason))
            .ok(),
    }
}

fn cannot_read(seq: u64, reason: &str) {
    tracing::warn!(seq, %reason, "delayed message cannot be read back");
}
