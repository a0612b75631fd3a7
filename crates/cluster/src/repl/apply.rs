//! A follower's side of the file operations: applies each op to its copy of the data directory,
//! and makes what it applied durable before it is acknowledged.
//!
//! Ops are applied tolerantly where a catch-up may have got ahead of them (a remove of a file
//! already gone, a write to a file not yet there): the result is the leader's directory either way.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::repl::digests::FileDigests;
use crate::repl::frame::{FileDigest, FileOp};
use crate::repl::manifest::{local_manifest, valid_path, MESSAGES_DIR};

/// Applies ops to the data directory `dir`.
pub struct Applier {
    dir: PathBuf,
    open: HashMap<String, File>,
    dirty: HashSet<String>,
    /// Told of every change applied (`digests.rs`).
    digests: Arc<FileDigests>,
}

impl Applier {
    pub fn new(dir: PathBuf, digests: Arc<FileDigests>) -> io::Result<Applier> {
        fs::create_dir_all(dir.join(MESSAGES_DIR))?;
        Ok(Applier { dir, open: HashMap::new(), dirty: HashSet::new(), digests })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every replicated file here, with its length and CRC32C (known ones not read again).
    pub fn manifest(&self) -> io::Result<Vec<FileDigest>> {
        local_manifest(&self.dir, &self.digests)
    }

    /// Applies one op and tells the digests what it changed (a failure: forgets the file).
    pub fn apply(&mut self, op: &FileOp) -> io::Result<()> {
        let applied = self.apply_to_files(op);
        let digests = &self.digests;
        match (op, &applied) {
            (FileOp::Create { path }, Ok(())) => digests.created(path),
            (FileOp::Write { path, offset, data }, Ok(())) => digests.written(path, *offset, data),
            (FileOp::SetLen { path, len }, Ok(())) => digests.resized(path, *len),
            (FileOp::Rename { from, to }, Ok(())) => digests.renamed(from, to),
            (FileOp::Remove { path }, _) | (FileOp::Create { path }, _) => digests.forget(path),
            (FileOp::Write { path, .. } | FileOp::SetLen { path, .. }, _) => digests.forget(path),
            (FileOp::Rename { from, to }, _) => [from, to].iter().for_each(|path| digests.forget(path)),
        }
        applied
    }

    fn full(&self, path: &str) -> io::Result<PathBuf> {
        if !valid_path(path) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("replicated path {path:?} refused"),
            ));
        }
        Ok(self.dir.join(path))
    }

    fn file(&mut self, path: &str) -> io::Result<&File> {
        if !self.open.contains_key(path) {
            let full = self.full(path)?;
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&full)?;
            self.open.insert(path.to_owned(), file);
        }
        Ok(&self.open[path])
    }

    /// Applies one op to the files (not yet durable: see [`Applier::sync`]).
    fn apply_to_files(&mut self, op: &FileOp) -> io::Result<()> {
        match op {
            FileOp::Create { path } => {
                self.open.remove(path);
                let full = self.full(path)?;
                let file =
                    OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&full)?;
                file.sync_all()?;
                self.open.insert(path.clone(), file);
                sync_dir_of(&full)
            }
            FileOp::Write { path, offset, data } => {
                self.file(path)?.write_all_at(data, *offset)?;
                self.dirty.insert(path.clone());
                Ok(())
            }
            FileOp::SetLen { path, len } => {
                self.file(path)?.set_len(*len)?;
                self.dirty.insert(path.clone());
                Ok(())
            }
            FileOp::Remove { path } => {
                self.forget(path);
                let full = self.full(path)?;
                match fs::remove_file(&full) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
                sync_dir_of(&full)
            }
            FileOp::Rename { from, to } => {
                self.sync()?;
                self.forget(from);
                self.forget(to);
                let (full_from, full_to) = (self.full(from)?, self.full(to)?);
                match fs::rename(&full_from, &full_to) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
                sync_dir_of(&full_to)
            }
        }
    }

    fn forget(&mut self, path: &str) {
        self.open.remove(path);
        self.dirty.remove(path);
    }

    /// Makes every applied write durable (`fdatasync` of each file written since the last call).
    pub fn sync(&mut self) -> io::Result<()> {
        for path in std::mem::take(&mut self.dirty) {
            if let Some(file) = self.open.get(&path) {
                file.sync_data()?;
            }
        }
        Ok(())
    }

    /// Closes every file (before the node opens the directory as a broker).
    pub fn close(&mut self) -> io::Result<()> {
        self.sync()?;
        self.open.clear();
        Ok(())
    }
}

fn sync_dir_of(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn ops_rebuild_the_leaders_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut applier = Applier::new(dir.path().to_owned(), Arc::default()).unwrap();
        let ops = [
            FileOp::Create { path: "messages/1.seg".into() },
            FileOp::Write {
                path: "messages/1.seg".into(),
                offset: 0,
                data: Bytes::from_static(b"hello world"),
            },
            FileOp::SetLen { path: "messages/1.seg".into(), len: 5 },
            FileOp::Write {
                path: "definitions.snap.tmp".into(),
                offset: 0,
                data: Bytes::from_static(b"defs"),
            },
            FileOp::Rename { from: "definitions.snap.tmp".into(), to: "definitions.snap".into() },
            FileOp::Remove { path: "messages/9.seg".into() },
        ];
        for op in &ops {
            applier.apply(op).unwrap();
        }
        applier.sync().unwrap();
        assert_eq!(fs::read(dir.path().join("messages/1.seg")).unwrap(), b"hello");
        assert_eq!(fs::read(dir.path().join("definitions.snap")).unwrap(), b"defs");
        assert!(!dir.path().join("definitions.snap.tmp").exists());
    }

    #[test]
    fn paths_outside_the_data_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut applier = Applier::new(dir.path().join("data"), Arc::default()).unwrap();
        let err = applier.apply(&FileOp::Create { path: "../escaped".into() }).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(!dir.path().join("escaped").exists());
    }

    /// After a follower's ops (appends, a catch-up's replace, a rename over, a remove) its
    /// manifest is what reading every file gives, without reading the files it wrote.
    #[test]
    fn a_followers_manifest_comes_from_what_it_applied() {
        let dir = tempfile::tempdir().unwrap();
        let digests = Arc::new(FileDigests::default());
        let mut applier = Applier::new(dir.path().to_owned(), digests).unwrap();
        let write = |path: &str, offset: u64, data: &'static [u8]| FileOp::Write {
            path: path.into(),
            offset,
            data: Bytes::from_static(data),
        };
        let ops = [
            FileOp::Create { path: "messages/1.seg".into() },
            write("messages/1.seg", 0, b"hello "),
            write("messages/1.seg", 6, b"world"),
            FileOp::SetLen { path: "messages/2.seg".into(), len: 0 },
            write("messages/2.seg", 0, b"caught up"),
            write("definitions.snap.tmp", 0, b"defs"),
            FileOp::Rename { from: "definitions.snap.tmp".into(), to: "definitions.snap".into() },
            FileOp::Create { path: "messages/3.seg".into() },
            FileOp::Remove { path: "messages/3.seg".into() },
        ];
        for op in &ops {
            applier.apply(op).unwrap();
        }
        applier.sync().unwrap();
        let read = local_manifest(dir.path(), &FileDigests::default()).unwrap();
        assert_eq!(applier.manifest().unwrap(), read);
        assert_eq!(read.len(), 3);
        // Known files are not read again: bytes changed behind the applier's back (same length)
        // do not show.
        fs::write(dir.path().join("messages/1.seg"), b"HELLO world").unwrap();
        assert_eq!(applier.manifest().unwrap(), read);
    }
}
