//! Dead-lettering paged messages without reading them on the broker's thread (ARCHITECTURE.md,
//! rule 1). A message that leaves a queue with a dead-letter exchange while paged out waits here,
//! and so does every later message of its queue that expires or is dropped at max-length, so
//! that they leave in order (a rejected or over-limit delivery leaves at once: it is no longer
//! stored as queued, so it could not come back after a restart). The queue
//! asks for the waiting messages' records (a [`MessageRead`] for [`ReadPurpose::DeadLettering`],
//! performed by the driver like a consumer's read, `message_reads.rs`); the answer sends those it
//! brought back on to `dead_letter_later`, and drops one that could not be read (counted and
//! settled, as a consumer's read does).
//!
//! A waiting message has left its queue but is not settled in the store: a restart brings it
//! back, and it leaves again (at least once, semantics §2). Checkpoints list it to be read back.
//! When its queue is deleted it goes with the queue's other messages, not dead-lettered (as a
//! deleted queue's messages are not).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::broker::{Broker, IdMap};
use crate::message::Message;
use crate::queue::entry::Entry;
use crate::queue::paging::ReadBack;
use crate::queue::{DeathReason, MessageRead, QueueId, ReadPurpose};
use crate::time::Timestamp;

/// A message waiting to be dead-lettered.
#[derive(Debug)]
struct Waiting {
    entry: Entry,
    reason: DeathReason,
    /// Times it was handed out (`x-delivery-count` for an SQS queue's dead letters).
    receives: u32,
}

/// One queue's messages waiting to be dead-lettered, in the order they left.
#[derive(Debug, Default)]
struct QueueWaiting {
    waiting: VecDeque<Waiting>,
    /// Whether a read for them is out.
    reading: bool,
}

/// Every queue's messages waiting for their records to be dead-lettered.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterReads {
    queues: IdMap<QueueId, QueueWaiting>,
}

impl DeadLetterReads {
    /// Whether queue `id` has messages waiting (a later dead-lettering from it waits too).
    pub fn waits(&self, id: QueueId) -> bool {
        self.queues.contains_key(&id)
    }

    /// The next read to ask for: the paged records at the front of a queue without a read out,
    /// `max` at most.
    pub fn next_read(&mut self, max: usize) -> Option<MessageRead> {
        let (id, queue) = self.queues.iter_mut().find(|(_, q)| !q.reading)?;
        let locations: Vec<_> = queue.waiting.iter().filter_map(|w| w.entry.paged_at()).take(max).collect();
        queue.reading = true;
        Some(MessageRead { queue: id.0, locations, purpose: ReadPurpose::DeadLettering })
    }

    /// Forgets queue `id`'s waiting messages (it is being deleted; the store forgets them
    /// with it). An answer for it is dropped.
    pub fn forget(&mut self, id: QueueId) {
        self.queues.remove(&id);
    }

    /// The store ids of the messages waiting, by queue (for a checkpoint: to be read back).
    pub fn stored_ids(&self) -> impl Iterator<Item = (QueueId, u64)> + '_ {
        self.queues
            .iter()
            .flat_map(|(&id, q)| q.waiting.iter().filter_map(move |w| Some((id, w.entry.persist_id()?))))
    }
}

impl Broker {
    /// Makes `entry`, paged out (or behind one that is), wait for its record before it is
    /// dead-lettered from queue `from`.
    pub(crate) fn dead_letter_after_read(
        &mut self,
        from: QueueId,
        entry: Entry,
        reason: DeathReason,
        receives: u32,
    ) {
        let queue = self.dead_letter_reads.queues.entry(from).or_default();
        queue.waiting.push_back(Waiting { entry, reason, receives });
    }

    /// The answer to a dead-lettering read of queue `id`: the messages it brought back leave for
    /// the dead-letter exchange in order, with those in memory behind them, up to the first still
    /// to be read (asked for next); one that could not be read is dropped and settled.
    pub(crate) fn dead_letters_read(
        &mut self,
        read: &MessageRead,
        messages: Vec<Result<Message, String>>,
        now: Timestamp,
    ) {
        let id = QueueId(read.queue);
        let Some(waiting) = self.dead_letter_reads.queues.get_mut(&id) else { return };
        waiting.reading = false;
        let (mut read_back, unreadable) = ReadBack::new(&read.locations, messages);
        let mut leaving = Vec::new();
        while let Some(next) = waiting.waiting.front() {
            let message = match next.entry.paged_at() {
                None => None,
                Some(at) => match read_back.take(at) {
                    Some(message) => Some(Arc::new(message)),
                    None if unreadable.contains(&at) => None,
                    None => break,
                },
            };
            let Some(next) = waiting.waiting.pop_front() else { break };
            leaving.push((next, message));
        }
        if waiting.waiting.is_empty() {
            self.dead_letter_reads.queues.remove(&id);
        }
        for (Waiting { entry, reason, receives }, message) in leaving {
            let persist_id = entry.persist_id();
            match message.or_else(|| entry.resident().cloned()) {
                Some(message) => self.dead_letter_later(id, message, reason, receives, persist_id),
                None => {
                    if let Some(queue) = self.queues.get_mut(&id) {
                        queue.pager.drop_unreadable(&entry, entry.paged_at(), "its read failed");
                    }
                }
            }
        }
        self.run_dead_letters(now);
        self.reschedule(id);
    }
}
