//! One queue's live messages in the live index: message id → where its enqueue record lies (a
//! packed segment and offset).
//!
//! A queue hands out its message ids in ascending order and its enqueue records reach the log in
//! that order, so nearly every insert is an append. The entries are kept in id order in two
//! vectors, ids and places (16 B each, no hashing, no table to grow by rehashing): an insert
//! appends, and a settle finds its entry by an interpolation search (one compare at the head,
//! where a queue is mostly consumed) and leaves a mark there, which the head skips and compaction
//! drops once marks are half the vectors. The few ids that arrive below the highest one kept (a queue's ids after an unusual
//! order of writes) go to a hash map beside the vector, so any order stays correct.
//!
//! Entries appended in a steady row (ids and places each a fixed step apart, as one publisher
//! filling a queue writes them) leave the vectors for runs of a bit per message
//! (`live_runs.rs`) once [`RUN_MIN`] of them are in a row; the vectors keep the rest.
//!
//! Recovery's first pass is mostly inserts: an append costs 15 ns where a hash map of 10M entries
//! took 70 ns (two cache misses). A settle at the head costs a few ns; a settle anywhere in a
//! queue of 10M (delayed messages fire in due order, not id order) about 350 ns against the
//! map's 70 ns, a few dependent cache misses (measured in a release build, 10M entries).

use std::collections::HashMap;

use super::live_runs::{LiveRun, LiveRuns, RUN_MIN};
use super::IdBuild;
use crate::varint::{self, Malformed, Reader};

/// The mark of a settled entry still in the vector. No enqueue record lies at offset
/// `u32::MAX` of segment `u32::MAX` (a record has a header before any byte of it), so no live
/// entry packs to it.
const SETTLED: u64 = u64::MAX;

/// Below this many entries, the vectors are not compacted (it costs more than it frees).
const COMPACT_MIN: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct QueueLive {
    /// Message ids in ascending order, settled ones included until compacted away. Apart from
    /// `places` so that a search reads ids only: twice as many per cache line.
    ids: Vec<u64>,
    /// Where each of `ids` lies (packed), or [`SETTLED`].
    places: Vec<u64>,
    /// Every entry before this one is settled.
    head: usize,
    /// Settled entries in `places[head..]`.
    settled: usize,
    /// Live ids that arrived below the highest id in `ids`, and were not there.
    strays: HashMap<u64, u64, IdBuild>,
    /// Entries appended in a row, kept as runs; none of their ids is in `ids` or `strays`.
    runs: LiveRuns,
}

impl QueueLive {
    /// Live messages.
    pub(crate) fn len(&self) -> usize {
        self.ids.len() - self.head - self.settled + self.strays.len() + self.runs.live()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `msg_id`'s enqueue record lies, if it is live.
    pub(crate) fn get(&self, msg_id: u64) -> Option<u64> {
        if let Some(packed) = self.runs.get(msg_id) {
            return Some(packed);
        }
        match self.position(msg_id) {
            Ok(at) if self.places[at] != SETTLED => Some(self.places[at]),
            _ => self.strays.get(&msg_id).copied(),
        }
    }

    /// Makes `msg_id` live at `packed`; returns where it was, if it was live already.
    pub(crate) fn insert(&mut self, msg_id: u64, packed: u64) -> Option<u64> {
        debug_assert_ne!(packed, SETTLED, "no record lies at the settled mark");
        // Ids in `strays` are all below the highest in `ids` or the runs, so a higher id is new.
        let highest = self.ids.last().copied().into_iter().chain(self.runs.last_id()).max();
        if highest.is_none_or(|last| msg_id > last) {
            if !self.runs.extend(msg_id, packed) {
                self.ids.push(msg_id);
                self.places.push(packed);
                self.gather_run();
            }
            return None;
        }
        if let Some(was) = self.runs.remove(msg_id) {
            // Written again elsewhere (a repeated enqueue at recovery): out of its run.
            self.strays.insert(msg_id, packed);
            return Some(was);
        }
        match self.position(msg_id) {
            Ok(at) => {
                let was = std::mem::replace(&mut self.places[at], packed);
                if was == SETTLED {
                    self.settled -= 1;
                    None
                } else {
                    Some(was)
                }
            }
            Err(_) => self.strays.insert(msg_id, packed),
        }
    }

    /// Settles `msg_id`; returns where its enqueue record lay, if it was live.
    pub(crate) fn remove(&mut self, msg_id: u64) -> Option<u64> {
        if let Some(packed) = self.runs.remove(msg_id) {
            return Some(packed);
        }
        if let Ok(at) = self.position(msg_id) {
            let packed = self.places[at];
            if packed != SETTLED {
                self.places[at] = SETTLED;
                self.settled += 1;
                self.tidy();
                return Some(packed);
            }
        }
        self.strays.remove(&msg_id)
    }

    /// Keeps only the live entries for which `keep(msg_id, packed)` holds.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, u64) -> bool) {
        for (msg_id, packed) in self.ids[self.head..].iter().zip(&mut self.places[self.head..]) {
            if *packed != SETTLED && !keep(*msg_id, *packed) {
                *packed = SETTLED;
                self.settled += 1;
            }
        }
        self.strays.retain(|msg_id, packed| keep(*msg_id, *packed));
        self.runs.retain(keep);
        self.tidy();
    }

    /// The live entries, `(msg_id, packed)`: the runs' in id order, the vectors' in id order,
    /// then the strays in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ids = self.ids[self.head..].iter().copied();
        let ordered =
            ids.zip(self.places[self.head..].iter().copied()).filter(|(_, packed)| *packed != SETTLED);
        let strays = self.strays.iter().map(|(msg_id, packed)| (*msg_id, *packed));
        self.runs.iter().chain(ordered).chain(strays)
    }

    /// [`QueueLive::iter`] without the runs that lie before segment `segment`.
    pub(crate) fn iter_without_runs_before(&self, segment: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ids = self.ids[self.head..].iter().copied();
        let ordered =
            ids.zip(self.places[self.head..].iter().copied()).filter(|(_, packed)| *packed != SETTLED);
        let strays = self.strays.iter().map(|(msg_id, packed)| (*msg_id, *packed));
        self.runs.iter_from_segment(segment).chain(ordered).chain(strays)
    }

    /// Where live `msg_id` lies, if it is in a run that lies before segment `segment`.
    pub(crate) fn get_in_run_before(&self, msg_id: u64, segment: u64) -> Option<u64> {
        self.runs.get_before_segment(msg_id, segment)
    }

    /// Appends the queue's live entries to a checkpoint: the runs as they are (a bit per member),
    /// the vectors' live entries as steps from the one before, then the strays.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.runs.encode(out);
        let live = self.ids.len() - self.head - self.settled;
        varint::put(out, live as u64);
        let (mut last_id, mut last_place) = (0u64, 0u64);
        for (msg_id, packed) in self.ids[self.head..].iter().zip(&self.places[self.head..]) {
            if *packed != SETTLED {
                varint::put(out, msg_id - last_id);
                // Places mostly grow (a queue's records in log order); a step back is written whole.
                match packed.checked_sub(last_place) {
                    Some(step) => varint::put(out, step << 1),
                    None => varint::put(out, (packed << 1) | 1),
                }
                (last_id, last_place) = (*msg_id, *packed);
            }
        }
        varint::put(out, self.strays.len() as u64);
        for (msg_id, packed) in &self.strays {
            varint::put(out, *msg_id);
            varint::put(out, *packed);
        }
    }

    /// A queue's entries read back from a checkpoint, if they are ones this index could hold:
    /// vector ids ascending, no id held twice, no entry at the settled mark, not empty.
    pub(crate) fn decode(input: &mut Reader<'_>) -> Result<QueueLive, Malformed> {
        let runs = LiveRuns::decode(input)?;
        let live = input.count()?;
        let (mut ids, mut places) = (Vec::with_capacity(live), Vec::with_capacity(live));
        let (mut last_id, mut last_place) = (0u64, 0u64);
        for at in 0..live {
            let step = input.u64()?;
            let msg_id = last_id.checked_add(step).filter(|_| at == 0 || step > 0).ok_or(Malformed)?;
            let place = input.u64()?;
            let packed = if place & 1 == 0 { last_place.checked_add(place >> 1) } else { Some(place >> 1) };
            let packed = packed.filter(|p| *p != SETTLED && runs.get(msg_id).is_none()).ok_or(Malformed)?;
            ids.push(msg_id);
            places.push(packed);
            (last_id, last_place) = (msg_id, packed);
        }
        let mut strays = HashMap::default();
        for _ in 0..input.count()? {
            let (msg_id, packed) = (input.u64()?, input.u64()?);
            let held = runs.get(msg_id).is_some() || ids.binary_search(&msg_id).is_ok();
            // Strays lie below the highest id held, or a new append could repeat one.
            let below = ids.last().copied().into_iter().chain(runs.last_id()).any(|highest| msg_id < highest);
            if packed == SETTLED || held || !below || strays.insert(msg_id, packed).is_some() {
                return Err(Malformed);
            }
        }
        let queue = QueueLive { ids, places, head: 0, settled: 0, strays, runs };
        if queue.is_empty() {
            return Err(Malformed);
        }
        Ok(queue)
    }

    /// Live entries per segment: `(segment, count)`, a segment possibly more than once.
    pub(crate) fn live_per_segment(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let single = |packed: u64| (super::segment_of(packed), 1);
        let vectors = self.places[self.head..].iter().filter(|p| **p != SETTLED).map(move |p| single(*p));
        let strays = self.strays.values().map(move |p| single(*p));
        self.runs.live_per_segment().chain(vectors).chain(strays)
    }

    /// Moves the last [`RUN_MIN`] entries of the vectors to a run if they are live and in a row.
    fn gather_run(&mut self) {
        let Some(from) = self.ids.len().checked_sub(RUN_MIN).filter(|from| *from >= self.head) else {
            return;
        };
        let mut row = [(0, 0); RUN_MIN];
        for (at, member) in row.iter_mut().enumerate() {
            *member = (self.ids[from + at], self.places[from + at]);
        }
        // Runs stay in id order and apart: the row must start above every run (older entries
        // left in the vectors can lie below the last run).
        let above_runs = self.runs.last_id().is_none_or(|last| row[0].0 > last);
        if !above_runs || row.iter().any(|(_, packed)| *packed == SETTLED) {
            return;
        }
        if let Some(run) = LiveRun::of(&row) {
            self.ids.truncate(from);
            self.places.truncate(from);
            self.runs.push(run);
        }
    }

    /// Where `msg_id` is in `ids[head..]`, settled or not (`Err`: where it would go). The
    /// head and the tail are one compare each; anywhere else an interpolation search
    /// ([`interpolate`]).
    fn position(&self, msg_id: u64) -> Result<usize, usize> {
        let live = &self.ids[self.head..];
        let (Some(&first), Some(&last)) = (live.first(), live.last()) else {
            return Err(self.head);
        };
        let found = if msg_id <= first {
            if msg_id == first {
                Ok(0)
            } else {
                Err(0)
            }
        } else if msg_id >= last {
            if msg_id == last {
                Ok(live.len() - 1)
            } else {
                Err(live.len())
            }
        } else {
            interpolate(live, msg_id)
        };
        found.map(|at| self.head + at).map_err(|at| self.head + at)
    }

    /// Moves the head past settled entries, and drops them when they are half of the vector.
    fn tidy(&mut self) {
        while self.head < self.ids.len() && self.places[self.head] == SETTLED {
            self.head += 1;
            self.settled -= 1;
        }
        if self.ids.len() >= COMPACT_MIN && (self.head + self.settled) * 2 > self.ids.len() {
            let mut kept = 0;
            for at in self.head..self.ids.len() {
                if self.places[at] != SETTLED {
                    self.ids[kept] = self.ids[at];
                    self.places[kept] = self.places[at];
                    kept += 1;
                }
            }
            self.ids.truncate(kept);
            self.places.truncate(kept);
            self.head = 0;
            self.settled = 0;
            let kept = kept.max(COMPACT_MIN);
            if self.ids.capacity() > 4 * kept {
                self.ids.shrink_to(2 * kept);
                self.places.shrink_to(2 * kept);
            }
        } else if self.head == self.ids.len() {
            self.ids.clear();
            self.places.clear();
            self.head = 0;
        }
    }
}

/// Below this many entries, a search bisects.
const BISECT_BELOW: usize = 16;

/// `msg_id`'s place in `ids` (ascending, the first below `msg_id` and the last above it).
/// A queue's ids are close to evenly spread (a counter's values, less the settled and the
/// transient), so guessing the place from the ids at both ends of the range narrows it to about
/// its square root at each step: a few probes (cache misses) at any size, where bisection takes
/// `log N`. A guess that does not halve the range is followed by a bisection step, so ids spread
/// unevenly cost at most twice bisection.
fn interpolate(ids: &[u64], msg_id: u64) -> Result<usize, usize> {
    // ids[low] < msg_id < ids[high] throughout.
    let (mut low, mut high) = (0, ids.len() - 1);
    let mut bisect = false;
    while high - low > BISECT_BELOW {
        let probe = if bisect {
            low + (high - low) / 2
        } else {
            let (from, to) = (ids[low], ids[high]);
            // A float's rounding only moves the guess (a u128 division costs more than a probe).
            let fraction = (msg_id - from) as f64 / (to - from) as f64;
            (low + (fraction * (high - low) as f64) as usize).clamp(low + 1, high - 1)
        };
        let before = high - low;
        match ids[probe].cmp(&msg_id) {
            std::cmp::Ordering::Equal => return Ok(probe),
            std::cmp::Ordering::Less => low = probe,
            std::cmp::Ordering::Greater => high = probe,
        }
        bisect = !bisect && (high - low) * 2 > before;
    }
    ids[low + 1..high].binary_search(&msg_id).map(|at| low + 1 + at).map_err(|at| low + 1 + at)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Appends, settles at the head and out of order, replaced and revived entries and strays all
    /// agree with a plain map, through every compaction.
    #[test]
    fn agrees_with_a_map_in_any_order() {
        let mut live = QueueLive::default();
        let mut model = BTreeMap::new();
        // A deterministic mix: mostly ascending appends and head settles, some holes, strays and
        // repeats.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next_id = 1_000;
        for step in 0..200_000_u64 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let roll = (state >> 33) % 100;
            let packed = step << 8;
            let (msg_id, insert) = match roll {
                0..=44 => {
                    next_id += 1 + (state >> 60) % 3;
                    (next_id, true)
                }
                45..=49 => (next_id.saturating_sub((state >> 40) % 2_000), true),
                50..=84 => (model.keys().next().copied().unwrap_or(next_id), false),
                _ => (next_id.saturating_sub((state >> 40) % 5_000), false),
            };
            if insert {
                assert_eq!(live.insert(msg_id, packed), model.insert(msg_id, packed), "insert {msg_id}");
            } else {
                assert_eq!(live.remove(msg_id), model.remove(&msg_id), "remove {msg_id}");
            }
            assert_eq!(live.len(), model.len());
            if step % 997 == 0 {
                let mut seen: Vec<_> = live.iter().collect();
                seen.sort_unstable();
                assert_eq!(seen, model.iter().map(|(id, p)| (*id, *p)).collect::<Vec<_>>());
                for probe in [msg_id, msg_id + 1, next_id, next_id + 1] {
                    assert_eq!(live.get(probe), model.get(&probe).copied(), "get {probe}");
                }
            }
        }
    }

    /// Issue 38: entries appended in steady rows become runs (a bit each), and everything still
    /// agrees with a plain map: settles in any order, a row broken by a gap, a new segment or
    /// another step, repeated enqueues of run members, strays, retain.
    #[test]
    fn rows_become_runs_and_agree_with_a_map() {
        let mut live = QueueLive::default();
        let mut model = BTreeMap::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let (mut next_id, mut place, mut id_step, mut place_step) = (1_000_u64, 1_u64 << 32, 1, 90);
        for step in 0..300_000_u64 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let roll = (state >> 33) % 100;
            match roll {
                0..=59 => {
                    // Now and then the rhythm changes, or a new segment starts.
                    match (state >> 20) % 500 {
                        0 => id_step = 1 + (state >> 40) % 3,
                        1 => place_step = 60 + (state >> 40) % 60,
                        2 => place = ((place >> 32) + 1) << 32,
                        _ => {}
                    }
                    next_id += id_step;
                    place += place_step;
                    assert_eq!(live.insert(next_id, place), model.insert(next_id, place), "insert {next_id}");
                }
                60..=89 => {
                    // Settles anywhere (delayed messages fire in due order, not id order).
                    let msg_id = next_id.saturating_sub((state >> 40) % 20_000);
                    assert_eq!(live.remove(msg_id), model.remove(&msg_id), "remove {msg_id}");
                }
                90..=94 => {
                    // A repeated enqueue elsewhere, or a stray below the highest id.
                    let msg_id = next_id.saturating_sub((state >> 40) % 20_000);
                    let packed = (9_u64 << 32) | step;
                    assert_eq!(live.insert(msg_id, packed), model.insert(msg_id, packed), "again {msg_id}");
                }
                _ => {
                    let msg_id = model.keys().next().copied().unwrap_or(next_id);
                    assert_eq!(live.remove(msg_id), model.remove(&msg_id), "head {msg_id}");
                }
            }
            assert_eq!(live.len(), model.len());
            if step % 4_999 == 0 {
                let mut seen: Vec<_> = live.iter().collect();
                seen.sort_unstable();
                assert_eq!(seen, model.iter().map(|(id, p)| (*id, *p)).collect::<Vec<_>>());
                for probe in next_id.saturating_sub(200)..=next_id + 1 {
                    assert_eq!(live.get(probe), model.get(&probe).copied(), "get {probe}");
                }
            }
        }
        assert!(live.runs.count() > 10, "{} runs", live.runs.count());
        live.retain(|msg_id, _| msg_id % 3 != 0);
        model.retain(|msg_id, _| msg_id % 3 != 0);
        let mut seen: Vec<_> = live.iter().collect();
        seen.sort_unstable();
        assert_eq!(seen, model.iter().map(|(id, p)| (*id, *p)).collect::<Vec<_>>());
        assert_eq!(live.len(), model.len());
    }

    /// Entries left in the vectors below a run do not make a second run around it: a row of
    /// them continued above the run stays in the vectors, and every lookup still agrees.
    #[test]
    fn a_row_around_a_run_is_not_a_run() {
        let mut live = QueueLive::default();
        let mut model = BTreeMap::new();
        let steps = (1..=7).map(|k| (k * 100, k * 1_000));
        let run = (701..=708).map(|id| (id, 7_005 + (id - 700) * 10));
        for (msg_id, place) in steps.chain(run).chain([(800, 8_000)]) {
            assert_eq!(live.insert(msg_id, place), model.insert(msg_id, place));
        }
        assert_eq!(live.runs.count(), 1, "only 701..=708");
        for msg_id in (0..=900).step_by(1) {
            assert_eq!(live.get(msg_id), model.get(&msg_id).copied(), "get {msg_id}");
        }
        for msg_id in [800, 100, 705, 700] {
            assert_eq!(live.remove(msg_id), model.remove(&msg_id), "remove {msg_id}");
        }
        assert_eq!(live.len(), model.len());
    }

    /// A million messages filled in a row cost a bit each, not 16 bytes.
    #[test]
    fn a_row_of_a_million_costs_a_bit_each() {
        let mut live = QueueLive::default();
        for msg_id in 1..=1_000_000_u64 {
            live.insert(msg_id, (1 << 32) | (msg_id * 80));
        }
        assert_eq!((live.len(), live.ids.len(), live.runs.count()), (1_000_000, 0, 1));
        // A bit each, and at most as much again of the vector's growth slack.
        assert!(live.runs.bit_bytes() <= 2 * 1_000_000 / 8, "{} bytes", live.runs.bit_bytes());
        assert_eq!(live.get(500_000), Some((1 << 32) | 40_000_000));
        assert_eq!(live.remove(500_000), Some((1 << 32) | 40_000_000));
        assert_eq!(live.get(500_000), None);
        assert_eq!(live.len(), 999_999);
    }

    /// A queue consumed from its head in order stays as small as its live messages.
    #[test]
    fn a_queue_consumed_from_its_head_frees_what_it_settled() {
        let mut live = QueueLive::default();
        for msg_id in 0..100_000 {
            live.insert(msg_id, msg_id << 8);
        }
        for msg_id in 0..99_990 {
            assert_eq!(live.remove(msg_id), Some(msg_id << 8));
        }
        assert_eq!(live.len(), 10);
        assert!(live.ids.len() < 2 * COMPACT_MIN, "{} entries kept", live.ids.len());
        assert!(live.ids.capacity() <= 8 * COMPACT_MIN, "capacity {}", live.ids.capacity());
        assert!(live.places.capacity() <= 8 * COMPACT_MIN, "capacity {}", live.places.capacity());
        assert!(live.strays.is_empty());
        assert_eq!(live.iter().map(|(id, _)| id).collect::<Vec<_>>(), (99_990..100_000).collect::<Vec<_>>());
    }

    /// `retain` drops what it is told to and keeps the rest, strays included.
    #[test]
    fn retain_keeps_only_what_it_is_told() {
        let mut live = QueueLive::default();
        for msg_id in [10, 20, 30, 40, 15] {
            live.insert(msg_id, msg_id);
        }
        live.retain(|msg_id, _| msg_id % 20 != 10);
        let mut kept: Vec<_> = live.iter().map(|(id, _)| id).collect();
        kept.sort_unstable();
        assert_eq!(kept, [15, 20, 40]);
        assert_eq!(live.len(), 3);
        assert_eq!(live.get(10), None);
        assert_eq!(live.get(15), Some(15));
    }
}
