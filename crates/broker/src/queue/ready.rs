//! Ready messages in queue order, per priority (`x-max-priority`: a level per priority, the
//! highest non-empty level delivers first; messages above the maximum count as the maximum,
//! messages without one as 0, as RabbitMQ's priority queues; a quorum queue has RabbitMQ 4.3's
//! 32 strict levels, 0 ..= 31, and places a message without a priority at 4).
//!
//! Within a level, kept sorted by sequence number so a requeued message returns to its original place, as
//! RabbitMQ's classic queues do. Messages removed from the middle (expired by TTL) leave a
//! tombstone, found by binary search in O(log n) and skipped at the head; tombstones are swept
//! once they outnumber live entries, so removal stays amortised O(log n) wherever a message sits.

use std::collections::VecDeque;

use super::entry::{Entry, Paged, Payload, Seq};
use super::tally::Tally;
use crate::broker::release_burst_capacity;
use crate::message::Message;

/// Sweep tombstones only past this many, so small queues never pay for a sweep.
const MIN_TOMBSTONES_TO_SWEEP: usize = 1024;

/// The ready messages of a queue: one level without `x-max-priority`, else one per priority.
#[derive(Debug)]
pub(crate) struct Ready {
    levels: Vec<Level>,
    /// The level of a message without a priority.
    default_level: usize,
    /// No level above this one holds a message: where the search for the next one starts.
    top: usize,
    /// Every ready message, its body bytes and the persistent ones.
    all: Tally,
    /// Of those, the ones held in memory, whole or packed.
    places: Places,
}

impl Default for Ready {
    fn default() -> Self {
        Ready::with_max_priority(0, 0)
    }
}

impl Ready {
    /// Ready messages with priorities 0 ..= `max_priority`, a message without one at
    /// `default_priority`.
    pub fn with_max_priority(max_priority: u8, default_priority: u8) -> Self {
        let levels = (0..=max_priority).map(|_| Level::default()).collect();
        let default_level = usize::from(default_priority.min(max_priority));
        Ready { levels, default_level, top: 0, all: Tally::default(), places: Places::default() }
    }

    /// Appends a newly published message (its seq is greater than any queued one).
    pub fn push_back(&mut self, entry: Entry) {
        self.count_in(&entry);
        let level = self.level_of(&entry);
        self.top = self.top.max(level);
        self.levels[level].push_back(entry);
    }

    /// Puts a message back at its original position in its level.
    pub fn requeue(&mut self, entry: Entry) {
        self.count_in(&entry);
        let level = self.level_of(&entry);
        self.top = self.top.max(level);
        self.levels[level].requeue(entry);
    }

    /// The next message: the oldest of the highest non-empty priority.
    pub fn pop_front(&mut self) -> Option<Entry> {
        let (level, entry) = self.levels[..=self.top]
            .iter_mut()
            .enumerate()
            .rev()
            .find_map(|(at, l)| Some((at, l.pop_front()?)))?;
        self.top = level;
        self.count_out(&entry);
        Some(entry)
    }

    /// How many ready messages each priority holds, highest first, empty levels left out (the
    /// management API's `messages_by_priority`).
    pub fn counts_by_priority(&self) -> Vec<(u8, usize)> {
        let levels = self.levels.iter().enumerate().rev();
        levels.filter(|(_, l)| l.live > 0).map(|(at, l)| (at as u8, l.live)).collect()
    }

    /// Removes the message with this seq, wherever it is.
    pub fn remove(&mut self, seq: Seq) -> Option<Entry> {
        let entry = self.levels.iter_mut().find_map(|level| level.remove(seq))?;
        self.count_out(&entry);
        Some(entry)
    }

    /// Removes every ready message; returns how many there were and appends the store ids of the
    /// persisted ones to `settled`.
    pub fn purge(&mut self, settled: &mut Vec<u64>) -> usize {
        for level in &mut self.levels {
            level.purge(settled);
        }
        let count = self.all.messages;
        self.all = Tally::default();
        self.places = Places::default();
        count
    }

    /// Whether the next message is packed or paged out.
    pub fn head_is_not_resident(&self) -> bool {
        let head = self.levels.iter().rev().find_map(|level| level.slots.iter().find_map(Slot::entry));
        head.is_some_and(|entry| entry.resident().is_none())
    }

    /// Makes up to `max` messages at the head of the highest non-empty level resident, in order,
    /// with `make_resident`; a message it cannot give stays as it was (and is dropped when it is
    /// taken).
    pub fn page_in_head(&mut self, max: usize, mut make_resident: impl FnMut(&mut Payload) -> bool) {
        let Some(level) = self.levels.iter_mut().rev().find(|level| level.live > 0) else { return };
        let mut seen = 0;
        for slot in level.slots.iter_mut() {
            let Slot::Live(entry) = slot else { continue };
            if seen == max {
                break;
            }
            seen += 1;
            if entry.resident().is_some() {
                continue;
            }
            let (size, was_packed) = (entry.body_size(), matches!(entry.payload, Payload::Packed(_)));
            if make_resident(&mut entry.payload) {
                if was_packed {
                    self.places.packed -= Place::one(size);
                }
                self.places.resident += Place::one(size);
            }
        }
    }

    pub fn message_count(&self) -> usize {
        self.all.messages
    }

    /// Every ready message, its body bytes and the persistent ones among them.
    pub fn tally(&self) -> Tally {
        self.all
    }

    /// Ready messages held in memory whole and their body bytes (what the paging limits count).
    pub fn resident(&self) -> (usize, usize) {
        (self.places.resident.messages, self.places.resident.bytes)
    }

    /// Ready messages held in memory, whole or packed, and their body bytes.
    pub fn in_memory(&self) -> (usize, usize) {
        let Places { resident, packed, .. } = self.places;
        (resident.messages + packed.messages, resident.bytes + packed.bytes)
    }

    /// Replaces the message of ready entry `seq` (if it is still `persist_id`'s and in memory)
    /// with what `page_out` makes of it; returns whether it did.
    pub fn page_out(
        &mut self,
        seq: Seq,
        persist_id: u64,
        page_out: impl FnOnce(&Message) -> Option<Paged>,
    ) -> bool {
        let Some(entry) = self.levels.iter_mut().find_map(|level| level.get_mut(seq)) else { return false };
        if entry.persist_id() != Some(persist_id) {
            return false;
        }
        let Some(paged) = entry.resident().and_then(|message| page_out(message)) else { return false };
        entry.payload = Payload::Paged(paged);
        self.places.resident -= Place::one(entry.body_size());
        true
    }

    pub fn body_bytes(&self) -> usize {
        self.all.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.all.messages == 0
    }

    fn level_of(&self, entry: &Entry) -> usize {
        match entry.payload.hot().given_priority() {
            Some(priority) => usize::from(priority).min(self.levels.len() - 1),
            None => self.default_level,
        }
    }

    fn count_in(&mut self, entry: &Entry) {
        self.all.add(entry);
        if let Some(place) = self.places.of(&entry.payload) {
            *place += Place::one(entry.body_size());
        }
    }

    fn count_out(&mut self, entry: &Entry) {
        self.all.remove(entry);
        if let Some(place) = self.places.of(&entry.payload) {
            *place -= Place::one(entry.body_size());
        }
    }
}

/// Ready messages held in memory, by how; the rest of `Ready::all` are paged out (ADR 0007).
#[derive(Clone, Copy, Debug, Default)]
struct Places {
    /// In memory whole.
    resident: Place,
    /// In memory packed (ADR 0015).
    packed: Place,
}

impl Places {
    /// The count a message with this payload is in; none for a paged-out one.
    fn of(&mut self, payload: &Payload) -> Option<&mut Place> {
        match payload {
            Payload::Resident(_) => Some(&mut self.resident),
            Payload::Packed(_) => Some(&mut self.packed),
            Payload::Paged(_) => None,
        }
    }
}

/// A count of messages and their body bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    messages: usize,
    bytes: usize,
}

impl Place {
    fn one(bytes: usize) -> Place {
        Place { messages: 1, bytes }
    }
}

impl std::ops::AddAssign for Place {
    fn add_assign(&mut self, other: Place) {
        self.messages += other.messages;
        self.bytes += other.bytes;
    }
}

impl std::ops::SubAssign for Place {
    fn sub_assign(&mut self, other: Place) {
        self.messages -= other.messages;
        self.bytes -= other.bytes;
    }
}

/// One priority's messages in queue order.
#[derive(Debug, Default)]
struct Level {
    slots: VecDeque<Slot>,
    live: usize,
    body_bytes: usize,
}

/// A queued message, or the tombstone of one removed from the middle. One word smaller than
/// `(Seq, Option<Entry>)`: the tombstone's seq fits beside `Entry`'s niche (size checked below).
#[derive(Debug)]
enum Slot {
    Live(Entry),
    Removed(Seq),
}

impl Slot {
    fn seq(&self) -> Seq {
        match self {
            Slot::Live(entry) => entry.seq,
            Slot::Removed(seq) => *seq,
        }
    }

    fn entry(&self) -> Option<&Entry> {
        match self {
            Slot::Live(entry) => Some(entry),
            Slot::Removed(_) => None,
        }
    }
}

impl Level {
    /// Appends a newly published message (its seq is greater than any queued one).
    fn push_back(&mut self, entry: Entry) {
        debug_assert!(self.slots.back().is_none_or(|last| last.seq() < entry.seq));
        self.add_counts(&entry);
        self.slots.push_back(Slot::Live(entry));
    }

    /// Puts a message back at its original position. Requeues land near the head (messages are
    /// delivered from the head), where `VecDeque::insert` shifts only the short side.
    fn requeue(&mut self, entry: Entry) {
        self.add_counts(&entry);
        let at = self.slots.partition_point(|s| s.seq() < entry.seq);
        self.slots.insert(at, Slot::Live(entry));
    }

    fn pop_front(&mut self) -> Option<Entry> {
        while let Some(slot) = self.slots.pop_front() {
            if let Slot::Live(entry) = slot {
                self.remove_counts(&entry);
                // A drained queue gives back what its backlog grew it to.
                release_burst_capacity(&mut self.slots);
                return Some(entry);
            }
        }
        None
    }

    fn get_mut(&mut self, seq: Seq) -> Option<&mut Entry> {
        let at = self.slots.partition_point(|s| s.seq() < seq);
        match self.slots.get_mut(at) {
            Some(Slot::Live(entry)) if entry.seq == seq => Some(entry),
            _ => None,
        }
    }

    /// Removes the message with this seq, wherever it is.
    fn remove(&mut self, seq: Seq) -> Option<Entry> {
        let at = self.slots.partition_point(|s| s.seq() < seq);
        let slot = self.slots.get_mut(at).filter(|s| s.seq() == seq)?;
        // A tombstone stays a tombstone: removing twice finds nothing.
        let Slot::Live(entry) = std::mem::replace(slot, Slot::Removed(seq)) else { return None };
        self.remove_counts(&entry);
        self.sweep_if_sparse();
        Some(entry)
    }

    /// Removes every ready message; returns how many there were and appends the store ids of the
    /// persisted ones to `settled`.
    fn purge(&mut self, settled: &mut Vec<u64>) -> usize {
        let count = self.live;
        settled.extend(self.slots.iter().filter_map(|s| s.entry().and_then(Entry::persist_id)));
        self.slots.clear();
        self.live = 0;
        self.body_bytes = 0;
        count
    }

    fn add_counts(&mut self, entry: &Entry) {
        self.live += 1;
        self.body_bytes += entry.body_size();
    }

    fn remove_counts(&mut self, entry: &Entry) {
        self.live -= 1;
        self.body_bytes -= entry.body_size();
    }

    fn sweep_if_sparse(&mut self) {
        let tombstones = self.slots.len() - self.live;
        if tombstones > MIN_TOMBSTONES_TO_SWEEP && tombstones > self.live {
            self.slots.retain(|s| matches!(s, Slot::Live(_)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use std::sync::Arc;

    fn entry(seq: Seq) -> Entry {
        let message =
            Message::new(Default::default(), Default::default(), Default::default(), vec![0u8; 3].into());
        Entry::new(seq, Arc::new(message), None, None, None)
    }

    fn drain(ready: &mut Ready) -> Vec<Seq> {
        std::iter::from_fn(|| ready.pop_front()).map(|e| e.seq).collect()
    }

    fn with_priority(seq: Seq, priority: Option<u8>) -> Entry {
        let properties = hourglass_wire::BasicProperties { priority, ..Default::default() };
        let message =
            Message::new(Default::default(), Default::default(), properties.into(), vec![0u8; 3].into());
        Entry::new(seq, Arc::new(message), None, None, None)
    }

    /// Quorum levels (issue 39): strict order by priority, above 31 counted as 31, none at the
    /// default level; the highest-level hint follows pushes, requeues, removals and pops.
    #[test]
    fn levels_deliver_highest_first_and_unprioritised_at_the_default() {
        let mut ready = Ready::with_max_priority(31, 4);
        for (seq, priority) in
            [(1, Some(1)), (2, Some(9)), (3, Some(3)), (4, Some(31)), (5, Some(0)), (6, None), (7, Some(200))]
        {
            ready.push_back(with_priority(seq, priority));
        }
        assert_eq!(ready.counts_by_priority(), vec![(31, 2), (9, 1), (4, 1), (3, 1), (1, 1), (0, 1)]);
        assert_eq!(ready.pop_front().map(|e| e.seq), Some(4));
        assert!(ready.remove(7).is_some(), "the other 31 leaves from the middle");
        assert_eq!(ready.pop_front().map(|e| e.seq), Some(2));
        ready.requeue(with_priority(4, Some(31)));
        assert_eq!(drain(&mut ready), vec![4, 6, 3, 1, 5], "the requeued 31 first, then 4 (none), 3, 1, 0");
        ready.push_back(with_priority(8, Some(2)));
        assert_eq!(drain(&mut ready), vec![8]);
        let mut classic = Ready::with_max_priority(0, 0);
        for (seq, priority) in [(1, Some(9)), (2, None), (3, Some(1))] {
            classic.push_back(with_priority(seq, priority));
        }
        assert_eq!(drain(&mut classic), vec![1, 2, 3], "one level: FIFO");
    }

    /// A queue drained after a backlog gives back its slots (beyond what an idle queue keeps):
    /// idle memory after a load returns to where it was (issue 24: 200,000 expired messages left
    /// ~20 MB behind in the broker's queues before).
    #[test]
    fn a_drained_queue_gives_back_its_backlog_slots() {
        let mut ready = Ready::default();
        for seq in 0..50_000 {
            ready.push_back(entry(seq));
        }
        assert!(ready.levels.iter().map(|l| l.slots.capacity()).sum::<usize>() >= 50_000);
        assert_eq!(drain(&mut ready).len(), 50_000);
        let kept: usize = ready.levels.iter().map(|l| l.slots.capacity()).sum();
        assert!(kept <= 1024, "{kept} slots kept");
    }

    /// A queued message costs one slot: 48 bytes (an `Entry`), so a regression fails here first.
    #[test]
    fn slot_is_no_bigger_than_an_entry() {
        assert_eq!(std::mem::size_of::<Slot>(), std::mem::size_of::<Entry>());
    }

    /// A requeued message goes back to its original place among the ready ones.
    #[test]
    fn requeued_message_returns_to_its_place() {
        let mut ready = Ready::default();
        for seq in [1, 3, 5] {
            ready.push_back(entry(seq));
        }
        ready.requeue(entry(4));
        ready.requeue(entry(0));
        assert_eq!(drain(&mut ready), vec![0, 1, 3, 4, 5]);
    }

    /// Body bytes and counts follow pushes, requeues, removals, pops and purges.
    #[test]
    fn counts_are_tracked() {
        let mut ready = Ready::default();
        ready.push_back(entry(1));
        ready.push_back(entry(2));
        ready.requeue(entry(0));
        assert_eq!((ready.message_count(), ready.body_bytes()), (3, 9));
        assert!(ready.remove(1).is_some());
        assert!(ready.remove(1).is_none(), "a removed message is gone");
        ready.pop_front();
        assert_eq!((ready.message_count(), ready.body_bytes()), (1, 3));
        assert_eq!(ready.purge(&mut Vec::new()), 1);
        assert_eq!(ready.body_bytes(), 0);
    }

    /// Removing from the middle keeps order and never yields the removed message; mass removal
    /// sweeps tombstones without losing live entries.
    #[test]
    fn removal_anywhere_keeps_order() {
        let mut ready = Ready::default();
        for seq in 0..5000 {
            ready.push_back(entry(seq));
        }
        for seq in (0..5000).filter(|s| s % 3 != 0) {
            assert!(ready.remove(seq).is_some());
        }
        assert_eq!(ready.message_count(), 1667);
        let order = drain(&mut ready);
        assert_eq!(order, (0..5000).filter(|s| s % 3 == 0).collect::<Vec<_>>());
    }
}
