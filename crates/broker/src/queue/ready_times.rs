//! When each member of a ready run after its head became ready (`ready_run.rs`), as milliseconds
//! after the run's base time, never decreasing along the run (issue 38: a ready backlog whose
//! memory does not grow with it).
//!
//! A steady publisher makes hundreds of messages in the same millisecond, so the times are kept
//! as *groups*: members that became ready in the same millisecond share one 8-byte entry, its
//! end and its time. At 275k messages a second that is 0.03 B a message, where a time each was 4.
//! A slow publisher gives each member a millisecond of its own; once groups would cost more than a
//! time each, the run keeps a time each instead (`Each`), so no run costs more than 4 B a member.
//!
//! A group's end is an *absolute* position: the count of members ever pushed, including those
//! since taken from the front (`taken`). Taking the first member, splitting and truncating then
//! only move a boundary; no end is rewritten.

use std::collections::VecDeque;

use super::state_bytes::{StateReader, StateWriter};

/// Groups at most this many before groups may turn into a time each: small runs stay groups.
const GROUPS_BEFORE_EACH: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadyTimes {
    Groups(Groups),
    Each(VecDeque<u32>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Groups {
    /// Members taken from the front: the absolute position of the first member.
    taken: u32,
    /// `(end, time)`: the members from the last group's end (or `taken`) up to `end`
    /// (exclusive, absolute) became ready `time` ms after the base.
    groups: VecDeque<(u32, u32)>,
}

impl ReadyTimes {
    /// The times of one member.
    pub fn one(time: u32) -> ReadyTimes {
        ReadyTimes::Groups(Groups { taken: 0, groups: VecDeque::from([(1, time)]) })
    }

    pub fn len(&self) -> usize {
        match self {
            ReadyTimes::Groups(g) => (g.end() - g.taken) as usize,
            ReadyTimes::Each(each) => each.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn last(&self) -> Option<u32> {
        match self {
            ReadyTimes::Groups(g) => g.groups.back().map(|&(_, time)| time),
            ReadyTimes::Each(each) => each.back().copied(),
        }
    }

    /// Member `at`'s time (`at < len`).
    pub fn get(&self, at: usize) -> u32 {
        match self {
            ReadyTimes::Groups(g) => {
                let position = g.taken + at as u32;
                let group = g.groups.partition_point(|&(end, _)| end <= position);
                g.groups[group].1
            }
            ReadyTimes::Each(each) => each[at],
        }
    }

    /// Appends a member that became ready at `time`, no earlier than the last; gives `false`
    /// (and appends nothing) if it is earlier, or if the run has taken all the members it can
    /// count.
    pub fn push(&mut self, time: u32) -> bool {
        if self.last().is_some_and(|last| time < last) {
            return false;
        }
        match self {
            ReadyTimes::Groups(g) => {
                let Some(end) = g.end().checked_add(1) else { return false };
                match g.groups.back_mut() {
                    Some((last_end, last)) if *last == time => *last_end = end,
                    _ => g.groups.push_back((end, time)),
                }
                if g.groups.len() > GROUPS_BEFORE_EACH && g.groups.len() * 2 > self.len() {
                    *self = ReadyTimes::Each(self.iter().collect());
                }
            }
            ReadyTimes::Each(each) => each.push_back(time),
        }
        true
    }

    /// Takes the first member's time out (`len > 0`).
    pub fn pop_front(&mut self) {
        match self {
            ReadyTimes::Groups(g) => {
                g.taken += 1;
                if g.groups.front().is_some_and(|&(end, _)| end <= g.taken) {
                    g.groups.pop_front();
                }
            }
            ReadyTimes::Each(each) => {
                each.pop_front();
            }
        }
    }

    /// Splits off the members from `at` on (`at <= len`); this keeps those before.
    pub fn split_off(&mut self, at: usize) -> ReadyTimes {
        match self {
            ReadyTimes::Groups(g) => {
                let position = g.taken + at as u32;
                let first_after = g.groups.partition_point(|&(end, _)| end <= position);
                let tail = g.groups.split_off(first_after);
                // The group holding `position` (if it starts before it) is in both halves.
                if let Some(&(_, time)) = tail.front() {
                    if g.groups.back().map_or(g.taken, |&(end, _)| end) < position {
                        g.groups.push_back((position, time));
                    }
                }
                ReadyTimes::Groups(Groups { taken: position, groups: tail })
            }
            ReadyTimes::Each(each) => ReadyTimes::Each(each.split_off(at)),
        }
    }

    /// Keeps the first `len` members (`len <= self.len()`).
    pub fn truncate(&mut self, len: usize) {
        drop(self.split_off(len));
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(|at| self.get(at))
    }
}

/// How a checkpoint's state writes the times (`ready/checkpoint.rs`).
const GROUPS: u64 = 0;
const EACH: u64 = 1;

impl ReadyTimes {
    /// Appends the times to a queue state.
    pub fn checkpoint(&self, out: &mut StateWriter) {
        match self {
            ReadyTimes::Groups(g) => {
                out.u64(GROUPS);
                out.u64(u64::from(g.taken));
                out.u64(g.groups.len() as u64);
                for &(end, time) in &g.groups {
                    out.u64(u64::from(end) << 32 | u64::from(time));
                }
            }
            ReadyTimes::Each(each) => {
                out.u64(EACH);
                out.u64(each.len() as u64);
                let mut bytes = Vec::with_capacity(each.len() * 4);
                for time in each {
                    bytes.extend_from_slice(&time.to_le_bytes());
                }
                out.raw(&bytes);
            }
        }
    }

    /// The times [`ReadyTimes::checkpoint`] wrote; `None` unless they are at least one member's,
    /// in order.
    pub fn restored(state: &mut StateReader) -> Option<ReadyTimes> {
        let times = match state.u64()? {
            GROUPS => {
                let taken = u32::try_from(state.u64()?).ok()?;
                let mut groups = VecDeque::new();
                for _ in 0..state.count(8)? {
                    let word = state.u64()?;
                    groups.push_back(((word >> 32) as u32, word as u32));
                }
                ReadyTimes::Groups(Groups { taken, groups })
            }
            EACH => {
                let n = state.count(4)?;
                let bytes = state.raw(n * 4)?;
                let each = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                ReadyTimes::Each(each.collect())
            }
            _ => return None,
        };
        let in_order = match &times {
            ReadyTimes::Groups(g) => {
                let ends = g.groups.iter().map(|&(end, _)| end);
                let starts = std::iter::once(g.taken).chain(ends.clone());
                starts.zip(ends).all(|(start, end)| start < end)
                    && g.groups.iter().zip(g.groups.iter().skip(1)).all(|(a, b)| a.1 < b.1)
            }
            ReadyTimes::Each(each) => each.iter().zip(each.iter().skip(1)).all(|(a, b)| a <= b),
        };
        (in_order && !times.is_empty()).then_some(times)
    }
}

impl Groups {
    /// The absolute position after the last member.
    fn end(&self) -> u32 {
        self.groups.back().map_or(self.taken, |&(end, _)| end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u32),
        PopFront,
        SplitOff(usize),
        Truncate(usize),
        KeepTail(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..4).prop_map(Op::Push),
            2 => Just(Op::PopFront),
            1 => (0usize..64).prop_map(Op::SplitOff),
            1 => (0usize..64).prop_map(Op::Truncate),
            1 => (0usize..64).prop_map(Op::KeepTail),
        ]
    }

    proptest::proptest! {
        /// Every operation gives what a time each in a plain deque gives.
        #[test]
        fn times_are_those_of_a_time_each(first in 0u32..100, ops in proptest::collection::vec(op(), 0..300)) {
            let mut times = ReadyTimes::one(first);
            let mut model = VecDeque::from([first]);
            for op in ops {
                match op {
                    Op::Push(step) => {
                        let time = model.back().map_or(first, |last| last + step);
                        prop_assert!(times.push(time));
                        model.push_back(time);
                    }
                    Op::PopFront if !model.is_empty() => {
                        times.pop_front();
                        model.pop_front();
                    }
                    Op::PopFront => {}
                    Op::SplitOff(at) | Op::KeepTail(at) => {
                        let at = at.min(model.len());
                        let tail = times.split_off(at);
                        let model_tail = model.split_off(at);
                        prop_assert_eq!(tail.iter().collect::<Vec<_>>(), Vec::from(model_tail.clone()));
                        if matches!(op, Op::KeepTail(_)) {
                            times = tail;
                            model = model_tail;
                        }
                    }
                    Op::Truncate(len) => {
                        let len = len.min(model.len());
                        times.truncate(len);
                        model.truncate(len);
                    }
                }
                prop_assert_eq!(times.len(), model.len());
                prop_assert_eq!(times.last(), model.back().copied());
                prop_assert_eq!(times.iter().collect::<Vec<_>>(), Vec::from(model.clone()));
            }
        }
    }

    /// Both kinds read back from a state as they were; times out of order or none are refused.
    #[test]
    fn times_read_back_from_a_state_and_disorder_is_refused() {
        let mut groups = ReadyTimes::one(3);
        for time in [3, 3, 9, 9, 12] {
            assert!(groups.push(time));
        }
        groups.pop_front();
        let mut each = ReadyTimes::one(0);
        for time in 1..100 {
            assert!(each.push(time));
        }
        assert!(matches!(each, ReadyTimes::Each(_)));
        for times in [groups, each] {
            let mut out = StateWriter::default();
            times.checkpoint(&mut out);
            let parts = out.finish().iter().map(|part| part.bytes().clone()).collect();
            let mut state = StateReader::new(parts);
            assert_eq!(ReadyTimes::restored(&mut state), Some(times));
            assert!(state.is_empty());
        }
        let read = |words: &[u64]| {
            let mut out = StateWriter::default();
            words.iter().for_each(|word| out.u64(*word));
            ReadyTimes::restored(&mut StateReader::new(
                out.finish().iter().map(|p| p.bytes().clone()).collect(),
            ))
        };
        assert!(read(&[GROUPS, 0, 2, 2 << 32 | 5, 4 << 32 | 7]).is_some());
        assert_eq!(read(&[GROUPS, 0, 2, 2 << 32 | 5, 4 << 32 | 5]), None, "two groups of one time");
        assert_eq!(read(&[GROUPS, 0, 2, 2 << 32 | 7, 4 << 32 | 5]), None, "times falling");
        assert_eq!(read(&[GROUPS, 2, 1, 2 << 32 | 5]), None, "an empty group");
        assert_eq!(read(&[GROUPS, 0, 0]), None, "no member");
        assert_eq!(read(&[GROUPS, 0, 3, 2 << 32 | 5]), None, "cut short");
        assert_eq!(read(&[9]), None, "unknown kind");
    }

    #[test]
    fn an_earlier_time_is_refused() {
        let mut times = ReadyTimes::one(5);
        assert!(!times.push(4));
        assert!(times.push(5));
        assert_eq!(times.iter().collect::<Vec<_>>(), [5, 5]);
    }

    #[test]
    fn members_of_one_millisecond_share_a_group() {
        let mut times = ReadyTimes::one(0);
        for at in 0..100_000u32 {
            assert!(times.push(at / 300));
        }
        let ReadyTimes::Groups(groups) = &times else { panic!("a time each: {times:?}") };
        assert_eq!(groups.groups.len(), 334);
        assert_eq!(times.get(100_000), 333);
        assert_eq!(times.get(300), 0);
        assert_eq!(times.get(301), 1);
    }

    #[test]
    fn a_millisecond_each_keeps_a_time_each() {
        let mut times = ReadyTimes::one(0);
        for at in 1..1_000u32 {
            assert!(times.push(at));
        }
        assert!(matches!(times, ReadyTimes::Each(_)));
        assert_eq!(times.iter().collect::<Vec<_>>(), (0..1_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_run_that_has_counted_all_it_can_takes_no_more() {
        let mut times =
            ReadyTimes::Groups(Groups { taken: u32::MAX - 2, groups: VecDeque::from([(u32::MAX - 1, 7)]) });
        assert!(times.push(7));
        assert!(!times.push(7));
        assert_eq!(times.len(), 2);
    }
}
