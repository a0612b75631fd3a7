//! Sequential reads of one segment through a buffer, for both passes of recovery.

use std::io;

use crate::limits::RECOVERY_READ_BYTES;
use crate::storage::StorageFile;

/// Sequential reads through a buffer of [`RECOVERY_READ_BYTES`].
pub(crate) struct Window<'a> {
    file: &'a dyn StorageFile,
    pub(crate) file_bytes: u64,
    buf: Vec<u8>,
    start: u64,
}

impl<'a> Window<'a> {
    pub(crate) fn new(file: &'a dyn StorageFile, file_bytes: u64) -> Self {
        Self { file, file_bytes, buf: Vec::new(), start: 0 }
    }

    /// `len` bytes at `offset`, or `None` if the file ends first.
    pub(crate) fn bytes(&mut self, offset: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let end = offset.saturating_add(len as u64);
        if end > self.file_bytes {
            return Ok(None);
        }
        if offset < self.start || end > self.start + self.buf.len() as u64 {
            let want = (len.max(RECOVERY_READ_BYTES) as u64).min(self.file_bytes - offset);
            self.fill(offset, want as usize, len)?;
        }
        let from = (offset - self.start) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }

    /// Reads `want` bytes at `offset` into the buffer, or at least the `len` asked for: the file
    /// may have become shorter than `file_bytes` (the second pass reads with the lengths the
    /// first found), and a read-ahead past its new end must not fail the records before it.
    fn fill(&mut self, offset: u64, want: usize, len: usize) -> io::Result<()> {
        self.buf.resize(want, 0);
        let mut read = self.file.read_exact_at(offset, &mut self.buf);
        if matches!(&read, Err(e) if e.kind() == io::ErrorKind::UnexpectedEof) && want > len {
            self.buf.truncate(len);
            read = self.file.read_exact_at(offset, &mut self.buf);
        }
        if read.is_err() {
            // Never serve what a failed read left in the buffer.
            self.buf.clear();
        }
        self.start = offset;
        read
    }
}
