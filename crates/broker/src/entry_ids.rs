//! The ids of queue entries: one counter for the whole broker. An entry's id orders it in its
//! queue (ties in publish order), names a delayed message to the management API
//! (`cancel_delayed`, `reschedule_delayed`), and is the store's message id when the entry is
//! persisted. So a persisted message keeps its id across restarts and failovers (issue #23: ids
//! were renumbered at each start, and an id listed before a restart named another message after
//! it).
//!
//! After a restart the counter goes on above every stored id, and above `now_ms × 1024`. Ids that
//! a transient message held before the restart are lost with it; the clock floor keeps them from
//! being handed out again, as long as the previous run issued fewer than 1,024 ids per
//! millisecond on average (a million messages a second). The ids stay below 2^53 until the year
//! 2248, so JavaScript reads them exactly.

use crate::time::Timestamp;

/// Ids per millisecond the clock floor allows for.
const IDS_PER_MS_SHIFT: u32 = 10;

#[derive(Debug)]
pub(crate) struct EntryIds {
    next: u64,
}

impl Default for EntryIds {
    fn default() -> EntryIds {
        EntryIds { next: 1 }
    }
}

impl EntryIds {
    /// The id for an entry entering a queue now.
    pub(crate) fn next(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// A stored entry with this id was recovered.
    pub(crate) fn recovered(&mut self, id: u64) {
        self.next = self.next.max(id + 1);
    }

    /// The broker starts over on its stored state at `now`.
    pub(crate) fn restarted(&mut self, now: Timestamp) {
        self.next = self.next.max(now.as_millis() << IDS_PER_MS_SHIFT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_and_go_on_above_recovered_ones() {
        let mut ids = EntryIds::default();
        assert_eq!((ids.next(), ids.next()), (1, 2));
        ids.recovered(90);
        ids.recovered(40);
        assert_eq!(ids.next(), 91);
    }

    #[test]
    fn a_restart_goes_on_above_the_clock_floor_so_lost_transient_ids_are_not_reused() {
        let mut ids = EntryIds::default();
        ids.restarted(Timestamp::from_millis(1_000));
        let first_run = ids.next();
        assert_eq!(first_run, 1_024_000);
        // The next run starts a second later: above every id the first could have issued at
        // under 1,024 per millisecond.
        let mut again = EntryIds::default();
        again.recovered(first_run - 10);
        again.restarted(Timestamp::from_millis(2_000));
        assert!(again.next() > first_run + 1_000 * 1_023);
    }
}
