//! A far tier in a checkpoint's queue state (ADR 0019): its runs as their rosters (shared, not
//! copied: a roster is a few bytes per message, its file 80), each run's head and cancelled
//! records, and the write buffer's records. A restart takes the tier back from there instead
//! of reading each message's record from the log and writing every run again.
//!
//! A restored run is served from its roster, and its file is written at its first load, as for
//! a run whose file failed (`far_delays.rs`), but without an error: nothing was damaged.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{FarTier, Key, Record, Run, RECORD_BYTES};
use crate::queue::entry::Seq;
use crate::queue::far_files::SpillFiles;
use crate::queue::far_record::{decode, fields_checked};
use crate::queue::far_roster::Roster;
use crate::queue::state_bytes::{StateReader, StateWriter};
use crate::time::Timestamp;

/// Words a run's entry takes before its first record, cancelled keys and roster.
const RUN_WORDS: usize = 9;

impl FarTier {
    /// Appends the tier to a queue state; returns how many messages it holds (each a stored one).
    pub(crate) fn checkpoint(&self, out: &mut StateWriter) -> u64 {
        let mut cancelled: HashMap<u64, Vec<Key>> = HashMap::new();
        for (run, key) in self.cancelled.iter() {
            cancelled.entry(*run).or_default().push(*key);
        }
        out.u64(self.next_run);
        out.u64(self.count as u64);
        out.u64(self.body_bytes as u64);
        out.u64(self.runs.len() as u64);
        for (number, run) in &self.runs {
            let (roster, records, first) = run.roster.parts();
            let (ids, persist_ids, head) = (run.ids, run.persist_ids, run.head);
            for word in [*number, records as u64, ids.0, ids.1, persist_ids.0, persist_ids.1, head.0, head.1]
            {
                out.u64(word);
            }
            out.raw(&first.record());
            let keys = cancelled.remove(number).unwrap_or_default();
            out.u64(keys.len() as u64);
            for (due, id) in keys {
                out.u64(due);
                out.u64(id);
            }
            out.bytes(roster);
        }
        out.u64(self.buffer.len() as u64);
        for record in &self.buffer {
            out.raw(record);
        }
        self.count as u64
    }

    /// The tier [`FarTier::checkpoint`] wrote, with this one's files, without the messages whose
    /// store id is in `changed` (their seqs go to `dropped`); `None` if the state does not read
    /// back whole.
    pub(crate) fn restored_from(
        &self,
        state: &mut StateReader,
        changed: &HashSet<u64>,
        dropped: &mut Vec<Seq>,
    ) -> Option<FarTier> {
        Self::restored(self.files.clone(), self.queue, state, changed, dropped)
    }

    /// The counts come from the state and lose the changed messages found; a run no changed
    /// message can be in (by its store ids) comes back as it was, its roster not read.
    fn restored(
        files: Arc<dyn SpillFiles>,
        queue: u64,
        state: &mut StateReader,
        changed: &HashSet<u64>,
        dropped: &mut Vec<Seq>,
    ) -> Option<FarTier> {
        let mut tier = FarTier::new(files, queue);
        tier.next_run = state.u64()?;
        tier.count = usize::try_from(state.u64()?).ok()?;
        tier.body_bytes = usize::try_from(state.u64()?).ok()?;
        let mut sorted_changed: Vec<u64> = changed.iter().copied().collect();
        sorted_changed.sort_unstable();
        for _ in 0..state.count(RUN_WORDS * 8 + RECORD_BYTES)? {
            let number = state.u64()?;
            if number >= tier.next_run || tier.runs.contains_key(&number) {
                return None;
            }
            tier.restore_run(number, state, &sorted_changed, changed, dropped)?;
        }
        for _ in 0..state.count(RECORD_BYTES)? {
            let record: Record = state.raw(RECORD_BYTES)?.try_into().ok()?;
            let (due, waiting) = decode(&record).ok()?;
            if waiting.entry.persist_id().is_none_or(|id| changed.contains(&id)) {
                dropped.push(waiting.entry.seq);
                tier.forget(waiting.entry.body_size())?;
                continue;
            }
            tier.buffer_first_due = Some(tier.buffer_first_due.map_or(due, |first| first.min(due)));
            tier.buffer.push(record);
        }
        // The counts are the state's: no more than its runs and buffer hold.
        let held: u64 = tier.runs.values().map(|run| run.len).sum::<u64>() + tier.buffer.len() as u64;
        (tier.count as u64 <= held).then_some(tier)
    }

    /// Takes one message out of the counts read from a state; `None` if they hold fewer.
    fn forget(&mut self, body_size: usize) -> Option<()> {
        self.count = self.count.checked_sub(1)?;
        self.body_bytes = self.body_bytes.checked_sub(body_size)?;
        Some(())
    }

    /// Reads run `number` back. A run that may hold a changed message (`changed`, also sorted
    /// in `sorted_changed`) has its roster checked whole, and those messages cancelled; a run
    /// that then holds nothing more is left out. Any other run comes back as it was written.
    fn restore_run(
        &mut self,
        number: u64,
        state: &mut StateReader,
        sorted_changed: &[u64],
        changed: &HashSet<u64>,
        dropped: &mut Vec<Seq>,
    ) -> Option<()> {
        let records = usize::try_from(state.u64()?).ok()?;
        let ids = (state.u64()?, state.u64()?);
        let persist_ids = (state.u64()?, state.u64()?);
        let head: Key = (state.u64()?, state.u64()?);
        let first = fields_checked(state.raw(RECORD_BYTES)?)?;
        let mut cancelled = HashSet::new();
        for _ in 0..state.count(16)? {
            cancelled.insert((state.u64()?, state.u64()?));
        }
        let roster_bytes = state.bytes()?;
        // Each record takes at least a byte, and at most a whole record's worth.
        if records == 0 || !(records..=records * RECORD_BYTES).contains(&roster_bytes.len()) {
            return None;
        }
        let from = sorted_changed.partition_point(|id| *id < persist_ids.0);
        if sorted_changed.get(from).is_none_or(|id| *id > persist_ids.1) {
            let roster = Roster::from_checkpoint(roster_bytes, records, first);
            self.keep_run(number, Run::restored(roster, records, ids, persist_ids, head), cancelled);
            return Some(());
        }
        let mut held_head: Option<Key> = None;
        let (mut ids, mut persist_ids) = ((u64::MAX, u64::MIN), (u64::MAX, u64::MIN));
        let mut newly_cancelled = Vec::new();
        // Held as a load takes them (`FarTier::held`): at or after the head, not cancelled.
        let roster = Roster::from_parts(roster_bytes, records, first, |fields| {
            let key = (fields.due, fields.seq);
            if key < head || (!cancelled.is_empty() && cancelled.contains(&key)) {
                return;
            }
            if changed.contains(&fields.persist_id) {
                newly_cancelled.push((key, fields.body_size));
                return;
            }
            held_head = Some(held_head.map_or(key, |h| h.min(key)));
            ids = (ids.0.min(fields.seq), ids.1.max(fields.seq));
            persist_ids = (persist_ids.0.min(fields.persist_id), persist_ids.1.max(fields.persist_id));
        })?;
        // Forgotten only now: a roster that does not read back whole changes nothing.
        for (key, body_size) in newly_cancelled {
            self.forget(body_size as usize)?;
            dropped.push(key.1);
            cancelled.insert(key);
        }
        let Some(head) = held_head else { return Some(()) };
        self.keep_run(number, Run::restored(roster, records, ids, persist_ids, head), cancelled);
        Some(())
    }

    /// Files restored run `number` with its cancelled keys (those at or after its head).
    fn keep_run(&mut self, number: u64, run: Run, cancelled: HashSet<Key>) {
        let head = run.head;
        let kept = cancelled.into_iter().filter(|key| *key >= head).map(|key| (number, key));
        Arc::make_mut(&mut self.cancelled).extend(kept);
        self.heads.insert((Timestamp::from_millis(head.0), number));
        self.runs.insert(number, run);
    }
}

impl Run {
    /// A run taken back from a checkpoint: served from its roster until its first load writes
    /// its file.
    fn restored(roster: Roster, records: usize, ids: (u64, u64), persist_ids: (u64, u64), head: Key) -> Run {
        Run {
            len: records as u64,
            cursor: 0,
            ids,
            persist_ids,
            head,
            roster,
            on_file: false,
            from_checkpoint: true,
            file: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::delay::Waiting;
    use crate::queue::far_files::MemorySpillFiles;
    use crate::queue::far_record::RECORD_BYTES;
    use bytes::Bytes;

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn restore(far: &FarTier, changed: &[u64]) -> Option<(Arc<MemorySpillFiles>, FarTier)> {
        let mut out = StateWriter::default();
        assert_eq!(far.checkpoint(&mut out), far.message_count() as u64);
        let parts = out.finish().iter().map(|part| part.bytes().clone()).collect();
        let files = Arc::new(MemorySpillFiles::default());
        let mut reader = StateReader::new(parts);
        let changed = changed.iter().copied().collect();
        let tier = FarTier::restored(files.clone(), 1, &mut reader, &changed, &mut Vec::new())?;
        assert!(reader.is_empty());
        Some((files, tier))
    }

    fn all(far: &mut FarTier) -> Vec<(Timestamp, u64, u64, u32)> {
        let mut out: Vec<(Timestamp, Waiting)> = Vec::new();
        far.load_at_once(t(u64::MAX / 2), usize::MAX, &mut out);
        let mut keys: Vec<_> = out
            .iter()
            .map(|(due, w)| (*due, w.entry.seq, w.entry.persist_id().unwrap(), w.entry.delivery_count))
            .collect();
        keys.sort();
        keys
    }

    /// A tier with loaded, cancelled and buffered messages comes back holding exactly the same
    /// messages (counts, bytes, next due, listing, lookups), its runs served from their rosters and
    /// written to files at their first load; messages named changed are left out.
    #[test]
    fn a_tier_comes_back_from_its_checkpoint_without_the_changed_messages() {
        let (files, mut far) = super::super::tests::small_runs(350);
        assert!(load_count(&mut far, 12_000) > 0);
        assert!(far.remove(t(50_000), 240).is_some());
        assert!(far.remove(t(13_000), 103).is_some(), "a run's head");
        let (new_files, mut back) = restore(&far, &[]).unwrap();
        assert_eq!((back.message_count(), back.body_bytes()), (far.message_count(), far.body_bytes()));
        assert_eq!(back.next_due(), far.next_due());
        assert_eq!(back.due_of(141), far.due_of(141));
        let listed = |tier: &FarTier| {
            tier.after(None, 1_000).iter().map(|(d, w)| (*d, w.entry.seq)).collect::<Vec<_>>()
        };
        assert_eq!(listed(&back), listed(&far));
        assert_eq!(new_files.file_count(), 0, "no file is written at the restore");
        let loaded = load_count(&mut back, 14_000);
        assert_eq!(loaded, load_count(&mut far, 14_000));
        assert_eq!(new_files.file_count(), 3, "each run loaded from is written");
        assert_eq!(back.damaged_runs, 0);
        let expected = all(&mut far);
        assert_eq!(all(&mut back), expected);
        assert_eq!(files.file_count(), 0);

        let (_, mut far) = super::super::tests::small_runs(350);
        let persist_ids = |seqs: &[u64]| seqs.iter().map(|s| 1_000 + s).collect::<Vec<_>>();
        // 0 heads the first run; 340 is in the buffer.
        let (_, mut back) = restore(&far, &persist_ids(&[0, 57, 340])).unwrap();
        assert_eq!(back.message_count(), 347);
        assert_eq!(back.next_due(), Some(t(10_000)), "the second run's head");
        let seqs: Vec<u64> = all(&mut back).iter().map(|k| k.1).collect();
        let expected: Vec<u64> =
            all(&mut far).iter().map(|k| k.1).filter(|s| ![0, 57, 340].contains(s)).collect();
        assert_eq!(seqs, expected);
    }

    fn load_count(far: &mut FarTier, until: u64) -> usize {
        let mut out = Vec::new();
        far.load_at_once(t(until), usize::MAX, &mut out);
        out.len()
    }

    /// A state cut short or with a byte changed is refused or restores a tier that gives no
    /// message the state does not hold, never a panic. (The checkpoint file around a state is
    /// checksummed whole; a tier's counts are taken from its state, at most what it holds.)
    #[test]
    fn a_damaged_state_is_refused_without_a_panic() {
        let (_, far) = super::super::tests::small_runs(250);
        let mut out = StateWriter::default();
        far.checkpoint(&mut out);
        let state: Vec<u8> = out.finish().iter().flat_map(|part| part.bytes().to_vec()).collect();
        let restore = |bytes: Vec<u8>| {
            let files = Arc::new(MemorySpillFiles::default());
            let mut reader = StateReader::new(vec![Bytes::from(bytes)]);
            FarTier::restored(files, 1, &mut reader, &HashSet::new(), &mut Vec::new())
        };
        for cut in 0..state.len() {
            assert!(restore(state[..cut].to_vec()).is_none_or(|t| t.message_count() <= 250), "cut at {cut}");
        }
        for at in (0..state.len()).step_by(7) {
            let mut bytes = state.clone();
            bytes[at] ^= 0x5a;
            if let Some(mut tier) = restore(bytes) {
                let count = tier.message_count();
                assert!(count <= state.len(), "flipped at {at}: {count}");
                let _ = tier.after(None, 10);
                assert!(all_records(&mut tier) <= 250, "flipped at {at}");
            }
        }
        assert_eq!(RECORD_BYTES, 80);
    }

    fn all_records(far: &mut FarTier) -> usize {
        let mut out = Vec::new();
        far.load_at_once(t(u64::MAX / 2), usize::MAX, &mut out);
        out.len()
    }
}
