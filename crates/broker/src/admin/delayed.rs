//! Seeing and steering delayed messages (semantics §7): list and peek without consuming, cancel,
//! reschedule. Ids are the entries' ids (`entry_ids.rs`): a persisted message keeps its id across
//! restarts, and no other message gets it.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::Message;
use crate::queue::entry::Payload;
use crate::queue::QueueId;
use crate::time::Timestamp;

/// A waiting message as the management API shows it.
#[derive(Clone, Debug)]
pub struct DelayedMessage {
    pub id: u64,
    pub due: Timestamp,
    pub message: Arc<Message>,
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
                let message = match &entry.payload {
                    Payload::Resident(message) => message.clone(),
                    Payload::Paged(paged) => match queue.pager.read(paged) {
                        Ok(message) => message,
                        Err(reason) => {
                            tracing::warn!(seq = entry.seq, %reason, "delayed message cannot be read back");
                            return None;
                        }
                    },
                };
                Some(DelayedMessage { id: entry.seq, due, message })
            })
            .collect())
    }

    /// Drops a delayed message before it becomes ready (a message waiting out a redelivery
    /// back-off is no longer counted as unacked, so dropping it is like any other drop).
    pub fn cancel_delayed(&mut self, vhost: &str, queue: &str, id: u64) -> Result<(), DelayedError> {
        let queue_id = self.queue_id(vhost, queue)?;
        let queue = self.queues.get_mut(&queue_id).ok_or(DelayedError::QueueNotFound)?;
        let (_, waiting) = queue.delayed.remove(id).ok_or(DelayedError::MessageNotFound)?;
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
        let queue_id = self.queue_id(vhost, queue)?;
        let queue = self.queues.get_mut(&queue_id).ok_or(DelayedError::QueueNotFound)?;
        let (_, waiting) = queue.delayed.remove(id).ok_or(DelayedError::MessageNotFound)?;
        let entry = waiting.entry.clone();
        queue.delayed.insert(due, waiting);
        // The stored due time follows (a restart keeps the new schedule).
        self.persist_update(queue_id, &entry, Some(due));
        self.run_queue(queue_id, now);
        self.run_dead_letters(now);
        Ok(())
    }

    pub(crate) fn queue_id(&self, vhost: &str, queue: &str) -> Result<QueueId, DelayedError> {
        self.vhosts
            .get(vhost)
            .and_then(|v| v.queues.iter().find(|(n, _)| n.as_bytes() == queue.as_bytes()).map(|(_, id)| *id))
            .ok_or(DelayedError::QueueNotFound)
    }
}
