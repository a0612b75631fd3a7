//! A queue's ready messages in a checkpoint's queue state (ADR 0021): each priority level's
//! paged-out messages in queue order, a run (`ready_run.rs`) as its head, strides and times, a
//! message of its own as a far record. A restart takes the backlog back from there instead of
//! reading each message's record back from the log.
//!
//! A ready message held in memory (the queue's resident head, or one not paged out yet) is not
//! in the state: its store id is listed as read back, and it comes back through the log.

use super::{Level, Ready, Slot};
use crate::queue::entry::{Entry, Payload, Seq};
use crate::queue::far_record::{decode_ready, encode_ready, RECORD_BYTES};
use crate::queue::ready_run::Run;
use crate::queue::state_bytes::{StateReader, StateWriter};

/// Paged-out messages outside runs a state holds at most (80 bytes each, written with every
/// checkpoint): a queue with more is read back from the log.
pub(crate) const SINGLES_MAX: usize = 65_536;

const SINGLE: u64 = 0;
const RUN: u64 = 1;

impl Ready {
    /// Appends the ready messages to a queue state, adding the store ids of those held in
    /// memory to `read_back` and the entries to `held`; returns how many the state holds, or
    /// `None` if it would hold more than [`SINGLES_MAX`] messages outside runs.
    pub(crate) fn checkpoint<'a>(
        &'a self,
        out: &mut StateWriter,
        read_back: &mut Vec<u64>,
        held: &mut Vec<&'a Entry>,
    ) -> Option<u64> {
        let singles = self.levels.iter().flat_map(|level| &level.slots);
        let singles = singles.filter(|slot| matches!(slot, Slot::Live(e) if is_paged(e))).count();
        if singles > SINGLES_MAX {
            return None;
        }
        let mut covers = 0;
        out.u64(self.levels.len() as u64);
        for level in &self.levels {
            let written = level.slots.iter().filter(|slot| match slot {
                Slot::Live(entry) => is_paged(entry),
                Slot::Run(_) => true,
                Slot::Removed(_) => false,
            });
            out.u64(written.count() as u64);
            for slot in &level.slots {
                match slot {
                    Slot::Live(entry) if is_paged(entry) => {
                        out.u64(SINGLE);
                        out.raw(&encode_ready(entry)?);
                        covers += 1;
                    }
                    Slot::Live(entry) => {
                        read_back.extend(entry.persist_id());
                        held.push(entry);
                    }
                    Slot::Run(run) => {
                        out.u64(RUN);
                        run.checkpoint(out)?;
                        covers += run.len() as u64;
                    }
                    Slot::Removed(_) => {}
                }
            }
        }
        Some(covers)
    }

    /// Joins the messages paged out in place since the last compaction into runs, so that a
    /// state holds them as runs rather than a record each. O(slots), as writing the state is.
    pub(crate) fn join_runs(&mut self) {
        let Ready { levels, deadlines, .. } = self;
        for level in levels.iter_mut().filter(|level| level.paged_out > 0) {
            level.compact(deadlines);
        }
    }

    /// Ready messages as [`Ready::checkpoint`] wrote them, in a new `Ready` with this one's
    /// levels, without the messages whose store id is in `changed` (sorted), whose seqs go to
    /// `dropped`: a run holding one comes back as its other members, joined into runs again.
    /// `None` if the state does not read back whole, has another number of levels, or is out
    /// of queue order.
    pub(crate) fn restored(
        &self,
        state: &mut StateReader,
        changed: &[u64],
        dropped: &mut Vec<Seq>,
    ) -> Option<Ready> {
        let mut ready = Ready {
            levels: (0..self.levels.len()).map(|_| Level::default()).collect(),
            default_level: self.default_level,
            ..Ready::default()
        };
        if state.u64()? != self.levels.len() as u64 {
            return None;
        }
        let is_changed = |id: u64| changed.binary_search(&id).is_ok();
        for at in 0..self.levels.len() {
            let mut last: Option<Seq> = None;
            for _ in 0..state.count(8 + RECORD_BYTES)? {
                let slot = match state.u64()? {
                    SINGLE => Slot::Live(decode_ready(state.raw(RECORD_BYTES)?).ok()?),
                    RUN => Slot::Run(Box::new(Run::restored(state)?)),
                    _ => return None,
                };
                if last.is_some_and(|last| slot.seq() <= last) {
                    return None;
                }
                last = Some(slot.last_seq());
                match slot {
                    Slot::Live(entry) if entry.persist_id().is_some_and(is_changed) => {
                        dropped.push(entry.seq)
                    }
                    Slot::Live(entry) => ready.push_at_level(at, entry),
                    Slot::Run(run) if run_holds_changed(&run, changed) => {
                        for member in (0..run.len()).map(|place| run.member(place)) {
                            if member.persist_id().is_some_and(is_changed) {
                                dropped.push(member.seq);
                            } else {
                                ready.push_at_level(at, member);
                            }
                        }
                    }
                    Slot::Run(run) => ready.push_run_at_level(at, *run),
                    Slot::Removed(_) => unreachable!("a state holds no tombstone"),
                }
            }
        }
        Some(ready)
    }

    /// Every ready message's seq, level by level, each in queue order.
    pub(crate) fn seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        self.levels.iter().flat_map(|level| &level.slots).flat_map(|slot| {
            let (single, run) = match slot {
                Slot::Live(entry) => (Some(entry.seq), None),
                Slot::Removed(_) => (None, None),
                Slot::Run(run) => (None, Some(run.seqs())),
            };
            single.into_iter().chain(run.into_iter().flatten())
        })
    }

    /// The highest seq of a ready message, if any.
    pub(crate) fn max_seq(&self) -> Option<Seq> {
        self.levels.iter().filter_map(|level| level.slots.back().map(Slot::last_seq)).max()
    }

    /// Appends `entry` to level `at` (after every seq there): a restore's.
    fn push_at_level(&mut self, at: usize, entry: Entry) {
        self.count_in(&entry);
        self.top = self.top.max(at);
        self.levels[at].push_back(entry, &mut self.deadlines);
    }

    /// Appends a whole run to level `at` (after every seq there), counting its members in.
    fn push_run_at_level(&mut self, at: usize, run: Run) {
        let (n, head) = (run.len(), run.head());
        let (bytes, with_ttl) = (head.body_size(), head.expires_at().is_some());
        self.all.add_many(head, n);
        if with_ttl {
            self.deadlines.recount(n, 0);
        }
        self.top = self.top.max(at);
        let level = &mut self.levels[at];
        level.live += n;
        level.body_bytes += n * bytes;
        let slot = Slot::Run(Box::new(run));
        slot.file(&mut self.deadlines);
        level.slots.push_back(slot);
    }
}

/// Whether a ready entry is paged out (and so stored: only stored messages page out).
fn is_paged(entry: &Entry) -> bool {
    matches!(entry.payload, Payload::Paged(_)) && entry.persist_id().is_some()
}

/// Whether one of the run's members has its store id in `changed` (sorted).
fn run_holds_changed(run: &Run, changed: &[u64]) -> bool {
    let (first, last) = run.persist_id_range();
    let from = changed.partition_point(|id| *id < first);
    changed[from..].iter().take_while(|id| **id <= last).any(|id| run.holds_persist_id(*id))
}
