//! A queue's state in a checkpoint of the store (ADR 0019): its waiting messages (the far tier's
//! runs as their rosters, the write buffer and the near tier as far records), so that a restart
//! takes them from the checkpoint instead of reading each one's record back from the log.
//!
//! Only a queue whose stored messages all wait has a state: a ready or unacknowledged stored
//! message is not in it, and the store would then find the state disagreeing with its index.
//! Such a queue (and one without a far tier) is read back from the log at a restart, as before.

use std::collections::HashSet;

use bytes::Bytes;

use super::state_bytes::{StateReader, StateWriter};
use super::Queue;
use crate::persist::QueueState;

/// The layout of a state (its first word).
const STATE_VERSION: u64 = 2;

impl Queue {
    /// This queue's state for a checkpoint, if it has one (module doc).
    pub(crate) fn checkpoint_state(&self) -> Option<QueueState> {
        let only_waiting = self.ready.tally().persistent == 0 && self.unacked.persistent == 0;
        if !self.is_persisted() || !only_waiting || self.delayed.far_message_count() == 0 {
            return None;
        }
        let mut out = StateWriter::default();
        out.u64(STATE_VERSION);
        let mut read_back = Vec::new();
        let covers = self.delayed.checkpoint(&mut out, &mut read_back)?;
        Some(QueueState { queue: self.id.0, covers, read_back, parts: out.finish() })
    }

    /// Takes back the waiting messages of the state in `parts` ([`Queue::checkpoint_state`]'s,
    /// cut as it was handed over), without those
    /// whose store id is in `changed`. Returns how many came back; `None`, and the queue
    /// unchanged, if it holds waiting messages already or the state does not read back whole.
    pub(crate) fn restore_state(&mut self, parts: Vec<Bytes>, changed: &[u64]) -> Option<usize> {
        if self.delayed.message_count() != 0 {
            return None;
        }
        let mut reader = StateReader::new(parts);
        if reader.u64()? != STATE_VERSION {
            return None;
        }
        let changed: HashSet<u64> = changed.iter().copied().collect();
        self.delayed.restore_checkpoint(&mut reader, &changed)
    }
}
