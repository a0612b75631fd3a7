//! A queue's live messages that were written in a steady row, kept as runs (issue 38: the live
//! index in flat memory).
//!
//! A publisher filling one queue writes its enqueue records one after another: each message id
//! is the last one's plus a fixed step (1 for a queue alone, more when others' ids come between
//! in a steady rhythm) and each record lies the last one's length further on in the same segment.
//! Such a row is one `LiveRun`: its first id and place, the two steps, and a bit per member that
//! says whether it is still live, so a message costs a bit where an entry of the id-ordered
//! vectors costs 16 bytes. Members settle in any order (delayed messages fire in due order): a
//! settle clears a bit, and a run goes when its last member does.
//!
//! A run holds only ids that were appended to it in a row, so an id is a member exactly when it
//! is on the run's steps, within it, and its bit is set. Runs are kept in id order and do not
//! overlap.

use crate::varint::{self, Malformed, Reader};

/// How many messages in a row make a run: below this a run's own size (about 80 bytes) costs
/// more than the entries it replaces.
pub(crate) const RUN_MIN: usize = 8;

#[derive(Debug)]
pub(crate) struct LiveRun {
    first_id: u64,
    first_place: u64,
    id_step: u64,
    place_step: u64,
    len: usize,
    live: usize,
    /// Bit `i` is set while member `i` is live.
    bits: Vec<u64>,
}

impl LiveRun {
    /// A run of `members` (`(msg_id, packed place)`, ascending, at least two), if they are in a
    /// row: equal positive steps of id and of place, within one segment.
    pub(crate) fn of(members: &[(u64, u64)]) -> Option<LiveRun> {
        let [(id0, place0), (id1, place1), ..] = *members else { return None };
        let (id_step, place_step) = (id1.checked_sub(id0)?, place1.checked_sub(place0)?);
        let in_row = members.windows(2).all(|pair| {
            let [(a, pa), (b, pb)] = [pair[0], pair[1]];
            b.checked_sub(a) == Some(id_step)
                && pb.checked_sub(pa) == Some(place_step)
                && pb >> 32 == place0 >> 32
        });
        if id_step == 0 || place_step == 0 || !in_row {
            return None;
        }
        let mut run = LiveRun {
            first_id: id0,
            first_place: place0,
            id_step,
            place_step,
            len: 1,
            live: 1,
            bits: vec![1],
        };
        for &(msg_id, place) in &members[1..] {
            run.extend(msg_id, place);
        }
        Some(run)
    }

    /// Appends `msg_id` at `place` if it is the run's next step; returns whether it did.
    pub(crate) fn extend(&mut self, msg_id: u64, place: u64) -> bool {
        let steps = self.len as u64;
        let next_id = self.id_step.checked_mul(steps).and_then(|d| self.first_id.checked_add(d));
        let next_place = self.place_step.checked_mul(steps).and_then(|d| self.first_place.checked_add(d));
        // One segment: the place's segment half stays the first one's.
        if next_id != Some(msg_id) || next_place != Some(place) || place >> 32 != self.first_place >> 32 {
            return false;
        }
        if self.len.is_multiple_of(64) {
            self.bits.push(0);
        }
        self.bits[self.len / 64] |= 1 << (self.len % 64);
        self.len += 1;
        self.live += 1;
        true
    }

    pub(crate) fn first_id(&self) -> u64 {
        self.first_id
    }

    pub(crate) fn last_id(&self) -> u64 {
        self.first_id + (self.len as u64 - 1) * self.id_step
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Which member `msg_id` is, live or settled.
    fn member(&self, msg_id: u64) -> Option<usize> {
        let from_first = msg_id.checked_sub(self.first_id)?;
        let at = usize::try_from(from_first / self.id_step).ok()?;
        (from_first % self.id_step == 0 && at < self.len).then_some(at)
    }

    fn is_live(&self, at: usize) -> bool {
        self.bits[at / 64] & (1 << (at % 64)) != 0
    }

    fn place(&self, at: usize) -> u64 {
        self.first_place + at as u64 * self.place_step
    }

    /// Where live member `msg_id`'s record lies.
    pub(crate) fn get(&self, msg_id: u64) -> Option<u64> {
        let at = self.member(msg_id)?;
        self.is_live(at).then(|| self.place(at))
    }

    /// Settles live member `msg_id`; returns where its record lay.
    pub(crate) fn remove(&mut self, msg_id: u64) -> Option<u64> {
        let at = self.member(msg_id)?;
        if !self.is_live(at) {
            return None;
        }
        self.bits[at / 64] &= !(1 << (at % 64));
        self.live -= 1;
        Some(self.place(at))
    }

    /// The live members, `(msg_id, packed)`, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.len)
            .filter(|at| self.is_live(*at))
            .map(|at| (self.first_id + at as u64 * self.id_step, self.place(at)))
    }

    /// Settles the live members for which `keep(msg_id, packed)` does not hold.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, u64) -> bool) {
        for at in 0..self.len {
            if self.is_live(at) {
                let msg_id = self.first_id + at as u64 * self.id_step;
                if !keep(msg_id, self.place(at)) {
                    self.bits[at / 64] &= !(1 << (at % 64));
                    self.live -= 1;
                }
            }
        }
    }
}

impl LiveRun {
    /// Appends the run to a checkpoint (`checkpoint.rs`): its steps, length and live bits.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for n in [self.first_id, self.first_place, self.id_step, self.place_step, self.len as u64] {
            varint::put(out, n);
        }
        for word in &self.bits {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }

    /// A run read back from a checkpoint, if it is one this index could have built: steps above
    /// zero, every member's id and place in range and in one segment, no bit set past its length,
    /// and at least one member live.
    pub(crate) fn decode(input: &mut Reader<'_>) -> Result<LiveRun, Malformed> {
        let [first_id, first_place, id_step, place_step, len] =
            [input.u64()?, input.u64()?, input.u64()?, input.u64()?, input.u64()?];
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        let words = len.div_ceil(64);
        if id_step == 0 || place_step == 0 || len < 2 || words * 8 > input.remaining() {
            return Err(Malformed);
        }
        let span = |step: u64| step.checked_mul(len as u64 - 1);
        let last_place = span(place_step).and_then(|d| first_place.checked_add(d)).ok_or(Malformed)?;
        span(id_step).and_then(|d| first_id.checked_add(d)).ok_or(Malformed)?;
        if last_place >> 32 != first_place >> 32 {
            return Err(Malformed);
        }
        let bits = (0..words).map(|_| input.word()).collect::<Result<Vec<u64>, _>>()?;
        let past_end = bits.last().is_some_and(|last| len % 64 != 0 && last >> (len % 64) != 0);
        let live = bits.iter().map(|word| word.count_ones() as usize).sum();
        if past_end || live == 0 {
            return Err(Malformed);
        }
        Ok(LiveRun { first_id, first_place, id_step, place_step, len, live, bits })
    }

    /// The segment every member's record lies in.
    pub(crate) fn segment(&self) -> u64 {
        self.first_place >> 32
    }
}

/// The runs of one queue, in id order.
#[derive(Debug, Default)]
pub(crate) struct LiveRuns {
    runs: Vec<LiveRun>,
    live: usize,
}

impl LiveRuns {
    /// Live members of all runs.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// The highest id any run holds, live or settled.
    pub(crate) fn last_id(&self) -> Option<u64> {
        self.runs.last().map(LiveRun::last_id)
    }

    /// Appends `msg_id` (above every id held) to the last run if it is its next step.
    pub(crate) fn extend(&mut self, msg_id: u64, place: u64) -> bool {
        let extended = self.runs.last_mut().is_some_and(|run| run.extend(msg_id, place));
        self.live += usize::from(extended);
        extended
    }

    /// Adds a run (its ids above every id held).
    pub(crate) fn push(&mut self, run: LiveRun) {
        debug_assert!(self.last_id().is_none_or(|last| run.first_id() > last));
        self.live += run.live();
        self.runs.push(run);
    }

    fn run_of(&self, msg_id: u64) -> Option<usize> {
        let at = self.runs.partition_point(|run| run.first_id() <= msg_id).checked_sub(1)?;
        (msg_id <= self.runs[at].last_id()).then_some(at)
    }

    pub(crate) fn get(&self, msg_id: u64) -> Option<u64> {
        self.runs[self.run_of(msg_id)?].get(msg_id)
    }

    /// Settles `msg_id` if a run holds it live; returns where its record lay.
    pub(crate) fn remove(&mut self, msg_id: u64) -> Option<u64> {
        let at = self.run_of(msg_id)?;
        let place = self.runs[at].remove(msg_id)?;
        self.live -= 1;
        if self.runs[at].live() == 0 {
            self.runs.remove(at);
        }
        Some(place)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().flat_map(LiveRun::iter)
    }

    /// The live members of the runs in segment `segment` or later (each run lies in one).
    pub(crate) fn iter_from_segment(&self, segment: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().filter(move |run| run.segment() >= segment).flat_map(LiveRun::iter)
    }

    /// Where live `msg_id` lies, if a run before segment `segment` holds it.
    pub(crate) fn get_before_segment(&self, msg_id: u64, segment: u64) -> Option<u64> {
        let run = &self.runs[self.run_of(msg_id)?];
        if run.segment() >= segment {
            return None;
        }
        run.get(msg_id)
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, u64) -> bool) {
        for run in &mut self.runs {
            run.retain(&mut keep);
        }
        self.runs.retain(|run| run.live() > 0);
        self.live = self.runs.iter().map(LiveRun::live).sum();
    }

    /// Appends the runs to a checkpoint.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        varint::put(out, self.runs.len() as u64);
        for run in &self.runs {
            run.encode(out);
        }
    }

    /// Runs read back from a checkpoint, in id order and apart.
    pub(crate) fn decode(input: &mut Reader<'_>) -> Result<LiveRuns, Malformed> {
        let mut runs = LiveRuns::default();
        for _ in 0..input.count()? {
            let run = LiveRun::decode(input)?;
            if runs.last_id().is_some_and(|last| run.first_id() <= last) {
                return Err(Malformed);
            }
            runs.push(run);
        }
        Ok(runs)
    }

    /// Each run's segment and live members.
    pub(crate) fn live_per_segment(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.runs.iter().map(|run| (run.segment(), run.live()))
    }

    /// Bytes the runs hold beyond their headers (for tests: about a bit per member).
    #[cfg(test)]
    pub(crate) fn bit_bytes(&self) -> usize {
        self.runs.iter().map(|run| run.bits.capacity() * 8).sum()
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.runs.len()
    }
}
