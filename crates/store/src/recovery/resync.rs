//! After a record fails its checks: is the rest of the segment a torn tail, or damage with valid
//! records behind it, and where is the next valid record?
//!
//! ```text
//! bad record at X (header may or may not decode; E = end of file)
//!   header decodes, X+len < E, record at X+len verifies ─► skip exactly [X, X+len)
//!   last segment, header decodes, X+len = E ─► the last record was torn: cut the tail
//!   last segment, header decodes, X+len > E ─► a torn write, unless the first valid record after
//!                                X starts a chain of valid records ending exactly at E (the length
//!                                field was what got damaged): then skip [X, that record)
//!   otherwise ─► scan forward byte by byte from X+1 for the first offset where a whole record
//!                verifies; found: skip [X, it); none: torn tail (last segment) or damage to the end
//! ```
//!
//! Segments other than the last were synced whole, so a bad record there is always damage and is
//! always scanned past. Only the last segment's rules look at the end of the file, and they give
//! the same answer once the segment is no longer the last (its torn tail cut): a later recovery
//! repeats every skip an earlier one made.
//!
//! Why the header's own length is tried first and trusted where the file ends inside it: message
//! bodies are client bytes, and a client can put a well-formed record (a purge of some queue, say)
//! inside a body. A byte-by-byte scan over such a body would accept it. Trusting a decodable
//! header's extent means a scan only walks into a body whose record header itself was damaged.
//! What a forward scan accepts is a whole record whose CRC32C (over its header fields, lengths
//! included, and its payload) matches: random damage passes that about once in 2^32 tries after
//! the header checks, and the budget below bounds the cost of crafted look-alike headers.

use std::io;

use crate::limits::RESYNC_CHECKSUM_BYTES_MAX;
use crate::record::{RecordHeader, RECORD_HEADER_BYTES};

use super::{check_record, Window};

/// What follows a bad record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterDamage {
    /// A valid record starts here: the bytes before it are skipped and reported.
    ResumeAt(u64),
    /// Nothing after the bad record was ever completed by a commit (last segment only): cut it.
    TornTail,
    /// Damage that no valid record follows, in a segment that was synced whole (or the scan gave
    /// up within its budget): the start-up policy decides.
    ToEnd,
}

/// Outcome of a forward scan.
enum Scan {
    Found(u64),
    NotFound,
    /// More than [`RESYNC_CHECKSUM_BYTES_MAX`] checksummed without finding a valid record.
    GaveUp,
}

/// Decides what follows the bad record at `at` (see the module doc). `is_last`: the bytes from
/// `at` may hold a torn write — the last segment past its known synced length, or the end of a
/// file cut short below it (which looks the same, and is read with the same care; recovery.rs).
pub(super) fn after_damage(window: &mut Window<'_>, at: u64, is_last: bool) -> io::Result<AfterDamage> {
    let file_bytes = window.file_bytes;
    if let Some(claimed_end) = claimed_end(window, at)? {
        if claimed_end < file_bytes && check_record(window, claimed_end, None)?.is_ok() {
            return Ok(AfterDamage::ResumeAt(claimed_end));
        }
        if is_last && claimed_end == file_bytes {
            return Ok(AfterDamage::TornTail);
        }
        if is_last && claimed_end > file_bytes {
            return Ok(match scan(window, at + 1)? {
                Scan::Found(next) if chain_reaches_end(window, next)? => AfterDamage::ResumeAt(next),
                // The usual crash: the last write was cut short. Also when the scan gives up:
                // a torn write of a large body is far likelier than a damaged length field.
                Scan::Found(_) | Scan::NotFound | Scan::GaveUp => AfterDamage::TornTail,
            });
        }
    }
    Ok(match scan(window, at + 1)? {
        Scan::Found(next) => AfterDamage::ResumeAt(next),
        Scan::NotFound if is_last => AfterDamage::TornTail,
        Scan::NotFound | Scan::GaveUp => AfterDamage::ToEnd,
    })
}

/// Where the record at `at` would end if its header is to be believed; `None` if the header does
/// not decode (or the file ends inside it).
fn claimed_end(window: &mut Window<'_>, at: u64) -> io::Result<Option<u64>> {
    let Some(header) = header_at(window, at)? else {
        return Ok(None);
    };
    Ok(Some(at + header.record_bytes()))
}

fn header_at(window: &mut Window<'_>, at: u64) -> io::Result<Option<RecordHeader>> {
    let Some(bytes) = window.bytes(at, RECORD_HEADER_BYTES)? else {
        return Ok(None);
    };
    let mut array = [0; RECORD_HEADER_BYTES];
    array.copy_from_slice(bytes);
    Ok(RecordHeader::decode(&array).ok())
}

/// The first offset from `from` where a whole record verifies.
fn scan(window: &mut Window<'_>, from: u64) -> io::Result<Scan> {
    let file_bytes = window.file_bytes;
    let mut checksummed = 0u64;
    let mut at = from;
    while at + RECORD_HEADER_BYTES as u64 <= file_bytes {
        if let Some(header) = header_at(window, at)? {
            let end = at + header.record_bytes();
            if end <= file_bytes {
                checksummed += header.record_bytes();
                if checksummed > RESYNC_CHECKSUM_BYTES_MAX {
                    return Ok(Scan::GaveUp);
                }
                if check_record(window, at, None)?.is_ok() {
                    return Ok(Scan::Found(at));
                }
            }
        }
        at += 1;
    }
    Ok(Scan::NotFound)
}

/// Whether valid records follow one another from `from` to exactly the end of the file.
fn chain_reaches_end(window: &mut Window<'_>, from: u64) -> io::Result<bool> {
    let mut at = from;
    while at < window.file_bytes {
        match check_record(window, at, None)? {
            Ok(record) => at += record.header.record_bytes(),
            Err(_) => return Ok(false),
        }
    }
    Ok(at == window.file_bytes)
}
