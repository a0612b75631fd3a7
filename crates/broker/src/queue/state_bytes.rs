//! The bytes of a queue's state in a checkpoint of the store (ADR 0019): a writer that hands
//! what a queue keeps as bytes already (spill-run rosters) over as kept parts of their own,
//! without a copy (the store writes a kept part once and names it in later checkpoints, ADR
//! 0020), and a reader over the parts the store gives back that refuses to read past their end.

use bytes::Bytes;

use crate::persist::StatePart;

/// Writes a state: little-endian words, and kept parts.
#[derive(Debug, Default)]
pub(crate) struct StateWriter {
    parts: Vec<StatePart>,
    current: Vec<u8>,
}

impl StateWriter {
    pub fn u64(&mut self, n: u64) {
        self.current.extend_from_slice(&n.to_le_bytes());
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.current.extend_from_slice(bytes);
    }

    /// `bytes`' length, then `bytes` as a kept part of its own: the caller never changes them.
    pub fn bytes(&mut self, bytes: Bytes) {
        self.u64(bytes.len() as u64);
        if !self.current.is_empty() {
            self.parts.push(StatePart::Inline(Bytes::from(std::mem::take(&mut self.current))));
        }
        self.parts.push(StatePart::Kept(bytes));
    }

    /// Appends what `other` wrote, its kept parts kept.
    pub fn append(&mut self, other: StateWriter) {
        if !self.current.is_empty() {
            self.parts.push(StatePart::Inline(Bytes::from(std::mem::take(&mut self.current))));
        }
        self.parts.extend(other.finish());
    }

    /// The state, in parts to be written one after another.
    pub fn finish(mut self) -> Vec<StatePart> {
        if !self.current.is_empty() {
            self.parts.push(StatePart::Inline(Bytes::from(self.current)));
        }
        self.parts
    }
}

/// Reads a state [`StateWriter`] wrote, from the parts the store gave back (or any cut of the
/// same bytes); `None` from any read past its end or across the end of a part.
#[derive(Debug)]
pub(crate) struct StateReader {
    /// The parts not read yet, the first from `at`.
    parts: std::collections::VecDeque<Bytes>,
    at: usize,
    /// Bytes not read yet, in every part.
    left: usize,
}

impl StateReader {
    pub fn new(parts: Vec<Bytes>) -> Self {
        let left = parts.iter().map(Bytes::len).sum();
        StateReader { parts: parts.into(), at: 0, left }
    }

    /// Moves past the parts read to their end.
    fn next_unread(&mut self) {
        while self.parts.front().is_some_and(|part| self.at == part.len()) {
            self.parts.pop_front();
            self.at = 0;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.raw(8)?.try_into().ok()?))
    }

    /// A count of items of at least `item_bytes` each: never more than the bytes left hold.
    pub fn count(&mut self, item_bytes: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(item_bytes.max(1))? <= self.left).then_some(n)
    }

    pub fn raw(&mut self, n: usize) -> Option<&[u8]> {
        let (start, end) = self.take(n)?;
        Some(self.parts.front().map_or(&[][..], |part| &part[start..end]))
    }

    /// What [`StateWriter::bytes`] wrote: a slice of a part, not a copy.
    pub fn bytes(&mut self) -> Option<Bytes> {
        let n = self.count(1)?;
        let (start, end) = self.take(n)?;
        Some(self.parts.front().map_or_else(Bytes::new, |part| part.slice(start..end)))
    }

    /// Reads the next `n` bytes, if one part holds them: their range in the first part.
    fn take(&mut self, n: usize) -> Option<(usize, usize)> {
        if n > 0 {
            self.next_unread();
        }
        let start = self.at;
        let end = start.checked_add(n).filter(|end| *end <= self.parts.front().map_or(0, Bytes::len))?;
        self.at = end;
        self.left -= n;
        Some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(parts: &[StatePart]) -> Vec<Bytes> {
        parts.iter().map(|part| part.bytes().clone()).collect()
    }

    /// What is written reads back from its parts as handed over, the kept bytes the same bytes,
    /// and from one piece holding them all; nothing past the end.
    #[test]
    fn what_is_written_reads_back_and_nothing_past_the_end() {
        let roster = Bytes::from(b"roster".to_vec());
        let mut writer = StateWriter::default();
        writer.u64(7);
        writer.bytes(roster.clone());
        writer.raw(&[1, 2]);
        let parts = writer.finish();
        assert!(matches!(&parts[1], StatePart::Kept(kept) if kept.as_ptr() == roster.as_ptr()));
        let whole: Vec<u8> = bytes_of(&parts).concat();
        for state in [bytes_of(&parts), vec![Bytes::from(whole.clone())]] {
            let mut reader = StateReader::new(state);
            assert_eq!(reader.u64(), Some(7));
            assert_eq!(reader.bytes().as_deref(), Some(&b"roster"[..]));
            assert_eq!(reader.raw(2), Some(&[1u8, 2][..]));
            assert!(reader.is_empty());
            assert_eq!(reader.u64(), None);
        }
        let mut reader = StateReader::new(bytes_of(&parts));
        reader.u64();
        assert!(reader.bytes().unwrap().as_ptr() == roster.as_ptr(), "the kept part, not a copy");
        for cut in 0..whole.len() {
            let mut reader = StateReader::new(vec![Bytes::from(whole[..cut].to_vec())]);
            let read = (|| Some((reader.u64()?, reader.bytes()?, reader.raw(2)?.to_vec())))();
            assert!(read.is_none(), "cut at {cut}");
        }
        let mut joined = StateWriter::default();
        joined.u64(1);
        let mut tail = StateWriter::default();
        tail.bytes(roster.clone());
        tail.u64(2);
        joined.append(tail);
        let mut reader = StateReader::new(bytes_of(&joined.finish()));
        let read = (reader.u64(), reader.bytes().map(|b| b.as_ptr()), reader.u64());
        assert_eq!(read, (Some(1), Some(roster.as_ptr()), Some(2)), "appended, the kept part kept");
        let across = vec![Bytes::from_static(&[7, 0, 0, 0]), Bytes::from_static(&[0, 0, 0, 0])];
        assert_eq!(StateReader::new(across).u64(), None, "a word across two parts");
        assert_eq!(StateReader::new(vec![Bytes::from(u64::MAX.to_le_bytes().to_vec())]).count(1), None);
    }
}
