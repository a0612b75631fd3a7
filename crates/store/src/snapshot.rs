//! Small files replaced atomically, for durable definitions (vhosts, exchanges, queues, bindings,
//! users, policies): the broker encodes them as one opaque payload; this module only makes the
//! replacement atomic and detects damage.
//!
//! `write_snapshot` writes `NAME.tmp`, syncs it, and renames it over `NAME` (the storage syncs the
//! directory), so a reader sees the old snapshot or the new one, never a mix.
//!
//! ```text
//! 0..8   magic "HGLSSNAP"
//! 8..12  container format version (FORMAT_VERSION)
//! 12..16 schema version: the caller's, for the payload's own layout
//! 16..24 payload bytes
//! 24..28 CRC32C of bytes 0..24 and the payload
//! 28..   payload
//! ```

use std::io;

use bytes::Bytes;

use crate::limits::SNAPSHOT_BYTES_MAX;
use crate::record::{u32_at, FORMAT_VERSION, SEGMENT_SUFFIX};
use crate::storage::Storage;

const SNAPSHOT_MAGIC: [u8; 8] = *b"HGLSSNAP";
const SNAPSHOT_HEADER_BYTES: usize = 28;
const TEMP_SUFFIX: &str = ".tmp";

/// A snapshot read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The caller's schema version, as written.
    pub schema_version: u32,
    pub payload: Bytes,
}

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot name {0:?} is reserved (it must not end in .seg or .tmp)")]
    ReservedName(String),
    #[error("snapshot payload is {bytes} bytes; the limit is {SNAPSHOT_BYTES_MAX}")]
    TooLarge { bytes: u64 },
    #[error("storage I/O failed while {doing}: {source}")]
    Io {
        doing: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("snapshot {name:?} is corrupt: {reason}")]
    Corrupt { name: String, reason: &'static str },
    #[error("snapshot {name:?} has format version {version}; this build reads {FORMAT_VERSION}")]
    UnsupportedVersion { name: String, version: u32 },
}

/// Atomically replaces snapshot `name` with `payload`; durable on return.
pub fn write_snapshot(
    storage: &dyn Storage,
    name: &str,
    schema_version: u32,
    payload: &[u8],
) -> Result<(), SnapshotError> {
    write_snapshot_parts(storage, name, schema_version, &[payload], SNAPSHOT_BYTES_MAX)
}

/// [`write_snapshot`] of the payload `parts` make one after another, without joining them
/// first (a checkpoint's parts are up to hundreds of megabytes), up to `limit` bytes.
pub(crate) fn write_snapshot_parts(
    storage: &dyn Storage,
    name: &str,
    schema_version: u32,
    parts: &[&[u8]],
    limit: u64,
) -> Result<(), SnapshotError> {
    check_name(name)?;
    let payload_bytes: u64 = parts.iter().map(|part| part.len() as u64).sum();
    if payload_bytes > limit {
        return Err(SnapshotError::TooLarge { bytes: payload_bytes });
    }
    let mut header = Vec::with_capacity(SNAPSHOT_HEADER_BYTES);
    header.extend_from_slice(&SNAPSHOT_MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&schema_version.to_le_bytes());
    header.extend_from_slice(&payload_bytes.to_le_bytes());
    let crc = parts.iter().fold(crc32c::crc32c(&header), |crc, part| crc32c::crc32c_append(crc, part));
    header.extend_from_slice(&crc.to_le_bytes());
    let mut all = Vec::with_capacity(parts.len() + 1);
    all.push(header.as_slice());
    all.extend_from_slice(parts);
    replace_atomically_parts(storage, name, &all)
        .map_err(|(doing, source)| SnapshotError::Io { doing, source })
}

/// Makes file `name` hold exactly `bytes`, durably and all at once: written and synced under a
/// temp name, then renamed over it. On failure, what was being done and why.
pub(crate) fn replace_atomically(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
) -> Result<(), (&'static str, io::Error)> {
    replace_atomically_parts(storage, name, &[bytes])
}

/// [`replace_atomically`] with the bytes `parts` make one after another.
fn replace_atomically_parts(
    storage: &dyn Storage,
    name: &str,
    parts: &[&[u8]],
) -> Result<(), (&'static str, io::Error)> {
    let temp = format!("{name}{TEMP_SUFFIX}");
    // A temp file left by a crash mid-write is stale: the rename never happened.
    match storage.remove(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(("removing a stale temp file", e)),
    }
    let file = storage.create(&temp).map_err(|e| ("creating a temp file", e))?;
    let mut offset = 0;
    for part in parts {
        file.write_all_at(offset, part).map_err(|e| ("writing a temp file", e))?;
        offset += part.len() as u64;
    }
    file.sync().map_err(|e| ("syncing a temp file", e))?;
    drop(file);
    storage.rename(&temp, name).map_err(|e| ("renaming a file into place", e))
}

/// Reads snapshot `name`; `None` if it was never written.
pub fn read_snapshot(storage: &dyn Storage, name: &str) -> Result<Option<Snapshot>, SnapshotError> {
    read_snapshot_up_to(storage, name, SNAPSHOT_BYTES_MAX)
}

/// [`read_snapshot`] of a payload of up to `limit` bytes.
pub(crate) fn read_snapshot_up_to(
    storage: &dyn Storage,
    name: &str,
    limit: u64,
) -> Result<Option<Snapshot>, SnapshotError> {
    check_name(name)?;
    let file = match storage.open(name) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("opening a snapshot")(e)),
    };
    let corrupt = |reason| SnapshotError::Corrupt { name: name.to_owned(), reason };
    let file_bytes = file.len_bytes().map_err(io_err("sizing a snapshot"))?;
    if file_bytes < SNAPSHOT_HEADER_BYTES as u64 {
        return Err(corrupt("shorter than its header"));
    }
    let mut header = [0; SNAPSHOT_HEADER_BYTES];
    file.read_exact_at(0, &mut header).map_err(io_err("reading a snapshot"))?;
    if header[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt("bad magic"));
    }
    let mut len = [0; 8];
    len.copy_from_slice(&header[16..24]);
    let payload_bytes = u64::from_le_bytes(len);
    if payload_bytes > limit || payload_bytes != file_bytes - SNAPSHOT_HEADER_BYTES as u64 {
        return Err(corrupt("payload length does not match the file"));
    }
    // Fits in usize: at most `limit`, checked above.
    let mut payload = vec![0; payload_bytes as usize];
    file.read_exact_at(SNAPSHOT_HEADER_BYTES as u64, &mut payload).map_err(io_err("reading a snapshot"))?;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[..24]), &payload);
    if crc != u32_at(&header, 24) {
        return Err(corrupt("checksum mismatch"));
    }
    let version = u32_at(&header, 8);
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion { name: name.to_owned(), version });
    }
    Ok(Some(Snapshot { schema_version: u32_at(&header, 12), payload: Bytes::from(payload) }))
}

fn check_name(name: &str) -> Result<(), SnapshotError> {
    if name.ends_with(SEGMENT_SUFFIX) || name.ends_with(TEMP_SUFFIX) {
        return Err(SnapshotError::ReservedName(name.to_owned()));
    }
    Ok(())
}

fn io_err(doing: &'static str) -> impl Fn(io::Error) -> SnapshotError {
    move |source| SnapshotError::Io { doing, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Crash, MemStorage};

    /// A written snapshot reads back with its schema version; a missing one reads as `None`.
    #[test]
    fn snapshot_roundtrips() {
        let storage = MemStorage::new();
        assert_eq!(read_snapshot(&storage, "definitions.snap").unwrap(), None);
        write_snapshot(&storage, "definitions.snap", 3, b"exchanges...").unwrap();
        let snap = read_snapshot(&storage, "definitions.snap").unwrap().unwrap();
        assert_eq!(snap.schema_version, 3);
        assert_eq!(&snap.payload[..], b"exchanges...");
    }

    /// At every sync point of a replacement, a crash leaves the old snapshot or the new one whole.
    #[test]
    fn crash_during_replacement_leaves_old_or_new() {
        let storage = MemStorage::new();
        write_snapshot(&storage, "d.snap", 1, b"old").unwrap();
        storage.record_sync_points();
        write_snapshot(&storage, "d.snap", 1, b"new!").unwrap();
        let mut images = storage.take_images();
        images.push(storage.image());
        for image in images {
            for crash in [Crash::LoseUnsynced, Crash::KeepUnsynced, Crash::Torn { bytes: 5, garbled: true }] {
                let after = image.crash(crash);
                let snap = read_snapshot(&after, "d.snap").unwrap().unwrap();
                assert!(snap.payload == "old" || snap.payload == "new!", "{snap:?}");
                // And the next write succeeds over any leftover temp file.
                write_snapshot(&after, "d.snap", 1, b"next").unwrap();
            }
        }
    }

    /// A flipped byte is reported as corruption, never returned as data.
    #[test]
    fn damaged_snapshot_is_reported() {
        let storage = MemStorage::new();
        write_snapshot(&storage, "d.snap", 1, b"payload").unwrap();
        let file = storage.open("d.snap").unwrap();
        file.write_all_at(30, b"X").unwrap();
        assert!(matches!(read_snapshot(&storage, "d.snap"), Err(SnapshotError::Corrupt { .. })));
        assert!(matches!(write_snapshot(&storage, "x.seg", 1, b""), Err(SnapshotError::ReservedName(_))));
    }
}
