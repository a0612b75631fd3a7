//! Paging out while running (ADR 0007): a message entering a queue that already holds more than
//! its paging limits in memory is noted here when its `Enqueue` op goes out; when the driver
//! reports where the store wrote it ([`Broker::handle_stored`]), the queue swaps the message for
//! its location — if it is still queued and the queue still over its limits.

use super::RecordLocation;
use crate::broker::Broker;
use crate::queue::entry::{Entry, Seq};
use crate::queue::QueueId;
use crate::time::Timestamp;

/// Where the store wrote a message's enqueue record (reported by the driver after the commit
/// that made it durable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredLocation {
    pub queue: u64,
    pub msg_id: u64,
    pub location: RecordLocation,
}

/// Messages waiting for their location: (queue, store id) → (seq, due time if delayed, op_seq
/// of the enqueue). Holds only ops in flight to the store: a report through an op_seq forgets
/// every one up to it (an enqueue settled within its batch is never written, so never located).
pub(crate) type PageOutWaiting = crate::broker::IdMap<(QueueId, u64), (Seq, Option<Timestamp>, u64)>;

impl Broker {
    /// Notes `entry` (just written to the store, waiting until `wait_until` if delayed) for
    /// paging out if its queue is over its paging limits.
    pub(crate) fn wait_to_page_out(&mut self, id: QueueId, entry: &Entry, wait_until: Option<Timestamp>) {
        let Some(msg_id) = entry.persist_id() else { return };
        if self.queues.get(&id).is_some_and(|q| q.pages_out(wait_until.is_some())) {
            let op_seq = self.persist.last_op_seq();
            self.persist.page_out.insert((id, msg_id), (entry.seq, wait_until, op_seq));
        }
    }

    /// Message `persist_id` of queue `id` moved before the store reported where it wrote it: it
    /// is entry `seq` now, waiting until `due` (`None`: ready). It became ready (a delay shorter
    /// than the write), or an operator rescheduled it. When the report comes, the message is
    /// paged out where it is then; without this it was looked for where it had been, not found,
    /// and stayed in memory, whatever the limits.
    pub(crate) fn move_pending_page_out(
        &mut self,
        id: QueueId,
        persist_id: Option<u64>,
        seq: Seq,
        due: Option<Timestamp>,
    ) {
        if self.persist.page_out.is_empty() {
            return;
        }
        let Some(persist_id) = persist_id else { return };
        if let Some((noted_seq, noted_due, _)) = self.persist.page_out.get_mut(&(id, persist_id)) {
            (*noted_seq, *noted_due) = (seq, due);
        }
    }

    /// The store wrote these enqueue records and made every op through `op_seq` durable: the
    /// messages noted for paging out keep only their location from now on, and a queue whose
    /// delayed messages went far is filed to load them a horizon ahead. Call before
    /// `handle_persisted(op_seq)`.
    pub fn handle_stored(&mut self, op_seq: u64, stored: &[StoredLocation]) {
        if self.persist.page_out.is_empty() {
            return;
        }
        // Queues whose delayed messages may have gone far: their timer moves to a horizon
        // before the far head (a load), which no later event on the queue need come to file.
        let mut delaying = std::mem::take(&mut self.scratch.queues);
        delaying.clear();
        for s in stored {
            let id = QueueId(s.queue);
            let Some((seq, due, _)) = self.persist.page_out.remove(&(id, s.msg_id)) else { continue };
            if let Some(queue) = self.queues.get_mut(&id) {
                queue.page_out(seq, due, s.msg_id, s.location);
                if due.is_some() && !delaying.contains(&id) {
                    delaying.push(id);
                }
            }
        }
        self.persist.page_out.retain(|_, (_, _, enqueued_at)| *enqueued_at > op_seq);
        for &id in &delaying {
            self.reschedule(id);
        }
        self.scratch.queues = delaying;
    }
}
