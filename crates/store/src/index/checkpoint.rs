//! The live index in a checkpoint (`crate::checkpoint`): what pins each segment, and each queue's
//! live entries as the index holds them (runs of a bit per message stay runs). Each segment's
//! live count is not written: it is counted again from the entries read back, so the two cannot
//! disagree.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::queue_live::QueueLive;
use super::{segment_of, LiveIndex, SegmentLive};
use crate::varint::{self, Malformed, Reader};

impl LiveIndex {
    /// Appends the index to a checkpoint.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        varint::put(out, self.segments.len() as u64);
        for (seq, segment) in &self.segments {
            varint::put(out, *seq);
            varint::put(out, u64::from(segment.updates));
            varint::put(out, segment.refs.len() as u64);
            for referred in &segment.refs {
                varint::put(out, *referred);
            }
        }
        varint::put(out, self.queues.len() as u64);
        for (queue, messages) in &self.queues {
            varint::put(out, *queue);
            messages.encode(out);
        }
    }

    /// An index read back from a checkpoint, if it is one the store could have held: every entry
    /// in a segment the table names, references only to older named segments.
    pub(crate) fn decode(input: &mut Reader<'_>) -> Result<LiveIndex, Malformed> {
        let mut segments = BTreeMap::new();
        for _ in 0..input.count()? {
            let seq = input.u64()?;
            let updates = match input.u64()? {
                0 => false,
                1 => true,
                _ => return Err(Malformed),
            };
            let mut refs = BTreeSet::new();
            for _ in 0..input.count()? {
                refs.insert(input.u64()?);
            }
            let segment = SegmentLive { live: 0, refs, updates };
            if segments.insert(seq, segment).is_some() {
                return Err(Malformed);
            }
        }
        let named: BTreeSet<u64> = segments.keys().copied().collect();
        if segments.iter().any(|(seq, s)| s.refs.iter().any(|r| r >= seq || !named.contains(r))) {
            return Err(Malformed);
        }
        let mut queues = HashMap::default();
        let mut live_messages = 0u64;
        for _ in 0..input.count()? {
            let queue = input.u64()?;
            let messages = QueueLive::decode(input)?;
            for (seq, live) in messages.live_per_segment() {
                segments.get_mut(&seq).ok_or(Malformed)?.live += live as u64;
                live_messages += live as u64;
            }
            if queues.insert(queue, messages).is_some() {
                return Err(Malformed);
            }
        }
        Ok(LiveIndex { queues, segments, live_messages })
    }

    /// Forgets the live entries whose enqueue record lies in one of `gone`, and the segments
    /// themselves (recovery from a checkpoint: segments it named that compaction deleted after
    /// it was written). Returns how many entries were still live: their settles were deleted
    /// too, which compaction allows only once their segment is gone. The walk over every entry
    /// happens only if one is left.
    pub(crate) fn forget_segments(&mut self, gone: &BTreeSet<u64>) -> u64 {
        let left: u64 = gone.iter().filter_map(|seq| self.segments.get(seq)).map(|s| s.live).sum();
        if left > 0 {
            self.queues.retain(|_, messages| {
                messages.retain(|_, packed| !gone.contains(&segment_of(packed)));
                !messages.is_empty()
            });
            self.live_messages -= left;
            for seq in gone {
                if let Some(segment) = self.segments.get_mut(seq) {
                    segment.live = 0;
                }
            }
        }
        // Oldest first: a segment refers only to older ones, which compaction deleted before it.
        for seq in gone {
            if let Some(segment) = self.segments.get_mut(seq) {
                segment.refs.retain(|r| !gone.contains(r));
            }
            self.remove_segment(*seq);
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(index: &LiveIndex) -> LiveIndex {
        let mut out = Vec::new();
        index.encode(&mut out);
        let mut input = Reader::new(&out);
        let decoded = LiveIndex::decode(&mut input).unwrap();
        assert!(input.is_empty());
        decoded
    }

    fn entries(index: &LiveIndex) -> BTreeMap<(u64, u64), u64> {
        index.queues.iter().flat_map(|(q, m)| m.iter().map(move |(id, p)| ((*q, id), p))).collect()
    }

    /// Runs with settled members, vector entries, strays, references and update flags all come
    /// back as they were, with each segment's live count counted again; and the index read back
    /// keeps working as the original does.
    #[test]
    fn an_index_reads_back_as_it_was() {
        let mut index = LiveIndex::default();
        index.add_segment(1);
        for id in 0..1_000 {
            index.enqueue(7, id, 1, 32 + id as u32 * 50).unwrap();
        }
        for id in (0..1_000).step_by(3) {
            index.settle(7, id, 1);
        }
        index.add_segment(2);
        for id in [5_000, 5_003, 5_100, 6_000] {
            index.enqueue(8, id, 2, 32 + (id as u32 % 977) * 40).unwrap();
        }
        index.enqueue(8, 4_000, 2, 9_000).unwrap(); // below the highest: a stray
        index.update(7, 1, 2);
        index.settle(7, 2, 2);
        let mut decoded = round_trip(&index);
        assert_eq!(entries(&decoded), entries(&index));
        assert_eq!(decoded.segments, index.segments);
        assert_eq!(decoded.live_messages(), index.live_messages());
        assert!(decoded.segment(2).unwrap().updates && !decoded.segment(1).unwrap().updates);
        for (queue, id) in [(7, 4), (8, 4_000), (8, 5_003)] {
            assert_eq!(decoded.settle(queue, id, 3), index.settle(queue, id, 3));
        }
        assert_eq!(decoded.enqueue(7, 1_000, 3, 32), index.enqueue(7, 1_000, 3, 32));
        assert_eq!(decoded.enqueue(8, 5_000, 3, 64), Err(super::super::AlreadyLive));
        assert_eq!(entries(&decoded), entries(&index));
    }

    /// Entries in a segment the table does not name, a reference to a newer segment, a repeated
    /// segment and input cut anywhere are refused, never a panic.
    #[test]
    fn what_the_store_could_not_have_held_is_refused() {
        let mut index = LiveIndex::default();
        index.add_segment(1);
        for id in 0..20 {
            index.enqueue(1, id, 1, 32 + id as u32 * 10).unwrap();
        }
        index.enqueue(2, 1, 1, 5_000).unwrap();
        let mut out = Vec::new();
        index.encode(&mut out);
        for cut in 0..out.len() {
            assert!(LiveIndex::decode(&mut Reader::new(&out[..cut])).is_err(), "cut at {cut}");
        }
        let unnamed = {
            let mut other = LiveIndex::default();
            other.enqueue(1, 1, 4, 32).unwrap();
            other.segments.remove(&4);
            let mut out = Vec::new();
            other.encode(&mut out);
            out
        };
        assert_eq!(LiveIndex::decode(&mut Reader::new(&unnamed)).err(), Some(Malformed));
        let newer_ref = {
            let mut other = LiveIndex::default();
            other.add_segment(1);
            other.segments.get_mut(&1).unwrap().refs.insert(2);
            other.add_segment(2);
            let mut out = Vec::new();
            other.encode(&mut out);
            out
        };
        assert_eq!(LiveIndex::decode(&mut Reader::new(&newer_ref)).err(), Some(Malformed));
    }

    /// Arbitrary bytes (a checkpoint is read only once its checksum matched, so these stand for
    /// a bug) are refused or read, never a panic or an allocation beyond their size.
    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 96) as usize;
            // Small values make counts and steps that are plausible.
            let bytes: Vec<u8> = (0..len).map(|_| (next() % 7) as u8).collect();
            let _ = LiveIndex::decode(&mut Reader::new(&bytes));
        }
    }

    /// Segments deleted after the checkpoint: their entries still live go, the segments go, and
    /// the references to them are released.
    #[test]
    fn forgotten_segments_take_their_entries() {
        let mut index = LiveIndex::default();
        index.enqueue(1, 1, 1, 32).unwrap();
        index.enqueue(1, 2, 2, 32).unwrap();
        index.enqueue(1, 3, 3, 32).unwrap();
        index.add_segment(4);
        index.settle(1, 2, 3); // segment 3 refers to 2
        assert_eq!(index.forget_segments(&BTreeSet::from([1, 2])), 1);
        assert!(index.contains(1, 3) && !index.contains(1, 1));
        assert_eq!(index.live_messages(), 1);
        assert!(index.segment(1).is_none() && index.segment(2).is_none());
        assert!(index.segment(3).unwrap().refs.is_empty());
    }
}
