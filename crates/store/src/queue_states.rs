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
use crate::state_packs::{read_parts, NewPack, PartRef, Registry};
use crate::storage::Storage;
use crate::varint::{self, Malformed, Reader};

/// A queue's state for a checkpoint, as its owner hands it over ([`crate::Store::checkpoint_with`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueCheckpoint {
    pub queue: u64,
    /// Live messages of the queue the state holds: a restart takes them from the state.
    pub covers: u64,
    /// Live messages of the queue the state does not hold, by id: a restart reads them back.
    pub read_back: Vec<u64>,
    /// The state, one part after another; a restart gives the parts back as they were cut.
    pub parts: Vec<StatePart>,
}

/// A part of a queue's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatePart {
    /// Written with the checkpoint that takes it.
    Inline(Bytes),
    /// Bytes its owner keeps unchanged for as long as it offers them (a spill run's roster):
    /// written once, to a pack, and named by every later checkpoint (`state_packs.rs`).
    Kept(Bytes),
}

impl StatePart {
    fn bytes(&self) -> &Bytes {
        match self {
            StatePart::Inline(bytes) | StatePart::Kept(bytes) => bytes,
        }
    }
}

impl QueueCheckpoint {
    fn inline_bytes(&self) -> u64 {
        self.parts.iter().filter(|p| matches!(p, StatePart::Inline(_))).map(|p| p.bytes().len() as u64).sum()
    }

    fn kept(&self) -> impl Iterator<Item = &Bytes> {
        self.parts.iter().filter_map(|part| match part {
            StatePart::Kept(bytes) => Some(bytes),
            StatePart::Inline(_) => None,
        })
    }

    /// Bytes [`encode`] writes for it in the checkpoint, at most.
    fn encoded_bytes(&self) -> u64 {
        30 + self.read_back.len() as u64 * 10 + self.parts.len() as u64 * 40 + self.inline_bytes()
    }

    /// Bytes of its kept parts that neither `registry` nor `pack` holds.
    fn new_bytes(&self, registry: &Registry, pack: &NewPack) -> u64 {
        let new = |part: &&Bytes| registry.find(part).is_none() && !pack.holds(part);
        self.kept().filter(new).map(|part| part.len() as u64).sum()
    }

    /// Every byte of the state, wherever it is written.
    fn state_bytes(&self) -> u64 {
        self.parts.iter().map(|part| part.bytes().len() as u64).sum()
    }
}

/// A queue's state as a restart found it ([`crate::Recovered::queue_states`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredQueueState {
    pub queue: u64,
    /// The state's parts, cut as its owner handed them over.
    pub parts: Vec<Bytes>,
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

/// What a checkpoint takes of the states offered: those it names, and the pack it writes.
#[derive(Debug, Default)]
pub(crate) struct Planned {
    pub(crate) states: Vec<QueueCheckpoint>,
    /// The kept parts not written yet, of the states taken and, as far as the budget goes, of
    /// the others (written ahead, so a state too large for one checkpoint fits a later one).
    pub(crate) pack: NewPack,
    /// Every kept part offered: the registry forgets the others once the checkpoint is written.
    pub(crate) offered: Vec<Bytes>,
    /// Bytes the checkpoint writes for the states: their inline parts and the pack.
    pub(crate) written: u64,
}

/// The smallest of `states` whose new bytes fit in `budget` together and whose bytes, wherever
/// written, fit in `room`.
pub(crate) fn plan(mut states: Vec<QueueCheckpoint>, registry: &Registry, room: u64, budget: u64) -> Planned {
    let offered: Vec<Bytes> = states.iter().flat_map(QueueCheckpoint::kept).cloned().collect();
    let mut pack = NewPack::default();
    states.sort_by_cached_key(|s| s.encoded_bytes() + s.new_bytes(registry, &pack));
    let (mut written, mut named) = (10, 10);
    let mut left_out = Vec::new();
    states.retain(|state| {
        let writes = state.encoded_bytes() + state.new_bytes(registry, &pack);
        let names = state.encoded_bytes() + state.state_bytes();
        if written + writes > budget || named + names > room {
            left_out.push(state.clone());
            return false;
        }
        (written, named) = (written + writes, named + names);
        for part in state.kept().filter(|part| registry.find(part).is_none()) {
            pack.add(part);
        }
        true
    });
    for part in left_out.iter().flat_map(QueueCheckpoint::kept) {
        if registry.find(part).is_none() && !pack.holds(part) && written + part.len() as u64 <= budget {
            written += pack.add(part);
        }
    }
    Planned { states, pack, offered, written }
}

/// Appends `states` to a checkpoint's `parts`: the small fields in parts of their own, and each
/// inline part after them as it is (no copy); a kept part is named where `registry` says it
/// lies. Fails on a kept part the registry does not know ([`plan`] put each in the pack).
pub(crate) fn encode(
    states: Vec<QueueCheckpoint>,
    registry: &Registry,
    parts: &mut Vec<Bytes>,
) -> Result<(), UnknownPart> {
    let mut out = Vec::new();
    varint::put(&mut out, states.len() as u64);
    for state in states {
        varint::put(&mut out, state.queue);
        varint::put(&mut out, state.read_back.len() as u64);
        for id in &state.read_back {
            varint::put(&mut out, *id);
        }
        varint::put(&mut out, state.parts.len() as u64);
        for part in state.parts {
            match part {
                StatePart::Inline(bytes) => {
                    out.push(INLINE);
                    varint::put(&mut out, bytes.len() as u64);
                    parts.push(Bytes::from(std::mem::take(&mut out)));
                    parts.push(bytes);
                }
                StatePart::Kept(bytes) => {
                    let at = registry.find(&bytes).ok_or(UnknownPart)?;
                    out.push(IN_PACK);
                    at.encode(&mut out);
                }
            }
        }
    }
    parts.push(Bytes::from(out));
    Ok(())
}

/// A kept part to be named that no pack holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnknownPart;

/// A part written in the checkpoint.
const INLINE: u8 = 0;
/// A part named where it lies in a pack.
const IN_PACK: u8 = 1;

/// A state read back from a checkpoint.
#[derive(Debug)]
pub(crate) struct StoredState {
    queue: u64,
    read_back: Vec<u64>,
    parts: Vec<Bytes>,
}

#[cfg(test)]
impl StoredState {
    /// A state of `queue` that reads back `read_back`, without bytes.
    pub(crate) fn for_test(queue: u64, read_back: Vec<u64>) -> StoredState {
        StoredState { queue, read_back, parts: Vec::new() }
    }
}

/// A state as the checkpoint names it, its kept parts not read yet.
#[derive(Debug)]
pub(crate) struct NamedState {
    queue: u64,
    read_back: Vec<u64>,
    parts: Vec<NamedPart>,
}

#[derive(Debug)]
enum NamedPart {
    Inline(Bytes),
    InPack(PartRef),
}

/// The states [`encode`] wrote, their inline bytes slices of `payload` (which `input` reads);
/// `whole_states`: the layout before packs (schema 2), each state one part in place.
pub(crate) fn decode(
    input: &mut Reader<'_>,
    payload: &Bytes,
    whole_states: bool,
) -> Result<Vec<NamedState>, Malformed> {
    let mut states = Vec::new();
    let mut queues = HashSet::new();
    for _ in 0..input.count()? {
        let queue = input.u64()?;
        let read_back = (0..input.count()?).map(|_| input.u64()).collect::<Result<Vec<_>, _>>()?;
        let parts = if whole_states {
            vec![NamedPart::Inline(inline_part(input, payload)?)]
        } else {
            (0..input.count()?).map(|_| named_part(input, payload)).collect::<Result<Vec<_>, _>>()?
        };
        if !queues.insert(queue) {
            return Err(Malformed);
        }
        states.push(NamedState { queue, read_back, parts });
    }
    Ok(states)
}

fn named_part(input: &mut Reader<'_>, payload: &Bytes) -> Result<NamedPart, Malformed> {
    match input.bytes(1)?[0] {
        INLINE => Ok(NamedPart::Inline(inline_part(input, payload)?)),
        IN_PACK => Ok(NamedPart::InPack(PartRef::decode(input)?)),
        _ => Err(Malformed),
    }
}

fn inline_part(input: &mut Reader<'_>, payload: &Bytes) -> Result<Bytes, Malformed> {
    let bytes = usize::try_from(input.u64()?).map_err(|_| Malformed)?;
    Ok(payload.slice_ref(input.bytes(bytes)?))
}

/// Reads each state's kept parts from their packs: a state one of whose parts does not read back
/// whole is left out (its queue is read back from the log). `registry` knows each part read.
/// Returns the states read and how many were left out.
pub(crate) fn read_packs(
    states: Vec<NamedState>,
    storage: &dyn Storage,
    registry: &mut Registry,
) -> (Vec<StoredState>, u64) {
    let in_packs = states.iter().flat_map(|state| &state.parts).filter_map(|part| match part {
        NamedPart::InPack(at) => Some(*at),
        NamedPart::Inline(_) => None,
    });
    let mut kept = read_parts(storage, &in_packs.collect::<Vec<_>>()).into_iter();
    let mut read = Vec::with_capacity(states.len());
    let mut left_out = 0;
    for state in states {
        let wanted = state.parts.len();
        let mut parts = Vec::with_capacity(wanted);
        let mut known = Vec::new();
        for part in state.parts {
            match part {
                NamedPart::Inline(bytes) => parts.push(bytes),
                NamedPart::InPack(at) => {
                    if let Some(bytes) = kept.next().flatten() {
                        known.push((bytes.clone(), at));
                        parts.push(bytes);
                    }
                }
            }
        }
        if parts.len() < wanted {
            left_out += 1;
            continue;
        }
        for (bytes, at) in known {
            registry.know(bytes, at);
        }
        read.push(StoredState { queue: state.queue, read_back: state.read_back, parts });
    }
    (read, left_out)
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
    parts: Vec<Bytes>,
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
                (s.queue, Cover { parts: s.parts, read, changed: Vec::new() })
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
            states.push(RecoveredQueueState { queue, parts: cover.parts, changed });
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

    /// The checkpoint's segment: every message enqueued in an earlier one is skipped unless it
    /// is read back.
    pub(crate) fn segment(&self) -> u64 {
        segment_of(self.before)
    }

    /// The messages read back although they lie before the checkpoint (some may not be live).
    pub(crate) fn read_back(&self) -> impl Iterator<Item = u64> + '_ {
        self.read.iter().copied()
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
            parts: parts.iter().map(|p| StatePart::Inline(Bytes::from_static(p))).collect(),
        }
    }

    /// Inline parts are written in place and come back as slices of the payload; kept parts are
    /// named where the registry says they lie and read back from there; a cut payload never
    /// decodes.
    #[test]
    fn states_round_trip_with_inline_bytes_in_place_and_kept_ones_named() {
        let storage = crate::storage::MemStorage::new();
        let kept = Bytes::from(vec![3u8; 40]);
        let mut pack = NewPack::default();
        pack.add(&kept);
        let mut registry = Registry::default();
        for (part, at) in pack.write(&storage, 5).unwrap() {
            registry.know(part, at);
        }
        let mut with_kept = state(3, 2, vec![9, 4], &[b"ab"]);
        with_kept.parts.push(StatePart::Kept(kept.clone()));
        with_kept.parts.push(StatePart::Inline(Bytes::from_static(b"cd")));
        let states = vec![with_kept, state(7, 0, vec![], &[])];
        let most = 10 + states.iter().map(QueueCheckpoint::encoded_bytes).sum::<u64>();
        let mut parts = Vec::new();
        encode(states, &registry, &mut parts).unwrap();
        let payload = Bytes::from(parts.concat());
        assert!(payload.len() as u64 <= most);
        let named = decode(&mut Reader::new(&payload), &payload, false).unwrap();
        let mut known = Registry::default();
        let (decoded, left_out) = read_packs(named, &storage, &mut known);
        assert_eq!((decoded.len(), left_out), (2, 0));
        assert_eq!((decoded[0].queue, &decoded[0].read_back[..]), (3, &[9, 4][..]));
        assert_eq!(decoded[0].parts, vec![Bytes::from_static(b"ab"), kept, Bytes::from_static(b"cd")]);
        assert_eq!(known.find(&decoded[0].parts[1]), registry.find(&parts_kept(&registry)));
        assert_eq!((decoded[1].queue, decoded[1].parts.len()), (7, 0));
        for cut in 0..payload.len() {
            let short = payload.slice(..cut);
            assert!(decode(&mut Reader::new(&short), &short, false).is_err(), "cut at {cut}");
        }
    }

    /// The one part `registry` knows.
    fn parts_kept(registry: &Registry) -> Bytes {
        registry.known_bytes().next().unwrap().clone()
    }

    /// The states taken are the smallest that fit, counting a kept part only where it is new;
    /// a state left out has its new parts written ahead while the budget lasts.
    #[test]
    fn the_smallest_states_that_fit_are_taken_and_the_rest_written_ahead() {
        let big = state(1, 0, vec![], &[&[0; 100]]);
        let small = state(2, 0, vec![1, 2], &[&[0; 10]]);
        let registry = Registry::default();
        let taken = plan(vec![big.clone(), small.clone()], &registry, u64::MAX, 200);
        assert_eq!(taken.states, vec![small.clone()]);
        assert_eq!(plan(vec![big.clone(), small.clone()], &registry, 1000, 1000).states, vec![small, big]);

        let rosters: Vec<Bytes> = (0..3u8).map(|n| Bytes::from(vec![n; 100])).collect();
        let kept = QueueCheckpoint {
            parts: rosters.iter().cloned().map(StatePart::Kept).collect(),
            ..state(3, 0, vec![], &[])
        };
        let ahead = plan(vec![kept.clone()], &registry, u64::MAX, 250);
        assert!(ahead.states.is_empty());
        assert_eq!((ahead.pack.parts.len(), ahead.written), (2, 210), "two rosters written ahead");
        assert_eq!(ahead.offered, rosters);
        let mut known = Registry::default();
        let storage = crate::storage::MemStorage::new();
        for (part, at) in ahead.pack.write(&storage, 1).unwrap() {
            known.know(part, at);
        }
        let next = plan(vec![kept], &known, u64::MAX, 300);
        assert_eq!(next.states.len(), 1, "only the third roster is new");
        assert_eq!(next.pack.parts, vec![rosters[2].clone()]);
        assert!(plan(next.states, &known, 299, u64::MAX).states.is_empty(), "too large to name");
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
        let stored = StoredState { queue: 1, read_back: vec![5], parts: Vec::new() };
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
        assert_eq!(states, vec![RecoveredQueueState { queue: 1, parts: Vec::new(), changed: vec![6] }]);
    }
}
