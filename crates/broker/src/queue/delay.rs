//! `x-delivery-delay` and the delayed exchange's `x-delay` (semantics §3): messages that wait in
//! their target queue, invisible and not counted as ready, until due. One ordered index per
//! queue keyed by (due, seq): no task or timer per message, ties in publish order.
//!
//! Two tiers (ADR 0013, phase 1). The *near* tier holds in memory what falls due within
//! [`NEAR_HORIZON_MS`], and every message that is not paged out. A paged-out, stored message
//! due later is kept only on disk, in the *far* tier (`far_delays.rs`), and loaded into the near
//! tier a horizon ahead of its due time, so a timer does not wait on a read in steady state.
//! Messages become ready in due order across the tiers: the near tier's head waits while the far
//! tier holds a message due no later (`next_near_due`). That happens after a restart (every
//! stored waiting message goes far, and the overdue ones are read back first) or when a disk is
//! slower than the horizon; then the queue's due messages wait for the read too.
//!
//! Leaves to others: reading `x-delay` at publish (`exchange/delayed.rs`), moving due messages
//! to ready (`Broker::promote_due`), TTL (it starts when the message becomes ready).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use super::entry::{Entry, Paged, Payload, Seq};
use super::far_delays::{FarListing, FarTier, SpillRead};
use super::far_files::SpillFiles;
use super::far_record;
use super::state_bytes::{StateReader, StateWriter};
use crate::message::Message;
use crate::time::{earliest, Timestamp};

/// Stored delayed messages due further ahead than this wait on disk only.
pub const NEAR_HORIZON_MS: u64 = 60_000;
/// A load also brings what falls due this much past the horizon, so that each spill file is read
/// once per stretch of due times rather than at every tick.
const LOAD_SLACK_MS: u64 = 10_000;
/// A queue whose near tier holds more messages than this is not checkpointed (each would be an
/// 80-byte record in every checkpoint): its restart reads the log, as without checkpoints.
const NEAR_CHECKPOINT_MAX: usize = 65_536;
/// Messages one load brings from disk at most (about 1.3 MB read); the rest follow at the next
/// timer, at once.
pub const MAX_LOAD: usize = 16_384;

/// A waiting message and whether it is new to the queue (its TTL starts when it becomes ready)
/// or coming back (it keeps its deadline and place).
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    pub entry: Entry,
    pub returning: bool,
}

#[derive(Debug, Default)]
pub(crate) struct DelayIndex {
    near: BTreeMap<(Timestamp, Seq), Waiting>,
    near_bytes: usize,
    /// None: everything stays near (no spill files: tests, a broker without a data directory).
    far: Option<FarTier>,
    /// Stored messages due after this go far: the last load's `now` plus the horizon. A stale
    /// value only sends a message far that the next load (due at once) brings back.
    far_from: Timestamp,
    /// Its next message fell due while the broker was down and waits for the overdue limiter's
    /// credit (`overdue_release.rs`), not for its time: `next_deadline` leaves the near tier out.
    held: bool,
}

/// A delayed message as listings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedInfo {
    pub seq: u64,
    pub due: Timestamp,
    pub body_size: usize,
}

impl DelayIndex {
    /// Queue `queue`'s index, its far tier in `files` (files named `q<queue>-…`).
    pub fn with_spill_files(files: Option<Arc<dyn SpillFiles>>, queue: u64) -> Self {
        let far = files.map(|files| FarTier::new(files, queue));
        DelayIndex { far, ..DelayIndex::default() }
    }

    pub fn insert(&mut self, due: Timestamp, waiting: Waiting) {
        let waiting = match &mut self.far {
            Some(far) if due > self.far_from => match far.push(due, waiting) {
                Ok(()) => return,
                Err(waiting) => waiting,
            },
            _ => waiting,
        };
        self.insert_near(due, waiting);
    }

    fn insert_near(&mut self, due: Timestamp, waiting: Waiting) {
        self.near_bytes += waiting.entry.body_size();
        self.near.insert((due, waiting.entry.seq), waiting);
    }

    /// The earliest due time.
    pub fn next_due(&self) -> Option<Timestamp> {
        let far = self.far.as_ref().and_then(FarTier::next_due);
        earliest(self.next_near_due(), far)
    }

    /// When the first message of the near tier is due, unless it waits for the far tier: a far
    /// message due no later comes near first (a load brings it, or the answer to the read a
    /// load asked for), so that messages become ready in due order. After a restart every
    /// stored waiting message goes far, and the write buffer's come near at once while the
    /// runs' are read: earlier ones, all overdue.
    pub fn next_near_due(&self) -> Option<Timestamp> {
        let ((due, _), _) = self.near.first_key_value()?;
        let far_first = self.far.as_ref().and_then(FarTier::next_due);
        far_first.is_none_or(|far| far > *due).then_some(*due)
    }

    /// Whether the near tier's head is held for the overdue limiter and due at `now`: not a
    /// deadline (`next_deadline` leaves it out), yet the head may have changed since it was held
    /// (cancelled, rescheduled to now), and a pass of the queue looks at it again (`promote_due`).
    pub fn holds_due(&self, now: Timestamp) -> bool {
        self.held && self.next_near_due().is_some_and(|due| due <= now)
    }

    /// Holds (or lets go of) the near tier's head for the overdue limiter.
    pub fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// When this index next has work: a message due, or far messages to load a horizon ahead.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let near = self.next_near_due().filter(|_| !self.held);
        let load = self
            .far
            .as_ref()
            .and_then(FarTier::next_load_due)
            .map(|due| due.saturating_sub_millis(NEAR_HORIZON_MS));
        earliest(near, load)
    }

    /// Brings the far messages due within the horizon of `now` (and a little after) into the
    /// near tier, [`MAX_LOAD`] at most; `next_deadline` says `now` again while more are due that a
    /// load can take now (not those waiting for reads already asked for).
    /// Those in run files are asked for (`take_spill_reads`) and come with the answers
    /// (`records_read`).
    pub fn load_due_soon(&mut self, now: Timestamp) {
        self.advance_horizon(now);
        let Some(far) = &mut self.far else { return };
        if far.next_load_due().is_none_or(|due| due > self.far_from) {
            return;
        }
        let mut loaded = Vec::new();
        far.load(self.far_from.saturating_add_millis(LOAD_SLACK_MS), MAX_LOAD, &mut loaded);
        self.insert_all_near(loaded);
    }

    /// Moves the horizon on to `now`'s: a message delayed from now on that is due within it
    /// stays near.
    pub fn advance_horizon(&mut self, now: Timestamp) {
        self.far_from = self.far_from.max(now.saturating_add_millis(NEAR_HORIZON_MS));
    }

    /// The answer to a spill read the far tier asked for, at `now`: what it brings within the
    /// horizon of `now` comes near (the horizon moves on with `now`, however long the read took).
    pub fn records_read(&mut self, read: &SpillRead, chunk: Result<Vec<u8>, String>, now: Timestamp) {
        self.advance_horizon(now);
        let Some(far) = &mut self.far else { return };
        let mut loaded = Vec::new();
        far.records_read(
            read,
            chunk,
            self.far_from.saturating_add_millis(LOAD_SLACK_MS),
            MAX_LOAD,
            &mut loaded,
        );
        self.insert_all_near(loaded);
    }

    /// Hands over the spill reads the far tier asked for since the last call.
    pub fn take_spill_reads(&mut self, into: &mut VecDeque<SpillRead>) {
        if let Some(far) = &mut self.far {
            far.take_asks(into);
        }
    }

    fn insert_all_near(&mut self, loaded: Vec<(Timestamp, Waiting)>) {
        for (due, waiting) in loaded {
            self.insert_near(due, waiting);
        }
    }

    /// Removes and returns one message due at `now`, earliest first (ties in publish order).
    /// Only the near tier: far messages come near a horizon before they are due.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<(Timestamp, Waiting)> {
        match self.next_near_due() {
            Some(due) if due <= now => {
                let ((due, _), waiting) = self.near.pop_first()?;
                self.near_bytes -= waiting.entry.body_size();
                Some((due, waiting))
            }
            _ => None,
        }
    }

    pub fn message_count(&self) -> usize {
        self.near.len() + self.far.as_ref().map_or(0, FarTier::message_count)
    }

    pub fn body_bytes(&self) -> usize {
        self.near_bytes + self.far.as_ref().map_or(0, FarTier::body_bytes)
    }

    /// The highest id of a waiting message, if any.
    pub fn max_seq(&self) -> Option<Seq> {
        let near = self.near.keys().map(|(_, seq)| *seq).max();
        near.into_iter().chain(self.far.as_ref().and_then(FarTier::max_seq)).max()
    }

    /// Messages held on disk only (ADR 0013).
    pub fn far_message_count(&self) -> usize {
        self.far.as_ref().map_or(0, FarTier::message_count)
    }

    /// Spill runs whose file did not read back (each served from its roster, nothing lost).
    pub fn damaged_spill_runs(&self) -> u64 {
        self.far.as_ref().map_or(0, |far| far.damaged_runs)
    }

    /// The due time of the waiting message with this seq (a scan, of the far tier's rosters too:
    /// an operator action, not a hot path).
    pub fn due_of(&self, seq: Seq) -> Option<Timestamp> {
        let near = self.near.keys().find(|(_, s)| *s == seq).map(|(due, _)| *due);
        near.or_else(|| self.far.as_ref()?.due_of(seq))
    }

    /// Takes out the waiting message (`due`, `seq`).
    pub fn remove_at(&mut self, due: Timestamp, seq: Seq) -> Option<Waiting> {
        if let Some(waiting) = self.near.remove(&(due, seq)) {
            self.near_bytes -= waiting.entry.body_size();
            return Some(waiting);
        }
        self.far.as_mut()?.remove(due, seq)
    }

    /// Up to `limit` waiting messages after (`due`, `seq`) in due order (from the first without
    /// a cursor), copied out of both tiers. It reads the far tier's files where it runs: a
    /// listing for the HTTP API takes [`DelayIndex::listing`] instead.
    pub fn after(&self, cursor: Option<(Timestamp, Seq)>, limit: usize) -> Vec<(Timestamp, Waiting)> {
        let (mut found, far) = self.listing(cursor, limit);
        if let Some(far) = far {
            found.extend(far.after(cursor, limit));
            found.sort_unstable_by_key(|(due, waiting)| (*due, waiting.entry.seq));
            found.truncate(limit);
        }
        found
    }

    /// [`DelayIndex::after`] without a file read: the near tier's up to `limit` after `cursor`,
    /// copied, and the far tier's listing (`FarListing::after`, for the caller to run where a
    /// read may wait on the disk and merge in due order); none when the near tier's fill the
    /// limit and fall due before the far tier's first.
    pub(crate) fn listing(
        &self,
        cursor: Option<(Timestamp, Seq)>,
        limit: usize,
    ) -> (Vec<(Timestamp, Waiting)>, Option<FarListing>) {
        use std::ops::Bound::{Excluded, Unbounded};
        let start = cursor.map_or(Unbounded, Excluded);
        let near: Vec<(Timestamp, Waiting)> =
            self.near.range((start, Unbounded)).take(limit).map(|((due, _), w)| (*due, w.clone())).collect();
        let far = self.far.as_ref().filter(|far| {
            let before_far = near.last().zip(far.next_due()).is_some_and(|((last, _), first)| *last < first);
            limit > 0 && !(near.len() == limit && before_far)
        });
        (near, far.map(|far| far.listing(cursor, limit)))
    }

    /// Replaces the message of waiting entry (`due`, `seq`) — if it is still `persist_id`'s and
    /// in memory — with what `page_out` makes of it (ADR 0007), and moves it to the far tier if
    /// it is due past the horizon; returns whether it paged out.
    pub fn page_out(
        &mut self,
        due: Timestamp,
        seq: Seq,
        persist_id: u64,
        page_out: impl FnOnce(&Message) -> Option<Paged>,
    ) -> bool {
        let Some(waiting) = self.near.get_mut(&(due, seq)) else { return false };
        let entry = &mut waiting.entry;
        if entry.persist_id() != Some(persist_id) {
            return false;
        }
        let Some(paged) = entry.resident().and_then(|message| page_out(message)) else { return false };
        entry.payload = Payload::Paged(paged);
        if self.far.is_some() && due > self.far_from {
            if let Some(waiting) = self.remove_at(due, seq) {
                self.insert(due, waiting);
            }
        }
        true
    }

    /// Appends the waiting messages to a queue state for a checkpoint (ADR 0019): the far tier,
    /// then the near tier's stored, paged-out messages as far records. A near one that is still
    /// in memory is not in the state: its store id goes to `read_back` (a restart reads it from
    /// the log) and its seq to `held`; a transient one is nowhere, as it is lost at a restart.
    /// Returns how many messages the state holds; `None` without a far tier, or with more near
    /// messages than a state is worth ([`NEAR_CHECKPOINT_MAX`]).
    pub fn checkpoint(
        &self,
        out: &mut StateWriter,
        read_back: &mut Vec<u64>,
        held: &mut Vec<Seq>,
    ) -> Option<u64> {
        let far = self.far.as_ref()?;
        if self.near.len() > NEAR_CHECKPOINT_MAX {
            return None;
        }
        let mut records = Vec::new();
        for ((due, _), waiting) in &self.near {
            match far_record::encode(*due, waiting) {
                Some(record) => records.push(record),
                None => {
                    read_back.extend(waiting.entry.persist_id());
                    held.push(waiting.entry.seq);
                }
            }
        }
        let covers = far.checkpoint(out);
        out.u64(records.len() as u64);
        for record in &records {
            out.raw(record);
        }
        Some(covers + records.len() as u64)
    }

    /// Takes back the waiting messages [`DelayIndex::checkpoint`] wrote, into this index (empty,
    /// with a far tier), without those whose store id is in `changed` (their seqs go to
    /// `dropped`). Returns how many came back; `None`, and the index unchanged, if the state
    /// does not read back whole.
    pub fn restore_checkpoint(
        &mut self,
        state: &mut StateReader,
        changed: &HashSet<u64>,
        dropped: &mut Vec<Seq>,
    ) -> Option<usize> {
        let far = self.far.as_ref()?.restored_from(state, changed, dropped)?;
        let mut near = Vec::new();
        for _ in 0..state.count(far_record::RECORD_BYTES)? {
            let (due, waiting) = far_record::decode(state.raw(far_record::RECORD_BYTES)?).ok()?;
            if waiting.entry.persist_id().is_some_and(|id| !changed.contains(&id)) {
                near.push((due, waiting));
            } else {
                dropped.push(waiting.entry.seq);
            }
        }
        if !state.is_empty() {
            return None;
        }
        self.far = Some(far);
        let restored = near.len() + self.far_message_count();
        for (due, waiting) in near {
            self.insert(due, waiting);
        }
        Some(restored)
    }

    /// The first `limit` waiting messages in due order, without taking them.
    pub fn list(&self, limit: usize) -> Vec<DelayedInfo> {
        self.after(None, limit)
            .into_iter()
            .map(|(due, w)| DelayedInfo { seq: w.entry.seq, due, body_size: w.entry.body_size() })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Hot;
    use crate::persist::RecordLocation;
    use crate::queue::far_files::MemorySpillFiles;

    fn waiting(seq: Seq) -> Waiting {
        let message =
            Message::new(Default::default(), Default::default(), Default::default(), vec![1u8; 2].into());
        Waiting { entry: Entry::new(seq, Arc::new(message), None, None, Some(100 + seq)), returning: false }
    }

    fn paged(seq: Seq) -> Waiting {
        let location = RecordLocation { segment: 1, offset: 64, record_bytes: 100 };
        let paged = Paged::new(location, Hot::new(None, 0, true), 2).unwrap();
        Waiting {
            entry: Entry::with_payload(seq, Payload::Paged(paged), None, None, Some(100 + seq)),
            returning: false,
        }
    }

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Answers the far tier's spill reads at once from `files`, as the driver answers them a
    /// little later.
    fn answer(index: &mut DelayIndex, files: &MemorySpillFiles, now: Timestamp) {
        let mut reads = VecDeque::new();
        index.take_spill_reads(&mut reads);
        answer_these(index, files, &mut reads, now);
    }

    /// `load_due_soon` with its reads answered at once, loading again after each round of
    /// answers as the broker does (`handle_spill_read` runs the queue) until nothing is asked.
    fn load_answered(index: &mut DelayIndex, files: &MemorySpillFiles, now: Timestamp) {
        let mut reads = VecDeque::new();
        loop {
            index.load_due_soon(now);
            index.take_spill_reads(&mut reads);
            if reads.is_empty() {
                break;
            }
            answer_these(index, files, &mut reads, now);
        }
    }

    fn answer_these(
        index: &mut DelayIndex,
        files: &MemorySpillFiles,
        reads: &mut VecDeque<SpillRead>,
        now: Timestamp,
    ) {
        while let Some(read) = reads.pop_front() {
            let chunk = files.read_at(&read.file, read.offset, read.len);
            index.records_read(&read, chunk, now);
            index.take_spill_reads(reads);
        }
    }

    /// Loads `index` at 1,000 s; returns a due time 5 s past its horizon then.
    fn just_past_the_horizon(index: &mut DelayIndex) -> Timestamp {
        let now = t(1_000_000);
        index.load_due_soon(now);
        now.saturating_add_millis(NEAR_HORIZON_MS + 5_000)
    }

    /// The ids of what fires at `now`, in order.
    fn fired(index: &mut DelayIndex, now: Timestamp) -> Vec<Seq> {
        std::iter::from_fn(|| index.pop_due(now)).map(|(_, w)| w.entry.seq).collect()
    }

    fn spilled() -> (Arc<MemorySpillFiles>, DelayIndex) {
        let files = Arc::new(MemorySpillFiles::default());
        (files.clone(), DelayIndex::with_spill_files(Some(files), 1))
    }

    /// Due messages come out in due order, ties in publish (seq) order, only once due.
    #[test]
    fn due_order_with_ties_in_publish_order() {
        let mut index = DelayIndex::default();
        index.insert(t(20), waiting(1));
        index.insert(t(10), waiting(3));
        index.insert(t(10), waiting(2));
        assert_eq!((index.message_count(), index.body_bytes(), index.next_due()), (3, 6, Some(t(10))));
        assert!(index.pop_due(t(9)).is_none());
        assert_eq!(fired(&mut index, t(20)), vec![2, 3, 1]);
        assert_eq!(index.body_bytes(), 0);
    }

    /// A paged message due past the horizon waits on disk only; the index's deadline is a
    /// horizon before its due time, when a load brings it near, and it then fires on time.
    #[test]
    fn far_messages_load_a_horizon_ahead() {
        let (files, mut index) = spilled();
        let due = just_past_the_horizon(&mut index);
        index.insert(due, paged(1));
        index.insert(due, waiting(2));
        assert_eq!((index.message_count(), index.far_message_count()), (2, 1), "the resident one stays near");
        assert_eq!(index.next_due(), Some(due));
        let load_at = due.saturating_sub_millis(NEAR_HORIZON_MS);
        assert_eq!(index.next_deadline(), Some(load_at));
        load_answered(&mut index, &files, load_at.saturating_sub_millis(1));
        assert_eq!(index.far_message_count(), 1, "not yet within the horizon");
        load_answered(&mut index, &files, load_at);
        assert_eq!((index.message_count(), index.far_message_count()), (2, 0));
        assert_eq!(index.next_deadline(), Some(due));
        assert!(index.pop_due(due.saturating_sub_millis(1)).is_none(), "never early");
        assert_eq!(fired(&mut index, due), vec![1, 2], "ties keep publish order across the tiers");
    }

    /// Far messages in a run file come near through a spill read: while it is out, the index
    /// names no load deadline for them (the answer brings them) but still their due time; an
    /// answer that came already is dropped.
    #[test]
    fn run_files_load_through_a_spill_read() {
        let files = Arc::new(MemorySpillFiles::with_run_records(2));
        let mut index = DelayIndex::with_spill_files(Some(files.clone()), 1);
        let due = just_past_the_horizon(&mut index);
        index.insert(due, paged(1));
        index.insert(due, paged(2));
        assert_eq!((index.far_message_count(), files.file_count()), (2, 1), "one run written");
        let load_at = due.saturating_sub_millis(NEAR_HORIZON_MS);
        index.load_due_soon(load_at);
        assert_eq!(index.far_message_count(), 2, "asked for, not yet read");
        assert_eq!((index.next_deadline(), index.next_due()), (None, Some(due)));
        let mut reads = VecDeque::new();
        index.take_spill_reads(&mut reads);
        index.load_due_soon(load_at);
        index.take_spill_reads(&mut reads);
        assert_eq!(reads.len(), 1, "asked once");
        let read = reads.pop_front().unwrap();
        let chunk = files.read_at(&read.file, read.offset, read.len);
        index.records_read(&read, chunk.clone(), load_at);
        assert_eq!((index.far_message_count(), index.next_deadline()), (0, Some(due)));
        index.records_read(&read, chunk, load_at);
        assert_eq!(index.message_count(), 2, "a second answer to the same read is dropped");
        assert_eq!(fired(&mut index, due), [1, 2]);
    }

    /// Within the horizon, or without spill files, a paged message stays near.
    #[test]
    fn near_messages_stay_in_memory() {
        let (_, mut index) = spilled();
        index.load_due_soon(t(1_000));
        index.insert(t(1_000 + NEAR_HORIZON_MS - 1), paged(1));
        assert_eq!(index.far_message_count(), 0);
        let mut plain = DelayIndex::default();
        plain.insert(t(u64::MAX / 4), paged(2));
        assert_eq!((plain.message_count(), plain.far_message_count()), (1, 0));
    }

    /// Issue 41: a message that fell due waits while a far message due no later is being read
    /// (here after a restart: every stored waiting message went far, the write buffer's come
    /// near at once, the runs' through reads); nothing fires, and no deadline says "now" while
    /// the reads are out; then all fire in due order, ties in publish order. Before, the
    /// buffer's fired first, ahead of the older ones in the runs.
    #[test]
    fn a_due_message_waits_for_far_ones_due_no_later() {
        let files = Arc::new(MemorySpillFiles::with_run_records(2));
        let mut index = DelayIndex::with_spill_files(Some(files.clone()), 1);
        let due = t(1_000);
        for seq in 1..=5 {
            index.insert(due, paged(seq));
        }
        assert_eq!((index.far_message_count(), files.file_count()), (5, 2), "two runs and a buffer");
        let now = t(2_000);
        index.load_due_soon(now);
        assert_eq!(index.far_message_count(), 4, "the buffer's one came near, the runs are asked for");
        assert_eq!((index.next_near_due(), index.next_deadline()), (None, None));
        assert!(index.pop_due(now).is_none(), "5 waits for 1 to 4");
        answer(&mut index, &files, now);
        load_answered(&mut index, &files, now);
        assert_eq!(fired(&mut index, now), [1, 2, 3, 4, 5]);
    }

    /// A message paged out after it was stored moves far when it is due past the horizon.
    #[test]
    fn paging_out_moves_a_far_message_to_disk() {
        let (_, mut index) = spilled();
        index.load_due_soon(t(0));
        let due = t(NEAR_HORIZON_MS * 10);
        index.insert(due, waiting(1));
        assert_eq!(index.far_message_count(), 0);
        let location = RecordLocation { segment: 1, offset: 64, record_bytes: 100 };
        assert!(index.page_out(due, 1, 101, |m| Paged::new(location, m.hot(), m.body_size())));
        assert_eq!((index.message_count(), index.far_message_count(), index.body_bytes()), (1, 1, 2));
    }

    proptest::proptest! {
        /// Against a plain ordered map: whatever is inserted (paged or not, near or far, in runs
        /// of 3 so that many runs exist), removed, listed and fired, and however the spill files
        /// are damaged meanwhile (bytes flipped, files cut short or deleted, writes refused),
        /// and whatever comes between a spill read asked for and its answer, the index holds the same messages in the same (due, id) order, fires each exactly
        /// once, never before its due time and never late past a load, and counts them right.
        #[test]
        fn the_two_tiers_behave_as_one_ordered_index(
            ops in proptest::collection::vec((0u8..7, 0u64..400_000, proptest::bool::ANY), 1..120)
        ) {
            use std::collections::BTreeSet;
            let files = Arc::new(MemorySpillFiles::with_run_records(3));
            let far = FarTier::new(files.clone(), 0);
            let mut index = DelayIndex { far: Some(far), ..DelayIndex::default() };
            let mut model: BTreeSet<(Timestamp, Seq)> = BTreeSet::new();
            let mut now = t(1_000_000);
            let mut next_seq = 1;
            index.load_due_soon(now);
            for (op, value, paged_one) in ops {
                match op {
                    0 | 1 => {
                        let due = now.saturating_add_millis(value);
                        let waiting = if paged_one { paged(next_seq) } else { waiting(next_seq) };
                        index.insert(due, waiting);
                        model.insert((due, next_seq));
                        next_seq += 1;
                    }
                    2 => {
                        if let Some(&(due, seq)) = model.iter().nth(value as usize % model.len().max(1)) {
                            proptest::prop_assert_eq!(index.remove_at(due, seq).map(|w| w.entry.seq), Some(seq));
                            model.remove(&(due, seq));
                        }
                    }
                    4 => files.damage_bytes(value as usize % 240, 1 + value as usize % 50),
                    // Reads asked for and answered only at the next firing: inserts, removals,
                    // damage and listings come between.
                    6 => index.load_due_soon(now),
                    5 => match value % 4 {
                        0 => files.truncate_to_half(),
                        1 => files.delete_all(),
                        refuse => files.refuse_writes(refuse == 2),
                    },
                    _ => {
                        now = now.saturating_add_millis(value / 4);
                        answer(&mut index, &files, now);
                        load_answered(&mut index, &files, now);
                        let fired: Vec<(Timestamp, Seq)> =
                            std::iter::from_fn(|| index.pop_due(now)).map(|(due, w)| (due, w.entry.seq)).collect();
                        let due: Vec<(Timestamp, Seq)> = model.iter().copied().filter(|(d, _)| *d <= now).collect();
                        proptest::prop_assert_eq!(&fired, &due);
                        for key in due {
                            model.remove(&key);
                        }
                    }
                }
                proptest::prop_assert_eq!(index.message_count(), model.len());
                proptest::prop_assert_eq!(index.body_bytes(), 2 * model.len());
                proptest::prop_assert_eq!(index.next_due(), model.first().map(|(due, _)| *due));
                let listed: Vec<(Timestamp, Seq)> =
                    index.after(None, usize::MAX).iter().map(|(due, w)| (*due, w.entry.seq)).collect();
                proptest::prop_assert_eq!(listed, model.iter().copied().collect::<Vec<_>>());
                if let Some(&(due, seq)) = model.iter().nth(model.len() / 2) {
                    let after: Vec<(Timestamp, Seq)> =
                        index.after(Some((due, seq)), 2).iter().map(|(d, w)| (*d, w.entry.seq)).collect();
                    let want: Vec<(Timestamp, Seq)> =
                        model.range((std::ops::Bound::Excluded((due, seq)), std::ops::Bound::Unbounded)).take(2).copied().collect();
                    proptest::prop_assert_eq!(after, want);
                    proptest::prop_assert_eq!(index.due_of(seq), Some(due));
                }
            }
        }
    }

    /// Listing, lookup and removal see both tiers, in due order.
    #[test]
    fn listings_and_removal_cover_both_tiers() {
        let (_, mut index) = spilled();
        index.load_due_soon(t(0));
        let far = t(NEAR_HORIZON_MS * 3);
        index.insert(far, paged(1));
        index.insert(t(10), waiting(2));
        index.insert(far.saturating_add_millis(1), waiting(3));
        let listed: Vec<(Timestamp, Seq)> = index.list(10).iter().map(|i| (i.due, i.seq)).collect();
        assert_eq!(listed, vec![(t(10), 2), (far, 1), (far.saturating_add_millis(1), 3)]);
        let after: Vec<Seq> = index.after(Some((t(10), 2)), 1).iter().map(|(_, w)| w.entry.seq).collect();
        assert_eq!(after, vec![1]);
        assert_eq!(index.due_of(1), Some(far));
        assert_eq!(index.remove_at(far, 1).map(|w| w.entry.seq), Some(1));
        assert_eq!((index.message_count(), index.far_message_count()), (2, 0));
    }
}
