//! Ready messages in queue order, per priority (`x-max-priority`: a level per priority, the
//! highest non-empty level delivers first; messages above the maximum count as the maximum,
//! messages without one as 0, as RabbitMQ's priority queues; a quorum queue has RabbitMQ 4.3's
//! 32 strict levels, 0 ..= 31, and places a message without a priority at 4).
//!
//! Within a level, kept sorted by sequence number so a requeued message returns to its original place, as
//! RabbitMQ's classic queues do. Messages removed from the middle (expired by TTL) leave a
//! tombstone, found by binary search in O(log n) and skipped at the head; tombstones are swept
//! once they outnumber live entries, so removal stays amortised O(log n) wherever a message sits.
//!
//! Paged-out messages in a row that differ only by fixed steps share one slot, a run
//! (`ready_run.rs`): appended to as they arrive paged (a restore, a paged delayed message coming
//! due), and joined from single slots when enough were paged out in place. A run is opened up
//! again where its messages are read back (at the head, or where a queue's message groups chose
//! one: `page_in_from`), and split where a message goes back into the middle of it or leaves
//! from there.

mod checkpoint;

use std::collections::VecDeque;

use super::entry::{Entry, Paged, Payload, Seq};
use super::ready_run::Run;
use super::tally::Tally;
use super::ttl::DeadlineIndex;
use crate::broker::release_burst_capacity;
use crate::message::Message;
use crate::persist::RecordLocation;
use crate::time::Timestamp;

/// Sweep tombstones only past this many, so small queues never pay for a sweep.
const MIN_TOMBSTONES_TO_SWEEP: usize = 1024;
/// A level's messages paged out in place are joined into runs once there are this many, or as
/// many as half its slots (so a compaction's cost is spread over the page-outs before it).
const COMPACT_AFTER_PAGE_OUTS: usize = 1024;

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
    /// Their TTL deadlines (semantics §1): a key per slot, kept in step with the slots here.
    deadlines: DeadlineIndex,
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
        let (all, places, deadlines) = (Tally::default(), Places::default(), DeadlineIndex::default());
        Ready { levels, default_level, top: 0, all, places, deadlines }
    }

    /// Appends a newly published message (its seq is greater than any queued one).
    pub fn push_back(&mut self, entry: Entry) {
        self.count_in(&entry);
        let level = self.level_of(&entry);
        self.top = self.top.max(level);
        self.levels[level].push_back(entry, &mut self.deadlines);
    }

    /// Puts a message back at its original position in its level.
    pub fn requeue(&mut self, entry: Entry) {
        self.count_in(&entry);
        let level = self.level_of(&entry);
        self.top = self.top.max(level);
        self.levels[level].requeue(entry, &mut self.deadlines);
    }

    /// The next message: the oldest of the highest non-empty priority.
    pub fn pop_front(&mut self) -> Option<Entry> {
        let (level, entry) = self.levels[..=self.top]
            .iter_mut()
            .enumerate()
            .rev()
            .find_map(|(at, l)| Some((at, l.pop_front(&mut self.deadlines)?)))?;
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

    /// Whether the message with this seq is among the ready ones.
    pub fn contains(&self, seq: Seq) -> bool {
        self.levels.iter().any(|level| level.find(seq).is_some())
    }

    /// Removes the message with this seq, wherever it is.
    pub fn remove(&mut self, seq: Seq) -> Option<Entry> {
        let entry = self.levels.iter_mut().find_map(|level| level.remove(seq, &mut self.deadlines))?;
        self.count_out(&entry);
        Some(entry)
    }

    /// Removes the messages whose deadline is at or before `now`, earliest first, into `out`.
    pub fn take_expired(&mut self, now: Timestamp, out: &mut Vec<Entry>) {
        while let Some(seq) = self.deadlines.pop_due(now) {
            out.extend(self.remove(seq));
        }
    }

    /// Gives every ready message the deadline `deadline_of(its expiration, when it became
    /// ready)` says: a queue's changed TTL applied to the messages already in it (SQS's
    /// `MessageRetentionPeriod`, which applies to every message). Keeps the TTL index in step.
    pub fn apply_ttl(&mut self, deadline_of: impl Fn(Option<u64>, Timestamp) -> Option<Timestamp>) {
        let Ready { levels, deadlines, .. } = self;
        for level in levels.iter_mut() {
            for at in 0..level.slots.len() {
                let (had, has) = level.change(at, deadlines, |slot| {
                    let members = match slot {
                        Slot::Run(run) => run.len(),
                        _ => 1,
                    };
                    let Some(head) = slot.head() else { return (0, 0) };
                    let (had, ready) = (head.expires_at().is_some(), head.ready_at());
                    let deadline = ready.and_then(|at| deadline_of(head.payload.hot().expiration_ms(), at));
                    match slot {
                        Slot::Live(entry) => entry.set_expires_at(deadline),
                        // The members share their properties: one TTL for all.
                        Slot::Run(run) => run.set_ttl(
                            deadline
                                .zip(ready)
                                .map(|(due, at)| due.as_millis().saturating_sub(at.as_millis())),
                        ),
                        Slot::Removed(_) => {}
                    }
                    (usize::from(had) * members, usize::from(deadline.is_some()) * members)
                });
                deadlines.recount(has, had);
            }
        }
    }

    /// The ready messages' TTL deadlines: how many have one, the next and the last.
    pub fn deadlines(&self) -> &DeadlineIndex {
        &self.deadlines
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
        self.deadlines.clear();
        count
    }

    /// The next message.
    pub fn head(&self) -> Option<&Entry> {
        self.levels.iter().rev().find_map(|level| level.slots.iter().find_map(Slot::head))
    }

    /// Makes up to `max` messages resident, in order, with `make_resident`, from message `from`
    /// on in its level (a queue's message groups take messages from anywhere in it:
    /// `message_groups.rs`), or from the head of the highest non-empty level (`None`); from
    /// the first message after it in the highest non-empty level when it is no longer ready. A
    /// message it cannot give stays as it was (and is dropped when it is taken).
    pub fn page_in_from(
        &mut self,
        from: Option<Seq>,
        max: usize,
        mut make_resident: impl FnMut(&mut Payload) -> bool,
    ) {
        let holding = from.and_then(|seq| self.levels.iter().rposition(|level| level.find(seq).is_some()));
        let Some(at) = holding.or_else(|| self.levels.iter().rposition(|level| level.live > 0)) else {
            return;
        };
        let level = &mut self.levels[at];
        let start = from.map_or(0, |seq| level.split_at_seq(seq, &mut self.deadlines));
        level.open_runs_from(start, max, &mut self.deadlines);
        let mut seen = 0;
        for slot in level.slots.range_mut(start..) {
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

    /// Where ready message `seq`'s record is when it is paged out; `None` when it is in memory
    /// (whole or packed) or not ready.
    pub fn paged_location(&self, seq: Seq) -> Option<RecordLocation> {
        self.levels.iter().find_map(|level| match level.find(seq)? {
            (at, None) => level.slots[at].head()?.paged_at(),
            (at, Some(place)) => match &level.slots[at] {
                Slot::Run(run) => run.member(place).paged_at(),
                _ => None,
            },
        })
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
        let Some(level) =
            self.levels.iter_mut().find(|level| level.find(seq).is_some_and(|(_, run)| run.is_none()))
        else {
            return false;
        };
        let Some(size) = level.page_out(seq, persist_id, page_out, &mut self.deadlines) else { return false };
        self.places.resident -= Place::one(size);
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
        if entry.expires_at().is_some() {
            self.deadlines.count(true);
        }
        if let Some(place) = self.places.of(&entry.payload) {
            *place += Place::one(entry.body_size());
        }
    }

    fn count_out(&mut self, entry: &Entry) {
        self.all.remove(entry);
        if entry.expires_at().is_some() {
            self.deadlines.count(false);
        }
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
    /// `Slot::Removed` among `slots`.
    holes: usize,
    /// Messages paged out in place since the slots were last compacted into runs.
    paged_out: usize,
}

/// A queued message, the tombstone of one removed from the middle, or a run of paged-out
/// messages. One word smaller than `(Seq, Option<Entry>)`: the tombstone's seq and the run's box
/// fit beside `Entry`'s niche (size checked below).
#[derive(Debug)]
enum Slot {
    Live(Entry),
    Removed(Seq),
    Run(Box<Run>),
}

impl Slot {
    /// The first seq the slot holds.
    fn seq(&self) -> Seq {
        match self {
            Slot::Live(entry) => entry.seq,
            Slot::Removed(seq) => *seq,
            Slot::Run(run) => run.first_seq(),
        }
    }

    fn last_seq(&self) -> Seq {
        match self {
            Slot::Run(run) => run.last_seq(),
            other => other.seq(),
        }
    }

    /// The first message the slot holds.
    fn head(&self) -> Option<&Entry> {
        match self {
            Slot::Live(entry) => Some(entry),
            Slot::Removed(_) => None,
            Slot::Run(run) => Some(run.head()),
        }
    }

    /// Adds `entry`, the next message after this slot's, to it if they make a run.
    fn join(&mut self, entry: Entry) -> Result<(), Entry> {
        match self {
            Slot::Run(run) => run.try_push(entry),
            Slot::Live(last) => match Run::pair(last, &entry) {
                Some(run) => {
                    *self = Slot::Run(Box::new(run));
                    Ok(())
                }
                None => Err(entry),
            },
            Slot::Removed(_) => Err(entry),
        }
    }

    /// Gives the slot its keys in the TTL index: its message's deadline, or its run's first
    /// deadline and last one (the members between expire in order after the first).
    fn file(&self, deadlines: &mut DeadlineIndex) {
        self.keys(deadlines, true);
    }

    /// Takes the slot's keys out of the TTL index (before it changes or goes).
    fn unfile(&self, deadlines: &mut DeadlineIndex) {
        self.keys(deadlines, false);
    }

    fn keys(&self, deadlines: &mut DeadlineIndex, file: bool) {
        let (head, end) = match self {
            Slot::Live(entry) => (entry, None),
            Slot::Run(run) => (run.head(), run.last_deadline()),
            Slot::Removed(_) => return,
        };
        entry_key(head, deadlines, file);
        if let Some(end) = end {
            deadlines.run_end(end, file);
        }
    }

    /// A run left with one message becomes that message's own slot.
    fn open_if_single(&mut self) {
        if let Slot::Run(run) = self {
            if run.len() == 1 {
                *self = Slot::Live(run.head().clone());
            }
        }
    }

    fn of_split(split: Result<Run, Entry>) -> Slot {
        match split {
            Ok(run) => Slot::Run(Box::new(run)),
            Err(entry) => Slot::Live(entry),
        }
    }
}

/// Files (`true`) or unfiles `entry`'s deadline, if it has one.
fn entry_key(entry: &Entry, deadlines: &mut DeadlineIndex, file: bool) {
    if let Some(at) = entry.expires_at() {
        if file {
            deadlines.insert(at, entry.seq);
        } else {
            deadlines.remove(at, entry.seq);
        }
    }
}

fn unfile_entry(entry: &Entry, deadlines: &mut DeadlineIndex) {
    entry_key(entry, deadlines, false);
}

/// Appends `entry` (after every seq in `slots`), joining the last slot's run when it can, and
/// files what changed in the TTL index.
fn append(slots: &mut VecDeque<Slot>, entry: Entry, deadlines: &mut DeadlineIndex) {
    let entry = match slots.back_mut() {
        Some(Slot::Run(run)) => {
            // Only the run's last deadline moves.
            let end = run.last_deadline();
            match run.try_push(entry) {
                Ok(()) => {
                    if let Some(end) = end {
                        deadlines.run_end(end, false);
                    }
                    if let Some(end) = run.last_deadline() {
                        deadlines.run_end(end, true);
                    }
                    return;
                }
                Err(entry) => entry,
            }
        }
        Some(last @ Slot::Live(_)) if last.head().is_some_and(|e| Run::pair(e, &entry).is_some()) => {
            last.unfile(deadlines);
            let joined = last.join(entry);
            last.file(deadlines);
            match joined {
                Ok(()) => return,
                Err(entry) => entry,
            }
        }
        _ => entry,
    };
    let slot = Slot::Live(entry);
    slot.file(deadlines);
    slots.push_back(slot);
}

impl Level {
    /// Appends a newly published message (its seq is greater than any queued one).
    fn push_back(&mut self, entry: Entry, deadlines: &mut DeadlineIndex) {
        debug_assert!(self.slots.back().is_none_or(|last| last.last_seq() < entry.seq));
        self.add_counts(&entry);
        append(&mut self.slots, entry, deadlines);
    }

    /// Puts a message back at its original position. Requeues land near the head (messages are
    /// delivered from the head), where `VecDeque::insert` shifts only the short side; a message
    /// whose place is inside a run splits it there.
    fn requeue(&mut self, entry: Entry, deadlines: &mut DeadlineIndex) {
        self.add_counts(&entry);
        debug_assert!(
            self.find(entry.seq).is_none_or(|(_, place)| place.is_none()),
            "a queued message requeued"
        );
        let at = self.split_at_seq(entry.seq, deadlines);
        if at == self.slots.len() {
            append(&mut self.slots, entry, deadlines);
        } else {
            self.insert(at, Slot::Live(entry), deadlines);
        }
    }

    /// The index of the first slot holding `seq` or a later message, after splitting the run
    /// that holds messages on both sides of `seq` there (members from `seq` on in the second).
    fn split_at_seq(&mut self, seq: Seq, deadlines: &mut DeadlineIndex) -> usize {
        let at = self.slots.partition_point(|s| s.last_seq() < seq);
        let Some(Slot::Run(run)) = self.slots.get(at) else { return at };
        if run.first_seq() >= seq {
            return at;
        }
        let keep = run.count_before(seq);
        let tail = self.change(at, deadlines, |slot| match slot {
            Slot::Run(run) => run.split_off(keep),
            _ => unreachable!("slot {at} is a run"),
        });
        self.insert(at + 1, Slot::of_split(tail), deadlines);
        at + 1
    }

    /// Inserts `slot` at `at`, filed.
    fn insert(&mut self, at: usize, slot: Slot, deadlines: &mut DeadlineIndex) {
        slot.file(deadlines);
        self.slots.insert(at, slot);
    }

    /// Changes slot `at` with `change`, keeping its TTL keys in step (a run left with one
    /// message becomes that message's slot).
    fn change<R>(
        &mut self,
        at: usize,
        deadlines: &mut DeadlineIndex,
        change: impl FnOnce(&mut Slot) -> R,
    ) -> R {
        let slot = &mut self.slots[at];
        slot.unfile(deadlines);
        let result = change(slot);
        slot.open_if_single();
        slot.file(deadlines);
        result
    }

    fn pop_front(&mut self, deadlines: &mut DeadlineIndex) -> Option<Entry> {
        loop {
            let entry = match self.slots.front()? {
                Slot::Removed(_) => {
                    self.slots.pop_front();
                    self.holes -= 1;
                    continue;
                }
                Slot::Run(_) => self.change(0, deadlines, |slot| match slot {
                    Slot::Run(run) => run.take_head(),
                    _ => unreachable!("the front slot is a run"),
                }),
                Slot::Live(entry) => {
                    unfile_entry(entry, deadlines);
                    match self.slots.pop_front() {
                        Some(Slot::Live(entry)) => entry,
                        _ => unreachable!("the front slot is live"),
                    }
                }
            };
            self.remove_counts(&entry);
            // A drained queue gives back what its backlog grew it to.
            release_burst_capacity(&mut self.slots);
            return Some(entry);
        }
    }

    /// Where `seq` is: its slot, and its place in the slot's run if it is in one. (A message
    /// requeued after its removal sits just before its own tombstone.)
    fn find(&self, seq: Seq) -> Option<(usize, Option<usize>)> {
        let at = self.slots.partition_point(|s| s.seq() < seq);
        match self.slots.get(at) {
            Some(Slot::Live(entry)) if entry.seq == seq => return Some((at, None)),
            Some(Slot::Run(run)) if run.first_seq() == seq => return Some((at, Some(0))),
            _ => {}
        }
        let before = at.checked_sub(1)?;
        match &self.slots[before] {
            Slot::Run(run) => Some((before, Some(run.position(seq)?))),
            _ => None,
        }
    }

    /// The message with this seq when it has a slot of its own.
    fn get_mut(&mut self, seq: Seq) -> Option<&mut Entry> {
        match self.find(seq)? {
            (at, None) => match &mut self.slots[at] {
                Slot::Live(entry) => Some(entry),
                _ => None,
            },
            (_, Some(_)) => None,
        }
    }

    /// Replaces message `seq`'s body (if it is still `persist_id`'s and in memory) with what
    /// `page_out` makes of it; returns its body size if it did. Joins the level's paged-out
    /// messages into runs now and then.
    fn page_out(
        &mut self,
        seq: Seq,
        persist_id: u64,
        page_out: impl FnOnce(&Message) -> Option<Paged>,
        deadlines: &mut DeadlineIndex,
    ) -> Option<usize> {
        let entry = self.get_mut(seq)?;
        if entry.persist_id() != Some(persist_id) {
            return None;
        }
        let paged = entry.resident().and_then(|message| page_out(message))?;
        entry.payload = Payload::Paged(paged);
        let size = entry.body_size();
        self.paged_out += 1;
        if self.paged_out >= COMPACT_AFTER_PAGE_OUTS.max(self.slots.len() / 2) {
            self.compact(deadlines);
        }
        Some(size)
    }

    /// Removes the message with this seq, wherever it is.
    fn remove(&mut self, seq: Seq, deadlines: &mut DeadlineIndex) -> Option<Entry> {
        let entry = match self.find(seq)? {
            (at, None) => {
                // A tombstone stays a tombstone: removing twice finds nothing.
                self.slots[at].unfile(deadlines);
                let Slot::Live(entry) = std::mem::replace(&mut self.slots[at], Slot::Removed(seq)) else {
                    return None;
                };
                self.holes += 1;
                entry
            }
            (at, Some(place)) => self.take_from_run(at, place, deadlines),
        };
        self.remove_counts(&entry);
        self.sweep_if_sparse(deadlines);
        Some(entry)
    }

    /// Takes member `place` out of the run in slot `at`, splitting the run around it.
    fn take_from_run(&mut self, at: usize, place: usize, deadlines: &mut DeadlineIndex) -> Entry {
        let (entry, tail) = self.change(at, deadlines, |slot| {
            let Slot::Run(run) = slot else { unreachable!("slot {at} is a run") };
            if place == 0 {
                return (run.take_head(), None);
            }
            let entry = run.member(place);
            let tail = (place + 1 < run.len()).then(|| run.split_off(place + 1));
            run.truncate(place);
            (entry, tail)
        });
        if let Some(tail) = tail {
            self.insert(at + 1, Slot::of_split(tail), deadlines);
        }
        entry
    }

    /// Gives the first `max` messages from slot `start` on slots of their own, taking them out
    /// of runs, so that they can be read back into memory.
    fn open_runs_from(&mut self, start: usize, max: usize, deadlines: &mut DeadlineIndex) {
        let (mut at, mut seen) = (start, 0);
        while seen < max && at < self.slots.len() {
            match &self.slots[at] {
                Slot::Removed(_) => at += 1,
                Slot::Live(_) => {
                    seen += 1;
                    at += 1;
                }
                Slot::Run(_) => {
                    let opened = self.change(at, deadlines, |slot| {
                        let Slot::Run(run) = slot else { unreachable!("slot {at} is a run") };
                        let mut opened = Vec::new();
                        while seen + opened.len() < max && run.len() > 1 {
                            opened.push(run.take_head());
                        }
                        opened
                    });
                    seen += opened.len();
                    let count = opened.len();
                    self.insert_live(at, opened, deadlines);
                    at += count;
                }
            }
        }
    }

    /// Inserts `entries` (in order) as slots of their own before slot `at`, filed, moving the
    /// slots on the shorter side of `at` aside.
    fn insert_live(&mut self, at: usize, entries: Vec<Entry>, deadlines: &mut DeadlineIndex) {
        let slots = entries.into_iter().map(|entry| {
            let slot = Slot::Live(entry);
            slot.file(deadlines);
            slot
        });
        if at <= self.slots.len() / 2 {
            let before: Vec<Slot> = self.slots.drain(..at).collect();
            let front: Vec<Slot> = before.into_iter().chain(slots).collect();
            for slot in front.into_iter().rev() {
                self.slots.push_front(slot);
            }
        } else {
            let mut after = self.slots.split_off(at);
            self.slots.extend(slots);
            self.slots.append(&mut after);
        }
    }

    /// Drops tombstones and joins paged-out messages in a row into runs.
    fn compact(&mut self, deadlines: &mut DeadlineIndex) {
        let old = std::mem::take(&mut self.slots);
        let mut slots = VecDeque::with_capacity(old.len() - self.holes);
        for slot in old {
            match slot {
                Slot::Removed(_) => {}
                Slot::Live(entry) => {
                    unfile_entry(&entry, deadlines);
                    append(&mut slots, entry, deadlines);
                }
                run @ Slot::Run(_) => slots.push_back(run),
            }
        }
        self.slots = slots;
        self.holes = 0;
        self.paged_out = 0;
    }

    /// Removes every ready message; returns how many there were and appends the store ids of the
    /// persisted ones to `settled`.
    fn purge(&mut self, settled: &mut Vec<u64>) -> usize {
        let count = self.live;
        for slot in &self.slots {
            match slot {
                Slot::Live(entry) => settled.extend(entry.persist_id()),
                Slot::Run(run) => settled.extend(run.persist_ids()),
                Slot::Removed(_) => {}
            }
        }
        self.slots.clear();
        self.live = 0;
        self.body_bytes = 0;
        self.holes = 0;
        self.paged_out = 0;
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

    fn sweep_if_sparse(&mut self, deadlines: &mut DeadlineIndex) {
        if self.holes > MIN_TOMBSTONES_TO_SWEEP && self.holes * 2 > self.slots.len() {
            self.compact(deadlines);
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

    /// A paged-out message of the tests' store: its record at `seq × 90` of segment 1, ready
    /// since `1000 + seq`, its store id `seq + 7`.
    fn paged(seq: Seq, body_size: usize) -> Entry {
        use crate::persist::RecordLocation;
        let location = RecordLocation { segment: 1, offset: seq as u32 * 90, record_bytes: 90 };
        let paged = Paged::new(location, paged_message().hot(), body_size).unwrap();
        let ready = crate::time::Timestamp::from_millis(1000 + seq);
        Entry::with_payload(seq, Payload::Paged(paged), Some(ready), None, Some(seq + 7))
    }

    /// What a test compares of an entry: seq, store id, ready time, delivery state and where its
    /// record is (none when in memory).
    type Shown = (Seq, Option<u64>, Option<u64>, u32, bool, Option<(u64, u32)>);

    fn shown(entry: &Entry) -> Shown {
        let at = match &entry.payload {
            Payload::Paged(paged) => Some((paged.location().segment, paged.location().offset)),
            _ => None,
        };
        let ready = entry.ready_at().map(crate::time::Timestamp::as_millis);
        (entry.seq, entry.persist_id(), ready, entry.delivery_count, entry.redelivered, at)
    }

    fn without_place(shown: Shown) -> Shown {
        (shown.0, shown.1, shown.2, shown.3, shown.4, None)
    }

    /// Issue 38: paged-out messages in a row take one slot, whatever their number, and each
    /// comes out as it went in; a different size or a gap in the steps starts a new slot.
    #[test]
    fn paged_messages_in_a_row_share_one_slot_and_come_back_as_they_went_in() {
        let mut ready = Ready::default();
        let mut expected = Vec::new();
        for seq in 1..=10_000 {
            let entry = paged(seq, 16);
            expected.push(shown(&entry));
            ready.push_back(entry);
        }
        assert_eq!(ready.levels[0].slots.len(), 1, "one run");
        assert_eq!((ready.message_count(), ready.body_bytes()), (10_000, 160_000));
        ready.push_back(paged(10_001, 17));
        ready.push_back(paged(10_003, 16));
        ready.push_back(paged(10_004, 16));
        assert_eq!(ready.levels[0].slots.len(), 3, "a new size, then a new step: new slots");
        let mut got: Vec<Shown> = std::iter::from_fn(|| ready.pop_front()).map(|e| shown(&e)).collect();
        let tail = got.split_off(10_000);
        assert_eq!(got, expected);
        assert_eq!(tail.iter().map(|s| s.0).collect::<Vec<_>>(), [10_001, 10_003, 10_004]);
        assert_eq!((ready.message_count(), ready.body_bytes()), (0, 0));
    }

    /// ADR 0021: a ready backlog (a run, messages of their own, one in memory) written to a
    /// state reads back as the same messages with the same counts, in a run again; the one in
    /// memory is listed as read back; a changed message is left out, its run cut around it; a
    /// state cut short or with another number of levels is refused.
    #[test]
    fn a_ready_backlog_reads_back_from_a_state_without_its_changed_messages() {
        use crate::queue::state_bytes::{StateReader, StateWriter};
        let mut ready = Ready::default();
        ready.push_back(Entry::new(1, Arc::new(paged_message()), Some(at(1000)), None, Some(8)));
        for seq in 2..=5_000 {
            ready.push_back(paged(seq, 16));
        }
        ready.push_back(paged(5_001, 17));
        ready.push_back(paged(5_003, 16));
        let before: Vec<Shown> =
            ready.levels[0].slots.iter().flat_map(slot_entries).map(|e| shown(&e)).collect();
        let mut out = StateWriter::default();
        let (mut read_back, mut held) = (Vec::new(), Vec::new());
        assert_eq!(ready.checkpoint(&mut out, &mut read_back, &mut held), Some(5_001));
        let held: Vec<Seq> = held.iter().map(|entry| entry.seq).collect();
        assert_eq!((read_back, held), (vec![8], vec![1]), "the message in memory: its store id and seq");
        let parts: Vec<bytes::Bytes> = out.finish().iter().map(|part| part.bytes().clone()).collect();
        let mut dropped = Vec::new();
        let restored = ready.restored(&mut StateReader::new(parts.clone()), &[], &mut dropped).unwrap();
        assert!(dropped.is_empty());
        assert_eq!((restored.message_count(), restored.body_bytes()), (5_001, 5_001 * 16 + 1));
        let seqs: Vec<Seq> = restored.seqs().collect();
        assert_eq!(seqs, (2..=5_001).chain([5_003]).collect::<Vec<_>>(), "each seq, runs' members too");
        assert_eq!(restored.levels[0].slots.len(), 3, "the run whole, then two of their own");
        let mut restored_all = restored;
        let got: Vec<Shown> = std::iter::from_fn(|| restored_all.pop_front()).map(|e| shown(&e)).collect();
        assert_eq!(got, before[1..]);
        // Changed: 2_500 (inside the run, store id 2_507) and 5_003 (5_010), alone.
        let mut without =
            ready.restored(&mut StateReader::new(parts.clone()), &[2_507, 5_010], &mut dropped).unwrap();
        assert_eq!(dropped, [2_500, 5_003], "the changed ones' seqs");
        assert_eq!(without.message_count(), 4_999);
        assert!(without.levels[0].slots.len() <= 4, "the run cut in two, joined again");
        let seqs = drain(&mut without);
        assert_eq!(seqs.len(), 4_999);
        assert!(!seqs.contains(&2_500) && !seqs.contains(&5_003) && seqs.windows(2).all(|w| w[0] < w[1]));
        let all: bytes::Bytes = parts.concat().into();
        for cut in [0, 8, 100, all.len() - 1] {
            assert!(
                ready.restored(&mut StateReader::new(vec![all.slice(..cut)]), &[], &mut Vec::new()).is_none(),
                "cut {cut}"
            );
        }
        let two_levels = Ready::with_max_priority(1, 0);
        let refused = two_levels.restored(&mut StateReader::new(parts), &[], &mut Vec::new());
        assert!(refused.is_none(), "another number of levels");
    }

    fn slot_entries(slot: &Slot) -> Vec<Entry> {
        match slot {
            Slot::Live(entry) => vec![entry.clone()],
            Slot::Run(run) => (0..run.len()).map(|at| run.member(at)).collect(),
            Slot::Removed(_) => Vec::new(),
        }
    }

    /// Messages paged out in place (as the store reports them) are joined into runs by the
    /// compaction the page-outs trigger.
    #[test]
    fn messages_paged_out_in_place_are_joined_into_runs() {
        let mut ready = Ready::default();
        for seq in 1..=5_000 {
            ready.push_back(Entry::new(
                seq,
                Arc::new(paged_message()),
                Some(at(1000 + seq)),
                None,
                Some(seq + 7),
            ));
        }
        for seq in 1..=5_000 {
            assert!(ready.page_out(seq, seq + 7, |m| Paged::new(location(seq), m.hot(), m.body_size())));
        }
        assert!(ready.levels[0].slots.len() < 2_600, "{} slots", ready.levels[0].slots.len());
        assert_eq!(ready.resident(), (0, 0));
        assert_eq!(drain(&mut ready), (1..=5_000).collect::<Vec<_>>());
    }

    fn paged_message() -> Message {
        Message::new(Default::default(), Default::default(), Default::default(), vec![0u8; 16].into())
    }

    fn location(seq: Seq) -> crate::persist::RecordLocation {
        crate::persist::RecordLocation { segment: 1, offset: seq as u32 * 90, record_bytes: 90 }
    }

    fn at(ms: u64) -> crate::time::Timestamp {
        crate::time::Timestamp::from_millis(ms)
    }

    /// A test's random rolls: `roll(n)` is in `0..n` (xorshift from `seed`).
    fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    /// Reads a paged message "back": a resident message of its size.
    fn read_back(payload: &mut Payload) -> bool {
        let body = vec![0u8; payload.body_size()].into();
        *payload = Payload::Resident(Arc::new(Message::new(
            Default::default(),
            Default::default(),
            Default::default(),
            body,
        )));
        true
    }

    /// Messages are read back from any message on (a queue with message groups): exactly those,
    /// opened out of the run that held them, the run's members before and after still paged
    /// and in order; what a paged message's location says is where it is.
    #[test]
    fn messages_read_back_from_the_middle_of_a_run() {
        let mut ready = Ready::default();
        for seq in 1..=100 {
            ready.push_back(paged(seq, 16));
        }
        assert_eq!(ready.paged_location(50).map(|at| at.offset), Some(50 * 90));
        ready.page_in_from(Some(50), 3, read_back);
        assert_eq!(ready.resident(), (3, 48));
        assert_eq!(ready.paged_location(50), None, "in memory now");
        assert_eq!(ready.paged_location(53).map(|at| at.offset), Some(53 * 90));
        assert_eq!(ready.paged_location(101), None, "not ready");
        let drained: Vec<(Seq, bool)> =
            std::iter::from_fn(|| ready.pop_front()).map(|e| (e.seq, e.resident().is_some())).collect();
        let expected: Vec<(Seq, bool)> = (1..=100).map(|seq| (seq, (50..53).contains(&seq))).collect();
        assert_eq!(drained, expected);
    }

    /// Runs under every operation a queue performs, against a model: pushes (paged, in rows with
    /// gaps and other sizes), requeues into the middle of runs, removals anywhere, reads back at
    /// the head or from anywhere, and pops. Order, counts and every entry's facts always agree.
    #[test]
    fn runs_agree_with_a_model_under_any_operations() {
        use std::collections::BTreeMap;
        let mut ready = Ready::default();
        let mut model: BTreeMap<Seq, Shown> = BTreeMap::new();
        let mut taken: Vec<Entry> = Vec::new();
        let mut next: Seq = 1;
        let (mut removed_from_runs, mut requeued_into_runs) = (0, 0);
        let (mut step, mut skipped) = (1, Vec::new());
        let mut roll = xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..60_000 {
            match roll(100) {
                0..=44 => {
                    // Stretches of every other seq (a fanout's, whose skipped ones come back
                    // later as a restore out of order may bring them), another size now and then.
                    if roll(50) == 0 {
                        step = 3 - step;
                    }
                    if step == 2 {
                        skipped.push(next + 1);
                    }
                    next += step;
                    let entry = if roll(5) == 0 {
                        // In memory, paged out below.
                        let message = Arc::new(paged_message());
                        Entry::new(next, message, Some(at(1000 + next)), None, Some(next + 7))
                    } else {
                        paged(next, if roll(30) == 0 { 5 } else { 16 })
                    };
                    model.insert(next, shown(&entry));
                    ready.push_back(entry);
                }
                45..=64 => {
                    if let Some(entry) = ready.pop_front() {
                        let (first, want) = model.pop_first().unwrap();
                        let got = shown(&entry);
                        assert_eq!((first, without_place(got)), (entry.seq, without_place(want)));
                        // Paged out or not, read back or not: a paged one is where it was.
                        assert!(got.5.is_none_or(|place| place == (1, entry.seq as u32 * 90)));
                        taken.push(entry);
                    }
                }
                65..=79 => {
                    if roll(2) == 0 && !skipped.is_empty() {
                        let seq = skipped.swap_remove(roll(skipped.len() as u64) as usize);
                        taken.push(paged(seq, 16));
                    }
                    if !taken.is_empty() {
                        let entry = taken.swap_remove(roll(taken.len() as u64) as usize);
                        let slots = &ready.levels[0].slots;
                        let before = slots.partition_point(|s| s.seq() < entry.seq).checked_sub(1);
                        if before.is_some_and(|at| slots[at].last_seq() > entry.seq) {
                            requeued_into_runs += 1;
                        }
                        model.insert(entry.seq, shown(&entry));
                        ready.requeue(entry);
                    }
                }
                80..=94 => {
                    let seq = 1 + roll(next);
                    if ready.levels[0].find(seq).is_some_and(|(_, run)| run.is_some()) {
                        removed_from_runs += 1;
                    }
                    let removed = ready.remove(seq);
                    let want = model.remove(&seq);
                    assert_eq!(removed.as_ref().map(|e| without_place(shown(e))), want.map(without_place));
                    // Back later at its place, inside a run perhaps (as a restore may bring it).
                    taken.extend(removed);
                }
                95 => ready.levels[0].compact(&mut ready.deadlines),
                96..=97 => {
                    let seq = 1 + roll(next);
                    ready.page_out(seq, seq + 7, |m| Paged::new(location(seq), m.hot(), m.body_size()));
                }
                98 => ready.page_in_from(None, 1 + roll(300) as usize, read_back),
                // From anywhere, as a queue with message groups reads (inside a run, perhaps).
                _ => ready.page_in_from(Some(1 + roll(next)), 1 + roll(300) as usize, read_back),
            }
            assert_eq!(ready.message_count(), model.len());
        }
        let rest: Vec<Seq> = drain(&mut ready);
        assert_eq!(rest, model.keys().copied().collect::<Vec<_>>());
        assert!(
            removed_from_runs > 100 && requeued_into_runs > 100,
            "{removed_from_runs} {requeued_into_runs}"
        );
    }

    /// A purge settles every message of every run.
    #[test]
    fn a_purge_settles_the_members_of_runs() {
        let mut ready = Ready::default();
        for seq in 1..=100 {
            ready.push_back(paged(seq, 16));
        }
        let mut settled = Vec::new();
        assert_eq!(ready.purge(&mut settled), 100);
        assert_eq!(settled, (8..=107).collect::<Vec<_>>());
    }

    /// A paged-out message like [`paged`] whose TTL deadline is `ttl` ms after it became ready.
    fn paged_with_ttl(seq: Seq, ttl: u64) -> Entry {
        let entry = paged(seq, 16);
        let ready = entry.ready_at();
        let Payload::Paged(place) = entry.payload else { unreachable!("paged") };
        let expires = ready.map(|at| at.saturating_add_millis(ttl));
        Entry::with_payload(seq, Payload::Paged(place), ready, expires, entry.persist_id())
    }

    /// Issue 38: TTL'd messages in runs. Whatever happens to the runs, the TTL index answers as
    /// if every message had its own key: how many have a deadline, the next and the last one,
    /// and expiry takes exactly the messages due, earliest first.
    #[test]
    fn runs_with_deadlines_expire_as_a_model_says() {
        use std::collections::BTreeMap;
        let mut ready = Ready::default();
        // seq → deadline
        let mut model: BTreeMap<Seq, u64> = BTreeMap::new();
        let mut taken: Vec<Entry> = Vec::new();
        let mut next: Seq = 0;
        let mut roll = xorshift(0x2545_F491_4F6C_DD1D);
        let (mut expired_total, mut runs_made) = (0, false);
        for _ in 0..40_000 {
            match roll(100) {
                0..=49 => {
                    next += 1;
                    let ttl = if roll(40) == 0 { 3_000 } else { 5_000 };
                    let entry = paged_with_ttl(next, ttl);
                    model.insert(next, entry.expires_at().unwrap().as_millis());
                    ready.push_back(entry);
                    runs_made |= ready.levels[0].slots.back().is_some_and(|s| matches!(s, Slot::Run(_)));
                }
                50..=64 => {
                    if let Some(entry) = ready.pop_front() {
                        let (seq, deadline) = model.pop_first().unwrap();
                        assert_eq!(
                            (entry.seq, entry.expires_at().map(|t| t.as_millis())),
                            (seq, Some(deadline))
                        );
                        taken.push(entry);
                    }
                }
                65..=74 => {
                    if !taken.is_empty() {
                        let entry = taken.swap_remove(roll(taken.len() as u64) as usize);
                        model.insert(entry.seq, entry.expires_at().unwrap().as_millis());
                        ready.requeue(entry);
                    }
                }
                75..=82 => {
                    let seq = 1 + roll(next.max(1));
                    let removed = ready.remove(seq).map(|e| e.seq);
                    assert_eq!(removed, model.remove(&seq).map(|_| seq));
                }
                83..=87 => ready.levels[0].compact(&mut ready.deadlines),
                88..=92 => ready.page_in_from(None, 1 + roll(50) as usize, read_back),
                _ => {
                    // The clock moves on (messages are ready 1 ms apart), expiring what is due.
                    let now = 1000 + next + 3_000 + roll(2_500);
                    let mut out = Vec::new();
                    ready.take_expired(at(now), &mut out);
                    let mut due: Vec<(u64, Seq)> =
                        model.iter().filter(|(_, d)| **d <= now).map(|(s, d)| (*d, *s)).collect();
                    due.sort();
                    let got: Vec<(u64, Seq)> =
                        out.iter().map(|e| (e.expires_at().unwrap().as_millis(), e.seq)).collect();
                    assert_eq!(got, due, "expired at {now}");
                    for (_, seq) in &due {
                        model.remove(seq);
                    }
                    expired_total += due.len();
                }
            }
            let deadlines = ready.deadlines();
            assert_eq!(deadlines.message_count(), model.len());
            assert_eq!(deadlines.next().map(|t| t.as_millis()), model.values().min().copied());
            assert_eq!(deadlines.last().map(|t| t.as_millis()), model.values().max().copied());
        }
        assert!(expired_total > 1_000, "{expired_total} expired");
        assert!(runs_made, "runs were made");
    }

    /// A changed TTL applied to the queued messages (issue 40, item 23) re-times runs and
    /// single messages alike, and the TTL index follows: count, next, last and expiry.
    #[test]
    fn a_new_ttl_re_times_runs_and_their_keys() {
        let mut ready = Ready::default();
        for seq in 1..=1_000 {
            ready.push_back(paged_with_ttl(seq, 5_000));
        }
        ready.requeue(Entry::new(0, Arc::new(paged_message()), Some(at(1_000)), Some(at(6_000)), Some(7)));
        assert_eq!(ready.deadlines().last(), Some(at(1_000 + 1_000 + 5_000)));
        ready.apply_ttl(|_, ready_at| Some(ready_at.saturating_add_millis(1_000)));
        let deadlines = ready.deadlines();
        assert_eq!(deadlines.message_count(), 1_001);
        assert_eq!((deadlines.next(), deadlines.last()), (Some(at(2_000)), Some(at(3_000))));
        let mut out = Vec::new();
        ready.take_expired(at(2_500), &mut out);
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), (0..=500).collect::<Vec<_>>());
        assert_eq!(ready.deadlines().next(), Some(at(2_501)));
        ready.apply_ttl(|_, _| None);
        assert_eq!((ready.deadlines().message_count(), ready.deadlines().next()), (0, None));
        assert_eq!(ready.deadlines().last(), None);
        assert_eq!(drain(&mut ready), (501..=1_000).collect::<Vec<_>>());
    }
}
