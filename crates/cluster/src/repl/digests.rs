//! What a node knows of its replicated files without reading them: each file's length and
//! CRC32C, kept up to date as the node itself changes the file (as a follower, applying the
//! leader's ops; as a leader, through its replicated storage).
//!
//! A catch-up compares the follower's files with the leader's by CRC32C (`manifest.rs`). Read from
//! disk, that is every byte of both copies: at 100M waiting messages about 7 GB on each side,
//! which three nodes' copies on one machine do not keep in the page cache, and the survivors of
//! a failover took 20–30 s over it before the first confirm. Known here, a file written only by
//! appends costs nothing: its CRC is carried forward over each append.
//!
//! Exact by construction: every change to a replicated file goes through [`crate::repl::apply`]
//! (follower) or [`crate::repl::storage`] (leader, under the hub's lock, in op order), and each
//! tells this map. A write anywhere but at the end, a length change other than to zero, or a
//! failed operation forgets the file: it is read again when next needed. A file learned by
//! reading (the follower's manifest) is known only while the same follower keeps applying.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::repl::manifest::digest;

/// Replicated paths (`NAME`, `messages/NAME`) → (length, CRC32C of those bytes).
#[derive(Debug, Default)]
pub struct FileDigests {
    known: Mutex<HashMap<String, (u64, u32)>>,
}

impl FileDigests {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (u64, u32)>> {
        self.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `path` was created empty (or emptied).
    pub fn created(&self, path: &str) {
        self.lock().insert(path.to_owned(), (0, 0));
    }

    /// `data` was written at `offset` of `path`: carried forward if that was its end.
    pub fn written(&self, path: &str, offset: u64, data: &[u8]) {
        let mut known = self.lock();
        match known.get_mut(path) {
            Some((len, crc)) if *len == offset => {
                *crc = crc32c::crc32c_append(*crc, data);
                *len += data.len() as u64;
            }
            Some(_) => {
                known.remove(path);
            }
            None => {}
        }
    }

    /// `path`'s length was set to `len`.
    pub fn resized(&self, path: &str, len: u64) {
        let mut known = self.lock();
        match known.get(path) {
            _ if len == 0 => {
                known.insert(path.to_owned(), (0, 0));
            }
            Some((had, _)) if *had == len => {}
            _ => {
                known.remove(path);
            }
        }
    }

    /// `path` is gone, or changed in a way not followed here.
    pub fn forget(&self, path: &str) {
        self.lock().remove(path);
    }

    /// `from` was renamed over `to`.
    pub fn renamed(&self, from: &str, to: &str) {
        let mut known = self.lock();
        match known.remove(from) {
            Some(digest) => known.insert(to.to_owned(), digest),
            None => known.remove(to),
        };
    }

    /// The CRC32C of the first `len` bytes of `path` (at `full`): known if the file is that
    /// long, read otherwise.
    pub fn prefix_crc(&self, path: &str, full: &Path, len: u64) -> io::Result<u32> {
        if let Some((known_len, crc)) = self.lock().get(path) {
            if *known_len == len {
                return Ok(*crc);
            }
        }
        Ok(digest(full, len)?.1)
    }

    /// The length and CRC32C of all of `path` (at `full`, `on_disk` bytes long now): known if
    /// the length agrees, else read and known from now on. Only for a caller no change to the
    /// file can race with (the follower, under its applier's lock).
    pub fn whole(&self, path: &str, full: &Path, on_disk: u64) -> io::Result<(u64, u32)> {
        if let Some(&(len, crc)) = self.lock().get(path) {
            if len == on_disk {
                return Ok((len, crc));
            }
        }
        let (len, crc) = digest(full, u64::MAX)?;
        self.lock().insert(path.to_owned(), (len, crc));
        Ok((len, crc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// What is carried forward equals what reading the file gives; changes not at the end are
    /// forgotten and read again.
    #[test]
    fn a_file_written_by_appends_is_known_as_reading_it_would_give() {
        let dir = tempfile::tempdir().unwrap();
        let full = dir.path().join("a.seg");
        let digests = FileDigests::default();
        fs::write(&full, b"").unwrap();
        digests.created("a.seg");
        let mut content = Vec::new();
        for chunk in [&b"hello "[..], b"world", b"!"] {
            digests.written("a.seg", content.len() as u64, chunk);
            content.extend_from_slice(chunk);
        }
        fs::write(&full, &content).unwrap();
        let read = digest(&full, u64::MAX).unwrap();
        assert_eq!(digests.whole("a.seg", &full, 12).unwrap(), read);
        assert_eq!(digests.prefix_crc("a.seg", &full, 12).unwrap(), read.1);
        assert_eq!(digests.prefix_crc("a.seg", &full, 5).unwrap(), crc32c::crc32c(b"hello"), "read");

        // Known wrongly on purpose: a known file of the asked length is not read.
        digests.lock().insert("a.seg".into(), (12, 7));
        assert_eq!(digests.prefix_crc("a.seg", &full, 12).unwrap(), 7);
        digests.written("a.seg", 3, b"x");
        assert_eq!(digests.prefix_crc("a.seg", &full, 12).unwrap(), read.1, "an overwrite is forgotten");

        digests.lock().insert("a.seg".into(), (12, 7));
        digests.resized("a.seg", 10);
        assert!(digests.lock().get("a.seg").is_none(), "cut short: forgotten");
        digests.resized("a.seg", 0);
        assert_eq!(digests.lock().get("a.seg"), Some(&(0, 0)));
        digests.renamed("a.seg", "b.seg");
        let known = |path: &str| digests.lock().get(path).copied();
        assert_eq!((known("a.seg"), known("b.seg")), (None, Some((0, 0))));
        digests.renamed("c.seg", "b.seg");
        assert!(digests.lock().get("b.seg").is_none(), "renamed over by an unknown file");
        assert_eq!(digests.whole("a.seg", &full, 12).unwrap(), read, "unknown: read, then known");
        assert_eq!(digests.lock().get("a.seg"), Some(&read));
    }
}
