//! The far tiers' spill reads (`queue/far_delays.rs`): a load asks for the records it needs
//! instead of reading a file on the broker's thread (ARCHITECTURE.md, rule 1). The asks are
//! collected when their queue is filed again (`Broker::reschedule`, which every change to a
//! queue's deadlines ends in), handed to the driver (`poll_spill_read`), read by it off the
//! broker's thread through the broker's [`SpillFiles`], and come back as an input
//! (`handle_spill_read`), which runs the queue the records came for.

use std::sync::Arc;

use crate::broker::Broker;
use crate::queue::{QueueId, SpillFiles, SpillRead};
use crate::time::Timestamp;

impl Broker {
    /// The next spill read for the driver to perform: `read_at(file, offset, len)` on
    /// [`Broker::spill_files`], its outcome handed to [`Broker::handle_spill_read`].
    pub fn poll_spill_read(&mut self) -> Option<SpillRead> {
        self.queues.next_spill_read()
    }

    /// The files the spill reads are of (none without `set_spill_files`).
    pub fn spill_files(&self) -> Option<Arc<dyn SpillFiles>> {
        self.queues.pager.spill_files()
    }

    /// A spill read's outcome: the queue's far tier takes what is due within its horizon, and
    /// the queue runs (fires what is due, files its next deadline). An answer for a queue that
    /// is gone is dropped.
    pub fn handle_spill_read(&mut self, read: SpillRead, chunk: Result<Vec<u8>, String>, now: Timestamp) {
        let id = QueueId(read.queue);
        let Some(queue) = self.queues.get_mut(&id) else { return };
        queue.delayed.records_read(&read, chunk, now);
        self.run_queue(id, now);
        self.run_dead_letters(now);
    }
}
