//! The leader's storage: the store's own [`Storage`] with every change sequenced for the
//! followers, and every durability point (`sync`, and create / remove / rename, which are durable
//! on return) waiting until the followers hold it as the confirm rule requires ([`Hub`]).
//!
//! The broker and store do not know they are replicated: a commit returns — and a confirm goes
//! out — only once the majority holds the bytes. Each change also tells the hub's
//! [`crate::repl::FileDigests`] (under the hub's lock, in op order), so a catch-up need not read
//! the files.

use std::fmt;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use hourglass_store::{Storage, StorageFile};

use crate::repl::frame::{FileOp, WRITE_CHUNK_MAX};
use crate::repl::hub::Hub;

/// Wraps the storage of one directory of the data directory (`""` for the top, `"messages/"`).
pub struct ReplicatedStorage {
    inner: Arc<dyn Storage>,
    prefix: &'static str,
    hub: Arc<Hub>,
}

impl ReplicatedStorage {
    pub fn new(inner: Arc<dyn Storage>, prefix: &'static str, hub: Arc<Hub>) -> ReplicatedStorage {
        ReplicatedStorage { inner, prefix, hub }
    }

    fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn wait(&self) -> io::Result<()> {
        self.hub.wait_replicated(self.hub.last_seq());
        Ok(())
    }
}

impl fmt::Debug for ReplicatedStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedStorage").field("prefix", &self.prefix).field("inner", &self.inner).finish()
    }
}

impl Storage for ReplicatedStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let path = self.path(name);
        let local = || {
            let created = self.inner.create(name);
            match created {
                Ok(_) => self.hub.digests.created(&path),
                Err(_) => self.hub.digests.forget(&path),
            }
            created
        };
        let file = self.hub.apply(local, || vec![FileOp::Create { path: path.clone() }])?;
        self.wait()?;
        Ok(Box::new(ReplicatedFile { inner: file, path, hub: self.hub.clone() }))
    }

    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = self.inner.open(name)?;
        Ok(Box::new(ReplicatedFile { inner: file, path: self.path(name), hub: self.hub.clone() }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let local = || {
            self.hub.digests.forget(&self.path(name));
            self.inner.remove(name)
        };
        self.hub.apply(local, || vec![FileOp::Remove { path: self.path(name) }])?;
        self.wait()
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let op = || vec![FileOp::Rename { from: self.path(from), to: self.path(to) }];
        let local = || {
            let renamed = self.inner.rename(from, to);
            match renamed {
                Ok(()) => self.hub.digests.renamed(&self.path(from), &self.path(to)),
                Err(_) => [from, to].iter().for_each(|name| self.hub.digests.forget(&self.path(name))),
            }
            renamed
        };
        self.hub.apply(local, op)?;
        self.wait()
    }
}

struct ReplicatedFile {
    inner: Box<dyn StorageFile>,
    path: String,
    hub: Arc<Hub>,
}

impl fmt::Debug for ReplicatedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedFile").field("path", &self.path).finish()
    }
}

impl StorageFile for ReplicatedFile {
    fn len_bytes(&self) -> io::Result<u64> {
        self.inner.len_bytes()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_exact_at(offset, buf)
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let ops = || {
            data.chunks(WRITE_CHUNK_MAX)
                .enumerate()
                .map(|(i, chunk)| FileOp::Write {
                    path: self.path.clone(),
                    offset: offset + (i * WRITE_CHUNK_MAX) as u64,
                    data: Bytes::copy_from_slice(chunk),
                })
                .collect()
        };
        let local = || {
            let written = self.inner.write_all_at(offset, data);
            match written {
                Ok(()) => self.hub.digests.written(&self.path, offset, data),
                Err(_) => self.hub.digests.forget(&self.path),
            }
            written
        };
        self.hub.apply(local, ops)
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        let ops = || vec![FileOp::SetLen { path: self.path.clone(), len: len_bytes }];
        let local = || {
            let resized = self.inner.set_len(len_bytes);
            match resized {
                Ok(()) => self.hub.digests.resized(&self.path, len_bytes),
                Err(_) => self.hub.digests.forget(&self.path),
            }
            resized
        };
        self.hub.apply(local, ops)
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.sync()?;
        self.hub.wait_replicated(self.hub.last_seq());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_store::MemStorage;

    #[test]
    fn every_change_is_sequenced_and_a_lone_leader_with_min_one_syncs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("messages")).unwrap();
        let hub = Hub::new(dir.path().to_owned(), 1, Some(Default::default()), Arc::default());
        let link = hub.register("b").unwrap();
        let storage = ReplicatedStorage::new(Arc::new(MemStorage::new()), "messages/", hub.clone());
        let file = storage.create("1.seg").unwrap();
        file.write_all_at(0, b"hello").unwrap();
        file.sync().unwrap();
        storage.rename("1.seg", "2.seg").unwrap();
        let ops: Vec<FileOp> = link.ops.try_iter().map(|(_, op)| (*op).clone()).collect();
        assert_eq!(
            ops,
            vec![
                FileOp::Create { path: "messages/1.seg".into() },
                FileOp::Write {
                    path: "messages/1.seg".into(),
                    offset: 0,
                    data: Bytes::from_static(b"hello")
                },
                FileOp::Rename { from: "messages/1.seg".into(), to: "messages/2.seg".into() },
            ]
        );
    }

    /// The leader's files as it writes them through its storage are known to the hub's digests
    /// exactly as reading them would give; a write not at the end is forgotten, and read.
    #[test]
    fn the_leaders_changes_keep_its_digests_exact() {
        let dir = tempfile::tempdir().unwrap();
        let messages = dir.path().join("messages");
        std::fs::create_dir(&messages).unwrap();
        let hub = Hub::new(dir.path().to_owned(), 1, Some(Default::default()), Arc::default());
        let inner = Arc::new(hourglass_store::FsStorage::open(&messages).unwrap());
        let storage = ReplicatedStorage::new(inner, "messages/", hub.clone());
        let file = storage.create("1.seg.tmp").unwrap();
        file.write_all_at(0, b"hello ").unwrap();
        file.write_all_at(6, b"world").unwrap();
        file.sync().unwrap();
        storage.rename("1.seg.tmp", "1.seg").unwrap();
        let full = messages.join("1.seg");
        let read = crate::repl::manifest::digest(&full, u64::MAX).unwrap();
        std::fs::write(&full, b"HELLO world").unwrap();
        assert_eq!(hub.digests.prefix_crc("messages/1.seg", &full, 11).unwrap(), read.1, "known, not read");
        let file = storage.open("1.seg").unwrap();
        file.write_all_at(0, b"J").unwrap();
        let now = crate::repl::manifest::digest(&full, u64::MAX).unwrap();
        assert_eq!(hub.digests.prefix_crc("messages/1.seg", &full, 11).unwrap(), now.1, "rewritten: read");
        storage.remove("1.seg").unwrap();
        assert!(hub.digests.prefix_crc("messages/1.seg", &full, 11).is_err(), "gone, not known");
    }
}
