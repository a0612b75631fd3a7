//! What recovery knows of each segment's length at a sync, before it reads any record: the
//! `SegmentEnd` a segment's header records for the segment before it (which was synced whole
//! before it was created), and the tail mark for the segment the log last synced (`tail_mark.rs`).
//! Recovery reads every byte below such a length as synced: a bad record there is damage, never a
//! torn tail, and bytes missing up to it are records lost.
//!
//! What it cannot know: the length of a segment whose next segment was compacted away, or was
//! written by an earlier build (zero in the header), and the last segment's when the tail mark is
//! missing, torn, or older than its last syncs (a power cut before the kernel wrote it back). For
//! those the rules without a known length apply (docs/storage.md "Recovery rules").

use std::collections::BTreeMap;
use std::io;

use crate::record::{check_segment_header, SegmentEnd, SEGMENT_HEADER_BYTES};
use crate::storage::{Storage, StorageFile};
use crate::tail_mark::{self, Mark};

/// Each segment's synced length and records, where known.
pub(super) struct Claims {
    by_segment: BTreeMap<u64, SegmentEnd>,
    mark: Option<Mark>,
}

impl Claims {
    /// Reads the header of every segment in `files` (ascending) and the tail mark. A header that
    /// does not check claims nothing (recovery reports it when it reads the segment).
    pub(super) fn gather(storage: &dyn Storage, files: &[(u64, Box<dyn StorageFile>)]) -> io::Result<Self> {
        let mut by_segment = BTreeMap::new();
        for (seq, file) in files {
            let mut header = [0; SEGMENT_HEADER_BYTES];
            match file.read_exact_at(0, &mut header) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => continue,
                Err(e) => return Err(e),
            }
            let Some(previous) = seq.checked_sub(1) else { continue };
            if let Ok(Some(end)) = check_segment_header(&header, *seq) {
                by_segment.insert(previous, end);
            }
        }
        let mark = tail_mark::read(storage)?;
        if let Some((segment, end)) = mark {
            // A header's record is the segment's whole length, sealed; a mark may be older.
            by_segment.entry(segment).or_insert(end);
        }
        Ok(Self { by_segment, mark })
    }

    /// Segment `seq`'s length and records at a sync, if known.
    pub(super) fn of(&self, seq: u64) -> Option<SegmentEnd> {
        self.by_segment.get(&seq).copied()
    }

    /// The segment the tail mark names, with what it held, if it is past every segment on disk
    /// (`last`): it was synced, and later deleted whole.
    pub(super) fn missing_last_segment(&self, last: Option<u64>) -> Option<Mark> {
        self.mark.filter(|(segment, _)| last.is_none_or(|last| *segment > last))
    }

    /// The segment the tail mark names, if any.
    pub(super) fn tail_mark_names(&self) -> Option<u64> {
        self.mark.map(|(segment, _)| segment)
    }
}
