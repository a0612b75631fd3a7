//! LEB128 varints for the checkpoint (`checkpoint.rs`): a writer that appends, and a reader over a
//! byte slice that refuses what runs past its end or does not fit a `u64` (a checkpoint is read
//! only after its checksum matched, so a refusal means a bug, and recovery reads the log instead).

/// Appends `n` as a varint.
pub(crate) fn put(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The bytes left to read ran out, or a value does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Reads values from the front of a byte slice.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes not read yet (an upper bound for counts read from the input: each item takes one).
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Malformed> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.bytes.split_first().ok_or(Malformed)?;
            self.bytes = rest;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(Malformed);
            }
            n |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(Malformed)
    }

    /// A count of items that each take at least one more byte: never more than are left, so a
    /// count cannot make the reader allocate beyond the input's size.
    pub(crate) fn count(&mut self) -> Result<usize, Malformed> {
        let n = usize::try_from(self.u64()?).map_err(|_| Malformed)?;
        if n > self.remaining() {
            return Err(Malformed);
        }
        Ok(n)
    }

    /// The next `n` bytes as they are (a length read before them says how many).
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.bytes.len() {
            return Err(Malformed);
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    /// A fixed 8-byte little-endian word (run bitmaps).
    pub(crate) fn word(&mut self) -> Result<u64, Malformed> {
        let (word, rest) = self.bytes.split_first_chunk::<8>().ok_or(Malformed)?;
        self.bytes = rest;
        Ok(u64::from_le_bytes(*word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_runs_out() {
        let values = [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX - 1, u64::MAX];
        let mut out = Vec::new();
        for n in values {
            put(&mut out, n);
        }
        let mut reader = Reader::new(&out);
        for n in values {
            assert_eq!(reader.u64(), Ok(n));
        }
        assert!(reader.is_empty());
        assert_eq!(reader.u64(), Err(Malformed));
        // Eleven continuation bytes, or a tenth byte above 1: not a u64.
        assert_eq!(Reader::new(&[0xff; 11]).u64(), Err(Malformed));
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(),
            Err(Malformed)
        );
        // A count larger than the bytes left is refused before anything is allocated for it.
        let mut out = Vec::new();
        put(&mut out, 1_000_000);
        assert_eq!(Reader::new(&out).count(), Err(Malformed));
    }
}
