//! Queue states in a checkpoint (ADR 0019): what the owner of the queues (the broker) keeps of a
//! queue, handed to the store with a checkpoint request, so that a restart takes the messages the
//! state holds from it instead of reading their records back in recovery's second pass.
//!
//! A state is opaque to the store, which checks one thing when the checkpoint is taken: the
//! state and the live index agree on the queue's messages. The queue's live messages must be
//! exactly the `covers` the state holds plus the `read_back` it does not (each of those live).
//! A state that disagrees is left out, and its queue is restored from its records as before.
//!
//! At recovery the first pass notes every message of such a queue that a record after the
//! checkpoint settles, updates or enqueues again, and every one whose segment compaction deleted
//! since (its settle may have gone with it): the *changed* messages. A purge after the checkpoint
//! drops the queue's state. The second pass then reads back, of a queue with a state, only what
//! was enqueued after the checkpoint, the changed messages and `read_back`. The owner drops the
//! changed messages from the state before it takes the state: those still live come back from
//! the log with their latest metadata.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;

use crate::index::{pack, segment_of, IdBuild, LiveIndex};
use crate::varint::{self, Malformed, Reader};

/// A queue's state for a checkpoint, as its owner hands it over ([`crate::Store::checkpoint_with`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueCheckpoint {
    pub queue: u64,
    /// Live messages of the queue the state holds: a restart takes them from the state.
    pub covers: u64,
    /// Live messages of the queue the state does not hold, by id: a restart reads them back.
    pub read_back: Vec<u64>,
    /// The state, written one part after another (parts let the owner hand over what it keeps
    /// already as bytes without copying it on its own thread).
    pub parts: Vec<Bytes>,
}

impl QueueCheckpoint {
    fn state_bytes(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// Bytes [`encode`] writes for it, at most.
    fn encoded_bytes(&self) -> usize {
        30 + self.read_back.len() * 10 + self.state_bytes()
    }
}

/// A queue's state as a restart found it ([`crate::Recovered::queue_states`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredQueueState {
    pub queue: u64,
    /// The state as its owner wrote it.
    pub state: Bytes,
    /// Messages the state may hold that changed after it was taken, sorted: drop them from it.
    /// Those still live come back through the second pass with their latest metadata.
    pub changed: Vec<u64>,
}

/// The states that agree with `index` (see the module doc); the others are dropped.
pub(crate) fn agreeing(states: Vec<QueueCheckpoint>, index: &LiveIndex) -> Vec<QueueCheckpoint> {
    states
        .into_iter()
        .filter(|state| {
            let live = index.queue_messages(state.queue);
            let read_back = state.read_back.iter().collect::<BTreeSet<_>>();
            live == state.covers + state.read_back.len() as u64
                && read_back.len() == state.read_back.len()
                && state.read_back.iter().all(|id| index.contains(state.queue, *id))
        })
        .collect()
}

/// The smallest of `states` that [`encode`] writes in `room` bytes together.
pub(crate) fn fitting(mut states: Vec<QueueCheckpoint>, room: usize) -> Vec<QueueCheckpoint> {
    states.sort_by_key(QueueCheckpoint::encoded_bytes);
    let mut used = 10;
    states.retain(|state| {
        used += state.encoded_bytes();
        used <= room
    });
    states
}

/// Appends `states` to a checkpoint: `out` takes the small fields, and each state's parts,
/// with `out` before them, go to `parts` as they are (no copy).
pub(crate) fn encode(states: Vec<QueueCheckpoint>, mut out: Vec<u8>, parts: &mut Vec<Bytes>) {
    varint::put(&mut out, states.len() as u64);
    for state in states {
        varint::put(&mut out, state.queue);
        varint::put(&mut out, state.read_back.len() as u64);
        for id in &state.read_back {
            varint::put(&mut out, *id);
        }
        varint::put(&mut out, state.state_bytes() as u64);
        parts.push(Bytes::from(std::mem::take(&mut out)));
        parts.extend(state.parts);
    }
    parts.push(Bytes::from(out));
}

/// A state read back from a checkpoint.
#[derive(Debug)]
pub(crate) struct StoredState {
    queue: u64,
    read_back: Vec<u64>,
    state: Bytes,
}

/// The states [`encode`] wrote, their bytes slices of `payload` (which `input` reads).
pub(crate) fn decode(input: &mut Reader<'_>, payload: &Bytes) -> Result<Vec<StoredState>, Malformed> {
    let mut states = Vec::new();
    let mut queues = HashSet::new();
    for _ in 0..input.count()? {
        let queue = input.u64()?;
        let read_back = (0..input.count()?).map(|_| input.u64()).collect::<Result<Vec<_>, _>>()?;
        let bytes = usize::try_from(input.u64()?).map_err(|_| Malformed)?;
        let state = payload.slice_ref(input.bytes(bytes)?);
        if !queues.insert(queue) {
            return Err(Malformed);
        }
        states.push(StoredState { queue, read_back, state });
    }
    Ok(states)
}

/// Recovery's account of a checkpoint's states: fed by the first pass, then split into what the
/// second pass skips and what the owner takes.
#[derive(Debug, Default)]
pub(crate) struct Covered {
    /// Places below this are the checkpoint's (the start of the segment it was taken at).
    before: u64,
    queues: HashMap<u64, Cover, IdBuild>,
}

#[derive(Debug)]
struct Cover {
    state: Bytes,
    /// Messages the second pass reads back although they lie before the checkpoint.
    read: HashSet<u64, IdBuild>,
    changed: Vec<u64>,
}

impl Covered {
    pub(crate) fn new(replay_from: u64, states: Vec<StoredState>) -> Self {
        let queues = states
            .into_iter()
            .map(|s| {
                let read = s.read_back.into_iter().collect();
                (s.queue, Cover { state: s.state, read, changed: Vec::new() })
            })
            .collect();
        Self { before: pack(replay_from, 0), queues }
    }

    /// Whether `queue` has a state.
    pub(crate) fn has(&self, queue: u64) -> bool {
        self.queues.contains_key(&queue)
    }

    /// Whether a message enqueued at `place` was enqueued before the checkpoint.
    pub(crate) fn is_before(&self, place: u64) -> bool {
        place < self.before
    }

    /// A record after the checkpoint enqueued, settled or updated `msg_id` in `queue`.
    pub(crate) fn changed(&mut self, queue: u64, msg_id: u64) {
        if let Some(cover) = self.queues.get_mut(&queue) {
            if cover.read.insert(msg_id) {
                cover.changed.push(msg_id);
            }
        }
    }

    /// A purge after the checkpoint emptied `queue`: its state is void.
    pub(crate) fn purged(&mut self, queue: u64) {
        self.queues.remove(&queue);
    }

    /// The messages of the states' queues whose enqueue lies in one of `gone` (segments deleted
    /// since the checkpoint) changed: their settles may have gone with them.
    pub(crate) fn segments_gone(&mut self, index: &LiveIndex, gone: &BTreeSet<u64>) {
        if gone.is_empty() {
            return;
        }
        let queues: Vec<u64> = self.queues.keys().copied().collect();
        for queue in queues {
            for (msg_id, place) in index.queue_entries(queue) {
                if gone.contains(&segment_of(place)) {
                    self.changed(queue, msg_id);
                }
            }
        }
    }

    /// Splits into what the second pass skips and the states for their owner.
    pub(crate) fn split(self) -> (Skips, Vec<RecoveredQueueState>) {
        let mut states = Vec::with_capacity(self.queues.len());
        let mut read = HashMap::default();
        for (queue, cover) in self.queues {
            let mut changed = cover.changed;
            changed.sort_unstable();
            states.push(RecoveredQueueState { queue, state: cover.state, changed });
            read.insert(queue, cover.read);
        }
        states.sort_unstable_by_key(|s| s.queue);
        (Skips { before: self.before, read }, states)
    }
}

/// What recovery's second pass leaves to the queues' states: messages of their queues enqueued
/// before the checkpoint and not read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Skips {
    before: u64,
    read: HashMap<u64, HashSet<u64, IdBuild>, IdBuild>,
}

impl Skips {
    /// Whether the state of `queue` holds `msg_id`, enqueued at `place`.
    #[cfg(test)]
    pub(crate) fn skips(&self, queue: u64, msg_id: u64, place: u64) -> bool {
        self.of(queue).is_some_and(|skips| skips.skips(msg_id, place))
    }

    /// What is skipped of `queue`, if it has a state (one lookup per queue, not per message).
    pub(crate) fn of(&self, queue: u64) -> Option<QueueSkips<'_>> {
        Some(QueueSkips { before: self.before, read: self.read.get(&queue)? })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.read.is_empty()
    }

    /// Skips nothing of `queue`.
    pub(crate) fn forget(&mut self, queue: u64) {
        self.read.remove(&queue);
    }
}

/// What the second pass skips of one queue with a state ([`Skips::of`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueSkips<'a> {
    before: u64,
    read: &'a HashSet<u64, IdBuild>,
}

impl QueueSkips<'_> {
    /// Whether the state holds `msg_id`, enqueued at `place` (the read set is usually empty).
    pub(crate) fn skips(&self, msg_id: u64, place: u64) -> bool {
        place < self.before && (self.read.is_empty() || !self.read.contains(&msg_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(queue: u64, covers: u64, read_back: Vec<u64>, parts: &[&'static [u8]]) -> QueueCheckpoint {
        QueueCheckpoint {
            queue,
            covers,
            read_back,
            parts: parts.iter().map(|p| Bytes::from_static(p)).collect(),
        }
    }

    #[test]
    fn states_round_trip_with_their_bytes_in_place() {
        let states = vec![state(3, 2, vec![9, 4], &[b"ab", b"cd"]), state(7, 0, vec![], &[])];
        let most = 10 + states.iter().map(QueueCheckpoint::encoded_bytes).sum::<usize>();
        let mut parts = Vec::new();
        encode(states, Vec::new(), &mut parts);
        let payload = Bytes::from(parts.concat());
        assert!(payload.len() <= most);
        let decoded = decode(&mut Reader::new(&payload), &payload).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(
            (decoded[0].queue, &decoded[0].read_back[..], &decoded[0].state[..]),
            (3, &[9, 4][..], &b"abcd"[..])
        );
        assert_eq!((decoded[1].queue, decoded[1].state.len()), (7, 0));
        for cut in 0..payload.len() {
            let short = payload.slice(..cut);
            assert!(decode(&mut Reader::new(&short), &short).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_smallest_states_that_fit_are_kept() {
        let big = state(1, 0, vec![], &[&[0; 100]]);
        let small = state(2, 0, vec![1, 2], &[&[0; 10]]);
        let kept = fitting(vec![big.clone(), small.clone()], 100);
        assert_eq!(kept, vec![small.clone()]);
        assert_eq!(fitting(vec![big.clone(), small.clone()], 1000), vec![small, big]);
    }

    #[test]
    fn only_states_that_agree_with_the_index_are_kept() {
        let mut index = LiveIndex::default();
        index.add_segment(1);
        for id in 1..=5 {
            index.enqueue(1, id, 1, 64 * id as u32).unwrap();
        }
        let kept = agreeing(vec![state(1, 3, vec![2, 4], &[]), state(1, 4, vec![2], &[])], &index);
        assert_eq!(kept.len(), 2, "counts agree");
        let refused = agreeing(
            vec![
                state(1, 4, vec![], &[]),
                state(1, 4, vec![9], &[]),
                state(1, 3, vec![2, 2], &[]),
                state(2, 1, vec![], &[]),
            ],
            &index,
        );
        assert!(refused.is_empty(), "{refused:?}");
    }

    #[test]
    fn the_second_pass_skips_only_unchanged_messages_before_the_checkpoint() {
        let stored = StoredState { queue: 1, read_back: vec![5], state: Bytes::new() };
        let mut covered = Covered::new(4, vec![stored]);
        covered.changed(1, 6);
        covered.changed(1, 6);
        covered.changed(2, 7);
        let (skips, states) = covered.split();
        let before = pack(3, 100);
        assert!(skips.skips(1, 4, before));
        assert!(!skips.skips(1, 5, before), "read back");
        assert!(!skips.skips(1, 6, before), "changed");
        assert!(!skips.skips(1, 4, pack(4, 30)), "enqueued after");
        assert!(!skips.skips(2, 4, before), "no state");
        assert_eq!(states, vec![RecoveredQueueState { queue: 1, state: Bytes::new(), changed: vec![6] }]);
    }
}
