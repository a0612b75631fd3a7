//! The bytes of a queue's state in a checkpoint of the store (ADR 0019): a writer that hands
//! what a queue keeps as bytes already (spill-run rosters) over as parts of their own, without a
//! copy, and a reader over what the store gives back that refuses to read past the end.

use bytes::Bytes;

/// Writes a state: little-endian words, and parts.
#[derive(Debug, Default)]
pub(crate) struct StateWriter {
    parts: Vec<Bytes>,
    current: Vec<u8>,
}

impl StateWriter {
    pub fn u64(&mut self, n: u64) {
        self.current.extend_from_slice(&n.to_le_bytes());
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.current.extend_from_slice(bytes);
    }

    /// `bytes`' length, then `bytes` as a part of its own.
    pub fn bytes(&mut self, bytes: Bytes) {
        self.u64(bytes.len() as u64);
        if !self.current.is_empty() {
            self.parts.push(Bytes::from(std::mem::take(&mut self.current)));
        }
        self.parts.push(bytes);
    }

    /// The state, in parts to be written one after another.
    pub fn finish(mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.parts.push(Bytes::from(self.current));
        }
        self.parts
    }
}

/// Reads a state [`StateWriter`] wrote; `None` from any read past its end.
#[derive(Debug)]
pub(crate) struct StateReader {
    bytes: Bytes,
    at: usize,
}

impl StateReader {
    pub fn new(bytes: Bytes) -> Self {
        StateReader { bytes, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.raw(8)?.try_into().ok()?))
    }

    /// A count of items of at least `item_bytes` each: never more than the bytes left hold.
    pub fn count(&mut self, item_bytes: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(item_bytes.max(1))? <= self.bytes.len() - self.at).then_some(n)
    }

    pub fn raw(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len())?;
        let raw = &self.bytes[self.at..end];
        self.at = end;
        Some(raw)
    }

    /// What [`StateWriter::bytes`] wrote: a slice of the state, not a copy.
    pub fn bytes(&mut self) -> Option<Bytes> {
        let n = self.count(1)?;
        let slice = self.bytes.slice(self.at..self.at + n);
        self.at += n;
        Some(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_nothing_past_the_end() {
        let mut writer = StateWriter::default();
        writer.u64(7);
        writer.bytes(Bytes::from_static(b"roster"));
        writer.raw(&[1, 2]);
        let state: Vec<u8> = writer.finish().concat();
        let mut reader = StateReader::new(Bytes::from(state.clone()));
        assert_eq!(reader.u64(), Some(7));
        assert_eq!(reader.bytes().as_deref(), Some(&b"roster"[..]));
        assert_eq!(reader.raw(2), Some(&[1u8, 2][..]));
        assert!(reader.is_empty());
        assert_eq!(reader.u64(), None);
        for cut in 0..state.len() {
            let mut reader = StateReader::new(Bytes::from(state[..cut].to_vec()));
            let read = (|| Some((reader.u64()?, reader.bytes()?, reader.raw(2)?.to_vec())))();
            assert!(read.is_none(), "cut at {cut}");
        }
        assert_eq!(StateReader::new(Bytes::from(u64::MAX.to_le_bytes().to_vec())).count(1), None);
    }
}
