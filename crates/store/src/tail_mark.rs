//! The tail mark: the last segment's length and record count as of its last sync, so recovery can
//! tell a torn tail (bytes no sync covered: cut quietly) from synced records cut away (loss,
//! reported). Older segments need no mark: the next segment's header records how long each one
//! was when it was sealed.
//!
//! The mark is written after each sync of the log returns, and is never synced itself: one small
//! write to the page cache per commit, no second `fdatasync` on the commit path. It can only be
//! behind the segment, never ahead of it: it is written after the bytes it names are on disk, so
//! a power cut that loses the mark's last writes leaves an older, smaller claim (or a torn mark,
//! whose checksum fails: no claim at all). A process crash (kill -9) loses nothing from the page
//! cache, so there the mark is exact. Writing it is best effort: a failed write (a full disk) only
//! means the next recovery knows less, and must not fail a commit whose records are durable.

use std::io;
use std::sync::Arc;

use crate::record::{decode_tail_mark, encode_tail_mark, SegmentEnd, TAIL_MARK_BYTES, TAIL_MARK_NAME};
use crate::storage::{Storage, StorageFile};

/// The mark as recovery found it: segment `.0` held `.1`, synced.
pub(crate) type Mark = (u64, SegmentEnd);

/// Reads the mark; `None` if there is none or it does not check (see the module doc).
pub(crate) fn read(storage: &dyn Storage) -> io::Result<Option<Mark>> {
    let file = match storage.open(TAIL_MARK_NAME) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = [0; TAIL_MARK_BYTES];
    match file.read_exact_at(0, &mut bytes) {
        Ok(()) => Ok(decode_tail_mark(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The store's handle on the mark.
#[derive(Debug)]
pub(crate) struct TailMark {
    /// `None` if the file could not be opened or created: the store runs on without a mark.
    file: Option<Box<dyn StorageFile>>,
    /// The segment the mark names now, if any.
    names: Option<u64>,
}

impl TailMark {
    /// Opens the mark file, creating it if missing (best effort, see the module doc). `names`: the
    /// segment the mark on disk names (what recovery read).
    pub(crate) fn open(storage: &Arc<dyn Storage>, names: Option<u64>) -> Self {
        let file = match storage.open(TAIL_MARK_NAME) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => storage.create(TAIL_MARK_NAME).ok(),
            opened => opened.ok(),
        };
        Self { file, names }
    }

    /// Segment `segment` now holds `end`, synced: the sync has returned.
    pub(crate) fn write(&mut self, segment: u64, end: SegmentEnd) {
        if let Some(file) = &self.file {
            // Best effort (module doc): an error leaves an older or torn mark, which claims less.
            let _ = file.write_all_at(0, &encode_tail_mark(segment, end));
            self.names = Some(segment);
        }
    }

    /// Segment `segment` is about to be deleted (compaction): a mark naming it would read as a
    /// segment lost whole. Synced, unlike every other write of the mark: a power cut must not
    /// bring the old mark back once the segment is gone. Rare: the mark names the segment being
    /// appended to, never deleted, except after a recovery that left the last segment damaged
    /// and before the next segment exists.
    pub(crate) fn forget(&mut self, segment: u64) {
        if self.names == Some(segment) {
            if let Some(file) = &self.file {
                let _ = file.write_all_at(0, &encode_tail_mark(segment, SegmentEnd::default()));
                let _ = file.sync();
            }
            self.names = None;
        }
    }
}
