//! The live index: which messages are live, where the enqueue record of each lies, and what keeps
//! each segment from being deleted. About 16 bytes per live message (a `msg_id → (segment,
//! offset)` entry in its queue's id-ordered vector, the offset packed with the segment in one
//! `u64`: `index/queue_live.rs`) plus the vector's growth slack; bodies and metadata are not held
//! here. The offset makes a live enqueue record exact:
//! recovery's second pass brings back a record only if the index still points at it.
//!
//! A segment may be deleted when both hold:
//! - it holds no live enqueue (`live == 0`), and
//! - every older segment that a settle, update or purge record in it refers to is already gone
//!   (`refs` is empty). Otherwise deleting it would drop a settle whose enqueue is still on disk,
//!   and recovery would bring a settled message back (or an update, and lose the newer metadata).
//!
//! Recovery and the running store drive the same index, so both count alike.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

mod checkpoint;
mod live_runs;
mod queue_live;

use queue_live::QueueLive;

use crate::queue_states::Skips;

/// A segment sequence and an offset in one `u64`: segment sequences stay below 2^32
/// (`record::SEGMENT_SEQUENCE_MAX`), and offsets are `u32` (a `Location`'s).
pub(crate) fn pack(segment: u64, offset: u32) -> u64 {
    debug_assert!(segment <= u64::from(u32::MAX));
    (segment << 32) | u64::from(offset)
}

pub(crate) fn segment_of(packed: u64) -> u64 {
    packed >> 32
}

fn offset_of(packed: u64) -> u32 {
    packed as u32
}

/// A live enqueue record for recovery's second pass: its offset in the high 32 bits (so records
/// sort in file order) and a 32-bit fingerprint of its queue and message id in the low ones (so
/// the pass can check that the record it reads is the one indexed there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LiveRecord(u64);

impl LiveRecord {
    pub(crate) fn new(offset: u32, queue: u64, msg_id: u64) -> Self {
        Self((u64::from(offset) << 32) | u64::from(fingerprint(queue, msg_id)))
    }

    pub(crate) fn offset(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Whether a record of `queue` and `msg_id` is the one indexed here (a different one passes
    /// with odds of 2^-32: the record's CRC32C is checked too).
    pub(crate) fn is(self, queue: u64, msg_id: u64) -> bool {
        self.0 as u32 == fingerprint(queue, msg_id)
    }
}

fn fingerprint(queue: u64, msg_id: u64) -> u32 {
    let mut hasher = IdHasher::default();
    hasher.write_u64(queue);
    hasher.write_u64(msg_id);
    // The multiply leaves its best-mixed bits at the top.
    (hasher.finish() >> 32) as u32
}

#[derive(Debug, Default)]
pub(crate) struct LiveIndex {
    queues: HashMap<u64, QueueLive, IdBuild>,
    segments: BTreeMap<u64, SegmentLive>,
    live_messages: u64,
}

/// What pins one segment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SegmentLive {
    /// Live messages whose enqueue record is in this segment.
    pub(crate) live: u64,
    /// Older, still present segments holding enqueues that records in this segment settle or update.
    pub(crate) refs: BTreeSet<u64>,
    /// It holds an update record of a message that was live then: a recovery from a checkpoint
    /// reads such a segment again for the latest metadata (the index keeps none).
    pub(crate) updates: bool,
}

/// The enqueue of a message that is already live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AlreadyLive;

impl LiveIndex {
    /// Starts tracking segment `seq` (records may now land in it).
    pub(crate) fn add_segment(&mut self, seq: u64) {
        self.segments.entry(seq).or_default();
    }

    /// Records that `msg_id` entered `queue` with its enqueue record at `offset` in segment `seg`.
    pub(crate) fn enqueue(
        &mut self,
        queue: u64,
        msg_id: u64,
        seg: u64,
        offset: u32,
    ) -> Result<(), AlreadyLive> {
        let messages = self.queues.entry(queue).or_default();
        if messages.get(msg_id).is_some() {
            return Err(AlreadyLive);
        }
        messages.insert(msg_id, pack(seg, offset));
        self.segments.entry(seg).or_default().live += 1;
        self.live_messages += 1;
        Ok(())
    }

    /// Recovery's enqueue: a record for an id already live replaces it (appends refuse a live id,
    /// so a repeat means the later record wins), as a settle written in `seg` and then an
    /// enqueue would, in one lookup.
    pub(crate) fn enqueue_replacing(&mut self, queue: u64, msg_id: u64, seg: u64, offset: u32) -> bool {
        let replaced = self.queues.entry(queue).or_default().insert(msg_id, pack(seg, offset));
        if let Some(old) = replaced {
            self.unpin(segment_of(old), seg);
        }
        self.segments.entry(seg).or_default().live += 1;
        self.live_messages += 1;
        replaced.is_some()
    }

    /// Records a settle written in segment `at`; returns the segment of the enqueue, if live.
    pub(crate) fn settle(&mut self, queue: u64, msg_id: u64, at: u64) -> Option<u64> {
        let messages = self.queues.get_mut(&queue)?;
        let seg = segment_of(messages.remove(msg_id)?);
        if messages.is_empty() {
            self.queues.remove(&queue);
        }
        self.unpin(seg, at);
        Some(seg)
    }

    /// Records an update written in segment `at`; returns the segment of the enqueue, if live.
    pub(crate) fn update(&mut self, queue: u64, msg_id: u64, at: u64) -> Option<u64> {
        let seg = segment_of(self.queues.get(&queue)?.get(msg_id)?);
        self.add_ref(at, seg);
        self.segments.entry(at).or_default().updates = true;
        Some(seg)
    }

    /// Where live `msg_id`'s enqueue record lies, packed (`(segment << 32) | offset`: later records
    /// compare higher).
    pub(crate) fn place(&self, queue: u64, msg_id: u64) -> Option<u64> {
        self.queues.get(&queue)?.get(msg_id)
    }

    /// Records a purge written in segment `at`; returns how many messages it settled.
    pub(crate) fn purge(&mut self, queue: u64, at: u64) -> u64 {
        let Some(messages) = self.queues.remove(&queue) else {
            return 0;
        };
        let settled = messages.len() as u64;
        for (_, packed) in messages.iter() {
            self.unpin(segment_of(packed), at);
        }
        settled
    }

    /// The live enqueue records of each segment as [`LiveRecord`]s, in no order (sorted, they are
    /// in file order; the second pass sorts each segment's as it comes to it): one pass over the
    /// tables in memory order, so recovery's second pass visits exactly those records
    /// without a lookup per record (a lookup is a cache miss in a table of 100M entries), and can
    /// check that each is the record indexed there. 8 B per message.
    /// Messages that queue states hold (`skips`) are left out.
    pub(crate) fn live_records(&self, skips: &Skips) -> BTreeMap<u64, Vec<LiveRecord>> {
        let mut records: BTreeMap<u64, Vec<LiveRecord>> = self
            .segments
            .iter()
            .filter(|(_, s)| s.live > 0)
            .map(|(seq, s)| {
                // Unknown with skips: a segment's live messages may all be in a state.
                let live = if skips.is_empty() { usize::try_from(s.live).unwrap_or(0) } else { 0 };
                (*seq, Vec::with_capacity(live))
            })
            .collect();
        let mut push = |queue: u64, msg_id: u64, packed: u64| {
            if let Some(segment) = records.get_mut(&segment_of(packed)) {
                segment.push(LiveRecord::new(offset_of(packed), queue, msg_id));
            }
        };
        for (queue, messages) in &self.queues {
            let Some(skipped) = skips.of(*queue) else {
                messages.iter().for_each(|(msg_id, packed)| push(*queue, msg_id, packed));
                continue;
            };
            // A run lies in one segment: one before the checkpoint holds only messages the state
            // has, but those read back (100M entries not walked at a start from a state).
            for (msg_id, packed) in messages.iter_without_runs_before(skipped.segment()) {
                if !skipped.skips(msg_id, packed) {
                    push(*queue, msg_id, packed);
                }
            }
            for msg_id in skipped.read_back() {
                if let Some(packed) = messages.get_in_run_before(msg_id, skipped.segment()) {
                    push(*queue, msg_id, packed);
                }
            }
        }
        records.retain(|_, segment| !segment.is_empty());
        records
    }

    /// Forgets the live messages whose enqueue record lies at one of `at` (`(segment, offset)`):
    /// recovery's second pass could not read them back, so they are lost, as if the first pass had
    /// found the damage. Nothing was written for them, so no segment gains a reference. Returns
    /// how many were live.
    pub(crate) fn forget_records(&mut self, at: &BTreeSet<(u64, u32)>) -> u64 {
        if at.is_empty() {
            // The usual case: no walk over a table of 100M entries at every start.
            return 0;
        }
        let mut unpinned = Vec::new();
        self.queues.retain(|_, messages| {
            messages.retain(|_, packed| {
                let here = at.contains(&(segment_of(packed), offset_of(packed)));
                if here {
                    unpinned.push(segment_of(packed));
                }
                !here
            });
            !messages.is_empty()
        });
        for seg in &unpinned {
            self.live_messages -= 1;
            if let Some(s) = self.segments.get_mut(seg) {
                s.live -= 1;
            }
        }
        unpinned.len() as u64
    }

    /// Live messages per queue id (queues with none are absent).
    pub(crate) fn messages_per_queue(&self) -> BTreeMap<u64, u64> {
        self.queues.iter().map(|(queue, m)| (*queue, m.len() as u64)).collect()
    }

    /// Whether `msg_id` is live in `queue`.
    pub(crate) fn contains(&self, queue: u64, msg_id: u64) -> bool {
        self.queues.get(&queue).is_some_and(|m| m.get(msg_id).is_some())
    }

    /// Segments that may be deleted now, oldest first; `active` (being appended to) never is.
    pub(crate) fn dead_segments(&self, active: Option<u64>) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(seq, s)| Some(**seq) != active && s.live == 0 && s.refs.is_empty())
            .map(|(seq, _)| *seq)
            .collect()
    }

    /// Forgets a deleted segment, releasing the segments that referred to it.
    pub(crate) fn remove_segment(&mut self, seq: u64) {
        let removed = self.segments.remove(&seq);
        debug_assert!(removed.is_none_or(|s| s.live == 0 && s.refs.is_empty()));
        // Only newer segments can refer to it.
        for (_, later) in self.segments.range_mut(seq..) {
            later.refs.remove(&seq);
        }
    }

    /// What pins segment `seq`, if tracked.
    #[cfg(test)]
    pub(crate) fn segment(&self, seq: u64) -> Option<&SegmentLive> {
        self.segments.get(&seq)
    }

    /// The segments the index tracks, ascending.
    pub(crate) fn segment_sequences(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.keys().copied()
    }

    /// Whether segment `seq` holds an update record (see [`SegmentLive::updates`]).
    pub(crate) fn holds_updates(&self, seq: u64) -> bool {
        self.segments.get(&seq).is_some_and(|s| s.updates)
    }

    /// Live messages in all queues.
    pub(crate) fn live_messages(&self) -> u64 {
        self.live_messages
    }

    /// The live entries of `queue`: `(msg_id, place)`, in no order.
    pub(crate) fn queue_entries(&self, queue: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.queues.get(&queue).into_iter().flat_map(QueueLive::iter)
    }

    /// Live messages per queue id.
    pub(crate) fn queue_messages(&self, queue: u64) -> u64 {
        self.queues.get(&queue).map_or(0, |m| m.len() as u64)
    }

    fn unpin(&mut self, seg: u64, at: u64) {
        self.live_messages -= 1;
        if let Some(s) = self.segments.get_mut(&seg) {
            debug_assert!(s.live > 0, "segment {seg} live count underflow");
            s.live -= 1;
        }
        self.add_ref(at, seg);
    }

    fn add_ref(&mut self, at: u64, seg: u64) {
        if at != seg {
            debug_assert!(seg < at, "records refer only to older segments");
            self.segments.entry(at).or_default().refs.insert(seg);
        }
    }
}

/// A fast hasher for `u64` ids (multiply-rotate, as rustc's FxHash). Ids are chosen by the broker,
/// never by a peer, so the DoS resistance of the default SipHash buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

pub(crate) type IdBuild = BuildHasherDefault<IdHasher>;

const ID_HASH_MULTIPLIER: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(ID_HASH_MULTIPLIER);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment whose messages are all settled in the same segment is dead at once.
    #[test]
    fn settled_segment_without_refs_is_dead() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 10, 1, 10).unwrap();
        index.enqueue(1, 11, 1, 11).unwrap();
        index.add_segment(2);
        assert_eq!(index.settle(1, 10, 1), Some(1));
        assert!(index.dead_segments(Some(2)).is_empty());
        assert_eq!(index.settle(1, 11, 1), Some(1));
        assert_eq!(index.dead_segments(Some(2)), [1]);
        assert_eq!(index.live_messages(), 0);
    }

    /// A segment holding a settle for an older segment's message stays until that segment goes.
    #[test]
    fn settle_record_pins_its_segment_until_the_enqueue_segment_goes() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 10, 1, 10).unwrap(); // long-lived, pins segment 1
        index.enqueue(1, 20, 2, 20).unwrap();
        index.enqueue(1, 30, 3, 30).unwrap();
        index.add_segment(4);
        index.settle(1, 20, 2);
        index.settle(1, 30, 3);
        // Segment 3 holds no settle for an older segment: dead. Segment 2 is dead too.
        assert_eq!(index.dead_segments(Some(4)), [2, 3]);
        index.settle(1, 10, 4); // settle of segment 1's message written into segment 4
        index.add_segment(5);
        assert_eq!(index.dead_segments(Some(5)), [1, 2, 3]);
        for seq in [1, 2, 3] {
            index.remove_segment(seq);
        }
        // Segment 4's settle referred to segment 1 only; with 1 gone, 4 is free.
        assert_eq!(index.dead_segments(Some(5)), [4]);
    }

    /// An update pins its segment while the updated message lives; a duplicate enqueue is refused.
    #[test]
    fn update_pins_and_duplicates_are_refused() {
        let mut index = LiveIndex::default();
        index.enqueue(7, 1, 1, 1).unwrap();
        assert_eq!(index.enqueue(7, 1, 2, 1), Err(AlreadyLive));
        index.add_segment(2);
        index.add_segment(3);
        assert_eq!(index.update(7, 1, 2), Some(1));
        assert_eq!(index.dead_segments(Some(3)), Vec::<u64>::new());
        assert_eq!(index.update(7, 99, 2), None);
    }

    /// The live records come out per segment, sorting by ascending offset whatever the queue or
    /// the order of the enqueues, each knowing its queue and id; settled ones and segments with
    /// nothing live are left out.
    #[test]
    fn live_records_are_per_segment_and_sort_by_offset() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 1, 1, 300).unwrap();
        index.enqueue(2, 1, 1, 100).unwrap();
        index.enqueue(1, 2, 1, 200).unwrap();
        index.enqueue(1, 3, 2, 40).unwrap();
        index.enqueue(1, 4, 3, 40).unwrap();
        index.settle(1, 2, 3);
        index.settle(1, 4, 3);
        let mut records = index.live_records(&Skips::default());
        records.values_mut().for_each(|r| r.sort_unstable());
        let offsets: BTreeMap<u64, Vec<u32>> =
            records.iter().map(|(seq, r)| (*seq, r.iter().map(|r| r.offset()).collect())).collect();
        assert_eq!(offsets, BTreeMap::from([(1, vec![100, 300]), (2, vec![40])]));
        assert!(records[&1][0].is(2, 1) && records[&1][1].is(1, 1));
        assert!(!records[&1][0].is(1, 1) && !records[&1][0].is(2, 2));
    }

    /// With a queue state, the records left are exactly those the skips do not cover: runs
    /// before the checkpoint are passed over whole, but their members read back are kept.
    #[test]
    fn live_records_with_a_state_skip_whole_runs_before_the_checkpoint() {
        use crate::queue_states::{Covered, StoredState};
        let mut index = LiveIndex::default();
        for seg in 1..=4 {
            index.add_segment(seg);
        }
        // Queue 1: runs in segments 1 and 3 (rows of ids, steady places), a few scattered ids
        // (vectors) in segment 1 and 3; queue 2 has no state.
        for id in 0..40u64 {
            index.enqueue(1, id, 1 + 2 * (id / 20), 100 + 64 * (id % 20) as u32).unwrap();
        }
        for (id, seg, offset) in [(100, 1, 9000), (103, 3, 9000), (107, 1, 9500)] {
            index.enqueue(1, id, seg, offset).unwrap();
        }
        index.enqueue(2, 5, 1, 50).unwrap();
        index.settle(1, 3, 4);
        let read_back = vec![4, 3, 25, 107, 999];
        let stored = StoredState::for_test(1, read_back.clone());
        let (skips, _) = Covered::new(2, vec![stored]).split();
        let mut got: Vec<(u64, u32)> = index
            .live_records(&skips)
            .iter()
            .flat_map(|(seg, records)| records.iter().map(move |r| (*seg, r.offset())))
            .collect();
        got.sort_unstable();
        let mut expected: Vec<(u64, u32)> = index
            .queues
            .iter()
            .flat_map(|(queue, messages)| messages.iter().map(move |(id, packed)| (*queue, id, packed)))
            .filter(|(queue, id, packed)| !skips.skips(*queue, *id, *packed))
            .map(|(_, _, packed)| (segment_of(packed), offset_of(packed)))
            .collect();
        expected.sort_unstable();
        assert_eq!(got, expected, "each record left once");
        // 4 (read back, in the early run), 20..40 (the later run), 103, 107 (read back), queue 2's 5.
        assert_eq!(got.len(), 1 + 20 + 2 + 1);
        assert!(got.contains(&(1, 100 + 64 * 4)) && got.contains(&(1, 9500)) && !got.contains(&(1, 9000)));
    }

    /// Forgetting records by location unpins their segments without adding references.
    #[test]
    fn forgotten_records_are_no_longer_live() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 1, 1, 100).unwrap();
        index.enqueue(2, 5, 1, 200).unwrap();
        index.enqueue(1, 2, 2, 40).unwrap();
        index.add_segment(3);
        assert_eq!(index.forget_records(&BTreeSet::from([(1, 200), (2, 40), (2, 99)])), 2);
        assert!(!index.contains(2, 5) && !index.contains(1, 2) && index.contains(1, 1));
        assert_eq!(index.live_messages(), 1);
        assert_eq!(index.dead_segments(Some(3)), [2]);
    }

    /// A purge settles every live message of the queue and refers to their segments.
    #[test]
    fn purge_settles_the_whole_queue() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 1, 1, 1).unwrap();
        index.enqueue(1, 2, 2, 2).unwrap();
        index.enqueue(2, 1, 2, 1).unwrap();
        assert_eq!(index.purge(1, 3), 2);
        assert_eq!(index.queue_messages(1), 0);
        assert_eq!(index.queue_messages(2), 1);
        assert_eq!(index.segment(3).unwrap().refs, BTreeSet::from([1, 2]));
        assert_eq!(index.purge(1, 3), 0);
    }
}
