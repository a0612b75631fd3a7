//! A queue's state in a checkpoint of the store (ADR 0019, ADR 0021): its ready backlog (each
//! level's paged-out messages, runs whole, `ready/checkpoint.rs`) and its waiting messages (the
//! far tier's runs as their rosters, the write buffer and the near tier as far records), so that
//! a restart takes them from the checkpoint instead of reading each one's record back from the
//! log.
//!
//! A stored message the state does not hold is listed as *read back*: a ready one held in
//! memory, a waiting one in the near tier held in memory, and every unacknowledged one or one
//! waiting to be dead-lettered (the caller names them: channels and `dead_letter_reads.rs` hold
//! them, not the queue). The store keeps the state only if its
//! index holds exactly the messages the state covers and lists. A queue that cannot have a state
//! (one that keeps message groups, of its ready or its waiting messages, `Queue::keeps_groups`:
//! a state keeps no groups, the log's metadata does; one with more messages outside runs than a
//! state takes) is read back from the log at a restart, as before.

use std::collections::HashSet;

use bytes::Bytes;

use super::state_bytes::{StateReader, StateWriter};
use super::Queue;
use crate::persist::QueueState;

/// The layout of a state (its first word): 3 has the ready backlog, then the waiting messages
/// if any; 2 (written before ADR 0021) the waiting messages alone.
const STATE_VERSION: u64 = 3;
const WAITING_ONLY_VERSION: u64 = 2;

/// Unacknowledged and in-memory messages a state lists at most (8 bytes each): a queue with more
/// is read back from the log.
const READ_BACK_MAX: usize = 1 << 20;

/// Messages a queue took back from a state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    pub ready: usize,
    pub waiting: usize,
}

impl Queue {
    /// Readies the queue for [`Queue::checkpoint_state`]: its ready messages paged out in place
    /// are joined into runs.
    pub(crate) fn prepare_checkpoint(&mut self) {
        if self.is_persisted() {
            self.ready.join_runs();
        }
    }

    /// This queue's state for a checkpoint, if it has one (module doc); `unacked` are the store
    /// ids of its unacknowledged messages and of those waiting to be dead-lettered.
    pub(crate) fn checkpoint_state(&self, unacked: &[u64]) -> Option<QueueState> {
        let grouped =
            self.keeps_groups() && (self.ready.tally().persistent > 0 || self.delayed.message_count() > 0);
        if !self.is_persisted() || grouped {
            return None;
        }
        let mut out = StateWriter::default();
        out.u64(STATE_VERSION);
        let mut read_back = unacked.to_vec();
        let mut covers = self.ready.checkpoint(&mut out, &mut read_back)?;
        if self.delayed.message_count() == 0 {
            out.u64(0);
        } else {
            out.u64(1);
            covers += self.delayed.checkpoint(&mut out, &mut read_back)?;
        }
        if covers == 0 || read_back.len() > READ_BACK_MAX {
            return None;
        }
        Some(QueueState { queue: self.id.0, covers, read_back, parts: out.finish() })
    }

    /// Takes back the messages of the state in `parts` ([`Queue::checkpoint_state`]'s, cut as it
    /// was handed over), without those whose store id is in `changed`. Returns how many came
    /// back; `None`, and the queue unchanged, if it holds messages already or the state does
    /// not read back whole.
    pub(crate) fn restore_state(&mut self, parts: Vec<Bytes>, changed: &[u64]) -> Option<Restored> {
        if self.delayed.message_count() != 0 || !self.ready.is_empty() {
            return None;
        }
        let mut reader = StateReader::new(parts);
        let version = reader.u64()?;
        let mut sorted_changed = changed.to_vec();
        sorted_changed.sort_unstable();
        let ready = match version {
            STATE_VERSION => Some(self.ready.restored(&mut reader, &sorted_changed)?),
            WAITING_ONLY_VERSION => None,
            _ => return None,
        };
        let has_waiting = version == WAITING_ONLY_VERSION || reader.u64()? == 1;
        let waiting = if has_waiting {
            let changed: HashSet<u64> = changed.iter().copied().collect();
            self.delayed.restore_checkpoint(&mut reader, &changed)?
        } else if reader.is_empty() {
            0
        } else {
            return None;
        };
        let mut restored = Restored { waiting, ready: 0 };
        if let Some(ready) = ready {
            restored.ready = ready.message_count();
            self.ready = ready;
            // The TTL the queue has now (a policy may have changed while the broker was down).
            self.apply_ttl_to_ready();
        }
        Some(restored)
    }
}
