//! Reading a catalog log's body into whole commits, and telling a torn tail from damage. Pure:
//! bytes in, the records of whole commits (or why the log is damaged) out.
//!
//! ```text
//! record:  body length u32, CRC32C of the body u32, body
//! commit:  its records, then its trailer twice (two copies of one 21-byte record):
//!            body (13 bytes): 4 (commit), sequence u64 (1, 2, ... within this log), records u32
//! ```
//!
//! A commit is one write and one sync, so a crash tears at most the last commit, and a torn
//! write is a prefix of what was written: nothing whole comes after the tear. The rules:
//! - a commit counts only with a valid trailer copy whose sequence follows the last commit's and
//!   whose record count matches the records before it; its records are applied together or not
//!   at all (issue 22: a user deletion's three records applied in part stopped the broker);
//! - one damaged trailer copy is covered by the other (reported as repaired);
//! - a bad record (short, checksum failed, out of sequence) with a valid trailer of a later
//!   commit anywhere after it is **damage**: refused, never read as a torn tail (issue 22: a
//!   flipped bit early in the log dropped every later record and brought back a deleted user);
//! - a bad record with nothing valid after it is a torn tail: the log ends at the last whole
//!   commit.
//!
//! The one case a single flipped bit cannot be told from a tear is a bit in the last commit's
//! second trailer copy at the very end of the file: the first copy is whole, so the commit is
//! kept and the copy rewritten ([`Scanned::rewrite_trailer_at`]).

use crate::record::{u32_at, u64_at};

/// Bytes before a record's body: its length and its checksum.
pub(super) const RECORD_HEADER_BYTES: usize = 8;
/// A trailer's body: kind, sequence, record count.
const TRAILER_BODY_BYTES: usize = 13;
/// One trailer copy, header included.
pub(super) const TRAILER_BYTES: usize = RECORD_HEADER_BYTES + TRAILER_BODY_BYTES;
/// The record kind of a commit trailer (1–3 are the changes, `catalog.rs`).
pub(super) const OP_COMMIT: u8 = 4;

/// A log body read up to its last whole commit.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scanned<'a> {
    /// The change records of every whole commit, in order.
    pub records: Vec<&'a [u8]>,
    /// Where each whole commit's records end in `records` (a salvage applies them commit by
    /// commit).
    pub commit_ends: Vec<usize>,
    /// Whole commits read.
    pub commits: u64,
    /// Where the last whole commit ends (bytes into the body, past the end of the file when its
    /// second trailer copy is to be rewritten); what follows is a torn tail.
    pub whole_bytes: usize,
    /// Trailer copies found damaged and covered by their twin.
    pub repaired_copies: u64,
    /// The last commit's second trailer copy is cut short by the file's end: rewrite it here
    /// (bytes into the body), so that the next commit starts after it.
    pub rewrite_trailer_at: Option<usize>,
}

/// Why a log body is damaged rather than torn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a bad record at byte {at} of the log's body is followed by {commits_after} whole commit(s): damage, not a torn tail ({commits_before} commit(s) before it read)")]
pub struct Damaged {
    /// Where the bad record starts (bytes into the body).
    pub at: usize,
    /// Commits read whole before it.
    pub commits_before: u64,
    /// Valid trailers of later commits found after it.
    pub commits_after: u64,
}

/// Encodes the trailer of commit `sequence` holding `records` records, both copies.
pub(super) fn encode_trailer(sequence: u64, records: u32, out: &mut Vec<u8>) {
    let mut body = [0u8; TRAILER_BODY_BYTES];
    body[0] = OP_COMMIT;
    body[1..9].copy_from_slice(&sequence.to_le_bytes());
    body[9..13].copy_from_slice(&records.to_le_bytes());
    for _ in 0..2 {
        out.extend_from_slice(&(TRAILER_BODY_BYTES as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
}

/// Reads `body` (a log without its header) commit by commit (module doc).
pub(super) fn scan(body: &[u8]) -> Result<Scanned<'_>, Damaged> {
    let (scanned, stopped_at) = whole_commits(body);
    if stopped_at < body.len() {
        let commits_after = trailers_after(body, stopped_at + 1, scanned.commits);
        if commits_after > 0 {
            return Err(Damaged { at: stopped_at, commits_before: scanned.commits, commits_after });
        }
    }
    Ok(scanned)
}

/// The whole commits at the start of `body`, up to the first record that is not part of one,
/// and where that record starts (`body.len()` when there is none).
pub(super) fn whole_commits(body: &[u8]) -> (Scanned<'_>, usize) {
    whole_commits_from(body, 0, 1)
}

/// [`whole_commits`] from byte `at` of `body`, where commit `first_sequence` starts (offsets
/// stay relative to `body`).
pub(super) fn whole_commits_from(body: &[u8], at: usize, first_sequence: u64) -> (Scanned<'_>, usize) {
    let mut scanned = Scanned { whole_bytes: at, ..Scanned::default() };
    let mut pending: Vec<&[u8]> = Vec::new();
    let mut at = at;
    while at < body.len() {
        // Saturating: a sequence read back from the disk (a salvage resumes at one) may be any value.
        let sequence = first_sequence.saturating_add(scanned.commits);
        let expected = Trailer { sequence, records: pending.len() as u32 };
        let commit_at = match next_record(&body[at..]) {
            Some(record) if record.first() != Some(&OP_COMMIT) => {
                pending.push(record);
                at += RECORD_HEADER_BYTES + record.len();
                continue;
            }
            Some(record) if Trailer::decode(record) == Some(expected) => {
                let second = body.get(at + TRAILER_BYTES..).map(trailer_at);
                match second {
                    Some(Some(t)) if t == expected => {}
                    _ if at + 2 * TRAILER_BYTES > body.len() => {
                        scanned.rewrite_trailer_at = Some(at + TRAILER_BYTES)
                    }
                    _ => scanned.repaired_copies += 1,
                }
                at
            }
            // The first copy is bad: its twin may still say the commit is whole.
            _ if body.get(at + TRAILER_BYTES..).and_then(trailer_at) == Some(expected) => {
                scanned.repaired_copies += 1;
                at
            }
            _ => break,
        };
        scanned.records.append(&mut pending);
        scanned.commit_ends.push(scanned.records.len());
        scanned.commits += 1;
        at = commit_at + 2 * TRAILER_BYTES;
        scanned.whole_bytes = at;
    }
    (scanned, at)
}

/// A commit trailer's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Trailer {
    pub sequence: u64,
    pub records: u32,
}

impl Trailer {
    fn decode(record: &[u8]) -> Option<Trailer> {
        (record.len() == TRAILER_BODY_BYTES && record[0] == OP_COMMIT)
            .then(|| Trailer { sequence: u64_at(record, 1), records: u32_at(record, 9) })
    }
}

/// The trailer at the start of `bytes`, if a valid one is there.
pub(super) fn trailer_at(bytes: &[u8]) -> Option<Trailer> {
    next_record(bytes.get(..TRAILER_BYTES)?).and_then(Trailer::decode)
}

/// The body of the record at the start of `bytes`, if it is whole and its checksum matches.
pub(super) fn next_record(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return None;
    }
    let len = u32_at(bytes, 0) as usize;
    let body = bytes.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES.checked_add(len)?)?;
    (crc32c::crc32c(body) == u32_at(bytes, 4)).then_some(body)
}

/// How many distinct later commits (sequence above `after_sequence`) have a valid trailer copy
/// starting at or after `from`: any at all means what came before them was written whole once.
fn trailers_after(body: &[u8], from: usize, after_sequence: u64) -> u64 {
    let sequences: std::collections::BTreeSet<u64> = trailer_copies(body, from)
        .into_iter()
        .map(|(_, t)| t.sequence)
        .filter(|sequence| *sequence > after_sequence)
        .collect();
    sequences.len() as u64
}

/// Every valid trailer copy starting at or after `from`, with where it starts, in order. A
/// trailer has a fixed length and kind, so each offset costs a comparison or two before any
/// checksum is computed.
pub(super) fn trailer_copies(body: &[u8], from: usize) -> Vec<(usize, Trailer)> {
    let mut copies = Vec::new();
    for offset in from..body.len().saturating_sub(TRAILER_BYTES - 1) {
        let window = &body[offset..];
        if u32_at(window, 0) as usize != TRAILER_BODY_BYTES || window[RECORD_HEADER_BYTES] != OP_COMMIT {
            continue;
        }
        if let Some(t) = trailer_at(window) {
            copies.push((offset, t));
        }
    }
    copies
}

/// One log record of `body` as the catalog writes it (length, CRC-32C, body): for tests that
/// build logs by hand.
#[cfg(test)]
pub(super) fn record(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three commits of 3, 1 and 2 records; the offsets where each commit starts.
    fn three_commits() -> (Vec<u8>, Vec<usize>) {
        let mut log = Vec::new();
        let mut starts = Vec::new();
        for (sequence, records) in [(1u64, 3u32), (2, 1), (3, 2)] {
            starts.push(log.len());
            for r in 0..records {
                log.extend(record(format!("\x01change {sequence}.{r}").as_bytes()));
            }
            encode_trailer(sequence, records, &mut log);
        }
        (log, starts)
    }

    /// Whole commits read back with every record, in order.
    #[test]
    fn whole_commits_read_back() {
        let (log, _) = three_commits();
        let scanned = scan(&log).unwrap();
        assert_eq!((scanned.commits, scanned.records.len(), scanned.whole_bytes), (3, 6, log.len()));
        assert_eq!(scanned.records[3], b"\x01change 2.0");
    }

    /// Cut anywhere, the log reads as its whole commits before the cut: a torn commit's records
    /// are never applied in part.
    #[test]
    fn a_cut_anywhere_keeps_only_whole_commits() {
        let (log, starts) = three_commits();
        for cut in 0..log.len() {
            let scanned = scan(&log[..cut]).unwrap();
            let whole = starts.iter().skip(1).chain([&log.len()]).filter(|end| **end <= cut).count();
            // A cut inside the second copy of a trailer keeps that commit (its first copy is whole).
            let in_twin =
                starts.iter().skip(1).chain([&log.len()]).any(|end| cut < *end && cut >= end - TRAILER_BYTES);
            let expected = whole as u64 + u64::from(in_twin);
            assert_eq!(scanned.commits, expected, "cut at {cut}");
            assert_eq!(scanned.rewrite_trailer_at.is_some(), in_twin, "cut at {cut}");
        }
    }

    /// A flipped bit anywhere before the last commit's trailers is damage, never a torn tail;
    /// in a trailer copy it is repaired by the twin.
    #[test]
    fn a_flip_anywhere_is_damage_or_repaired_never_a_silent_cut() {
        let (log, starts) = three_commits();
        let last_trailers = log.len() - 2 * TRAILER_BYTES;
        for at in 0..log.len() {
            let mut flipped = log.clone();
            flipped[at] ^= 0x10;
            match scan(&flipped) {
                Ok(scanned) => {
                    assert_eq!(scanned.commits, 3, "flip at {at}: every commit kept");
                    assert_eq!(scanned.repaired_copies, 1, "flip at {at}");
                }
                Err(damaged) => {
                    assert!(at < last_trailers, "flip at {at} in a trailer copy is repaired");
                    assert!(damaged.at <= at && damaged.at >= starts[damaged.commits_before as usize]);
                }
            }
        }
    }

    /// Garbage after the last whole commit that holds no valid trailer is a torn tail.
    #[test]
    fn garbage_without_a_later_trailer_is_a_torn_tail() {
        let (mut log, _) = three_commits();
        let end = log.len();
        log.extend(record(b"\x01torn change"));
        log.extend_from_slice(&[0xAB; 9]);
        let scanned = scan(&log).unwrap();
        assert_eq!((scanned.commits, scanned.whole_bytes), (3, end));
    }

    /// A trailer whose record count or sequence does not match what precedes it closes no
    /// commit, and since no tear writes one, it is damage: records are never applied under
    /// another commit's trailer.
    #[test]
    fn a_trailer_must_match_its_records_and_sequence() {
        for (sequence, records) in [(1, 2), (2, 1)] {
            let mut log = record(b"\x01a");
            encode_trailer(sequence, records, &mut log);
            let damaged = scan(&log).unwrap_err();
            assert_eq!((damaged.at, damaged.commits_before), (10, 0), "{sequence} {records}");
        }
    }
}
